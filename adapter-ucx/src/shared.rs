//! A node that libraries on several threads share: [`SharedNode`] (`Send + Sync`, cheap to
//! clone) on a host's `UCS_THREAD_MODE_MULTI` worker, and a [`Library`] handle per library.
//!
//! The plain [`Node`] stays the zero-lock path for one thread (a SINGLE worker, tagspace's own
//! worker, the demo). A shared node is that same node behind a reader-writer lock:
//! * every call that changes the node (send, receive, progress, attach, register, ...) takes it
//!   exclusively; [`Library::route`] — the data path of a host that sends with its own
//!   `ucp_tag_send_nbx` — takes no lock when it can (a per-thread route cache) and the shared
//!   lock otherwise, and [`Library::matcher`] the shared lock (the exclusive one the first time
//!   a peer not met yet is asked about), so library threads route concurrently;
//! * UCX's callbacks on the host's progress thread never take it: they only push into the
//!   worker's event queues (a mutex held for one push, never across a UCX call);
//! * [`SharedNode::peer_failed`], which a host calls from its endpoint error handler — inside
//!   UCX, holding UCX's worker lock — takes no lock but that queue's either.
//!
//! Lock order, and why it cannot deadlock: a thread may hold the node lock and then enter UCX
//! (which takes UCX's worker lock on a MULTI worker); UCX's callbacks, run under the worker
//! lock, take only the event-queue lock, which is never held while anything else is taken. So
//! the one rule for a host: **from inside a UCX callback, call only
//! [`peer_failed`](SharedNode::peer_failed)** — any other call takes the node lock, which
//! another thread may hold while it waits for UCX's worker lock.
//!
//! Why the `unsafe impl Send/Sync` below is sound: the node's non-thread-safe parts (its
//! reference-counted UCX handles, `RefCell`s) live entirely inside the lock and never leave
//! it — no method here hands out a [`Worker`](crate::ucp::Worker), an
//! [`Endpoint`](crate::ucp::Endpoint), or a reference into the node; raw UCX handles cross as
//! plain pointers. The shared-lock calls are the audited few that read only plain data (the
//! connection table, the route cache, namespaces); none touches a `Cell`, a `RefCell` or a
//! reference count. UCX itself allows calls from any thread on a MULTI worker, which
//! [`SharedNode::adopt`] checks. A manual [`Clock`] (an `Rc`) is refused.

use crate::node::{
    failure_status, Clock, Counters, HostInfo, HostProgress, LibId, Node, NodeConfig, NodeError,
    NodeStats, OpId, PeerEvent, Role, CAP,
};
use crate::ucp::{EpKey, ErrorSink, TagInfo, ThreadMode};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};
use tagspace_core::{Registry, TagLayout};
use ucx1_sys as sys;

/// What an operation's result is: `Ok(Some(data))` for a receive, `Ok(None)` for a send.
pub type OpResult = Result<Option<Vec<u8>>, NodeError>;

struct State {
    node: Node,
    /// Which library started each operation not yet taken: a library takes, cancels and
    /// forgets only its own.
    owners: HashMap<OpId, LibId>,
}

struct Inner {
    state: RwLock<State>,
    /// The state's version for route caches: a fresh value from [`next_epoch`] each time the
    /// lock is taken exclusively (before anything changes), so a route cached under the shared
    /// lock at epoch `e` is what a lookup would return for as long as the epoch is `e`.
    epoch: AtomicU64,
    /// The worker's endpoint-error queue, reached without the lock ([`SharedNode::peer_failed`]).
    /// Valid while `state`'s node (and so its worker) lives, which is as long as `Inner`.
    errors: ErrorSink,
    token: u64,
    host: HostInfo,
    layout: &'static TagLayout,
}

// SAFETY: see the module documentation: everything that is not thread-safe is inside `state`
// and reached only through its lock (exclusively, but for the audited read-only calls); the
// worker is MULTI (checked in `adopt`), so UCX accepts calls from any thread; `errors` points
// at a mutex.
unsafe impl Send for Inner {}
// SAFETY: as above.
unsafe impl Sync for Inner {}

/// A tagspace node on a host's `UCS_THREAD_MODE_MULTI` worker that libraries on several
/// threads share (see the [module documentation](self)). Clones are handles to the same node.
#[derive(Clone)]
pub struct SharedNode {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SharedNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedNode")
            .field("token", &self.inner.token)
            .field("host", &self.inner.host)
            .finish_non_exhaustive()
    }
}

impl SharedNode {
    /// A shared node on the host's worker, on the process-wide registry. See
    /// [`adopt_with_registry`](Self::adopt_with_registry).
    ///
    /// # Safety
    /// As for [`Node::adopt`].
    pub unsafe fn adopt(
        worker: sys::ucp_worker_h,
        cfg: NodeConfig,
        progress: HostProgress,
    ) -> Result<SharedNode, NodeError> {
        // SAFETY: the caller's promise.
        unsafe { SharedNode::adopt_with_registry(worker, cfg, progress, tagspace_core::global()) }
    }

    /// A shared node on the host's worker ([`Node::adopt_with_registry`], whose duties for the
    /// host apply), refused unless UCX reports the worker `UCS_THREAD_MODE_MULTI` (a UCX built
    /// without thread support hands out SINGLE workers whatever was asked: use a plain [`Node`]
    /// on one thread there) and unless `cfg.clock` is the system clock.
    ///
    /// # Safety
    /// As for [`Node::adopt`].
    pub unsafe fn adopt_with_registry(
        worker: sys::ucp_worker_h,
        cfg: NodeConfig,
        progress: HostProgress,
        registry: &'static Registry<CAP>,
    ) -> Result<SharedNode, NodeError> {
        // SAFETY: the caller's promise; MULTI is required below, so the one-thread promise of
        // `adopt_any_mode` is not needed.
        let n = unsafe { SharedNode::adopt_any_mode(worker, cfg, progress, registry) }?;
        if n.inner.host.thread_mode != ThreadMode::Multi {
            // Dropping the node hands the worker back untouched.
            return Err(NodeError::Usage(
                "a shared node needs a UCS_THREAD_MODE_MULTI worker (UCX reports another mode; \
                 a UCX built without thread support gives SINGLE): use Node on one thread",
            ));
        }
        Ok(n)
    }

    /// [`adopt_with_registry`](Self::adopt_with_registry) on a worker in any thread mode: the
    /// C ABI's node, which C hosts use from several threads on a MULTI worker and from one on
    /// others. The system clock is still required.
    ///
    /// # Safety
    /// As for [`Node::adopt`]; and unless UCX reports the worker `UCS_THREAD_MODE_MULTI`
    /// ([`host`](Self::host)), the node — every clone and every [`Library`] of it — is used by
    /// one thread at a time, never while another thread calls UCX on the worker.
    pub unsafe fn adopt_any_mode(
        worker: sys::ucp_worker_h,
        cfg: NodeConfig,
        progress: HostProgress,
        registry: &'static Registry<CAP>,
    ) -> Result<SharedNode, NodeError> {
        if matches!(cfg.clock, Clock::Manual(_)) {
            return Err(NodeError::Usage(
                "a shared node needs the system clock (a manual clock cannot cross threads)",
            ));
        }
        // SAFETY: the caller's promise.
        let node = unsafe { Node::adopt_with_registry(worker, cfg, progress, registry) }?;
        let host = node.host().ok_or(NodeError::Usage("not a host's worker"))?;
        Ok(SharedNode {
            inner: Arc::new(Inner {
                errors: node.error_sink(),
                epoch: AtomicU64::new(next_epoch()),
                token: node.token(),
                host,
                layout: node.layout(),
                state: RwLock::new(State {
                    node,
                    owners: HashMap::new(),
                }),
            }),
        })
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        // Poisoned: a panic in a call on another thread; the node's state is still consistent
        // at the granularity of its calls (they do not unwind half-way through UCX calls).
        let mut g = self.inner.state.write().unwrap_or_else(|p| p.into_inner());
        self.inner.epoch.store(next_epoch(), Ordering::Release);
        // Failures reported before this call (`peer_failed`) take effect before it does.
        g.node.absorb_ep_errors();
        g
    }

    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.inner.state.read().unwrap_or_else(|p| p.into_inner())
    }

    /// This node's token (how peers name this process).
    pub fn token(&self) -> u64 {
        self.inner.token
    }

    /// What the node found on the host's worker.
    pub fn host(&self) -> HostInfo {
        self.inner.host
    }

    /// Registers library `name`: the handle is the library's, for any of its threads.
    pub fn register(&self, name: &str) -> Result<Library, NodeError> {
        Ok(Library {
            node: self.clone(),
            lib: self.register_id(name)?,
        })
    }

    /// Registers library `name` without a [`Library`] handle (the C ABI's way: released with
    /// [`release`](Self::release)).
    pub fn register_id(&self, name: &str) -> Result<LibId, NodeError> {
        self.write().node.register(name)
    }

    /// Releases library `lib` ([`Node::release`]) and forgets its operations.
    pub fn release(&self, lib: LibId) {
        let mut st = self.write();
        let State { node, owners } = &mut *st;
        owners.retain(|op, l| {
            if *l == lib {
                node.forget(*op);
            }
            *l != lib
        });
        node.release(lib);
    }

    /// Whether `lib` is registered here (not released).
    pub fn has_library(&self, lib: LibId) -> bool {
        self.read().node.namespace(lib).is_some()
    }

    /// [`Library::route`] for library `lib`.
    pub fn route(
        &self,
        lib: LibId,
        peer: u64,
        payload: u64,
    ) -> Result<Option<(sys::ucp_ep_h, u64)>, NodeError> {
        if let Some(hit) = self.route_cached(lib, peer, payload) {
            return Ok(Some(hit));
        }
        let st = self.read();
        // Stable while the lock is held shared: writers change it only holding it exclusively.
        let epoch = self.inner.epoch.load(Ordering::Acquire);
        // Audited for the shared lock: reads the connection table, its route cache and the
        // namespace only (no Cell, RefCell or reference count).
        let Some((ep, tag)) = st.node.route_tag(lib, peer, payload)? else {
            return Ok(None);
        };
        let ep = ep.as_raw();
        // SAFETY: `Inner` owns the node, and so the worker the sink points into.
        if unsafe { self.inner.errors.queued(EpKey::of(ep)) } {
            // The host reported it failed; the next `progress` takes the connection down.
            return Err(NodeError::NoConnection { peer });
        }
        let key = lib.0 as u64;
        let hit = RouteHit::new(epoch, key, peer, ep as usize, tag, st.node.layout());
        ROUTES.with(|c| c[RouteHit::slot(key, peer, ROUTE_CACHE)].set(hit));
        Ok(Some((ep, tag)))
    }

    /// The tag layout of the node's registry.
    pub fn layout(&self) -> &'static TagLayout {
        self.inner.layout
    }

    /// The node's epoch: it changes before anything that can change a route, and when the host
    /// reports a failure. A route looked up while it was `e` is valid while it still is.
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.inner.epoch.load(Ordering::Acquire)
    }

    /// The route from this thread's cache, if it holds one valid now: no lock, one atomic
    /// load. `None` sends the caller to [`route`](Self::route), which names what is wrong.
    #[inline]
    pub fn route_cached(
        &self,
        lib: LibId,
        peer: u64,
        payload: u64,
    ) -> Option<(sys::ucp_ep_h, u64)> {
        let key = lib.0 as u64;
        let epoch = self.inner.epoch.load(Ordering::Acquire);
        let slot = RouteHit::slot(key, peer, ROUTE_CACHE);
        ROUTES
            .with(|c| c[slot].get().get(epoch, key, peer, payload))
            .map(|(ep, tag)| (ep as sys::ucp_ep_h, tag))
    }

    /// [`Library::route_inbox`] for library `lib`.
    pub fn route_inbox(
        &self,
        lib: LibId,
        peer: u64,
    ) -> Result<Option<(sys::ucp_ep_h, u64)>, NodeError> {
        let st = self.read();
        // Audited for the shared lock: as `route`.
        Ok(st
            .node
            .route_inbox(lib, peer)?
            .map(|(ep, tag)| (ep.as_raw(), tag)))
    }

    /// [`Library::matcher`] for library `lib`: the shared lock (the connection table's pair
    /// values and the namespace are plain data), the exclusive one the first time `peer` is
    /// asked about before it connected (its pair value is made then).
    pub fn matcher(&self, lib: LibId, peer: u64, payload: u64) -> Result<(u64, u64), NodeError> {
        if let Some(m) = self.matcher_cached(lib, peer, payload) {
            return Ok(m);
        }
        let found = {
            let st = self.read();
            // Stable while the lock is held shared, as in `route`.
            let epoch = self.inner.epoch.load(Ordering::Acquire);
            // Audited for the shared lock: the connection table's pair values and the
            // namespace are plain data.
            (st.node.matcher_known(lib, peer, payload)?).map(|m| (m, epoch))
        };
        let (m, epoch) = match found {
            Some(hit) => hit,
            None => {
                let mut st = self.write();
                let m = st.node.matcher_from(lib, peer, payload)?;
                (m, self.inner.epoch.load(Ordering::Acquire))
            }
        };
        let key = lib.0 as u64;
        let hit = RouteHit::new(epoch, key, peer, 0, m.tag(), self.inner.layout);
        MATCHERS.with(|c| c[RouteHit::slot(key, peer, ROUTE_CACHE)].set(hit));
        Ok((m.tag(), m.mask()))
    }

    /// The matcher from this thread's cache, if it holds one valid now: no lock, one atomic
    /// load (the receive side's counterpart of [`route_cached`](Self::route_cached)). `None`
    /// sends the caller to [`matcher`](Self::matcher).
    #[inline]
    pub fn matcher_cached(&self, lib: LibId, peer: u64, payload: u64) -> Option<(u64, u64)> {
        let key = lib.0 as u64;
        let epoch = self.inner.epoch.load(Ordering::Acquire);
        let slot = RouteHit::slot(key, peer, ROUTE_CACHE);
        MATCHERS
            .with(|c| c[slot].get().get(epoch, key, peer, payload))
            .map(|(_, tag)| (tag, u64::MAX))
    }

    /// [`Library::matcher_any_peer`] for library `lib`.
    pub fn matcher_any_peer(&self, lib: LibId, payload: u64) -> Result<(u64, u64), NodeError> {
        let m = self.read().node.matcher_any_peer(lib, payload)?;
        Ok((m.tag(), m.mask()))
    }

    /// [`Library::inbox_matcher`] for library `lib`.
    pub fn inbox_matcher(&self, lib: LibId, peer: u64) -> Result<(u64, u64), NodeError> {
        let m = self.write().node.inbox_matcher_from(lib, peer)?;
        Ok((m.tag(), m.mask()))
    }

    /// [`Library::inbox_matcher_any_peer`] for library `lib`.
    pub fn inbox_matcher_any_peer(&self, lib: LibId) -> Result<(u64, u64), NodeError> {
        let m = self.read().node.inbox_matcher_any_peer(lib)?;
        Ok((m.tag(), m.mask()))
    }

    /// [`Node::sender_of`]: the proven peer whose pair value `tag` carries, `None` for a tag
    /// no proven peer can have sent. Takes the shared lock.
    pub fn sender_of(&self, tag: u64) -> Option<u64> {
        self.read().node.sender_of(tag)
    }

    /// The name and id of library `lib`'s namespace.
    pub fn namespace(&self, lib: LibId) -> Result<(String, u16), NodeError> {
        let st = self.read();
        let ns = st.node.namespace(lib).ok_or(NodeError::NoSuchLibrary)?;
        Ok((ns.name().to_string(), ns.id()))
    }

    /// [`Node::listen`] for library `lib`.
    pub fn listen(&self, lib: LibId) -> Result<(), NodeError> {
        self.write().node.listen(lib)
    }

    /// [`Node::peer_event`] for library `lib`.
    pub fn peer_event(&self, lib: LibId) -> Option<PeerEvent> {
        self.write().node.peer_event(lib)
    }

    /// Library `lib`'s counters.
    pub fn counters(&self, lib: LibId) -> Counters {
        self.read().node.counters(lib)
    }

    /// Connections the node knows, in any state ([`Node::connection_count`]).
    pub fn connection_count(&self) -> usize {
        self.read().node.connection_count()
    }

    /// [`Node::attach`].
    ///
    /// # Safety
    /// As for [`Node::attach`]; and the host closes `ep` only after [`detach`](Self::detach)
    /// has returned (other threads may be using it until then).
    pub unsafe fn attach(&self, ep: sys::ucp_ep_h, side: Role) -> Result<(), NodeError> {
        // SAFETY: the caller's promise.
        unsafe { self.write().node.attach(ep, side) }
    }

    /// [`Node::attach_reconnect`](crate::node::Node::attach_reconnect): `ep` connects to where
    /// the lost `peer` said it listens.
    ///
    /// # Safety
    /// As for [`attach`](Self::attach).
    pub unsafe fn attach_reconnect(&self, ep: sys::ucp_ep_h, peer: u64) -> Result<(), NodeError> {
        // SAFETY: the caller's promise.
        unsafe { self.write().node.attach_reconnect(ep, peer) }
    }

    /// Stops using the host's endpoint `ep` ([`Node::detach`]): when this returns, no thread is
    /// in a UCX call on `ep` for tagspace and none will start one, so the host may close it.
    /// Unlike a plain node, a shared node needs this also after
    /// [`peer_failed`](Self::peer_failed): other threads may be sending on `ep` when the host's
    /// error handler runs. Not from inside a UCX callback.
    pub fn detach(&self, ep: sys::ucp_ep_h) -> Result<(), NodeError> {
        self.write().node.detach(ep)
    }

    /// Whether a send tagspace gave up on the host's endpoint `ep` is still unfinished in UCX:
    /// then force-close `ep` ([`Node::sends_given_up_on`](crate::node::Node::sends_given_up_on)).
    pub fn sends_given_up_on(&self, ep: sys::ucp_ep_h) -> bool {
        self.read().node.sends_given_up_on(ep)
    }

    /// Tells peers to dial `addr` after a fault ([`Node::set_advertise`](crate::node::Node::set_advertise)).
    pub fn set_advertise(&self, addr: Option<std::net::SocketAddr>) {
        self.write().node.set_advertise(addr)
    }

    /// The address this node tells its peers to dial after a fault, if any.
    pub fn advertised(&self) -> Option<std::net::SocketAddr> {
        self.read().node.advertised()
    }

    /// The next peer lost to a fault that the host should connect to again: its token and
    /// where it said it listens
    /// ([`Node::take_reconnect_needed`](crate::node::Node::take_reconnect_needed)).
    pub fn take_reconnect_needed(&self) -> Option<(u64, std::net::SocketAddr)> {
        self.write().node.take_reconnect_needed()
    }

    /// The host's endpoint `ep` failed with UCX status `status`: operations on it fail and the
    /// peer goes down if it was its last connection, at the next [`progress`](Self::progress).
    /// Takes no lock but the event queue's for one push, so the host may call it from its
    /// endpoint error handler, inside UCX. Then [`detach`](Self::detach) `ep` (from outside the
    /// callback) before closing it. An endpoint that is not attached is ignored.
    pub fn peer_failed(&self, ep: sys::ucp_ep_h, status: i8) {
        // SAFETY: `Inner` owns the node, and so the worker the sink points into.
        unsafe {
            self.inner
                .errors
                .report(EpKey::of(ep), failure_status(status))
        }
        // Cached routes over `ep` are stale from now on: a lookup sees the queued failure.
        self.inner.epoch.store(next_epoch(), Ordering::Release);
    }

    /// [`Node::progress`]: handles what arrived (and progresses the worker with
    /// [`HostProgress::Node`]). Some thread must call it regularly; any may.
    pub fn progress(&self) -> bool {
        self.write().node.progress()
    }

    /// [`Node::peer_on`]: the peer's token on the host's endpoint `ep`, once established.
    pub fn peer_on(&self, ep: sys::ucp_ep_h) -> Option<u64> {
        // Audited for the shared lock: reads the connection table only.
        self.read().node.peer_on(ep)
    }

    /// Tokens of peers with an open, established connection.
    pub fn peers(&self) -> Vec<u64> {
        self.write().node.peers()
    }

    /// Open, established connections to `peer`.
    pub fn live_connections_to(&self, peer: u64) -> usize {
        self.write().node.live_connections_to(peer)
    }

    /// Node-wide counters.
    pub fn stats(&self) -> NodeStats {
        self.write().node.stats()
    }

    /// Released ids still quarantined because a message waits in them ([`Node::quarantine_held`]).
    pub fn quarantine_held(&self) -> usize {
        self.write().node.quarantine_held()
    }

    /// [`Node::shutdown`]: closes every connection in order, waiting up to `timeout_ms`.
    pub fn shutdown(&self, timeout_ms: u64) {
        self.write().node.shutdown(timeout_ms)
    }
}

/// A fresh epoch, unique across every shared node in the process (so a cached route can only
/// ever match the node, and the version of it, it was looked up on). Never 0.
fn next_epoch() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Entries of each thread's route cache (direct-mapped by library and peer).
const ROUTE_CACHE: usize = 64;

thread_local! {
    /// This thread's cached routes, across every shared node (entries carry their node's epoch).
    static ROUTES: [Cell<RouteHit>; ROUTE_CACHE] =
        const { [const { Cell::new(RouteHit::EMPTY) }; ROUTE_CACHE] };
    /// This thread's cached receive matchers (a library's tag base for one peer: its namespace
    /// bits and the pair value this node gave the peer), kept like the routes.
    static MATCHERS: [Cell<RouteHit>; ROUTE_CACHE] =
        const { [const { Cell::new(RouteHit::EMPTY) }; ROUTE_CACHE] };
}

/// A route that was looked up at a node's epoch `epoch`: valid while that is still the node's
/// epoch. Routes depend only on the node's state, and the epoch changes before any change to
/// it, so a hit returns exactly what the lookup would. It makes routing a compare, two checks
/// on the payload and an or (the lookup through the peer index and the directory costs about
/// 14 ns: at 8 B over shared memory a sixth of a message). The entries of each thread's route
/// cache, and of the C ABI's per-node cache on a worker used by one thread (no thread-local
/// access: a shared library reaches those through `__tls_get_addr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteHit {
    epoch: u64,
    lib: u64,
    peer: u64,
    ep: usize,
    /// The peer's namespace bits (the tag for payload 0).
    base: u64,
    /// The namespace field's mask: a payload must stay outside it, and not be the inbox.
    ns_mask: u64,
}

impl RouteHit {
    /// Matches nothing (epoch 0 is never a node's).
    pub const EMPTY: RouteHit = RouteHit {
        epoch: 0,
        lib: 0,
        peer: 0,
        ep: 0,
        base: 0,
        ns_mask: 0,
    };

    /// The route to library `lib` on `peer` over endpoint `ep` whose tag for some payload was
    /// `tag`, at epoch `epoch`, under `layout`.
    pub fn new(epoch: u64, lib: u64, peer: u64, ep: usize, tag: u64, layout: &TagLayout) -> Self {
        // the namespace field, the guard bits and the pair field: the peer's whole tag base
        let ns_mask = layout.fixed_mask() | layout.pair_mask();
        RouteHit {
            epoch,
            lib,
            peer,
            ep,
            base: tag & ns_mask,
            ns_mask,
        }
    }

    /// The endpoint and tag for `payload`, if this is the route to `lib` on `peer` at `epoch`
    /// and `payload` is one the lookup would accept (outside the namespace field, not the
    /// inbox); `None` sends the caller to the lookup, which names what is wrong.
    #[inline]
    pub fn get(&self, epoch: u64, lib: u64, peer: u64, payload: u64) -> Option<(usize, u64)> {
        (self.epoch == epoch
            && self.lib == lib
            && self.peer == peer
            && payload & self.ns_mask == 0
            && payload != !self.ns_mask)
            .then_some((self.ep, self.base | payload))
    }

    /// The slot of a direct-mapped cache of `n` entries for `lib` and `peer`.
    #[inline]
    pub fn slot(lib: u64, peer: u64, n: usize) -> usize {
        let h = (peer ^ (lib << 32 | lib)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (h >> 58) as usize % n
    }
}

/// One library's handle on a [`SharedNode`]: `Send + Sync`, so the library's threads share it
/// (in an `Arc`, or by reference). Operations it starts are its own: another library's
/// [`OpId`] is not found here. Dropping it releases the namespace ([`Node::release`]) and
/// forgets its operations not yet taken (receives still waiting are cancelled).
pub struct Library {
    node: SharedNode,
    lib: LibId,
}

impl std::fmt::Debug for Library {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Library")
            .field("lib", &self.lib)
            .field("node", &self.node.inner.token)
            .finish()
    }
}

impl Library {
    /// The library's handle on its node.
    pub fn id(&self) -> LibId {
        self.lib
    }

    /// The node it is registered on.
    pub fn node(&self) -> &SharedNode {
        &self.node
    }

    /// The namespace's name and id on this node.
    pub fn namespace(&self) -> Result<(String, u16), NodeError> {
        self.node.namespace(self.lib)
    }

    /// The data path for a host that sends with its own `ucp_tag_send_nbx`: the host's
    /// endpoint to `peer` and the tag for `payload` in this library's namespace there
    /// ([`Node::route_tag`]). `Ok(None)` while the peer has not announced the name.
    ///
    /// Library threads route concurrently without waiting on each other: each thread keeps
    /// the routes it looked up (each with the node's epoch) for as long as the node has not
    /// been changed since, which it checks with one atomic load; a miss takes the node's lock
    /// shared. An endpoint the host reported failed ([`SharedNode::peer_failed`]) is not
    /// routed to from then on. The endpoint is the host's own: a send the host makes with it
    /// is the host's, and the host must not close the endpoint while its own threads may still
    /// send on it.
    pub fn route(
        &self,
        peer: u64,
        payload: u64,
    ) -> Result<Option<(sys::ucp_ep_h, u64)>, NodeError> {
        self.node.route(self.lib, peer, payload)
    }

    /// [`route`](Self::route) from this thread's cache alone: never takes the node's lock
    /// (`None`: ask `route`). For callers that must not wait on the lock where they are, e.g.
    /// holding an interpreter lock another thread's UCX callback may need.
    pub fn route_cached(&self, peer: u64, payload: u64) -> Option<(sys::ucp_ep_h, u64)> {
        self.node.route_cached(self.lib, peer, payload)
    }

    /// [`matcher`](Self::matcher) from this thread's cache alone (never takes the node's
    /// lock; `None`: ask `matcher`).
    pub fn matcher_cached(&self, peer: u64, payload: u64) -> Option<(u64, u64)> {
        self.node.matcher_cached(self.lib, peer, payload)
    }

    /// The host's endpoint to `peer` and the peer's inbox tag for this library
    /// ([`Node::route_inbox`]); `Ok(None)` while the peer has not announced the name. Takes the
    /// node's lock shared (not cached: an inbox message starts a transmission, it is not one).
    pub fn route_inbox(&self, peer: u64) -> Result<Option<(sys::ucp_ep_h, u64)>, NodeError> {
        self.node.route_inbox(self.lib, peer)
    }

    /// The exact matcher (tag, full mask) of this library's inbox here as `peer` sends to it,
    /// for the host's own receive or probe. Takes the node's lock.
    pub fn inbox_matcher(&self, peer: u64) -> Result<(u64, u64), NodeError> {
        self.node.inbox_matcher(self.lib, peer)
    }

    /// This library's inbox from any peer (the pair field free): check what it takes with
    /// [`SharedNode::sender_of`].
    pub fn inbox_matcher_any_peer(&self) -> Result<(u64, u64), NodeError> {
        self.node.inbox_matcher_any_peer(self.lib)
    }

    /// The tag and mask (full, D1) that receive `payload` sent to this library here by `peer`
    /// — only by `peer`: the tag carries the pair value this node gives it alone — for the
    /// host's own `ucp_tag_recv_nbx`. From this thread's cache while the node is unchanged,
    /// else taking the node's lock shared (exclusively the first time a peer is asked about).
    pub fn matcher(&self, peer: u64, payload: u64) -> Result<(u64, u64), NodeError> {
        self.node.matcher(self.lib, peer, payload)
    }

    /// The tag and mask that receive `payload` sent to this library here by any peer: every
    /// bit fixed but the pair field (a partial mask, UCX's slower path while posted). It also
    /// takes a message a stranger made up: check the received tag with
    /// [`SharedNode::sender_of`] and drop it when that says `None`.
    pub fn matcher_any_peer(&self, payload: u64) -> Result<(u64, u64), NodeError> {
        self.node.matcher_any_peer(self.lib, payload)
    }

    fn start(&self, f: impl FnOnce(&mut Node) -> OpId) -> OpId {
        let mut st = self.node.write();
        let op = f(&mut st.node);
        st.owners.insert(op, self.lib);
        op
    }

    /// [`Node::send`]: `data` to `payload` in this library's namespace on `peer`.
    pub fn send(&self, peer: u64, payload: u64, data: Vec<u8>, timeout_ms: u64) -> OpId {
        self.start(|n| n.send(self.lib, peer, payload, data, timeout_ms))
    }

    /// [`Node::send_inbox`].
    pub fn send_inbox(&self, peer: u64, data: Vec<u8>, timeout_ms: u64) -> OpId {
        self.start(|n| n.send_inbox(self.lib, peer, data, timeout_ms))
    }

    /// [`Node::am_send`].
    pub fn am_send(&self, peer: u64, local: u16, data: Vec<u8>, timeout_ms: u64) -> OpId {
        self.start(|n| n.am_send(self.lib, peer, local, data, timeout_ms))
    }

    /// [`Node::recv`].
    pub fn recv(&self, payload: u64, max_len: usize) -> OpId {
        self.start(|n| n.recv(self.lib, payload, max_len))
    }

    /// [`Node::recv_from`].
    pub fn recv_from(&self, peer: u64, payload: u64, max_len: usize) -> OpId {
        self.start(|n| n.recv_from(self.lib, peer, payload, max_len))
    }

    /// [`Node::probe_inbox`].
    pub fn probe_inbox(&self, max_len: usize) -> Result<Option<OpId>, NodeError> {
        let mut st = self.node.write();
        let op = st.node.probe_inbox(self.lib, max_len)?;
        if let Some(op) = op {
            st.owners.insert(op, self.lib);
        }
        Ok(op)
    }

    /// The result of this library's operation `op` once it has finished; taking it forgets
    /// it. `None` while it runs — and for an operation that is not this library's.
    pub fn take(&self, op: OpId) -> Option<OpResult> {
        let mut st = self.node.write();
        if st.owners.get(&op) != Some(&self.lib) {
            return None;
        }
        let r = st.node.take(op)?;
        st.owners.remove(&op);
        Some(r)
    }

    /// Waits up to `timeout` for this library's operation `op`, progressing the node meanwhile
    /// (other threads keep their turns: the lock is taken per step). `None` on timeout (the
    /// operation goes on) or for an operation that is not this library's.
    pub fn wait(&self, op: OpId, timeout: Duration) -> Option<OpResult> {
        let start = Instant::now();
        loop {
            if let Some(r) = self.take(op) {
                return Some(r);
            }
            if self.node.read().owners.get(&op) != Some(&self.lib) || start.elapsed() >= timeout {
                return None;
            }
            if !self.node.progress() {
                std::thread::yield_now();
            }
        }
    }

    /// [`Node::cancel`], for this library's receive `op`.
    pub fn cancel(&self, op: OpId) {
        let mut st = self.node.write();
        if st.owners.get(&op) == Some(&self.lib) {
            st.node.cancel(op);
        }
    }

    /// Forgets this library's operation `op` ([`Node::forget`]).
    pub fn forget(&self, op: OpId) {
        let mut st = self.node.write();
        if st.owners.get(&op) == Some(&self.lib) {
            st.owners.remove(&op);
            st.node.forget(op);
        }
    }

    /// [`Node::listen`]: this library starts hearing of peers coming and going.
    pub fn listen(&self) -> Result<(), NodeError> {
        self.node.listen(self.lib)
    }

    /// [`Node::peer_event`].
    pub fn peer_event(&self) -> Option<PeerEvent> {
        self.node.peer_event(self.lib)
    }

    /// [`Node::am_listen`].
    pub fn am_listen(&self, local: u16) -> Result<(), NodeError> {
        self.node.write().node.am_listen(self.lib, local)
    }

    /// [`Node::am_take`].
    pub fn am_take(&self, local: u16) -> Option<Vec<u8>> {
        self.node.write().node.am_take(self.lib, local)
    }

    /// [`Node::oldest_waiting`].
    pub fn oldest_waiting(&self) -> Result<Option<TagInfo>, NodeError> {
        self.node.write().node.oldest_waiting(self.lib)
    }

    /// This library's counters.
    pub fn counters(&self) -> Counters {
        self.node.counters(self.lib)
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        self.node.release(self.lib);
    }
}

#[cfg(test)]
mod tests {
    use super::RouteHit;
    use tagspace_core::TagLayout;

    #[test]
    fn a_cached_route_answers_only_what_the_lookup_would() {
        let layout = TagLayout::DEFAULT;
        let ns_mask = layout.namespace_mask();
        let base = 0x42u64 << ns_mask.trailing_zeros();
        let hit = RouteHit::new(7, 2, 0xabc, 0x1000, base | 5, &layout);
        assert_eq!(hit.get(7, 2, 0xabc, 9), Some((0x1000, base | 9)));
        // Another epoch, library or peer: a miss.
        assert_eq!(hit.get(8, 2, 0xabc, 9), None);
        assert_eq!(hit.get(7, 3, 0xabc, 9), None);
        assert_eq!(hit.get(7, 2, 0xabd, 9), None);
        // A payload reaching into the namespace field, or the inbox payload: the lookup's
        // business (it names the error).
        assert_eq!(hit.get(7, 2, 0xabc, 1 << ns_mask.trailing_zeros()), None);
        assert_eq!(hit.get(7, 2, 0xabc, !ns_mask), None);
        // An empty entry misses for every epoch a node can have (never 0).
        assert_eq!(RouteHit::EMPTY.get(1, 0, 0, 0), None);
    }
}
