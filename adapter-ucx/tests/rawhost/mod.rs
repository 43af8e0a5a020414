//! A host written on plain libucp (`ucx1-sys` calls only, no tagspace wrapper), as ucxx or a
//! C++ engine is: its own context and worker, endpoints by worker address with its own error
//! handler, its own AM handler on id 0, raw tag and AM traffic. Shared by the host-mode tests.
// Each test binary includes this module and uses only part of it.
#![allow(dead_code)]

use std::collections::HashSet;
use std::ffi::{c_void, CString};
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tagspace_core::{Registry, TagLayout};
use tagspace_ucx::node::{HostProgress, NodeConfig, NodeError};
use tagspace_ucx::shared::SharedNode;
use tagspace_ucx::ucp::Config;
use ucx1_sys as sys;

/// What the host's callbacks saw: AM id 0 payloads, endpoint errors.
#[derive(Default)]
pub struct HostEvents {
    pub am0: Mutex<Vec<Vec<u8>>>,
    pub ep_errors: Mutex<Vec<(usize, i8)>>,
}

/// A host on plain libucp: its own context, worker (thread mode chosen), endpoints by worker
/// address (as RAFT makes them), a handler on AM id 0.
pub struct RawHost {
    pub ctx: sys::ucp_context_h,
    pub worker: sys::ucp_worker_h,
    pub events: Box<HostEvents>,
}

pub unsafe extern "C" fn host_am0(
    arg: *mut c_void,
    _header: *const c_void,
    _header_length: sys::size_t,
    data: *mut c_void,
    length: sys::size_t,
    _param: *const sys::ucp_am_recv_param_t,
) -> sys::ucs_status_t {
    // SAFETY: arg is the host's events box; eager data is valid during the callback.
    let ev = unsafe { &*(arg as *const HostEvents) };
    let bytes = unsafe { std::slice::from_raw_parts(data as *const u8, length as usize) };
    ev.am0.lock().unwrap().push(bytes.to_vec());
    sys::ucs_status_t::UCS_OK
}

pub unsafe extern "C" fn host_ep_error(
    arg: *mut c_void,
    ep: sys::ucp_ep_h,
    status: sys::ucs_status_t,
) {
    // SAFETY: arg is the host's events box.
    let ev = unsafe { &*(arg as *const HostEvents) };
    ev.ep_errors
        .lock()
        .unwrap()
        .push((ep as usize, status as i8));
}

pub fn is_err(p: sys::ucs_status_ptr_t) -> bool {
    (p as usize) >= (-100isize) as usize
}

impl RawHost {
    pub fn new(ucx: &Config, mode: sys::ucs_thread_mode_t) -> RawHost {
        let mut config: *mut sys::ucp_config_t = ptr::null_mut();
        // SAFETY: plain libucp calls with valid arguments throughout.
        unsafe {
            assert_eq!(
                sys::ucp_config_read(ptr::null(), ptr::null(), &mut config) as i8,
                0
            );
            let mut pairs = vec![("TLS".to_string(), ucx.transports.clone().unwrap())];
            pairs.extend(ucx.options.iter().cloned());
            for (k, v) in pairs {
                let (k2, v2) = (CString::new(k.clone()).unwrap(), CString::new(v).unwrap());
                if sys::ucp_config_modify(config, k2.as_ptr(), v2.as_ptr()) as i8 != 0 {
                    // UCX 1.22 spells transport options with their prefix.
                    let k3 = CString::new(format!("TCP_{k}")).unwrap();
                    sys::ucp_config_modify(config, k3.as_ptr(), v2.as_ptr());
                }
            }
            let mut params: sys::ucp_params_t = std::mem::zeroed();
            params.field_mask = sys::ucp_params_field::UCP_PARAM_FIELD_FEATURES.0 as u64;
            params.features =
                (sys::ucp_feature::UCP_FEATURE_TAG | sys::ucp_feature::UCP_FEATURE_AM).0 as u64;
            let mut ctx = ptr::null_mut();
            assert_eq!(
                sys::ucp_init_version(
                    sys::UCP_API_MAJOR,
                    sys::UCP_API_MINOR,
                    &params,
                    config,
                    &mut ctx
                ) as i8,
                0
            );
            sys::ucp_config_release(config);
            let mut wp: sys::ucp_worker_params_t = std::mem::zeroed();
            wp.field_mask =
                sys::ucp_worker_params_field::UCP_WORKER_PARAM_FIELD_THREAD_MODE.0 as u64;
            wp.thread_mode = mode;
            let mut worker = ptr::null_mut();
            assert_eq!(sys::ucp_worker_create(ctx, &wp, &mut worker) as i8, 0);
            let host = RawHost {
                ctx,
                worker,
                events: Box::default(),
            };
            // The host's own AM handler on id 0, set before tagspace arrives (as ucxx does).
            let mut p: sys::ucp_am_handler_param_t = std::mem::zeroed();
            p.field_mask = (sys::ucp_am_handler_param_field::UCP_AM_HANDLER_PARAM_FIELD_ID
                | sys::ucp_am_handler_param_field::UCP_AM_HANDLER_PARAM_FIELD_CB
                | sys::ucp_am_handler_param_field::UCP_AM_HANDLER_PARAM_FIELD_ARG
                | sys::ucp_am_handler_param_field::UCP_AM_HANDLER_PARAM_FIELD_FLAGS)
                .0 as u64;
            p.id = 0;
            p.flags = sys::ucp_am_cb_flags::UCP_AM_FLAG_WHOLE_MSG.0;
            p.cb = Some(host_am0);
            p.arg = &*host.events as *const HostEvents as *mut c_void;
            assert_eq!(sys::ucp_worker_set_am_recv_handler(worker, &p) as i8, 0);
            host
        }
    }

    pub fn address(&self) -> Vec<u8> {
        let mut addr = ptr::null_mut();
        let mut len = 0;
        // SAFETY: out-pointers; released below.
        unsafe {
            assert_eq!(
                sys::ucp_worker_get_address(self.worker, &mut addr, &mut len) as i8,
                0
            );
            let v = std::slice::from_raw_parts(addr as *const u8, len as usize).to_vec();
            sys::ucp_worker_release_address(self.worker, addr);
            v
        }
    }

    /// An endpoint to `peer`'s worker address, with the host's own error handler.
    pub fn connect(&self, peer: &[u8]) -> sys::ucp_ep_h {
        // SAFETY: a valid worker address from `address()`.
        unsafe {
            let mut p: sys::ucp_ep_params_t = std::mem::zeroed();
            p.field_mask = (sys::ucp_ep_params_field::UCP_EP_PARAM_FIELD_REMOTE_ADDRESS
                | sys::ucp_ep_params_field::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE
                | sys::ucp_ep_params_field::UCP_EP_PARAM_FIELD_ERR_HANDLER)
                .0 as u64;
            p.address = peer.as_ptr() as *const sys::ucp_address_t;
            p.err_mode = sys::ucp_err_handling_mode_t::UCP_ERR_HANDLING_MODE_PEER;
            p.err_handler.cb = Some(host_ep_error);
            p.err_handler.arg = &*self.events as *const HostEvents as *mut c_void;
            let mut ep = ptr::null_mut();
            assert_eq!(sys::ucp_ep_create(self.worker, &p, &mut ep) as i8, 0);
            ep
        }
    }

    pub fn progress(&self) {
        // SAFETY: a live worker.
        unsafe { sys::ucp_worker_progress(self.worker) };
    }

    /// Starts a tag send; the buffer must live until `done` says so.
    pub fn send(&self, ep: sys::ucp_ep_h, tag: u64, data: &[u8]) -> Pending {
        // SAFETY: the caller keeps `data` alive until the request ends (Pending::wait).
        unsafe {
            let param: sys::ucp_request_param_t = std::mem::zeroed();
            let p = sys::ucp_tag_send_nbx(
                ep,
                data.as_ptr() as *const c_void,
                data.len() as sys::size_t,
                tag,
                &param,
            );
            assert!(!is_err(p), "host tag send failed");
            Pending(p)
        }
    }

    pub fn am_send(&self, ep: sys::ucp_ep_h, id: u32, data: &[u8]) -> Pending {
        self.am_send_flags(
            ep,
            id,
            data,
            sys::ucp_send_am_flags::UCP_AM_SEND_FLAG_EAGER.0,
        )
    }

    /// An AM with a reply endpoint, as tagspace's control frames are sent.
    pub fn am_send_reply(&self, ep: sys::ucp_ep_h, id: u32, data: &[u8]) -> Pending {
        let flags = sys::ucp_send_am_flags::UCP_AM_SEND_FLAG_EAGER
            | sys::ucp_send_am_flags::UCP_AM_SEND_FLAG_REPLY;
        self.am_send_flags(ep, id, data, flags.0)
    }

    pub fn am_send_flags(&self, ep: sys::ucp_ep_h, id: u32, data: &[u8], flags: u32) -> Pending {
        // SAFETY: as for `send`.
        unsafe {
            let mut param: sys::ucp_request_param_t = std::mem::zeroed();
            param.op_attr_mask = sys::ucp_op_attr_t::UCP_OP_ATTR_FIELD_FLAGS as u32;
            param.flags = flags;
            let p = sys::ucp_am_send_nbx(
                ep,
                id,
                ptr::null(),
                0,
                data.as_ptr() as *const c_void,
                data.len() as sys::size_t,
                &param,
            );
            assert!(!is_err(p), "host AM send failed");
            Pending(p)
        }
    }

    /// Posts a full-mask receive for `tag` into `buf`.
    pub fn recv(&self, tag: u64, buf: &mut [u8]) -> Pending {
        // SAFETY: the caller keeps `buf` alive until the request ends.
        unsafe {
            let param: sys::ucp_request_param_t = std::mem::zeroed();
            let p = sys::ucp_tag_recv_nbx(
                self.worker,
                buf.as_mut_ptr() as *mut c_void,
                buf.len() as sys::size_t,
                tag,
                u64::MAX,
                &param,
            );
            assert!(!is_err(p), "host tag recv failed");
            Pending(p)
        }
    }

    /// A foreign library's probe: `ucp_tag_probe_nb(tag, mask)`. With `remove` (rapidsmpf's
    /// `recv_any`) the message found is received through its handle; without (BlazingSQL's
    /// begin-transmission probe) the probe only peeks and the tag it found is then received
    /// with a full mask. Either way the message is taken: its tag and data.
    pub fn probe_take(&self, tag: u64, mask: u64, remove: bool) -> Option<(u64, Vec<u8>)> {
        // SAFETY: plain libucp calls; the buffer outlives the request (waited on here).
        unsafe {
            let mut info: sys::ucp_tag_recv_info_t = std::mem::zeroed();
            let msg = sys::ucp_tag_probe_nb(self.worker, tag, mask, remove as i32, &mut info);
            if msg.is_null() {
                return None;
            }
            let mut buf = vec![0u8; info.length as usize];
            let pending = if remove {
                let param: sys::ucp_request_param_t = std::mem::zeroed();
                let p = sys::ucp_tag_msg_recv_nbx(
                    self.worker,
                    buf.as_mut_ptr() as *mut c_void,
                    buf.len() as sys::size_t,
                    msg,
                    &param,
                );
                assert!(!is_err(p), "foreign msg recv failed");
                Pending(p)
            } else {
                self.recv(info.sender_tag, &mut buf)
            };
            pending.wait(self, &[]);
            Some((info.sender_tag, buf))
        }
    }

    /// Whether an unexpected message with exactly `tag` waits (not taken).
    pub fn has_unexpected(&self, tag: u64) -> bool {
        // SAFETY: probe without remove; info is an out-pointer.
        unsafe {
            let mut info: sys::ucp_tag_recv_info_t = std::mem::zeroed();
            !sys::ucp_tag_probe_nb(self.worker, tag, u64::MAX, 0, &mut info).is_null()
        }
    }

    pub fn close(&self, ep: sys::ucp_ep_h, others: &[&RawHost]) {
        // SAFETY: a live endpoint of this worker, closed once.
        unsafe {
            let mut param: sys::ucp_request_param_t = std::mem::zeroed();
            param.op_attr_mask = sys::ucp_op_attr_t::UCP_OP_ATTR_FIELD_FLAGS as u32;
            param.flags = sys::ucp_ep_close_flags_t::UCP_EP_CLOSE_FLAG_FORCE.0;
            let p = sys::ucp_ep_close_nbx(ep, &param);
            if !p.is_null() && !is_err(p) {
                Pending(p).wait(self, others);
            }
        }
    }
}

impl Drop for RawHost {
    fn drop(&mut self) {
        // SAFETY: the host's own handles, destroyed once, after every tagspace node is gone.
        unsafe {
            sys::ucp_worker_destroy(self.worker);
            sys::ucp_cleanup(self.ctx);
        }
    }
}

/// A request of the host's (NULL: finished at once).
pub struct Pending(pub sys::ucs_status_ptr_t);

impl Pending {
    pub fn done(&self) -> bool {
        // SAFETY: a live request or NULL.
        self.0.is_null() || unsafe { sys::ucp_request_check_status(self.0) as i8 != 1 }
    }

    pub fn wait(self, host: &RawHost, others: &[&RawHost]) {
        let start = Instant::now();
        while !self.done() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "host request stuck"
            );
            host.progress();
            for o in others {
                o.progress();
            }
        }
        if !self.0.is_null() {
            // SAFETY: finished; freed once.
            unsafe { sys::ucp_request_free(self.0) };
        }
    }
}

pub fn registry() -> &'static Registry<256> {
    registry_with(TagLayout::DEFAULT)
}

/// A registry of `layout`, leaked (it lives as long as the test).
pub fn registry_with(layout: TagLayout) -> &'static Registry<256> {
    Box::leak(Box::new(Registry::new(layout)))
}

pub fn host_cfg() -> NodeConfig {
    NodeConfig {
        listen: None,
        ..NodeConfig::loopback(Config::tcp())
    }
}

/// A tiny deterministic generator (the test must be reproducible).
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The host's tags for one run: random ones (ucxx's hashed tags), random ones forced into
/// every namespace id tagspace uses on the receiving side and the control id, RAFT-style ones.
pub fn host_tags(rng: &mut Rng, forced_ids: &[u16], n: usize) -> Vec<u64> {
    let layout = TagLayout::DEFAULT;
    let f = layout.namespace_field();
    let mut tags = Vec::new();
    let mut seen = HashSet::new();
    while tags.len() < n {
        let k = tags.len();
        let mut t = rng.next();
        if k % 3 == 1 {
            let id = forced_ids[(k / 3) % forced_ids.len()] as u64;
            t = (t & !(f.mask())) | (id << f.shift());
        } else if k % 3 == 2 {
            t = ((rng.next() % 100_000) << 31) | (k as u64 % 4); // RAFT: (tag << 31) | rank
        }
        if seen.insert(t) {
            tags.push(t);
        }
    }
    tags
}

impl Pending {
    /// Frees a finished request (NULL: nothing to free).
    pub fn free(self) {
        assert!(self.done(), "freeing a request still in flight");
        if !self.0.is_null() {
            // SAFETY: finished; freed once.
            unsafe { sys::ucp_request_free(self.0) };
        }
    }
}

/// Two hosts (thread mode `mode`) with an endpoint each to the other's worker address.
pub fn host_pair(
    ucx: &Config,
    mode: sys::ucs_thread_mode_t,
) -> (RawHost, RawHost, sys::ucp_ep_h, sys::ucp_ep_h) {
    let (ha, hb) = (RawHost::new(ucx, mode), RawHost::new(ucx, mode));
    let a_ep = ha.connect(&hb.address());
    let b_ep = hb.connect(&ha.address());
    (ha, hb, a_ep, b_ep)
}

/// The host's progress thread on MULTI workers: the only caller of `ucp_worker_progress`
/// (tagspace's callbacks run there) until `stop`, pausing `pause` between rounds. The workers
/// must outlive the thread (join it before dropping their hosts).
pub fn progress_thread(
    workers: &[sys::ucp_worker_h],
    stop: &Arc<AtomicBool>,
    pause: Duration,
) -> JoinHandle<()> {
    // Raw handles cross as integers.
    let workers: Vec<usize> = workers.iter().map(|w| *w as usize).collect();
    let stop = stop.clone();
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            for w in &workers {
                // SAFETY: MULTI workers, alive until this thread is joined.
                unsafe { sys::ucp_worker_progress(*w as sys::ucp_worker_h) };
            }
            if !pause.is_zero() {
                std::thread::sleep(pause);
            }
        }
    })
}

/// A runtime's tagspace service thread per node: `SharedNode::progress` until `stop`,
/// pausing `pause` whenever a call had nothing to do.
pub fn service_threads(
    nodes: &[&SharedNode],
    stop: &Arc<AtomicBool>,
    pause: Duration,
) -> Vec<JoinHandle<()>> {
    nodes
        .iter()
        .map(|n| {
            let (n, stop) = ((*n).clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if !n.progress() {
                        std::thread::sleep(pause);
                    }
                }
            })
        })
        .collect()
}

/// Two hosts on MULTI workers ([`host_pair`]) and a shared node on each (host progress, own
/// registries); `None`, after printing "`what`: not run" and closing the endpoints, where the
/// loaded UCX gives no MULTI worker (one built without thread support).
pub fn shared_pair(
    ucx: &Config,
    what: &str,
) -> Option<(
    RawHost,
    RawHost,
    sys::ucp_ep_h,
    sys::ucp_ep_h,
    SharedNode,
    SharedNode,
)> {
    let (ha, hb, a_ep, b_ep) = host_pair(ucx, sys::ucs_thread_mode_t::UCS_THREAD_MODE_MULTI);
    // SAFETY: the caller keeps the workers alive until the nodes are gone, and closes an
    // endpoint only after detaching it (or dropping the nodes).
    let adopt = |w| unsafe {
        SharedNode::adopt_with_registry(w, host_cfg(), HostProgress::Host, registry())
    };
    let a = match adopt(ha.worker) {
        Ok(a) => a,
        Err(NodeError::Usage(m)) if m.contains("MULTI") => {
            let v = tagspace_ucx::ucp::ucx_version();
            eprintln!("{what}: not run: UCX {v:?} gives no MULTI worker ({m})");
            ha.close(a_ep, &[&hb]);
            hb.close(b_ep, &[&ha]);
            return None;
        }
        Err(e) => panic!("adopt: {e}"),
    };
    let b = adopt(hb.worker).unwrap();
    Some((ha, hb, a_ep, b_ep, a, b))
}
