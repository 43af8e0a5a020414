//! `tagspace._tagspace`: the native half of the `tagspace` Python package (issue 13).
//!
//! A [`SharedNode`] on a host's `UCS_THREAD_MODE_MULTI` worker — ucxx's — with a handle per
//! library. The Python half (`tagspace/__init__.py`) turns ucxx objects into raw handles and
//! keeps them alive; this half takes integers. The GIL is released around every call that can
//! enter UCX (a thread of ucxx's may hold UCX's worker lock and want the GIL), and around
//! every wait. Errors are Python exceptions: `TagspaceError` and its subclasses for tagspace's
//! own conditions, `ValueError` for bad names, payloads and arguments.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tagspace_core::engine::Liveness;
use tagspace_core::foreign;
use tagspace_core::{RawMatcher, TagLayout};
use tagspace_ucx::node::{
    dialable_address, HostProgress, NodeConfig, NodeError, OpId, PeerEvent, Role,
};
use tagspace_ucx::shared::{Library as RsLibrary, SharedNode};
use tagspace_ucx::ucp::ThreadMode;
use ucx1_sys as sys;

create_exception!(
    _tagspace,
    TagspaceError,
    PyException,
    "A tagspace call failed (the message says why)."
);
create_exception!(
    _tagspace,
    NotConnectedError,
    TagspaceError,
    "No established connection to that peer (not attached, handshake not finished, or gone)."
);
create_exception!(
    _tagspace,
    NotAnnouncedError,
    TagspaceError,
    "The peer is connected but has not registered that library's name (yet)."
);
create_exception!(
    _tagspace,
    PeerDownError,
    TagspaceError,
    "The peer went down (failed, or closed its connection) while the operation waited."
);
create_exception!(
    _tagspace,
    UcxError,
    TagspaceError,
    "A UCX call failed; the message names the call and the UCX status."
);
create_exception!(
    _tagspace,
    ClosedError,
    TagspaceError,
    "The node or library was closed (released) before this call."
);

fn err(e: NodeError) -> PyErr {
    let msg = e.to_string();
    match e {
        NodeError::Transport(_) => UcxError::new_err(msg),
        NodeError::NoConnection { .. } => NotConnectedError::new_err(msg),
        NodeError::PeerDown { .. } => PeerDownError::new_err(msg),
        NodeError::PeerLacksNamespace { .. } => NotAnnouncedError::new_err(msg),
        NodeError::Tag(_) | NodeError::Registry(_) => PyValueError::new_err(msg),
        NodeError::NoSuchLibrary => ClosedError::new_err("the library was released"),
        NodeError::Usage(m) => TagspaceError::new_err(m),
    }
}

fn closed() -> PyErr {
    ClosedError::new_err("the node was closed")
}

/// The handle value as a pointer; 0 is refused (a closed or missing handle).
fn handle<T>(h: usize, what: &str) -> PyResult<*mut T> {
    if h == 0 {
        return Err(PyValueError::new_err(format!(
            "the {what} handle is 0 (closed, or not a UCX handle)"
        )));
    }
    Ok(h as *mut T)
}

fn side(s: &str) -> PyResult<Role> {
    match s {
        "initiator" => Ok(Role::Initiator),
        "acceptor" => Ok(Role::Acceptor),
        _ => Err(PyValueError::new_err(format!(
            "side must be \"initiator\" (this process created the endpoint to the peer's \
             listener) or \"acceptor\" (it came from the peer's connection request), not {s:?}"
        ))),
    }
}

/// A tagspace node on a host's (ucxx's) worker. Use `tagspace.Node`, which accepts ucxx
/// objects; this takes raw handles.
#[pyclass(module = "tagspace._tagspace", frozen)]
struct Node {
    node: Mutex<Option<SharedNode>>,
    /// The Python objects whose UCX handles the node uses (ucxx's worker, attached endpoints),
    /// kept alive while it uses them.
    keep: Mutex<HashMap<usize, Py<PyAny>>>,
    worker_keep: Py<PyAny>,
    /// Every library registered here: closing the node closes them (each holds a handle on
    /// the node, which lives on while any does).
    libs: Mutex<Vec<Py<Library>>>,
}

impl Node {
    /// Attaches the endpoint handle `ep` with `how` (the GIL released) and keeps `keep`
    /// alive until it is detached.
    fn attach_with(
        &self,
        py: Python<'_>,
        ep: usize,
        keep: Py<PyAny>,
        how: impl FnOnce(&SharedNode, sys::ucp_ep_h) -> Result<(), NodeError> + Send,
    ) -> PyResult<()> {
        let n = self.get()?;
        let e = handle::<sys::ucp_ep>(ep, "endpoint")? as usize;
        py.detach(|| how(&n, e as sys::ucp_ep_h)).map_err(err)?;
        self.keep
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(e, keep);
        Ok(())
    }

    fn get(&self) -> PyResult<SharedNode> {
        self.node
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(closed)
    }
}

#[pymethods]
impl Node {
    /// Adopts the MULTI worker `worker` (a `ucp_worker_h` as an int); `keep` is kept alive as
    /// long as the node (the object that owns the worker).
    #[new]
    #[pyo3(signature = (worker, keep, progress = "host", heartbeat_interval_ms = 1000, heartbeat_timeout_ms = 30000, layout = None, foreign = Vec::new(), advertise = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        worker: usize,
        keep: Py<PyAny>,
        progress: &str,
        heartbeat_interval_ms: u64,
        heartbeat_timeout_ms: u64,
        layout: Option<&str>,
        foreign: Vec<String>,
        advertise: Option<&str>,
    ) -> PyResult<Self> {
        let advertise = advertise.map(socket_address).transpose()?;
        let w = handle::<sys::ucp_worker>(worker, "worker")? as usize;
        let registry = match layout {
            None => tagspace_core::global(),
            Some(spec) => tagspace_core::init_global(parse_layout(spec)?)
                .map_err(|e| PyValueError::new_err(format!("layout {spec:?}: {e}")))?,
        };
        check_layout_against(registry.layout(), &foreign)?;
        let progress = match progress {
            "host" => HostProgress::Host,
            "node" => HostProgress::Node,
            p => {
                return Err(PyValueError::new_err(format!(
                    "progress must be \"host\" (ucxx progresses its worker) or \"node\", not {p:?}"
                )))
            }
        };
        // SAFETY: the worker is ucxx's, kept alive by `keep` for as long as this node; the
        // Python half passes only handles it got from a live ucxx worker.
        let node = py
            .detach(|| {
                let mut cfg = NodeConfig::loopback(tagspace_ucx::ucp::Config::default());
                cfg.listen = None;
                cfg.advertise = advertise;
                cfg.liveness = (heartbeat_interval_ms != 0).then_some(Liveness {
                    interval_ms: heartbeat_interval_ms,
                    timeout_ms: heartbeat_timeout_ms,
                });
                unsafe {
                    SharedNode::adopt_with_registry(w as sys::ucp_worker_h, cfg, progress, registry)
                }
            })
            .map_err(err)?;
        Ok(Node {
            node: Mutex::new(Some(node)),
            keep: Mutex::new(HashMap::new()),
            worker_keep: keep,
            libs: Mutex::new(Vec::new()),
        })
    }

    /// This process's token: how peers name it.
    #[getter]
    fn token(&self) -> PyResult<u64> {
        Ok(self.get()?.token())
    }

    /// What the node found: thread mode, the UCX loaded, who progresses.
    #[getter]
    fn info(&self) -> PyResult<HashMap<&'static str, String>> {
        let h = self.get()?.host();
        let mode = match h.thread_mode {
            ThreadMode::Single => "single".to_string(),
            ThreadMode::Serialized => "serialized".to_string(),
            ThreadMode::Multi => "multi".to_string(),
            ThreadMode::Other(v) => format!("unknown ({v})"),
        };
        let (a, b, c) = h.ucx_version;
        Ok(HashMap::from([
            ("thread_mode", mode),
            ("ucx_version", format!("{a}.{b}.{c}")),
            (
                "progress",
                match h.progress {
                    HostProgress::Host => "host",
                    HostProgress::Node => "node",
                }
                .to_string(),
            ),
        ]))
    }

    /// Lets tagspace use the host's endpoint `ep` (an int); `keep` is kept alive until detach.
    fn attach(&self, py: Python<'_>, ep: usize, side_: &str, keep: Py<PyAny>) -> PyResult<()> {
        let s = side(side_)?;
        // SAFETY: a live endpoint of this worker (the Python half checked the ucxx endpoint is
        // open), kept alive by `keep` until detach.
        self.attach_with(py, ep, keep, |n, e| unsafe { n.attach(e, s) })
    }

    /// `attach` as the initiator of a reconnect to the lost `peer` (`reconnect_needed`): the
    /// peer keeps this connection over any older one to this process.
    fn attach_reconnect(
        &self,
        py: Python<'_>,
        ep: usize,
        peer: u64,
        keep: Py<PyAny>,
    ) -> PyResult<()> {
        // SAFETY: as for `attach`.
        self.attach_with(py, ep, keep, |n, e| unsafe { n.attach_reconnect(e, peer) })
    }

    /// Stops using `ep` (before the host closes it).
    fn detach(&self, py: Python<'_>, ep: usize) -> PyResult<()> {
        let n = self.get()?;
        let e = handle::<sys::ucp_ep>(ep, "endpoint")? as usize;
        py.detach(|| n.detach(e as sys::ucp_ep_h)).map_err(err)?;
        self.keep
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&e);
        Ok(())
    }

    /// The host's endpoint `ep` failed with UCX status `status` (negative); safe from any
    /// thread, including inside a UCX callback.
    #[pyo3(signature = (ep, status = -25))]
    fn peer_failed(&self, ep: usize, status: i32) -> PyResult<()> {
        let status = i8::try_from(status)
            .ok()
            .filter(|s| *s <= 0)
            .ok_or_else(|| {
                PyValueError::new_err(format!("{status} is not a UCX status (0 or negative)"))
            })?;
        self.get()?.peer_failed(ep as sys::ucp_ep_h, status);
        Ok(())
    }

    /// The token of the peer on endpoint `ep`, once its handshake finished; else None.
    fn peer_on(&self, py: Python<'_>, ep: usize) -> PyResult<Option<u64>> {
        let n = self.get()?;
        Ok(py.detach(|| n.peer_on(ep as sys::ucp_ep_h)))
    }

    /// Handles what arrived; True if anything happened.
    fn progress(&self, py: Python<'_>) -> PyResult<bool> {
        let n = self.get()?;
        Ok(py.detach(|| n.progress()))
    }

    /// Registers library `name` on this node.
    fn register(&self, py: Python<'_>, name: &str) -> PyResult<Py<Library>> {
        let n = self.get()?;
        let lib = py.detach(|| n.register(name)).map_err(err)?;
        let lib = Py::new(
            py,
            Library {
                lib: Mutex::new(Some(Arc::new(lib))),
            },
        )?;
        let mut libs = self.libs.lock().unwrap_or_else(|p| p.into_inner());
        libs.retain(|l| !l.get().closed());
        libs.push(lib.clone_ref(py));
        Ok(lib)
    }

    /// The proven peer (a token) that sent a message with `tag`, or None: no proven peer was
    /// given the pair value it carries, so a process that never proved its identity here made
    /// it up (drop the message). ValueError on a layout without a pair field.
    fn sender_of(&self, py: Python<'_>, tag: u64) -> PyResult<Option<u64>> {
        let n = self.get()?;
        if n.layout().pair_bits() == 0 {
            return Err(PyValueError::new_err(
                "the node's layout has no pair field: nothing tells its peers' tags apart",
            ));
        }
        Ok(py.detach(|| n.sender_of(tag)))
    }

    /// Tells peers to connect to `address` ("IP:PORT", the host's listener) after a fault;
    /// None: tell nothing.
    #[pyo3(signature = (address))]
    fn advertise(&self, py: Python<'_>, address: Option<&str>) -> PyResult<()> {
        let n = self.get()?;
        let a = address.map(socket_address).transpose()?;
        py.detach(|| n.set_advertise(a));
        Ok(())
    }

    /// The address peers are told ("IP:PORT"), or None.
    #[getter]
    fn advertised(&self, py: Python<'_>) -> PyResult<Option<String>> {
        let n = self.get()?;
        Ok(py.detach(|| n.advertised()).map(|a| a.to_string()))
    }

    /// The next peer lost to a fault that the host should connect to again, oldest first:
    /// `(token, ip, port)` where it said it listens; None when none waits.
    fn reconnect_needed(&self, py: Python<'_>) -> PyResult<Option<(u64, String, u16)>> {
        let n = self.get()?;
        Ok(py
            .detach(|| n.take_reconnect_needed())
            .map(|(p, a)| (p, a.ip().to_string(), a.port())))
    }

    /// Tokens of peers with an established connection.
    fn peers(&self, py: Python<'_>) -> PyResult<Vec<u64>> {
        let n = self.get()?;
        Ok(py.detach(|| n.peers()))
    }

    /// Node-wide counters.
    fn stats(&self, py: Python<'_>) -> PyResult<HashMap<&'static str, u64>> {
        let n = self.get()?;
        let s = py.detach(|| n.stats());
        Ok(HashMap::from([
            ("control_sent", s.control_sent),
            ("control_received", s.control_received),
            ("protocol_errors", s.protocol_errors),
            ("endpoint_failures", s.endpoint_failures),
            ("unattached_dropped", s.unattached_dropped),
            ("heartbeat_timeouts", s.liveness_timeouts),
            ("reconnects", s.reconnects),
            ("reconnects_given_up", s.redials_given_up),
            ("deaf", s.deaf),
        ]))
    }

    /// Closes its libraries and every connection in order (waiting up to `timeout_ms`) and
    /// ends the node: its AM handlers are removed from ucxx's worker and its requests
    /// cancelled. Every later call on it or its libraries raises ClosedError.
    #[pyo3(signature = (timeout_ms = 1000))]
    fn close(&self, py: Python<'_>, timeout_ms: u64) {
        let libs = std::mem::take(&mut *self.libs.lock().unwrap_or_else(|p| p.into_inner()));
        for l in libs {
            l.get().close(py);
        }
        let n = self.node.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(n) = n {
            py.detach(|| {
                n.shutdown(timeout_ms);
                drop(n);
            });
        }
        self.keep.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.node
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    }

    fn __repr__(&self) -> String {
        match self.get() {
            Ok(n) => format!("<tagspace Node token={:#x}>", n.token()),
            Err(_) => "<tagspace Node (closed)>".to_string(),
        }
    }

    #[doc(hidden)]
    fn _worker_keep(&self, py: Python<'_>) -> Py<PyAny> {
        self.worker_keep.clone_ref(py)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // Dropping the last handle gives the worker back (progressing it briefly): not with
        // the GIL held, which a thread of ucxx's inside UCX may be waiting for.
        let n = self
            .node
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(n) = n {
            Python::attach(|py| py.detach(|| drop(n)));
        }
    }
}

/// One library's namespace on a node. Operations it starts are its own.
#[pyclass(module = "tagspace._tagspace", frozen)]
struct Library {
    /// Shared with calls in progress (see `with`); `None` once closed. The namespace is
    /// released when the last share goes.
    lib: Mutex<Option<Arc<RsLibrary>>>,
}

/// An operation started by a library (send or receive): `take` its result when done.
#[pyclass(module = "tagspace._tagspace", frozen)]
struct Op {
    #[pyo3(get)]
    id: u64,
    taken: AtomicBool,
}

fn op_id(op: &Op) -> OpId {
    OpId(op.id)
}

impl Library {
    /// Runs `f` on the library, without holding this object's lock meanwhile: other threads'
    /// calls (a tag lookup while one thread waits) do not wait for it.
    fn with<R>(&self, f: impl FnOnce(&RsLibrary) -> R) -> PyResult<R> {
        let l = self
            .lib
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| ClosedError::new_err("the library was released"))?;
        let r = f(&l);
        if Arc::strong_count(&l) == 1 {
            // Closed meanwhile and this was the last use: the release it owes takes the node's
            // lock, so not with the GIL held.
            Python::attach(|py| py.detach(move || drop(l)));
        }
        Ok(r)
    }

    /// Gives up this object's share of the library, not with the GIL held (see `with`).
    fn give_up(py: Python<'_>, l: Option<Arc<RsLibrary>>) {
        py.detach(move || drop(l));
    }

    /// The tag of a route, or the error saying the peer has not announced the name.
    fn announced_tag(peer: u64, tag: Option<u64>) -> PyResult<u64> {
        tag.ok_or_else(|| {
            NotAnnouncedError::new_err(format!(
                "peer {peer:#x} has not registered this library's name yet"
            ))
        })
    }

    fn started(id: OpId) -> Op {
        Op {
            id: id.0,
            taken: AtomicBool::new(false),
        }
    }
}

fn result(py: Python<'_>, r: Result<Option<Vec<u8>>, NodeError>) -> PyResult<Py<PyAny>> {
    match r.map_err(err)? {
        Some(data) => Ok(PyBytes::new(py, &data).into_any().unbind()),
        None => Ok(py.None()),
    }
}

#[pymethods]
impl Library {
    /// The namespace's name.
    #[getter]
    fn name(&self, py: Python<'_>) -> PyResult<String> {
        py.detach(|| self.with(|l| l.namespace().map(|(n, _)| n)))?
            .map_err(err)
    }

    /// The namespace's id on this node.
    #[getter]
    fn namespace_id(&self, py: Python<'_>) -> PyResult<u16> {
        py.detach(|| self.with(|l| l.namespace().map(|(_, id)| id)))?
            .map_err(err)
    }

    /// The tag that carries `payload` to this library on `peer` (a token), for ucxx's own
    /// `ep.send(buf, tag=..., force_tag=True)`. Raises NotConnectedError before the peer's
    /// handshake finished and NotAnnouncedError while it has not registered the name.
    ///
    /// Like every call here that may wait for the node's lock, it waits without the GIL: a
    /// thread holding the lock may be inside UCX, waiting for ucxx's progress thread, which may
    /// be waiting for the GIL in a callback. A route this thread already looked up (the node
    /// unchanged since) is answered from its cache, with the GIL.
    fn tag(&self, py: Python<'_>, peer: u64, payload: u64) -> PyResult<u64> {
        if let Some((_, tag)) = self.with(|l| l.route_cached(peer, payload))? {
            return Ok(tag);
        }
        // only the tag crosses back (the endpoint handle is not Send)
        let found = py.detach(|| self.with(|l| Ok(l.route(peer, payload)?.map(|(_, t)| t))))?;
        Library::announced_tag(peer, found.map_err(err)?)
    }

    /// The tag and mask (full) that receive `payload` sent to this library here by `peer` (a
    /// token), for ucxx's own `recv(buf, tag=..., force_tag=True)`. Only `peer`'s messages
    /// match: the tag carries, in the layout's pair field, the value this node gives `peer`
    /// alone once it has proven its identity.
    fn matcher(&self, py: Python<'_>, peer: u64, payload: u64) -> PyResult<(u64, u64)> {
        if let Some(m) = self.with(|l| l.matcher_cached(peer, payload))? {
            return Ok(m);
        }
        py.detach(|| self.with(|l| l.matcher(peer, payload)))?
            .map_err(err)
    }

    /// The tag and mask that receive `payload` sent to this library here by any peer: every
    /// bit fixed but the pair field (a partial mask). It also takes a message a stranger made
    /// up: check the received tag with `Node.sender_of` and drop the message when that is None.
    fn matcher_any_peer(&self, py: Python<'_>, payload: u64) -> PyResult<(u64, u64)> {
        py.detach(|| self.with(|l| l.matcher_any_peer(payload)))?
            .map_err(err)
    }

    /// The peer's inbox tag for this library ("a new transmission has begun"), for ucxx's
    /// own send; raises as `tag` does.
    fn inbox_tag(&self, py: Python<'_>, peer: u64) -> PyResult<u64> {
        let found = py.detach(|| self.with(|l| Ok(l.route_inbox(peer)?.map(|(_, t)| t))))?;
        Library::announced_tag(peer, found.map_err(err)?)
    }

    /// The tag and mask (full) of this library's inbox here as `peer` sends to it, for ucxx's
    /// own recv or probe.
    fn inbox_matcher(&self, py: Python<'_>, peer: u64) -> PyResult<(u64, u64)> {
        py.detach(|| self.with(|l| l.inbox_matcher(peer)))?
            .map_err(err)
    }

    /// This library's inbox here from any peer (the pair field free; check what it takes with
    /// `Node.sender_of`).
    fn inbox_matcher_any_peer(&self, py: Python<'_>) -> PyResult<(u64, u64)> {
        py.detach(|| self.with(|l| l.inbox_matcher_any_peer()))?
            .map_err(err)
    }

    /// Sends `data` (bytes) to `payload` in this library's namespace on `peer`, waiting up to
    /// `timeout_ms` for the peer to announce the name. Returns the operation.
    #[pyo3(signature = (peer, payload, data, timeout_ms = 10000))]
    fn send(
        &self,
        py: Python<'_>,
        peer: u64,
        payload: u64,
        data: &[u8],
        timeout_ms: u64,
    ) -> PyResult<Op> {
        let data = data.to_vec();
        let id = py.detach(|| self.with(|l| l.send(peer, payload, data, timeout_ms)))?;
        Ok(Library::started(id))
    }

    /// Posts a receive for `payload` of at most `max_len` bytes; with `peer`, the receive
    /// fails with PeerDownError if that peer goes down first.
    #[pyo3(signature = (payload, max_len, peer = None))]
    fn recv(
        &self,
        py: Python<'_>,
        payload: u64,
        max_len: usize,
        peer: Option<u64>,
    ) -> PyResult<Op> {
        let id = py.detach(|| {
            self.with(|l| match peer {
                Some(p) => l.recv_from(p, payload, max_len),
                None => l.recv(payload, max_len),
            })
        })?;
        Ok(Library::started(id))
    }

    /// Sends `data` (bytes) to this library's inbox on `peer`.
    #[pyo3(signature = (peer, data, timeout_ms = 10000))]
    fn send_inbox(&self, py: Python<'_>, peer: u64, data: &[u8], timeout_ms: u64) -> PyResult<Op> {
        let data = data.to_vec();
        let id = py.detach(|| self.with(|l| l.send_inbox(peer, data, timeout_ms)))?;
        Ok(Library::started(id))
    }

    /// Takes the next message in this library's inbox, if one waits: an operation whose
    /// result is the data (at most `max_len` bytes), or None.
    fn probe_inbox(&self, py: Python<'_>, max_len: usize) -> PyResult<Option<Op>> {
        let op = py
            .detach(|| self.with(|l| l.probe_inbox(max_len)))?
            .map_err(err)?;
        Ok(op.map(Library::started))
    }

    /// Sends `data` to `peer` on `data`'s library-local Active Message id `local` (this
    /// library's AM ids on the peer, through the handshake).
    #[pyo3(signature = (peer, local, data, timeout_ms = 10000))]
    fn am_send(
        &self,
        py: Python<'_>,
        peer: u64,
        local: u16,
        data: &[u8],
        timeout_ms: u64,
    ) -> PyResult<Op> {
        let data = data.to_vec();
        let id = py.detach(|| self.with(|l| l.am_send(peer, local, data, timeout_ms)))?;
        Ok(Library::started(id))
    }

    /// Starts receiving Active Messages on this library's local AM id `local`.
    fn am_listen(&self, py: Python<'_>, local: u16) -> PyResult<()> {
        py.detach(|| self.with(|l| l.am_listen(local)))?
            .map_err(err)
    }

    /// The next Active Message that arrived on `local` (bytes), or None; progresses the node
    /// once first.
    fn am_take(&self, py: Python<'_>, local: u16) -> PyResult<Option<Py<PyAny>>> {
        let got = py.detach(|| {
            self.with(|l| {
                l.node().progress();
                l.am_take(local)
            })
        })?;
        Ok(got.map(|d| PyBytes::new(py, &d).into_any().unbind()))
    }

    /// The oldest message waiting for this library that nobody received yet, as
    /// `(tag, length)`, or None (one partial-mask probe: for monitoring, not per message).
    fn oldest_waiting(&self, py: Python<'_>) -> PyResult<Option<(u64, usize)>> {
        let w = py
            .detach(|| self.with(|l| l.oldest_waiting()))?
            .map_err(err)?;
        Ok(w.map(|i| (i.tag, i.len)))
    }

    /// The result of `op` if it finished (bytes for a receive, None for a send), raising its
    /// error if it failed; `(False, None)` while it runs. Taking forgets the operation.
    fn take(&self, py: Python<'_>, op: &Op) -> PyResult<(bool, Py<PyAny>)> {
        if op.taken.load(Ordering::SeqCst) {
            return Err(TagspaceError::new_err(
                "this operation's result was taken already",
            ));
        }
        match py.detach(|| self.with(|l| l.take(op_id(op))))? {
            None => Ok((false, py.None())),
            Some(r) => {
                op.taken.store(true, Ordering::SeqCst);
                Ok((true, result(py, r)?))
            }
        }
    }

    /// Waits up to `timeout` seconds for `op`, progressing the node; returns its result as
    /// `take` does, raising TimeoutError on timeout (the operation goes on).
    #[pyo3(signature = (op, timeout = 30.0))]
    fn wait(&self, py: Python<'_>, op: &Op, timeout: f64) -> PyResult<Py<PyAny>> {
        if op.taken.load(Ordering::SeqCst) {
            return Err(TagspaceError::new_err(
                "this operation's result was taken already",
            ));
        }
        if !(timeout >= 0.0 && timeout.is_finite()) {
            return Err(PyValueError::new_err(format!("bad timeout {timeout}")));
        }
        let deadline = Instant::now() + Duration::from_secs_f64(timeout);
        loop {
            let r = py.detach(|| self.with(|l| l.wait(op_id(op), Duration::from_millis(5))))?;
            if let Some(r) = r {
                op.taken.store(true, Ordering::SeqCst);
                return result(py, r);
            }
            // Let Ctrl-C and other Python threads in between steps.
            py.check_signals()?;
            if Instant::now() >= deadline {
                return Err(pyo3::exceptions::PyTimeoutError::new_err(format!(
                    "operation {} did not finish in {timeout} s",
                    op.id
                )));
            }
        }
    }

    /// Cancels a receive still waiting (it then fails with UcxError, status CANCELED).
    fn cancel(&self, py: Python<'_>, op: &Op) -> PyResult<()> {
        py.detach(|| self.with(|l| l.cancel(op_id(op))))
    }

    /// Starts hearing of peers coming up and going down (see `peer_event`).
    fn listen(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.with(|l| l.listen()))?.map_err(err)
    }

    /// The next peer event: `("up", peer)`, `("down", peer, reason)` or None.
    fn peer_event(&self, py: Python<'_>) -> PyResult<Option<(String, u64, Option<String>)>> {
        let ev = py.detach(|| self.with(|l| l.peer_event()))?;
        Ok(ev.map(|e| match e {
            PeerEvent::Up { peer } => ("up".to_string(), peer, None),
            PeerEvent::Down {
                peer,
                cause,
                reason,
            } => {
                let why = match (cause, reason) {
                    (Some(c), _) => c.to_string(),
                    (None, Some(r)) => format!("closed ({r:?})"),
                    (None, None) => "closed".to_string(),
                };
                ("down".to_string(), peer, Some(why))
            }
        }))
    }

    /// This library's counters.
    fn counters(&self, py: Python<'_>) -> PyResult<HashMap<&'static str, u64>> {
        let c = py.detach(|| self.with(|l| l.counters()))?;
        Ok(HashMap::from([
            ("sent", c.sent),
            ("received", c.received),
            ("failed", c.failed),
        ]))
    }

    /// Releases the namespace: peers are told, its waiting operations are forgotten.
    fn close(&self, py: Python<'_>) {
        let l = self.lib.lock().unwrap_or_else(|p| p.into_inner()).take();
        Library::give_up(py, l);
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.lib.lock().unwrap_or_else(|p| p.into_inner()).is_none()
    }
}

impl Drop for Library {
    fn drop(&mut self) {
        let l = self.lib.get_mut().unwrap_or_else(|p| p.into_inner()).take();
        if l.is_some() {
            Python::attach(|py| Library::give_up(py, l));
        }
    }
}

#[pymethods]
impl Op {
    fn __repr__(&self) -> String {
        format!("<tagspace Op {}>", self.id)
    }
}

/// `"IP:PORT"` a peer could connect to, or ValueError naming what is wrong.
fn socket_address(text: &str) -> PyResult<SocketAddr> {
    dialable_address(text).map_err(|e| PyValueError::new_err(format!("advertise address {e}")))
}

fn parse_layout(spec: &str) -> PyResult<TagLayout> {
    TagLayout::parse_spec(spec).map_err(|e| PyValueError::new_err(format!("layout {spec:?}: {e}")))
}

/// A foreign pattern: a preset of the table (`"rapidsmpf"`) or `"TAG/MASK"`.
fn parse_pattern(p: &str) -> PyResult<RawMatcher> {
    if let Some(row) = foreign::preset(p) {
        return Ok(row.pattern);
    }
    let bad = || {
        PyValueError::new_err(format!(
            "foreign pattern {p:?} is neither a preset ({}) nor TAG/MASK",
            foreign::FOREIGN
                .iter()
                .map(|r| r.preset)
                .collect::<Vec<_>>()
                .join(", ")
        ))
    };
    let (t, m) = p.split_once('/').ok_or_else(bad)?;
    let num = |s: &str| tagspace_core::layout::parse_number(s.trim()).ok_or_else(bad);
    Ok(RawMatcher::new(num(t)?, num(m)?))
}

fn check_layout_against(layout: &TagLayout, patterns: &[String]) -> PyResult<()> {
    let named = patterns
        .iter()
        .map(|p| Ok((p.as_str(), parse_pattern(p)?)))
        .collect::<PyResult<Vec<_>>>()?;
    foreign::check(layout, &named).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// A layout SPEC under which none of `patterns` (presets such as `"rapidsmpf"`, or
/// `"TAG/MASK"`) can take a tagspace message, as `tagspace layout --against` prints it.
#[pyfunction]
#[pyo3(signature = (*patterns, width = 8))]
fn layout_against(patterns: Vec<String>, width: u32) -> PyResult<String> {
    let ms = patterns
        .iter()
        .filter(|p| foreign::preset(p).is_none_or(|r| r.kind == foreign::Kind::Wildcard))
        .map(|p| parse_pattern(p))
        .collect::<PyResult<Vec<_>>>()?;
    let layout = foreign::choose_layout(&ms, width, &[])
        .map_err(|e| PyValueError::new_err(format!("{patterns:?}: {e}")))?;
    let spec = layout.spec().to_string();
    Ok(spec)
}

/// Raises ValueError naming the first of `patterns` that can take a tag of layout `spec`.
#[pyfunction]
#[pyo3(signature = (spec, *patterns))]
fn check_layout(spec: &str, patterns: Vec<String>) -> PyResult<()> {
    check_layout_against(&parse_layout(spec)?, &patterns)
}

/// The UCX version loaded in this process (the wheel's, shared with ucxx).
#[pyfunction]
fn ucx_version() -> (u32, u32, u32) {
    tagspace_ucx::ucp::ucx_version()
}

#[pymodule]
fn _tagspace(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Node>()?;
    m.add_class::<Library>()?;
    m.add_class::<Op>()?;
    m.add_function(wrap_pyfunction!(ucx_version, m)?)?;
    m.add_function(wrap_pyfunction!(layout_against, m)?)?;
    m.add_function(wrap_pyfunction!(check_layout, m)?)?;
    m.add("TagspaceError", py.get_type::<TagspaceError>())?;
    m.add("NotConnectedError", py.get_type::<NotConnectedError>())?;
    m.add("NotAnnouncedError", py.get_type::<NotAnnouncedError>())?;
    m.add("PeerDownError", py.get_type::<PeerDownError>())?;
    m.add("UcxError", py.get_type::<UcxError>())?;
    m.add("ClosedError", py.get_type::<ClosedError>())?;
    Ok(())
}
