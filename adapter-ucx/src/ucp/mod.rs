//! Safe wrappers over UCP (`ucx1-sys`): context, worker, listener, endpoints and requests.
//!
//! Ownership: each raw UCX handle is owned by exactly one Rust value whose `Drop` releases it
//! ([`Context`] → `ucp_cleanup`, [`Worker`] → `ucp_worker_destroy`, [`Listener`] →
//! `ucp_listener_destroy`, [`Endpoint`] → `ucp_ep_close_nbx`, [`Request`] → `ucp_request_free`).
//! Listeners, endpoints and requests hold a reference-counted handle to their worker, so the
//! worker (and its context) is destroyed last whatever order the values are dropped in.
//!
//! Thread mode: workers are created with `UCS_THREAD_MODE_SINGLE`, the fastest mode, and
//! every type here holds raw pointers and so is neither `Send` nor `Sync`: one thread owns a
//! worker and everything made from it. That is how tagspace is meant to be used (one progress
//! thread per worker, libraries call into it on that thread). A worker a host owns
//! ([`Worker::adopt`]) may be MULTI and progressed by the host's own thread: the callbacks then
//! run there, and only push into the worker's event queues (a mutex held for one push, never
//! across a UCX call). Libraries on several threads use [`crate::shared::SharedNode`], which
//! keeps all of these types behind one lock on such a worker.
//!
//! Borrowed handles: [`Worker::adopt`] and [`Endpoint::borrow`] wrap a host's worker and
//! endpoints; tagspace never destroys or closes them.
//!
//! Buffers: sends and receives take *owned* `Vec<u8>`s and give them back on completion, so a
//! request dropped (or leaked) before it completes can never leave UCX writing into freed
//! memory: an unfinished request is parked with its buffer on the worker until UCX is done.
//!
//! Callbacks (listener connection requests, endpoint errors, Active Messages) only copy what
//! they are given into the worker's event queues; a panic inside one aborts the process rather
//! than unwind into C.

mod status;

pub use status::{Status, UcxError};

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ffi::{c_void, CString};
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;
use std::rc::Rc;
use std::sync::{Mutex, MutexGuard};
use ucx1_sys as sys;

/// The UCX version this process loaded (at run time: may differ from the headers built against).
pub fn ucx_version() -> (u32, u32, u32) {
    let (mut a, mut b, mut c) = (0, 0, 0);
    // SAFETY: writes three integers.
    unsafe { sys::ucp_get_version(&mut a, &mut b, &mut c) };
    (a, b, c)
}

/// The UCX API version the bindings were generated from (`ucx1-sys`'s headers).
pub const UCX_API_BUILT: (u32, u32) = (sys::UCP_API_MAJOR, sys::UCP_API_MINOR);

fn check(op: &'static str, s: sys::ucs_status_t) -> Result<(), UcxError> {
    let s = Status::from_sys(s);
    if s.is_ok() {
        Ok(())
    } else {
        Err(UcxError { op, status: s })
    }
}

/// Runs a callback body; a panic there must not unwind into UCX, so it aborts the process.
fn guard(what: &str, f: impl FnOnce()) {
    if catch_unwind(AssertUnwindSafe(f)).is_err() {
        eprintln!("tagspace-ucx: panic inside the UCX {what} callback; aborting");
        std::process::abort();
    }
}

/// Options for a UCX context, applied with `ucp_config_modify` on top of the environment
/// (`UCX_*` variables still apply to what is not set here).
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// `UCX_TLS`, e.g. `"tcp"` or `"sm"` (shared memory: posix/sysv/cma); `None`: UCX's choice.
    pub transports: Option<String>,
    /// `UCX_RNDV_THRESH` in bytes; `None`: UCX's choice.
    pub rndv_thresh: Option<usize>,
    /// Any other `(name, value)` pairs, without the `UCX_` prefix.
    pub options: Vec<(String, String)>,
}

impl Config {
    /// Only TCP (loopback works across processes and containers).
    ///
    /// On UCX 1.13 (Debian 12's 1.13.1) also `TCP_PUT_ENABLE=n`: that build asserts in its TCP
    /// PUT protocol (`tcp_ep.c:939 ... UCT_TCP_EP_FLAG_PUT_TX_WAITING_ACK`) and aborts a
    /// *surviving* process when a PUT ACK arrives after a peer failure (about 1 in 20 kill -9
    /// runs of the demo). Not on other versions: rendezvous over TCP without PUT moves 1 MiB
    /// messages at about half the bandwidth (bench (a), UCX 1.12.1).
    pub fn tcp() -> Config {
        let mut options = Vec::new();
        if matches!(ucx_version(), (1, 13, _)) {
            options.push(("PUT_ENABLE".into(), "n".into()));
        }
        Config {
            transports: Some("tcp".into()),
            options,
            ..Config::default()
        }
    }

    /// Shared memory between processes on this host, TCP for connection establishment.
    ///
    /// Sets `MM_ERROR_HANDLING=y`: tagspace creates every endpoint with peer error handling
    /// (D3), and UCX leaves its shared-memory transports out of such endpoints unless they are
    /// told to detect peer failure themselves (by keepalive) — without it "shared memory" would
    /// silently run over TCP (openucx/ucx#8477). And `TCP_PUT_ENABLE=n` on every version:
    /// with TCP PUT available, UCX ran rendezvous between shared-memory peers over TCP's PUT
    /// lane (`BENCH_EP_INFO=1` showed `tcp/lo rma_bw`); without it they go over shared memory
    /// (bench (a): 64 KiB 3.3× and 1 MiB 1.6× faster), and UCX 1.13.1's TCP PUT assertion (see
    /// [`Config::tcp`]) cannot fire.
    pub fn shm() -> Config {
        Config {
            transports: Some("sm,tcp".into()),
            options: vec![
                ("MM_ERROR_HANDLING".into(), "y".into()),
                ("PUT_ENABLE".into(), "n".into()),
            ],
            ..Config::default()
        }
    }

    fn pairs(&self) -> Vec<(String, String)> {
        let mut v = Vec::new();
        if let Some(t) = &self.transports {
            v.push(("TLS".to_string(), t.clone()));
        }
        if let Some(r) = self.rndv_thresh {
            v.push(("RNDV_THRESH".to_string(), r.to_string()));
        }
        v.extend(self.options.iter().cloned());
        v
    }
}

/// A UCP context (`ucp_context_h`) with the tag, Active Message and wake-up features.
pub struct Context {
    raw: sys::ucp_context_h,
}

impl Context {
    /// Reads the environment's UCX configuration, applies `cfg`, and initializes UCP.
    pub fn new(cfg: &Config) -> Result<Rc<Context>, UcxError> {
        let mut config: *mut sys::ucp_config_t = ptr::null_mut();
        // SAFETY: out-pointer; NULL prefix/file = environment defaults.
        check("ucp_config_read", unsafe {
            sys::ucp_config_read(ptr::null(), ptr::null(), &mut config)
        })?;
        let result = (|| {
            for (k, v) in cfg.pairs() {
                let cv = cstring(&v)?;
                let modify = |k: &str| -> Result<(), UcxError> {
                    let ck = cstring(k)?;
                    // SAFETY: config is live; both strings are NUL-terminated.
                    check("ucp_config_modify", unsafe {
                        sys::ucp_config_modify(config, ck.as_ptr(), cv.as_ptr())
                    })
                };
                match (
                    modify(&k),
                    UCT_KEY_ALIASES.iter().find(|(short, _)| *short == k),
                ) {
                    (Err(e), Some((_, full)))
                        if e.status == Status::INVALID_PARAM || e.status == Status::NO_ELEM =>
                    {
                        modify(full)?
                    }
                    (r, _) => r?,
                }
            }
            // SAFETY: zeroed is a valid "no fields" value for this plain C struct.
            let mut params: sys::ucp_params_t = unsafe { std::mem::zeroed() };
            params.field_mask = sys::ucp_params_field::UCP_PARAM_FIELD_FEATURES.0 as u64;
            params.features = (sys::ucp_feature::UCP_FEATURE_TAG
                | sys::ucp_feature::UCP_FEATURE_AM
                | sys::ucp_feature::UCP_FEATURE_WAKEUP)
                .0 as u64;
            let mut raw: sys::ucp_context_h = ptr::null_mut();
            // SAFETY: params and config are valid for the call; raw is an out-pointer.
            check("ucp_init", unsafe {
                sys::ucp_init_version(
                    sys::UCP_API_MAJOR,
                    sys::UCP_API_MINOR,
                    &params,
                    config,
                    &mut raw,
                )
            })?;
            Ok(Rc::new(Context { raw }))
        })();
        // SAFETY: config came from ucp_config_read and is released once.
        unsafe { sys::ucp_config_release(config) };
        result
    }
}

/// Transport options whose name `ucp_config_modify` takes differently across versions: UCX
/// 1.12/1.13 match a transport's option by its name inside the transport's table
/// (`PUT_ENABLE`; the prefixed `TCP_PUT_ENABLE` is accepted but never applied, with an
/// "Invalid configuration" warning), UCX 1.22 only by the prefixed name (the short one is
/// `INVALID_PARAM`). The short name is tried first, then the prefixed one.
const UCT_KEY_ALIASES: &[(&str, &str)] = &[("PUT_ENABLE", "TCP_PUT_ENABLE")];

fn cstring(s: &str) -> Result<CString, UcxError> {
    CString::new(s).map_err(|_| UcxError {
        op: "config (value contains NUL)",
        status: Status::INVALID_PARAM,
    })
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the last owner; every worker holds an Rc and so is already gone.
        unsafe { sys::ucp_cleanup(self.raw) }
    }
}

/// An identity for an endpoint, comparable with the `reply_ep` of an Active Message and the
/// endpoint named in an error (the raw pointer's address; never dereferenced).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EpKey(usize);

impl EpKey {
    /// The key of the raw endpoint `ep` (e.g. one a host reports failed).
    pub fn of(ep: sys::ucp_ep_h) -> EpKey {
        EpKey(ep as usize)
    }
}

/// An Active Message as delivered to the worker.
#[derive(Debug)]
pub struct AmMessage {
    /// The UCX AM id.
    pub id: u16,
    /// The payload (a copy).
    pub data: Vec<u8>,
    /// The endpoint it came from, if the sender asked for replies (tagspace always does).
    pub reply_ep: Option<EpKey>,
    /// The sender used rendezvous; tagspace sends AMs eagerly, so the data was dropped.
    pub rndv_dropped: bool,
    /// It arrived on an id with no handler of its own ([`Worker::guard_am_ids`]): `id` is
    /// meaningless and the data was not copied.
    pub unowned: bool,
}

#[derive(Default)]
struct Events {
    ep_errors: VecDeque<(EpKey, Status)>,
    am: VecDeque<AmMessage>,
    /// Requests UCX completed (their addresses, see [`Request::addr`]) that were started to
    /// report it (the `*_woken` calls a node makes; see [`Worker::take_completed`]).
    done: Vec<usize>,
}

/// The worker's event queues. A mutex, not a `RefCell`: on an adopted worker
/// ([`Worker::adopt`]) UCX runs the callbacks that push here on whichever thread the host
/// progresses it from. The lock is held only to push or pop one entry, never across a UCX call.
type EventQueue = Mutex<Events>;

fn lock(q: &EventQueue) -> MutexGuard<'_, Events> {
    // A poisoned queue only means a callback panicked (which aborts); the data is intact.
    q.lock().unwrap_or_else(|p| p.into_inner())
}

/// Reports endpoint failures into a worker's event queue (what [`Worker::report_ep_error`]
/// does) from any thread, holding only the queue's lock for one push: safe to call from
/// inside a UCX callback on a thread that progresses the worker, where any longer-held lock
/// could deadlock against UCX's worker lock. Valid while the worker it came from lives: its
/// owner keeps the worker alive for as long as it keeps the sink.
pub(crate) struct ErrorSink(*const EventQueue);

// SAFETY: the pointer is to a `Mutex` (Send + Sync), only ever read through `&`.
unsafe impl Send for ErrorSink {}
// SAFETY: as above.
unsafe impl Sync for ErrorSink {}

impl ErrorSink {
    /// Queues `(key, status)` as an endpoint failure.
    ///
    /// # Safety
    /// The worker this came from is alive.
    pub(crate) unsafe fn report(&self, key: EpKey, status: Status) {
        // SAFETY: the caller's promise: the worker, and so its boxed queue, is alive.
        lock(unsafe { &*self.0 }).ep_errors.push_back((key, status));
    }

    /// Whether a failure of `key` is queued and not yet taken.
    ///
    /// # Safety
    /// The worker this came from is alive.
    pub(crate) unsafe fn queued(&self, key: EpKey) -> bool {
        // SAFETY: the caller's promise.
        lock(unsafe { &*self.0 })
            .ep_errors
            .iter()
            .any(|(k, _)| *k == key)
    }
}

/// The argument of one AM id's handler: UCX does not pass the id to the callback.
struct AmArg {
    events: *const EventQueue,
    id: u16,
    /// The shared argument of every id without a handler of its own.
    unowned: bool,
}

struct Orphan {
    raw: *mut c_void,
    _buf: Option<Vec<u8>>,
}

struct WorkerInner {
    raw: sys::ucp_worker_h,
    /// `false` for a worker a host owns ([`Worker::adopt`]): never destroyed here.
    owned: bool,
    /// Boxed so that its address, handed to UCX as callback argument, never moves.
    events: Box<EventQueue>,
    orphans: RefCell<Vec<Orphan>>,
    /// Handler arguments by AM id (boxed: UCX keeps their addresses).
    am_args: RefCell<std::collections::HashMap<u16, Box<AmArg>>>,
    /// The argument of the handler on every id without one of its own, once
    /// [`Worker::guard_am_ids`] has installed it (boxed: UCX keeps its address).
    unowned_arg: RefCell<Option<Box<AmArg>>>,
    /// `None` on an adopted worker (its context is the host's).
    _ctx: Option<Rc<Context>>,
}

/// How long dropping an adopted worker's last handle waits for tagspace's unfinished requests
/// (cancelled first) before it gives up on them (see [`Worker::adopt`]).
pub const ADOPTED_DRAIN_MS: u64 = 1000;

impl WorkerInner {
    /// Leaves a host's worker as tagspace found it: its AM handlers cleared (UCX then drops
    /// what arrives on those ids), its unfinished requests cancelled and waited for, briefly.
    fn hand_back(&mut self) {
        for &id in self.am_args.borrow().keys() {
            // A NULL callback removes the handler (UCX then drops what arrives on the id).
            let _ = set_am_handler_on(self.raw, id, None, ptr::null_mut());
        }
        let orphans = std::mem::take(&mut *self.orphans.borrow_mut());
        for o in &orphans {
            // SAFETY: a live request; cancelling a send or one already done is a no-op.
            unsafe { sys::ucp_request_cancel(self.raw, o.raw) };
        }
        let start = std::time::Instant::now();
        let mut left = orphans;
        while !left.is_empty() && start.elapsed().as_millis() < ADOPTED_DRAIN_MS as u128 {
            // SAFETY: a live worker; the host allows tagspace to progress it (Worker::adopt).
            unsafe { sys::ucp_worker_progress(self.raw) };
            left.retain(|o| !free_if_done(o));
        }
        for o in left {
            // UCX may still write into (or read from) the buffer: release the request (UCX
            // frees it when it ends) and leak the buffer rather than free memory UCX uses.
            // SAFETY: a live request, released once.
            unsafe { sys::ucp_request_free(o.raw) };
            std::mem::forget(o);
        }
    }
}

/// Idle `ucp_worker_progress` calls after which a worker being destroyed is taken to have
/// finished what it could (see `WorkerInner`'s `Drop`).
const WORKER_DRAIN_IDLE_CALLS: u32 = 16;
/// The longest a worker being destroyed is progressed first.
const WORKER_DRAIN_MAX: std::time::Duration = std::time::Duration::from_millis(50);

impl Drop for WorkerInner {
    fn drop(&mut self) {
        if !self.owned {
            self.hand_back();
            return;
        }
        // First UCX finishes what it can: an endpoint force-closed just before (a failed peer's,
        // at shutdown) leaves a lane discard in progress, and UCX 1.22 destroying the worker
        // then frees that discard's progress callback twice (glibc aborts: "double free").
        // Bounded: a worker with nothing left stops after a few idle calls.
        let start = std::time::Instant::now();
        let mut idle = 0;
        while idle < WORKER_DRAIN_IDLE_CALLS && start.elapsed() < WORKER_DRAIN_MAX {
            // SAFETY: the worker is live until destroyed below; its callbacks' state is ours.
            let events = unsafe { sys::ucp_worker_progress(self.raw) };
            idle = if events == 0 { idle + 1 } else { 0 };
        }
        // Orphaned requests still in flight are released (UCX frees them when they finish or
        // when the worker goes); their buffers are dropped only after the worker is destroyed.
        for o in self.orphans.borrow().iter() {
            // SAFETY: a live request, released once.
            unsafe { sys::ucp_request_free(o.raw) };
        }
        // SAFETY: every listener, endpoint and request holds an Rc to this, so none is left.
        unsafe { sys::ucp_worker_destroy(self.raw) };
        // The orphans' buffers are dropped only now, after UCX can no longer touch them.
    }
}

/// A UCP worker (`ucp_worker_h`): a progress engine with its own matching queues.
/// Cloning gives another handle to the same worker.
#[derive(Clone)]
pub struct Worker {
    inner: Rc<WorkerInner>,
}

/// What a non-blocking operation did when it was started.
pub enum Started<T> {
    /// Finished at once; here is the result.
    Done(T),
    /// In flight.
    Pending(Request),
}

impl Worker {
    /// A worker on its own context.
    pub fn new(cfg: &Config) -> Result<Worker, UcxError> {
        Worker::on(Context::new(cfg)?)
    }

    /// A worker a host created and owns (ucxx's, a C++ engine's): tagspace uses it but never
    /// destroys it. When the last handle goes, tagspace removes the AM handlers it set and
    /// cancels its unfinished requests, progressing the worker for at most
    /// [`ADOPTED_DRAIN_MS`] until they end (a request still unfinished then is released to
    /// UCX and its buffer leaked, never freed under UCX). Endpoint errors reach tagspace only
    /// through [`report_ep_error`](Self::report_ep_error): the host's endpoints carry the
    /// host's error handler.
    ///
    /// # Safety
    /// `raw` must be a live worker whose context has `UCP_FEATURE_TAG` and `UCP_FEATURE_AM`,
    /// and must outlive every handle made from it (the host destroys it only after dropping
    /// the tagspace node). Calls on it must follow its thread mode: on a
    /// `UCS_THREAD_MODE_MULTI` worker the host may progress it from any thread; on a SINGLE or
    /// SERIALIZED one, only from the thread that uses this handle.
    pub unsafe fn adopt(raw: sys::ucp_worker_h) -> Worker {
        Worker::wrap(raw, None)
    }

    /// A handle on `raw`: owned (destroyed with the last handle) when it comes with its
    /// context, a host's otherwise.
    fn wrap(raw: sys::ucp_worker_h, ctx: Option<Rc<Context>>) -> Worker {
        Worker {
            inner: Rc::new(WorkerInner {
                raw,
                owned: ctx.is_some(),
                events: Box::new(Mutex::new(Events::default())),
                orphans: RefCell::new(Vec::new()),
                am_args: RefCell::new(std::collections::HashMap::new()),
                unowned_arg: RefCell::new(None),
                _ctx: ctx,
            }),
        }
    }

    /// Whether this is the last handle: no listener, endpoint, request or held message made
    /// from it is left, and dropping it destroys the worker.
    pub fn is_last_handle(&self) -> bool {
        Rc::strong_count(&self.inner) == 1
    }

    /// Whether a host owns this worker ([`adopt`](Self::adopt)).
    pub fn is_adopted(&self) -> bool {
        !self.inner.owned
    }

    /// The worker's thread mode, as UCX reports it.
    pub fn thread_mode(&self) -> Result<ThreadMode, UcxError> {
        // SAFETY: zeroed is a valid "no fields" value for this plain C struct.
        let mut attr: sys::ucp_worker_attr_t = unsafe { std::mem::zeroed() };
        attr.field_mask = sys::ucp_worker_attr_field::UCP_WORKER_ATTR_FIELD_THREAD_MODE.0 as u64;
        // SAFETY: the worker is live; attr is an out-parameter.
        check("ucp_worker_query", unsafe {
            sys::ucp_worker_query(self.raw(), &mut attr)
        })?;
        // Read as the integer UCX wrote: a value a newer UCX adds must not become an invalid
        // Rust enum.
        // SAFETY: the field is a C enum (an `int`), initialised (zeroed, then set by UCX).
        let raw = unsafe { ptr::addr_of!(attr.thread_mode).cast::<u32>().read() };
        Ok(ThreadMode::from_raw(raw))
    }

    /// Tells tagspace that the endpoint `key` failed with `status` (what UCX's error handler
    /// would have reported): the host calls it from its own error handler for endpoints it
    /// owns. Reported through [`take_ep_error`](Self::take_ep_error).
    pub fn report_ep_error(&self, key: EpKey, status: Status) {
        // SAFETY: `self` keeps the worker alive.
        unsafe { self.error_sink().report(key, status) }
    }

    /// A handle that reports endpoint failures into this worker's event queue from any thread
    /// and holds no lock but the queue's own (see [`ErrorSink`]).
    pub(crate) fn error_sink(&self) -> ErrorSink {
        ErrorSink(&*self.inner.events)
    }

    /// Releases parked requests that have finished (done by [`progress`](Self::progress) when
    /// tagspace progresses; call it when a host progresses the worker instead).
    pub fn reap(&self) {
        if !self.inner.orphans.borrow().is_empty() {
            self.reap_orphans();
        }
    }

    /// A worker on `ctx`.
    pub fn on(ctx: Rc<Context>) -> Result<Worker, UcxError> {
        // SAFETY: zeroed is a valid "no fields" value for this plain C struct.
        let mut params: sys::ucp_worker_params_t = unsafe { std::mem::zeroed() };
        params.field_mask =
            sys::ucp_worker_params_field::UCP_WORKER_PARAM_FIELD_THREAD_MODE.0 as u64;
        params.thread_mode = sys::ucs_thread_mode_t::UCS_THREAD_MODE_SINGLE;
        let mut raw: sys::ucp_worker_h = ptr::null_mut();
        // SAFETY: ctx is live (we keep an Rc); raw is an out-pointer.
        check("ucp_worker_create", unsafe {
            sys::ucp_worker_create(ctx.raw, &params, &mut raw)
        })?;
        Ok(Worker::wrap(raw, Some(ctx)))
    }

    fn raw(&self) -> sys::ucp_worker_h {
        self.inner.raw
    }

    /// The raw handle, for code that calls `ucx1-sys` directly (benchmark baselines, legacy
    /// libraries). It stays owned by this worker: never destroy it.
    pub fn as_raw(&self) -> sys::ucp_worker_h {
        self.inner.raw
    }

    fn events_arg(&self) -> *mut c_void {
        let p: *const EventQueue = &*self.inner.events;
        p as *mut c_void
    }

    /// One `ucp_worker_progress` call; non-zero if anything happened.
    pub fn progress(&self) -> u32 {
        // SAFETY: the worker is live; callbacks only touch `events` through RefCell, and no
        // borrow of it is held across this call.
        let n = unsafe { sys::ucp_worker_progress(self.raw()) };
        if n == 0 && !self.inner.orphans.borrow().is_empty() {
            self.reap_orphans();
        }
        n
    }

    fn reap_orphans(&self) {
        self.inner.orphans.borrow_mut().retain(|o| !free_if_done(o));
    }

    /// Progresses until a call makes no progress. Unbounded while a peer keeps sending: use
    /// [`progress_up_to`](Self::progress_up_to) where the time per call must be bounded.
    pub fn progress_all(&self) -> u32 {
        self.progress_up_to(u32::MAX)
    }

    /// Progresses until a call makes no progress, or `calls` calls have been made.
    pub fn progress_up_to(&self, calls: u32) -> u32 {
        let mut total = 0;
        for _ in 0..calls {
            let n = self.progress();
            if n == 0 {
                break;
            }
            total += n;
        }
        total
    }

    /// The worker's event file descriptor, for `poll`/`epoll` (blocking progress).
    pub fn event_fd(&self) -> Result<i32, UcxError> {
        let mut fd = -1;
        // SAFETY: out-pointer.
        check("ucp_worker_get_efd", unsafe {
            sys::ucp_worker_get_efd(self.raw(), &mut fd)
        })?;
        Ok(fd)
    }

    /// Blocks until the worker has something to do or `timeout_ms` passes. Returns without
    /// sleeping when events are already pending (UCX says `BUSY` on arm). The caller then
    /// calls [`progress`](Self::progress).
    pub fn wait(&self, timeout_ms: i32) -> Result<(), UcxError> {
        let fd = self.event_fd()?;
        // SAFETY: the worker is live.
        let s = Status::from_sys(unsafe { sys::ucp_worker_arm(self.raw()) });
        if s == Status::BUSY {
            return Ok(());
        }
        if !s.is_ok() {
            return Err(UcxError {
                op: "ucp_worker_arm",
                status: s,
            });
        }
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        Ok(())
    }

    /// This worker's address, for [`Endpoint::connect_address`].
    pub fn address(&self) -> Result<Vec<u8>, UcxError> {
        let mut addr: *mut sys::ucp_address_t = ptr::null_mut();
        let mut len: sys::size_t = 0;
        // SAFETY: out-pointers; released below.
        check("ucp_worker_get_address", unsafe {
            sys::ucp_worker_get_address(self.raw(), &mut addr, &mut len)
        })?;
        // SAFETY: UCX gave `len` readable bytes at `addr`.
        let v = unsafe { std::slice::from_raw_parts(addr as *const u8, len as usize) }.to_vec();
        // SAFETY: releases what get_address allocated, once.
        unsafe { sys::ucp_worker_release_address(self.raw(), addr) };
        Ok(v)
    }

    /// Routes Active Messages with UCX id `id` to [`take_am`](Self::take_am).
    pub fn set_am_handler(&self, id: u16) -> Result<(), UcxError> {
        let events: *const EventQueue = &*self.inner.events;
        let mut args = self.inner.am_args.borrow_mut();
        let arg = args.entry(id).or_insert_with(|| {
            Box::new(AmArg {
                events,
                id,
                unowned: false,
            })
        });
        let ap: *const AmArg = &**arg;
        // The arg box lives as long as the worker (never removed from `am_args`).
        self.am_handler(id, Some(am_callback), ap as *mut c_void)
    }

    /// Stops handling `id` as its own: back to the unowned handler after
    /// [`guard_am_ids`](Self::guard_am_ids), else no handler (UCX then drops such messages,
    /// logging a warning).
    pub fn clear_am_handler(&self, id: u16) -> Result<(), UcxError> {
        match self.inner.unowned_arg.borrow().as_deref() {
            Some(arg) => {
                let ap: *const AmArg = arg;
                self.am_handler(id, Some(am_callback), ap as *mut c_void)
            }
            None => self.am_handler(id, None, ptr::null_mut()),
        }
    }

    /// Gives every AM id (0..=65535) a handler: ids without one of their own get a shared
    /// handler that reports them as [`AmMessage::unowned`] without copying the data.
    ///
    /// UCX 1.12 and 1.13 grow the worker's handler table to make room for an id and initialise
    /// only that id's slot (`ucp_worker_set_am_handler_common` initialises `id`, not `i`, in its
    /// loop); an AM that arrives on another slot below the table's capacity calls a garbage
    /// pointer — one 8-byte AM from any peer on id 0 crashed a node whose only handler was on
    /// 256. Reworked upstream in 1.17 (PRs #9415, #9525). Registering the highest id first
    /// sizes the table once for every id an AM header can carry (a `u16`); filling every slot
    /// then leaves none uninitialised. Cost: 65 536 slots of UCX's table (about 1.5 MiB per
    /// worker) and one call per id, once. Call it before any other handler is set (ids with a
    /// handler of their own keep it).
    pub fn guard_am_ids(&self) -> Result<(), UcxError> {
        let arg = Box::new(AmArg {
            events: &*self.inner.events,
            id: 0,
            unowned: true,
        });
        let ap: *const AmArg = &*arg;
        *self.inner.unowned_arg.borrow_mut() = Some(arg);
        let owned: std::collections::HashSet<u16> =
            self.inner.am_args.borrow().keys().copied().collect();
        for id in std::iter::once(u16::MAX).chain(0..u16::MAX) {
            if !owned.contains(&id) {
                // The box is kept in `unowned_arg` for the worker's life.
                self.am_handler(id, Some(am_callback), ap as *mut c_void)?;
            }
        }
        Ok(())
    }

    fn am_handler(
        &self,
        id: u16,
        cb: sys::ucp_am_recv_callback_t,
        arg: *mut c_void,
    ) -> Result<(), UcxError> {
        set_am_handler_on(self.raw(), id, cb, arg)
    }

    /// The next Active Message received on a handled id.
    pub fn take_am(&self) -> Option<AmMessage> {
        lock(&self.inner.events).am.pop_front()
    }

    /// Whether a completion waits to be taken ([`take_completed`](Self::take_completed)).
    pub fn has_completed(&self) -> bool {
        !lock(&self.inner.events).done.is_empty()
    }

    /// Moves the addresses of the requests completed since the last call into `into` (see
    /// [`Request::addr`]): only requests started to report it — the crate's `*_woken` calls,
    /// which a node makes for its operations, so that it tests only the requests that finished
    /// (D6); requests a caller starts with the public calls report nothing (nobody would empty
    /// the queue). Callbacks run on whichever thread progresses the worker (the queue is locked
    /// for one push). An address may name a request already dropped, or a later one at the same
    /// address: a caller tests the request it holds, which only costs a look.
    pub fn take_completed(&self, into: &mut Vec<usize>) {
        let mut ev = lock(&self.inner.events);
        if ev.done.is_empty() {
            return;
        }
        if into.is_empty() {
            std::mem::swap(into, &mut ev.done);
        } else {
            into.append(&mut ev.done);
        }
    }

    /// The next endpoint error reported by UCX's peer error handling.
    pub fn take_ep_error(&self) -> Option<(EpKey, UcxError)> {
        lock(&self.inner.events)
            .ep_errors
            .pop_front()
            .map(|(k, s)| {
                (
                    k,
                    UcxError {
                        op: "endpoint",
                        status: s,
                    },
                )
            })
    }

    /// Posts a tag receive into `buf`'s spare capacity (`buf` is cleared first): it matches a
    /// message whose tag `t` has `t & mask == tag & mask`.
    pub fn tag_recv(&self, tag: u64, mask: u64, buf: Vec<u8>) -> Result<Request, UcxError> {
        self.tag_recv_with(tag, mask, buf, Wake::No)
    }

    /// [`tag_recv`](Self::tag_recv) whose completion is reported ([`take_completed`]).
    ///
    /// [`take_completed`]: Self::take_completed
    pub(crate) fn tag_recv_woken(
        &self,
        tag: u64,
        mask: u64,
        buf: Vec<u8>,
    ) -> Result<Request, UcxError> {
        self.tag_recv_with(tag, mask, buf, Wake::Recv)
    }

    fn tag_recv_with(
        &self,
        tag: u64,
        mask: u64,
        mut buf: Vec<u8>,
        wake: Wake,
    ) -> Result<Request, UcxError> {
        buf.clear();
        // SAFETY: the buffer's capacity is writable and is kept alive by the Request (or an
        // orphan) until UCX completes the receive.
        let raw = unsafe { self.post_recv(buf.as_mut_ptr(), buf.capacity(), tag, mask, wake)? };
        Ok(Request::new(self, raw, Kind::Recv, Some(buf)))
    }

    /// `ucp_tag_recv_nbx` with `NO_IMM_CMPL`: the request (always one, so that the message's
    /// length can be read from it).
    ///
    /// # Safety
    /// `len` bytes at `ptr` are writable until the request completes or is cancelled.
    unsafe fn post_recv(
        &self,
        ptr: *mut u8,
        len: usize,
        tag: u64,
        mask: u64,
        wake: Wake,
    ) -> Result<*mut c_void, UcxError> {
        let param = self.param(
            sys::ucp_op_attr_t::UCP_OP_ATTR_FLAG_NO_IMM_CMPL as u32,
            wake,
        );
        // SAFETY: the caller's promise about the buffer; the worker is live.
        let p = unsafe {
            sys::ucp_tag_recv_nbx(self.raw(), ptr as *mut c_void, len as _, tag, mask, &param)
        };
        started(p, "ucp_tag_recv_nbx")?.ok_or(UcxError {
            op: "ucp_tag_recv_nbx (completed without a request)",
            status: Status::NO_MESSAGE,
        })
    }

    /// `ucp_tag_msg_recv_nbx` of a message taken by a probe: `None` if it completed at once
    /// (allowed unless `no_imm`), else its request.
    ///
    /// # Safety
    /// `msg` came from `ucp_tag_probe_nb` with remove and is received only here; `len` bytes at
    /// `ptr` are writable until the request completes.
    unsafe fn msg_recv(
        &self,
        ptr: *mut u8,
        len: usize,
        msg: sys::ucp_tag_message_h,
        no_imm: bool,
        wake: Wake,
    ) -> Result<Option<*mut c_void>, UcxError> {
        let flags = if no_imm {
            sys::ucp_op_attr_t::UCP_OP_ATTR_FLAG_NO_IMM_CMPL as u32
        } else {
            0
        };
        let param = self.param(flags, wake);
        // SAFETY: the caller's promises about `msg` and the buffer; the worker is live.
        let p = unsafe {
            sys::ucp_tag_msg_recv_nbx(self.raw(), ptr as *mut c_void, len as _, msg, &param)
        };
        let req = started(p, "ucp_tag_msg_recv_nbx")?;
        if no_imm && req.is_none() {
            return Err(UcxError {
                op: "ucp_tag_msg_recv_nbx (completed without a request)",
                status: Status::NO_MESSAGE,
            });
        }
        Ok(req)
    }

    /// Receives one message matching `(tag, mask)` into the caller's `buf`, progressing the
    /// worker until it has arrived. The buffer is borrowed for this call only — no request
    /// outlives it, nothing is allocated, and a message already waiting completes without a
    /// UCX request at all — so a caller can receive into its own or pooled memory at raw
    /// libucp's cost (the owned-buffer [`tag_recv`](Self::tag_recv) pays for a `Request`).
    ///
    /// `Ok(info)`: the first `info.len` bytes of `buf` hold the message. A longer message fails
    /// with `UCS_ERR_MESSAGE_TRUNCATED`. With `timeout`, a receive still unmatched at the
    /// deadline is cancelled and fails with `UCS_ERR_TIMED_OUT`; one already matched (a
    /// rendezvous in progress) is waited for, because UCX may be writing into `buf`. A
    /// rendezvous whose sender dies mid-transfer ends only when UCX fails it: where that
    /// matters, use the node's `recv_from` (owned buffers, peer-aware).
    pub fn tag_recv_into(
        &self,
        tag: u64,
        mask: u64,
        buf: &mut [u8],
        timeout: Option<std::time::Duration>,
    ) -> Result<TagInfo, UcxError> {
        // SAFETY: zeroed is a valid value for this plain C struct.
        let mut info: sys::ucp_tag_recv_info_t = unsafe { std::mem::zeroed() };
        // A message already waiting is taken by an exact probe, which reports its length, and
        // received with at most one request (none for an eager message). A plain receive of
        // a waiting message completes at once *without* its length before UCX 1.16
        // (openucx/ucx#9425; `recv_info` is filled since #9440), and on 1.22 the `recv_info`
        // way measured no faster than this one (bench (a) "buf", 8 B over shared memory).
        // SAFETY: remove = 1: the message is ours and is received with msg_recv below.
        let msg = unsafe { sys::ucp_tag_probe_nb(self.raw(), tag, mask, 1, &mut info) };
        if !msg.is_null() {
            let found = TagInfo::from(&info);
            // SAFETY: `msg` came from the probe with remove; `buf` stays borrowed until the
            // request (if any) completes below.
            return match unsafe {
                self.msg_recv(buf.as_mut_ptr(), buf.len(), msg, false, Wake::No)?
            } {
                None => Ok(found),
                Some(req) => self.wait_request(req, "receive").map(|()| found),
            };
        }
        // Nothing waits. With a request (NO_IMM_CMPL), a message that another thread's progress
        // delivers meanwhile still reports its length.
        // SAFETY: `buf` is writable for its length and stays borrowed until UCX has completed
        // (or cancelled) the receive below.
        let req = unsafe { self.post_recv(buf.as_mut_ptr(), buf.len(), tag, mask, Wake::No)? };
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        let mut cancelled = false;
        let mut spins = 0u32;
        loop {
            // SAFETY: `req` is a live tag-receive request until freed below.
            let s = Status::from_sys(unsafe { sys::ucp_tag_recv_request_test(req, &mut info) });
            if s != Status::INPROGRESS {
                // SAFETY: completed: freed exactly once; UCX no longer touches `buf`.
                unsafe { sys::ucp_request_free(req) };
                return match s {
                    Status::OK => Ok(TagInfo::from(&info)),
                    Status::CANCELED if cancelled => Err(UcxError {
                        op: "ucp_tag_recv_nbx (no message before the deadline)",
                        status: Status::TIMED_OUT,
                    }),
                    status => Err(UcxError {
                        op: "receive",
                        status,
                    }),
                };
            }
            // SAFETY: the worker is live; the raw call avoids `progress`'s orphan check.
            unsafe { sys::ucp_worker_progress(self.raw()) };
            spins = spins.wrapping_add(1);
            if !cancelled
                && spins.is_multiple_of(1024)
                && deadline.is_some_and(|d| std::time::Instant::now() >= d)
            {
                // SAFETY: both live; an unmatched receive then completes with CANCELED.
                unsafe { sys::ucp_request_cancel(self.raw(), req) };
                cancelled = true;
            }
        }
    }

    /// Progresses until `req` completes, then frees it: `Ok` or UCX's error status.
    fn wait_request(&self, req: *mut c_void, op: &'static str) -> Result<(), UcxError> {
        loop {
            // SAFETY: `req` is live until freed below.
            let status = Status::from_sys(unsafe { sys::ucp_request_check_status(req) });
            if status != Status::INPROGRESS {
                // SAFETY: completed: freed exactly once.
                unsafe { sys::ucp_request_free(req) };
                return if status.is_ok() {
                    Ok(())
                } else {
                    Err(UcxError { op, status })
                };
            }
            // SAFETY: the worker is live (the raw call skips `progress`'s orphan check).
            unsafe { sys::ucp_worker_progress(self.raw()) };
        }
    }

    /// Looks at the oldest unexpected message matching `(tag, mask)` without taking it.
    pub fn tag_probe(&self, tag: u64, mask: u64) -> Option<TagInfo> {
        // SAFETY: zeroed is a valid value for this plain C struct.
        let mut info: sys::ucp_tag_recv_info_t = unsafe { std::mem::zeroed() };
        // SAFETY: remove = 0 leaves the message queued; info is an out-pointer.
        let msg = unsafe { sys::ucp_tag_probe_nb(self.raw(), tag, mask, 0, &mut info) };
        (!msg.is_null()).then(|| TagInfo::from(&info))
    }

    /// Takes the oldest unexpected message matching `(tag, mask)` and starts receiving it. A
    /// message longer than `max_len` is received into a `max_len` buffer and completes with
    /// `UCS_ERR_MESSAGE_TRUNCATED`: a peer's length never sizes an allocation beyond the limit.
    pub fn tag_probe_take(
        &self,
        tag: u64,
        mask: u64,
        max_len: usize,
    ) -> Result<Option<(TagInfo, Request)>, UcxError> {
        self.tag_probe_take_with(tag, mask, max_len, Wake::No)
    }

    /// [`tag_probe_take`](Self::tag_probe_take) whose receive reports its completion.
    pub(crate) fn tag_probe_take_woken(
        &self,
        tag: u64,
        mask: u64,
        max_len: usize,
    ) -> Result<Option<(TagInfo, Request)>, UcxError> {
        self.tag_probe_take_with(tag, mask, max_len, Wake::Recv)
    }

    fn tag_probe_take_with(
        &self,
        tag: u64,
        mask: u64,
        max_len: usize,
        wake: Wake,
    ) -> Result<Option<(TagInfo, Request)>, UcxError> {
        // SAFETY: zeroed is a valid value for this plain C struct.
        let mut info: sys::ucp_tag_recv_info_t = unsafe { std::mem::zeroed() };
        // SAFETY: remove = 1: the message is ours and must be received with msg_recv below.
        let msg = unsafe { sys::ucp_tag_probe_nb(self.raw(), tag, mask, 1, &mut info) };
        if msg.is_null() {
            return Ok(None);
        }
        let info = TagInfo::from(&info);
        let mut buf = Vec::with_capacity(info.len.min(max_len));
        // SAFETY: msg came from probe with remove; the buffer lives in the Request.
        match unsafe { self.msg_recv(buf.as_mut_ptr(), buf.capacity(), msg, true, wake)? } {
            Some(raw) => Ok(Some((info, Request::new(self, raw, Kind::Recv, Some(buf))))),
            // Not reached: with NO_IMM_CMPL, `msg_recv` gives a request or an error.
            None => Err(UcxError {
                op: "ucp_tag_msg_recv_nbx (completed without a request)",
                status: Status::NO_MESSAGE,
            }),
        }
    }

    /// Takes the oldest unexpected message matching `(tag, mask)` out of UCX's queue without
    /// receiving it yet: what waited stays where UCX keeps it (an eager message's data, a
    /// rendezvous message's header only), no other receive can match it any more, and
    /// [`Message::recv`] or [`Message::recv_into`] receives it later into a buffer of the
    /// receiver's choosing.
    pub fn tag_probe_hold(&self, tag: u64, mask: u64) -> Option<Message> {
        // SAFETY: zeroed is a valid value for this plain C struct.
        let mut info: sys::ucp_tag_recv_info_t = unsafe { std::mem::zeroed() };
        // SAFETY: remove = 1: the message is ours; `Message` receives it exactly once.
        let raw = unsafe { sys::ucp_tag_probe_nb(self.raw(), tag, mask, 1, &mut info) };
        (!raw.is_null()).then(|| Message {
            raw,
            info: TagInfo::from(&info),
            worker: self.clone(),
        })
    }

    /// A listener on `addr` (port 0: any free port; see [`Listener::local_addr`]).
    pub fn listen(&self, addr: SocketAddr) -> Result<Listener, UcxError> {
        let sa = SockAddr::from(addr);
        let queue: Box<RefCell<VecDeque<usize>>> = Box::default();
        // SAFETY: zeroed is a valid "no fields" value for this plain C struct.
        let mut p: sys::ucp_listener_params_t = unsafe { std::mem::zeroed() };
        p.field_mask = (sys::ucp_listener_params_field::UCP_LISTENER_PARAM_FIELD_SOCK_ADDR
            | sys::ucp_listener_params_field::UCP_LISTENER_PARAM_FIELD_CONN_HANDLER)
            .0 as u64;
        p.sockaddr = sa.as_ucs();
        p.conn_handler.cb = Some(conn_callback);
        let qp: *const RefCell<VecDeque<usize>> = &*queue;
        p.conn_handler.arg = qp as *mut c_void;
        let mut raw: sys::ucp_listener_h = ptr::null_mut();
        // SAFETY: the sockaddr outlives the call; the queue box outlives the listener.
        check("ucp_listener_create", unsafe {
            sys::ucp_listener_create(self.raw(), &p, &mut raw)
        })?;
        Ok(Listener {
            raw,
            queue,
            worker: self.clone(),
        })
    }
}

/// A message taken out of UCX's unexpected queue and not received yet
/// ([`Worker::tag_probe_hold`]). Dropped unreceived, it is received into a few bytes and
/// discarded (UCX then lets a rendezvous sender go).
pub struct Message {
    raw: sys::ucp_tag_message_h,
    info: TagInfo,
    worker: Worker,
}

impl Message {
    /// Its tag and length.
    pub fn info(&self) -> TagInfo {
        self.info
    }

    fn take_raw(&mut self) -> sys::ucp_tag_message_h {
        std::mem::replace(&mut self.raw, ptr::null_mut())
    }

    /// Receives it into a buffer of at most `max_len` bytes: a longer message completes with
    /// `UCS_ERR_MESSAGE_TRUNCATED`, as a posted receive would.
    pub fn recv(self, max_len: usize) -> Result<Request, UcxError> {
        self.recv_with(max_len, Wake::No)
    }

    /// [`recv`](Self::recv) whose completion is reported ([`Worker::take_completed`]).
    pub(crate) fn recv_woken(self, max_len: usize) -> Result<Request, UcxError> {
        self.recv_with(max_len, Wake::Recv)
    }

    fn recv_with(mut self, max_len: usize, wake: Wake) -> Result<Request, UcxError> {
        let raw = self.take_raw();
        let mut buf = Vec::with_capacity(self.info.len.min(max_len));
        // SAFETY: `raw` came from a probe with remove and is received once; the buffer lives
        // in the Request.
        match unsafe { (self.worker).msg_recv(buf.as_mut_ptr(), buf.capacity(), raw, true, wake)? }
        {
            Some(req) => Ok(Request::new(&self.worker, req, Kind::Recv, Some(buf))),
            None => Err(UcxError {
                op: "ucp_tag_msg_recv_nbx (completed without a request)",
                status: Status::NO_MESSAGE,
            }),
        }
    }

    /// Receives it into the caller's `buf`, progressing the worker until it is in (a
    /// rendezvous transfer takes that long): its tag and length, or
    /// `UCS_ERR_MESSAGE_TRUNCATED` if it is longer than `buf` (it is consumed).
    pub fn recv_into(mut self, buf: &mut [u8]) -> Result<TagInfo, UcxError> {
        let raw = self.take_raw();
        let info = self.info;
        // SAFETY: `raw` came from a probe with remove and is received once; `buf` stays
        // borrowed until the request (if any) completes below.
        match unsafe { (self.worker).msg_recv(buf.as_mut_ptr(), buf.len(), raw, false, Wake::No)? }
        {
            None if info.len > buf.len() => Err(UcxError {
                op: "receive",
                status: Status::MESSAGE_TRUNCATED,
            }),
            None => Ok(info),
            Some(req) => self.worker.wait_request(req, "receive").map(|()| info),
        }
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        let raw = self.take_raw();
        if raw.is_null() {
            return;
        }
        let mut buf: Vec<u8> = Vec::with_capacity(64);
        // SAFETY: `raw` came from a probe with remove and is received once, into a buffer the
        // Request keeps (parked on the worker when dropped unfinished).
        if let Ok(Some(req)) =
            unsafe { (self.worker).msg_recv(buf.as_mut_ptr(), buf.capacity(), raw, true, Wake::No) }
        {
            drop(Request::new(&self.worker, req, Kind::Recv, Some(buf)));
        }
    }
}

/// A worker's thread mode (`ucs_thread_mode_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadMode {
    /// `UCS_THREAD_MODE_SINGLE`: one thread only.
    Single,
    /// `UCS_THREAD_MODE_SERIALIZED`: any thread, one at a time.
    Serialized,
    /// `UCS_THREAD_MODE_MULTI`: any threads at once (UCX locks the worker).
    Multi,
    /// A value this build does not know.
    Other(u32),
}

impl ThreadMode {
    fn from_raw(v: u32) -> ThreadMode {
        match v {
            0 => ThreadMode::Single,
            1 => ThreadMode::Serialized,
            2 => ThreadMode::Multi,
            v => ThreadMode::Other(v),
        }
    }
}

/// Tag, length and sender of a message (from a probe or a completed receive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TagInfo {
    /// The sender's tag.
    pub tag: u64,
    /// The message length in bytes.
    pub len: usize,
}

impl From<&sys::ucp_tag_recv_info_t> for TagInfo {
    fn from(i: &sys::ucp_tag_recv_info_t) -> Self {
        TagInfo {
            tag: i.sender_tag,
            len: i.length as usize,
        }
    }
}

fn request_param(op_attr_mask: u32) -> sys::ucp_request_param_t {
    // SAFETY: zeroed is a valid "no fields" value for this plain C struct.
    let mut p: sys::ucp_request_param_t = unsafe { std::mem::zeroed() };
    p.op_attr_mask = op_attr_mask;
    p
}

/// Which completion callback a request that becomes a [`Request`] gets (see
/// [`Worker::take_completed`]).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wake {
    /// None: the caller waits for it itself (the borrowed-buffer paths).
    No,
    Send,
    Recv,
}

impl Worker {
    /// `request_param(op_attr_mask)`, with the completion callback `wake` names if this worker
    /// reports completions.
    fn param(&self, op_attr_mask: u32, wake: Wake) -> sys::ucp_request_param_t {
        let mut p = request_param(op_attr_mask);
        if wake == Wake::No {
            return p;
        }
        p.op_attr_mask |= sys::ucp_op_attr_t::UCP_OP_ATTR_FIELD_CALLBACK as u32
            | sys::ucp_op_attr_t::UCP_OP_ATTR_FIELD_USER_DATA as u32;
        if wake == Wake::Send {
            p.cb.send = Some(send_done);
        } else {
            p.cb.recv = Some(recv_done);
        }
        // The events box outlives every callback: a request holds the worker (so its box) alive
        // while it is ours; a parked one is released with `ucp_request_free` before the worker
        // and its box go (`WorkerInner::drop`, `hand_back`), and UCX calls no callback of a
        // released request.
        p.user_data = &*self.inner.events as *const EventQueue as *mut c_void;
        p
    }
}

/// A request completed: its address goes to the worker's queue (the node moves along the
/// operation that holds it, and only that one).
unsafe extern "C" fn send_done(request: *mut c_void, _status: sys::ucs_status_t, arg: *mut c_void) {
    guard("request completion", || {
        // SAFETY: arg is the worker's events box, alive while the worker is.
        let ev = unsafe { &*(arg as *const EventQueue) };
        lock(ev).done.push(request as usize);
    });
}

unsafe extern "C" fn recv_done(
    request: *mut c_void,
    status: sys::ucs_status_t,
    _info: *const sys::ucp_tag_recv_info_t,
    arg: *mut c_void,
) {
    // SAFETY: as `send_done`'s (the same arguments, and the tag info unused).
    unsafe { send_done(request, status, arg) }
}

/// Splits a `ucs_status_ptr_t`: `Ok(None)` = done, `Ok(Some(req))` = in flight.
fn started(p: sys::ucs_status_ptr_t, op: &'static str) -> Result<Option<*mut c_void>, UcxError> {
    let v = p as usize;
    if v == 0 {
        Ok(None)
    } else if v >= (-100isize) as usize {
        // An error code in the pointer (UCS_PTR_IS_ERR); read it without building an enum.
        Err(UcxError {
            op,
            status: Status::from_code(v as isize as i8),
        })
    } else {
        Ok(Some(p))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Send,
    Recv,
    Close,
    Flush,
}

/// An operation in flight. Poll it with [`test`](Self::test) after progressing the worker.
/// Dropping it unfinished cancels a receive and parks the request (and its buffer) on the
/// worker until UCX has finished with them.
pub struct Request {
    raw: *mut c_void,
    kind: Kind,
    buf: Option<Vec<u8>>,
    worker: Worker,
    /// A finished receive's sender tag (also when it failed, e.g. truncated).
    sender_tag: Option<u64>,
}

/// How a request ended.
#[derive(Debug)]
pub enum Completion {
    /// A send or close finished; the send's buffer comes back for reuse.
    Sent(Option<Vec<u8>>),
    /// A receive finished: the sender's tag and the data.
    Received {
        /// The sender's tag.
        tag: u64,
        /// The data (the buffer passed in, its length set).
        data: Vec<u8>,
    },
}

impl Request {
    fn new(w: &Worker, raw: *mut c_void, kind: Kind, buf: Option<Vec<u8>>) -> Request {
        Request {
            raw,
            kind,
            buf,
            worker: w.clone(),
            sender_tag: None,
        }
    }

    /// The sender's tag of a receive that has finished (with data or an error such as
    /// `UCS_ERR_MESSAGE_TRUNCATED`, whose message UCX matched): `None` before, for other
    /// requests, and for a receive cancelled unmatched.
    pub fn sender_tag(&self) -> Option<u64> {
        self.sender_tag
    }

    /// The request's address while it is in flight (what [`Worker::take_completed`] reports
    /// when it completes); 0 once it is spent.
    pub fn addr(&self) -> usize {
        self.raw as usize
    }

    /// `None` while in flight; then the result (the request is spent after that).
    pub fn test(&mut self) -> Option<Result<Completion, UcxError>> {
        if self.raw.is_null() {
            return Some(Err(UcxError {
                op: "request (already completed)",
                status: Status::NO_ELEM,
            }));
        }
        let (status, info) = if self.kind == Kind::Recv {
            // SAFETY: zeroed is a valid value for this plain C struct.
            let mut info: sys::ucp_tag_recv_info_t = unsafe { std::mem::zeroed() };
            // SAFETY: raw is a live tag-receive request.
            let s = unsafe { sys::ucp_tag_recv_request_test(self.raw, &mut info) };
            (Status::from_sys(s), Some(TagInfo::from(&info)))
        } else {
            // SAFETY: raw is a live request.
            (
                Status::from_sys(unsafe { sys::ucp_request_check_status(self.raw) }),
                None,
            )
        };
        if status == Status::INPROGRESS {
            return None;
        }
        if status != Status::CANCELED {
            self.sender_tag = info.map(|i| i.tag);
        }
        // SAFETY: complete: freed once, and raw is cleared so Drop does not free it again.
        unsafe { sys::ucp_request_free(self.raw) };
        self.raw = ptr::null_mut();
        let op = match self.kind {
            Kind::Send => "send",
            Kind::Recv => "receive",
            Kind::Close => "endpoint close",
            Kind::Flush => "endpoint flush",
        };
        if !status.is_ok() {
            return Some(Err(UcxError { op, status }));
        }
        Some(Ok(match (self.kind, info) {
            (Kind::Recv, Some(info)) => {
                let mut data = self.buf.take().unwrap_or_default();
                let n = info.len.min(data.capacity());
                // SAFETY: UCX wrote `info.len` bytes (never more than the capacity it was
                // given) into the spare capacity.
                unsafe { data.set_len(n) };
                Completion::Received {
                    tag: info.tag,
                    data,
                }
            }
            _ => Completion::Sent(self.buf.take()),
        }))
    }

    /// Asks UCX to cancel (receives only; the request then completes with `CANCELED`).
    pub fn cancel(&self) {
        if !self.raw.is_null() {
            // SAFETY: both live.
            unsafe { sys::ucp_request_cancel(self.worker.raw(), self.raw) };
        }
    }

    /// Progresses the worker until this request completes.
    pub fn wait(mut self) -> Result<Completion, UcxError> {
        loop {
            if let Some(r) = self.test() {
                return r;
            }
            self.worker.progress();
        }
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return;
        }
        if self.kind == Kind::Recv {
            self.cancel();
        }
        if self.buf.is_none() {
            // No memory of ours in it (a close or flush): UCX frees it when it finishes.
            // SAFETY: a live request, released once.
            unsafe { sys::ucp_request_free(self.raw) };
            return;
        }
        self.worker.inner.orphans.borrow_mut().push(Orphan {
            raw: self.raw,
            _buf: self.buf.take(),
        });
    }
}

/// A listener (`ucp_listener_h`) accepting connection requests on a socket address.
pub struct Listener {
    raw: sys::ucp_listener_h,
    queue: Box<RefCell<VecDeque<usize>>>,
    worker: Worker,
}

impl Listener {
    /// The address actually bound (the port chosen when 0 was asked).
    pub fn local_addr(&self) -> Result<SocketAddr, UcxError> {
        // SAFETY: zeroed is a valid "no fields" value for this plain C struct.
        let mut attr: sys::ucp_listener_attr_t = unsafe { std::mem::zeroed() };
        attr.field_mask = sys::ucp_listener_attr_field::UCP_LISTENER_ATTR_FIELD_SOCKADDR.0 as u64;
        // SAFETY: out-struct.
        check("ucp_listener_query", unsafe {
            sys::ucp_listener_query(self.raw, &mut attr)
        })?;
        // SAFETY: sockaddr_storage from UCX; the bindgen and libc layouts are the same C type.
        let ss: &libc::sockaddr_storage =
            unsafe { &*(&attr.sockaddr as *const _ as *const libc::sockaddr_storage) };
        SockAddr::to_std(ss).ok_or(UcxError {
            op: "ucp_listener_query (unknown address family)",
            status: Status::INVALID_ADDR,
        })
    }

    /// Accepts the next pending connection request, if any, as an endpoint with peer error
    /// handling.
    pub fn accept(&self) -> Option<Result<Endpoint, UcxError>> {
        let req = self.queue.borrow_mut().pop_front()?;
        // SAFETY: zeroed is a valid "no fields" value for this plain C struct.
        let mut p: sys::ucp_ep_params_t = unsafe { std::mem::zeroed() };
        p.field_mask = sys::ucp_ep_params_field::UCP_EP_PARAM_FIELD_CONN_REQUEST.0 as u64;
        p.conn_request = req as sys::ucp_conn_request_h;
        Some(Endpoint::create(&self.worker, p, "ucp_ep_create (accept)"))
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let pending: Vec<usize> = self.queue.borrow_mut().drain(..).collect();
        for req in pending {
            // SAFETY: a request we were given and neither accepted nor rejected.
            unsafe { sys::ucp_listener_reject(self.raw, req as sys::ucp_conn_request_h) };
        }
        // SAFETY: created by ucp_listener_create, destroyed once.
        unsafe { sys::ucp_listener_destroy(self.raw) };
    }
}

/// An endpoint (`ucp_ep_h`) to a peer worker, with UCX's peer error handling: a failed peer is
/// reported through [`Worker::take_ep_error`] and fails the endpoint's operations.
pub struct Endpoint {
    raw: sys::ucp_ep_h,
    closed: Cell<bool>,
    /// A host's endpoint ([`Endpoint::borrow`]): never closed here.
    borrowed: bool,
    worker: Worker,
}

impl Endpoint {
    fn create(
        w: &Worker,
        mut p: sys::ucp_ep_params_t,
        op: &'static str,
    ) -> Result<Endpoint, UcxError> {
        p.field_mask |= (sys::ucp_ep_params_field::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE
            | sys::ucp_ep_params_field::UCP_EP_PARAM_FIELD_ERR_HANDLER)
            .0 as u64;
        p.err_mode = sys::ucp_err_handling_mode_t::UCP_ERR_HANDLING_MODE_PEER;
        p.err_handler.cb = Some(err_callback);
        p.err_handler.arg = w.events_arg();
        let mut raw: sys::ucp_ep_h = ptr::null_mut();
        // SAFETY: params (and what they point to) are valid for the call.
        check(op, unsafe { sys::ucp_ep_create(w.raw(), &p, &mut raw) })?;
        Ok(Endpoint {
            raw,
            closed: Cell::new(false),
            borrowed: false,
            worker: w.clone(),
        })
    }

    /// An endpoint a host created and owns, on worker `w`: tagspace sends on it but never
    /// closes it ([`close`](Self::close) and dropping do nothing to it). It has the host's
    /// error handler, not tagspace's: the host reports its failure
    /// ([`Worker::report_ep_error`]).
    ///
    /// # Safety
    /// `raw` must be a live endpoint of `w`'s worker, and stay live until this value (and
    /// every request on it that tagspace still waits for) is gone — for a `tagspace` node,
    /// until `detach` or the node's drop.
    pub unsafe fn borrow(w: &Worker, raw: sys::ucp_ep_h) -> Endpoint {
        Endpoint {
            raw,
            closed: Cell::new(false),
            borrowed: true,
            worker: w.clone(),
        }
    }

    /// Whether a host owns this endpoint ([`borrow`](Self::borrow)).
    pub fn is_borrowed(&self) -> bool {
        self.borrowed
    }

    /// Connects to a listener at `addr` (client-server mode).
    pub fn connect(w: &Worker, addr: SocketAddr) -> Result<Endpoint, UcxError> {
        let sa = SockAddr::from(addr);
        // SAFETY: zeroed is a valid "no fields" value for this plain C struct.
        let mut p: sys::ucp_ep_params_t = unsafe { std::mem::zeroed() };
        p.field_mask = (sys::ucp_ep_params_field::UCP_EP_PARAM_FIELD_FLAGS
            | sys::ucp_ep_params_field::UCP_EP_PARAM_FIELD_SOCK_ADDR)
            .0 as u64;
        p.flags = sys::ucp_ep_params_flags_field::UCP_EP_PARAMS_FLAGS_CLIENT_SERVER.0;
        p.sockaddr = sa.as_ucs();
        Endpoint::create(w, p, "ucp_ep_create (sockaddr)")
    }

    /// Connects to a worker by its address (from [`Worker::address`]).
    ///
    /// # Safety
    /// `address` must be a UCX worker address: UCX parses it without validation, so bytes
    /// from an untrusted peer can make it read out of bounds.
    pub unsafe fn connect_address(w: &Worker, address: &[u8]) -> Result<Endpoint, UcxError> {
        // SAFETY: zeroed is a valid "no fields" value for this plain C struct.
        let mut p: sys::ucp_ep_params_t = unsafe { std::mem::zeroed() };
        p.field_mask = sys::ucp_ep_params_field::UCP_EP_PARAM_FIELD_REMOTE_ADDRESS.0 as u64;
        p.address = address.as_ptr() as *const sys::ucp_address_t;
        Endpoint::create(w, p, "ucp_ep_create (worker address)")
    }

    /// The raw handle, for code that calls `ucx1-sys` directly. It stays owned by this
    /// endpoint: never close it.
    pub fn as_raw(&self) -> sys::ucp_ep_h {
        self.raw
    }

    /// This endpoint's identity (see [`EpKey`]).
    pub fn key(&self) -> EpKey {
        EpKey(self.raw as usize)
    }

    /// Sends `data` with `tag`; the buffer comes back in the completion.
    pub fn tag_send(&self, tag: u64, data: Vec<u8>) -> Result<Started<Vec<u8>>, UcxError> {
        self.tag_send_with(tag, data, Wake::No)
    }

    /// [`tag_send`](Self::tag_send) whose completion is reported ([`Worker::take_completed`]).
    pub(crate) fn tag_send_woken(
        &self,
        tag: u64,
        data: Vec<u8>,
    ) -> Result<Started<Vec<u8>>, UcxError> {
        self.tag_send_with(tag, data, Wake::Send)
    }

    fn tag_send_with(
        &self,
        tag: u64,
        data: Vec<u8>,
        wake: Wake,
    ) -> Result<Started<Vec<u8>>, UcxError> {
        // SAFETY: the buffer lives in the Request (or an orphan) until UCX completes.
        Ok(match unsafe { self.post_send(tag, &data, wake)? } {
            None => Started::Done(data),
            Some(raw) => Started::Pending(Request::new(&self.worker, raw, Kind::Send, Some(data))),
        })
    }

    /// Sends `data` with `tag` from the caller's buffer, progressing the worker until UCX no
    /// longer needs it (at once for a message UCX sends eagerly in place, as raw libucp does):
    /// the borrowed-buffer counterpart of [`tag_send`](Self::tag_send), with no request and
    /// no allocation. A peer failure or a closed endpoint is an `Err` with UCX's status.
    pub fn tag_send_from(&self, tag: u64, data: &[u8]) -> Result<(), UcxError> {
        // SAFETY: `data` stays borrowed until the request (if any) completes below.
        match unsafe { self.post_send(tag, data, Wake::No)? } {
            None => Ok(()),
            Some(req) => self.worker.wait_request(req, "send"),
        }
    }

    /// `ucp_tag_send_nbx`: `None` if it completed at once, else its request.
    ///
    /// # Safety
    /// `data` stays valid (and unchanged) until the request completes.
    unsafe fn post_send(
        &self,
        tag: u64,
        data: &[u8],
        wake: Wake,
    ) -> Result<Option<*mut c_void>, UcxError> {
        let param = self.worker.param(0, wake);
        // SAFETY: the caller's promise about `data`; the endpoint is live.
        let p = unsafe {
            sys::ucp_tag_send_nbx(
                self.raw,
                data.as_ptr() as *const c_void,
                data.len() as sys::size_t,
                tag,
                &param,
            )
        };
        started(p, "ucp_tag_send_nbx")
    }

    /// Sends an Active Message `id` (eagerly, so that the receiver gets it whole in its
    /// callback, and with a reply endpoint, so that it knows which endpoint it came from).
    pub fn am_send(&self, id: u16, data: Vec<u8>) -> Result<Started<Vec<u8>>, UcxError> {
        self.am_send_with(id, data, Wake::No)
    }

    /// [`am_send`](Self::am_send) whose completion is reported ([`Worker::take_completed`]).
    pub(crate) fn am_send_woken(
        &self,
        id: u16,
        data: Vec<u8>,
    ) -> Result<Started<Vec<u8>>, UcxError> {
        self.am_send_with(id, data, Wake::Send)
    }

    fn am_send_with(
        &self,
        id: u16,
        data: Vec<u8>,
        wake: Wake,
    ) -> Result<Started<Vec<u8>>, UcxError> {
        let mut param =
            (self.worker).param(sys::ucp_op_attr_t::UCP_OP_ATTR_FIELD_FLAGS as u32, wake);
        param.flags = (sys::ucp_send_am_flags::UCP_AM_SEND_FLAG_EAGER
            | sys::ucp_send_am_flags::UCP_AM_SEND_FLAG_REPLY)
            .0;
        // SAFETY: no header; the buffer lives in the Request until UCX completes.
        let p = unsafe {
            sys::ucp_am_send_nbx(
                self.raw,
                id as u32,
                ptr::null(),
                0,
                data.as_ptr() as *const c_void,
                data.len() as sys::size_t,
                &param,
            )
        };
        Ok(match started(p, "ucp_am_send_nbx")? {
            None => Started::Done(data),
            Some(raw) => Started::Pending(Request::new(&self.worker, raw, Kind::Send, Some(data))),
        })
    }

    /// Flushes the endpoint: the returned request (if any) completes once every operation
    /// started on it before has completed remotely — and, on a new endpoint, once its wire-up
    /// has finished. `Started::Done` when there was nothing to wait for.
    ///
    /// tagspace waits for this on every new endpoint before its first send: a send posted while
    /// UCX still uses the temporary wire-up lane is planned for that lane and replayed unchanged
    /// on the final one, which breaks shared memory (openucx/ucx#6872, fixed in UCX 1.15).
    pub fn flush(&self) -> Result<Started<()>, UcxError> {
        let param = request_param(0);
        // SAFETY: raw is a live endpoint; no buffer is involved.
        let p = unsafe { sys::ucp_ep_flush_nbx(self.raw, &param) };
        Ok(match started(p, "ucp_ep_flush_nbx")? {
            None => Started::Done(()),
            Some(raw) => Started::Pending(Request::new(&self.worker, raw, Kind::Flush, None)),
        })
    }

    /// Closes the endpoint: flushing first (orderly), or at once (`force`). The returned
    /// request, if any, completes when UCX is done.
    pub fn close(self, force: bool) -> Option<Request> {
        self.closed.set(true);
        if self.borrowed {
            return None; // the host's to close
        }
        close_ep(&self.worker, self.raw, force)
    }
}

fn close_ep(w: &Worker, raw: sys::ucp_ep_h, force: bool) -> Option<Request> {
    let mut param = request_param(sys::ucp_op_attr_t::UCP_OP_ATTR_FIELD_FLAGS as u32);
    if force {
        param.flags = sys::ucp_ep_close_flags_t::UCP_EP_CLOSE_FLAG_FORCE.0;
    }
    // SAFETY: raw is a live endpoint, closed once (the caller marks it closed).
    let p = unsafe { sys::ucp_ep_close_nbx(raw, &param) };
    match started(p, "ucp_ep_close_nbx") {
        Ok(Some(req)) => Some(Request::new(w, req, Kind::Close, None)),
        _ => None,
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        if !self.closed.get() && !self.borrowed {
            // An unfinished close request parks on the worker (Request's Drop).
            drop(close_ep(&self.worker, self.raw, true));
        }
    }
}

/// Sets (or, with `cb` `None`, removes) the handler of AM id `id` on worker `raw`.
fn set_am_handler_on(
    raw: sys::ucp_worker_h,
    id: u16,
    cb: sys::ucp_am_recv_callback_t,
    arg: *mut c_void,
) -> Result<(), UcxError> {
    // SAFETY: zeroed is a valid "no fields" value for this plain C struct.
    let mut p: sys::ucp_am_handler_param_t = unsafe { std::mem::zeroed() };
    p.field_mask = (sys::ucp_am_handler_param_field::UCP_AM_HANDLER_PARAM_FIELD_ID
        | sys::ucp_am_handler_param_field::UCP_AM_HANDLER_PARAM_FIELD_CB
        | sys::ucp_am_handler_param_field::UCP_AM_HANDLER_PARAM_FIELD_ARG
        | sys::ucp_am_handler_param_field::UCP_AM_HANDLER_PARAM_FIELD_FLAGS)
        .0 as u64;
    p.id = id as u32;
    p.flags = sys::ucp_am_cb_flags::UCP_AM_FLAG_WHOLE_MSG.0;
    p.cb = cb;
    p.arg = arg;
    // SAFETY: `raw` is a live worker; the caller keeps `arg` alive as long as the handler is
    // set. On a multi-threaded worker UCX takes its lock, so once this returns no callback
    // with a previous argument is running.
    check("ucp_worker_set_am_recv_handler", unsafe {
        sys::ucp_worker_set_am_recv_handler(raw, &p)
    })
}

/// Frees `o`'s request if UCX has finished it (its buffer then drops with it); `false` if it
/// is still in progress.
fn free_if_done(o: &Orphan) -> bool {
    // SAFETY: o.raw is a request not yet freed.
    let s = Status::from_sys(unsafe { sys::ucp_request_check_status(o.raw) });
    if s == Status::INPROGRESS {
        return false;
    }
    // SAFETY: complete: freed once.
    unsafe { sys::ucp_request_free(o.raw) };
    true
}

/// A socket address in C layout, valid as long as this value.
struct SockAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl SockAddr {
    fn as_ucs(&self) -> sys::ucs_sock_addr_t {
        sys::ucs_sock_addr_t {
            addr: &self.storage as *const _ as *const sys::sockaddr,
            addrlen: self.len as sys::socklen_t,
        }
    }

    fn to_std(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
        match ss.ss_family as i32 {
            libc::AF_INET => {
                // SAFETY: the family says this is a sockaddr_in.
                let a: &libc::sockaddr_in =
                    unsafe { &*(ss as *const _ as *const libc::sockaddr_in) };
                let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
                Some(SocketAddr::from((ip, u16::from_be(a.sin_port))))
            }
            libc::AF_INET6 => {
                // SAFETY: the family says this is a sockaddr_in6.
                let a: &libc::sockaddr_in6 =
                    unsafe { &*(ss as *const _ as *const libc::sockaddr_in6) };
                let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
                Some(SocketAddr::from((ip, u16::from_be(a.sin6_port))))
            }
            _ => None,
        }
    }
}

impl From<SocketAddr> for SockAddr {
    fn from(a: SocketAddr) -> Self {
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        let len = match a {
            SocketAddr::V4(v4) => {
                // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
                let s: &mut libc::sockaddr_in =
                    unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in) };
                s.sin_family = libc::AF_INET as libc::sa_family_t;
                s.sin_port = v4.port().to_be();
                s.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
                std::mem::size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(v6) => {
                // SAFETY: as above, for sockaddr_in6.
                let s: &mut libc::sockaddr_in6 =
                    unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in6) };
                s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                s.sin6_port = v6.port().to_be();
                s.sin6_addr.s6_addr = v6.ip().octets();
                std::mem::size_of::<libc::sockaddr_in6>()
            }
        };
        SockAddr {
            storage,
            len: len as libc::socklen_t,
        }
    }
}

unsafe extern "C" fn conn_callback(req: sys::ucp_conn_request_h, arg: *mut c_void) {
    guard("listener", || {
        // SAFETY: arg is the listener's queue box, alive while the listener is.
        let q = unsafe { &*(arg as *const RefCell<VecDeque<usize>>) };
        q.borrow_mut().push_back(req as usize);
    });
}

unsafe extern "C" fn err_callback(arg: *mut c_void, ep: sys::ucp_ep_h, status: sys::ucs_status_t) {
    guard("endpoint error", || {
        // SAFETY: arg is the worker's events box, alive while the worker is.
        let ev = unsafe { &*(arg as *const EventQueue) };
        lock(ev)
            .ep_errors
            .push_back((EpKey(ep as usize), Status::from_sys(status)));
    });
}

unsafe extern "C" fn am_callback(
    arg: *mut c_void,
    _header: *const c_void,
    _header_length: sys::size_t,
    data: *mut c_void,
    length: sys::size_t,
    param: *const sys::ucp_am_recv_param_t,
) -> sys::ucs_status_t {
    guard("active message", || {
        // SAFETY: UCX passes a valid param; arg is this id's AmArg box, kept by the worker.
        let (p, a) = unsafe { (&*param, &*(arg as *const AmArg)) };
        // SAFETY: the worker's events box outlives every handler registration.
        let ev = unsafe { &*a.events };
        let rndv = p.recv_attr & sys::ucp_am_recv_attr_t::UCP_AM_RECV_ATTR_FLAG_RNDV as u64 != 0;
        let reply =
            p.recv_attr & sys::ucp_am_recv_attr_t::UCP_AM_RECV_ATTR_FIELD_REPLY_EP as u64 != 0;
        let bytes = if rndv || data.is_null() || a.unowned {
            Vec::new()
        } else {
            // SAFETY: eager data: `length` bytes valid during the callback.
            unsafe { std::slice::from_raw_parts(data as *const u8, length as usize) }.to_vec()
        };
        lock(ev).am.push_back(AmMessage {
            id: a.id,
            data: bytes,
            reply_ep: reply.then_some(EpKey(p.reply_ep as usize)),
            rndv_dropped: rndv,
            unowned: a.unowned,
        });
    });
    sys::ucs_status_t::UCS_OK
}
