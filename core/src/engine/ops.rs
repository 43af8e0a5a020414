//! The node's operations table (feature `alloc`): ids handed out once, each operation kept
//! until its result is taken, and finished operations counted for their library. What a
//! running operation is — a waiting send, a transport request — is the adapter's type `T`.
//!
//! D6: the table knows what each running operation waits for ([`Pending`]), so that a
//! node's `progress` moves along only the operations something happened to — the ones
//! whose request their transport [`completed`](Ops::completed), the sends waiting for a route
//! when the routes
//! changed, and those whose deadline passed ([`due`](Ops::due)) — never every pending one.

use super::conns::TokenHash;
use super::libraries::Libraries;
use super::types::{LibId, NodeError, OpId};
use alloc::collections::BTreeSet;
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

/// What a running operation waits for (the adapter's operation type answers), so that the
/// table moves it along only when that happens (D6).
pub trait Pending {
    /// The deadline (adapter time) of a send waiting for a route (P2): it is tried again when
    /// the routes change and at this deadline. `None`: it waits for its transport request,
    /// whose completion the adapter reports with [`Ops::completed`].
    fn route_deadline(&self) -> Option<u64>;

    /// The transport request it waits on, by the key the transport's completions name it by
    /// (UCX: the request's address; the mock: its send or receive id); `None`: none (a send
    /// waiting for a route).
    fn request(&self) -> Option<u64>;
}

/// A transport request an operation waits on: the key the transport's completions name it by
/// (UCX: the request's address; the mock: its send or receive id).
pub trait Request {
    /// Its key.
    fn key(&self) -> u64;
}

/// A running operation on an adapter whose transport's send requests are `S`, receive
/// requests `R`, and whose connections are keyed `K`: what both nodes run, so that what it waits for ([`Pending`]) and which
/// losses end it ([`Waits`]) are answered once.
#[derive(Debug)]
pub enum Op<S, R, K> {
    /// A send waiting for a route (P2).
    WaitingRoute(super::sends::Waiting),
    /// A send handed to the transport.
    Sending {
        /// Its library.
        lib: LibId,
        /// The transport's request.
        req: S,
        /// The connection it is in flight on (D3: it ends when that fails).
        conn: K,
    },
    /// A receive posted to the transport.
    Receiving {
        /// Its library.
        lib: LibId,
        /// The transport's request.
        req: R,
        /// The peer the library said the message comes from (`recv_from`): the receive ends
        /// when that peer goes down (D3).
        from: Option<u64>,
        /// Its payload and length limit, to post it again — a receive from any peer when
        /// what it took carries a pair value no proven peer was given, any receive when the
        /// transport's receive queue is replaced ([`Engine::repost_receives`](super::Engine::repost_receives));
        /// `None`: it took one message already (nothing to post again).
        again: Option<(u64, usize)>,
    },
}

impl<S: Request, R: Request, K> Pending for Op<S, R, K> {
    fn route_deadline(&self) -> Option<u64> {
        match self {
            Op::WaitingRoute(w) => Some(w.deadline_ms()),
            _ => None,
        }
    }
    fn request(&self) -> Option<u64> {
        match self {
            Op::Sending { req, .. } => Some(req.key()),
            Op::Receiving { req, .. } => Some(req.key()),
            Op::WaitingRoute(_) => None,
        }
    }
}

impl<S, R, K: Copy> Waits<K> for Op<S, R, K> {
    fn sending_on(&self) -> Option<K> {
        match self {
            Op::Sending { conn, .. } => Some(*conn),
            _ => None,
        }
    }
    fn receiving_from(&self) -> Option<u64> {
        match self {
            Op::Receiving { from, .. } => *from,
            _ => None,
        }
    }
}

/// The hash keys of the operation tables (fixed: their keys are not a peer's to choose).
const OPS_HASH_KEYS: [u64; 2] = [0x9e37_79b9_7f4a_7c15, 0xbf58_476d_1ce4_e5b9];

/// Operations started on one node, by id.
pub struct Ops<T, E> {
    /// Hashed, not ordered: every call is O(1) whatever the number of operations (ids are the
    /// table's own, request keys the transport's — neither chosen by a peer).
    ops: hashbrown::HashMap<OpId, Next<T, E>, TokenHash>,
    next: u64,
    /// Operations their transport reported since the last [`due`](Self::due) (a duplicate or a
    /// finished one costs one look, nothing else).
    woken: Vec<OpId>,
    /// Sends waiting for a route, by deadline.
    routes: BTreeSet<(u64, OpId)>,
    /// The operation each transport request in flight belongs to ([`Pending::request`]).
    requests: hashbrown::HashMap<u64, OpId, TokenHash>,
    /// The routes' epoch (see [`Connections::epoch`](super::Connections::epoch)) when the
    /// waiting sends were last tried.
    tried_at: u64,
}

impl<T, E> Default for Ops<T, E> {
    fn default() -> Self {
        Ops {
            ops: hashbrown::HashMap::with_hasher(TokenHash::new(OPS_HASH_KEYS)),
            next: 0,
            woken: Vec::new(),
            routes: BTreeSet::new(),
            requests: hashbrown::HashMap::with_hasher(TokenHash::new(OPS_HASH_KEYS)),
            tried_at: 0,
        }
    }
}

impl<T: Pending, E> Ops<T, E> {
    /// Adds an operation under a new id (ids are never reused).
    pub fn start(&mut self, op: Next<T, E>) -> OpId {
        self.next += 1;
        let id = OpId(self.next);
        self.put(id, op);
        id
    }

    /// Forgets `id`, running or finished; a running one is handed back (the adapter cancels
    /// or parks its request).
    pub fn forget(&mut self, id: OpId) -> Option<T> {
        match self.ops.remove(&id)? {
            Next::Wait(t) => {
                if let Some(d) = t.route_deadline() {
                    self.routes.remove(&(d, id));
                }
                if let Some(r) = t.request() {
                    self.requests.remove(&r);
                }
                Some(t)
            }
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

    /// Puts operation `id` (back) in the table (one still running under `id` is replaced).
    pub fn put(&mut self, id: OpId, op: Next<T, E>) {
        self.forget(id);
        if let Next::Wait(t) = &op {
            if let Some(d) = t.route_deadline() {
                self.routes.insert((d, id));
            }
            if let Some(r) = t.request() {
                self.requests.insert(r, id);
            }
        }
        self.ops.insert(id, op);
    }

    /// The transport completed request `key` ([`Pending::request`]) — with data, an error or a
    /// cancel: its operation, if one still waits on it, is woken ([`due`](Self::due) hands it
    /// out). A key nobody holds (a request dropped meanwhile) is
    /// ignored; one reused by a later request wakes that one for nothing — it is only looked
    /// at.
    pub fn completed(&mut self, key: u64) {
        if let Some(&id) = self.requests.get(&key) {
            self.woken.push(id);
        }
    }

    /// The running operations to move along at adapter time `now_ms`, oldest first: those
    /// woken since the last call, every send waiting for a route if the routes changed
    /// (`epoch` differs from the last call's), and the waiting sends whose deadline passed.
    /// O(what is due), not O(running operations) (D6).
    pub fn due(&mut self, now_ms: u64, epoch: u64) -> Vec<OpId> {
        let mut due = core::mem::take(&mut self.woken);
        if epoch != self.tried_at {
            self.tried_at = epoch;
            due.extend(self.routes.iter().map(|&(_, id)| id));
        } else {
            due.extend(
                self.routes
                    .iter()
                    .take_while(|&&(d, _)| d <= now_ms)
                    .map(|&(_, id)| id),
            );
        }
        due.sort_unstable();
        due.dedup();
        due.retain(|id| matches!(self.ops.get(id), Some(Next::Wait(_))));
        due
    }

    /// When [`due`](Self::due) next has something (for `poll_timeout`): 0 if an operation was
    /// woken or the routes changed (`epoch`) with sends waiting, else the earliest deadline of
    /// a send waiting for a route.
    pub fn next_due(&self, epoch: u64) -> Option<u64> {
        let stale = epoch != self.tried_at && !self.routes.is_empty();
        if !self.woken.is_empty() || stale {
            return Some(0);
        }
        self.routes.first().map(|&(d, _)| d)
    }
}

impl<T, E> Ops<T, E> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
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

    /// Ids of the running operations `f` picks, oldest first (a loss, a release: O(running
    /// operations), once per such event).
    pub fn matching(&self, f: impl Fn(&T) -> bool) -> Vec<OpId> {
        let mut ids: Vec<OpId> = (self.ops.iter())
            .filter(|(_, op)| matches!(op, Next::Wait(t) if f(t)))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Running operation `id`.
    pub fn get(&self, id: OpId) -> Option<&T> {
        match self.ops.get(&id)? {
            Next::Wait(t) => Some(t),
            Next::Done(_) => None,
        }
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

    /// A send waiting for a route until this deadline (odd values), or a transport request.
    impl Pending for u8 {
        fn route_deadline(&self) -> Option<u64> {
            (self % 2 == 1).then_some(u64::from(*self))
        }
        fn request(&self) -> Option<u64> {
            self.is_multiple_of(2).then_some(u64::from(*self))
        }
    }

    #[test]
    fn ids_are_fresh_and_a_result_is_taken_once() {
        let mut ops: Ops<u8, ()> = Ops::new();
        let a = ops.start(Next::Wait(1));
        let b = ops.start(Next::Done(Ok(None)));
        assert_ne!(a, b);
        assert_eq!(ops.matching(|_| true), [a]);
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
    fn only_what_happened_is_due() {
        let mut ops: Ops<u8, ()> = Ops::new();
        let request = ops.start(Next::Wait(2));
        let other_request = ops.start(Next::Wait(6));
        let waits_3 = ops.start(Next::Wait(3));
        let waits_7 = ops.start(Next::Wait(7));
        let many: Vec<OpId> = (0..100u8)
            .map(|k| ops.start(Next::Wait(8 + 2 * k)))
            .collect();
        assert_eq!(ops.due(0, 0), [], "nothing happened: nothing to look at");
        assert_eq!(ops.next_due(0), Some(3));
        ops.completed(2);
        ops.completed(2);
        assert_eq!(ops.next_due(0), Some(0), "woken: due now");
        assert_eq!(ops.due(0, 0), [request], "woken once, handed out once");
        ops.completed(6);
        ops.completed(255);
        assert_eq!(
            ops.due(0, 0),
            [other_request],
            "by its request; an unknown one ignored"
        );
        assert_eq!(ops.remove(other_request), Some(6));
        ops.completed(6);
        assert_eq!(
            ops.due(0, 0),
            [],
            "taken out: its request no longer wakes it"
        );
        assert_eq!(ops.due(0, 0), []);
        assert_eq!(ops.due(3, 0), [waits_3], "its deadline");
        assert_eq!(ops.next_due(1), Some(0), "the routes changed: due now");
        assert_eq!(
            ops.due(1, 1),
            [waits_3, waits_7],
            "the routes changed: every waiting send"
        );
        assert_eq!(ops.due(1, 1), [], "the same routes: none again");
        // Moving one along takes it out of the deadline index and puts it back as it became.
        assert_eq!(ops.remove(waits_3), Some(3));
        assert_eq!(ops.next_due(1), Some(7));
        ops.put(waits_3, Next::Done(Ok(None)));
        // A completion reported for one that finished meanwhile (taken by its caller).
        ops.completed(2);
        assert_eq!(ops.remove(request), Some(2));
        ops.put(request, Next::Done(Ok(None)));
        ops.completed(108);
        assert_eq!(
            ops.due(100, 1),
            [waits_7, many[50]],
            "a finished one is not due"
        );
        assert_eq!(ops.forget(waits_7), Some(7));
        assert_eq!(ops.next_due(1), None);
        assert_eq!(ops.due(1000, 2), []);
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
        impl Pending for Op {
            fn route_deadline(&self) -> Option<u64> {
                matches!(self, Op::Wait).then_some(9)
            }
            fn request(&self) -> Option<u64> {
                None
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
