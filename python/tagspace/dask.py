"""tagspace on a Dask cluster that runs on ucxx (``distributed-ucxx``, ``protocol="ucxx"``).

Every worker process has one ucxx worker, which Dask's comms use; libraries that run in Dask
tasks (a shuffle, collectives, RAFT, rapidsmpf) share it. Register the plugin once::

    client.register_plugin(tagspace.dask.Plugin(layout=tagspace.layout_against("rapidsmpf")))

and on each worker it adopts that ucxx worker (a :class:`tagspace.Node` in host mode: ucxx keeps
progressing it, in "blocking" or "thread" mode), starts tagspace's own ucxx listener on it,
publishes where that listener is through the scheduler, and connects to another worker the
first time a library there is used. Inside a task, peers are Dask worker addresses::

    lib = tagspace.dask.register("shuffle")
    lib.send(other_worker_address, payload, data)    # blocking form, in a task thread
    data = lib.recv(payload, max_len, other_worker_address)  # only that worker's message
    # (its tags carry a value this worker gave it alone); fails if that worker goes down.
    # Without the address: from any worker of the cluster, never from a stranger on the port

and on the event loop (``client.run`` of a coroutine, async tasks) the awaitable forms
``asend``/``arecv``/``aendpoint``. A worker that leaves (closed, killed, lost) is
:class:`tagspace.PeerDownError` for every library on every worker connected to it: at once
when UCX reports its endpoint failed, else after ``heartbeat_timeout_ms``. A worker lost to a
fault that is still alive (a stopped process that resumes, a link that comes back) is
connected to again by itself, with the same identity: the worker that lost it dials its
listener, and its libraries see it come back (``("up", address, None)``). A worker the nanny
restarts comes back with a new identity at its new address.

The layout: every worker must use the same one (the plugin is the one place it is set); a
worker whose process already fixed another layout refuses to set up, naming both.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

from distributed import WorkerPlugin, get_worker

from . import (
    Buffer,
    ClosedError,
    Library,
    Node,
    NotConnectedError,
    PeerDownError,
    TagspaceError,
    _poll,
    check_layout,
)

__all__ = [
    "Plugin",
    "WorkerLibrary",
    "UnknownWorkerError",
    "node",
    "register",
    "workers",
    "PLUGIN_NAME",
]

logger = logging.getLogger("tagspace.dask")

#: The name the plugin is registered under on every worker.
PLUGIN_NAME = "tagspace"
# Scheduler metadata: ["tagspace", worker address] -> {"token", "host", "port"} (None once the
# worker tore the plugin down).
_META = "tagspace"
# The initiator's first message on a new endpoint (ucxx's own tag for that endpoint): magic,
# the length of its Dask address, the address; fixed size, so the acceptor posts one buffer.
_HELLO_MAGIC = b"TSDK"
_HELLO_SIZE = 512
#: How often the plugin handles tagspace's own traffic on an idle worker (seconds).
IDLE_TICK_S = 0.005


class UnknownWorkerError(TagspaceError, LookupError):
    """A worker address that is not a tagspace worker of this cluster (never was, or not
    yet: the plugin not registered there)."""


def _hello(address: str) -> bytearray:
    raw = address.encode()
    if len(raw) > _HELLO_SIZE - 6:
        raise ValueError(f"worker address {address!r} is longer than {_HELLO_SIZE - 6} bytes")
    buf = bytearray(_HELLO_SIZE)
    buf[:4] = _HELLO_MAGIC
    buf[4:6] = len(raw).to_bytes(2, "little")
    buf[6 : 6 + len(raw)] = raw
    return buf


def _parse_hello(buf: bytes) -> str:
    """The Dask address in a hello; ValueError naming what is wrong (any bytes may arrive)."""
    if bytes(buf[:4]) != _HELLO_MAGIC:
        raise ValueError(f"not a tagspace hello (starts {bytes(buf[:4])!r})")
    n = int.from_bytes(buf[4:6], "little")
    if n == 0 or n > _HELLO_SIZE - 6:
        raise ValueError(f"hello address length {n} is out of range 1..{_HELLO_SIZE - 6}")
    try:
        return bytes(buf[6 : 6 + n]).decode()
    except UnicodeDecodeError:
        raise ValueError("hello address is not UTF-8") from None


class Plugin(WorkerPlugin):
    """The worker plugin: ``client.register_plugin(tagspace.dask.Plugin(...))``.

    ``layout``: the tag layout SPEC every worker uses (``tagspace.layout_against(...)`` for
    libraries that share the worker and do not use tagspace, e.g. ``"rapidsmpf"``); checked on
    the client before the plugin is sent. ``foreign``: their presets or ``"TAG/MASK"``
    patterns; a worker refuses to set up if one can reach a tagspace message. Heartbeats: a
    peer silent for ``heartbeat_timeout_ms`` is down.
    """

    name = PLUGIN_NAME
    idempotent = False

    def __init__(
        self,
        *,
        layout: Optional[str] = None,
        foreign: Sequence[str] = (),
        heartbeat_interval_ms: int = 500,
        heartbeat_timeout_ms: int = 5000,
        connect_timeout: float = 30.0,
    ) -> None:
        if isinstance(foreign, str):
            foreign = [foreign]
        self.foreign = list(foreign)
        if layout is not None or self.foreign:
            # The error (a bad SPEC, a pattern in reach) is the caller's, here, not a worker's.
            check_layout(layout if layout is not None else "default", *self.foreign)
        if not 0 < heartbeat_interval_ms < heartbeat_timeout_ms:
            raise ValueError(
                f"heartbeat_interval_ms ({heartbeat_interval_ms}) must be positive and below "
                f"heartbeat_timeout_ms ({heartbeat_timeout_ms})"
            )
        self.layout = layout
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.connect_timeout = connect_timeout
        self._state: Optional[_WorkerState] = None

    def __getstate__(self) -> dict:
        d = dict(self.__dict__)
        d["_state"] = None
        return d

    async def setup(self, worker: Any) -> None:
        self._state = await _WorkerState.start(self, worker)

    async def teardown(self, worker: Any) -> None:
        state, self._state = self._state, None
        if state is not None:
            await state.close()


def _state(worker: Any = None) -> "_WorkerState":
    if worker is None:
        try:
            worker = get_worker()
        except ValueError:
            worker = _the_worker()
        if worker is None:
            raise RuntimeError(
                "tagspace.dask: not on a Dask worker (call it from a task, or an event-loop "
                "coroutine that client.run sends)"
            )
    plugin = worker.plugins.get(PLUGIN_NAME)
    state = getattr(plugin, "_state", None)
    if state is None:
        raise RuntimeError(
            f"tagspace.dask: the plugin is not set up on worker {worker.address} (register "
            f"it first: client.register_plugin(tagspace.dask.Plugin()))"
        )
    if state.closed:
        raise ClosedError(f"tagspace.dask: the plugin on worker {worker.address} is closed")
    return state


def _the_worker() -> Any:
    """The one Dask worker of this process (on its event loop, where ``get_worker`` does not
    answer), or None."""
    from distributed import Worker

    running = [w for w in list(Worker._instances) if w.status.name in ("running", "paused")]
    return running[0] if len(running) == 1 else None


def node() -> Node:
    """This worker's :class:`tagspace.Node` (from a task or an event-loop coroutine)."""
    return _state().node


def register(name: str) -> "WorkerLibrary":
    """Library ``name`` on this worker (registered the first time; the same object after)."""
    return _state().library(name)


def workers() -> Dict[str, int]:
    """Dask address -> tagspace token of every worker this one has connected to."""
    st = _state()
    return {a: t for a, t in st.addr_token.items() if t in st.node.peers()}


class _WorkerState:
    """One worker's tagspace: the node, its listener, endpoints, and the address book."""

    def __init__(self, plugin: Plugin, worker: Any, node_: Node, listener: Any) -> None:
        self.plugin = plugin
        self.worker = worker
        self.address: str = worker.address
        self.node = node_
        self.listener = listener
        self.loop = asyncio.get_running_loop()
        self.loop_thread = threading.get_ident()
        self.closed = False
        self.eps: List[Any] = []
        self.addr_token: Dict[str, int] = {}
        self.token_addr: Dict[int, str] = {}
        self.token_ep: Dict[int, Any] = {}
        self.connecting: Dict[str, "asyncio.Future[int]"] = {}
        self.libs: Dict[str, WorkerLibrary] = {}
        self.libs_lock = threading.Lock()
        self.ticker: Optional["asyncio.Future[None]"] = None
        # Tokens the node reported lost to a fault; the next connection to one says it
        # reconnects (its peer then keeps it over an old one it has not found dead yet).
        self.lost: Dict[int, str] = {}

    @classmethod
    async def start(cls, plugin: Plugin, worker: Any) -> "_WorkerState":
        import ucxx
        from distributed.comm import get_address_host

        if not str(worker.address).startswith("ucxx://"):
            raise RuntimeError(
                f"tagspace.dask needs a cluster on protocol='ucxx' (distributed-ucxx); this "
                f"worker is at {worker.address}"
            )
        node_ = Node(
            ucxx.core._get_ctx().worker,
            progress="host",
            heartbeat_interval_ms=plugin.heartbeat_interval_ms,
            heartbeat_timeout_ms=plugin.heartbeat_timeout_ms,
            layout=plugin.layout,
            foreign=plugin.foreign,
        )
        holder: List[_WorkerState] = []

        async def on_connect(ep: Any) -> None:
            if holder:
                await holder[0]._accept(ep)
            else:  # before setup finished: nobody can know the address yet
                await ep.close()

        try:
            listener = ucxx.create_listener(on_connect)
        except BaseException:
            node_.close()
            raise
        st = cls(plugin, worker, node_, listener)
        holder.append(st)
        host = get_address_host(worker.address)
        try:
            # Where a worker that loses this one to a fault connects again.
            node_.advertise((host, listener.port))
        except ValueError as e:
            logger.warning("tagspace.dask: peers cannot reconnect to this worker: %s", e)
        st.ticker = asyncio.ensure_future(st._tick())
        try:
            await worker.scheduler.set_metadata(
                keys=[_META, worker.address],
                value={"token": node_.token, "host": host, "port": listener.port},
            )
        except BaseException:
            await st.close()
            raise
        logger.info("tagspace node %#x on %s, listener port %d", node_.token, worker.address,
                    listener.port)
        return st

    async def _tick(self) -> None:
        """tagspace's side of host mode: ucxx progresses the worker; this handles what arrived
        for tagspace (handshakes, announcements, heartbeats, failures) when no call of a
        library's does, at once while there is work, every ``IDLE_TICK_S`` otherwise."""
        while not self.closed:
            try:
                busy = self.node.progress()
                self._rejoin_lost()
            except ClosedError:
                return
            except Exception:  # never let the loop die silently: peers would time out
                logger.exception("tagspace.dask: progress failed")
                busy = False
            await asyncio.sleep(0 if busy else IDLE_TICK_S)

    def _rejoin_lost(self) -> None:
        """Connects again to each worker the node reports lost to a fault (once per loss;
        the worker's scheduler metadata says where, as for a first connection)."""
        while True:
            lost = self.node.reconnect_needed()
            if lost is None:
                return
            token = lost[0]
            addr = self.token_addr.get(token)
            if addr is None:
                continue
            self.lost[token] = addr
            asyncio.ensure_future(self._rejoin(addr, token))

    async def _rejoin(self, addr: str, token: int) -> None:
        try:
            await self.connect(addr)
            logger.info("tagspace.dask: worker %s is back", addr)
        except Exception as e:  # gone for good (restarted, closed): its loss stands
            if not self.closed:
                logger.info("tagspace.dask: worker %s did not come back: %s", addr, e)
        finally:
            self.lost.pop(token, None)

    # -- connections (all on the event loop) -------------------------------------------------

    async def _accept(self, ep: Any) -> None:
        """A worker connected to this one's listener: its hello names its Dask address, which
        is believed only if the scheduler has that worker's token (= the handshake's)."""
        try:
            buf = bytearray(_HELLO_SIZE)
            await asyncio.wait_for(ep.recv(buf), self.plugin.connect_timeout)
            addr = _parse_hello(buf)
            meta = await self._lookup(addr)
            if meta is None:
                raise UnknownWorkerError(f"the hello names {addr}, not a tagspace worker")
            token = meta["token"]
            self.node.attach(ep, "acceptor", watch=True)
            self.eps.append(ep)
            try:
                on = await self.node.apeer(ep, self.plugin.connect_timeout)
            except TimeoutError:
                if token in self.node.peers():
                    # Both connected at once and the peer's other connection won (it stays
                    # attached until the worker closes).
                    logger.debug("tagspace.dask: %s connected twice; kept the other", addr)
                    return
                raise
            if on != token:
                raise ValueError(f"peer {on:#x} says it is worker {addr}, whose token is "
                                 f"{token:#x}")
            self._learn(addr, token, ep)
        except Exception as e:  # a stranger, a dead peer, a bad hello: drop this endpoint
            if not self.closed:
                logger.warning("tagspace.dask: dropped an incoming connection: %s", e)
            await self._drop(ep)

    async def _drop(self, ep: Any) -> None:
        if ep in self.eps:
            self.eps.remove(ep)
        if not self.node.closed:
            await self.node.close_endpoint(ep)
        else:
            try:
                await ep.close()
            except Exception:
                pass

    def _learn(self, addr: str, token: int, ep: Any) -> None:
        old = self.addr_token.get(addr)
        if old is not None and old != token:
            self.token_addr.pop(old, None)
        self.addr_token[addr] = token
        self.token_addr[token] = addr
        if ep is not None:
            self.token_ep.setdefault(token, ep)

    async def _lookup(self, addr: str) -> Optional[dict]:
        meta = await self.worker.scheduler.get_metadata(keys=[_META, addr], default=None)
        if meta is not None and not (isinstance(meta, dict) and isinstance(meta.get("token"), int)
                                     and isinstance(meta.get("port"), int)):
            raise TagspaceError(f"scheduler metadata for worker {addr} is malformed: {meta!r}")
        return meta

    def _connected(self, addr: str) -> Optional[int]:
        token = self.addr_token.get(addr)
        if token is not None and token in self.node.peers():
            return token
        return None

    async def connect(self, addr: str) -> int:
        """The token of worker ``addr``, connecting to it the first time."""
        if self.closed:
            raise ClosedError("tagspace.dask: the plugin is closed")
        token = self._connected(addr)
        if token is not None:
            return token
        if addr == self.address:
            raise ValueError(f"{addr} is this worker")
        pending = self.connecting.get(addr)
        if pending is None:
            pending = self.loop.create_future()
            self.connecting[addr] = pending
            try:
                pending.set_result(await self._connect(addr))
            except BaseException as e:
                pending.set_exception(e)
                pending.exception()  # retrieved: a caller alone may see it
            finally:
                del self.connecting[addr]
        return await asyncio.shield(pending)

    async def _connect(self, addr: str) -> int:
        import ucxx

        meta = await self._lookup(addr)
        if meta is None:
            raise UnknownWorkerError(
                f"{addr} is not a tagspace worker of this cluster (not a worker, gone, or the "
                f"plugin not set up there)"
            )
        token = meta["token"]
        if token in self.node.peers():  # it connected to this worker first
            # Its endpoint is learned by _accept once the handshake there has finished, which
            # may be just after this side saw the peer proven: wait for it, never record none.
            ep = await _poll(self.node, lambda: self.token_ep.get(token),
                             self.plugin.connect_timeout, f"worker {addr}'s connection")
            self._learn(addr, token, ep)
            return token
        try:
            ep = await ucxx.create_endpoint(meta["host"], meta["port"])
        except Exception as e:
            raise PeerDownError(f"worker {addr} (tagspace listener {meta['host']}:"
                                f"{meta['port']}) is unreachable: {e}") from None
        try:
            await ep.send(_hello(self.address))
            self.node.attach(ep, "initiator", watch=True,
                             reconnects=token if token in self.lost else None)
            self.eps.append(ep)
        except Exception as e:
            await self._drop(ep)
            raise PeerDownError(f"worker {addr}: {e}") from None

        def ready() -> Optional[int]:
            on = self.node.peer_on(ep)
            if on is not None and on != token:
                raise TagspaceError(f"worker {addr}'s listener is node {on:#x}, the scheduler "
                                    f"says {token:#x}")
            # A simultaneous connect may settle on the peer's endpoint instead of this one.
            return token if on is not None or token in self.node.peers() else None

        try:
            await _poll(self.node, ready, self.plugin.connect_timeout,
                             f"tagspace handshake with worker {addr}")
        except BaseException:
            await self._drop(ep)
            raise
        self._learn(addr, token, ep)
        return token

    def endpoint_of(self, token: int) -> Any:
        ep = self.token_ep.get(token)
        if ep is None or self.node.peer_on(ep) != token:
            # Reconnected (or both connected at once): the endpoint the peer is on now.
            ep = next((e for e in reversed(self.eps) if self.node.peer_on(e) == token), None)
            if ep is None:
                raise NotConnectedError(f"no connection to peer {token:#x}")
            self.token_ep[token] = ep
        return ep

    # -- from task threads -------------------------------------------------------------------

    def run(self, coro: Any, timeout: Optional[float]) -> Any:
        """Runs ``coro`` on the worker's event loop from a task thread and waits for it."""
        if threading.get_ident() == self.loop_thread:
            coro.close()
            raise RuntimeError(
                "tagspace.dask: a blocking call on the worker's event loop would stop it; use "
                "the awaitable form (asend, arecv, aconnect, aendpoint)"
            )
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise TimeoutError(f"tagspace.dask: no answer within {timeout} s") from None

    def library(self, name: str) -> "WorkerLibrary":
        with self.libs_lock:
            lib = self.libs.get(name)
            if lib is None or lib.closed:
                lib = WorkerLibrary(self, self.node.register(name))
                self.libs[name] = lib
            return lib

    async def close(self) -> None:
        """Detaches and closes everything of tagspace's on this worker, before ucxx's own
        teardown: peers are told (they see the worker down at once), then the endpoints and
        the listener are closed."""
        if self.closed:
            return
        self.closed = True
        try:
            await self.worker.scheduler.set_metadata(keys=[_META, self.address], value=None)
        except Exception:  # the scheduler may be gone first
            pass
        if self.ticker is not None:
            self.ticker.cancel()
        if not self.node.closed:
            self.node.close()
        for ep in list(self.eps):
            try:
                await asyncio.wait_for(ep.close(), 5)
            except Exception:
                pass
        self.eps.clear()
        self.listener.close()


class WorkerLibrary:
    """A library on a Dask worker, its peers named by worker address (``"ucxx://h:p"``).

    Blocking forms (``send``, ``recv``, ``tag``, ``endpoint``) are for task threads; awaitable
    forms (``asend``, ``arecv``, ``atag``, ``aendpoint``) for the worker's event loop. The
    tagspace :class:`tagspace.Library` underneath is ``.raw`` (peers named by token).
    """

    def __init__(self, state: _WorkerState, raw: Library) -> None:
        self._st = state
        self.raw = raw

    @property
    def name(self) -> str:
        return self.raw.name

    @property
    def closed(self) -> bool:
        return self.raw.closed

    # -- addresses -----------------------------------------------------------------------------

    def token(self, worker: str, timeout: float = 30.0) -> int:
        """The tagspace token of ``worker`` (connecting to it the first time)."""
        t = self._st._connected(worker)
        return t if t is not None else self._st.run(self._st.connect(worker), timeout)

    async def atoken(self, worker: str) -> int:
        return await self._st.connect(worker)

    def address(self, token: int) -> Optional[str]:
        """The Dask address of the worker with ``token``, if this worker has met it."""
        return self._st.token_addr.get(token)

    def endpoint(self, worker: str, timeout: float = 30.0) -> Any:
        """The ucxx endpoint tagspace uses to ``worker``, for ucxx's own calls with this
        library's tags (``ep.send(buf, tag=lib.tag(worker, p), force_tag=True)``)."""
        return self._st.endpoint_of(self.token(worker, timeout))

    async def aendpoint(self, worker: str) -> Any:
        return self._st.endpoint_of(await self.atoken(worker))

    # -- tags for ucxx's own calls --------------------------------------------------------------

    def tag(self, worker: str, payload: int, timeout: float = 30.0) -> int:
        """The tag carrying ``payload`` to this library on ``worker``."""
        return self.raw.wait_tag(self.token(worker, timeout), payload, timeout)

    async def atag(self, worker: str, payload: int, timeout: float = 30.0) -> int:
        return await self.raw.atag(await self.atoken(worker), payload, timeout)

    def matcher(self, worker: str, payload: int, timeout: float = 30.0) -> Tuple[int, int]:
        """``(tag, full mask)`` receiving ``payload`` here from ``worker`` only (its
        messages carry a pair value this worker gave it alone)."""
        return self.raw.matcher(self.token(worker, timeout), payload)

    async def amatcher(self, worker: str, payload: int) -> Tuple[int, int]:
        """Awaitable ``matcher`` (connects to ``worker`` the first time)."""
        return self.raw.matcher(await self.atoken(worker), payload)

    def matcher_any_worker(self, payload: int) -> Tuple[int, int]:
        """``(tag, mask)`` receiving ``payload`` here from any worker: the pair field free
        (a partial mask); check the received tag with ``sender_of``."""
        return self.raw.matcher_any_peer(payload)

    def sender_of(self, tag: int) -> Optional[str]:
        """The worker whose message arrived with ``tag``, or None for a tag no proven peer
        can have made (drop that message)."""
        token = self._st.node.sender_of(tag)
        return None if token is None else self._st.token_addr.get(token)

    # -- tagspace's own send/recv ---------------------------------------------------------------

    def send(self, worker: str, payload: int, data: Buffer, timeout: float = 30.0) -> None:
        """Sends ``data`` to ``payload`` of this library on ``worker`` and waits for it."""
        op = self.send_nb(worker, payload, data, timeout)
        self.raw.wait(op, timeout)

    def send_nb(self, worker: str, payload: int, data: Buffer, timeout: float = 30.0) -> Any:
        """Starts a send; ``wait`` for the returned operation."""
        token = self.token(worker, timeout)
        self.raw.wait_tag(token, payload, timeout)  # the peer registered this library
        return self.raw.send(token, payload, data, int(timeout * 1000))

    def recv_nb(self, payload: int, max_len: int, worker: Optional[str] = None,
                timeout: float = 30.0) -> Any:
        """Posts a receive: with ``worker``, of that worker's message only (an exact tag),
        failing with PeerDownError if that worker goes down first; without, of any proven
        worker's (a message a process that never proved itself made up is dropped)."""
        peer = None if worker is None else self.token(worker, timeout)
        return self.raw.recv(payload, max_len, peer)

    def recv(self, payload: int, max_len: int, worker: Optional[str] = None,
             timeout: float = 30.0) -> bytes:
        """Receives ``payload`` (at most ``max_len`` bytes) and returns the data."""
        data = self.raw.wait(self.recv_nb(payload, max_len, worker, timeout), timeout)
        assert data is not None
        return data

    def wait(self, op: Any, timeout: float = 30.0) -> Optional[bytes]:
        return self.raw.wait(op, timeout)

    async def asend(self, worker: str, payload: int, data: Buffer, timeout: float = 30.0) -> None:
        token = await self.atoken(worker)
        await self.raw.atag(token, payload, timeout)
        await self.raw.asend(token, payload, data, timeout)

    async def arecv(self, payload: int, max_len: int, worker: Optional[str] = None,
                    timeout: float = 30.0) -> bytes:
        peer = None if worker is None else await self.atoken(worker)
        return await self.raw.arecv(payload, max_len, peer, timeout)

    # -- peers coming and going ------------------------------------------------------------------

    def listen(self) -> None:
        """Starts queueing peer events (``peer_event``)."""
        self.raw.listen()

    def peer_event(self) -> Optional[Tuple[str, Any, Any]]:
        """``("up", address, None)``, ``("down", address, why)`` or None; the address is the
        token when this worker never learnt it."""
        ev = self.raw.peer_event()
        if ev is None:
            return None
        kind, token, why = ev
        return kind, self._st.token_addr.get(token, token), why

    def counters(self) -> dict:
        return self.raw.counters()

    def close(self) -> None:
        self.raw.close()

    def __repr__(self) -> str:
        return f"<tagspace.dask library {self.name!r} on {self._st.address}>"

