//! Host mode through the C ABI: a tagspace node on a worker and endpoints that the host owns
//! (`tagspace_node_adopt`, `_attach`, `_detach`, `_peer_failed`, `_shutdown`, `_free`), the
//! control-plane handshake that tells each side the other's ids (so dynamic names work across
//! processes), routing for the host's own data path (`tagspace_node_route`: the endpoint and
//! tag to pass to `ucp_tag_send_nbx`; `tagspace_node_matcher` for the receive), the event poll
//! and counters.
//!
//! Threads: on a `UCS_THREAD_MODE_MULTI` worker every call may be made from any thread, at
//! once (the node is the Rust `SharedNode`: a reader-writer lock, UCX's callbacks never take
//! it; `tagspace_node_route` and `tagspace_node_matcher` read, and a route a thread looked up
//! before is answered from that thread's cache with one atomic load). From inside a UCX
//! callback (an endpoint error handler) call only `tagspace_node_peer_failed`, which takes no
//! lock but an event queue's: any other call may wait for a thread that waits for UCX's worker
//! lock. On a SINGLE or SERIALIZED worker the node is used by one thread at a time, never while
//! another thread calls UCX on the worker.

use crate::{
    arg, c_name, guard, put, tagspace_matcher_t, tagspace_registry_t, tagspace_status_t, Fail, Reg,
    TAGSPACE_ERR_NULL_ARGUMENT,
};
use std::cell::Cell;
use std::ffi::{c_char, c_void};
use std::sync::Arc;
use tagspace_core::engine::Liveness;
use tagspace_core::Registry;
use tagspace_ucx::node::{
    dialable_address, HostProgress, LibId, NodeConfig, NodeError, PeerEvent, Role,
};
use tagspace_ucx::shared::{RouteHit, SharedNode};
use tagspace_ucx::ucp::ThreadMode;

/// A UCX call failed; the UCX status is in the call's `ucs_status` out-parameter (and in the
/// message of `tagspace_last_error`).
pub const TAGSPACE_ERR_UCX: tagspace_status_t = 16;
/// No established connection to that peer (not attached yet, handshake not finished, or gone).
pub const TAGSPACE_ERR_NOT_CONNECTED: tagspace_status_t = 17;
/// The peer is connected but has not registered (announced) that library's name yet: try again
/// after more progress.
pub const TAGSPACE_ERR_NOT_ANNOUNCED: tagspace_status_t = 18;
/// The call does not fit the node's state (attaching an endpoint twice, detaching one that is
/// not attached, a NULL worker, ...); the message says what.
pub const TAGSPACE_ERR_MISUSE: tagspace_status_t = 19;
/// No such library on this node (released, or never registered here).
pub const TAGSPACE_ERR_NO_SUCH_LIBRARY: tagspace_status_t = 20;

/// The host progresses the worker (`tagspace_node_progress` only handles what arrived).
pub const TAGSPACE_PROGRESS_HOST: u32 = 0;
/// `tagspace_node_progress` progresses the worker.
pub const TAGSPACE_PROGRESS_NODE: u32 = 1;

/// This process created the endpoint towards the peer (its listener, or its worker address
/// when the peer's rank is higher).
pub const TAGSPACE_SIDE_INITIATOR: u32 = 0;
/// The endpoint came from the peer's connection request (or the peer's rank is lower).
pub const TAGSPACE_SIDE_ACCEPTOR: u32 = 1;

/// No event waited.
pub const TAGSPACE_EVENT_NONE: u32 = 0;
/// A peer's connection is established: its libraries can be routed to as it announces them.
pub const TAGSPACE_EVENT_UP: u32 = 1;
/// A peer's last connection went down (closed in order, or failed: see `ucs_status`).
pub const TAGSPACE_EVENT_DOWN: u32 = 2;

/// A node on a host's worker. Opaque; `tagspace_node_free` ends it.
pub struct tagspace_node_t {
    // Field order matters: the node borrows the registry that `_keep` keeps alive.
    node: SharedNode,
    /// On a worker that is not MULTI (used by one thread at a time, by the C contract): routes
    /// cached in the node, validated by the node's epoch — no thread-local lookup, which a
    /// shared library pays a `__tls_get_addr` call for. `None` on a MULTI worker, where each
    /// thread's own cache (inside `SharedNode::route`) is used.
    single: Option<[Cell<RouteHit>; ROUTE_CACHE]>,
    _keep: Option<Arc<Registry<256>>>,
}

/// Entries of the per-node route cache (direct-mapped by library and peer).
const ROUTE_CACHE: usize = 64;

/// How `tagspace_node_adopt` sets up a node. Initialise with `tagspace_node_options_init`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct tagspace_node_options_t {
    /// `sizeof(tagspace_node_options_t)` as the caller was compiled.
    pub struct_size: u32,
    /// `TAGSPACE_PROGRESS_HOST` (default) or `TAGSPACE_PROGRESS_NODE`.
    pub progress: u32,
    /// Heartbeat: a PING every `heartbeat_interval_ms` on each connection (default 1000); 0
    /// turns the heartbeat off (a silent peer is then noticed only through `peer_failed`).
    pub heartbeat_interval_ms: u32,
    /// A PING unanswered this long closes the connection (default 30000). Call
    /// `tagspace_node_progress` more often than this.
    pub heartbeat_timeout_ms: u32,
}

/// What a node found on the host's worker. Set `struct_size` before `tagspace_node_info`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct tagspace_node_info_t {
    /// `sizeof(tagspace_node_info_t)` as the caller was compiled.
    pub struct_size: u32,
    /// This node's token: how peers name this process (`tagspace_node_route`'s `peer`).
    pub token: u64,
    /// The worker's `ucs_thread_mode_t` (0 single, 1 serialized, 2 multi).
    pub thread_mode: u32,
    /// The UCX loaded in the process: major, minor, release.
    pub ucx_major: u32,
    /// See `ucx_major`.
    pub ucx_minor: u32,
    /// See `ucx_major`.
    pub ucx_release: u32,
    /// `TAGSPACE_PROGRESS_HOST` or `TAGSPACE_PROGRESS_NODE`.
    pub progress: u32,
}

/// A peer event for one library (`tagspace_node_poll_event`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct tagspace_peer_event_t {
    /// `TAGSPACE_EVENT_NONE`, `_UP` or `_DOWN`.
    pub kind: u32,
    /// The peer's token.
    pub peer: u64,
    /// Down: the UCX status of the failure, 0 for an orderly close.
    pub ucs_status: i32,
    /// Down: the close reason either side gave (0 normal, 1 layout mismatch, 2 protocol error,
    /// 3 superseded, 4 unproven, 5 flood, 6 unresponsive), -1 if none (a failure).
    pub close_reason: i32,
}

/// A node's counters. Set `struct_size` before `tagspace_node_stats`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct tagspace_node_stats_t {
    /// `sizeof(tagspace_node_stats_t)` as the caller was compiled.
    pub struct_size: u32,
    /// Connections (attached endpoints) the node knows, in any state.
    pub connections: u64,
    /// Peers with an established connection.
    pub peers: u64,
    /// Control frames sent / received (heartbeats not included).
    pub control_sent: u64,
    /// See `control_sent`.
    pub control_received: u64,
    /// Protocol errors from peers (each closes that connection).
    pub protocol_errors: u64,
    /// Endpoints that failed (`tagspace_node_peer_failed` included).
    pub endpoint_failures: u64,
    /// Control frames from endpoints the host had not attached, dropped beyond the bound.
    pub unattached_dropped: u64,
    /// Released ids kept quarantined because a message still waits in UCX's queue in them.
    pub quarantine_held: u64,
    /// Connections closed because a PING went unanswered for `heartbeat_timeout_ms`.
    pub heartbeat_timeouts: u64,
    /// Peers lost to a fault that came back (on a connection either host made).
    pub reconnects: u64,
    /// Peers lost to a fault given up on: not back within 5 minutes, or a new process proved
    /// its identity at their address (they restarted).
    pub reconnects_given_up: u64,
    /// Times the node found itself hearing nobody: every connection cut off by the heartbeat,
    /// several peers down and no control frame from anyone for the heartbeat's timeout — the
    /// worker's shared-memory receive queue is stuck (a peer killed while writing to it). The
    /// host owns the worker: when this grows, replace it (a new worker and listener, the
    /// endpoints attached again); tagspace cannot.
    pub deaf: u64,
}

/// A peer lost to a fault that the host should connect to again (`tagspace_node_take_reconnect`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct tagspace_reconnect_t {
    /// `sizeof(tagspace_reconnect_t)` as the caller was compiled.
    pub struct_size: u32,
    /// 1: a peer waits to be reconnected (the fields below say which, and where); 0: none.
    pub needed: u32,
    /// The peer's token.
    pub peer: u64,
    /// Where the peer said it listens (its host's `tagspace_node_advertise`): the numeric IP
    /// address, NUL-terminated (IPv6 without brackets).
    pub host: [c_char; TAGSPACE_HOST_LEN],
    /// Its port.
    pub port: u16,
}

/// Bytes of `tagspace_reconnect_t::host`, the terminating NUL included (INET6_ADDRSTRLEN).
pub const TAGSPACE_HOST_LEN: usize = 46;

impl From<NodeError> for Fail {
    fn from(e: NodeError) -> Fail {
        let code = match &e {
            NodeError::Transport(_) => TAGSPACE_ERR_UCX,
            NodeError::NoConnection { .. } | NodeError::PeerDown { .. } => {
                TAGSPACE_ERR_NOT_CONNECTED
            }
            NodeError::PeerLacksNamespace { .. } => TAGSPACE_ERR_NOT_ANNOUNCED,
            NodeError::Tag(t) => return Fail::from(*t),
            NodeError::Registry(r) => return Fail::from(*r),
            NodeError::NoSuchLibrary => TAGSPACE_ERR_NO_SUCH_LIBRARY,
            NodeError::Usage(_) => TAGSPACE_ERR_MISUSE,
        };
        Fail::new(code, e.to_string())
    }
}

fn lib_id(lib: u32) -> LibId {
    LibId(lib as usize)
}

/// Fails naming `lib` unless the node has it.
fn known_lib(n: &SharedNode, lib: u32) -> Result<(), Fail> {
    if n.has_library(lib_id(lib)) {
        Ok(())
    } else {
        Err(no_lib(lib))
    }
}

/// Fills `opts` with the defaults (host progress, heartbeat 1 s / 30 s) and its `struct_size`.
///
/// # Safety
/// `opts` is `NULL` (ignored) or valid for writing a `tagspace_node_options_t`.
#[no_mangle]
pub unsafe extern "C" fn tagspace_node_options_init(opts: *mut tagspace_node_options_t) {
    let d = Liveness::default();
    let v = tagspace_node_options_t {
        struct_size: std::mem::size_of::<tagspace_node_options_t>() as u32,
        progress: TAGSPACE_PROGRESS_HOST,
        heartbeat_interval_ms: d.interval_ms as u32,
        heartbeat_timeout_ms: d.timeout_ms as u32,
    };
    // SAFETY: the caller's contract; NULL is ignored.
    let _ = unsafe { put(opts, "opts", v) };
}

/// Reads options written by a caller compiled against this or an older header.
///
/// # Safety
/// `opts` is `NULL` or points to an initialised options struct of at least `struct_size` bytes.
unsafe fn read_options(
    opts: *const tagspace_node_options_t,
) -> Result<tagspace_node_options_t, Fail> {
    if opts.is_null() {
        let mut v = std::mem::MaybeUninit::<tagspace_node_options_t>::uninit();
        // SAFETY: init writes the whole struct.
        return Ok(unsafe {
            tagspace_node_options_init(v.as_mut_ptr());
            v.assume_init()
        });
    }
    // SAFETY: the caller's contract; only the leading `struct_size` field is read first.
    let size = unsafe { *opts.cast::<u32>() };
    let ours = std::mem::size_of::<tagspace_node_options_t>() as u32;
    if size < ours {
        return Err(Fail::new(
            crate::TAGSPACE_ERR_BAD_STRUCT_SIZE,
            format!(
                "opts->struct_size is {size}, less than the {ours} bytes this library reads; \
                 call tagspace_node_options_init first"
            ),
        ));
    }
    // SAFETY: `struct_size` says the whole (version 1) struct is there.
    let v = unsafe { *opts };
    if v.progress > TAGSPACE_PROGRESS_NODE {
        return Err(Fail::new(
            TAGSPACE_ERR_MISUSE,
            format!(
                "`opts->progress` is {}: use TAGSPACE_PROGRESS_HOST (0) or \
                 TAGSPACE_PROGRESS_NODE (1)",
                v.progress
            ),
        ));
    }
    if v.heartbeat_interval_ms != 0 && v.heartbeat_timeout_ms == 0 {
        return Err(Fail::new(
            TAGSPACE_ERR_MISUSE,
            "`opts->heartbeat_timeout_ms` is 0 with the heartbeat on",
        ));
    }
    Ok(v)
}

/// Puts tagspace on the host's worker `ucp_worker` (a `ucp_worker_h` whose context has the tag
/// and Active Message features). tagspace never destroys it and never closes the host's
/// endpoints; it sets AM handlers only on its own namespaces' ids (never id 0) and removes them
/// when the node is freed. `reg`: the registry its libraries register in (`NULL`: the
/// process-global one). `opts`: `NULL` for the defaults. On a UCX error `*ucs_status` (if not
/// `NULL`) receives UCX's status (else 0).
///
/// # Safety
/// `ucp_worker` is a live worker that outlives the node (destroy it only after
/// `tagspace_node_free`); `reg` is `NULL` or a live handle; `opts` is `NULL` or an initialised
/// options struct; `out` is valid for writing a pointer (set to `NULL` on failure).
#[no_mangle]
pub unsafe extern "C" fn tagspace_node_adopt(
    ucp_worker: *mut c_void,
    reg: *const tagspace_registry_t,
    opts: *const tagspace_node_options_t,
    out: *mut *mut tagspace_node_t,
    ucs_status: *mut i32,
) -> tagspace_status_t {
    // SAFETY: the caller's contract.
    unsafe {
        crate::clear(out);
        if !ucs_status.is_null() {
            ucs_status.write(0);
        }
    }
    guard(|| {
        // SAFETY: the caller's contract.
        let o = unsafe { read_options(opts) }?;
        let (registry, keep): (&'static Registry<256>, _) = match unsafe { reg.as_ref() } {
            None => (tagspace_core::global(), None),
            Some(h) => match &h.reg {
                Reg::Global(r) => (*r, None),
                Reg::Owned(a) => {
                    let keep = Arc::clone(a);
                    // SAFETY: `keep` holds the registry's heap block for as long as the node
                    // that borrows it (field order of `tagspace_node_t`); it never moves.
                    let r: &'static Registry<256> = unsafe { &*Arc::as_ptr(&keep) };
                    (r, Some(keep))
                }
            },
        };
        let mut cfg = NodeConfig::loopback(tagspace_ucx::ucp::Config::default());
        cfg.listen = None;
        cfg.liveness = (o.heartbeat_interval_ms != 0).then_some(Liveness {
            interval_ms: o.heartbeat_interval_ms as u64,
            timeout_ms: o.heartbeat_timeout_ms as u64,
        });
        let progress = if o.progress == TAGSPACE_PROGRESS_NODE {
            HostProgress::Node
        } else {
            HostProgress::Host
        };
        // SAFETY: the caller's contract (a live worker that outlives the node; on a worker
        // that is not MULTI, one thread at a time, as documented).
        let node =
            unsafe { SharedNode::adopt_any_mode(ucp_worker.cast(), cfg, progress, registry) }
                .map_err(|e| {
                    if let NodeError::Transport(u) = &e {
                        if !ucs_status.is_null() {
                            // SAFETY: the caller's contract.
                            unsafe { ucs_status.write(u.status.code() as i32) };
                        }
                    }
                    Fail::from(e)
                })?;
        let single = (node.host().thread_mode != ThreadMode::Multi)
            .then(|| std::array::from_fn(|_| Cell::new(RouteHit::EMPTY)));
        let h = Box::into_raw(Box::new(tagspace_node_t {
            node,
            single,
            _keep: keep,
        }));
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", h) }.inspect_err(|_| {
            // SAFETY: just made, never handed out.
            drop(unsafe { Box::from_raw(h) })
        })
    })
}

/// The node behind a handle, or the error naming a NULL one.
///
/// # Safety
/// `p` is `NULL` or a live node handle.
unsafe fn node_ref<'a>(p: *const tagspace_node_t) -> Result<&'a SharedNode, Fail> {
    // SAFETY: the caller's contract.
    Ok(&unsafe { arg(p, "node") }?.node)
}

/// The error for a library this node does not have, naming it.
fn no_lib(lib: u32) -> Fail {
    Fail::new(
        TAGSPACE_ERR_NO_SUCH_LIBRARY,
        format!("no library {lib} on this node"),
    )
}

/// `NodeError::NoSuchLibrary` named with the library's handle; other errors as they are.
fn lib_err(lib: u32) -> impl Fn(NodeError) -> Fail {
    move |e| match e {
        NodeError::NoSuchLibrary => no_lib(lib),
        e => Fail::from(e),
    }
}

/// Frees the node: its connections end (peers see the endpoints' errors or a CLOSE sent by
/// `tagspace_node_shutdown`), its AM handlers are removed, its requests cancelled (the worker is
/// progressed for at most 1 s until they end). The host's worker and endpoints stay open.
/// `NULL` is ignored.
///
/// # Safety
/// `node` is `NULL` or a live handle not in use by another thread; the worker is still live.
#[no_mangle]
pub unsafe extern "C" fn tagspace_node_free(node: *mut tagspace_node_t) {
    // SAFETY: the caller's contract.
    unsafe { crate::free_handle(node) }
}

/// Says goodbye to every peer (an orderly CLOSE on each attached endpoint) and progresses the
/// worker until those are sent or `timeout_ms` passes. Call it before `tagspace_node_free` when
/// the peers stay up. On a SINGLE-thread worker call it from the thread that progresses it.
///
/// # Safety
/// `node` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn tagspace_node_shutdown(
    node: *mut tagspace_node_t,
    timeout_ms: u32,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        unsafe { node_ref(node) }?.shutdown(timeout_ms as u64);
        Ok(())
    })
}

/// What the node found on the worker. Set `info->struct_size` first.
///
/// # Safety
/// `node` is a live handle; `info` points to at least `info->struct_size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn tagspace_node_info(
    node: *const tagspace_node_t,
    info: *mut tagspace_node_info_t,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_ref(node) }?;
        let h = n.host();
        let v = tagspace_node_info_t {
            struct_size: 0,
            token: n.token(),
            thread_mode: match h.thread_mode {
                ThreadMode::Single => 0,
                ThreadMode::Serialized => 1,
                ThreadMode::Multi => 2,
                ThreadMode::Other(v) => v,
            },
            ucx_major: h.ucx_version.0,
            ucx_minor: h.ucx_version.1,
            ucx_release: h.ucx_version.2,
            progress: match h.progress {
                HostProgress::Host => TAGSPACE_PROGRESS_HOST,
                HostProgress::Node => TAGSPACE_PROGRESS_NODE,
            },
        };
        // SAFETY: the caller's contract.
        unsafe { crate::copy_versioned(info, "info", &v) }
    })
}

/// Lets tagspace use the host's endpoint `ucp_ep` to one peer (a `ucp_ep_h` on the adopted
/// worker); the handshake runs in `tagspace_node_progress`. `side`: `TAGSPACE_SIDE_INITIATOR`
/// if this process created the endpoint towards the peer's listener, `TAGSPACE_SIDE_ACCEPTOR`
/// if it came from a connection request; for endpoints both ranks created from each other's
/// worker address, the lower rank passes `INITIATOR`.
///
/// # Safety
/// `node` is a live handle; `ucp_ep` is a live endpoint of the adopted worker that stays open
/// until `tagspace_node_detach` returns or the node is freed.
#[no_mangle]
pub unsafe extern "C" fn tagspace_node_attach(
    node: *mut tagspace_node_t,
    ucp_ep: *mut c_void,
    side: u32,
) -> tagspace_status_t {
    guard(|| {
        let side = match side {
            TAGSPACE_SIDE_INITIATOR => Role::Initiator,
            TAGSPACE_SIDE_ACCEPTOR => Role::Acceptor,
            other => {
                return Err(Fail::new(
                    TAGSPACE_ERR_MISUSE,
                    format!("`side` is {other}: use TAGSPACE_SIDE_INITIATOR or _ACCEPTOR"),
                ))
            }
        };
        // SAFETY: the caller's contract.
        let n = unsafe { node_ref(node) }?;
        // SAFETY: the caller's contract.
        Ok(unsafe { n.attach(ucp_ep.cast(), side) }?)
    })
}

/// `tagspace_node_attach` for an endpoint the host connected to where the lost `peer` said it
/// listens (`tagspace_node_take_reconnect`): this process is the initiator, and the handshake
/// says it reconnects, so the peer keeps this connection over any older one to this process it
/// has not found dead yet (after a cut link its old endpoint may look open for a while) and
/// routes on the new one at once. `reconnects` in `tagspace_node_stats` counts the peer back
/// once it proves itself; a different process proving itself there (the peer restarted) is a
/// new peer, and the lost one is given up (`reconnects_given_up`).
///
/// # Safety
/// As for `tagspace_node_attach`.
#[no_mangle]
pub unsafe extern "C" fn tagspace_node_attach_reconnect(
    node: *mut tagspace_node_t,
    ucp_ep: *mut c_void,
    peer: u64,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_ref(node) }?;
        // SAFETY: the caller's contract.
        Ok(unsafe { n.attach_reconnect(ucp_ep.cast(), peer) }?)
    })
}

/// Stops using the host's endpoint `ucp_ep`: the peer is sent an orderly CLOSE (close the
/// endpoint in order, not forced, for it to arrive), libraries hear `TAGSPACE_EVENT_DOWN` if it
/// was the peer's last connection. When it returns, no thread is in a UCX call on the endpoint
/// for tagspace and none will start one. After `tagspace_node_peer_failed` it only does that
/// (no CLOSE). Not from inside a UCX callback.
///
/// # Safety
/// `node` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn tagspace_node_detach(
    node: *mut tagspace_node_t,
    ucp_ep: *mut c_void,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        Ok(unsafe { node_ref(node) }?.detach(ucp_ep.cast())?)
    })
}

/// The host's endpoint `ucp_ep` failed with UCX status `ucs_status` (call it from the
/// endpoint's error handler — it takes no lock but an event queue's, so it is safe inside UCX —
/// or when the host learns the peer failed). Every later call on the node sees the failure: the
/// endpoint is no longer routed to, operations on it fail, the peer goes down if this was its
/// last connection, and tagspace makes no UCX call on it. The host closes it: a host that uses
/// the node from one thread may do so at once; one whose other threads may be inside tagspace
/// calls first calls `tagspace_node_detach` (from outside the callback; harmless after a
/// failure), which returns once none is using the endpoint. An endpoint that is not attached is
/// ignored.
///
/// # Safety
/// `node` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn tagspace_node_peer_failed(
    node: *mut tagspace_node_t,
    ucp_ep: *mut c_void,
    ucs_status: i32,
) -> tagspace_status_t {
    guard(|| {
        let status = ucs_status.clamp(i8::MIN as i32, 0) as i8;
        // SAFETY: the caller's contract.
        unsafe { node_ref(node) }?.peer_failed(ucp_ep.cast(), status);
        Ok(())
    })
}

/// Handles what arrived (handshakes, announcements, acknowledgements, heartbeats, failures) and,
/// with `TAGSPACE_PROGRESS_NODE`, progresses the worker. `*busy` (if not `NULL`) is set to 1 if
/// anything happened. Call it often: at least once per heartbeat timeout.
///
/// # Safety
/// `node` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn tagspace_node_progress(
    node: *mut tagspace_node_t,
    busy: *mut i32,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let b = unsafe { node_ref(node) }?.progress();
        if !busy.is_null() {
            // SAFETY: the caller's contract.
            unsafe { busy.write(b as i32) };
        }
        Ok(())
    })
}

/// Registers library `name` on the node (its well-known id, or a free dynamic id; peers learn
/// it through the handshake). `*lib` receives the library's handle on this node.
///
/// # Safety
/// `node` is a live handle; `name` is a NUL-terminated string; `lib` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn tagspace_node_register(
    node: *mut tagspace_node_t,
    name: *const c_char,
    lib: *mut u32,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let (n, name) = unsafe { (node_ref(node)?, c_name(name, "name")?) };
        let id = n.register_id(name)?;
        let h = u32::try_from(id.0)
            .map_err(|_| Fail::new(crate::TAGSPACE_ERR_EXHAUSTED, "too many libraries"))?;
        // SAFETY: the caller's contract.
        unsafe { put(lib, "lib", h) }
    })
}

/// Releases library `lib`: peers are told; its id is quarantined until they confirm (R7).
///
/// # Safety
/// `node` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn tagspace_node_release(
    node: *mut tagspace_node_t,
    lib: u32,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_ref(node) }?;
        known_lib(n, lib)?;
        n.release(lib_id(lib));
        Ok(())
    })
}

/// Starts queueing peer events for `lib` (`tagspace_node_poll_event`).
///
/// # Safety
/// `node` is a live handle.
#[no_mangle]
pub unsafe extern "C" fn tagspace_node_listen(
    node: *mut tagspace_node_t,
    lib: u32,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        unsafe { node_ref(node) }?
            .listen(lib_id(lib))
            .map_err(lib_err(lib))
    })
}

/// The next peer event for `lib` (`ev->kind` is `TAGSPACE_EVENT_NONE` when none waits).
///
/// # Safety
/// `node` is a live handle; `ev` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn tagspace_node_poll_event(
    node: *mut tagspace_node_t,
    lib: u32,
    ev: *mut tagspace_peer_event_t,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_ref(node) }?;
        known_lib(n, lib)?;
        let v = match n.peer_event(lib_id(lib)) {
            None => tagspace_peer_event_t {
                close_reason: -1,
                ..Default::default()
            },
            Some(PeerEvent::Up { peer }) => tagspace_peer_event_t {
                kind: TAGSPACE_EVENT_UP,
                peer,
                close_reason: -1,
                ..Default::default()
            },
            Some(PeerEvent::Down {
                peer,
                cause,
                reason,
            }) => tagspace_peer_event_t {
                kind: TAGSPACE_EVENT_DOWN,
                peer,
                ucs_status: cause.map_or(0, |c| c.status.code() as i32),
                close_reason: reason.map_or(-1, |r| r.code() as i32),
            },
        };
        // SAFETY: the caller's contract.
        unsafe { put(ev, "ev", v) }
    })
}

/// The host's data path: the endpoint (`*ucp_ep`, the host's own) and the tag (`*tag`) that
/// carry `payload` to library `lib` on `peer` — pass both to `ucp_tag_send_nbx`. Fails with
/// `TAGSPACE_ERR_NOT_CONNECTED` before the handshake with that peer finished and
/// `TAGSPACE_ERR_NOT_ANNOUNCED` while the peer has not registered the name: both clear with
/// more progress.
///
/// # Safety
/// `node` is a live handle; `ucp_ep` and `tag` are valid for writing.
#[no_mangle]
pub unsafe extern "C" fn tagspace_node_route(
    node: *const tagspace_node_t,
    lib: u32,
    peer: u64,
    payload: u64,
    ucp_ep: *mut *mut c_void,
    tag: *mut u64,
) -> tagspace_status_t {
    // The data path: this thread's cached route (one atomic load, no lock), with no unwinding
    // frame; a miss or any failure goes through `guard` and the lookup.
    // SAFETY: the caller's contract.
    if let (Some(h), false, false) = (unsafe { node.as_ref() }, ucp_ep.is_null(), tag.is_null()) {
        let hit = match &h.single {
            // One thread at a time on this worker (the C contract): the node's own cells.
            Some(c) => c[RouteHit::slot(lib.into(), peer, ROUTE_CACHE)]
                .get()
                .get(h.node.epoch(), lib.into(), peer, payload)
                .map(|(ep, t)| (ep as *mut c_void, t)),
            None => h
                .node
                .route_cached(lib_id(lib), peer, payload)
                .map(|(ep, t)| (ep.cast::<c_void>(), t)),
        };
        if let Some((ep, t)) = hit {
            // SAFETY: non-null and, by the caller's contract, valid for writes.
            unsafe {
                ucp_ep.write(ep.cast());
                tag.write(t);
            }
            return crate::TAGSPACE_OK;
        }
    }
    guard(|| {
        // SAFETY: the caller's contract.
        let h = unsafe { arg(node, "node") }?;
        let n = &h.node;
        let epoch = n.epoch(); // before the lookup: nothing changes the node meanwhile here
        let (ep, t) = n
            .route(lib_id(lib), peer, payload)
            .map_err(lib_err(lib))?
            .ok_or_else(|| {
                Fail::new(
                    TAGSPACE_ERR_NOT_ANNOUNCED,
                    format!("peer {peer:#x} has not announced library {lib}'s name yet"),
                )
            })?;
        if let Some(c) = &h.single {
            let hit = RouteHit::new(epoch, lib.into(), peer, ep as usize, t, n.layout());
            c[RouteHit::slot(lib.into(), peer, ROUTE_CACHE)].set(hit);
        }
        // SAFETY: the caller's contract.
        unsafe {
            put(ucp_ep, "ucp_ep", ep.cast::<c_void>())?;
            put(tag, "tag", t)
        }
    })
}

/// The exact matcher for receiving `payload` in library `lib`'s namespace on this node from
/// `peer` (pass `tag` and `mask` to `ucp_tag_recv_nbx`): what `peer`'s `tagspace_node_route`
/// for this library and payload sends to, and only that: the tag carries, in the layout's pair
/// field, the value this node gives `peer` alone once it has proven its identity, so another
/// process (one that never proved itself here included) cannot send a message it takes.
///
/// # Safety
/// `node` is a live handle; `out` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn tagspace_node_matcher(
    node: *const tagspace_node_t,
    lib: u32,
    peer: u64,
    payload: u64,
    out: *mut tagspace_matcher_t,
) -> tagspace_status_t {
    // The data path: this thread's matcher cache, with no unwinding frame.
    // SAFETY: the caller's contract.
    if let (Some(h), false) = (unsafe { node.as_ref() }, out.is_null()) {
        if let Some((t, mask)) = h.node.matcher_cached(lib_id(lib), peer, payload) {
            // SAFETY: non-null and, by the caller's contract, valid for writes.
            unsafe { out.write(crate::matcher_out(t, mask)) };
            return crate::TAGSPACE_OK;
        }
    }
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_ref(node) }?;
        let (t, mask) = n
            .matcher(lib_id(lib), peer, payload)
            .map_err(lib_err(lib))?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", crate::matcher_out(t, mask)) }
    })
}

/// The matcher for receiving `payload` in library `lib`'s namespace from any peer: every bit
/// fixed but the layout's pair field (a partial mask: UCX's slower path while it is posted).
/// It also takes a message a process that never proved its identity here made up: pass the
/// received tag to `tagspace_node_sender_of` and drop the message when it finds no peer.
///
/// # Safety
/// `node` is a live handle; `out` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn tagspace_node_matcher_any_peer(
    node: *const tagspace_node_t,
    lib: u32,
    payload: u64,
    out: *mut tagspace_matcher_t,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_ref(node) }?;
        let (t, mask) = (n.matcher_any_peer(lib_id(lib), payload)).map_err(lib_err(lib))?;
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", crate::matcher_out(t, mask)) }
    })
}

/// Who sent a message that arrived with `tag` (the sender tag UCX reports): `*peer` receives
/// the token of the proven peer whose pair value the tag carries and the call returns
/// `TAGSPACE_OK`; `TAGSPACE_ERR_NOT_FOUND` when no proven peer was given that value — a
/// process that never proved its identity here made the tag up; `TAGSPACE_ERR_BAD_LAYOUT`
/// when the layout has no pair field (nothing tells senders apart there).
///
/// # Safety
/// `node` is a live handle; `peer` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn tagspace_node_sender_of(
    node: *const tagspace_node_t,
    tag: u64,
    peer: *mut u64,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_ref(node) }?;
        if n.layout().pair_bits() == 0 {
            return Err(Fail::new(
                crate::TAGSPACE_ERR_BAD_LAYOUT,
                "the node's layout has no pair field: nothing tells its peers' tags apart",
            ));
        }
        match n.sender_of(tag) {
            // SAFETY: the caller's contract.
            Some(p) => unsafe { put(peer, "peer", p) },
            None => Err(Fail::new(
                crate::TAGSPACE_ERR_NOT_FOUND,
                format!("no proven peer sends with the pair value in tag {tag:#018x}"),
            )),
        }
    })
}

/// The tokens of peers with an established connection: up to `cap` into `peers`; `*count`
/// receives how many there are (call with `cap` 0 to size the buffer).
///
/// # Safety
/// `node` is a live handle; `peers` is valid for `cap` writes (or `NULL` with `cap` 0);
/// `count` is valid for writing.
#[no_mangle]
pub unsafe extern "C" fn tagspace_node_peers(
    node: *const tagspace_node_t,
    peers: *mut u64,
    cap: usize,
    count: *mut usize,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_ref(node) }?;
        let all = n.peers();
        if cap > 0 && peers.is_null() {
            return Err(Fail::new(TAGSPACE_ERR_NULL_ARGUMENT, "`peers` is NULL"));
        }
        for (i, p) in all.iter().take(cap).enumerate() {
            // SAFETY: i < cap writes, by the caller's contract.
            unsafe { peers.add(i).write(*p) };
        }
        // SAFETY: the caller's contract.
        unsafe { put(count, "count", all.len()) }
    })
}

/// The node's counters. Set `stats->struct_size` first.
///
/// # Safety
/// `node` is a live handle; `stats` points to at least `stats->struct_size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn tagspace_node_stats(
    node: *const tagspace_node_t,
    stats: *mut tagspace_node_stats_t,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_ref(node) }?;
        let s = n.stats();
        let v = tagspace_node_stats_t {
            struct_size: 0,
            connections: n.connection_count() as u64,
            peers: n.peers().len() as u64,
            control_sent: s.control_sent,
            control_received: s.control_received,
            protocol_errors: s.protocol_errors,
            endpoint_failures: s.endpoint_failures,
            unattached_dropped: s.unattached_dropped,
            quarantine_held: n.quarantine_held() as u64,
            heartbeat_timeouts: s.liveness_timeouts,
            reconnects: s.reconnects,
            reconnects_given_up: s.redials_given_up,
            deaf: s.deaf,
        };
        // SAFETY: the caller's contract.
        unsafe { crate::copy_versioned(stats, "stats", &v) }
    })
}

/// Longest address `tagspace_node_advertise` reads, in bytes (without the NUL).
const ADDRESS_LEN_MAX: usize = 64;

/// Tells peers where to connect to this process again after a fault: `address` is the host's
/// listener as `"IP:PORT"` (`"10.0.0.2:13337"`, `"[fe80::1]:13337"`), or `NULL` to tell
/// nothing. Peers connected now are told at once, later ones in the handshake. A peer that
/// loses this process to a fault (not an orderly close) reports the address through its own
/// `tagspace_node_take_reconnect`; a process that tells nothing is never reported.
///
/// # Safety
/// `node` is a live handle; `address` is `NULL` or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tagspace_node_advertise(
    node: *mut tagspace_node_t,
    address: *const c_char,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_ref(node) }?;
        let addr = if address.is_null() {
            None
        } else {
            // SAFETY: the caller's contract (a NUL-terminated string).
            Some(unsafe { socket_address(address) }?)
        };
        n.set_advertise(addr);
        Ok(())
    })
}

/// Reads `"IP:PORT"` from a C string, naming what is wrong with it.
///
/// # Safety
/// `p` is a NUL-terminated string.
unsafe fn socket_address(p: *const c_char) -> Result<std::net::SocketAddr, Fail> {
    // SAFETY: the caller's contract.
    let bytes = unsafe { crate::c_bytes(p, "address", ADDRESS_LEN_MAX, TAGSPACE_ERR_MISUSE) }?;
    dialable_address(&String::from_utf8_lossy(bytes))
        .map_err(|e| Fail::new(TAGSPACE_ERR_MISUSE, format!("`address` {e}")))
}

/// The next peer lost to a fault (a failed endpoint, or a heartbeat unanswered; not an
/// orderly close) that the host should connect to again, oldest first: `out->needed` is 1 and
/// `out->peer`, `out->host`, `out->port` say which and where; 0 when none waits. Each peer is
/// reported once, about 200 ms after it went down (a late orderly close cancels it); the
/// node keeps at most 1024. The host connects to that address (`ucp_ep_create` with the
/// sockaddr) and attaches the endpoint with `tagspace_node_attach_reconnect`; the peer's host
/// attaches its side as `TAGSPACE_SIDE_ACCEPTOR`, the peer proves the same identity again,
/// and routing resumes on the new endpoint (`TAGSPACE_EVENT_UP`) on both sides. What was in flight when the
/// connection failed is not sent again. Set `out->struct_size` first.
///
/// # Safety
/// `node` is a live handle; `out` points to at least `out->struct_size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn tagspace_node_take_reconnect(
    node: *mut tagspace_node_t,
    out: *mut tagspace_reconnect_t,
) -> tagspace_status_t {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_ref(node) }?;
        // Checked before one is taken: a report is never lost to a struct too small for it.
        // SAFETY: the caller's contract; only the leading `struct_size` field is read.
        let size = *unsafe { arg(out.cast::<u32>().cast_const(), "out") }?;
        let ours = std::mem::size_of::<tagspace_reconnect_t>() as u32;
        if size < ours {
            return Err(Fail::new(
                crate::TAGSPACE_ERR_BAD_STRUCT_SIZE,
                format!(
                    "out->struct_size is {size}: set it to sizeof(tagspace_reconnect_t) ({ours})"
                ),
            ));
        }
        let mut v = tagspace_reconnect_t {
            struct_size: 0,
            needed: 0,
            peer: 0,
            host: [0; TAGSPACE_HOST_LEN],
            port: 0,
        };
        if let Some((peer, addr)) = n.take_reconnect_needed() {
            let ip = addr.ip().to_string();
            v.needed = 1;
            v.peer = peer;
            v.port = addr.port();
            // An IP address's text is at most 45 bytes: the NUL always fits.
            for (d, b) in v
                .host
                .iter_mut()
                .zip(ip.bytes().take(TAGSPACE_HOST_LEN - 1))
            {
                *d = b as c_char;
            }
        }
        // SAFETY: the caller's contract.
        unsafe { crate::copy_versioned(out, "out", &v) }
    })
}
