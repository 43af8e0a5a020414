//! D5 for tag messages, where the transport's queue cannot be counted: bounded per-peer
//! backlogs for the libraries that receive only through tagspace.
//!
//! UCX keeps a message nobody has received yet in its unexpected queue, for as long as nobody
//! receives it, and cannot say how many wait without taking them. A proven peer can therefore
//! grow a node without bound by sending its own (valid) tags faster than the library receives
//! them. A library that receives *only* through the node (never with its own calls on the
//! worker) lets the node take those messages out of UCX's queue into a backlog the node's
//! receives read first: then they can be counted per peer, and a peer whose backlog in one
//! namespace would pass its [`BacklogLimit`] is cut off with reason `Flood` — its held messages
//! dropped, and everything it still sends into a held namespace dropped as it arrives, until it
//! proves its identity again.
//!
//! Order is kept: a pass takes a namespace's messages oldest first, and a receive looks in the
//! backlog before it asks the transport, so a peer's messages for one tag are received in the
//! order they were sent (what UCX guarantees between two endpoints). A message in a held
//! namespace that no proven peer can have sent (a forged pair value) is dropped as a stray.

use crate::layout::TagLayout;
use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::vec::Vec;

/// How much one proven peer may have waiting in one held namespace: messages nobody has
/// received yet, counted from the oldest. Each is charged its length up to
/// `HELD_CHARGE_MAX` (1 MiB), and a peer with nothing held is always let through one message. The backlog's memory is at most this, per peer and
/// namespace, plus what arrives between two passes ([`super::DRAIN_INTERVAL_MS`] apart, or
/// back to back while messages keep coming).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BacklogLimit {
    /// Messages waiting at most.
    pub messages: u32,
    /// Their bytes together at most.
    pub bytes: u64,
}

impl BacklogLimit {
    /// 4 096 messages and 64 MiB per peer and namespace: far above what a library that posts
    /// its receives keeps waiting (a Dask worker's transfers are a few messages per task),
    /// small enough that a few hundred peers cannot exhaust a node.
    pub const DEFAULT: BacklogLimit = BacklogLimit {
        messages: 4096,
        bytes: 64 << 20,
    };
}

impl Default for BacklogLimit {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// How many messages one pass looks at, over all held namespaces (each one probe with
/// removal that stops at the namespace's oldest message).
pub const HOLD_LOOKS_PER_CALL: u32 = 1024;

/// The most one held message is charged against [`BacklogLimit::bytes`]: a longer one is sent
/// by rendezvous (UCX's threshold is far below this unless set otherwise), and what waits of
/// it is a header — its data moves only when a receive takes it. Without this cap, one large
/// message arriving before its receive would cut an honest peer off.
pub const HELD_CHARGE_MAX: u64 = 1 << 20;

/// A message taken out of the transport's queue for a library, waiting for its receive.
#[derive(Debug)]
pub struct Held<M> {
    /// Its tag.
    pub tag: u64,
    /// Its length in bytes.
    pub len: usize,
    /// The proven peer that sent it.
    pub peer: u64,
    /// The transport's handle on it (UCX: the receive that took it).
    pub msg: M,
}

/// What a pass needs from the transport's queue of unexpected tag messages.
pub trait HoldQueue<M> {
    /// Takes the oldest message matching `(tag, mask)` out of the queue without receiving it
    /// yet: its tag, length and handle. (One probe that stops at it: the namespace's messages
    /// are taken from the front, so it costs what the messages of other namespaces before it
    /// do, never a search by exact tag through a flooded queue.)
    fn take_first(&mut self, tag: u64, mask: u64) -> Option<(u64, usize, M)>;
    /// Lets a taken message go unreceived: a stray (`forged`: a pair value no proven peer was
    /// given), or a flooding peer's.
    fn discard(&mut self, tag: u64, msg: M, forged: bool);
}

/// What one pass did.
#[derive(Debug)]
pub struct HoldPass<M> {
    /// Messages taken into the backlog.
    pub held: u64,
    /// Messages of peers cut off for flooding, dropped.
    pub dropped: u64,
    /// Messages with a pair value no proven peer was given, dropped (strays).
    pub forged: u64,
    /// Peers that passed their limit in this pass: the adapter cuts each off with
    /// `CloseReason::Flood`.
    pub floods: Vec<u64>,
    /// Their held messages, out of the backlog: the adapter lets them go.
    pub released: Vec<M>,
}

impl<M> HoldPass<M> {
    /// Whether the pass took anything out of the transport's queue.
    pub fn took(&self) -> bool {
        self.held + self.dropped + self.forged > 0
    }
}

/// What one held message counts against its peer's byte limit ([`HELD_CHARGE_MAX`]).
fn charge(len: usize) -> u64 {
    (len as u64).min(HELD_CHARGE_MAX)
}

struct Space<M> {
    id: u16,
    limit: BacklogLimit,
    queue: VecDeque<Held<M>>,
}

/// The backlogs of one node's held namespaces (see the module's documentation).
pub struct Backlog<M> {
    spaces: Vec<Space<M>>,
    /// (namespace id, peer) → (messages, bytes) held.
    counts: BTreeMap<(u16, u64), (u32, u64)>,
    /// Peers cut off for flooding and not proven since: their messages are dropped.
    flooded: BTreeSet<u64>,
    last_ms: Option<u64>,
    busy: bool,
    /// The last pass stopped at its budget with messages left (a flood, not just traffic).
    saturated: bool,
    /// The engine's count of forgotten pair values when peers were last forgotten here.
    forgotten_seen: u64,
}

impl<M> Default for Backlog<M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<M> Backlog<M> {
    /// No namespace held.
    pub fn new() -> Self {
        Backlog {
            spaces: Vec::new(),
            counts: BTreeMap::new(),
            flooded: BTreeSet::new(),
            last_ms: None,
            busy: false,
            saturated: false,
            forgotten_seen: 0,
        }
    }

    /// Holds namespace `id`'s messages from now on, within `limit` per peer (a namespace held
    /// already gets the new limit) — or says why it cannot: on a host's worker (`owner`), the
    /// host's libraries receive with their own calls; without a pair field in `layout` nobody
    /// can tell who sent a message; a limit of 0 would cut off every peer.
    pub fn hold_checked(
        &mut self,
        id: u16,
        limit: BacklogLimit,
        layout: &TagLayout,
        owner: super::unpins::QueueOwner,
    ) -> Result<(), &'static str> {
        if owner == super::unpins::QueueOwner::HOST {
            return Err(
                "backlog limits need the node's own worker (a host's libraries receive \
                        with their own calls)",
            );
        }
        if layout.pair_bits() == 0 {
            return Err(
                "backlog limits need a layout with a pair field (it tells who sent a message)",
            );
        }
        if limit.messages == 0 || limit.bytes == 0 {
            return Err("a backlog limit of 0 messages or 0 bytes would cut off every peer");
        }
        self.hold(id, limit);
        Ok(())
    }

    /// Holds namespace `id`'s messages from now on, within `limit` per peer (a namespace held
    /// already gets the new limit); see [`hold_checked`](Self::hold_checked).
    pub fn hold(&mut self, id: u16, limit: BacklogLimit) {
        match self.spaces.iter_mut().find(|s| s.id == id) {
            Some(s) => s.limit = limit,
            None => self.spaces.push(Space {
                id,
                limit,
                queue: VecDeque::new(),
            }),
        }
    }

    /// Whether namespace `id` is held.
    pub fn holds(&self, id: u16) -> bool {
        self.spaces.iter().any(|s| s.id == id)
    }

    /// Whether any namespace is held.
    pub fn is_active(&self) -> bool {
        !self.spaces.is_empty()
    }

    /// Stops holding namespace `id` (its library was released): its held messages, for the
    /// adapter to let go.
    pub fn release(&mut self, id: u16) -> Vec<M> {
        let Some(k) = self.spaces.iter().position(|s| s.id == id) else {
            return Vec::new();
        };
        let s = self.spaces.swap_remove(k);
        self.counts.retain(|&(i, _), _| i != id);
        if self.spaces.is_empty() {
            (self.busy, self.saturated) = (false, false);
        }
        s.queue.into_iter().map(|h| h.msg).collect()
    }

    /// Every held message, out of the backlog (the node shuts down); the namespaces stay held.
    pub fn clear(&mut self) -> Vec<M> {
        self.counts.clear();
        let mut out = Vec::new();
        for s in &mut self.spaces {
            out.extend(s.queue.drain(..).map(|h| h.msg));
        }
        out
    }

    /// Once the engine has forgotten more pair values (`forgotten`:
    /// [`Connections::pairs_forgotten`](super::Connections::pairs_forgotten)) than when this
    /// last ran, forgets the peers `known` no longer knows: their held messages — which no
    /// receive tied to them can match any more — and their flood marks go. Returns their
    /// messages (none while nothing more was forgotten).
    pub fn forget_unknown(&mut self, forgotten: u64, known: impl Fn(u64) -> bool) -> Vec<M> {
        if forgotten == self.forgotten_seen {
            return Vec::new();
        }
        self.forgotten_seen = forgotten;
        self.flooded.retain(|&p| known(p));
        let mut out = Vec::new();
        for s in &mut self.spaces {
            let mut kept = VecDeque::with_capacity(s.queue.len());
            for h in s.queue.drain(..) {
                if known(h.peer) {
                    kept.push_back(h);
                } else {
                    out.push(h.msg);
                }
            }
            s.queue = kept;
        }
        self.counts.retain(|&(_, p), _| known(p));
        out
    }

    /// Messages held, over all namespaces.
    pub fn len(&self) -> usize {
        self.spaces.iter().map(|s| s.queue.len()).sum()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What `peer` has held in namespace `id`: (messages, bytes).
    pub fn held_by(&self, id: u16, peer: u64) -> (u32, u64) {
        self.counts.get(&(id, peer)).copied().unwrap_or_default()
    }

    /// `peer` proved its identity (again): its messages are held again.
    pub fn proven(&mut self, peer: u64) {
        self.flooded.remove(&peer);
    }

    /// The oldest held message of namespace `id`: its tag and length.
    pub fn oldest(&self, id: u16) -> Option<(u64, usize)> {
        let s = self.spaces.iter().find(|s| s.id == id)?;
        s.queue.front().map(|h| (h.tag, h.len))
    }

    /// Takes the oldest held message of namespace `id` matching `(tag, mask)` — for a receive,
    /// which looks here before it asks the transport.
    pub fn take(&mut self, id: u16, tag: u64, mask: u64) -> Option<Held<M>> {
        let s = self.spaces.iter_mut().find(|s| s.id == id)?;
        let k = s.queue.iter().position(|h| (h.tag ^ tag) & mask == 0)?;
        let h = s.queue.remove(k)?;
        self.uncount(id, h.peer, charge(h.len));
        Some(h)
    }

    fn uncount(&mut self, id: u16, peer: u64, charged: u64) {
        if let Some(c) = self.counts.get_mut(&(id, peer)) {
            c.0 -= 1;
            c.1 -= charged;
            if c.0 == 0 {
                self.counts.remove(&(id, peer));
            }
        }
    }

    /// Whether a pass is due at adapter time `now_ms`: every [`super::DRAIN_INTERVAL_MS`],
    /// and on every call while messages keep coming.
    pub fn due(&mut self, now_ms: u64) -> bool {
        if self.spaces.is_empty() {
            return false;
        }
        if self.busy
            || self
                .last_ms
                .is_none_or(|t| now_ms >= t.saturating_add(super::DRAIN_INTERVAL_MS))
        {
            self.last_ms = Some(now_ms);
            return true;
        }
        false
    }

    /// Whether the last pass took messages (they keep coming; the next pass is due at once).
    pub fn is_busy(&self) -> bool {
        self.busy && !self.spaces.is_empty()
    }

    /// Whether the last pass stopped at its budget with messages left: more come than a pass
    /// takes (a flood), and the adapter should give passes more of each call.
    pub fn is_saturated(&self) -> bool {
        self.saturated && !self.spaces.is_empty()
    }

    /// When a pass is next due (adapter time; see [`due`](Self::due)).
    pub fn next_ms(&self) -> Option<u64> {
        if self.spaces.is_empty() {
            return None;
        }
        if self.busy {
            return Some(0);
        }
        Some(
            self.last_ms
                .map_or(0, |t| t.saturating_add(super::DRAIN_INTERVAL_MS)),
        )
    }

    /// One pass over the held namespaces: each one's messages, oldest first, are taken into
    /// the backlog while their peer stays within its limit — at most [`HOLD_LOOKS_PER_CALL`]
    /// looks in all; `out_of_time` ends it early (a look may scan the transport's queue).
    /// `sender_of`: the proven peer a tag's pair value was given to, if any.
    pub fn pass(
        &mut self,
        layout: &TagLayout,
        queue: &mut impl HoldQueue<M>,
        sender_of: impl Fn(u64) -> Option<u64>,
        out_of_time: impl Fn() -> bool,
    ) -> HoldPass<M> {
        let mut p = HoldPass {
            held: 0,
            dropped: 0,
            forged: 0,
            floods: Vec::new(),
            released: Vec::new(),
        };
        let mut looks = 0;
        let mut k = 0;
        self.saturated = false;
        'spaces: while k < self.spaces.len() {
            let (id, limit) = (self.spaces[k].id, self.spaces[k].limit);
            let space = layout.space(id);
            loop {
                if looks >= HOLD_LOOKS_PER_CALL || out_of_time() {
                    self.saturated = true;
                    break 'spaces;
                }
                looks += 1;
                let Some((tag, len, msg)) = queue.take_first(space.tag, space.mask) else {
                    break;
                };
                let Some(peer) = sender_of(tag) else {
                    queue.discard(tag, msg, true);
                    p.forged += 1;
                    continue;
                };
                let (n, bytes) = self.held_by(id, peer);
                // (a peer with nothing held is always let through one message)
                let over = n > 0
                    && (n >= limit.messages || bytes.saturating_add(charge(len)) > limit.bytes);
                if over && self.flooded.insert(peer) {
                    p.floods.push(peer);
                    p.released.extend(self.drop_peer(peer));
                }
                if self.flooded.contains(&peer) {
                    queue.discard(tag, msg, false);
                    p.dropped += 1;
                    continue;
                }
                let c = self.counts.entry((id, peer)).or_default();
                c.0 += 1;
                c.1 += charge(len);
                self.spaces[k].queue.push_back(Held {
                    tag,
                    len,
                    peer,
                    msg,
                });
                p.held += 1;
            }
            k += 1;
        }
        self.busy = p.took();
        p
    }

    /// Takes every message `peer` has held, in every namespace, out of the backlog.
    fn drop_peer(&mut self, peer: u64) -> Vec<M> {
        let mut out = Vec::new();
        for s in &mut self.spaces {
            let mut kept = VecDeque::with_capacity(s.queue.len());
            for h in s.queue.drain(..) {
                if h.peer == peer {
                    out.push(h.msg);
                } else {
                    kept.push_back(h);
                }
            }
            s.queue = kept;
        }
        self.counts.retain(|&(_, p), _| p != peer);
        out
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::TagLayout;
    use std::collections::VecDeque;

    const L: TagLayout = TagLayout::DEFAULT;
    const NS: u16 = 5;

    /// A queue of (tag, len), oldest first; held messages are their tags.
    #[derive(Default)]
    struct Q {
        q: VecDeque<(u64, usize)>,
        dropped: Vec<(u64, bool)>,
    }
    impl HoldQueue<u64> for Q {
        fn take_first(&mut self, tag: u64, mask: u64) -> Option<(u64, usize, u64)> {
            let k = self.q.iter().position(|&(t, _)| (t ^ tag) & mask == 0)?;
            self.q.remove(k).map(|(t, len)| (t, len, t))
        }
        fn discard(&mut self, tag: u64, _msg: u64, forged: bool) {
            self.dropped.push((tag, forged));
        }
    }

    /// Peer `p` (pair value `p`), payload `x`, in namespace `id`.
    fn tag(id: u16, p: u32, x: u64) -> u64 {
        L.base(id) | L.pair_value_bits(p) | x
    }
    fn sender(t: u64) -> Option<u64> {
        let v = L.pair_of(t);
        (1..=3).contains(&v).then_some(v as u64)
    }
    fn pass(b: &mut Backlog<u64>, q: &mut Q) -> HoldPass<u64> {
        b.pass(&L, q, sender, || false)
    }
    const LIMIT: BacklogLimit = BacklogLimit {
        messages: 3,
        bytes: 100,
    };

    /// A held namespace; waiting: 5 messages of peer 1 (over the limit of 3), then 1 of peer 2.
    fn peer_1_over_the_limit() -> (Backlog<u64>, Q) {
        let mut b = Backlog::new();
        b.hold(NS, LIMIT);
        let mut q = Q::default();
        for x in 0..5 {
            q.q.push_back((tag(NS, 1, x), 1));
        }
        q.q.push_back((tag(NS, 2, 0), 1));
        (b, q)
    }

    #[test]
    fn a_pass_holds_a_namespace_oldest_first_and_receives_keep_the_order() {
        let mut b = Backlog::new();
        b.hold(NS, LIMIT);
        let mut q = Q::default();
        q.q.extend([
            (tag(NS, 1, 7), 10),
            (tag(9, 1, 7), 10), // another namespace: left alone
            (tag(NS, 2, 7), 10),
            (tag(NS, 1, 7), 11),
        ]);
        let p = pass(&mut b, &mut q);
        assert_eq!((p.held, p.dropped, p.forged), (3, 0, 0));
        assert_eq!(q.q.len(), 1);
        assert_eq!(b.held_by(NS, 1), (2, 21));
        assert_eq!(b.oldest(NS), Some((tag(NS, 1, 7), 10)));
        // a receive from peer 1 for payload 7: the older of its two first
        let full = u64::MAX;
        assert_eq!(b.take(NS, tag(NS, 1, 7), full).map(|h| h.len), Some(10));
        assert_eq!(b.take(NS, tag(NS, 1, 7), full).map(|h| h.len), Some(11));
        assert!(b.take(NS, tag(NS, 1, 7), full).is_none());
        // from any peer (the pair field free)
        let any = full & !L.pair_value_bits(u32::MAX);
        assert_eq!(b.take(NS, tag(NS, 3, 7), any).map(|h| h.peer), Some(2));
        assert!(b.is_empty());
        assert_eq!(b.held_by(NS, 1), (0, 0));
    }

    #[test]
    fn a_peer_over_its_limit_is_reported_once_and_its_messages_dropped_until_proven() {
        let (mut b, mut q) = peer_1_over_the_limit();
        let p = pass(&mut b, &mut q);
        assert_eq!(p.floods, vec![1]);
        assert_eq!(p.released.len(), 3, "its three held messages go");
        assert_eq!((p.held, p.dropped), (4, 2), "3 of peer 1's, then peer 2's");
        assert_eq!(b.held_by(NS, 1), (0, 0));
        assert_eq!(b.held_by(NS, 2), (1, 1));
        q.q.push_back((tag(NS, 1, 9), 1));
        let p = pass(&mut b, &mut q);
        assert!(p.floods.is_empty(), "reported once");
        assert_eq!(p.dropped, 1, "still dropped");
        b.proven(1);
        q.q.push_back((tag(NS, 1, 9), 1));
        assert_eq!(pass(&mut b, &mut q).held, 1, "held again once proven");
    }

    #[test]
    fn the_byte_limit_counts_too_and_forgeries_are_strays() {
        let mut b = Backlog::new();
        b.hold(NS, LIMIT);
        let mut q = Q::default();
        q.q.extend([(tag(NS, 9, 0), 5), (tag(NS, 1, 0), 60), (tag(NS, 1, 1), 60)]);
        let p = pass(&mut b, &mut q);
        assert_eq!(p.forged, 1);
        assert_eq!(q.dropped[0], (tag(NS, 9, 0), true));
        assert_eq!(p.floods, vec![1], "120 bytes > 100");
        assert!(q.q.is_empty());
    }

    #[test]
    fn a_pass_stops_at_its_budget_and_is_due_again_at_once() {
        let mut b = Backlog::new();
        b.hold(NS, BacklogLimit::DEFAULT);
        assert!(b.due(0));
        assert!(!b.due(1));
        let mut q = Q::default();
        for x in 0..(HOLD_LOOKS_PER_CALL as u64 + 10) {
            q.q.push_back((tag(NS, 1, x & 0xff), 1));
        }
        assert_eq!(pass(&mut b, &mut q).held, HOLD_LOOKS_PER_CALL as u64);
        assert_eq!(b.next_ms(), Some(0));
        assert!(b.due(2), "busy: on every call");
        assert_eq!(pass(&mut b, &mut q).held, 10);
        assert!(!pass(&mut b, &mut q).took());
        assert!(!b.due(3));
        assert!(b.due(3 + crate::engine::DRAIN_INTERVAL_MS));
    }

    #[test]
    fn releasing_a_namespace_gives_its_messages_back() {
        let mut b = Backlog::new();
        b.hold(NS, LIMIT);
        let mut q = Q::default();
        q.q.extend([(tag(NS, 1, 0), 1), (tag(NS, 1, 1), 1)]);
        assert!(pass(&mut b, &mut q).took());
        assert_eq!(b.held_by(NS, 1), (2, 2));
        assert_eq!(b.release(NS).len(), 2);
        assert!(!b.holds(NS) && !b.is_active());
        assert!(!b.is_busy(), "nothing held: never flooded");
        assert_eq!(b.held_by(NS, 1), (0, 0));
    }

    #[test]
    fn a_message_longer_than_the_byte_limit_is_charged_its_header_only() {
        let mut b = Backlog::new();
        b.hold(NS, LIMIT);
        let mut q = Q::default();
        // 1 GiB, sent by rendezvous: held is its header, charged HELD_CHARGE_MAX at most
        q.q.push_back((tag(NS, 1, 0), 1 << 30));
        let p = pass(&mut b, &mut q);
        assert!(p.floods.is_empty());
        assert_eq!(
            b.held_by(NS, 1),
            (1, HELD_CHARGE_MAX),
            "the first is let through"
        );
        q.q.push_back((tag(NS, 1, 1), 1 << 30));
        assert_eq!(
            pass(&mut b, &mut q).floods,
            vec![1],
            "the second passes the limit"
        );
    }

    #[test]
    fn forgotten_peers_messages_and_flood_marks_go() {
        let (mut b, mut q) = peer_1_over_the_limit();
        pass(&mut b, &mut q);
        assert_eq!(b.len(), 1);
        assert!(
            b.forget_unknown(0, |p| p != 1 && p != 2).is_empty(),
            "nothing forgotten yet"
        );
        let gone = b.forget_unknown(1, |p| p != 1 && p != 2);
        assert_eq!(gone.len(), 1, "peer 2's held message");
        assert!(b.is_empty());
        q.q.push_back((tag(NS, 1, 0), 1));
        assert_eq!(pass(&mut b, &mut q).held, 1, "peer 1's flood mark went too");
    }
}
