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

/// What a running operation waits on, for D3 (the adapter's operation type answers).
pub trait Waits<K> {
    /// The connection (adapter key) a send is in flight on.
    fn sending_on(&self) -> Option<K>;
    /// The peer a receive said its message comes from (`recv_from`).
    fn receiving_from(&self) -> Option<u64>;
}

/// Why operations may never finish (D3): what is lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss<K> {
    /// Connection `key`'s transport failed: its sends end.
    Failed {
        /// The connection.
        key: K,
    },
    /// Connection `key` (to `peer`, if established) is unresponsive (the heartbeat, here or
    /// at the peer): what is in flight on it may never finish — its sends end, and so do the
    /// receives waiting for `peer` if this is its `last` connection.
    Unresponsive {
        /// The connection.
        key: K,
        /// Its peer.
        peer: Option<u64>,
        /// Whether it is the peer's last connection.
        last: bool,
    },
    /// `peer`'s last connection went: the receives waiting for it end if it `failed`, and are
    /// cancelled after an orderly close (a receive already matched still completes).
    PeerGone {
        /// The peer.
        peer: u64,
        /// Whether its connection failed (rather than closed in order).
        failed: bool,
    },
}

/// What the adapter does with an operation a [`Loss`] affects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// End it now with its result if the transport has one, else `PeerDown`.
    End,
    /// Cancel it (the transport's cancel: it finishes as the transport says).
    Cancel,
}

impl<T, E> Ops<T, E> {
    /// D3, decided once: the running operations `loss` affects, and what happens to each.
    pub fn affected_by<K: PartialEq>(&self, loss: Loss<K>) -> Vec<(OpId, Ending)>
    where
        T: Waits<K>,
    {
        let hit = |op: &T| match loss {
            Loss::Failed { ref key } => op.sending_on().as_ref() == Some(key),
            Loss::Unresponsive {
                ref key,
                peer,
                last,
            } => {
                op.sending_on().as_ref() == Some(key)
                    || (last && peer.is_some() && op.receiving_from() == peer)
            }
            Loss::PeerGone { peer, .. } => op.receiving_from() == Some(peer),
        };
        let how = match loss {
            Loss::PeerGone { failed: false, .. } => Ending::Cancel,
            _ => Ending::End,
        };
        self.matching(hit).into_iter().map(|id| (id, how)).collect()
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

    #[test]
    fn d3_ends_what_a_loss_leaves_unfinishable_and_nothing_else() {
        #[derive(Debug)]
        enum Op {
            Send(u8),
            Recv(Option<u64>),
            Wait,
        }
        impl Waits<u8> for Op {
            fn sending_on(&self) -> Option<u8> {
                match self {
                    Op::Send(k) => Some(*k),
                    _ => None,
                }
            }
            fn receiving_from(&self) -> Option<u64> {
                match self {
                    Op::Recv(p) => *p,
                    _ => None,
                }
            }
        }
        let mut ops: Ops<Op, ()> = Ops::new();
        let s1 = ops.start(Next::Wait(Op::Send(1)));
        let _s2 = ops.start(Next::Wait(Op::Send(2)));
        let r7 = ops.start(Next::Wait(Op::Recv(Some(7))));
        let _any = ops.start(Next::Wait(Op::Recv(None)));
        let _w = ops.start(Next::Wait(Op::Wait));
        assert_eq!(
            ops.affected_by(Loss::Failed { key: 1 }),
            [(s1, Ending::End)]
        );
        let u = |last| Loss::Unresponsive {
            key: 1,
            peer: Some(7),
            last,
        };
        assert_eq!(ops.affected_by(u(false)), [(s1, Ending::End)]);
        assert_eq!(
            ops.affected_by(u(true)),
            [(s1, Ending::End), (r7, Ending::End)]
        );
        let gone = |failed| Loss::<u8>::PeerGone { peer: 7, failed };
        assert_eq!(ops.affected_by(gone(true)), [(r7, Ending::End)]);
        assert_eq!(ops.affected_by(gone(false)), [(r7, Ending::Cancel)]);
    }
}
