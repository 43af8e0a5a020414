//! D2 within D4's bound, decided once: which namespace ids' messages are strays, when a node
//! sweeps for them, and how much one pass may do. The adapter's [`StrayQueue`] does the probes.

use crate::registry::Registry;
use crate::wellknown::CONTROL_ID;

/// How often (adapter ms) a node starts a sweep over every unregistered id.
pub const DRAIN_INTERVAL_MS: u64 = 10;

/// How many unexpected messages one pass takes from the head of the transport's queue at most
/// (each a hashed exact lookup) before it sweeps id by id.
pub const STRAY_TAKES_PER_CALL: u32 = 1024;

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

/// The stray sweep's state: started every [`DRAIN_INTERVAL_MS`], resumed on the next call
/// where a pass ran out of budget, and run on every call while strays keep coming (a flood).
#[derive(Clone, Copy, Debug, Default)]
pub struct Sweep {
    /// The next id to probe; 0 when no sweep is under way.
    next_id: u16,
    /// The last pass took strays.
    flooded: bool,
    last_start_ms: Option<u64>,
}

/// What the adapter's queue can do for a pass besides probing by id: look at its oldest
/// message and take a message by its exact tag. A transport that cannot (the mock's fabric
/// can) answers `None`/`false` and the pass sweeps by id only.
pub trait QueueHead: StrayQueue {
    /// The namespace id of the oldest unexpected message, if any.
    fn oldest_id(&mut self) -> Option<u16>;
    /// Takes (and drops) the oldest unexpected message as a stray of namespace id `id`.
    fn take_oldest(&mut self, id: u16) -> bool;
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
            }
        }
        self.next_id != 0 || self.flooded
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
    /// [`STRAY_TAKES_PER_CALL`]), then the sweep id by id from where it stopped, within `budget`
    /// probes; `out_of_time` ends it early (every probe may scan the whole queue, whose length
    /// a flood decides). Returns (strays taken, head looks, id probes).
    pub fn pass<const CAP: usize>(
        &mut self,
        registry: &Registry<CAP>,
        budget: u32,
        queue: &mut impl QueueHead,
        out_of_time: impl Fn() -> bool,
    ) -> (u64, u64, u64) {
        let (mut taken, mut looks, mut probes) = (0u64, 0u64, 0u64);
        for _ in 0..STRAY_TAKES_PER_CALL {
            if out_of_time() {
                self.flooded = taken > 0;
                return (taken, looks, probes);
            }
            looks += 1;
            let Some(id) = queue.oldest_id() else {
                break;
            };
            if is_owned(registry, id) || !queue.take_oldest(id) {
                break;
            }
            taken += 1;
        }
        let mut budget = budget;
        while budget > 0 && self.next_id != 0 && !out_of_time() {
            let id = self.next_id;
            if id as usize >= registry.capacity() {
                self.next_id = 0;
                break;
            }
            if is_owned(registry, id) {
                self.next_id += 1;
                continue;
            }
            budget -= 1;
            probes += 1;
            if queue.take_one(id) {
                taken += 1; // the same id again: there may be more
            } else {
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

    /// A queue of namespace ids, oldest first.
    struct Q(VecDeque<u16>);
    impl StrayQueue for Q {
        fn take_one(&mut self, id: u16) -> bool {
            match self.0.iter().position(|&x| x == id) {
                Some(k) => {
                    self.0.remove(k);
                    true
                }
                None => false,
            }
        }
        fn waits(&mut self, id: u16) -> bool {
            self.0.contains(&id)
        }
    }
    impl QueueHead for Q {
        fn oldest_id(&mut self) -> Option<u16> {
            self.0.front().copied()
        }
        fn take_oldest(&mut self, id: u16) -> bool {
            self.0.front() == Some(&id) && self.0.pop_front().is_some()
        }
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
        let mut q = Q(VecDeque::from([50, mine, 0, CONTROL_ID, s1, s2, s2]));
        let mut s = Sweep::new();
        assert!(s.due(0));
        let (taken, looks, probes) = s.pass(&reg, 3, &mut q, || false);
        assert_eq!(looks, 2, "the head stray taken, stopped at one of ours");
        assert!(taken >= 2, "then found by id: {taken}");
        assert_eq!(probes, 3, "within the budget");
        assert!(q.0.contains(&mine) && q.0.contains(&0) && q.0.contains(&CONTROL_ID));
        assert!(s.due(1), "flooded / under way: again on the next call");
        while s.due(1) {
            s.pass(&reg, 3, &mut q, || false);
        }
        assert_eq!(q.0, [mine, 0, CONTROL_ID], "only what is owned is left");
        assert!(!s.due(5), "nothing under way until the interval passes");
        assert!(s.due(DRAIN_INTERVAL_MS));
    }

    #[test]
    fn out_of_time_ends_a_pass() {
        let reg: Registry<64> = Registry::new(TagLayout::DEFAULT);
        let mut q = Q(VecDeque::from([50, 51]));
        let mut s = Sweep::new();
        s.due(0);
        assert_eq!(s.pass(&reg, 8, &mut q, || true), (0, 0, 0));
        assert_eq!(q.0.len(), 2);
    }
}
