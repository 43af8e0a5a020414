"""tagspace on ucxx's worker and endpoints.

Several libraries in one process share ucxx's worker and one endpoint per peer; tagspace gives
each a namespace of tags (and Active Message ids) that every process agrees on through a small
handshake over those endpoints, so no library ever receives another's messages, whatever order
each process registered them in.

Two ways to move data, both namespaced:

* ucxx's own calls with tagspace's tags (the zero-overhead path)::

      tag = lib.tag(peer, payload)                 # on the sender
      await ep.send(buf, tag=tag, force_tag=True)
      tag, _mask = lib.matcher(peer, payload)      # on the receiver (full mask: only
                                                   # that peer's messages match)
      await ep.recv(buf, tag=tag, force_tag=True)

* tagspace's own send/recv with Python buffers (``lib.send``/``lib.recv``/``lib.wait`` and
  their awaitable forms ``asend``/``arecv``), which also fail cleanly when the peer goes down.

A minimal, runnable check that needs no ucxx (it only builds the error a caller sees)::

    >>> import tagspace
    >>> issubclass(tagspace.PeerDownError, tagspace.TagspaceError)
    True
    >>> tagspace.Node(0)
    Traceback (most recent call last):
    ...
    ValueError: the worker handle is 0 (closed, or not a UCX handle)

Importing this package loads UCX from the ``libucx`` wheel first (as ucxx does), so that the
native extension binds to the same ``libucp`` as ucxx, whichever is imported first.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Optional, Sequence, Tuple, Union

import libucx as _libucx

_libucx.load_library()

from . import _tagspace  # noqa: E402  (UCX must be loaded first)
from ._tagspace import (  # noqa: E402
    ClosedError,
    NotAnnouncedError,
    NotConnectedError,
    Op,
    PeerDownError,
    TagspaceError,
    UcxError,
    check_layout,
    layout_against,
    ucx_version,
)

__all__ = [
    "Node",
    "Library",
    "Op",
    "TagspaceError",
    "NotConnectedError",
    "NotAnnouncedError",
    "PeerDownError",
    "UcxError",
    "ClosedError",
    "ucx_version",
    "layout_against",
    "check_layout",
]

Buffer = Union[bytes, bytearray, memoryview]


def _handle(obj: Any, attr: str, what: str) -> Tuple[int, Any]:
    """The raw handle of a ucxx object (or an int handle), and the object to keep alive.
    Refuses a ucxx object that is closed or failed (``closed``)."""
    if isinstance(obj, bool):
        raise TypeError(f"{what}: expected a ucxx object or an int handle, got a bool")
    if isinstance(obj, int):
        return obj, None
    if getattr(obj, "closed", False) is True:
        raise ValueError(f"{what}: the ucxx object is closed (or its peer failed)")
    h = getattr(obj, attr, None)
    if isinstance(h, int) and not isinstance(h, bool):
        return h, obj
    raise TypeError(
        f"{what}: expected a ucxx object with .{attr} or an int handle, "
        f"got {type(obj).__name__}"
    )


def _address(addr: Any) -> Optional[str]:
    """``"IP:PORT"`` from a ucxx listener (``.ip``, ``.port``; one on every interface, as
    ucxx's are by default, is told as this host's address, ``ucxx.get_address()``), an
    ``(ip, port)`` pair or a string; None stays None."""
    if addr is None or isinstance(addr, str):
        return addr
    if isinstance(addr, tuple) and len(addr) == 2:
        ip, port = addr
    elif hasattr(addr, "port") and hasattr(addr, "ip"):
        ip, port = addr.ip, addr.port
        if str(ip) in ("", "0.0.0.0", "::"):
            import ucxx

            ip = ucxx.get_address()
    else:
        raise TypeError(
            f"advertise: expected a ucxx listener, (ip, port) or \"IP:PORT\", "
            f"got {type(addr).__name__}"
        )
    if not isinstance(port, int) or isinstance(port, bool):
        raise TypeError(f"advertise: the port must be an int, got {type(port).__name__}")
    ip = str(ip)
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def _bytes(data: Buffer) -> bytes:
    if isinstance(data, bytes):
        return data
    try:
        return memoryview(data).tobytes()
    except TypeError:
        raise TypeError(
            f"data must support the buffer protocol (bytes, bytearray, memoryview, numpy "
            f"arrays), not {type(data).__name__}"
        ) from None


class Node:
    """A tagspace node on ucxx's worker (or another host's ``UCS_THREAD_MODE_MULTI`` worker).

    ``worker``: None for ucxx's current worker (``ucxx.init()`` first), a ucxx worker object
    (``.handle``), or a raw ``ucp_worker_h`` as an int. ``progress``: ``"host"`` (ucxx
    progresses its worker, in "thread" or "blocking" mode) or ``"node"``. Every call is
    thread-safe. Close it before ``ucxx.reset()``.

    ``layout``: the tag layout SPEC of the process (every peer must use the same one), e.g.
    ``layout_against("rapidsmpf")`` for a worker that rapidsmpf shares; the first node of a
    process fixes it, and a later node asking for another raises ValueError. ``foreign``:
    presets (``"rapidsmpf"``, ``"blazingsql"``, ...) or ``"TAG/MASK"`` patterns of libraries
    that do not use tagspace on this worker: the node refuses to start, naming the pattern, if
    one can take a tagspace message under the layout.

    ``advertise``: where peers should connect to this process again after a fault — the
    ucxx listener (``ucxx.create_listener(...)``; one on every interface is told as
    ``ucxx.get_address()``), ``(ip, port)`` or ``"IP:PORT"``; also
    settable later with ``advertise()``. A peer that loses this process to a fault (a failed
    endpoint, an unanswered heartbeat; not an orderly close) is then told to reconnect
    (``reconnect_needed``/``areconnect`` on its side).
    """

    def __init__(
        self,
        worker: Any = None,
        *,
        progress: str = "host",
        heartbeat_interval_ms: int = 1000,
        heartbeat_timeout_ms: int = 30000,
        layout: Optional[str] = None,
        foreign: Sequence[str] = (),
        advertise: Any = None,
    ) -> None:
        if isinstance(foreign, str):
            foreign = [foreign]
        if worker is None:
            import ucxx

            worker = ucxx.core._get_ctx().worker
        handle, keep = _handle(worker, "handle", "worker")
        self._raw = _tagspace.Node(
            handle,
            keep,
            progress,
            heartbeat_interval_ms,
            heartbeat_timeout_ms,
            layout,
            list(foreign),
            _address(advertise),
        )
        # id(endpoint object) -> the handle it had when attached: a ucxx endpoint whose peer
        # failed reports itself closed, but its handle stays valid (and attached) until it is
        # closed with ``await ep.close()``, which must come after ``detach``.
        self._attached: dict = {}

    def _ep(self, ep: Any) -> int:
        """The handle of an endpoint given as attached (object or int)."""
        if isinstance(ep, int) and not isinstance(ep, bool):
            return ep
        h = self._attached.get(id(ep))
        if h is not None:
            return h
        return _handle(ep, "ucp_endpoint", "endpoint")[0]

    @property
    def token(self) -> int:
        """This process's token: how peers name it (``peer`` in routing calls)."""
        return self._raw.token

    @property
    def info(self) -> dict:
        """The worker's thread mode, the UCX loaded, who progresses."""
        return self._raw.info

    @property
    def closed(self) -> bool:
        return self._raw.closed

    def attach(
        self, ep: Any, side: str, *, watch: bool = False, reconnects: Optional[int] = None
    ) -> None:
        """Lets tagspace use endpoint ``ep`` (a ucxx endpoint or a ``ucp_ep_h`` int); the
        endpoint object is kept alive until ``detach``.

        ``side``: ``"initiator"`` on the process that called ``create_endpoint`` (connected to
        the peer's listener), ``"acceptor"`` on the one whose listener handed it over.
        ``watch``: report the peer failed from ucxx's close callback
        (``ep.set_close_callback``, which holds one callback: it replaces one set before).
        Without it, a dead peer is noticed by tagspace's heartbeat, or by calling
        ``peer_failed`` yourself.
        ``reconnects``: the token of a peer ``reconnect_needed`` reported, when ``ep`` was
        connected to its address (side ``"initiator"``): the peer keeps this connection over
        any older one to this process that it has not found dead yet, and it counts in
        ``stats()["reconnects"]`` once back.
        """
        handle, keep = _handle(ep, "ucp_endpoint", "endpoint")
        if watch and not callable(getattr(ep, "set_close_callback", None)):
            raise TypeError("watch=True needs a ucxx endpoint (set_close_callback)")
        if reconnects is None:
            self._raw.attach(handle, side, keep)
        elif side != "initiator":
            raise ValueError("reconnects=: the process that connects again is the initiator")
        else:
            self._raw.attach_reconnect(handle, reconnects, keep)
        if keep is not None:
            self._attached[id(ep)] = handle
        if watch:
            raw = self._raw

            def closed() -> None:
                # On ucxx's thread; never raise into ucxx (the node may be closed already).
                try:
                    raw.peer_failed(handle, -25)
                except TagspaceError:
                    pass

            ep.set_close_callback(closed)

    def detach(self, ep: Any) -> None:
        """Stops using ``ep``; call it before closing the endpoint (``await ep.close()``),
        also after its peer failed."""
        handle = self._ep(ep)
        self._raw.detach(handle)
        self._attached.pop(id(ep), None)

    async def close_endpoint(self, ep: Any) -> None:
        """Detaches ``ep`` (if attached) and closes it with ucxx (``await ep.close()``), in
        that order; a close that fails because the peer is already gone is not an error."""
        if id(ep) in self._attached and not self.closed:
            self.detach(ep)
        try:
            await ep.close()
        except Exception:  # ucxx raises when the peer closed or failed first
            pass

    def peer_failed(self, ep: Any, status: int = -25) -> None:
        """``ep``'s peer failed (from an error or close callback; any thread)."""
        self._raw.peer_failed(self._ep(ep), status)

    def peer_on(self, ep: Any) -> Optional[int]:
        """The token of the peer on ``ep`` once the handshake finished, else None."""
        return self._raw.peer_on(self._ep(ep))

    def wait_peer(self, ep: Any, timeout: float = 30.0) -> int:
        """Progresses until the handshake on ``ep`` finished; returns the peer's token."""
        deadline = time.monotonic() + timeout
        while True:
            token = self.peer_on(ep)
            if token is not None:
                return token
            if time.monotonic() > deadline:
                raise TimeoutError(f"no tagspace handshake on {ep!r} within {timeout} s")
            if not self._raw.progress():
                time.sleep(0.0005)

    async def apeer(self, ep: Any, timeout: float = 30.0) -> int:
        """Awaitable ``wait_peer``."""
        return await _poll(self, lambda: self.peer_on(ep), timeout, f"handshake on {ep!r}")

    def progress(self) -> bool:
        """Handles what arrived (the waits here call it); True if anything happened."""
        return self._raw.progress()

    def register(self, name: str) -> "Library":
        """Registers library ``name`` (its well-known namespace, or a free dynamic one that
        peers learn through the handshake)."""
        return Library(self, self._raw.register(name))

    def peers(self) -> list:
        """Tokens of peers with an established connection."""
        return self._raw.peers()

    def advertise(self, address: Any) -> None:
        """Tells peers (those connected now at once, later ones in the handshake) where to
        connect to this process again after a fault: a ucxx listener, ``(ip, port)``,
        ``"IP:PORT"``, or None for nothing. ValueError for an address no peer could connect
        to (``0.0.0.0``, port 0)."""
        self._raw.advertise(_address(address))

    @property
    def advertised(self) -> Optional[str]:
        """The address peers are told (``"IP:PORT"``), or None."""
        return self._raw.advertised

    def reconnect_needed(self) -> Optional[Tuple[int, str, int]]:
        """The next peer lost to a fault that this process should connect to again, oldest
        first: ``(token, ip, port)`` — where that peer said it listens — or None. Each loss is
        reported once, about 200 ms after the peer went down (an orderly close that arrives
        late cancels it). Connect there, ``attach(ep, "initiator", reconnects=token)``, and the
        peer proves the same identity again; routing and ``recv(peer=...)`` resume on the new
        endpoint. What was
        in flight when the connection failed is not sent again: it failed with PeerDownError.
        ``areconnect`` does all of it with ucxx."""
        return self._raw.reconnect_needed()

    async def areconnect(self, *, watch: bool = True, timeout: float = 30.0) -> list:
        """Connects again, with ``ucxx.create_endpoint``, to every peer ``reconnect_needed``
        reports now, attaches each new endpoint as the initiator and waits for its handshake.
        Returns ``[(token, result), ...]``: ``result`` is the new ucxx endpoint (close it with
        ``close_endpoint`` when done), or the exception that connecting or the handshake
        raised (the peer is not reported again; call ``areconnect`` later only for new losses).
        The endpoint's peer (``peer_on(ep)``) is ``token`` unless another process listens at
        that address now (the peer restarted: a new peer, and the lost one is given up). The
        peer's own listener callback attaches its side as ``"acceptor"``, as for any
        connection."""
        import ucxx

        done = []
        while True:
            lost = self.reconnect_needed()
            if lost is None:
                return done
            token, ip, port = lost
            try:
                ep = await asyncio.wait_for(ucxx.create_endpoint(ip, port), timeout)
                self.attach(ep, "initiator", watch=watch, reconnects=token)
                await self.apeer(ep, timeout)
                done.append((token, ep))
            except Exception as e:  # noqa: BLE001 (handed to the caller per peer)
                done.append((token, e))

    def sender_of(self, tag: int) -> Optional[int]:
        """The proven peer (a token) that sent a message with ``tag``, or None: no proven
        peer was given the pair value it carries, so a process that never proved its
        identity here made it up (drop the message)."""
        return self._raw.sender_of(tag)

    def stats(self) -> dict:
        return self._raw.stats()

    def close(self, timeout_ms: int = 1000) -> None:
        """Closes the node's libraries and connections; ucxx's worker and endpoints stay."""
        self._raw.close(timeout_ms)

    def __enter__(self) -> "Node":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return repr(self._raw)


async def _poll(node: Node, ready: Any, timeout: float, what: str) -> Any:
    """Awaits ``ready()`` returning non-None, progressing the node and yielding to the loop
    (so ucxx's "blocking" mode, which progresses on the loop, keeps running)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = 0.0
    while True:
        value = ready()
        if value is not None:
            return value
        if loop.time() > deadline:
            raise TimeoutError(f"{what} did not finish in {timeout} s")
        if node._raw.progress():
            delay = 0.0
        await asyncio.sleep(delay)
        delay = min(max(delay * 2, 1e-5), 1e-3)


class Library:
    """One library's namespace on a node (from ``Node.register``); thread-safe."""

    def __init__(self, node: Node, raw: Any) -> None:
        self._node = node
        self._raw = raw

    @property
    def name(self) -> str:
        return self._raw.name

    @property
    def namespace_id(self) -> int:
        """The namespace's id in this process (peers may use another: the handshake maps it)."""
        return self._raw.namespace_id

    @property
    def closed(self) -> bool:
        return self._raw.closed

    def tag(self, peer: int, payload: int) -> int:
        """The tag carrying ``payload`` to this library on ``peer`` (for ucxx's
        ``send(..., tag=..., force_tag=True)``). NotConnectedError / NotAnnouncedError until
        the handshake finished and the peer registered the name."""
        return self._raw.tag(peer, payload)

    def wait_tag(self, peer: int, payload: int = 0, timeout: float = 30.0) -> int:
        """``tag``, progressing until the peer has registered the name."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._raw.tag(peer, payload)
            except (NotConnectedError, NotAnnouncedError):
                if time.monotonic() > deadline:
                    raise
            if not self._node._raw.progress():
                time.sleep(0.0005)

    async def atag(self, peer: int, payload: int = 0, timeout: float = 30.0) -> int:
        """Awaitable ``wait_tag``."""

        def ready() -> Optional[int]:
            try:
                return self._raw.tag(peer, payload)
            except (NotConnectedError, NotAnnouncedError):
                return None

        return await _poll(self._node, ready, timeout, f"{self.name} on peer {peer:#x}")

    def matcher(self, peer: int, payload: int) -> Tuple[int, int]:
        """``(tag, mask)`` receiving ``payload`` sent to this library here by ``peer`` (a
        token). The mask is full (ucxx's ``recv(..., tag=tag, force_tag=True)`` matches
        exactly), and only ``peer``'s messages match: the tag carries, in the layout's pair
        field, a value this node gives ``peer`` alone once it has proven its identity."""
        return self._raw.matcher(peer, payload)

    def matcher_any_peer(self, payload: int) -> Tuple[int, int]:
        """``(tag, mask)`` receiving ``payload`` sent here by any peer: every bit fixed but
        the pair field (a partial mask). It also takes a message a process that never proved
        its identity here made up: check the received tag with ``Node.sender_of`` and drop
        the message when that is None."""
        return self._raw.matcher_any_peer(payload)

    def inbox_tag(self, peer: int) -> int:
        """The peer's inbox tag for this library ("a new transmission has begun": one tag per
        library, whatever the payload), for ucxx's own ``send(..., force_tag=True)``."""
        return self._raw.inbox_tag(peer)

    def inbox_matcher(self, peer: int) -> Tuple[int, int]:
        """``(tag, mask)`` of this library's inbox here as ``peer`` sends to it, for ucxx's
        own recv or ``tag_probe``."""
        return self._raw.inbox_matcher(peer)

    def inbox_matcher_any_peer(self) -> Tuple[int, int]:
        """``(tag, mask)`` of this library's inbox from any peer (the pair field free; check
        what it takes with ``Node.sender_of``)."""
        return self._raw.inbox_matcher_any_peer()

    def send(self, peer: int, payload: int, data: Buffer, timeout_ms: int = 10000) -> Op:
        """Starts sending ``data`` (any buffer; copied) to ``payload`` on ``peer``."""
        return self._raw.send(peer, payload, _bytes(data), timeout_ms)

    def recv(self, payload: int, max_len: int, peer: Optional[int] = None) -> Op:
        """Posts a receive for ``payload`` (at most ``max_len`` bytes). With ``peer``: that
        peer's message only (an exact tag: its pair value), failing with PeerDownError when
        the peer goes down first. Without: any proven peer's (the pair field free; a message
        a process that never proved itself here made up is dropped and the receive waits
        on)."""
        return self._raw.recv(payload, max_len, peer)

    def send_inbox(self, peer: int, data: Buffer, timeout_ms: int = 10000) -> Op:
        """Starts sending ``data`` to this library's inbox on ``peer`` ("a new transmission
        has begun")."""
        return self._raw.send_inbox(peer, _bytes(data), timeout_ms)

    def probe_inbox(self, max_len: int) -> Optional[Op]:
        """Takes the next inbox message from any proven peer if one waits: an operation whose
        result is the data (``wait``/``await_op`` it), or None. Inbox messages with a pair
        value no proven peer was given are dropped on the way."""
        return self._raw.probe_inbox(max_len)

    async def anext_inbox(self, max_len: int, timeout: float = 30.0) -> bytes:
        """Awaits the next inbox message and returns its data."""
        op = await _poll(self._node, lambda: self._raw.probe_inbox(max_len), timeout,
                         f"{self.name}'s inbox")
        data = await self.await_op(op, timeout)
        assert data is not None
        return data

    def am_send(self, peer: int, local: int, data: Buffer, timeout_ms: int = 10000) -> Op:
        """Starts sending an Active Message to this library's local AM id ``local`` on
        ``peer`` (tagspace's AM ids, never ucxx's id 0)."""
        return self._raw.am_send(peer, local, _bytes(data), timeout_ms)

    def am_listen(self, local: int) -> None:
        """Starts receiving Active Messages on local AM id ``local``."""
        self._raw.am_listen(local)

    def am_take(self, local: int) -> Optional[bytes]:
        """The next Active Message on ``local``, or None."""
        return self._raw.am_take(local)

    async def am_recv(self, local: int, timeout: float = 30.0) -> bytes:
        """Awaits the next Active Message on ``local``."""
        return await _poll(self._node, lambda: self._raw.am_take(local), timeout,
                           f"{self.name}'s AM {local}")

    def oldest_waiting(self) -> Optional[Tuple[int, int]]:
        """``(tag, length)`` of the oldest message for this library nobody received yet, or
        None (for monitoring a library that stopped receiving)."""
        return self._raw.oldest_waiting()

    def take(self, op: Op) -> Tuple[bool, Optional[bytes]]:
        """``(True, result)`` once ``op`` finished (bytes for a receive), ``(False, None)``
        before; raises the operation's error."""
        return self._raw.take(op)

    def wait(self, op: Op, timeout: float = 30.0) -> Optional[bytes]:
        """Waits for ``op`` (the GIL released), returning its result or raising its error."""
        return self._raw.wait(op, timeout)

    async def await_op(self, op: Op, timeout: float = 30.0) -> Optional[bytes]:
        """Awaitable ``wait``: works with ucxx in "thread" and in "blocking" mode."""
        done: list = []

        def ready() -> Optional[bool]:
            finished, value = self._raw.take(op)
            if finished:
                done.append(value)
                return True
            return None

        await _poll(self._node, ready, timeout, f"operation {op.id}")
        return done[0]

    async def asend(
        self, peer: int, payload: int, data: Buffer, timeout: float = 30.0
    ) -> None:
        """Sends and awaits completion."""
        await self.await_op(self.send(peer, payload, data, int(timeout * 1000)), timeout)

    async def arecv(
        self, payload: int, max_len: int, peer: Optional[int] = None, timeout: float = 30.0
    ) -> bytes:
        """Receives and returns the data."""
        data = await self.await_op(self.recv(payload, max_len, peer), timeout)
        assert data is not None
        return data

    def cancel(self, op: Op) -> None:
        self._raw.cancel(op)

    def listen(self) -> None:
        """Starts queueing peer events (``peer_event``): peers already up are reported."""
        self._raw.listen()

    def peer_event(self) -> Optional[tuple]:
        """``("up", peer, None)``, ``("down", peer, why)`` or None."""
        return self._raw.peer_event()

    def counters(self) -> dict:
        return self._raw.counters()

    def close(self) -> None:
        """Releases the namespace (peers are told; waiting operations are forgotten)."""
        self._raw.close()

    def __repr__(self) -> str:
        if self.closed:
            return "<tagspace Library (closed)>"
        return f"<tagspace Library {self.name!r} id={self.namespace_id}>"
