//! The operations' executor (feature `alloc`): how a library's send or receive moves along,
//! written once over the [`Transport`] each node implements — a send waiting for a route tried
//! again (P2), a transport request looked at, a stranger's message dropped and the receive
//! posted again, a cancelled receive named for why it was cancelled, an operation ended or
//! cancelled because its peer went down (D3), a released library's receives cancelled.
//!
//! The node keeps only what is its transport's: how a request is started, looked at, cancelled
//! and given up (UCX parks a request it cannot free with its buffer; the mock cancels a
//! receive and forgets a send), and what a counted forgery adds to its statistics.

use super::ops::{Next, Op, Outcome, Request};
use super::sends::{Dest, Resolved, Waiting};
use super::types::{LibId, NodeError, OpId};
use super::Engine;
use crate::Matcher;
use alloc::vec::Vec;

/// What posting a receive did.
#[derive(Debug)]
pub enum Posted<R> {
    /// The transport has a request for it, finished or not.
    Waiting(R),
    /// A message the node held for it was taken at once (a held namespace's backlog).
    Took(Vec<u8>),
}

/// A finished receive request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finished<E> {
    /// The tag of the message it matched — set only when one was matched (also for a message
    /// too long for the receive, which the transport fails): the executor checks it for a
    /// stranger's pair value.
    pub tag: Option<u64>,
    /// The data, or why it failed.
    pub data: Result<Vec<u8>, E>,
}

/// What the executor asks of a node's transport, for connections keyed `K` whose transport
/// state is `X` and whose transport's error is `E`. Every method is one transport call: the decisions around
/// it are the engine's.
pub trait Transport<K, X, E> {
    /// A send request.
    type Send: Request;
    /// A receive request.
    type Recv: Request;

    /// Hands `data` (the transport may take it) to connection `io` for `dest` at `peer`:
    /// `Ok(None)` if the send is already complete, `Ok(Some(request))` if it completes later.
    fn send(
        &mut self,
        io: &X,
        peer: u64,
        dest: Dest,
        data: &mut Vec<u8>,
    ) -> Result<Option<Self::Send>, NodeError<E>>;

    /// A send's result once its request has finished (`None` while it runs).
    fn test_send(&mut self, req: &mut Self::Send) -> Option<Result<(), E>>;

    /// Posts a receive for `m`, of at most `max_len` bytes (or takes a message the node holds
    /// for it).
    fn post(&mut self, m: &Matcher, max_len: usize) -> Result<Posted<Self::Recv>, NodeError<E>>;

    /// A receive's result once its request has finished (`None` while it waits).
    fn test_recv(&mut self, req: &mut Self::Recv) -> Option<Finished<E>>;

    /// Whether `e` is the transport's "cancelled" (what a receive cancelled by
    /// [`cancel`](Self::cancel) finishes with later).
    fn is_cancelled(&self, e: &E) -> bool;

    /// Cancels a posted receive: `true` if it is gone now (it ends here, with the engine's
    /// error), `false` if the transport finishes it later with its "cancelled" — or with its
    /// data, if it had already matched.
    fn cancel(&mut self, req: &mut Self::Recv) -> bool;

    /// Gives up a send request on connection `conn` that may never finish (its peer went down,
    /// D3). (UCX: that endpoint must not be closed in order while the request is unfinished.)
    fn abandon_send(&mut self, conn: K, req: Self::Send);

    /// Gives up a receive request that may never finish (its peer went down, D3).
    fn abandon_recv(&mut self, req: Self::Recv);

    /// A receive from any peer took a message whose pair value no proven peer was given
    /// (`tag`): dropped, to be counted; the receive waits on.
    fn forged(&mut self, tag: u64);
}

impl<'r, K, X, S, R, E, const CAP: usize> Engine<'r, K, X, Op<S, R, K>, E, CAP>
where
    K: Copy + Eq + core::hash::Hash,
    S: Request,
    R: Request,
    E: Copy,
{
    /// Starts send `w` at adapter time `now_ms`: handed to the transport if its route is known
    /// (P2), else it waits for one until its deadline.
    pub fn send<T>(&mut self, t: &mut T, w: Waiting, now_ms: u64) -> OpId
    where
        T: Transport<K, X, E, Send = S, Recv = R>,
    {
        let next = self.try_send(t, w, now_ms);
        self.ops.start(next)
    }

    /// Posts a receive for `payload` in `lib`'s namespace, of at most `max_len` bytes: from
    /// `from` only (exact, D1; it ends when that peer goes down, D3 — at once if it has already
    /// failed), or from any proven peer (the pair field free: a stranger's message is dropped
    /// and the receive waits on).
    pub fn recv<T>(
        &mut self,
        t: &mut T,
        lib: LibId,
        from: Option<u64>,
        payload: u64,
        max_len: usize,
        now_ms: u64,
    ) -> OpId
    where
        T: Transport<K, X, E, Send = S, Recv = R>,
    {
        if let Some(peer) = from {
            if let Some(cause @ Some(_)) = self.conns.failed_peer(peer) {
                let down = self.finished(lib, Err(NodeError::PeerDown { peer, cause }), false);
                return self.ops.start(down);
            }
        }
        // Looked at once before it goes in the table: a message already waiting is taken now.
        let next = match self.post(t, lib, from, payload, max_len) {
            Next::Wait(op) => self.step(t, op, now_ms),
            done => done,
        };
        self.ops.start(next)
    }

    /// A receive posted (or finished, if it took a held message or could not be posted).
    fn post<T>(
        &mut self,
        t: &mut T,
        lib: LibId,
        from: Option<u64>,
        payload: u64,
        max_len: usize,
    ) -> Next<Op<S, R, K>, E>
    where
        T: Transport<K, X, E, Send = S, Recv = R>,
    {
        let posted = (self.recv_matcher(lib, from, payload)).and_then(|m| t.post(&m, max_len));
        match posted {
            Ok(Posted::Waiting(req)) => Next::Wait(Op::Receiving {
                lib,
                req,
                from,
                again: Some((payload, max_len)),
            }),
            Ok(Posted::Took(data)) => self.finished(lib, Ok(Some(data)), false),
            Err(e) => self.finished(lib, Err(e), false),
        }
    }

    /// Moves every operation that is due at `now_ms` along ([`due_ops`](Self::due_ops), D6);
    /// one time for the whole batch (a deadline that passes meanwhile counts at the next call).
    pub fn advance_due<T>(&mut self, t: &mut T, now_ms: u64)
    where
        T: Transport<K, X, E, Send = S, Recv = R>,
    {
        for id in self.due_ops(now_ms) {
            self.advance(t, id, now_ms);
        }
    }

    /// The result of operation `id` once it has finished (moved along first if it has not);
    /// taking it forgets the operation.
    pub fn take<T>(&mut self, t: &mut T, id: OpId, now_ms: u64) -> Option<Outcome<E>>
    where
        T: Transport<K, X, E, Send = S, Recv = R>,
    {
        if !self.ops.is_done(id) {
            self.advance(t, id, now_ms);
        }
        self.ops.take(id)
    }

    /// Moves operation `id` along: a waiting send is tried again (or fails at its deadline), a
    /// request is looked at.
    pub fn advance<T>(&mut self, t: &mut T, id: OpId, now_ms: u64)
    where
        T: Transport<K, X, E, Send = S, Recv = R>,
    {
        let Some(op) = self.ops.remove(id) else {
            return;
        };
        let next = self.step(t, op, now_ms);
        self.ops.put(id, next);
    }

    /// The transport's receive queue was replaced ([`Action::Deaf`](super::Action::Deaf)):
    /// every receive still posted on the old one is cancelled there and posted again on `t`
    /// (which posts on the new one), in the order they were started. One that had already
    /// matched keeps its message (it finishes as it would have); one that took a message
    /// already (an inbox probe's) keeps its request. Returns how many were posted again.
    pub fn repost_receives<T>(&mut self, t: &mut T) -> usize
    where
        T: Transport<K, X, E, Send = S, Recv = R>,
    {
        let mut moved = 0;
        for id in (self.ops).matching(|op| matches!(op, Op::Receiving { again: Some(_), .. })) {
            let Some(Op::Receiving {
                lib,
                mut req,
                from,
                again: Some((payload, max_len)),
            }) = self.ops.remove(id)
            else {
                continue;
            };
            // Looked at first: one the transport has finished is not cancelled. A result is
            // read once, so the one read here is the one handled.
            let fin = match t.test_recv(&mut req) {
                Some(fin) => Some(fin),
                None if t.cancel(&mut req) => None,
                None => match t.test_recv(&mut req) {
                    Some(fin) => Some(fin),
                    // Matched, still finishing: it finishes as ever.
                    None => {
                        let op = Op::Receiving {
                            lib,
                            req,
                            from,
                            again: Some((payload, max_len)),
                        };
                        self.ops.put(id, Next::Wait(op));
                        continue;
                    }
                },
            };
            let next = match fin {
                Some(fin) if !matches!(&fin.data, Err(e) if t.is_cancelled(e)) => {
                    self.received(t, lib, from, Some((payload, max_len)), fin)
                }
                // Cancelled (at once or reported): posted on the new queue.
                _ => {
                    moved += 1;
                    self.post(t, lib, from, payload, max_len)
                }
            };
            self.ops.put(id, next);
        }
        moved
    }

    /// What running operation `op` becomes at `now_ms`.
    fn step<T>(&mut self, t: &mut T, op: Op<S, R, K>, now_ms: u64) -> Next<Op<S, R, K>, E>
    where
        T: Transport<K, X, E, Send = S, Recv = R>,
    {
        match op {
            Op::WaitingRoute(w) => self.try_send(t, w, now_ms),
            Op::Sending { lib, mut req, conn } => match t.test_send(&mut req) {
                None => Next::Wait(Op::Sending { lib, req, conn }),
                Some(r) => self.finished(lib, r.map(|()| None).map_err(NodeError::Transport), true),
            },
            Op::Receiving {
                lib,
                mut req,
                from,
                again,
            } => match t.test_recv(&mut req) {
                None => Next::Wait(Op::Receiving {
                    lib,
                    req,
                    from,
                    again,
                }),
                Some(fin) => self.received(t, lib, from, again, fin),
            },
        }
    }

    /// What a receive becomes when the transport has finished its request with `fin` (a
    /// result is read once: the transport gives it up with it).
    fn received<T>(
        &mut self,
        t: &mut T,
        lib: LibId,
        from: Option<u64>,
        again: Option<(u64, usize)>,
        fin: Finished<E>,
    ) -> Next<Op<S, R, K>, E>
    where
        T: Transport<K, X, E, Send = S, Recv = R>,
    {
        match fin {
            Finished { data: Err(e), .. } if t.is_cancelled(&e) => {
                let e = self.cancelled(lib, from, e);
                self.finished(lib, Err(e), false)
            }
            // A stranger's (also one too long for the receive, which the transport failed):
            // dropped; the receive waits on for a proven peer's message.
            Finished { tag: Some(tag), .. }
                if from.is_none()
                    && again.is_some()
                    && self.conns.forged(self.registry.layout(), tag) =>
            {
                t.forged(tag);
                let (payload, max_len) = again.unwrap_or_default();
                self.post(t, lib, None, payload, max_len)
            }
            Finished { data, .. } => {
                let r = data.map(Some).map_err(NodeError::Transport);
                self.finished(lib, r, false)
            }
        }
    }

    /// A waiting send handed to the transport if the engine says it can go (the data moves
    /// into the request), or still waiting, or failed at its deadline (P2).
    fn try_send<T>(&mut self, t: &mut T, mut w: Waiting, now_ms: u64) -> Next<Op<S, R, K>, E>
    where
        T: Transport<K, X, E, Send = S, Recv = R>,
    {
        let (lib, peer) = (w.lib, w.peer);
        let sent = self.resolve(&w).and_then(|resolved| match resolved {
            Resolved::Wait(why) => Ok(Err(why)),
            Resolved::Go { conn, dest } => {
                let c = (self.conns.get(conn)).ok_or(NodeError::NoConnection { peer })?;
                let req = t.send(&c.io, peer, dest, &mut w.data)?;
                Ok(Ok(req.map(|req| (req, c.key()))))
            }
        });
        match sent {
            Ok(Ok(Some((req, conn)))) => Next::Wait(Op::Sending { lib, req, conn }),
            Ok(Ok(None)) => self.finished(lib, Ok(None), true),
            Ok(Err(why)) => match w.blocked(why, now_ms, &self.libs) {
                Ok(w) => Next::Wait(Op::WaitingRoute(w)),
                Err(e) => self.finished(lib, Err(e), true),
            },
            Err(e) => self.finished(lib, Err(e), true),
        }
    }

    /// What a receive the transport reports cancelled ends with: released first, the same
    /// answer whatever its peer did meanwhile (`NoSuchLibrary`); tied to a peer that went
    /// down, `PeerDown`; else the library cancelled it (the transport's error).
    fn cancelled(&self, lib: LibId, from: Option<u64>, e: E) -> NodeError<E> {
        if self.libs.get(lib).is_none() {
            return NodeError::NoSuchLibrary;
        }
        match from.and_then(|p| Some((p, self.conns.failed_peer(p)?))) {
            Some((peer, cause)) => NodeError::PeerDown { peer, cause },
            None => NodeError::Transport(e),
        }
    }

    /// [`Action::End`](super::Action::End): operation `id` can only finish through `peer`,
    /// which went down — its result if the transport has already finished it, else `PeerDown`,
    /// its request given up (UCX may never finish one matched to a dead peer's rendezvous).
    pub fn end_op<T>(&mut self, t: &mut T, id: OpId, peer: u64, cause: Option<E>)
    where
        T: Transport<K, X, E, Send = S, Recv = R>,
    {
        let down = NodeError::PeerDown { peer, cause };
        let (lib, r, sent) = match self.ops.remove(id) {
            Some(Op::Sending { lib, mut req, conn }) => match t.test_send(&mut req) {
                Some(Ok(())) => (lib, Ok(None), true),
                Some(Err(_)) => (lib, Err(down), true),
                None => {
                    t.abandon_send(conn, req);
                    (lib, Err(down), true)
                }
            },
            Some(Op::Receiving { lib, mut req, .. }) => match t.test_recv(&mut req) {
                Some(Finished { data: Ok(data), .. }) => (lib, Ok(Some(data)), false),
                Some(Finished { data: Err(_), .. }) => (lib, Err(down), false),
                None => {
                    t.abandon_recv(req);
                    (lib, Err(down), false)
                }
            },
            Some(waiting) => {
                self.ops.put(id, Next::Wait(waiting));
                return;
            }
            None => return,
        };
        let done = self.finished(lib, r, sent);
        self.ops.put(id, done);
    }

    /// [`Action::Cancel`](super::Action::Cancel): a receive waiting for `peer`, which closed in
    /// order, is cancelled the transport's way (one already matched still completes with its
    /// data); one gone at once ends with `PeerDown` (no cause).
    pub fn cancel_op<T>(&mut self, t: &mut T, id: OpId, peer: u64)
    where
        T: Transport<K, X, E, Send = S, Recv = R>,
    {
        self.cancel_with(t, id, NodeError::PeerDown { peer, cause: None });
    }

    /// A released library's receives (R7: one left posted would take a message meant for the
    /// next name to get the id) are cancelled; they end with `NoSuchLibrary`.
    pub fn cancel_receives<T>(&mut self, t: &mut T, lib: LibId)
    where
        T: Transport<K, X, E, Send = S, Recv = R>,
    {
        let mine = |op: &Op<S, R, K>| matches!(op, Op::Receiving { lib: of, .. } if *of == lib);
        for id in self.ops.matching(mine) {
            self.cancel_with(t, id, NodeError::NoSuchLibrary);
        }
    }

    fn cancel_with<T>(&mut self, t: &mut T, id: OpId, e: NodeError<E>)
    where
        T: Transport<K, X, E, Send = S, Recv = R>,
    {
        let Some(mut op) = self.ops.remove(id) else {
            return;
        };
        let gone = match &mut op {
            Op::Receiving { lib, req, .. } => t.cancel(req).then_some(*lib),
            _ => None,
        };
        let next = match gone {
            Some(lib) => self.finished(lib, Err(e), false),
            None => Next::Wait(op),
        };
        self.ops.put(id, next);
    }

    /// `lib`'s operation ended with `r` (a send if `sent`): counted for the library.
    fn finished(&mut self, lib: LibId, r: Outcome<E>, sent: bool) -> Next<Op<S, R, K>, E> {
        Next::finished(&mut self.libs, lib, r, sent)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::engine::{Action, ConnId, Liveness, Out, PeerLimits, Target};
    use crate::wire::{self, Role};
    use crate::{Identity, Registry, TagLayout};
    use alloc::boxed::Box;
    use alloc::collections::BTreeMap;

    /// The transport's "cancelled".
    const CANCELLED: u8 = 99;

    #[derive(Debug)]
    struct Req(u64);

    impl Request for Req {
        fn key(&self) -> u64 {
            self.0
        }
    }

    /// A transport whose requests finish when the test says.
    #[derive(Default)]
    struct Toy {
        next: u64,
        sends: BTreeMap<u64, Option<Result<(), u8>>>,
        /// Posted receives: their matcher's tag, and how they finished.
        recvs: BTreeMap<u64, (u64, Option<Finished<u8>>)>,
        /// Whether a cancel is done at once (the mock) or reported later (UCX).
        cancel_at_once: bool,
        abandoned: Vec<u64>,
        forged: Vec<u64>,
        /// A message the node holds: the next receive takes it at once.
        held: Option<Vec<u8>>,
        /// Whether a finished receive's result is given once (UCX, the mock), not every time
        /// it is asked for.
        once: bool,
    }

    impl Toy {
        fn req(&mut self) -> u64 {
            self.next += 1;
            self.next
        }
    }

    impl Transport<u32, (), u8> for Toy {
        type Send = Req;
        type Recv = Req;
        fn send(
            &mut self,
            _io: &(),
            _peer: u64,
            dest: Dest,
            data: &mut Vec<u8>,
        ) -> Result<Option<Req>, NodeError<u8>> {
            drop(core::mem::take(data));
            let k = self.req();
            self.sends.insert(k, None);
            Ok(matches!(dest, Dest::Tag(_)).then_some(Req(k)))
        }
        fn test_send(&mut self, req: &mut Req) -> Option<Result<(), u8>> {
            *self.sends.get(&req.0)?
        }
        fn post(&mut self, m: &Matcher, _max_len: usize) -> Result<Posted<Req>, NodeError<u8>> {
            if let Some(data) = self.held.take() {
                return Ok(Posted::Took(data));
            }
            let k = self.req();
            self.recvs.insert(k, (m.tag(), None));
            Ok(Posted::Waiting(Req(k)))
        }
        fn test_recv(&mut self, req: &mut Req) -> Option<Finished<u8>> {
            let r = self.recvs.get_mut(&req.0)?;
            if self.once {
                return r.1.take();
            }
            r.1.clone()
        }
        fn is_cancelled(&self, e: &u8) -> bool {
            *e == CANCELLED
        }
        fn cancel(&mut self, req: &mut Req) -> bool {
            if self.cancel_at_once {
                self.recvs.remove(&req.0);
            } else if let Some(r) = self.recvs.get_mut(&req.0) {
                r.1.get_or_insert(done(r.0, Err(CANCELLED)));
            }
            self.cancel_at_once
        }
        fn abandon_send(&mut self, _conn: u32, req: Req) {
            self.abandoned.push(req.0);
        }
        fn abandon_recv(&mut self, req: Req) {
            self.abandoned.push(req.0);
        }
        fn forged(&mut self, tag: u64) {
            self.forged.push(tag);
        }
    }

    type E = Engine<'static, u32, (), Op<Req, Req, u32>, u8, 64>;

    fn done(tag: u64, data: Result<Vec<u8>, u8>) -> Finished<u8> {
        Finished {
            tag: Some(tag),
            data,
        }
    }

    fn engine() -> (E, LibId) {
        let reg = Box::leak(Box::new(Registry::new(TagLayout::DEFAULT)));
        let mut e = E::new(
            reg,
            [1, 2],
            0,
            Some(Liveness::default()),
            PeerLimits::default(),
        );
        let lib = e.register("lib").unwrap();
        (e, lib)
    }

    /// Two engines with library "lib" each, connected and proven to each other: `a`, its
    /// library and connection, `b`, its connection, and `b`'s token.
    fn connected() -> (E, LibId, ConnId, E, ConnId, u64) {
        let ((mut a, lib), (mut b, _)) = (engine(), engine());
        let (ia, ib) = (Identity::from_seed(&[1; 32]), Identity::from_seed(&[2; 32]));
        let i = a.add_conn(1, Role::Initiator, &ia, 0, ());
        let j = b.add_conn(1, Role::Acceptor, &ib, 0, ());
        for _ in 0..8 {
            deliver(&mut a, i, &mut b, j);
            deliver(&mut b, j, &mut a, i);
        }
        for e in [&mut a, &mut b] {
            while e.poll_action().is_some() {}
        }
        assert_eq!(a.conns().peers(), [ib.token()], "proven");
        (a, lib, i, b, j, ib.token())
    }

    /// Hands `from`'s queued control frames on `x` to `to`'s connection `y`.
    fn deliver(from: &mut E, x: ConnId, to: &mut E, y: ConnId) {
        let mut buf = alloc::vec![0; wire::MAX_FRAME_LEN];
        let mut frames = Vec::new();
        if let Some(mut out) = from.outbox(x) {
            while let Some(next) = out.next(&mut buf) {
                if let Out::Frame(n) = next {
                    frames.push(buf[..n].to_vec());
                }
            }
        }
        for f in frames {
            to.handle_control(y, &f, 0);
        }
    }

    /// Carries out the operations' actions the engine queued; the actions.
    fn carry(e: &mut E, t: &mut Toy) -> Vec<Action<u8>> {
        let all: Vec<Action<u8>> = core::iter::from_fn(|| e.poll_action()).collect();
        for a in &all {
            match *a {
                Action::End { op, peer, cause } => e.end_op(t, op, peer, cause),
                Action::Cancel { op, peer } => e.cancel_op(t, op, peer),
                _ => {}
            }
        }
        all
    }

    /// The transport finishes send request `k` with `r`, and says so.
    fn finish_send(e: &mut E, t: &mut Toy, k: u64, r: Result<(), u8>) {
        t.sends.insert(k, Some(r));
        e.ops_mut().completed(k);
        e.advance_due(t, 0);
    }

    #[test]
    fn a_routed_send_goes_to_the_transport_and_ends_with_its_result_or_peer_down() {
        let (mut a, lib, i, _b, _j, tb) = connected();
        let mut t = Toy::default();
        let send = |a: &mut E, t: &mut Toy| {
            let w = Waiting::new(lib, tb, Target::Data(1), alloc::vec![1], 0, 100);
            (a.send(t, w, 0), t.next)
        };
        let (ok, ok_req) = send(&mut a, &mut t);
        let (stuck, stuck_req) = send(&mut a, &mut t);
        assert_eq!(t.sends.len(), 2, "both handed to the transport at once");
        finish_send(&mut a, &mut t, ok_req, Ok(()));
        assert_eq!(a.take(&mut t, ok, 0), Some(Ok(None)));
        assert_eq!(a.libs().counters(lib).sent, 1);
        // The connection fails: the send in flight on it ends, its request given up (D3).
        a.handle_failed(i, 42);
        let acts = carry(&mut a, &mut t);
        assert!(acts.contains(&Action::End {
            op: stuck,
            peer: tb,
            cause: Some(42)
        }));
        let down = NodeError::PeerDown {
            peer: tb,
            cause: Some(42),
        };
        assert_eq!(a.take(&mut t, stuck, 0), Some(Err(down.clone())));
        assert_eq!(t.abandoned, [stuck_req]);
        // A receive tied to the failed peer fails at once, without reaching the transport.
        let posted = t.recvs.len();
        let r = a.recv(&mut t, lib, Some(tb), 3, 8, 0);
        assert_eq!(a.take(&mut t, r, 0), Some(Err(down)));
        assert_eq!(t.recvs.len(), posted);
        assert_eq!(a.libs().counters(lib).failed, 2);
    }

    #[test]
    fn a_receive_tied_to_a_peer_that_closed_ends_with_peer_down_when_its_cancel_comes_back() {
        let (mut a, lib, i, mut b, j, tb) = connected();
        let mut t = Toy::default(); // cancels come back later, as UCX's
        let r = a.recv(&mut t, lib, Some(tb), 3, 8, 0);
        b.close(j, Some(wire::CloseReason::Normal));
        deliver(&mut b, j, &mut a, i);
        let acts = carry(&mut a, &mut t);
        assert!(
            acts.contains(&Action::Cancel { op: r, peer: tb }),
            "{acts:?}"
        );
        assert!(!a.ops().is_done(r), "not until the transport reports it");
        a.advance(&mut t, r, 0);
        let down = NodeError::PeerDown {
            peer: tb,
            cause: None,
        };
        assert_eq!(a.take(&mut t, r, 0), Some(Err(down)));
    }

    #[test]
    fn a_receive_takes_a_held_message_at_once() {
        let (mut e, lib) = engine();
        let mut t = Toy {
            held: Some(alloc::vec![5, 6]),
            ..Toy::default()
        };
        let r = e.recv(&mut t, lib, None, 1, 8, 0);
        assert!(t.recvs.is_empty(), "nothing posted");
        assert_eq!(e.take(&mut t, r, 0), Some(Ok(Some(alloc::vec![5, 6]))));
        assert_eq!(e.libs().counters(lib).received, 1);
    }

    #[test]
    fn receives_move_to_a_new_receive_queue_and_one_already_matched_keeps_its_message() {
        for cancel_at_once in [false, true] {
            let (mut e, lib) = engine();
            let mut t = Toy {
                cancel_at_once,
                once: true,
                ..Toy::default()
            };
            // Tied to peers (a receive from any peer is the same, but here no peer is
            // proven whose pair value its message could carry).
            let waiting = e.recv(&mut t, lib, Some(78), 1, 8, 0);
            let waiting_req = t.next;
            let waiting_tag = t.recvs[&waiting_req].0;
            let matched = e.recv(&mut t, lib, Some(77), 2, 8, 0);
            let matched_req = t.next;
            let tag = t.recvs[&matched_req].0;
            // Matched before the queue went, not yet looked at: it keeps its message.
            t.recvs.get_mut(&matched_req).unwrap().1 = Some(done(tag, Ok(alloc::vec![3])));
            let was = t.recvs.len();
            assert_eq!(e.repost_receives(&mut t), 1);
            let (&new_req, &(new_tag, ref fin)) = t.recvs.iter().last().unwrap();
            assert!(new_req > matched_req && fin.is_none(), "posted again");
            assert_eq!(new_tag, waiting_tag, "for the same message");
            if cancel_at_once {
                assert!(!t.recvs.contains_key(&waiting_req), "the old one cancelled");
            } else {
                // The old request was cancelled and its "cancelled" read (once), not handed
                // to the library as an error.
                assert_eq!(t.recvs[&waiting_req].1, None);
                assert_eq!(t.recvs.len(), was + 1);
            }
            assert!(!e.ops().is_done(waiting), "still waits, on the new queue");
            assert_eq!(e.take(&mut t, matched, 0), Some(Ok(Some(alloc::vec![3]))));
            // The new request finishes the moved receive.
            t.recvs.get_mut(&new_req).unwrap().1 = Some(done(new_tag, Ok(alloc::vec![9])));
            e.ops_mut().completed(new_req);
            e.advance_due(&mut t, 0);
            assert_eq!(e.take(&mut t, waiting, 0), Some(Ok(Some(alloc::vec![9]))));
            assert_eq!(e.libs().counters(lib).failed, 0);
        }
    }

    #[test]
    fn a_send_with_no_route_waits_then_fails_at_its_deadline() {
        let (mut e, lib) = engine();
        let mut t = Toy::default();
        let w = Waiting::new(lib, 7, Target::Data(1), alloc::vec![1, 2], 0, 100);
        let op = e.send(&mut t, w, 0);
        assert!(e.ops().get(op).is_some(), "waits for a connection (P2)");
        e.advance_due(&mut t, 99);
        assert!(!e.ops().is_done(op));
        e.advance_due(&mut t, 100);
        assert_eq!(
            e.take(&mut t, op, 100),
            Some(Err(NodeError::NoConnection { peer: 7 }))
        );
        assert!(t.sends.is_empty(), "nothing reached the transport");
        assert_eq!(e.libs().counters(lib).failed, 1);
    }

    #[test]
    fn a_receive_from_any_peer_drops_a_stranger_s_message_and_waits_on() {
        let (mut e, lib) = engine();
        let mut t = Toy::default();
        let op = e.recv(&mut t, lib, None, 5, 64, 0);
        let (&first, &(tag, _)) = t.recvs.iter().next().unwrap();
        // No peer is proven: whatever pair value the tag carries, nobody was given it.
        t.recvs.get_mut(&first).unwrap().1 = Some(done(tag | 1, Ok(alloc::vec![9])));
        e.advance(&mut t, op, 0);
        assert_eq!(t.forged, [tag | 1]);
        assert!(e.ops().get(op).is_some(), "waits on");
        let (&second, &(again, _)) = t.recvs.iter().last().unwrap();
        assert!(
            second != first && again == tag,
            "posted again, for the same tag"
        );
        // A stranger's message the transport failed (too long) is dropped the same way.
        t.recvs.get_mut(&second).unwrap().1 = Some(done(tag | 2, Err(3)));
        e.advance(&mut t, op, 0);
        assert_eq!(t.forged, [tag | 1, tag | 2]);
        // A failure that names no sender is the receive's own.
        let third = t.next;
        t.recvs.get_mut(&third).unwrap().1 = Some(Finished {
            tag: None,
            data: Err(3),
        });
        e.advance(&mut t, op, 0);
        assert_eq!(e.take(&mut t, op, 0), Some(Err(NodeError::Transport(3))));
        assert_eq!(e.libs().counters(lib).failed, 1);
    }

    #[test]
    fn a_lost_peer_ends_what_the_transport_finished_with_its_result_and_gives_up_the_rest() {
        let (mut e, lib) = engine();
        let mut t = Toy::default();
        let post = |e: &mut E, t: &mut Toy| {
            let op = e.recv(t, lib, None, 1, 8, 0);
            (op, t.next)
        };
        let (finished, done_req) = post(&mut e, &mut t);
        let (stuck, stuck_req) = post(&mut e, &mut t);
        let layout_tag = t.recvs[&done_req].0;
        // Finished by the transport but not yet looked at: its data, not PeerDown.
        t.recvs.get_mut(&done_req).unwrap().1 = Some(done(layout_tag, Ok(alloc::vec![4])));
        e.end_op(&mut t, finished, 7, Some(1));
        e.end_op(&mut t, stuck, 7, Some(1));
        assert_eq!(e.take(&mut t, finished, 0), Some(Ok(Some(alloc::vec![4]))));
        assert_eq!(
            e.take(&mut t, stuck, 0),
            Some(Err(NodeError::PeerDown {
                peer: 7,
                cause: Some(1)
            }))
        );
        assert_eq!(
            t.abandoned,
            [stuck_req],
            "only the unfinished request is given up"
        );
    }

    #[test]
    fn a_cancelled_receive_ends_for_why_it_was_cancelled() {
        for at_once in [true, false] {
            let (mut e, lib) = engine();
            let mut t = Toy {
                cancel_at_once: at_once,
                ..Toy::default()
            };
            // The library cancelled its own receive (not the engine): the transport's error.
            let own = e.recv(&mut t, lib, None, 2, 8, 0);
            let own_req = t.next;
            t.cancel(&mut Req(own_req));
            e.advance(&mut t, own, 0);
            // The engine cancels it (its peer closed in order): gone at once, `PeerDown`
            // without a cause; reported later (UCX), named when it comes back — here after
            // the release, which decides.
            let closed = e.recv(&mut t, lib, None, 1, 8, 0);
            e.cancel_op(&mut t, closed, 7);
            // Released: every receive of the library ends with NoSuchLibrary — one whose
            // cancel the transport reports after the release too, whatever else happened.
            let released = e.recv(&mut t, lib, None, 3, 8, 0);
            drop(e.release(lib));
            e.cancel_receives(&mut t, lib);
            for op in [closed, released] {
                e.advance(&mut t, op, 0);
            }
            if at_once {
                assert_eq!(t.recvs.len(), 0, "every receive left the transport");
                let down = NodeError::PeerDown {
                    peer: 7,
                    cause: None,
                };
                assert_eq!(e.take(&mut t, closed, 0), Some(Err(down)));
                // Nothing came back for it: it ended with its library.
                assert_eq!(e.take(&mut t, own, 0), Some(Err(NodeError::NoSuchLibrary)));
            } else {
                assert_eq!(
                    e.take(&mut t, closed, 0),
                    Some(Err(NodeError::NoSuchLibrary))
                );
                let cancelled = NodeError::Transport(CANCELLED);
                assert_eq!(e.take(&mut t, own, 0), Some(Err(cancelled)));
            }
            assert_eq!(
                e.take(&mut t, released, 0),
                Some(Err(NodeError::NoSuchLibrary))
            );
        }
    }
}
