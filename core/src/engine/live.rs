//! The per-connection deadlines: the handshake's (P6, D5), the withdrawal acknowledgements'
//! (R7) and the heartbeat's ([`Liveness`], on a clock that counts only the time the node
//! progresses, [`LiveClock`]). No allocation: usable without the `alloc` feature.

use crate::session::{Phase, Session};
use crate::wire::CloseReason;

/// How long (ms) a new connection may take to complete its handshake (HELLOs and PROOFs): a
/// peer that never says hello, or never proves the identity it claimed (P6), cannot keep a
/// connection (and its session's memory) for ever (D5).
pub const HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
/// How long (ms) a peer may leave this node's withdrawals unacknowledged, with none of them
/// arriving meanwhile, before its connection is closed (R7: it would keep ids quarantined).
pub const ACK_TIMEOUT_MS: u64 = 30_000;

/// The most one gap between an adapter's `progress` calls adds to the heartbeat's clock
/// ([`LiveClock`]): a peer's PONG can only be handled while the adapter progresses, so time it
/// spends away (computing, stopped, descheduled) is not held against the peer.
pub const LIVENESS_TICK_MAX_MS: u64 = 1000;

/// The heartbeat: every established connection carries a PING each `interval_ms`, and a PING
/// not answered within `timeout_ms` closes the connection ([`CloseReason::Unresponsive`]).
///
/// Transports notice a peer that died; this notices a connection that stopped working while
/// both processes live: a peer that stopped calling `progress`, or a process that no longer
/// receives anything (UCX's shared-memory FIFO stays stuck for good when a sender is killed
/// between reserving a slot and filling it; see the README). Time is counted on a
/// [`LiveClock`]. The contract it adds: **a process must call `progress` at least once per
/// `timeout_ms`**, or its peers cut it off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Liveness {
    /// How often a PING goes out on an established connection (after the last one's PONG).
    pub interval_ms: u64,
    /// How long a PING may wait for its PONG before the connection is closed.
    pub timeout_ms: u64,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness {
            interval_ms: 1000,
            timeout_ms: 30_000,
        }
    }
}

/// The heartbeat's clock: the adapter's clock, counted only while the adapter progresses —
/// each gap between two [`tick`](Self::tick)s adds at most [`LIVENESS_TICK_MAX_MS`].
#[derive(Clone, Copy, Debug)]
pub struct LiveClock {
    live_ms: u64,
    last_ms: u64,
}

impl LiveClock {
    /// A clock at 0, started at adapter time `now_ms`.
    pub fn new(now_ms: u64) -> Self {
        LiveClock {
            live_ms: 0,
            last_ms: now_ms,
        }
    }

    /// Moves to adapter time `now_ms` (call once per `progress`); returns the new live time.
    /// A clock that went backwards adds nothing.
    pub fn tick(&mut self, now_ms: u64) -> u64 {
        self.live_ms += now_ms
            .saturating_sub(self.last_ms)
            .min(LIVENESS_TICK_MAX_MS);
        self.last_ms = self.last_ms.max(now_ms);
        self.live_ms
    }

    /// The live time now (ms).
    pub fn now(&self) -> u64 {
        self.live_ms
    }
}

/// Why a connection's deadline closed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// The handshake did not complete in [`HANDSHAKE_TIMEOUT_MS`]; the reason to send.
    Handshake(CloseReason),
    /// Withdrawals left unacknowledged for [`ACK_TIMEOUT_MS`] (R7).
    Acks,
    /// A PING unanswered for [`Liveness::timeout_ms`]. What is in flight on the connection
    /// may never finish: the adapter ends it now (D3), as for a failed endpoint.
    Unresponsive,
}

impl Expiry {
    /// The reason the CLOSE carries.
    pub fn reason(self) -> CloseReason {
        match self {
            Expiry::Handshake(r) => r,
            Expiry::Acks => CloseReason::ProtocolError,
            Expiry::Unresponsive => CloseReason::Unresponsive,
        }
    }
}

/// What [`Deadlines::check`] asks of the adapter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Nothing.
    Nothing,
    /// A PING was queued on the session: flush the connection's control frames.
    PingQueued,
    /// The connection is to be closed with [`Expiry::reason`]: its session's CLOSE goes out and
    /// its endpoint closes, what is in flight ending first if [`Expiry::Unresponsive`]
    /// ([`Engine::handle_timeout`](super::Engine::handle_timeout) decides it all).
    Expired(Expiry),
}

/// One connection's deadlines: the handshake, the withdrawal acknowledgements, the heartbeat.
#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
    opened_ms: u64,
    opened_live_ms: u64,
    ack_wait_since: Option<u64>,
    next_ping_ms: u64,
    ping_ms: u64,
}

impl Deadlines {
    /// A connection opened at adapter time `now_ms`, live time `live_ms`.
    pub fn new(now_ms: u64, live_ms: u64) -> Self {
        Deadlines {
            opened_ms: now_ms,
            opened_live_ms: live_ms,
            ack_wait_since: None,
            next_ping_ms: live_ms,
            ping_ms: live_ms,
        }
    }

    /// When the connection opened, in live time ([`LiveClock`]).
    pub fn opened_live_ms(&self) -> u64 {
        self.opened_live_ms
    }

    /// One of this connection's withdrawals was acknowledged: the peer is answering, so its
    /// acknowledgement deadline starts over.
    pub fn acks_arrived(&mut self) {
        self.ack_wait_since = None;
    }

    /// When [`check`](Self::check) next has something to do for this connection, in adapter
    /// time, if `progress` keeps being called (live time then moves with adapter time):
    /// the handshake deadline, the acknowledgement deadline, the next PING or the PONG's.
    pub fn next_ms<const CAP: usize>(
        &self,
        session: &Session<CAP>,
        now_ms: u64,
        live_ms: u64,
        liveness: Option<Liveness>,
    ) -> Option<u64> {
        if !session.is_established() {
            return Some(self.opened_ms.saturating_add(HANDSHAKE_TIMEOUT_MS));
        }
        let acks = (session.awaiting_acks() > 0).then(|| {
            self.ack_wait_since
                .unwrap_or(now_ms)
                .saturating_add(ACK_TIMEOUT_MS)
        });
        let heartbeat = liveness.map(|l| {
            let live_at = if session.ping_outstanding() {
                self.ping_ms.saturating_add(l.timeout_ms)
            } else {
                self.next_ping_ms
            };
            now_ms.saturating_add(live_at.saturating_sub(live_ms))
        });
        [acks, heartbeat].into_iter().flatten().min()
    }

    /// The deadlines of an open connection at adapter time `now_ms` and live time `live_ms`
    /// (see [`LiveClock`]); `liveness: None` turns the heartbeat off. Call it on every
    /// `progress` for every open connection.
    pub fn check<const CAP: usize>(
        &mut self,
        session: &mut Session<CAP>,
        now_ms: u64,
        live_ms: u64,
        liveness: Option<Liveness>,
    ) -> Check {
        if !session.is_established() {
            if now_ms < self.opened_ms.saturating_add(HANDSHAKE_TIMEOUT_MS) {
                return Check::Nothing;
            }
            // A peer that claimed a key and never proved it is told so.
            return Check::Expired(Expiry::Handshake(match session.phase() {
                Phase::Proving => CloseReason::Unproven,
                _ => CloseReason::ProtocolError,
            }));
        }
        if session.awaiting_acks() == 0 {
            self.ack_wait_since = None;
        } else if now_ms
            >= self
                .ack_wait_since
                .get_or_insert(now_ms)
                .saturating_add(ACK_TIMEOUT_MS)
        {
            return Check::Expired(Expiry::Acks);
        }
        let Some(l) = liveness else {
            return Check::Nothing;
        };
        if session.ping_outstanding() {
            if live_ms >= self.ping_ms.saturating_add(l.timeout_ms) {
                return Check::Expired(Expiry::Unresponsive);
            }
        } else if live_ms >= self.next_ping_ms && session.ping() {
            self.ping_ms = live_ms;
            self.next_ping_ms = live_ms.saturating_add(l.interval_ms);
            return Check::PingQueued;
        }
        Check::Nothing
    }
}

/// A connection as the deadline sweep, the duplicate tie-break and the unpins see it.
#[cfg(feature = "alloc")]
pub(crate) trait Link<const CAP: usize> {
    /// Whether the connection is in service (deadlines apply only then; superseded, closed and
    /// failed connections are not).
    fn is_open(&self) -> bool;
    /// Its session.
    fn session(&self) -> &Session<CAP>;
    /// Its session and deadlines.
    fn deadline_parts(&mut self) -> (&mut Session<CAP>, &mut Deadlines);
}

/// A node that hears nobody: UCX's shared-memory receive FIFO stuck by a writer killed (or
/// stopped) between reserving a slot and filling it leaves its process unable to read
/// anything any peer sends it over shared memory, for good, while every endpoint looks fine
/// (see the README). Its heartbeat then cuts its peers off; only a new worker (a new FIFO)
/// and a reconnect bring it back.
///
/// Deaf when no established connection is left open, no control frame has arrived from
/// anyone for the heartbeat's timeout (live time), at least [`DEAF_PEERS_MIN`] peers went
/// down since the last one arrived, and a deadline found silence where a live peer would have
/// spoken ([`cut_silent`](Self::cut_silent): a PING unanswered, or a connection that brought
/// no HELLO in half the heartbeat's timeout or more — a dial that reached a live peer, or a
/// peer's dial, ended by the handshake's deadline or by the peer; whichever side's heartbeat
/// fires first, the other sees a reset, so the redials are the evidence then).
/// Peers that all died are not a deaf node: their dials fail at once, nothing goes silent.
/// One silent peer is not enough: with a single peer, a
/// peer that stopped and a receive queue that stopped look the same from here, and replacing
/// a worker costs every connection. Peers that close in order are heard (their CLOSE). Told
/// once per episode: a frame heard starts over.
#[derive(Clone, Copy, Debug, Default)]
pub struct Deafness {
    heard_ms: u64,
    lost_since: u32,
    silent_since: u32,
    told: bool,
}

/// How many peers must go down, with nothing heard since, before a node counts itself deaf
/// ([`Deafness`]).
pub const DEAF_PEERS_MIN: u32 = 2;

impl Deafness {
    /// Tracking from live time `live_ms` (as if a frame had just arrived).
    pub fn new(live_ms: u64) -> Self {
        Deafness {
            heard_ms: live_ms,
            ..Deafness::default()
        }
    }

    /// A control frame arrived at live time `live_ms`: this node can hear.
    pub fn heard(&mut self, live_ms: u64) {
        self.heard_ms = self.heard_ms.max(live_ms);
        self.lost_since = 0;
        self.silent_since = 0;
        self.told = false;
    }

    /// A peer went down (its last connection ended, for any reason).
    pub fn peer_lost(&mut self) {
        self.lost_since = self.lost_since.saturating_add(1);
    }

    /// Silence where a live peer would have spoken: a PING unanswered, or a connection that
    /// ended without a HELLO after half the heartbeat's timeout or more.
    pub fn cut_silent(&mut self) {
        self.silent_since = self.silent_since.saturating_add(1);
    }

    /// Whether this node is deaf at live time `live_ms` and not yet told so; `open` counts
    /// the peers with an established connection still open (asked only when the rest says
    /// deaf).
    pub fn check(&mut self, live_ms: u64, timeout_ms: u64, open: impl FnOnce() -> usize) -> bool {
        let deaf = !self.told
            && self.lost_since >= DEAF_PEERS_MIN
            && self.silent_since > 0
            && live_ms.saturating_sub(self.heard_ms) >= timeout_ms
            && open() == 0;
        self.told |= deaf;
        deaf
    }
}

#[cfg(all(test, not(loom)))]
pub(crate) mod tests {
    use super::*;
    use crate::identity::Identity;
    use crate::wire::{self, Role};
    use crate::{Registry, TagLayout};

    pub(crate) type Reg = Registry<64>;

    pub(crate) fn pump(from: &mut Session<64>, fr: &Reg, to: &mut Session<64>) -> usize {
        let mut buf = [0u8; 1024];
        let mut n = 0;
        while let Some(len) = from.poll_transmit(fr, &mut buf).unwrap() {
            to.handle(&buf[..len]).unwrap();
            n += 1;
        }
        n
    }

    pub(crate) fn established(ra: &Reg, rb: &Reg) -> (Session<64>, Session<64>) {
        let mut a = Session::new(Role::Initiator, &Identity::from_seed(&[1; 32]), ra.layout());
        let mut b = Session::new(Role::Acceptor, &Identity::from_seed(&[2; 32]), rb.layout());
        for _ in 0..3 {
            pump(&mut a, ra, &mut b);
            pump(&mut b, rb, &mut a);
        }
        assert!(a.is_established() && b.is_established());
        (a, b)
    }

    #[test]
    fn the_live_clock_caps_each_gap_and_never_goes_back() {
        let mut c = LiveClock::new(100);
        assert_eq!(c.tick(400), 300);
        assert_eq!(c.tick(60_400), 300 + LIVENESS_TICK_MAX_MS);
        assert_eq!(c.tick(50_000), 1300, "backwards adds nothing");
        assert_eq!(c.tick(60_500), 1400);
        assert_eq!(c.now(), 1400);
    }

    #[test]
    fn handshake_deadline_names_an_unproven_claim() {
        let ra = Reg::new(TagLayout::DEFAULT);
        let mut s: Session<64> =
            Session::new(Role::Acceptor, &Identity::from_seed(&[1; 32]), ra.layout());
        let mut d = Deadlines::new(5, 0);
        let live = Some(Liveness::default());
        assert_eq!(
            d.check(&mut s, HANDSHAKE_TIMEOUT_MS + 4, 0, live),
            Check::Nothing
        );
        assert_eq!(
            d.check(&mut s, HANDSHAKE_TIMEOUT_MS + 5, 0, live),
            Check::Expired(Expiry::Handshake(CloseReason::ProtocolError))
        );
        // A HELLO claiming a key, no PROOF: Proving, and the reason says so.
        let other = Identity::from_seed(&[9; 32]);
        let mut buf = [0u8; 256];
        let n = wire::HelloEncoder::new(
            &mut buf,
            ra.layout().fingerprint(),
            Role::Initiator,
            ra.layout().namespace_field().width() as u8,
            other.public_key(),
            &[3; 16],
        )
        .unwrap()
        .finish();
        s.handle(&buf[..n]).unwrap();
        assert_eq!(
            d.check(&mut s, HANDSHAKE_TIMEOUT_MS + 5, 0, live),
            Check::Expired(Expiry::Handshake(CloseReason::Unproven))
        );
        assert_eq!(
            Expiry::Handshake(CloseReason::Unproven).reason(),
            CloseReason::Unproven
        );
    }

    #[test]
    fn a_ping_goes_out_each_interval_and_an_unanswered_one_expires() {
        let (ra, rb) = (Reg::new(TagLayout::DEFAULT), Reg::new(TagLayout::DEFAULT));
        let (mut a, mut b) = established(&ra, &rb);
        let l = Liveness {
            interval_ms: 1000,
            timeout_ms: 5000,
        };
        let mut d = Deadlines::new(0, 0);
        assert_eq!(d.check(&mut a, 0, 0, Some(l)), Check::PingQueued);
        assert_eq!(d.check(&mut a, 10, 10, Some(l)), Check::Nothing);
        pump(&mut a, &ra, &mut b);
        pump(&mut b, &rb, &mut a);
        assert_eq!(
            d.check(&mut a, 999, 999, Some(l)),
            Check::Nothing,
            "answered; the next is due at 1000"
        );
        assert_eq!(d.check(&mut a, 1000, 1000, Some(l)), Check::PingQueued);
        // Never answered: the adapter time alone does not expire it, the live time does.
        assert_eq!(d.check(&mut a, 999_999, 5999, Some(l)), Check::Nothing);
        assert_eq!(
            d.check(&mut a, 999_999, 6000, Some(l)),
            Check::Expired(Expiry::Unresponsive)
        );
        assert_eq!(d.check(&mut a, 999_999, 6000, None), Check::Nothing);
    }

    #[test]
    fn unacknowledged_withdrawals_expire_unless_acks_keep_coming() {
        let (ra, rb) = (Reg::new(TagLayout::DEFAULT), Reg::new(TagLayout::DEFAULT));
        let ns = ra.register("gone").unwrap();
        let (mut a, mut b) = established(&ra, &rb);
        drop(ns);
        pump(&mut a, &ra, &mut b); // the WITHDRAW; b's acknowledgement is never delivered
        assert_eq!(a.awaiting_acks(), 1);
        let mut d = Deadlines::new(0, 0);
        assert_eq!(d.check(&mut a, 100, 0, None), Check::Nothing);
        assert_eq!(
            d.check(&mut a, 100 + ACK_TIMEOUT_MS - 1, 0, None),
            Check::Nothing
        );
        d.acks_arrived();
        assert_eq!(
            d.check(&mut a, 100 + ACK_TIMEOUT_MS, 0, None),
            Check::Nothing,
            "an acknowledgement restarted the wait"
        );
        assert_eq!(
            d.check(&mut a, 100 + 2 * ACK_TIMEOUT_MS, 0, None),
            Check::Expired(Expiry::Acks)
        );
        assert_eq!(Expiry::Acks.reason(), CloseReason::ProtocolError);
    }

    #[test]
    fn deaf_only_when_several_peers_went_silent_and_nothing_was_heard_for_the_timeout() {
        let mut d = Deafness::new(0);
        d.peer_lost();
        d.cut_silent();
        // One peer silent: a stopped peer looks the same; not deaf.
        assert!(!d.check(10_000, 5_000, || 0));
        // Two peers that died (transport failures), none cut off by the heartbeat: not deaf.
        let mut died = Deafness::new(0);
        died.peer_lost();
        died.peer_lost();
        assert!(!died.check(10_000, 5_000, || 0));
        // Heard 1 s ago: not for the whole timeout.
        d.peer_lost();
        d.heard(9_000);
        d.peer_lost();
        d.cut_silent();
        d.peer_lost();
        assert!(!d.check(10_000, 5_000, || 0));
        // An established connection left open: someone may still be heard.
        assert!(!d.check(15_000, 5_000, || 1));
        assert!(d.check(15_000, 5_000, || 0));
        // Told once per episode.
        assert!(!d.check(20_000, 5_000, || 0));
        // A frame heard starts a new one.
        d.heard(21_000);
        d.peer_lost();
        d.peer_lost();
        assert!(!d.check(26_000, 5_000, || 0), "no heartbeat cut-off yet");
        d.cut_silent();
        assert!(d.check(26_000, 5_000, || 0));
    }
}
