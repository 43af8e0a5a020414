//! A simulated UCX: processes, workers, endpoints, tag matching and Active Messages, in one
//! deterministic, single-threaded value. Time is simulated ([`Fabric::advance`]).
//!
//! It follows UCX where tagspace's behaviour depends on it:
//! * matching is per worker, in send order, with UCX's rule and structure ([`TagMatcher`]);
//! * a tag receive does not say which endpoint a message came on; an Active Message does, as
//!   UCX's `reply_ep`;
//! * eager messages (up to [`RNDV_THRESHOLD`] bytes) complete at the sender when sent;
//!   rendezvous messages complete when the receiver matches them, so they can fail if the peer
//!   dies first;
//! * AM handler ids are per worker and setting one twice silently replaces the first, as
//!   `ucp_worker_set_am_recv_handler` does (counted in [`WorkerStats::am_overwrites`]); an AM
//!   with no handler is dropped;
//! * endpoint errors (peer failure, remote close) reach the endpoint's worker as events and fail
//!   operations on that endpoint only.

use crate::matching::TagMatcher;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;

/// Messages larger than this use rendezvous.
pub const RNDV_THRESHOLD: usize = 8192;

/// A simulated OS process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcessId(pub usize);
/// A worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkerId(pub usize);
/// An endpoint (one side of a connection).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EpId(pub usize);
/// A posted tag receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecvId(pub u64);
/// A send in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SendId(pub u64);

/// Why a simulated UCX operation failed (UCX's status names in parentheses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FabricError {
    /// The peer process died (`UCS_ERR_ENDPOINT_TIMEOUT` / `UCS_ERR_CONNECTION_RESET`).
    PeerFailed,
    /// The endpoint was closed, locally or by the peer (`UCS_ERR_CANCELED`).
    EndpointClosed,
    /// The worker's process is dead.
    WorkerDead,
    /// No such endpoint or worker.
    Invalid,
}

impl fmt::Display for FabricError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FabricError::PeerFailed => "peer failed (connection reset)",
            FabricError::EndpointClosed => "endpoint closed",
            FabricError::WorkerDead => "worker's process is dead",
            FabricError::Invalid => "no such endpoint or worker",
        })
    }
}

impl std::error::Error for FabricError {}

/// Something a worker should react to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkerEvent {
    /// A peer connected; this is our side of the new connection.
    Accepted(EpId),
    /// An endpoint failed or was closed by the peer.
    EndpointError(EpId, FabricError),
}

/// A send or receive that finished ([`Fabric::completed`]), as UCX's completion callback
/// reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Completed {
    /// [`Fabric::send_take`] has its result.
    Send(SendId),
    /// [`Fabric::recv_take`] has its result.
    Recv(RecvId),
}

/// A received tag message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// The sender's tag.
    pub tag: u64,
    /// The payload.
    pub data: Vec<u8>,
}

/// A received Active Message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AmMessage {
    /// Handler id it was sent to.
    pub id: u16,
    /// The payload.
    pub data: Vec<u8>,
    /// Our endpoint back to the sender (UCX's `reply_ep`).
    pub reply_ep: EpId,
}

/// Counters of one worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// AM handlers replaced by a second registration of the same id.
    pub am_overwrites: u64,
    /// Active Messages dropped for want of a handler.
    pub am_dropped: u64,
}

#[derive(Debug)]
struct TagMsg {
    data: Vec<u8>,
    /// Rendezvous sends complete when matched.
    send: Option<SendId>,
}

#[derive(Debug)]
struct Worker {
    process: ProcessId,
    matcher: TagMatcher<RecvId, TagMsg>,
    done_recvs: HashMap<RecvId, Result<Received, FabricError>>,
    am_handlers: HashSet<u16>,
    am_queue: VecDeque<AmMessage>,
    events: VecDeque<WorkerEvent>,
    /// Sends and receives finished since the worker last looked ([`Fabric::completed`]).
    completed: VecDeque<Completed>,
    stats: WorkerStats,
}

#[derive(Debug)]
struct Endpoint {
    worker: WorkerId,
    remote_worker: WorkerId,
    remote_ep: EpId,
    state: Result<(), FabricError>,
    /// With [`Fabric::set_hold`]: tag messages sent on this endpoint and not yet delivered, in
    /// order (UCX keeps one endpoint's tag messages in order).
    tag_wire: VecDeque<(u64, TagMsg)>,
    /// Likewise its Active Messages (in order among themselves, not against the tags).
    am_wire: VecDeque<(u16, Vec<u8>)>,
}

/// One of an endpoint's two in-order lanes (see [`Fabric::set_hold`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    /// Tag messages.
    Tag,
    /// Active Messages.
    Am,
}

#[derive(Debug)]
enum SendState {
    Pending { ep: EpId },
    Done(Result<(), FabricError>),
}

/// The whole simulated machine.
#[derive(Debug, Default)]
pub struct Fabric {
    now_ms: u64,
    dead: HashSet<ProcessId>,
    workers: Vec<Worker>,
    eps: Vec<Endpoint>,
    sends: HashMap<SendId, SendState>,
    next_id: u64,
    hold: bool,
    /// Pairs of processes the network between is cut ([`Fabric::partition`]), lower first.
    cut: HashSet<(ProcessId, ProcessId)>,
}

impl Fabric {
    /// An empty fabric at time 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Simulated milliseconds since start.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// Moves simulated time forward.
    pub fn advance(&mut self, ms: u64) {
        self.now_ms += ms;
    }

    fn next(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// A new worker in `process`.
    pub fn new_worker(&mut self, process: ProcessId) -> WorkerId {
        self.workers.push(Worker {
            process,
            matcher: TagMatcher::new(),
            done_recvs: HashMap::new(),
            completed: VecDeque::new(),
            am_handlers: HashSet::new(),
            am_queue: VecDeque::new(),
            events: VecDeque::new(),
            stats: WorkerStats::default(),
        });
        WorkerId(self.workers.len() - 1)
    }

    fn worker(&mut self, w: WorkerId) -> Result<&mut Worker, FabricError> {
        let dead = self
            .workers
            .get(w.0)
            .map(|x| self.dead.contains(&x.process));
        match dead {
            None => Err(FabricError::Invalid),
            Some(true) => Err(FabricError::WorkerDead),
            Some(false) => Ok(&mut self.workers[w.0]),
        }
    }

    /// The process a worker belongs to.
    pub fn process_of(&self, w: WorkerId) -> ProcessId {
        self.workers[w.0].process
    }

    /// Whether a process is alive.
    pub fn is_alive(&self, p: ProcessId) -> bool {
        !self.dead.contains(&p)
    }

    /// Connects `from` to `to`: our endpoint is returned, and `to` gets
    /// [`WorkerEvent::Accepted`] with its side.
    pub fn connect(&mut self, from: WorkerId, to: WorkerId) -> Result<EpId, FabricError> {
        self.worker(from)?;
        self.worker(to).map_err(|_| FabricError::PeerFailed)?;
        if self.is_cut(self.process_of(from), self.process_of(to)) {
            return Err(FabricError::PeerFailed);
        }
        let (a, b) = (EpId(self.eps.len()), EpId(self.eps.len() + 1));
        self.eps.push(Endpoint {
            worker: from,
            remote_worker: to,
            remote_ep: b,
            state: Ok(()),
            tag_wire: VecDeque::new(),
            am_wire: VecDeque::new(),
        });
        self.eps.push(Endpoint {
            worker: to,
            remote_worker: from,
            remote_ep: a,
            state: Ok(()),
            tag_wire: VecDeque::new(),
            am_wire: VecDeque::new(),
        });
        self.workers[to.0]
            .events
            .push_back(WorkerEvent::Accepted(b));
        Ok(a)
    }

    fn usable(&self, ep: EpId) -> Result<&Endpoint, FabricError> {
        let e = self.eps.get(ep.0).ok_or(FabricError::Invalid)?;
        if self.dead.contains(&self.workers[e.worker.0].process) {
            return Err(FabricError::WorkerDead);
        }
        e.state?;
        Ok(e)
    }

    /// The worker at the other end of an endpoint.
    pub fn remote_worker(&self, ep: EpId) -> Option<WorkerId> {
        self.eps.get(ep.0).map(|e| e.remote_worker)
    }

    /// Sends a tagged message; collect its outcome with [`Fabric::send_take`].
    pub fn tag_send(&mut self, ep: EpId, tag: u64, data: &[u8]) -> Result<SendId, FabricError> {
        let (dest, from) = {
            let e = self.usable(ep)?;
            (e.remote_worker, e.worker)
        };
        let id = SendId(self.next());
        let rndv = data.len() > RNDV_THRESHOLD;
        let msg = TagMsg {
            data: data.to_vec(),
            send: rndv.then_some(id),
        };
        self.sends.insert(
            id,
            if rndv {
                SendState::Pending { ep }
            } else {
                SendState::Done(Ok(()))
            },
        );
        if !rndv {
            self.workers[from.0]
                .completed
                .push_back(Completed::Send(id));
        }
        if self.hold {
            self.eps[ep.0].tag_wire.push_back((tag, msg));
        } else {
            self.arrive(dest, tag, msg);
        }
        Ok(id)
    }

    fn arrive(&mut self, dest: WorkerId, tag: u64, msg: TagMsg) {
        if self.dead.contains(&self.workers[dest.0].process) {
            return;
        }
        let w = &mut self.workers[dest.0];
        if let Some((recv, msg)) = w.matcher.arrive(tag, msg) {
            w.done_recvs.insert(
                recv,
                Ok(Received {
                    tag,
                    data: msg.data,
                }),
            );
            w.completed.push_back(Completed::Recv(recv));
            self.complete_send(msg.send, Ok(()));
        }
    }

    /// Holds every message in flight until [`deliver`](Self::deliver) moves it (`true`), or
    /// delivers at once as sent (`false`, the default; held messages are delivered first).
    /// Held, each endpoint keeps its tag messages in order and its Active Messages in order,
    /// but nothing orders the two lanes against each other, nor one endpoint against another —
    /// UCX's guarantees, and no more. When an endpoint is closed, what its peer still had in
    /// flight toward it is lost, and what it sent itself still arrives (UCX flushes on close);
    /// a killed process's messages in flight are lost, as is anything sent to it.
    pub fn set_hold(&mut self, on: bool) {
        self.hold = on;
        if !on {
            self.deliver_all();
        }
    }

    /// The lanes with a message held in flight, in endpoint order.
    pub fn in_flight(&self) -> Vec<(EpId, Lane)> {
        let mut v = Vec::new();
        for (i, e) in self.eps.iter().enumerate() {
            if !e.tag_wire.is_empty() {
                v.push((EpId(i), Lane::Tag));
            }
            if !e.am_wire.is_empty() {
                v.push((EpId(i), Lane::Am));
            }
        }
        v
    }

    /// Delivers the oldest message held on `ep`'s `lane`; false if there was none.
    pub fn deliver(&mut self, ep: EpId, lane: Lane) -> bool {
        let Some(e) = self.eps.get_mut(ep.0) else {
            return false;
        };
        let (dest, reply_ep) = (e.remote_worker, e.remote_ep);
        match lane {
            Lane::Tag => match e.tag_wire.pop_front() {
                Some((tag, msg)) => self.arrive(dest, tag, msg),
                None => return false,
            },
            Lane::Am => match e.am_wire.pop_front() {
                Some((id, data)) => self.am_arrive(dest, id, data, reply_ep),
                None => return false,
            },
        }
        true
    }

    /// Delivers everything held, lane by lane.
    pub fn deliver_all(&mut self) {
        for (ep, lane) in self.in_flight() {
            while self.deliver(ep, lane) {}
        }
    }

    /// `None` while pending (or already taken); then how the send ended. Taking it forgets
    /// the send, so finished sends do not pile up.
    pub fn send_take(&mut self, id: SendId) -> Option<Result<(), FabricError>> {
        match self.sends.get(&id)? {
            SendState::Pending { .. } => None,
            SendState::Done(r) => {
                let r = *r;
                self.sends.remove(&id);
                Some(r)
            }
        }
    }

    /// A pending send ends with `r`; its worker hears of it.
    fn complete_send(&mut self, send: Option<SendId>, r: Result<(), FabricError>) {
        let Some(s) = send else {
            return;
        };
        if let Some(SendState::Pending { ep }) = self.sends.get(&s) {
            let w = self.eps[ep.0].worker;
            self.workers[w.0].completed.push_back(Completed::Send(s));
            self.sends.insert(s, SendState::Done(r));
        }
    }

    /// Every send still pending on `ep` ends with `why`.
    fn fail_sends(&mut self, ep: EpId, why: FabricError) {
        let on_ep: Vec<SendId> = (self.sends.iter())
            .filter(|(_, s)| matches!(s, SendState::Pending { ep: p } if *p == ep))
            .map(|(&id, _)| id)
            .collect();
        for id in on_ep {
            self.complete_send(Some(id), Err(why));
        }
    }

    /// Whether worker `w` has a finished send or receive not taken yet ([`completed`]).
    ///
    /// [`completed`]: Self::completed
    pub fn has_completed(&self, w: WorkerId) -> bool {
        self.workers
            .get(w.0)
            .is_some_and(|x| !x.completed.is_empty())
    }

    /// Whether worker `w` has anything its owner has not looked at yet: an event, an Active
    /// Message, or a finished operation (a simulation is quiet when no worker has, and nothing
    /// is held in flight).
    pub fn has_work(&self, w: WorkerId) -> bool {
        self.workers.get(w.0).is_some_and(|x| {
            !x.completed.is_empty() || !x.events.is_empty() || !x.am_queue.is_empty()
        })
    }

    /// The sends and receives of worker `w` finished since the last call, oldest first.
    pub fn completed(&mut self, w: WorkerId) -> Option<Completed> {
        self.worker(w).ok()?.completed.pop_front()
    }

    /// Posts a tag receive on a worker.
    pub fn tag_recv(&mut self, w: WorkerId, tag: u64, mask: u64) -> Result<RecvId, FabricError> {
        let id = RecvId(self.next());
        let worker = self.worker(w)?;
        if let Some((t, msg)) = worker.matcher.post(tag, mask, id) {
            worker.done_recvs.insert(
                id,
                Ok(Received {
                    tag: t,
                    data: msg.data,
                }),
            );
            worker.completed.push_back(Completed::Recv(id));
            self.complete_send(msg.send, Ok(()));
        }
        Ok(id)
    }

    /// Takes a completed receive; `None` while it is still posted.
    pub fn recv_take(&mut self, w: WorkerId, id: RecvId) -> Option<Result<Received, FabricError>> {
        self.workers.get_mut(w.0)?.done_recvs.remove(&id)
    }

    /// Cancels a posted receive.
    pub fn recv_cancel(&mut self, w: WorkerId, id: RecvId) -> bool {
        self.workers
            .get_mut(w.0)
            .is_some_and(|x| x.matcher.cancel(&id))
    }

    /// `ucp_tag_probe_nb`: the tag of the oldest unexpected match; with `remove`, the message too.
    pub fn tag_probe(
        &mut self,
        w: WorkerId,
        tag: u64,
        mask: u64,
        remove: bool,
    ) -> Result<Option<Received>, FabricError> {
        let worker = self.worker(w)?;
        match worker.matcher.probe(tag, mask, remove) {
            None => Ok(None),
            Some((t, None)) => Ok(Some(Received {
                tag: t,
                data: Vec::new(),
            })),
            Some((t, Some(msg))) => {
                self.complete_send(msg.send, Ok(()));
                Ok(Some(Received {
                    tag: t,
                    data: msg.data,
                }))
            }
        }
    }

    /// Number of messages in a worker's unexpected queue.
    pub fn unexpected_len(&self, w: WorkerId) -> usize {
        self.workers[w.0].matcher.unexpected_len()
    }

    /// Tag comparisons a worker's matcher has made.
    pub fn comparisons(&self, w: WorkerId) -> u64 {
        self.workers[w.0].matcher.comparisons()
    }

    /// Registers an AM handler id on a worker. Like UCX, a second registration replaces the
    /// first without complaint (and is counted).
    pub fn am_set_handler(&mut self, w: WorkerId, id: u16) -> Result<(), FabricError> {
        let worker = self.worker(w)?;
        if !worker.am_handlers.insert(id) {
            worker.stats.am_overwrites += 1;
        }
        Ok(())
    }

    /// Removes an AM handler id.
    pub fn am_clear_handler(&mut self, w: WorkerId, id: u16) {
        if let Some(x) = self.workers.get_mut(w.0) {
            x.am_handlers.remove(&id);
        }
    }

    /// Sends an Active Message (always eager here).
    pub fn am_send(&mut self, ep: EpId, id: u16, data: &[u8]) -> Result<(), FabricError> {
        let e = self.usable(ep)?;
        let (dest, reply_ep) = (e.remote_worker, e.remote_ep);
        if self.hold {
            self.eps[ep.0].am_wire.push_back((id, data.to_vec()));
        } else {
            self.am_arrive(dest, id, data.to_vec(), reply_ep);
        }
        Ok(())
    }

    fn am_arrive(&mut self, dest: WorkerId, id: u16, data: Vec<u8>, reply_ep: EpId) {
        if self.dead.contains(&self.workers[dest.0].process) {
            return;
        }
        let w = &mut self.workers[dest.0];
        if w.am_handlers.contains(&id) {
            w.am_queue.push_back(AmMessage { id, data, reply_ep });
        } else {
            w.stats.am_dropped += 1;
        }
    }

    /// The next Active Message delivered to a worker.
    pub fn am_take(&mut self, w: WorkerId) -> Option<AmMessage> {
        self.worker(w).ok()?.am_queue.pop_front()
    }

    /// The next event for a worker.
    pub fn event(&mut self, w: WorkerId) -> Option<WorkerEvent> {
        self.worker(w).ok()?.events.pop_front()
    }

    /// Counters of a worker.
    pub fn stats(&self, w: WorkerId) -> WorkerStats {
        self.workers[w.0].stats
    }

    fn fail_ep(&mut self, ep: EpId, why: FabricError) {
        let e = &mut self.eps[ep.0];
        if e.state.is_err() {
            return;
        }
        e.state = Err(why);
        // What this side still had in flight toward the closed or dead side is lost.
        e.tag_wire.clear();
        e.am_wire.clear();
        let worker = e.worker;
        self.workers[worker.0]
            .events
            .push_back(WorkerEvent::EndpointError(ep, why));
        self.fail_sends(ep, why);
    }

    /// Closes an endpoint; the peer's side fails with [`FabricError::EndpointClosed`].
    pub fn ep_close(&mut self, ep: EpId) {
        if let Some(e) = self.eps.get_mut(ep.0) {
            if e.state.is_ok() {
                e.state = Err(FabricError::EndpointClosed);
                let remote = e.remote_ep;
                self.fail_sends(ep, FabricError::EndpointClosed);
                self.fail_ep(remote, FabricError::EndpointClosed);
            }
        }
    }

    fn is_cut(&self, a: ProcessId, b: ProcessId) -> bool {
        self.cut.contains(&(a.min(b), a.max(b)))
    }

    /// Cuts the network between processes `a` and `b` (both stay alive): what is in flight
    /// between them is lost, every endpoint between them fails on both sides with
    /// [`FabricError::PeerFailed`] (as UCX reports a TCP connection reset or timed out), and
    /// connecting across fails until [`heal`](Self::heal).
    pub fn partition(&mut self, a: ProcessId, b: ProcessId) {
        self.cut.insert((a.min(b), a.max(b)));
        let across: Vec<EpId> = (0..self.eps.len())
            .map(EpId)
            .filter(|&ep| {
                let e = &self.eps[ep.0];
                let (x, y) = (self.process_of(e.worker), self.process_of(e.remote_worker));
                (x, y) == (a, b) || (x, y) == (b, a)
            })
            .collect();
        for ep in across {
            self.fail_ep(ep, FabricError::PeerFailed);
        }
    }

    /// Restores the network between `a` and `b` ([`partition`](Self::partition)): new
    /// connections go through again (failed endpoints stay failed).
    pub fn heal(&mut self, a: ProcessId, b: ProcessId) {
        self.cut.remove(&(a.min(b), a.max(b)));
    }

    /// Kills a process (`kill -9`): its workers stop, every endpoint to it fails with
    /// [`FabricError::PeerFailed`], and rendezvous sends it has not matched fail.
    pub fn kill(&mut self, p: ProcessId) {
        self.dead.insert(p);
        // Held messages it sent are lost with it (as over TCP). Over shared memory they could
        // still arrive: the residual R7 window the README describes, not modelled here.
        for e in &mut self.eps {
            if self.workers[e.worker.0].process == p {
                e.tag_wire.clear();
                e.am_wire.clear();
            }
        }
        let to_fail: Vec<EpId> = (0..self.eps.len())
            .map(EpId)
            .filter(|&ep| {
                let e = &self.eps[ep.0];
                self.workers[e.remote_worker.0].process == p
                    && self.workers[e.worker.0].process != p
            })
            .collect();
        for ep in to_fail {
            self.fail_ep(ep, FabricError::PeerFailed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eager_and_rendezvous() {
        let mut f = Fabric::new();
        let (a, b) = (f.new_worker(ProcessId(0)), f.new_worker(ProcessId(1)));
        let ep = f.connect(a, b).unwrap();
        assert!(matches!(f.event(b), Some(WorkerEvent::Accepted(_))));
        let small = f.tag_send(ep, 1, b"hi").unwrap();
        assert_eq!(f.send_take(small), Some(Ok(())));
        let big = f.tag_send(ep, 2, &vec![7u8; RNDV_THRESHOLD + 1]).unwrap();
        assert_eq!(f.send_take(big), None);
        let r = f.tag_recv(b, 2, u64::MAX).unwrap();
        assert_eq!(f.send_take(big), Some(Ok(())));
        assert_eq!(f.send_take(big), None, "a taken send is forgotten");
        assert_eq!(
            f.recv_take(b, r).unwrap().unwrap().data.len(),
            RNDV_THRESHOLD + 1
        );
        let r = f.tag_recv(b, 1, u64::MAX).unwrap();
        assert_eq!(f.recv_take(b, r).unwrap().unwrap().data, b"hi");
    }

    #[test]
    fn held_lanes_keep_their_own_order_only() {
        let mut f = Fabric::new();
        let (a, b) = (f.new_worker(ProcessId(0)), f.new_worker(ProcessId(1)));
        f.am_set_handler(b, 5).unwrap();
        let ep = f.connect(a, b).unwrap();
        f.set_hold(true);
        f.tag_send(ep, 1, b"t1").unwrap();
        f.am_send(ep, 5, b"a1").unwrap();
        f.tag_send(ep, 1, b"t2").unwrap();
        assert_eq!(f.in_flight(), vec![(ep, Lane::Tag), (ep, Lane::Am)]);
        assert!(
            f.tag_probe(b, 1, u64::MAX, false).unwrap().is_none(),
            "held"
        );
        // The AM overtakes both tags; the tags stay in order.
        assert!(f.deliver(ep, Lane::Am));
        assert_eq!(f.am_take(b).unwrap().data, b"a1");
        assert!(f.deliver(ep, Lane::Tag));
        assert!(f.deliver(ep, Lane::Tag));
        assert!(!f.deliver(ep, Lane::Tag));
        let first = f.tag_probe(b, 1, u64::MAX, true).unwrap().unwrap();
        assert_eq!(first.data, b"t1");
        // A killed process's messages in flight are lost with it.
        f.tag_send(ep, 2, b"late").unwrap();
        f.kill(ProcessId(0));
        assert!(f.in_flight().is_empty());
        f.deliver_all();
        assert!(f.tag_probe(b, 2, u64::MAX, true).unwrap().is_none());
    }

    #[test]
    fn kill_fails_only_that_peers_endpoints() {
        let mut f = Fabric::new();
        let (a, b, c) = (
            f.new_worker(ProcessId(0)),
            f.new_worker(ProcessId(1)),
            f.new_worker(ProcessId(2)),
        );
        let ab = f.connect(a, b).unwrap();
        let ac = f.connect(a, c).unwrap();
        let pending = f.tag_send(ab, 9, &vec![0u8; RNDV_THRESHOLD * 2]).unwrap();
        f.kill(ProcessId(1));
        assert_eq!(f.send_take(pending), Some(Err(FabricError::PeerFailed)));
        assert_eq!(
            f.event(a),
            Some(WorkerEvent::EndpointError(ab, FabricError::PeerFailed))
        );
        assert_eq!(f.tag_send(ab, 1, b"x"), Err(FabricError::PeerFailed));
        assert!(f.tag_send(ac, 1, b"x").is_ok());
        assert_eq!(f.tag_recv(b, 0, 0), Err(FabricError::WorkerDead));
    }

    #[test]
    fn am_handlers_are_per_worker_and_unchecked() {
        let mut f = Fabric::new();
        let (a, b) = (f.new_worker(ProcessId(0)), f.new_worker(ProcessId(1)));
        let ep = f.connect(a, b).unwrap();
        f.am_send(ep, 0, b"lost").unwrap();
        assert_eq!(f.stats(b).am_dropped, 1);
        f.am_set_handler(b, 0).unwrap();
        f.am_set_handler(b, 0).unwrap(); // ucx-py and ucxx both use id 0
        assert_eq!(f.stats(b).am_overwrites, 1);
        f.am_send(ep, 0, b"m").unwrap();
        let m = f.am_take(b).unwrap();
        assert_eq!((m.id, m.data.as_slice()), (0, &b"m"[..]));
        assert_eq!(f.remote_worker(m.reply_ep), Some(a));
    }
}
