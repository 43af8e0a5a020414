//! The node's operations table (feature `alloc`): ids handed out once, each operation kept
//! until its result is taken, and finished operations counted for their library. What a
//! running operation is — a waiting send, a transport request — is the adapter's type `T`.

use super::{LibId, Libraries, NodeError, OpId};
use alloc::collections::BTreeMap;
use alloc::vec::Vec;

/// What a finished operation gives its caller: the data of a receive (`Some`), nothing for a
/// send, or why it failed.
pub type Outcome<E> = Result<Option<Vec<u8>>, NodeError<E>>;

/// An operation's state: still running (the adapter's `T`), or finished.
#[derive(Debug)]
pub enum Next<T, E> {
    /// Running.
    Wait(T),
    /// Finished, its result not taken yet.
    Done(Outcome<E>),
}

impl<T, E> Next<T, E> {
    /// `lib`'s operation ended with `r` (a send if `sent`): counted for the library (sent,
    /// received or failed), then done.
    pub fn finished<'r, const CAP: usize>(
        libs: &mut Libraries<'r, CAP, E>,
        lib: LibId,
        r: Outcome<E>,
        sent: bool,
    ) -> Self
    where
        E: Clone,
    {
        libs.count(lib, r.is_ok(), sent);
        Next::Done(r)
    }
}

/// Operations started on one node, by id.
pub struct Ops<T, E> {
    ops: BTreeMap<OpId, Next<T, E>>,
    next: u64,
}

impl<T, E> Default for Ops<T, E> {
    fn default() -> Self {
        Ops {
            ops: BTreeMap::new(),
            next: 0,
        }
    }
}

impl<T, E> Ops<T, E> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an operation under a new id (ids are never reused).
    pub fn start(&mut self, op: Next<T, E>) -> OpId {
        self.next += 1;
        let id = OpId(self.next);
        self.ops.insert(id, op);
        id
    }

    /// Whether `id` has finished (without taking it).
    pub fn is_done(&self, id: OpId) -> bool {
        matches!(self.ops.get(&id), Some(Next::Done(_)))
    }

    /// The result of `id` if it has finished; taking it forgets the operation.
    pub fn take(&mut self, id: OpId) -> Option<Outcome<E>> {
        if !self.is_done(id) {
            return None;
        }
        match self.ops.remove(&id) {
            Some(Next::Done(r)) => Some(r),
            _ => None,
        }
    }

    /// Forgets `id`, running or finished; a running one is handed back (the adapter cancels
    /// or parks its request).
    pub fn forget(&mut self, id: OpId) -> Option<T> {
        match self.ops.remove(&id)? {
            Next::Wait(t) => Some(t),
            Next::Done(_) => None,
        }
    }

    /// Ids of the running operations `f` picks, oldest first.
    pub fn matching(&self, f: impl Fn(&T) -> bool) -> Vec<OpId> {
        self.ops
            .iter()
            .filter(|(_, op)| matches!(op, Next::Wait(t) if f(t)))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Ids of the running operations, oldest first (to move each along).
    pub fn running(&self) -> Vec<OpId> {
        self.matching(|_| true)
    }

    /// Running operation `id`.
    pub fn get(&self, id: OpId) -> Option<&T> {
        match self.ops.get(&id)? {
            Next::Wait(t) => Some(t),
            Next::Done(_) => None,
        }
    }

    /// Takes running operation `id` out, to move it along ([`put`](Self::put) puts what it
    /// became back); a finished one stays.
    pub fn remove(&mut self, id: OpId) -> Option<T> {
        if !matches!(self.ops.get(&id), Some(Next::Wait(_))) {
            return None;
        }
        self.forget(id)
    }

    /// Puts operation `id` (back) in the table.
    pub fn put(&mut self, id: OpId, op: Next<T, E>) {
        self.ops.insert(id, op);
    }

    /// Every running operation.
    pub fn values(&self) -> impl Iterator<Item = &T> + '_ {
        self.ops.values().filter_map(|op| match op {
            Next::Wait(t) => Some(t),
            Next::Done(_) => None,
        })
    }

    /// Operations not taken yet (running or finished).
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::{Registry, TagLayout};

    #[test]
    fn ids_are_fresh_and_a_result_is_taken_once() {
        let mut ops: Ops<u8, ()> = Ops::new();
        let a = ops.start(Next::Wait(1));
        let b = ops.start(Next::Done(Ok(None)));
        assert_ne!(a, b);
        assert_eq!(ops.running(), [a]);
        assert!(!ops.is_done(a) && ops.is_done(b));
        assert_eq!(ops.take(a), None, "still running: kept");
        assert_eq!(ops.get(a), Some(&1));
        assert_eq!(ops.len(), 2);
        assert_eq!(ops.take(b), Some(Ok(None)));
        assert_eq!(ops.take(b), None, "taken once");
        assert_eq!(ops.remove(a), Some(1));
        ops.put(a, Next::Done(Ok(Some(vec![3]))));
        assert_eq!(ops.remove(a), None, "a finished one stays");
        assert_eq!(ops.take(a), Some(Ok(Some(vec![3]))));
        assert!(ops.is_empty());
        assert!(ops.start(Next::Wait(0)) > b, "ids are not reused");
    }

    #[test]
    fn a_finished_operation_is_counted_for_its_library() {
        let reg: &'static Registry<64> = Box::leak(Box::new(Registry::new(TagLayout::DEFAULT)));
        let mut libs: Libraries<'static, 64, ()> = Libraries::new();
        let lib = libs.register(reg, "a").unwrap();
        let _: Next<u8, ()> = Next::finished(&mut libs, lib, Ok(None), true);
        let _: Next<u8, ()> = Next::finished(&mut libs, lib, Err(NodeError::NoSuchLibrary), false);
        let c = libs.counters(lib);
        assert_eq!((c.sent, c.received, c.failed), (1, 0, 1));
    }
}
