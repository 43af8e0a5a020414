//! The engine's inputs for connection events and its outputs (quinn-proto's shape): the
//! adapter reports what happened — a control frame arrived ([`Engine::handle_control`]), a
//! transport failed ([`Engine::handle_failed`]), a message is to be charged against its
//! sender's limits ([`Engine::handle_charge`]), a peer flooded a held namespace
//! ([`Engine::handle_flooded`]), time passed ([`Engine::handle_timeout`]) — or asks for a
//! close ([`Engine::close`], [`Engine::close_all`]); the engine changes its tables and queues
//! what the adapter must now do, in the order it must be done, as [`Action`]s. The adapter
//! takes them with [`Engine::poll_action`] until there are none, after every input, and only
//! carries them out: which connections close and how, which operations end and with what, in
//! which order, is decided here once for every adapter.
//!
//! What the adapter carries out is its own business: how an endpoint is closed, where a
//! request that UCX may still touch is parked, how a control frame is sent.

use alloc::collections::VecDeque;

use super::{
    dials_after, AfterClose, Backoff, Charge, Check, ConnId, Control, Ending, Engine, Expiry,
    LinkState, Loss, OpId, PeerGone, Redial, Waits,
};
use crate::session::{Phase, SessionError};
use crate::wire::CloseReason;

/// What the adapter does next ([`Engine::poll_action`]), in queue order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action<E> {
    /// Send what connection `conn`'s session has queued: its control frames, then the tag
    /// half of its withdrawal acknowledgements (R7). Nothing if its endpoint is gone or not
    /// wired up yet (U1).
    Transmit(ConnId),
    /// Take connection `conn`'s endpoint out of service and close it `how`. The connection is
    /// already out of service in the engine; any [`Transmit`](Action::Transmit) for it came
    /// first.
    Close {
        /// The connection.
        conn: ConnId,
        /// Orderly (after what is in flight on it) or forced (now).
        how: CloseHow,
        /// Why, for the adapter's counters and logs.
        why: Why,
    },
    /// End operation `op` (D3): with its transport result if the transport already has one,
    /// else with `PeerDown { peer, cause }`; a request still in progress is given up (a
    /// receive cancelled). An operation that is not a send or receive in flight is left alone.
    End {
        /// The operation.
        op: OpId,
        /// The peer it can only finish through.
        peer: u64,
        /// The transport's failure, `None` when the peer closed or went unresponsive.
        cause: Option<E>,
    },
    /// Cancel receive `op`: its peer closed in order. If the cancel takes, it ends with
    /// `PeerDown { peer, cause: None }`; one already matched completes with its message.
    Cancel {
        /// The operation.
        op: OpId,
        /// The peer that closed.
        peer: u64,
    },
    /// `peer` proved its identity on a connection (messages held for it may be looked at).
    Proven {
        /// The peer's token.
        peer: u64,
    },
    /// Open a connection to `addr`, where `peer` (lost to a fault) said it listens, and tell
    /// the engine which ([`Engine::dial_started`]); a dial that fails at once needs nothing
    /// (the next is scheduled). With [`Redial::Report`](super::Redial::Report): tell whoever
    /// owns the endpoints that `peer` needs a reconnect.
    Dial {
        /// The lost peer's token.
        peer: u64,
        /// Where it listens.
        addr: crate::wire::Address,
    },
    /// This node hears nobody ([`Deafness`](super::Deafness)): no established connection is
    /// left, several peers went down, a deadline found silence where a live peer would have
    /// spoken, and no control frame has arrived from anyone for the heartbeat's timeout — its
    /// transport no longer delivers to it (UCX's shared-memory receive FIFO stuck for good).
    /// Replace what receives (a new worker, the listener again at the same address, the
    /// receives waiting moved there with
    /// [`repost_receives`](super::Engine::repost_receives)), close what is left on the old
    /// one, and let the dials reconnect; where a host owns the worker, tell the host.
    Deaf,
}

/// How an endpoint closes ([`Action::Close`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseHow {
    /// Once the requests on it have finished (what was sent arrives first).
    Orderly,
    /// Now: its transport failed, nothing on it will finish.
    Forced,
}

/// Why a connection closes ([`Action::Close`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// The peer sent CLOSE with this reason.
    PeerClosed(CloseReason),
    /// The peer broke the protocol (a CLOSE naming it went out first).
    ProtocolError(SessionError),
    /// A deadline passed (handshake, acknowledgements, heartbeat).
    Expired(Expiry),
    /// The peer sent more than its per-second limits allow.
    Flood,
    /// The peer left more messages waiting in a held namespace than its backlog limit.
    Backlog,
    /// Its transport failed.
    Failed,
    /// The peer proved itself while refused: this node cut it off for a protocol error less
    /// than [`REFUSE_MS`](super::REFUSE_MS) ago.
    Refused,
    /// It lost a simultaneous connect (P4): its linger ended, or it failed meanwhile (the
    /// peer closed its side, as expected).
    Superseded,
    /// The adapter asked ([`Engine::close`], [`Engine::close_all`]).
    Local,
}

/// One stage of an adapter's `progress`, in the order [`PROGRESS`] fixes for every adapter.
/// After each input a stage gives the engine, the adapter carries out every [`Action`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The transport makes progress (bounded, D4); the connections it accepted are added
    /// ([`Engine::add_conn`]) and its failures reported ([`Engine::handle_failed`]).
    Transport,
    /// New connections whose wire-up finished (U1) hand over the control frames that waited
    /// for it; an adapter without a wire-up step does nothing here.
    WireUp,
    /// The Active Messages that arrived: control frames ([`Engine::handle_charge`], then
    /// [`Engine::handle_control`]) and the libraries' own.
    Messages,
    /// The withdrawal acknowledgements' tags that arrived ([`Engine::handle_ack_tag`], R7).
    AckTags,
    /// What the sessions of the connections [`Engine::transmit_due`] names queued goes out
    /// ([`Action::Transmit`]'s work): after a change of the registry every open one, else
    /// only those something happened to, so that an idle `progress` costs nothing per peer.
    Transmit,
    /// The requests that completed ([`Ops::completed`](super::Ops::completed)) and the operations
    /// [`Engine::due_ops`] names move along (D6).
    Operations,
    /// [`Engine::handle_timeout`]: deadlines, the heartbeat, lingers.
    Timers,
    /// Endpoints closing in order whose requests have finished are closed; ended connections
    /// the adapter is done with are forgotten ([`Engine::forget_ended`], D5).
    Retire,
    /// The ids that are due go back to the registry ([`Engine::unpin_due`], R7).
    Unpin,
    /// The stray sweep ([`Engine::sweep_pass`], D2) and the held namespaces' backlogs, within
    /// one budget (D4); never on a host's worker.
    Strays,
}

/// The order of an adapter's `progress`: both nodes run exactly these steps in this order.
pub const PROGRESS: [Stage; 10] = [
    Stage::Transport,
    Stage::WireUp,
    Stage::Messages,
    Stage::AckTags,
    Stage::Transmit,
    // Before the timers and the retiring: a send that completed in this call no longer keeps
    // its endpoint from closing in order.
    Stage::Operations,
    Stage::Timers,
    Stage::Retire,
    Stage::Unpin,
    Stage::Strays,
];

pub(super) type Actions<E> = VecDeque<Action<E>>;

/// One thing a connection has to send ([`Outbox::next`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Out {
    /// A control frame of this many bytes, written into the caller's buffer: send it as the
    /// control Active Message.
    Frame(usize),
    /// The tag half of a withdrawal acknowledgement (R7): send an empty tag message with this
    /// tag, after every tag message this side has already posted on the connection.
    AckTag(u64),
}

/// What connection's session has queued to send, in the order it must go: its control frames,
/// then its acknowledgement tags ([`Engine::outbox`], for a [`Transmit`](Action::Transmit)).
/// The adapter sends each as it comes, through [`io`](Self::io); what it does not take stays
/// queued for the next `Transmit`.
pub struct Outbox<'a, X, const CAP: usize> {
    session: &'a mut crate::Session<CAP>,
    registry: &'a crate::Registry<CAP>,
    frames_done: bool,
    /// The session said it has no more frames (not: the transport refused one).
    drained: bool,
    /// The connection's mark in [`Connections::transmit_due`](super::Connections::transmit_due).
    due: &'a mut bool,
    /// The connection's transport state (its endpoint, requests in flight, …).
    pub io: &'a mut X,
}

impl<X, const CAP: usize> Outbox<'_, X, CAP> {
    /// The next thing to send; a frame is written into `buf` (size it
    /// [`MAX_FRAME_LEN`](crate::wire::MAX_FRAME_LEN): a frame that does not fit ends the
    /// frames of this call).
    pub fn next(&mut self, buf: &mut [u8]) -> Option<Out> {
        if !self.frames_done {
            match self.session.poll_transmit(self.registry, buf) {
                Ok(Some(n)) => return Some(Out::Frame(n)),
                Ok(None) => (self.frames_done, self.drained) = (true, true),
                Err(_) => self.frames_done = true,
            }
        }
        let layout = self.registry.layout();
        let next = self.session.poll_ack_tag(layout).map(Out::AckTag);
        if next.is_none() && self.drained {
            *self.due = false; // everything queued went
        }
        next
    }

    /// The transport refused a frame: the session's other frames wait for the next
    /// [`Transmit`](Action::Transmit); the acknowledgement tags still come.
    pub fn end_frames(&mut self) {
        self.frames_done = true;
    }
}

#[cfg(feature = "alloc")]
impl<'r, K: Copy + Eq + core::hash::Hash, X, T: Waits<K>, E: Copy, const CAP: usize>
    Engine<'r, K, X, T, E, CAP>
{
    /// The next thing the adapter must do, oldest first; `None` once it has done everything
    /// the inputs so far asked for. Call it until `None` after every `handle_*` and close.
    pub fn poll_action(&mut self) -> Option<Action<E>> {
        self.actions.pop_front()
    }

    /// What connection `conn` has to send ([`Action::Transmit`]); `None` once it is forgotten.
    pub fn outbox(&mut self, conn: ConnId) -> Option<Outbox<'_, X, CAP>> {
        let registry = self.registry;
        let (session, io, due) = self.conns.get_mut(conn)?.parts();
        Some(Outbox {
            session,
            registry,
            frames_done: false,
            drained: false,
            due,
            io,
        })
    }

    /// Whether actions wait to be carried out.
    pub fn has_actions(&self) -> bool {
        !self.actions.is_empty()
    }

    /// A control frame arrived on connection `conn` at adapter time `now_ms` (P1, P3, P4,
    /// P6; R7's frames). Frames on a connection out of service are ignored.
    pub fn handle_control(&mut self, conn: ConnId, bytes: &[u8], now_ms: u64) {
        self.deafness.heard(self.live.now());
        // Whatever it was, the answer (if any) goes at the next transmit.
        self.conns.mark_transmit(conn);
        if let Some(c) = self.conns.get(conn) {
            if let (LinkState::Down(_), Some(peer)) = (c.state(), c.peer()) {
                // Its transport failed first, then the peer's CLOSE came: if it says the peer
                // closed on purpose, the failure was that close, and the peer is not dialled.
                if let Ok(crate::wire::Frame::Close { reason }) = crate::wire::decode(bytes) {
                    if !matches!(reason, CloseReason::Unresponsive | CloseReason::Superseded) {
                        self.dials.closed(peer);
                    }
                }
                return;
            }
        }
        match self.conns.on_control(conn, bytes, now_ms, &mut self.libs) {
            Control::Handled => {}
            Control::Refused(reason) => self.cut_off(conn, Some(reason), Why::Refused),
            Control::Established { peer, superseded } => {
                self.dials.proven(peer, conn);
                self.actions.push_back(Action::Proven { peer });
                // P4: each loser's CLOSE goes out; its endpoint lingers.
                for k in superseded {
                    self.actions.push_back(Action::Transmit(k));
                }
            }
            Control::PeerClosed(then) => {
                let reason = (self.conns.get(conn))
                    .and_then(|c| c.closed_for())
                    .unwrap_or(CloseReason::Normal);
                let why = Why::PeerClosed(reason);
                // Nothing more goes out to a peer that closed (what its session still owes,
                // acknowledgements included, would be strays there).
                match then {
                    // The peer settled the duplicate first: out of service, lingering.
                    AfterClose::Linger => {}
                    AfterClose::AbandonAndClose => {
                        self.abandon(conn);
                        self.end_conn(conn, false, why);
                    }
                    AfterClose::Close => self.end_conn(conn, false, why),
                }
            }
            // The session queued a CLOSE naming the reason: it goes out, then the endpoint
            // closes.
            Control::ProtocolError(e) => {
                self.conns.refuse(conn, CloseReason::ProtocolError, now_ms);
                self.cut_off(conn, None, Why::ProtocolError(e))
            }
        }
    }

    /// Counts one message from connection `conn` against the per-peer limits at adapter time
    /// `now_ms` (D5). `false`: the peer is over them and is being cut off (CLOSE with
    /// [`CloseReason::Flood`]); the message is not to be handled.
    pub fn handle_charge(&mut self, conn: ConnId, now_ms: u64, what: Charge) -> bool {
        if self.conns.charge(conn, now_ms, what, self.limits) {
            return true;
        }
        self.cut_off(conn, Some(CloseReason::Flood), Why::Flood);
        false
    }

    /// `peer` sent more than a limit allows across its connections (a held namespace's
    /// backlog, D5): every open connection to it is cut off with [`CloseReason::Flood`].
    pub fn handle_flooded(&mut self, peer: u64) {
        for conn in self.conns.open_to(peer) {
            self.cut_off(conn, Some(CloseReason::Flood), Why::Backlog);
        }
    }

    /// Connection `conn`'s transport failed with `e` (D3): its sends end, its endpoint is
    /// closed at once, and if it was its peer's last connection the listening libraries hear
    /// `Down` and the receives tied to the peer end. A superseded connection's failure is
    /// expected (the peer closed its side): it only closes.
    pub fn handle_failed(&mut self, conn: ConnId, e: E) {
        let Some(c) = self.conns.get(conn) else {
            return;
        };
        let (key, peer) = (c.key(), c.peer().unwrap_or(0));
        // Open a while, nothing ever heard on it (a peer alive enough to accept it, or to
        // dial, then gave up on this node's silence): evidence this node may not hear.
        if let Some(l) = self.liveness {
            let open_ms = (self.live.now()).saturating_sub(c.deadlines().opened_live_ms());
            if c.session().phase() == Phase::Connecting && open_ms >= l.timeout_ms / 2 {
                self.deafness.cut_silent();
            }
        }
        let why = match c.state() {
            // Its endpoint is closing already (the adapter took it out): only the sends
            // still on it end.
            LinkState::Down(_) => None,
            LinkState::Superseded { .. } => Some(Why::Superseded),
            LinkState::Open => Some(Why::Failed),
        };
        let gone = self.conns.failed(conn, e, &mut self.libs);
        self.lost(Loss::Failed { key }, peer, Some(e));
        if let Some(why) = why {
            // A superseded one is closed here, not again when its linger ends.
            self.conns.retire(conn);
            self.push_close(conn, CloseHow::Forced, why);
        }
        self.peer_gone(gone, Why::Failed);
    }

    /// The transport of an endpoint the adapter already took out of service (closing, its
    /// connection perhaps forgotten) failed: the sends still in flight on it end.
    pub fn handle_retired_failed(&mut self, key: K, peer: Option<u64>, e: E) {
        self.lost(Loss::Failed { key }, peer.unwrap_or(0), Some(e));
    }

    /// Time passed (adapter time `now_ms`): the per-connection deadlines, one pass — a
    /// handshake not completed in time (P6, D5), withdrawals left unacknowledged (R7), the
    /// heartbeat (a PING due is sent; one unanswered too long closes the connection and ends
    /// what is in flight on it, D3) — and superseded connections whose linger is over (P4).
    pub fn handle_timeout(&mut self, now_ms: u64) {
        for (conn, check) in self.conns.sweep(&mut self.live, now_ms, self.liveness) {
            match check {
                Check::Expired(why) => {
                    // Silence that says this node may not hear: a PING unanswered, a
                    // connection that never brought a HELLO (a dial that reached a live
                    // peer, or a peer's dial).
                    if matches!(
                        why,
                        Expiry::Unresponsive | Expiry::Handshake(CloseReason::ProtocolError)
                    ) {
                        self.deafness.cut_silent();
                    }
                    if why == Expiry::Unresponsive {
                        self.abandon(conn);
                    }
                    self.cut_off(conn, Some(why.reason()), Why::Expired(why));
                }
                Check::PingQueued => self.actions.push_back(Action::Transmit(conn)),
                Check::Nothing => {}
            }
        }
        if let Some(l) = self.liveness {
            let conns = &self.conns;
            if (self.deafness).check(self.live.now(), l.timeout_ms, || conns.peers().len()) {
                self.actions.push_back(Action::Deaf);
            }
        }
        for (conn, gone) in self.conns.take_lingered(now_ms, &mut self.libs) {
            self.push_close(conn, CloseHow::Orderly, Why::Superseded);
            self.peer_gone(gone, Why::Superseded);
        }
        let (backoff, once) = match self.redial {
            Redial::Dial(backoff) => (backoff, false),
            // Reported at the first dial's time: a CLOSE late behind its endpoint's failure
            // has that long to say the peer closed on purpose.
            Redial::Report => (Backoff::default(), true),
            Redial::Off => return,
        };
        {
            let mut due = alloc::vec::Vec::new();
            let conns = &self.conns;
            let handshaking = |c: ConnId| {
                conns
                    .get(c)
                    .is_some_and(|c| c.is_open() && c.peer().is_none())
            };
            self.dials.due(now_ms, backoff, once, handshaking, &mut due);
            for (peer, addr) in due {
                self.actions.push_back(Action::Dial { peer, addr });
            }
        }
    }

    /// This side closes connection `conn` in order: if it is open, its session's CLOSE (with
    /// `reason`, or the one it already queued) goes out after anything queued before it, then
    /// the endpoint closes; a superseded one still lingering closes its endpoint now.
    pub fn close(&mut self, conn: ConnId, reason: Option<CloseReason>) {
        match self.conns.get(conn).map(|c| c.state()) {
            Some(LinkState::Open) => self.cut_off(conn, reason, Why::Local),
            Some(LinkState::Superseded { .. }) => {
                if self.conns.retire(conn) {
                    self.push_close(conn, CloseHow::Orderly, Why::Superseded);
                }
            }
            Some(LinkState::Down(_)) | None => {}
        }
    }

    /// Shutdown: every connection closes ([`close`](Self::close) with
    /// [`CloseReason::Normal`]).
    pub fn close_all(&mut self) {
        for conn in self.conns.ids() {
            self.close(conn, Some(CloseReason::Normal));
        }
    }

    fn cut_off(&mut self, conn: ConnId, reason: Option<CloseReason>, why: Why) {
        self.conns.cut_off(conn, reason);
        self.end_conn(conn, true, why);
    }

    /// Connection `conn` ends in order: what its session queued (this side's CLOSE) goes out
    /// if `transmit`, the endpoint closes, and if it was its peer's last connection what waits
    /// for the peer ends.
    fn end_conn(&mut self, conn: ConnId, transmit: bool, why: Why) {
        if transmit {
            self.actions.push_back(Action::Transmit(conn));
        }
        let gone = self.conns.end(conn, None, &mut self.libs);
        self.push_close(conn, CloseHow::Orderly, why);
        self.peer_gone(gone, why);
    }

    fn push_close(&mut self, conn: ConnId, how: CloseHow, why: Why) {
        self.actions.push_back(Action::Close { conn, how, why });
    }

    /// An unresponsive connection (no PONG in time, here or at the peer): what is in flight
    /// on it may never finish — UCX keeps a send to a receive queue nobody reads pending for
    /// ever, and its orderly close waits for it — so its sends, and the receives that wait
    /// for its peer if it is the peer's last connection, end now with `PeerDown`.
    fn abandon(&mut self, conn: ConnId) {
        let Some(c) = self.conns.get(conn) else {
            return;
        };
        let (key, peer) = (c.key(), c.peer());
        let last = peer.is_some_and(|p| self.conns.live_to(p) <= 1);
        let loss = Loss::Unresponsive { key, peer, last };
        self.lost(loss, peer.unwrap_or(0), None);
    }

    /// `peer` has no connection left (its last ended for `why`): the receives that said they
    /// wait for it end (it failed) or are cancelled (it closed in order; one already matched
    /// completes); if a fault took it ([`dials_after`]) and it told where it listens, it is
    /// dialled again (or reported, [`Redial::Report`]).
    fn peer_gone(&mut self, gone: Option<PeerGone<E>>, why: Why) {
        if let Some(gone) = gone {
            self.deafness.peer_lost();
            let PeerGone { peer, cause, .. } = gone;
            let failed = cause.is_some();
            self.lost(Loss::PeerGone { peer, failed }, peer, cause);
            let dial = self.redial != Redial::Off && dials_after(why, gone.told_ours);
            // Never this node's own address (a peer that told it wants this node to dial
            // itself).
            if let Some(addr) = gone.addr.filter(|&a| dial && Some(a) != self.advertised) {
                self.dials.lost(peer, addr);
            }
        }
    }

    /// D3: the operations `loss` leaves unfinishable end (or are cancelled).
    fn lost(&mut self, loss: Loss<K>, peer: u64, cause: Option<E>) {
        for (op, how) in self.ops.affected_by(loss) {
            self.actions.push_back(match how {
                Ending::End => Action::End { op, peer, cause },
                Ending::Cancel => Action::Cancel { op, peer },
            });
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::engine::{
        Liveness, Next, Ops, PeerEvent, PeerLimits, Pending, SUPERSEDED_LINGER_MS,
    };
    use crate::wire::{self, Role};
    use crate::{Identity, Registry, TagLayout};
    use alloc::boxed::Box;
    use alloc::vec::Vec;

    /// A send in flight on a connection (by key), or a receive (from a peer, or any).
    #[derive(Debug)]
    enum TOp {
        Send(u32),
        Recv(Option<u64>),
    }

    impl Pending for TOp {
        fn route_deadline(&self) -> Option<u64> {
            None
        }
        fn request(&self) -> Option<u64> {
            None
        }
    }

    impl Waits<u32> for TOp {
        fn sending_on(&self) -> Option<u32> {
            match self {
                TOp::Send(k) => Some(*k),
                TOp::Recv(_) => None,
            }
        }
        fn receiving_from(&self) -> Option<u64> {
            match self {
                TOp::Recv(p) => *p,
                TOp::Send(_) => None,
            }
        }
    }

    type E = Engine<'static, u32, (), TOp, u8, 64>;

    struct Side {
        reg: &'static Registry<64>,
        me: Identity,
        e: E,
    }

    fn side(seed: u8, liveness: Option<Liveness>, limits: PeerLimits) -> Side {
        let reg = Box::leak(Box::new(Registry::new(TagLayout::DEFAULT)));
        Side {
            reg,
            me: Identity::from_seed(&[seed; 32]),
            e: Engine::new(reg, [seed as u64, 9], 0, liveness, limits),
        }
    }

    fn two() -> (Side, Side) {
        let d = PeerLimits::default();
        (side(1, None, d), side(2, None, d))
    }

    fn open(a: &mut Side, b: &mut Side, key: u32) -> (ConnId, ConnId) {
        let l = *a.reg.layout();
        let i = a.e.conns.add(key, Role::Initiator, &a.me, &l, 0, 0, ());
        let j = b.e.conns.add(key, Role::Acceptor, &b.me, &l, 0, 0, ());
        (i, j)
    }

    /// Delivers what each side's session queued to the other until quiet (at time `now`); the
    /// actions each side's engine asked for, in order.
    fn pump(a: &mut Side, i: ConnId, b: &mut Side, j: ConnId, now: u64) -> [Vec<Action<u8>>; 2] {
        let mut buf = [0u8; wire::MAX_FRAME_LEN];
        let mut got = [Vec::new(), Vec::new()];
        for _ in 0..8 {
            deliver(a, i, b, j, now, &mut buf);
            deliver(b, j, a, i, now, &mut buf);
            for (s, out) in [(&mut *a, 0), (&mut *b, 1)] {
                got[out].extend(actions(s));
            }
        }
        got
    }

    fn deliver(from: &mut Side, x: ConnId, to: &mut Side, y: ConnId, now: u64, buf: &mut [u8]) {
        let Some(c) = from.e.conns.get_mut(x) else {
            return;
        };
        while let Ok(Some(n)) = c.session_mut().poll_transmit(from.reg, buf) {
            to.e.handle_control(y, &buf[..n], now);
        }
    }

    /// Two connections between `a` and `b`, opened from each side at once (P4): the one `a`
    /// keeps, the one it supersedes, and the actions `a`'s engine asked for meanwhile.
    fn duplicate(a: &mut Side, b: &mut Side) -> (ConnId, ConnId, Vec<Action<u8>>) {
        let (i1, j1) = open(a, b, 1);
        let (j2, i2) = open(b, a, 2);
        let mut at_a = Vec::new();
        for _ in 0..2 {
            at_a.extend(pump(a, i1, b, j1, 0)[0].clone());
            at_a.extend(pump(a, i2, b, j2, 0)[0].clone());
        }
        let kept = a.e.conns.serving(b.me.token()).unwrap();
        (kept, if kept == i1 { i2 } else { i1 }, at_a)
    }

    /// Sends what `from`'s engine names in [`Engine::transmit_due`], through its outboxes, to
    /// `to`'s connection `y`; how many frames went.
    fn flush_due(from: &mut Side, to: &mut Side, y: ConnId) -> usize {
        let mut buf = [0u8; wire::MAX_FRAME_LEN];
        let mut frames = Vec::new();
        for x in from.e.transmit_due() {
            if let Some(mut out) = from.e.outbox(x) {
                while let Some(o) = out.next(&mut buf) {
                    if let Out::Frame(n) = o {
                        frames.push(buf[..n].to_vec());
                    }
                }
            }
        }
        for f in &frames {
            to.e.handle_control(y, f, 0);
        }
        frames.len()
    }

    #[test]
    fn an_idle_transmit_pass_visits_no_connection() {
        let (mut a, mut b) = two();
        let (i, j) = open(&mut a, &mut b, 7);
        assert_eq!(a.e.transmit_due(), [i], "a new connection: its HELLO");
        // The handshake through the due sets alone.
        for _ in 0..6 {
            flush_due(&mut a, &mut b, j);
            flush_due(&mut b, &mut a, i);
        }
        assert!(a.e.conns.serving(b.me.token()).is_ok());
        assert!(b.e.conns.serving(a.me.token()).is_ok());
        assert!(a.e.transmit_due().is_empty() && b.e.transmit_due().is_empty());
        // A registration is for every open connection; then idle again.
        let lib = a.e.register("late").unwrap();
        assert_eq!(a.e.transmit_due(), [i]);
        // Control: an outbox that is not drained (the transport not ready) keeps it due.
        assert!(a.e.outbox(i).is_some(), "taken, and nothing sent");
        assert_eq!(a.e.transmit_due(), [i], "still due");
        assert_eq!(flush_due(&mut a, &mut b, j), 1, "the ANNOUNCE");
        let name = crate::Name::new("late").unwrap();
        let at_b = b.e.conns.get(j).unwrap().session().directory();
        assert!(at_b.lookup(&name).is_some());
        assert!(a.e.transmit_due().is_empty());
        // A frame that asks for an answer marks its connection: a WITHDRAW's acknowledgement.
        a.e.release(lib);
        assert_eq!(flush_due(&mut a, &mut b, j), 1, "the WITHDRAW");
        assert_eq!(b.e.transmit_due(), [j]);
        assert_eq!(flush_due(&mut b, &mut a, i), 1, "the WITHDRAW-ACK");
        // Any frame marks its connection; this one has nothing to answer.
        assert_eq!(flush_due(&mut a, &mut b, j), 0);
        assert!(b.e.transmit_due().is_empty() && a.e.transmit_due().is_empty());
    }

    fn actions(s: &mut Side) -> Vec<Action<u8>> {
        core::iter::from_fn(|| s.e.poll_action()).collect()
    }

    fn start(ops: &mut Ops<TOp, u8>, op: TOp) -> OpId {
        ops.start(Next::Wait(op))
    }

    #[test]
    fn a_failed_connection_ends_its_sends_closes_at_once_and_then_the_peers_receives() {
        let (mut a, mut b) = two();
        let (i, j) = open(&mut a, &mut b, 7);
        let established = pump(&mut a, i, &mut b, j, 0);
        let tb = b.me.token();
        assert!(established[0].contains(&Action::Proven { peer: tb }));
        let lib = a.e.register("lib").unwrap();
        a.e.libs.listen_peers(lib, [tb]).unwrap();
        assert_eq!(a.e.libs.peer_event(lib), Some(PeerEvent::Up { peer: tb }));
        let send = start(&mut a.e.ops, TOp::Send(7));
        let other_send = start(&mut a.e.ops, TOp::Send(8));
        let from_b = start(&mut a.e.ops, TOp::Recv(Some(tb)));
        let any = start(&mut a.e.ops, TOp::Recv(None));
        let from_other = start(&mut a.e.ops, TOp::Recv(Some(tb ^ 1)));

        a.e.handle_failed(i, 42);
        let got = actions(&mut a);
        assert_eq!(
            got,
            [
                Action::End {
                    op: send,
                    peer: tb,
                    cause: Some(42)
                },
                Action::Close {
                    conn: i,
                    how: CloseHow::Forced,
                    why: Why::Failed
                },
                Action::End {
                    op: from_b,
                    peer: tb,
                    cause: Some(42)
                },
            ]
        );
        assert!(!a.e.conns.get(i).unwrap().is_open());
        assert!(matches!(
            a.e.libs.peer_event(lib),
            Some(PeerEvent::Down { peer, cause: Some(42), .. }) if peer == tb
        ));
        // What the loss does not reach waits on.
        for op in [other_send, any, from_other] {
            assert!(a.e.ops.get(op).is_some());
        }
        // A second report of the same failure closes nothing again and ends nothing else.
        a.e.handle_failed(i, 43);
        let again = actions(&mut a);
        let waiting = [other_send, any, from_other];
        let ends = |x: &Action<u8>| matches!(x, Action::End { op, .. } if waiting.contains(op));
        assert!(!again.iter().any(ends), "{again:?}");
        assert!(
            !again.iter().any(|x| matches!(x, Action::Close { .. })),
            "{again:?}"
        );
    }

    #[test]
    fn a_peers_orderly_close_sends_what_is_queued_closes_in_order_and_cancels_its_receives() {
        let (mut a, mut b) = two();
        let (i, j) = open(&mut a, &mut b, 7);
        pump(&mut a, i, &mut b, j, 0);
        let tb = b.me.token();
        let send = start(&mut a.e.ops, TOp::Send(7));
        let from_b = start(&mut a.e.ops, TOp::Recv(Some(tb)));

        b.e.close(j, Some(CloseReason::Normal));
        let closing = actions(&mut b);
        let (how, why) = (CloseHow::Orderly, Why::Local);
        assert_eq!(
            closing,
            [Action::Transmit(j), Action::Close { conn: j, how, why }]
        );
        let [at_a, _] = pump(&mut a, i, &mut b, j, 0);
        let why = Why::PeerClosed(CloseReason::Normal);
        // Nothing more is sent to a peer that closed.
        assert_eq!(
            at_a,
            [
                Action::Close { conn: i, how, why },
                Action::Cancel {
                    op: from_b,
                    peer: b.me.token()
                },
            ]
        );
        // A send in flight on an orderly closed connection finishes as the transport says.
        assert!(a.e.ops.get(send).is_some());
        // Closing again (or a frame after the close) asks for nothing.
        b.e.close(j, Some(CloseReason::Normal));
        assert!(actions(&mut b).is_empty());
    }

    #[test]
    fn an_unresponsive_peer_is_pinged_then_its_work_ends_before_the_close() {
        let live = Liveness {
            interval_ms: 10,
            timeout_ms: 50,
        };
        let (mut a, mut b) = (
            side(1, Some(live), PeerLimits::default()),
            side(2, None, PeerLimits::default()),
        );
        let (i, j) = open(&mut a, &mut b, 7);
        pump(&mut a, i, &mut b, j, 0);
        let tb = b.me.token();
        let send = start(&mut a.e.ops, TOp::Send(7));
        let from_b = start(&mut a.e.ops, TOp::Recv(Some(tb)));
        let mut seen = Vec::new();
        let mut now = 0;
        while !seen.iter().any(|x| matches!(x, Action::Close { .. })) {
            now += 10;
            assert!(now < 1000, "never expired: {seen:?}");
            a.e.handle_timeout(now);
            seen.extend(actions(&mut a));
        }
        assert_eq!(seen[0], Action::Transmit(i), "a PING first");
        let tail = &seen[seen.len() - 5..];
        let why = Why::Expired(Expiry::Unresponsive);
        assert_eq!(
            tail,
            [
                Action::End {
                    op: send,
                    peer: tb,
                    cause: None
                },
                Action::End {
                    op: from_b,
                    peer: tb,
                    cause: None
                },
                Action::Transmit(i),
                Action::Close {
                    conn: i,
                    how: CloseHow::Orderly,
                    why
                },
                // The peer's last connection ended in order: the receive is cancelled too
                // (already ended: the adapter finds it finished and leaves it).
                Action::Cancel {
                    op: from_b,
                    peer: tb
                },
            ]
        );
    }

    /// The deadline pass runs when something changed or a deadline came, not on every
    /// `handle_timeout`; it misses no deadline (a PING at its interval, to the millisecond) and
    /// `poll_timeout` names the one it waits for.
    #[test]
    fn an_idle_deadline_pass_visits_no_connection_and_misses_no_deadline() {
        let live = Liveness {
            interval_ms: 10,
            timeout_ms: 50,
        };
        let d = PeerLimits::default();
        let (mut a, mut b) = (side(1, Some(live), d), side(2, Some(live), d));
        let (i, j) = open(&mut a, &mut b, 7);
        pump(&mut a, i, &mut b, j, 0);
        let timeout = |a: &mut Side, now| {
            a.e.handle_timeout(now);
            actions(a)
        };
        // Established: the first PING is due at once, its PONG comes back.
        assert_eq!(timeout(&mut a, 1), [Action::Transmit(i)]);
        pump(&mut a, i, &mut b, j, 1);
        // Control: what changed (the PONG) makes the next call pass over the connections.
        let before = a.e.conns.deadline_passes();
        assert!(timeout(&mut a, 2).is_empty());
        assert_eq!(
            a.e.conns.deadline_passes(),
            before + 1,
            "a frame arrived since"
        );
        // Idle until the next PING: no pass at all.
        for now in 2..11 {
            assert!(timeout(&mut a, now).is_empty(), "nothing due at {now}");
            assert_eq!(a.e.conns.quiet_until(), Some(11), "the next PING");
        }
        assert_eq!(a.e.conns.deadline_passes(), before + 1, "idle: no pass");
        assert_eq!(
            timeout(&mut a, 11),
            [Action::Transmit(i)],
            "the PING on time"
        );
        assert_eq!(a.e.conns.deadline_passes(), before + 2);
        // A change of the heartbeat's settings is seen at once, as is a new connection.
        a.e.set_liveness(None);
        assert!(timeout(&mut a, 12).is_empty());
        assert_eq!(a.e.conns.deadline_passes(), before + 3);
        assert_eq!(
            a.e.conns.quiet_until(),
            Some(u64::MAX),
            "no heartbeat: none"
        );
        let l = *a.reg.layout();
        a.e.conns.add(8, Role::Initiator, &a.me, &l, 12, 12, ());
        assert_eq!(
            a.e.conns.quiet_until(),
            None,
            "a new connection: a pass is due"
        );
        assert!(timeout(&mut a, 13).is_empty());
        assert_eq!(a.e.conns.deadline_passes(), before + 4);
        let handshake = 12 + super::super::live::HANDSHAKE_TIMEOUT_MS;
        assert_eq!(
            a.e.conns.quiet_until(),
            Some(handshake),
            "its handshake deadline"
        );
        // poll_timeout names it too (the engine's other timers aside).
        assert!(a.e.poll_timeout(13).is_some_and(|t| t <= handshake));
    }

    #[test]
    fn a_flooding_peer_is_cut_off_once() {
        let limits = PeerLimits {
            control_per_s: 3,
            unwanted_am_per_s: 3,
        };
        let (mut a, mut b) = (side(1, None, limits), side(2, None, limits));
        let (i, j) = open(&mut a, &mut b, 7);
        pump(&mut a, i, &mut b, j, 0);
        for _ in 0..3 {
            assert!(a.e.handle_charge(i, 5, Charge::Unwanted));
        }
        assert!(actions(&mut a).is_empty());
        assert!(!a.e.handle_charge(i, 5, Charge::Unwanted));
        let (how, why) = (CloseHow::Orderly, Why::Flood);
        assert_eq!(
            actions(&mut a),
            [Action::Transmit(i), Action::Close { conn: i, how, why }]
        );
        assert_eq!(
            a.e.conns.get(i).unwrap().closed_for(),
            Some(CloseReason::Flood)
        );
        // Over a held namespace's backlog: every open connection to the peer, once.
        let (mut a, mut b) = two();
        let (i, j) = open(&mut a, &mut b, 7);
        pump(&mut a, i, &mut b, j, 0);
        a.e.handle_flooded(b.me.token());
        a.e.handle_flooded(b.me.token());
        let why = Why::Backlog;
        assert_eq!(
            actions(&mut a),
            [Action::Transmit(i), Action::Close { conn: i, how, why }]
        );
    }

    #[test]
    fn a_superseded_connection_that_fails_while_lingering_is_closed_once() {
        let (mut a, mut b) = two();
        let (kept, lost, _) = duplicate(&mut a, &mut b);
        a.e.handle_failed(lost, 5);
        let (how, why) = (CloseHow::Forced, Why::Superseded);
        assert_eq!(
            actions(&mut a),
            [Action::Close {
                conn: lost,
                how,
                why
            }]
        );
        a.e.handle_timeout(SUPERSEDED_LINGER_MS);
        assert!(
            actions(&mut a).is_empty(),
            "not closed again at the linger's end"
        );
        assert!(a.e.conns.get(kept).unwrap().is_open());
    }

    #[test]
    fn a_superseded_connection_closes_once_when_its_linger_ends() {
        let (mut a, mut b) = two();
        let (kept, lost, at_a) = duplicate(&mut a, &mut b);
        assert!(
            at_a.contains(&Action::Transmit(lost)),
            "its CLOSE goes out: {at_a:?}"
        );
        a.e.handle_timeout(SUPERSEDED_LINGER_MS - 1);
        assert!(actions(&mut a).is_empty());
        a.e.handle_timeout(SUPERSEDED_LINGER_MS);
        let (how, why) = (CloseHow::Orderly, Why::Superseded);
        assert_eq!(
            actions(&mut a),
            [Action::Close {
                conn: lost,
                how,
                why
            }]
        );
        a.e.handle_timeout(SUPERSEDED_LINGER_MS + 1);
        a.e.close_all();
        // Shutdown closes the one kept; the lingering one is not closed twice.
        let (how, why) = (CloseHow::Orderly, Why::Local);
        assert_eq!(
            actions(&mut a),
            [
                Action::Transmit(kept),
                Action::Close {
                    conn: kept,
                    how,
                    why
                }
            ]
        );
    }

    #[test]
    fn an_engine_dropped_with_connections_open_gives_its_pins_back() {
        let (mut a, mut b) = two();
        let (i, j) = open(&mut a, &mut b, 7);
        let lib = a.e.register("lib").unwrap();
        let id = a.e.libs().ns(lib).unwrap().id();
        pump(&mut a, i, &mut b, j, 0);
        // Told to the peer, then released: quarantined while the peer may still send to it.
        drop(a.e.release(lib));
        assert!(a.reg.is_quarantined(id));
        let reg = a.reg;
        drop(a);
        assert!(
            !reg.is_quarantined(id),
            "the dropped engine's pin went back"
        );
        assert_eq!(reg.quarantined_count(), 0);
    }

    fn dials(s: &mut Side) -> Vec<(u64, wire::Address)> {
        (actions(s).into_iter())
            .filter_map(|x| match x {
                Action::Dial { peer, addr } => Some((peer, addr)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_peer_lost_to_a_fault_is_dialled_at_its_address_until_it_is_back() {
        use crate::engine::{Backoff, Redial};
        let (mut a, mut b) = two();
        let (addr_a, addr_b) = (wire::Address::Local(11), wire::Address::Local(22));
        let (ta, tb) = (a.me.token(), b.me.token());
        a.e.set_advertised(Some(addr_a));
        b.e.set_advertised(Some(addr_b));
        let backoff = Backoff {
            first_ms: 100,
            max_ms: 400,
            give_up_ms: 10_000,
        };
        a.e.set_redial(Redial::Dial(backoff));
        b.e.set_redial(Redial::Dial(backoff));
        let lib = a.e.register("lib").unwrap();
        a.e.libs.listen_peers(lib, [0u64; 0]).unwrap();
        let i = a.e.add_conn(1, Role::Initiator, &a.me, 0, ());
        let j = b.e.add_conn(1, Role::Acceptor, &b.me, 0, ());
        pump(&mut a, i, &mut b, j, 0);
        assert_eq!(
            a.e.conns.get(i).unwrap().session().peer_addr(),
            Some(addr_b)
        );
        assert_eq!(
            b.e.conns.get(j).unwrap().session().peer_addr(),
            Some(addr_a)
        );
        let pair = a.e.rx_pair(tb);

        a.e.handle_failed(i, 5);
        b.e.handle_failed(j, 5);
        assert_eq!(dials(&mut a), [], "dialled on the schedule, not at once");
        a.e.handle_timeout(1_000);
        assert_eq!(dials(&mut a), []);
        // (poll_timeout also names the first stray sweep, due at once)
        let due = a.e.dials.next_ms().unwrap();
        assert!((1_050..=1_100).contains(&due), "{due}");
        assert!(a.e.poll_timeout(1_000).unwrap() <= due);
        a.e.handle_timeout(due);
        assert_eq!(dials(&mut a), [(tb, addr_b)]);
        // the dial's connection is still handshaking when the next is due: no second dial
        let i2 = a.e.add_conn(2, Role::Initiator, &a.me, due, ());
        a.e.dial_started(tb, i2);
        a.e.handle_timeout(due + 1_000);
        assert_eq!(dials(&mut a), []);
        // b saw the failure too and dials a on its own schedule; a's dial gets there first
        assert_eq!(b.e.redialling().collect::<Vec<_>>(), [ta]);
        let j2 = b.e.add_conn(2, Role::Acceptor, &b.me, due, ());
        pump(&mut a, i2, &mut b, j2, due + 1_000);
        assert_eq!(a.e.redialling().count(), 0);
        assert_eq!(a.e.redial_stats().reconnected, 1);
        assert_eq!(
            a.e.rx_pair(tb),
            pair,
            "the same pair value after the reconnect"
        );
        let events: Vec<_> = core::iter::from_fn(|| a.e.libs.peer_event(lib)).collect();
        assert!(
            matches!(
                events[..],
                [
                    PeerEvent::Up { .. },
                    PeerEvent::Down { .. },
                    PeerEvent::Up { .. }
                ]
            ),
            "{events:?}"
        );
        assert_eq!(
            a.e.conns.get(i2).unwrap().session().peer_addr(),
            Some(addr_b)
        );

        // An orderly close is not a fault: nothing is dialled (control: the same pair of
        // engines dialled after the failure above).
        b.e.close(j2, Some(CloseReason::Normal));
        pump(&mut a, i2, &mut b, j2, due + 2_000);
        for t in [due + 2_000, due + 3_000, due + 20_000] {
            a.e.handle_timeout(t);
            assert_eq!(dials(&mut a), []);
        }
        assert_eq!(a.e.redialling().count(), 0);
    }

    #[test]
    fn a_peer_that_said_unresponsive_is_dialled_and_a_restart_at_its_address_ends_that() {
        use crate::engine::{Backoff, Redial};
        let (mut a, mut b) = two();
        let addr_b = wire::Address::Local(22);
        let tb = b.me.token();
        b.e.set_advertised(Some(addr_b));
        a.e.set_redial(Redial::Dial(Backoff::default()));
        let i = a.e.add_conn(1, Role::Initiator, &a.me, 0, ());
        let j = b.e.add_conn(1, Role::Acceptor, &b.me, 0, ());
        pump(&mut a, i, &mut b, j, 0);
        // b found a unresponsive (a was stopped, say): its CLOSE says so. a told no address,
        // so a dials whatever the tokens; b, which cannot, does not even report.
        b.e.set_redial(Redial::Report);
        b.e.close(j, Some(CloseReason::Unresponsive));
        pump(&mut a, i, &mut b, j, 0);
        assert_eq!(dials(&mut b), []);
        a.e.handle_timeout(0);
        let due = a.e.dials.next_ms().unwrap();
        a.e.handle_timeout(due);
        assert_eq!(dials(&mut a), [(tb, addr_b)]);
        // b restarted with a new identity at the same address: the dial reaches it
        let mut c = side(3, None, PeerLimits::default());
        let i2 = a.e.add_conn(2, Role::Initiator, &a.me, due, ());
        a.e.dial_started(tb, i2);
        let j2 = c.e.add_conn(2, Role::Acceptor, &c.me, due, ());
        pump(&mut a, i2, &mut c, j2, due);
        assert_eq!(a.e.redialling().count(), 0, "b is gone for good");
        assert_eq!(a.e.redial_stats().given_up, 1);
        assert_eq!(a.e.redial_stats().reconnected, 0);

        // With Report, the adapter is told once, at the first dial's time (host mode).
        a.e.set_redial(Redial::Report);
        c.e.set_advertised(Some(wire::Address::Local(33)));
        pump(&mut a, i2, &mut c, j2, due);
        c.e.handle_failed(j2, 1);
        a.e.handle_failed(i2, 1);
        let tc = c.me.token();
        assert_eq!(dials(&mut a), []);
        a.e.handle_timeout(due);
        a.e.handle_timeout(due + 200);
        assert_eq!(dials(&mut a), [(tc, wire::Address::Local(33))]);
        a.e.handle_timeout(due + 60_000);
        assert_eq!(dials(&mut a), [], "told once: no schedule");
        // Waited on, not told again: the host's connection brings c back (counted), and one
        // that never comes back is given up at the schedule's end.
        assert_eq!(a.e.redialling().collect::<Vec<_>>(), [tc]);
        let before = a.e.redial_stats();
        let i3 = a.e.add_conn(3, Role::Initiator, &a.me, due + 60_000, ());
        a.e.dial_started(tc, i3);
        let j3 = c.e.add_conn(3, Role::Acceptor, &c.me, due + 60_000, ());
        pump(&mut a, i3, &mut c, j3, due + 60_000);
        assert_eq!(a.e.redialling().count(), 0);
        assert_eq!(a.e.redial_stats().reconnected, before.reconnected + 1);
        c.e.handle_failed(j3, 1);
        a.e.handle_failed(i3, 1);
        let t = due + 70_000;
        a.e.handle_timeout(t);
        a.e.handle_timeout(t + 200);
        assert_eq!(dials(&mut a), [(tc, wire::Address::Local(33))]);
        a.e.handle_timeout(t + Backoff::default().give_up_ms);
        assert_eq!(dials(&mut a), []);
        assert_eq!(a.e.redialling().count(), 0, "given up");
        assert_eq!(a.e.redial_stats().given_up, before.given_up + 1);
    }

    #[test]
    fn a_redial_replaces_the_older_connection_and_equal_ranks_are_all_kept() {
        for redial in [true, false] {
            let (mut a, mut b) = two();
            // a, the dialler, has the higher token (it dials when the lower told no address)
            if a.me.token() < b.me.token() {
                core::mem::swap(&mut a, &mut b);
            }
            let (ta, tb) = (a.me.token(), b.me.token());
            let i1 = a.e.add_conn(1, Role::Initiator, &a.me, 0, ());
            let j1 = b.e.add_conn(1, Role::Acceptor, &b.me, 0, ());
            pump(&mut a, i1, &mut b, j1, 0);
            // a's side of the link failed; b has not noticed yet
            a.e.handle_failed(i1, 5);
            actions(&mut a);
            let i2 = a.e.add_conn(2, Role::Initiator, &a.me, 0, ());
            if redial {
                a.e.dial_started(tb, i2);
            }
            let j2 = b.e.add_conn(2, Role::Acceptor, &b.me, 0, ());
            pump(&mut a, i2, &mut b, j2, 0);
            if redial {
                assert!(b.e.conns.get(j2).unwrap().serves(ta));
                assert!(
                    !b.e.conns.get(j1).unwrap().is_open(),
                    "the old one is replaced"
                );
                assert_eq!((a.e.conns.live_to(tb), b.e.conns.live_to(ta)), (1, 1));
            } else {
                // control: both were opened by the higher token and rank alike, so b keeps
                // both (the dead one ends when its heartbeat or transport says so); P4's
                // tie-break alone used to close both, leaving a with none
                assert_eq!((a.e.conns.live_to(tb), b.e.conns.live_to(ta)), (1, 2));
            }
        }
    }

    /// A redial that reaches another process than the one it named (a hostile peer told the
    /// address of an honest one, or a process restarted there) replaces nothing: both sides
    /// rank it below their connection, close it, and keep the old one — whichever token is
    /// lower. (A redial that reaches its peer replaces the old one: the test above.)
    #[test]
    fn a_dial_that_reaches_another_process_replaces_nothing() {
        for swap in [false, true] {
            let (mut a, mut b) = two();
            if swap {
                core::mem::swap(&mut a, &mut b);
            }
            let (ta, tb) = (a.me.token(), b.me.token());
            let i1 = a.e.add_conn(1, Role::Initiator, &a.me, 0, ());
            let j1 = b.e.add_conn(1, Role::Acceptor, &b.me, 0, ());
            pump(&mut a, i1, &mut b, j1, 0);
            // a dials a lost peer at the address it told, which is b's.
            let i2 = a.e.add_conn(2, Role::Initiator, &a.me, 0, ());
            a.e.dial_started(0xdead_beef, i2);
            let j2 = b.e.add_conn(2, Role::Acceptor, &b.me, 0, ());
            pump(&mut a, i2, &mut b, j2, 0);
            assert!(
                a.e.conns.get(i1).unwrap().is_open(),
                "a kept its connection"
            );
            assert!(
                b.e.conns.get(j1).unwrap().is_open(),
                "b kept its connection"
            );
            assert!(!a.e.conns.get(i2).unwrap().is_open());
            assert!(!b.e.conns.get(j2).unwrap().is_open());
            assert_eq!((a.e.conns.live_to(tb), b.e.conns.live_to(ta)), (1, 1));
        }
    }

    #[test]
    fn a_close_seen_after_its_endpoints_failure_means_no_dial() {
        use crate::engine::{Backoff, Redial};
        for close_arrives in [true, false] {
            let (mut a, mut b) = two();
            b.e.set_advertised(Some(wire::Address::Local(22)));
            a.e.set_redial(Redial::Dial(Backoff::default()));
            let i = a.e.add_conn(1, Role::Initiator, &a.me, 0, ());
            let j = b.e.add_conn(1, Role::Acceptor, &b.me, 0, ());
            pump(&mut a, i, &mut b, j, 0);
            // b cuts a off on purpose (say a broke the protocol); a sees its endpoint fail
            // before the CLOSE is read
            b.e.close(j, Some(CloseReason::ProtocolError));
            a.e.handle_failed(i, 5);
            if close_arrives {
                let mut buf = [0u8; wire::MAX_FRAME_LEN];
                deliver(&mut b, j, &mut a, i, 0, &mut buf);
            }
            a.e.handle_timeout(0);
            a.e.handle_timeout(1_000);
            let got = dials(&mut a);
            if close_arrives {
                assert_eq!(got, [], "closed on purpose: not dialled");
            } else {
                // control: the same failure without the CLOSE is a fault, dialled
                assert_eq!(got, [(b.me.token(), wire::Address::Local(22))]);
            }
        }
    }

    #[test]
    fn a_peer_cut_off_for_a_protocol_error_is_refused_when_it_comes_back_then_let_in() {
        use crate::engine::REFUSE_MS;
        let (mut a, mut b) = two();
        let ta = a.me.token();
        let i = a.e.add_conn(1, Role::Initiator, &a.me, 0, ());
        let j = b.e.add_conn(1, Role::Acceptor, &b.me, 0, ());
        pump(&mut a, i, &mut b, j, 0);
        // a breaks the protocol (a second HELLO, say: here, garbage): b cuts it off
        b.e.handle_control(j, b"TS garbage", 100);
        assert!(actions(&mut b).contains(&Action::Close {
            conn: j,
            how: CloseHow::Orderly,
            why: Why::ProtocolError(SessionError::Wire(wire::WireError::UnsupportedVersion(
                b' '
            )))
        }));
        // a comes back at once (its own redial, or a new connect): refused with the reason
        for (t, refused) in [(1_000, true), (100 + REFUSE_MS, false)] {
            let i2 = a.e.add_conn(t as u32, Role::Initiator, &a.me, t, ());
            let j2 = b.e.add_conn(t as u32, Role::Acceptor, &b.me, t, ());
            let got = pump(&mut a, i2, &mut b, j2, t);
            let closed = got[1]
                .iter()
                .any(|x| matches!(x, Action::Close { conn, why: Why::Refused, .. } if *conn == j2));
            assert_eq!(closed, refused, "at {t}");
            assert_eq!(b.e.conns.live_to(ta), usize::from(!refused), "at {t}");
            if refused {
                assert_eq!(
                    a.e.conns.get(i2).unwrap().closed_for(),
                    Some(CloseReason::ProtocolError),
                    "a hears why"
                );
            }
        }
    }

    /// Moves one frame queued on `from`'s connection `x` to `to`'s `y`; whether there was one.
    fn deliver_one(from: &mut Side, x: ConnId, to: &mut Side, y: ConnId, now: u64) -> bool {
        let mut buf = [0u8; wire::MAX_FRAME_LEN];
        let Some(c) = from.e.conns.get_mut(x) else {
            return false;
        };
        match c.session_mut().poll_transmit(from.reg, &mut buf) {
            Ok(Some(n)) => {
                to.e.handle_control(y, &buf[..n], now);
                true
            }
            _ => false,
        }
    }

    #[test]
    fn a_peer_whose_last_connection_lingers_out_is_gone() {
        let (mut a, mut b) = two();
        if a.me.token() > b.me.token() {
            core::mem::swap(&mut a, &mut b);
        }
        let tb = b.me.token();
        let lib = a.e.register("lib").unwrap();
        a.e.libs.listen_peers(lib, [0u64; 0]).unwrap();
        // Y, opened by b (the higher token), established both ways
        let y_b = b.e.add_conn(1, Role::Initiator, &b.me, 0, ());
        let y_a = a.e.add_conn(1, Role::Acceptor, &a.me, 0, ());
        pump(&mut b, y_b, &mut a, y_a, 0);
        assert_eq!(a.e.libs.peer_event(lib), Some(PeerEvent::Up { peer: tb }));
        // X, opened by a (the lower token: it ranks above Y), established at b only
        let x_a = a.e.add_conn(2, Role::Initiator, &a.me, 0, ());
        let x_b = b.e.add_conn(2, Role::Acceptor, &b.me, 0, ());
        assert!(deliver_one(&mut a, x_a, &mut b, x_b, 0), "a's HELLO");
        assert!(
            deliver_one(&mut b, x_b, &mut a, x_a, 0),
            "b's HELLO (its PROOF held)"
        );
        assert!(deliver_one(&mut a, x_a, &mut b, x_b, 0), "a's PROOF");
        assert!(b.e.conns.get(x_b).unwrap().serves(a.me.token()));
        // b supersedes Y: its CLOSE reaches a, which lingers Y; then X fails at a before b's
        // PROOF came: a has no connection to b left
        let mut buf = [0u8; wire::MAX_FRAME_LEN];
        deliver(&mut b, y_b, &mut a, y_a, 0, &mut buf);
        assert!(!a.e.conns.get(y_a).unwrap().is_open(), "Y lingers at a");
        a.e.handle_failed(x_a, 5);
        actions(&mut a);
        assert_eq!(a.e.conns.live_to(tb), 0);
        assert_eq!(a.e.libs.peer_event(lib), None, "no Down yet: Y lingers");
        // Y's linger ends: it was b's last connection here, so b is gone
        a.e.handle_timeout(SUPERSEDED_LINGER_MS);
        actions(&mut a);
        assert!(matches!(
            a.e.libs.peer_event(lib),
            Some(PeerEvent::Down { peer, cause: None, reason: Some(CloseReason::Superseded) }) if peer == tb
        ));
        assert!(!a.e.conns.get(y_a).unwrap().is_open());
        a.e.handle_timeout(2 * SUPERSEDED_LINGER_MS);
        assert_eq!(a.e.libs.peer_event(lib), None, "Down once");
    }
}
