//! The node's library table (feature `alloc`): each registered library's namespace, counters,
//! Active Message queues and peer-event queue, and the rules for what reaches them — kept once
//! here for every adapter.

use super::types::{Counters, LibId, NodeError, PeerEvent};
use crate::namespace::{am_namespace, Namespace};
use crate::registry::Registry;
use crate::TagLayout;
use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;

/// One registered library.
pub struct Library<'r, const CAP: usize, E> {
    ns: Namespace<'r, CAP>,
    counters: Counters,
    /// Active Messages waiting, per local AM id the library listens on.
    am: BTreeMap<u16, VecDeque<Vec<u8>>>,
    /// `Some` once the library listens for peer events.
    peer_events: Option<VecDeque<PeerEvent<E>>>,
}

impl<'r, const CAP: usize, E> Library<'r, CAP, E> {
    /// Its namespace.
    pub fn ns(&self) -> &Namespace<'r, CAP> {
        &self.ns
    }

    /// Its counters.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The (global) AM ids it listens on: the adapter removes their handlers when the library
    /// is released.
    pub fn am_ids(&self) -> impl Iterator<Item = u16> + '_ {
        self.am
            .keys()
            .filter_map(|&local| self.ns.am_id(local).ok())
    }
}

/// Where an Active Message that is not a control frame went ([`Libraries::deliver_am`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AmDelivery {
    /// Queued for the library that owns its namespace and listens on its local id.
    Delivered,
    /// A stray (D2): no library here owns namespace `ns_id`, or the owner does not listen on
    /// that local id. The adapter counts it (per id) and charges the sender.
    Stray {
        /// The namespace id the AM id falls in.
        ns_id: u16,
    },
}

/// The libraries registered on one node, indexed by [`LibId`]. A released library's `LibId`
/// is never handed out again (an operation still naming it fails with `NoSuchLibrary`).
pub struct Libraries<'r, const CAP: usize, E> {
    libs: Vec<Option<Library<'r, CAP, E>>>,
}

impl<const CAP: usize, E> Default for Libraries<'_, CAP, E> {
    fn default() -> Self {
        Libraries { libs: Vec::new() }
    }
}

impl<'r, const CAP: usize, E: Clone> Libraries<'r, CAP, E> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `name` in `registry` and adds it (R1–R7 are the registry's).
    pub(crate) fn register(
        &mut self,
        registry: &'r Registry<CAP>,
        name: &str,
    ) -> Result<LibId, NodeError<E>> {
        let ns = registry.register(name)?;
        self.libs.push(Some(Library {
            ns,
            counters: Counters::default(),
            am: BTreeMap::new(),
            peer_events: None,
        }));
        Ok(LibId(self.libs.len() - 1))
    }

    /// Takes a library out (its namespace is released when the returned value is dropped:
    /// the adapter first clears its AM handlers and cancels its receives).
    pub(crate) fn remove(&mut self, lib: LibId) -> Option<Library<'r, CAP, E>> {
        self.libs.get_mut(lib.0).and_then(Option::take)
    }

    /// A library, if registered.
    pub fn get(&self, lib: LibId) -> Option<&Library<'r, CAP, E>> {
        self.libs.get(lib.0)?.as_ref()
    }

    /// A library's namespace, or `NoSuchLibrary`.
    pub fn ns(&self, lib: LibId) -> Result<&Namespace<'r, CAP>, NodeError<E>> {
        self.get(lib)
            .map(Library::ns)
            .ok_or(NodeError::NoSuchLibrary)
    }

    /// A library's counters (zero for one not registered).
    pub fn counters(&self, lib: LibId) -> Counters {
        self.get(lib).map(Library::counters).unwrap_or_default()
    }

    /// The error for a send from `lib` that found no route on `peer` after `waited_ms` (P2):
    /// `PeerLacksNamespace` naming the library's name, or `NoSuchLibrary`.
    pub fn lacks(&self, lib: LibId, peer: u64, waited_ms: u64) -> NodeError<E> {
        match self.get(lib) {
            Some(l) => NodeError::PeerLacksNamespace {
                name: *l.ns().name(),
                peer,
                waited_ms,
            },
            None => NodeError::NoSuchLibrary,
        }
    }

    /// Slots ever handed out (live or released): the length of a per-library cache.
    pub fn slots(&self) -> usize {
        self.libs.len()
    }

    /// Every live library, in `LibId` order.
    pub fn iter(&self) -> impl Iterator<Item = (LibId, &Library<'r, CAP, E>)> + '_ {
        self.libs
            .iter()
            .enumerate()
            .filter_map(|(i, l)| Some((LibId(i), l.as_ref()?)))
    }

    /// Counts an operation of `lib` that ended: a failure, or a message sent or received.
    pub fn count(&mut self, lib: LibId, ok: bool, sent: bool) {
        if let Some(Some(l)) = self.libs.get_mut(lib.0) {
            let c = &mut l.counters;
            match (ok, sent) {
                (false, _) => c.failed += 1,
                (true, true) => c.sent += 1,
                (true, false) => c.received += 1,
            }
        }
    }

    /// `lib` listens on its local AM id `local`: returns the global AM id whose handler the
    /// adapter installs.
    pub fn am_listen(&mut self, lib: LibId, local: u16) -> Result<u16, NodeError<E>> {
        let l = self.get_mut(lib)?;
        let id = l.ns.am_id(local)?;
        l.am.entry(local).or_default();
        Ok(id)
    }

    /// The next Active Message for `lib` on `local`.
    pub fn am_take(&mut self, lib: LibId, local: u16) -> Option<Vec<u8>> {
        self.get_mut(lib).ok()?.am.get_mut(&local)?.pop_front()
    }

    /// An Active Message (not a control frame) with global id `am_id` arrived: it is queued
    /// for the library that owns its namespace *and* listens on its local id, and counted as
    /// received there; anything else is a stray (D2).
    pub fn deliver_am(&mut self, layout: &TagLayout, am_id: u16, data: Vec<u8>) -> AmDelivery {
        let ns_id = am_namespace(layout, am_id);
        let local = am_id & (layout.am_ids_per_namespace() - 1) as u16;
        let owner = self.libs.iter_mut().flatten().find(|l| l.ns.id() == ns_id);
        match owner.and_then(|l| Some((l.am.get_mut(&local)?, &mut l.counters))) {
            Some((queue, counters)) => {
                counters.received += 1;
                queue.push_back(data);
                AmDelivery::Delivered
            }
            None => AmDelivery::Stray { ns_id },
        }
    }

    /// `lib` starts hearing of peers coming up and going down; every peer in `up` (those
    /// already up) is reported at once.
    pub fn listen_peers(
        &mut self,
        lib: LibId,
        up: impl IntoIterator<Item = u64>,
    ) -> Result<(), NodeError<E>> {
        let q = self
            .get_mut(lib)?
            .peer_events
            .get_or_insert_with(VecDeque::new);
        q.extend(up.into_iter().map(|peer| PeerEvent::Up { peer }));
        Ok(())
    }

    /// The next peer event for a listening library.
    pub fn peer_event(&mut self, lib: LibId) -> Option<PeerEvent<E>> {
        self.get_mut(lib).ok()?.peer_events.as_mut()?.pop_front()
    }

    /// Tells every listening library of `ev`.
    pub fn tell(&mut self, ev: &PeerEvent<E>) {
        for l in self.libs.iter_mut().flatten() {
            if let Some(q) = &mut l.peer_events {
                q.push_back(ev.clone());
            }
        }
    }

    fn get_mut(&mut self, lib: LibId) -> Result<&mut Library<'r, CAP, E>, NodeError<E>> {
        self.libs
            .get_mut(lib.0)
            .and_then(Option::as_mut)
            .ok_or(NodeError::NoSuchLibrary)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    type Libs = Libraries<'static, 64, ()>;

    fn registry() -> &'static Registry<64> {
        extern crate std;
        std::boxed::Box::leak(std::boxed::Box::new(Registry::new(TagLayout::DEFAULT)))
    }

    #[test]
    fn ids_are_not_reused_and_a_released_library_is_gone() {
        let reg = registry();
        let mut libs = Libs::new();
        let a = libs.register(reg, "a").unwrap();
        let b = libs.register(reg, "b").unwrap();
        assert_ne!(a, b);
        let ns_a = libs.ns(a).unwrap().id();
        drop(libs.remove(a));
        assert!(matches!(libs.ns(a), Err(NodeError::NoSuchLibrary)));
        assert!(libs.remove(a).is_none());
        let c = libs.register(reg, "c").unwrap();
        assert_eq!(c, LibId(2), "a LibId is never handed out again");
        assert_eq!(libs.slots(), 3);
        assert_eq!(libs.iter().map(|(id, _)| id).collect::<Vec<_>>(), [b, c]);
        assert!(reg.is_quarantined(ns_a) || reg.name_of(ns_a).is_none());
        assert!(matches!(
            libs.register(reg, "b"),
            Err(NodeError::Registry(_))
        ));
    }

    #[test]
    fn counters_count_each_outcome_and_ignore_unknown_libraries() {
        let mut libs = Libs::new();
        let a = libs.register(registry(), "a").unwrap();
        libs.count(a, true, true);
        libs.count(a, true, false);
        libs.count(a, true, false);
        libs.count(a, false, true);
        libs.count(LibId(9), true, true);
        let c = libs.counters(a);
        assert_eq!((c.sent, c.received, c.failed), (1, 2, 1));
        assert_eq!(libs.counters(LibId(9)), Counters::default());
    }

    #[test]
    fn an_am_reaches_only_a_listening_owner() {
        let reg = registry();
        let layout = *reg.layout();
        let mut libs = Libs::new();
        let a = libs.register(reg, "a").unwrap();
        let ns_id = libs.ns(a).unwrap().id();
        let id3 = libs.ns(a).unwrap().am_id(3).unwrap();
        // Owned namespace, but nobody listens on local id 3 yet: a stray.
        assert_eq!(
            libs.deliver_am(&layout, id3, vec![1]),
            AmDelivery::Stray { ns_id }
        );
        assert_eq!(libs.am_listen(a, 3).unwrap(), id3);
        assert_eq!(
            libs.deliver_am(&layout, id3, vec![2]),
            AmDelivery::Delivered
        );
        assert_eq!(libs.counters(a).received, 1);
        assert_eq!(libs.am_take(a, 3), Some(vec![2]));
        assert_eq!(libs.am_take(a, 3), None);
        assert_eq!(libs.get(a).unwrap().am_ids().collect::<Vec<_>>(), [id3]);
        // An id nobody owns.
        let other = ((ns_id as u32 + 1) * layout.am_ids_per_namespace()) as u16;
        assert!(matches!(
            libs.deliver_am(&layout, other, vec![]),
            AmDelivery::Stray { .. }
        ));
        drop(libs.remove(a));
        assert!(matches!(
            libs.am_listen(a, 3),
            Err(NodeError::NoSuchLibrary)
        ));
    }

    #[test]
    fn peer_events_reach_listeners_only() {
        let reg = registry();
        let mut libs = Libs::new();
        let (a, b) = (
            libs.register(reg, "a").unwrap(),
            libs.register(reg, "b").unwrap(),
        );
        libs.listen_peers(a, [7]).unwrap();
        libs.tell(&PeerEvent::Down {
            peer: 7,
            cause: None,
            reason: None,
        });
        assert_eq!(libs.peer_event(a), Some(PeerEvent::Up { peer: 7 }));
        assert!(matches!(
            libs.peer_event(a),
            Some(PeerEvent::Down { peer: 7, .. })
        ));
        assert_eq!(libs.peer_event(a), None);
        assert_eq!(libs.peer_event(b), None);
    }
}
