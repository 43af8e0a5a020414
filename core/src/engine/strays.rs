//! D2 within D4's bound, decided once: which messages are strays, when a node sweeps for them,
//! and how much one pass may do. The adapter's [`StrayQueue`] does the probes.
//!
//! A stray is a message in a namespace id nobody here registered, or — where the layout has a
//! pair field — a message in a registered namespace whose pair value this node gave no peer:
//! no proven peer can have sent it (a stranger's guess, or a peer's the node has forgotten).
//! Those are found without touching any message a peer may have sent: UCX probes by a pattern,
//! so the values nobody was given are covered by aligned blocks ([`pair_gaps`]), each a probe
//! with the namespace field and a prefix of the pair field fixed.

use crate::layout::TagLayout;
use crate::registry::Registry;
use crate::wellknown::CONTROL_ID;
#[cfg(feature = "alloc")]
use alloc::vec::Vec;

/// How often (adapter ms) a node starts a sweep over every unregistered id.
pub const DRAIN_INTERVAL_MS: u64 = 10;

/// How many blocks of [`pair_gaps`] one sweep probes per registered namespace at most (each
/// probe may scan the transport's whole queue, and the blocks grow with the peers: 2 × pair
/// bits each). The next sweep goes on with the blocks after them, so every block is probed
/// within `blocks / GAP_PROBES_PER_SWEEP` sweeps.
pub const GAP_PROBES_PER_SWEEP: u32 = 64;

/// How many unexpected messages one pass takes from the head of the transport's queue at most
/// (each a constant-time look and take) before it sweeps id by id; and how many the sweep
/// takes at most. Under a flood the adapter's time budget ends a pass first.
pub const STRAY_TAKES_PER_CALL: u32 = 8192;

/// The adapter's view of its transport's queue of unexpected tag messages, by namespace id
/// (a probe with the namespace field's mask).
pub trait StrayQueue {
    /// Takes out (and drops) one message waiting in namespace `id`; whether one was there.
    fn take_one(&mut self, id: u16) -> bool;
    /// Whether a message waits in namespace `id`, without taking it.
    fn waits(&mut self, id: u16) -> bool;
}

/// Whether messages for namespace id `id` belong to someone here: a library registered on
/// this registry, legacy code (id 0), or the control plane (the control id carries withdrawal
/// acknowledgements, taken by their own receive). Everything else is a stray (D2).
pub fn is_owned<const CAP: usize>(registry: &Registry<CAP>, id: u16) -> bool {
    id == 0 || id == CONTROL_ID || registry.name_of(id).is_some()
}

/// Whether namespace `id`'s messages carry a pair value a peer was given (every managed id but
/// the control plane's, whose acknowledgement tags carry an unguessable sequence number in
/// those bits instead).
pub fn carries_pair(layout: &TagLayout, id: u16) -> bool {
    layout.pair_bits() != 0 && id != 0 && id != CONTROL_ID
}

/// The pair values nobody was given, as aligned blocks `(value, mask)` within the pair field
/// (`mask`'s bits are the block's fixed prefix): the complement of `given` (sorted, unique) in
/// `0..2^bits`, 0 included (no peer is ever given 0). At most `2 * bits` blocks per gap, so
/// `2 * bits * (given.len() + 1)` in all.
#[cfg(feature = "alloc")]
pub fn pair_gaps(given: &[u32], bits: u32) -> Vec<(u32, u32)> {
    let full: u64 = (1u64 << bits) - 1;
    let mut out = Vec::new();
    let mut push_interval = |mut lo: u64, hi: u64| {
        while lo <= hi {
            // the largest aligned block starting at lo that ends by hi
            let mut size = if lo == 0 {
                1u64 << bits
            } else {
                lo & lo.wrapping_neg()
            };
            while lo + size - 1 > hi {
                size >>= 1;
            }
            out.push((lo as u32, (full & !(size - 1)) as u32));
            lo += size;
        }
    };
    let mut next = 0u64;
    for &v in given {
        let v = v as u64;
        if v > next {
            push_interval(next, v - 1);
        }
        next = v + 1;
    }
    if next <= full {
        push_interval(next, full);
    }
    out
}

/// What a pass needs to tell a forged pair value: the layout, whether a value was given to a
/// peer, and the blocks of values nobody was given ([`pair_gaps`]).
pub struct PairCheck<'a> {
    /// The node's layout.
    pub layout: &'a TagLayout,
    /// Whether a peer was given (or holds for a receive) this value.
    pub given: &'a dyn Fn(u32) -> bool,
    /// [`pair_gaps`] of the given values.
    pub gaps: &'a [(u32, u32)],
}

impl PairCheck<'_> {
    /// Whether a message with `tag` in owned namespace `id` is a stray: it carries a pair value
    /// nobody was given.
    pub fn forged(&self, id: u16, tag: u64) -> bool {
        carries_pair(self.layout, id) && !(self.given)(self.layout.pair_of(tag))
    }
}

/// The stray sweep's state: started every [`DRAIN_INTERVAL_MS`], resumed on the next call
/// where a pass ran out of budget, and run on every call while strays keep coming (a flood).
#[derive(Clone, Copy, Debug, Default)]
pub struct Sweep {
    /// The next id to probe; 0 when no sweep is under way.
    next_id: u16,
    /// In an owned id: the next block of [`pair_gaps`] to probe (1-based; 0: its oldest
    /// message first).
    next_gap: u32,
    /// Where this sweep's blocks start in [`pair_gaps`]: each sweep probes at most
    /// [`GAP_PROBES_PER_SWEEP`] of them per namespace, the next sweep the ones after.
    gap_start: u32,
    /// The last pass took strays.
    flooded: bool,
    /// Messages in namespace id 0 are strays too (no legacy code uses the worker).
    id0_strays: bool,
    last_start_ms: Option<u64>,
}

/// What the adapter's queue can do for a pass besides probing by id: look at its oldest
/// message and take a message by its exact tag. A transport that cannot (the mock's fabric
/// can) answers `None`/`false` and the pass sweeps by id only.
pub trait QueueHead: StrayQueue {
    /// The tag of the oldest unexpected message, if any.
    fn oldest_tag(&mut self) -> Option<u64>;
    /// Takes (and drops) the oldest unexpected message as a stray of namespace id `id`;
    /// `forged`: in a registered namespace, for its pair value.
    fn take_oldest(&mut self, id: u16, forged: bool) -> bool;
    /// Takes (and drops) one message matching `(tag, mask)` as a stray of namespace id `id`;
    /// `forged`: in a registered namespace, for its pair value.
    fn take_matching(&mut self, tag: u64, mask: u64, id: u16, forged: bool) -> bool;
    /// The tag of the oldest message matching `(tag, mask)`, without taking it.
    fn first(&mut self, tag: u64, mask: u64) -> Option<u64>;
}

impl Sweep {
    /// No sweep under way.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a pass is due at adapter time `now_ms` (a sweep starts every
    /// [`DRAIN_INTERVAL_MS`]; one under way, or a flood, continues on every call).
    pub fn due(&mut self, now_ms: u64) -> bool {
        if self
            .last_start_ms
            .is_none_or(|t| now_ms >= t.saturating_add(DRAIN_INTERVAL_MS))
        {
            self.last_start_ms = Some(now_ms);
            if self.next_id == 0 {
                self.next_id = 1;
                self.next_gap = 0;
                self.gap_start = self.gap_start.wrapping_add(GAP_PROBES_PER_SWEEP);
            }
        }
        self.next_id != 0 || self.flooded
    }

    /// Whether messages with namespace id 0 are strays: `false` (the default) leaves them to
    /// legacy code, which receives its tags on the same worker with its own calls (R6); `true`
    /// where no such code exists, so that a stranger's id-0 tags are drained like any other.
    pub fn set_id0_strays(&mut self, strays: bool) {
        self.id0_strays = strays;
    }

    /// Whether the last pass took strays: they keep coming, and the adapter should give the
    /// drain more of each call than it gives to taking in more messages.
    pub fn is_flooded(&self) -> bool {
        self.flooded
    }

    /// When a pass is next due (adapter time): at once while a sweep is under way or strays
    /// keep coming, else when the next sweep starts.
    pub fn next_ms(&self) -> Option<u64> {
        if self.next_id != 0 || self.flooded {
            return Some(0);
        }
        Some(
            self.last_start_ms
                .map_or(0, |t| t.saturating_add(DRAIN_INTERVAL_MS)),
        )
    }

    /// One pass: first the head of the queue while it is a stray (at most
    /// [`STRAY_TAKES_PER_CALL`] looks); stopped at a message someone here owns, the probes by
    /// namespace bit behind it; then the sweep id by id from where it stopped (at most
    /// [`STRAY_TAKES_PER_CALL`] takes) — within `budget` probes that find nothing (each scans
    /// the whole queue); `out_of_time` ends it early (the queue's length is a flood's to
    /// decide). Returns (strays taken, looks at the head and by bit, probes that found
    /// nothing).
    pub fn pass<const CAP: usize>(
        &mut self,
        registry: &Registry<CAP>,
        budget: u32,
        queue: &mut impl QueueHead,
        pairs: &PairCheck<'_>,
        out_of_time: impl Fn() -> bool,
    ) -> (u64, u64, u64) {
        let (mut taken, mut looks, mut probes) = (0u64, 0u64, 0u64);
        let id0_strays = self.id0_strays;
        let owned = |id: u16| is_owned(registry, id) && !(id == 0 && id0_strays);
        let stray_kind = |tag: u64| {
            let id = registry.layout().namespace_of(tag);
            let forged = owned(id) && pairs.forged(id, tag);
            (id, forged, forged || !owned(id))
        };
        let mut stuck = false;
        for _ in 0..STRAY_TAKES_PER_CALL {
            if out_of_time() {
                self.flooded = taken > 0;
                return (taken, looks, probes);
            }
            looks += 1;
            let Some(tag) = queue.oldest_tag() else {
                break;
            };
            let (id, forged, stray) = stray_kind(tag);
            if !stray || !queue.take_oldest(id, forged) {
                stuck = true;
                break;
            }
            taken += 1;
        }
        // The head is a message someone here owns (legacy id 0's, a library's not received
        // yet, the control plane's): the strays behind it are found by probes for "bit b of the
        // namespace field is set", one bit after the other. Each stops at the first message
        // with that bit set, which is near the head — only owned messages and strays without
        // that bit are before it, and the next bits take those — so a flood behind a message
        // that stays (a stranger's id-0 tag: legacy code's, never drained) is still taken in
        // constant time per message. A bit whose first message is owned is left for this pass.
        // Where id 0 is nobody's ([`Sweep::set_id0_strays`]), "the namespace field is 0" is
        // one more pattern.
        let field = registry.layout().namespace_field();
        let n = field.width() + u32::from(id0_strays);
        let mut blocked: u32 = 0;
        let all = (1u32 << n) - 1;
        let mut b = 0u32;
        // A probe that takes a message stops at it; one that finds nothing scans the whole
        // queue. `budget` counts the misses, at most half of it here (the sweep below always
        // gets the rest, so it goes on from pass to pass); looks and takes are bounded like
        // the head's.
        let mut budget = budget;
        let bit_misses_max = budget / 2;
        let cap = STRAY_TAKES_PER_CALL as u64;
        while stuck
            && blocked != all
            && probes < bit_misses_max as u64
            && looks < cap
            && !out_of_time()
        {
            b = (b + 1) % n;
            if blocked & (1 << b) != 0 {
                continue;
            }
            let (tag, mask) = if b < field.width() {
                let bit = 1u64 << (field.shift() + b);
                (bit, bit)
            } else {
                (0, field.mask())
            };
            looks += 1;
            let first = queue.first(tag, mask);
            if first.is_none() {
                budget -= 1;
                probes += 1;
            }
            let Some((id, forged, true)) = first.map(stray_kind) else {
                blocked |= 1 << b;
                continue;
            };
            if !queue.take_matching(tag, mask, id, forged) {
                blocked |= 1 << b;
                continue;
            }
            taken += 1;
        }
        let layout = pairs.layout;
        let head_taken = taken;
        fn took(budget: &mut u32, probes: &mut u64, taken: &mut u64, hit: bool) -> bool {
            if hit {
                *taken += 1;
            } else {
                *budget -= 1;
                *probes += 1;
            }
            hit
        }
        while budget > 0
            && taken - head_taken < STRAY_TAKES_PER_CALL as u64
            && self.next_id != 0
            && !out_of_time()
        {
            let id = self.next_id;
            if id as usize >= registry.capacity() {
                self.next_id = 0;
                break;
            }
            if is_owned(registry, id) {
                if !carries_pair(layout, id) {
                    self.next_id += 1;
                    continue;
                }
                // Registered: only messages with a pair value nobody was given. First the
                // namespace's oldest message (one probe that stops at it): while that is a
                // forgery, it is taken by its exact tag; nothing there, nothing to sweep.
                if self.next_gap == 0 {
                    let space = layout.space(id);
                    match queue.first(space.tag, space.mask) {
                        Some(tag) if pairs.forged(id, tag) => {
                            // the same probe, with removal: the message just looked at
                            let hit = queue.take_matching(space.tag, space.mask, id, true);
                            if !took(&mut budget, &mut probes, &mut taken, hit) {
                                self.next_gap = 1;
                            }
                        }
                        Some(_) => self.next_gap = 1,
                        None => {
                            took(&mut budget, &mut probes, &mut taken, false);
                            self.next_id += 1;
                        }
                    }
                    continue;
                }
                // A peer's message is the oldest: the forgeries behind it, block by block of
                // the values nobody was given (each probe may scan the queue).
                let (n, k) = (pairs.gaps.len(), self.next_gap as usize - 1);
                let block = (k < n.min(GAP_PROBES_PER_SWEEP as usize))
                    .then(|| pairs.gaps.get((self.gap_start as usize + k) % n))
                    .flatten();
                let Some(&(value, mask)) = block else {
                    self.next_id += 1;
                    self.next_gap = 0;
                    continue;
                };
                let tag = layout.base(id) | layout.pair_value_bits(value);
                let mask = layout.fixed_mask() | layout.pair_value_bits(mask);
                let hit = queue.take_matching(tag, mask, id, true);
                if !took(&mut budget, &mut probes, &mut taken, hit) {
                    self.next_gap += 1;
                }
                continue;
            }
            // a hit: the same id again, there may be more
            if !took(&mut budget, &mut probes, &mut taken, queue.take_one(id)) {
                self.next_id += 1;
            }
        }
        self.flooded = taken > 0;
        (taken, looks, probes)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::TagLayout;
    use std::collections::VecDeque;

    const L: TagLayout = TagLayout::DEFAULT;
    const GIVEN: u32 = 5;

    /// A queue of tags, oldest first.
    struct Q(VecDeque<u64>);
    impl Q {
        fn take_first(&mut self, tag: u64, mask: u64) -> bool {
            match self.0.iter().position(|&x| (x ^ tag) & mask == 0) {
                Some(k) => self.0.remove(k).is_some(),
                None => false,
            }
        }
        fn ids(&self) -> Vec<u16> {
            self.0.iter().map(|&t| L.namespace_of(t)).collect()
        }
    }
    impl StrayQueue for Q {
        fn take_one(&mut self, id: u16) -> bool {
            let s = L.space(id);
            self.take_first(s.tag, s.mask)
        }
        fn waits(&mut self, id: u16) -> bool {
            let s = L.space(id);
            self.0.iter().any(|&x| (x ^ s.tag) & s.mask == 0)
        }
    }
    impl QueueHead for Q {
        fn oldest_tag(&mut self) -> Option<u64> {
            self.0.front().copied()
        }
        fn take_oldest(&mut self, _: u16, _: bool) -> bool {
            self.0.pop_front().is_some()
        }
        fn take_matching(&mut self, tag: u64, mask: u64, _: u16, _: bool) -> bool {
            self.take_first(tag, mask)
        }
        fn first(&mut self, tag: u64, mask: u64) -> Option<u64> {
            self.0.iter().copied().find(|&x| (x ^ tag) & mask == 0)
        }
    }

    /// A message of `id` from the peer given [`GIVEN`] (ids without a pair: its guard only).
    fn honest(id: u16) -> u64 {
        let pair = if carries_pair(&L, id) { GIVEN } else { 0 };
        L.base(id) | L.pair_value_bits(pair) | 7
    }

    fn with_check<R>(f: impl FnOnce(&PairCheck<'_>) -> R) -> R {
        let gaps = pair_gaps(&[GIVEN], L.pair_bits());
        let given = |v: u32| v == GIVEN;
        f(&PairCheck {
            layout: &L,
            given: &given,
            gaps: &gaps,
        })
    }

    #[test]
    fn a_sweep_takes_strays_only_within_its_budget_and_resumes() {
        let reg: Registry<64> = Registry::new(TagLayout::DEFAULT);
        let ns = reg.register("mine").unwrap();
        let mine = ns.id();
        // Two unregistered ids low in the sweep's order.
        let mut low = (2..10).filter(|&id| id != mine);
        let (s1, s2) = (low.next().unwrap(), low.next().unwrap());
        // Head: a stray, then one of ours (stops the head phase); strays further back.
        let mut q = Q([50, mine, 0, CONTROL_ID, s1, s2, s2]
            .into_iter()
            .map(honest)
            .collect());
        let mut s = Sweep::new();
        assert!(s.due(0));
        let (taken, looks, probes) = with_check(|p| s.pass(&reg, 3, &mut q, p, || false));
        assert!(
            looks > 2,
            "the head stray taken, stopped at one of ours, then bit probes"
        );
        assert!(
            taken >= 2,
            "strays behind ours found by namespace bits: {taken}"
        );
        assert_eq!(probes, 3, "within the budget");
        assert!(q.ids().contains(&mine) && q.ids().contains(&0) && q.ids().contains(&CONTROL_ID));
        assert!(s.due(1), "flooded / under way: again on the next call");
        while s.due(1) {
            with_check(|p| s.pass(&reg, 3, &mut q, p, || false));
        }
        assert_eq!(q.ids(), [mine, 0, CONTROL_ID], "only what is owned is left");
        assert!(!s.due(5), "nothing under way until the interval passes");
        assert!(s.due(DRAIN_INTERVAL_MS));
    }

    #[test]
    fn forged_pair_values_in_a_registered_namespace_are_strays_and_nothing_else_is() {
        let reg: Registry<64> = Registry::new(TagLayout::DEFAULT);
        let lease = reg.register("mine").unwrap();
        let mine = lease.id();
        let forged = |pair: u32| L.base(mine) | L.pair_value_bits(pair) | 7;
        let max = (1u32 << L.pair_bits()) - 1;
        // An honest message at the head hides the forged ones behind it from the head phase.
        let mut q = Q([
            honest(mine),
            forged(0),
            forged(GIVEN + 1),
            forged(GIVEN - 1),
            forged(max),
            honest(mine),
            honest(CONTROL_ID) | L.pair_value_bits(9),
            honest(0) | L.pair_value_bits(9),
        ]
        .into_iter()
        .collect());
        let mut s = Sweep::new();
        let mut rounds = 0;
        while s.due(0) && rounds < 1000 {
            with_check(|p| s.pass(&reg, 8, &mut q, p, || false));
            rounds += 1;
        }
        assert_eq!(
            Vec::from(q.0.clone()),
            [
                honest(mine),
                honest(mine),
                honest(CONTROL_ID) | L.pair_value_bits(9),
                honest(0) | L.pair_value_bits(9)
            ],
            "every forged value taken, every honest, control and legacy message left"
        );
    }

    #[test]
    fn many_peers_bound_the_gap_probes_of_a_sweep_and_later_sweeps_go_on() {
        let reg: Registry<64> = Registry::new(TagLayout::DEFAULT);
        let lease = reg.register("mine").unwrap();
        let mine = lease.id();
        let max = (1u32 << L.pair_bits()) - 1;
        let mut x = 0x1234_5678u64;
        let mut rnd = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 33) as u32 & max).max(1)
        };
        let mut given: Vec<u32> = (0..100).map(|_| rnd()).collect();
        given.sort_unstable();
        given.dedup();
        let gaps = pair_gaps(&given, L.pair_bits());
        assert!(
            gaps.len() > 20 * GAP_PROBES_PER_SWEEP as usize,
            "{}",
            gaps.len()
        );
        let honest = L.base(mine) | L.pair_value_bits(given[0]) | 7;
        // forgeries next to given values land in small blocks all over the list
        let forged: Vec<u64> = given
            .iter()
            .map(|&v| L.base(mine) | L.pair_value_bits(v ^ 1) | 7)
            .filter(|&t| !given.contains(&L.pair_of(t)))
            .collect();
        let mut q = Q(std::iter::once(honest)
            .chain(forged.iter().copied())
            .collect());
        let check = |v: u32| given.binary_search(&v).is_ok();
        let pairs = PairCheck {
            layout: &L,
            given: &check,
            gaps: &gaps,
        };
        let mut s = Sweep::new();
        let (mut sweeps, mut now) = (0, 0);
        while q.0.len() > 1 {
            assert!(
                sweeps < 2 + gaps.len() / GAP_PROBES_PER_SWEEP as usize,
                "{sweeps} sweeps"
            );
            if s.due(now) {
                let (_, _, probes) = s.pass(&reg, 32, &mut q, &pairs, || false);
                assert!(probes <= 32);
            }
            if s.next_id == 0 {
                sweeps += 1;
            }
            now += DRAIN_INTERVAL_MS;
        }
        assert_eq!(
            Vec::from(q.0),
            [honest],
            "every forgery taken, the peer's message left"
        );
    }

    #[test]
    fn pair_gaps_cover_exactly_the_values_nobody_was_given() {
        for bits in [1u32, 2, 3, 5] {
            let all = 1u32 << bits;
            // every subset of a few values
            for set in 0u32..(1 << all.min(6)) {
                let given: Vec<u32> = (0..all.min(6)).filter(|v| set >> v & 1 == 1).collect();
                let gaps = pair_gaps(&given, bits);
                assert!(gaps.len() <= (2 * bits as usize) * (given.len() + 1));
                for v in 0..all {
                    let covered = gaps.iter().filter(|&&(g, m)| (v ^ g) & m == 0).count();
                    let expect = usize::from(!given.contains(&v));
                    assert_eq!(covered, expect, "bits {bits} given {given:?} value {v}");
                }
            }
        }
        assert_eq!(pair_gaps(&[], 24), [(0, 0)], "one block: everything");
        assert!(pair_gaps(&[(1 << 24) - 1], 24).len() <= 24);
    }

    #[test]
    fn out_of_time_ends_a_pass() {
        let reg: Registry<64> = Registry::new(TagLayout::DEFAULT);
        let mut q = Q(VecDeque::from([honest(50), honest(51)]));
        let mut s = Sweep::new();
        s.due(0);
        assert_eq!(
            with_check(|p| s.pass(&reg, 8, &mut q, p, || true)),
            (0, 0, 0)
        );
        assert_eq!(q.0.len(), 2);
    }
}
