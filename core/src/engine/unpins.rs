//! R7's last step, decided once for every adapter: when an id a node's sessions pinned may be
//! given back to the registry, and what is drained from the transport's queue first.
//!
//! An id is pinned by each connection that had it announced; a pin goes when the peer confirms
//! the withdrawal (both halves of its acknowledgement arrived, so nothing more it sent to the
//! id is on the way) or, [`CLOSED_PIN_LINGER_MS`] after, when the connection ends. Before the
//! registry frees a *quarantined* id, whatever arrived for it is taken out as strays (own
//! worker) — or, on a host's worker, where a host library's tags may fall in any id and must
//! never be taken, the id is held while anything waits in it.

use super::live::Link;
use super::strays::StrayQueue;
use crate::registry::Registry;
use crate::session::Session;
use alloc::boxed::Box;
use alloc::vec::Vec;

/// Whose queue it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueOwner {
    /// The node owns the worker: what arrived for a quarantined id is drained as strays.
    Node,
    /// A host owns the worker (its libraries' tags may be anywhere): nothing is taken; a
    /// quarantined id with anything waiting in it stays held, looked at again at most every
    /// `look_every_ms` unless a confirmation came.
    Host {
        /// The least time between two looks at held ids.
        look_every_ms: u64,
    },
}

impl QueueOwner {
    /// A host's queue, its held ids looked at again every [`DRAIN_INTERVAL_MS`](super::DRAIN_INTERVAL_MS).
    pub const HOST: QueueOwner = QueueOwner::Host {
        look_every_ms: super::DRAIN_INTERVAL_MS,
    };
}

/// What one [`Unpins::run`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnpinPass {
    /// Ids given back to the registry.
    pub unpinned: u64,
    /// Messages drained as strays.
    pub strays: u64,
    /// Probes made (each may scan the transport's whole queue: bounded by the budget).
    pub probes: u64,
    /// Whether anything changed (an id was unpinned or a stray taken, or a confirmation came).
    pub changed: bool,
}

/// The ids a node's sessions are done with, on their way back to the registry.
pub struct Unpins<const CAP: usize> {
    /// Pins of ended connections, waiting out [`CLOSED_PIN_LINGER_MS`].
    closed: Box<ClosedPins<CAP>>,
    /// Ids due to be unpinned (one entry per pin), waiting for their drain or, on a host's
    /// worker, for nothing to wait in them.
    pending: Vec<u16>,
    last_look_ms: Option<u64>,
}

impl<const CAP: usize> Default for Unpins<CAP> {
    fn default() -> Self {
        Unpins {
            closed: Box::default(),
            pending: Vec::new(),
            last_look_ms: None,
        }
    }
}

impl<const CAP: usize> Unpins<CAP> {
    /// Nothing pending.
    pub fn new() -> Self {
        Self::default()
    }

    /// Collects the withdrawals the peer of each link confirmed (each confirmation restarts
    /// that connection's acknowledgement deadline). Returns whether any came.
    pub(crate) fn collect_confirmed<L: Link<CAP>>(&mut self, links: &mut [L]) -> bool {
        let before = self.pending.len();
        for link in links {
            let (session, deadlines) = link.deadline_parts();
            while let Some(id) = session.take_confirmed() {
                self.pending.push(id);
                deadlines.acks_arrived();
            }
        }
        self.pending.len() != before
    }

    /// A connection ended at `now_ms`: its confirmed withdrawals are due now, its other pins
    /// after the linger (what the peer sent before it saw the end may still arrive).
    pub fn connection_ended(&mut self, session: &mut Session<CAP>, now_ms: u64) {
        while let Some(id) = session.take_confirmed() {
            self.pending.push(id);
        }
        self.closed.hold(&session.finish(), now_ms);
    }

    /// Gives back every id that is due at `now_ms`, draining or looking at each quarantined
    /// one first as `owner` says, within `budget` probes; what the budget leaves waits for
    /// the next call. `confirmed`: a confirmation came since the last call (a host's held ids
    /// are looked at at once then).
    pub fn run(
        &mut self,
        registry: &Registry<CAP>,
        now_ms: u64,
        owner: QueueOwner,
        budget: u32,
        confirmed: bool,
        queue: &mut impl StrayQueue,
    ) -> UnpinPass {
        let pending = &mut self.pending;
        self.closed.take_due(now_ms, |id| pending.push(id));
        let mut pass = UnpinPass {
            changed: confirmed,
            ..UnpinPass::default()
        };
        if self.pending.is_empty() {
            return pass;
        }
        if let QueueOwner::Host { look_every_ms } = owner {
            let recent = self
                .last_look_ms
                .is_some_and(|t| now_ms < t.saturating_add(look_every_ms));
            if recent && !confirmed {
                return pass;
            }
            self.last_look_ms = Some(now_ms);
        }
        let mut budget = budget;
        let mut k = 0;
        while k < self.pending.len() {
            let id = self.pending[k];
            if registry.is_quarantined(id) {
                let clear = match owner {
                    QueueOwner::Node => loop {
                        if budget == 0 {
                            break false;
                        }
                        budget -= 1;
                        pass.probes += 1;
                        if !queue.take_one(id) {
                            break true;
                        }
                        pass.strays += 1;
                        pass.changed = true;
                    },
                    QueueOwner::Host { .. } => {
                        if budget == 0 {
                            break;
                        }
                        budget -= 1;
                        pass.probes += 1;
                        !queue.waits(id)
                    }
                };
                if !clear {
                    k += 1; // held, or out of budget: the next call goes on
                    continue;
                }
            }
            self.pending.swap_remove(k);
            registry.unpin(id);
            pass.unpinned += 1;
            pass.changed = true;
        }
        pass
    }

    /// When an ended connection's pins next come due (adapter time), if any are held.
    pub fn next_due(&self) -> Option<u64> {
        self.closed.next_due()
    }

    /// Quarantined ids still held here (their drain is not finished, or on a host's worker
    /// something waits in them).
    pub fn held(&self, registry: &Registry<CAP>) -> usize {
        self.pending
            .iter()
            .filter(|&&id| registry.is_quarantined(id))
            .count()
    }

    /// The node goes (its worker with it, so nothing more can arrive for any id): every pin
    /// of `sessions` and every pending one is given back at once.
    pub fn release_all<'s>(
        &mut self,
        registry: &Registry<CAP>,
        sessions: impl IntoIterator<Item = &'s mut Session<CAP>>,
    ) {
        for s in sessions {
            while let Some(id) = s.take_confirmed() {
                self.pending.push(id);
            }
            self.pending.extend(s.finish());
        }
        let pending = &mut self.pending;
        self.closed.take_all(|id| pending.push(id));
        for id in self.pending.drain(..) {
            registry.unpin(id);
        }
    }
}

/// R7: how long (ms) the ids a connection had pinned stay quarantined after the connection
/// ended (closed by either side, superseded, or failed). Until the peer has seen the end it may
/// still send to them, and a transport can deliver what it sent before — over shared memory even
/// after the peer died; meanwhile such a message lands in a quarantined id and is drained as a
/// stray instead of reaching a name that took the id next. (Found by the `network` fuzz target
/// as a route to an id the closing side had already freed.) Confirmed withdrawals are not
/// delayed: the peer's acknowledgement came after everything it sent to the id.
pub const CLOSED_PIN_LINGER_MS: u64 = 2_000;

/// The pins of ended connections, held for [`CLOSED_PIN_LINGER_MS`] (R7). Per id: how many
/// pins wait and until when (an id pinned by several ended connections waits for the last of
/// them). No allocation: one slot per registry id.
pub struct ClosedPins<const CAP: usize> {
    until: [u64; CAP],
    count: [u32; CAP],
    held: u32,
}

impl<const CAP: usize> Default for ClosedPins<CAP> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const CAP: usize> ClosedPins<CAP> {
    /// Nothing held.
    pub const fn new() -> Self {
        ClosedPins {
            until: [0; CAP],
            count: [0; CAP],
            held: 0,
        }
    }

    /// Holds the pins a connection that ended at `now_ms` gave back (`Session::finish`).
    pub fn hold(&mut self, ids: &[u16], now_ms: u64) {
        let until = now_ms.saturating_add(CLOSED_PIN_LINGER_MS);
        for &id in ids {
            if let Some(c) = self.count.get_mut(id as usize) {
                *c += 1;
                self.until[id as usize] = until;
                self.held += 1;
            }
        }
    }

    /// Hands `unpin` each pin whose linger has passed at `now_ms` (once per pin held).
    pub fn take_due(&mut self, now_ms: u64, mut unpin: impl FnMut(u16)) {
        if self.held == 0 {
            return;
        }
        for id in 0..CAP {
            if self.count[id] > 0 && now_ms >= self.until[id] {
                for _ in 0..self.count[id] {
                    unpin(id as u16);
                }
                self.held -= self.count[id];
                self.count[id] = 0;
            }
        }
    }

    /// When the next held pin's linger ends (adapter time), if any is held.
    pub fn next_due(&self) -> Option<u64> {
        (self.held > 0)
            .then(|| {
                (0..CAP)
                    .filter(|&id| self.count[id] > 0)
                    .map(|id| self.until[id])
                    .min()
            })
            .flatten()
    }

    /// Hands `unpin` every pin held (the node is going away: nothing more can arrive).
    pub fn take_all(&mut self, unpin: impl FnMut(u16)) {
        self.take_due(u64::MAX, unpin);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::engine::CLOSED_PIN_LINGER_MS;
    use crate::TagLayout;
    use std::collections::BTreeMap;

    /// A queue of message counts by namespace id.
    #[derive(Default)]
    struct Q(BTreeMap<u16, u32>);
    impl StrayQueue for Q {
        fn take_one(&mut self, id: u16) -> bool {
            match self.0.get_mut(&id) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    true
                }
                _ => false,
            }
        }
        fn waits(&mut self, id: u16) -> bool {
            self.0.get(&id).is_some_and(|&n| n > 0)
        }
    }

    fn quarantined(reg: &'static Registry<64>, name: &str) -> u16 {
        let ns = reg.register(name).unwrap();
        let id = ns.id();
        assert!(reg.pin(ns.token()));
        drop(ns);
        assert!(reg.is_quarantined(id));
        id
    }

    fn registry() -> &'static Registry<64> {
        Box::leak(Box::new(Registry::new(TagLayout::DEFAULT)))
    }

    #[test]
    fn a_quarantined_id_is_drained_before_it_is_freed_within_the_budget() {
        let reg = registry();
        let id = quarantined(reg, "gone");
        let mut q = Q::default();
        q.0.insert(id, 5);
        let mut u: Unpins<64> = Unpins::new();
        u.pending.push(id);
        let p = u.run(reg, 0, QueueOwner::Node, 3, true, &mut q);
        assert_eq!((p.strays, p.probes, p.unpinned), (3, 3, 0), "out of budget");
        assert!(reg.is_quarantined(id));
        assert_eq!(u.held(reg), 1);
        let p = u.run(reg, 0, QueueOwner::Node, 3, false, &mut q);
        assert_eq!((p.strays, p.probes, p.unpinned), (2, 3, 1));
        assert!(!reg.is_quarantined(id), "drained, then freed");
        assert_eq!(q.0[&id], 0);
        assert_eq!(u.held(reg), 0);
        let p = u.run(reg, 0, QueueOwner::Node, 3, false, &mut q);
        assert_eq!(p, UnpinPass::default());
    }

    #[test]
    fn a_host_queue_is_looked_at_never_taken_and_holds_the_id() {
        let reg = registry();
        let id = quarantined(reg, "gone");
        let mut q = Q::default();
        q.0.insert(id, 1);
        let mut u: Unpins<64> = Unpins::new();
        u.pending.push(id);
        let host = QueueOwner::Host { look_every_ms: 10 };
        let p = u.run(reg, 0, host, 8, true, &mut q);
        assert_eq!((p.strays, p.probes, p.unpinned), (0, 1, 0));
        assert_eq!(q.0[&id], 1, "the host's message is left alone");
        q.0.insert(id, 0); // the host received it
        let p = u.run(reg, 5, host, 8, false, &mut q);
        assert_eq!(p.probes, 0, "not looked at again before look_every_ms");
        let p = u.run(reg, 10, host, 8, false, &mut q);
        assert_eq!(p.unpinned, 1);
        assert!(!reg.is_quarantined(id));
    }

    #[test]
    fn an_ended_connection_pins_wait_out_the_linger() {
        use crate::identity::Identity;
        use crate::wire::Role;
        let reg = registry();
        let id = quarantined(reg, "gone");
        // A session that holds nothing: its `finish` gives no pins; feed the pin directly.
        let mut s: Session<64> = Session::new(
            Role::Initiator,
            &Identity::from_seed(&[1; 32]),
            reg.layout(),
        );
        let mut u: Unpins<64> = Unpins::new();
        u.connection_ended(&mut s, 100);
        u.closed.hold(&[id], 100);
        let mut q = Q::default();
        let p = u.run(
            reg,
            100 + CLOSED_PIN_LINGER_MS - 1,
            QueueOwner::Node,
            8,
            false,
            &mut q,
        );
        assert_eq!(p.unpinned, 0);
        assert!(reg.is_quarantined(id));
        let p = u.run(
            reg,
            100 + CLOSED_PIN_LINGER_MS,
            QueueOwner::Node,
            8,
            false,
            &mut q,
        );
        assert_eq!(p.unpinned, 1);
        assert!(!reg.is_quarantined(id));
    }

    #[test]
    fn release_all_gives_every_pin_back_at_once() {
        let reg = registry();
        let (a, b) = (quarantined(reg, "a"), quarantined(reg, "b"));
        let mut u: Unpins<64> = Unpins::new();
        u.pending.push(a);
        u.closed.hold(&[b], 0);
        u.release_all(reg, core::iter::empty());
        assert!(!reg.is_quarantined(a) && !reg.is_quarantined(b));
    }

    #[test]
    fn closed_pins_wait_for_the_linger_and_the_last_connection() {
        let mut p: ClosedPins<8> = ClosedPins::new();
        let mut out = [0u32; 8];
        p.hold(&[3, 5], 100);
        p.hold(&[3], 1_000);
        p.hold(&[99], 100); // outside the registry: ignored
        p.take_due(100 + CLOSED_PIN_LINGER_MS - 1, |id| out[id as usize] += 1);
        assert_eq!(out, [0; 8]);
        p.take_due(100 + CLOSED_PIN_LINGER_MS, |id| out[id as usize] += 1);
        assert_eq!(
            (out[3], out[5]),
            (0, 1),
            "id 3 waits for its later connection"
        );
        p.take_due(1_000 + CLOSED_PIN_LINGER_MS, |id| out[id as usize] += 1);
        assert_eq!((out[3], out[5]), (2, 1), "one unpin per pin");
        p.hold(&[1], 0);
        p.take_all(|id| out[id as usize] += 1);
        assert_eq!(out[1], 1);
    }
}
