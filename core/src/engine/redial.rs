//! Reconnecting (feature `alloc`): a proven peer lost to a fault is dialled again at the
//! address it told ([`Frame::Address`](crate::wire::Frame::Address)), with backoff, until it is
//! back or the node gives up.
//!
//! Which losses are dialled: those this side saw itself — the transport failed
//! ([`Why::Failed`]), or this side's heartbeat found the peer unresponsive
//! ([`Expiry::Unresponsive`]) — and, only when this side told the peer no address of its own
//! (so the peer cannot dial it), the peer's word that *this* side was silent (its CLOSE says
//! [`CloseReason::Unresponsive`]: e.g. this process was stopped). A peer's word alone never
//! makes a node that told its address dial: the peer, alive, dials it. Not dialled: the peer's
//! orderly close, this side's close, a protocol error or a flood (dialling a peer that broke
//! the protocol would only repeat it), and a failure followed by the peer's CLOSE saying it
//! closed on purpose (the endpoint's failure was that close, seen first). Both sides may dial
//! (a cut link): the two redials' connections rank alike on both sides, so one survives. A
//! peer that comes back is known by its
//! proven token: the new connection supersedes nothing (the old one is gone), gets the same
//! pair value ([`Connections::rx_pair`](super::Connections::rx_pair)) and a fresh HELLO, so
//! the directory is re-announced whole. Nothing is retransmitted: what was in flight when the
//! fault struck ended with `PeerDown`, and what a library starts towards the peer while it is
//! away fails the same way.
//!
//! A dial that reaches a *different* proven process at the address (the peer restarted with a
//! new identity) ends the dialling: the old peer is gone for good, and the new one is a new
//! peer. A dial still handshaking when the next is due is waited for, not doubled.

use alloc::vec::Vec;

use super::{ConnId, Expiry, TokenHash, Why};
use crate::wire::{Address, CloseReason};

/// How a node reconnects to a peer lost to a fault (see the module's documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Redial {
    /// Never: a lost peer stays lost until someone connects again.
    Off,
    /// Tell the adapter once ([`Action::Dial`](super::Action::Dial)), and let whoever owns the
    /// endpoints (a host) decide; the engine keeps no schedule.
    Report,
    /// Dial again with this backoff until the peer is back or the time is up.
    Dial(Backoff),
}

impl Default for Redial {
    fn default() -> Self {
        Redial::Dial(Backoff::default())
    }
}

/// A reconnect schedule: the first dial `first_ms` after the loss (minus up to half of it,
/// per peer, so that the peers of a lost process do not all dial at once), then doubling up to
/// `max_ms` between dials, until `give_up_ms` after the loss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// Wait before the first dial (ms).
    pub first_ms: u64,
    /// The longest wait between dials (ms).
    pub max_ms: u64,
    /// How long after the loss the node stops dialling (ms).
    pub give_up_ms: u64,
}

impl Default for Backoff {
    /// 200 ms, doubling up to 5 s, for 5 minutes.
    fn default() -> Self {
        Backoff {
            first_ms: 200,
            max_ms: 5_000,
            give_up_ms: 300_000,
        }
    }
}

/// How many lost peers a node dials at once at most (D5: each is a small entry; a peer that
/// told an address and failed is one). A loss beyond it is not dialled (counted).
pub const DIALS_MAX: usize = 4096;

/// Whether a peer whose last connection ended for `why` is dialled back (see the module's
/// documentation); `told_ours`: this side told the peer its own address.
pub fn dials_after(why: Why, told_ours: bool) -> bool {
    match why {
        Why::Failed | Why::Expired(Expiry::Unresponsive) => true,
        Why::PeerClosed(CloseReason::Unresponsive) => !told_ours,
        _ => false,
    }
}

/// One lost peer being dialled.
#[derive(Clone, Copy, Debug)]
struct Dial {
    peer: u64,
    addr: Address,
    /// When it was lost (adapter time); `None` until the next timer pass sees it.
    since_ms: Option<u64>,
    next_ms: u64,
    wait_ms: u64,
    /// The connection the last dial opened, while it may still prove to be the peer.
    pending: Option<ConnId>,
    /// [`Redial::Report`]: the adapter was told; kept only to count the peer back (or given
    /// up), never told again.
    reported: bool,
}

/// What the redial schedule reports to the adapter's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RedialStats {
    /// Dials asked for ([`Action::Dial`](super::Action::Dial)).
    pub dials: u64,
    /// Lost peers that came back on a connection (dialled by either side).
    pub reconnected: u64,
    /// Lost peers given up on (`give_up_ms` passed, or a new process proved at their address).
    pub given_up: u64,
    /// Losses not dialled: [`DIALS_MAX`] peers were being dialled, or another lost peer was
    /// being dialled at the same address.
    pub refused: u64,
}

/// The peers being dialled again.
pub(crate) struct Dials {
    dials: Vec<Dial>,
    keys: TokenHash,
    pub(crate) stats: RedialStats,
}

impl Dials {
    pub(crate) fn new(keys: TokenHash) -> Self {
        Dials {
            dials: Vec::new(),
            keys,
            stats: RedialStats::default(),
        }
    }

    /// `peer`, which listens at `addr`, was lost to a fault: dial it on the schedule — unless
    /// another lost peer is dialled at that address already (one dial per address: two
    /// processes cannot listen at one address, so one of them lied or restarted).
    pub(crate) fn lost(&mut self, peer: u64, addr: Address) {
        if let Some(d) = self.dials.iter_mut().find(|d| d.peer == peer) {
            d.addr = addr;
            return;
        }
        if self.dials.iter().any(|d| d.addr == addr) {
            self.stats.refused += 1;
            return;
        }
        if self.dials.len() >= DIALS_MAX {
            self.stats.refused += 1;
            return;
        }
        self.dials.push(Dial {
            peer,
            addr,
            since_ms: None,
            next_ms: 0,
            wait_ms: 0,
            pending: None,
            reported: false,
        });
    }

    /// `peer` proved itself on connection `conn`: it is back (if it was being dialled), and
    /// a dial that reached it while expecting someone else found that one restarted.
    pub(crate) fn proven(&mut self, peer: u64, conn: ConnId) {
        let before = self.dials.len();
        self.dials.retain(|d| d.peer != peer);
        self.stats.reconnected += (before - self.dials.len()) as u64;
        let before = self.dials.len();
        self.dials.retain(|d| d.pending != Some(conn));
        self.stats.given_up += (before - self.dials.len()) as u64;
    }

    /// `peer` closed on purpose after all (its CLOSE came after its endpoint's failure): not
    /// dialled.
    pub(crate) fn closed(&mut self, peer: u64) {
        self.dials.retain(|d| d.peer != peer);
    }

    /// The adapter opened connection `conn` for the dial of `peer`.
    pub(crate) fn started(&mut self, peer: u64, conn: ConnId) {
        if let Some(d) = self.dials.iter_mut().find(|d| d.peer == peer) {
            d.pending = Some(conn);
        }
    }

    /// The dials due at adapter time `now_ms`, given `first`/`max`/`give_up`; `handshaking`
    /// says whether a dial's connection may still prove to be its peer. `once`: each loss is
    /// handed out once, at its first dial's time, and then only waited on — counted
    /// `reconnected` if the peer is back (whoever connected) or `given_up` at `give_up_ms`
    /// ([`Redial::Report`]).
    pub(crate) fn due(
        &mut self,
        now_ms: u64,
        backoff: Backoff,
        once: bool,
        handshaking: impl Fn(ConnId) -> bool,
        out: &mut Vec<(u64, Address)>,
    ) {
        let keys = self.keys;
        let stats = &mut self.stats;
        self.dials.retain_mut(|d| {
            let since = *d.since_ms.get_or_insert_with(|| {
                d.wait_ms = backoff.first_ms.max(1);
                d.next_ms = now_ms.saturating_add(d.wait_ms - jitter(keys, d.peer, d.wait_ms / 2));
                now_ms
            });
            if now_ms >= since.saturating_add(backoff.give_up_ms) {
                stats.given_up += 1;
                return false;
            }
            if now_ms < d.next_ms {
                return true;
            }
            if once {
                if !d.reported {
                    d.reported = true;
                    stats.dials += 1;
                    out.push((d.peer, d.addr));
                }
                d.next_ms = since.saturating_add(backoff.give_up_ms);
                return true;
            }
            d.wait_ms = d.wait_ms.saturating_mul(2).min(backoff.max_ms.max(1));
            d.next_ms = now_ms.saturating_add(d.wait_ms);
            if !d.pending.is_some_and(&handshaking) {
                d.pending = None;
                stats.dials += 1;
                out.push((d.peer, d.addr));
            }
            true
        });
    }

    /// When the next dial (or the first look at a new loss) is due.
    pub(crate) fn next_ms(&self) -> Option<u64> {
        (self.dials.iter())
            .map(|d| if d.since_ms.is_none() { 0 } else { d.next_ms })
            .min()
    }

    /// The peers being dialled.
    pub(crate) fn peers(&self) -> impl Iterator<Item = u64> + '_ {
        self.dials.iter().map(|d| d.peer)
    }
}

/// Up to `spread` ms, the same for a peer at every dial (keyed: a peer cannot steer it).
fn jitter(keys: TokenHash, peer: u64, spread: u64) -> u64 {
    use core::hash::{BuildHasher, Hasher};
    if spread == 0 {
        return 0;
    }
    let mut h = keys.build_hasher();
    h.write_u64(peer);
    h.finish() % (spread + 1)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn addr(port: u16) -> Address {
        Address::Ip(core::net::SocketAddr::from(([10, 0, 0, 1], port)))
    }

    const B: Backoff = Backoff {
        first_ms: 100,
        max_ms: 400,
        give_up_ms: 2_000,
    };

    #[test]
    fn dials_back_off_and_give_up() {
        let mut d = Dials::new(TokenHash::new([1, 2]));
        d.lost(7, addr(1));
        assert_eq!(d.next_ms(), Some(0), "a new loss is looked at at once");
        let mut out = Vec::new();
        d.due(1_000, B, false, |_| false, &mut out);
        assert!(
            out.is_empty(),
            "the first dial waits first_ms (less jitter)"
        );
        let first = d.next_ms().unwrap();
        assert!((1_050..=1_100).contains(&first), "{first}");
        let mut times = Vec::new();
        let mut now = first;
        while now < 4_000 {
            out.clear();
            d.due(now, B, false, |_| false, &mut out);
            if !out.is_empty() {
                assert_eq!(out, [(7, addr(1))]);
                times.push(now);
            }
            match d.next_ms() {
                Some(t) => now = t,
                None => break,
            }
        }
        let gaps: Vec<u64> = times.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(
            gaps[..3],
            [200, 400, 400],
            "doubling up to max_ms: {times:?}"
        );
        assert!(
            *times.last().unwrap() < 3_000,
            "given up 2 s after the loss"
        );
        assert_eq!(d.stats.given_up, 1);
        assert_eq!(d.stats.dials, times.len() as u64);
    }

    #[test]
    fn a_pending_dial_is_waited_for_and_a_restart_ends_the_dialling() {
        let mut d = Dials::new(TokenHash::new([3, 4]));
        d.lost(7, addr(1));
        d.lost(8, addr(2));
        let mut out = Vec::new();
        d.due(0, B, false, |_| true, &mut out);
        d.due(100, B, false, |_| true, &mut out);
        assert_eq!(out.len(), 2);
        d.started(7, ConnId(1));
        d.started(8, ConnId(2));
        out.clear();
        d.due(1_000, B, false, |c| c == ConnId(1), &mut out);
        assert_eq!(out, [(8, addr(2))], "7's dial is still handshaking");
        // connection 1 proves to be someone else (7 restarted as 9); 8 comes back itself
        d.proven(9, ConnId(1));
        d.proven(8, ConnId(5));
        assert_eq!(d.peers().count(), 0);
        assert_eq!((d.stats.reconnected, d.stats.given_up), (1, 1));
    }

    #[test]
    fn one_dial_per_address_and_report_hands_out_once() {
        let mut d = Dials::new(TokenHash::new([5, 6]));
        d.lost(7, addr(1));
        d.lost(8, addr(1));
        assert_eq!(d.peers().collect::<Vec<_>>(), [7], "one dial per address");
        assert_eq!(d.stats.refused, 1);
        let mut out = Vec::new();
        d.due(0, B, true, |_| false, &mut out);
        d.due(100, B, true, |_| false, &mut out);
        assert_eq!(out, [(7, addr(1))]);
        d.due(B.give_up_ms - 1, B, true, |_| false, &mut out);
        assert_eq!(out.len(), 1, "reported once");
        assert_eq!(d.peers().collect::<Vec<_>>(), [7], "then waited on");
        d.due(B.give_up_ms, B, true, |_| false, &mut out);
        assert_eq!(
            (d.peers().count(), d.stats.given_up),
            (0, 1),
            "and given up"
        );
        d.lost(9, addr(2));
        d.closed(9);
        assert_eq!(d.peers().count(), 0);
    }

    #[test]
    fn only_what_this_side_saw_is_redialled() {
        for told in [false, true] {
            assert!(dials_after(Why::Failed, told));
            assert!(dials_after(Why::Expired(Expiry::Unresponsive), told));
        }
        // the peer's word that this side was silent: only if the peer cannot dial this side
        assert!(dials_after(
            Why::PeerClosed(CloseReason::Unresponsive),
            false
        ));
        assert!(!dials_after(
            Why::PeerClosed(CloseReason::Unresponsive),
            true
        ));
        for why in [
            Why::PeerClosed(CloseReason::Normal),
            Why::PeerClosed(CloseReason::Flood),
            Why::Local,
            Why::Flood,
            Why::Backlog,
            Why::Superseded,
            Why::Expired(Expiry::Acks),
        ] {
            assert!(!dials_after(why, false), "{why:?}");
        }
    }
}
