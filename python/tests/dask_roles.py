"""What test_dask.py runs on each Dask worker (the workers import it: PYTHONPATH).

Libraries on one worker's one ucxx worker, at once:
* tagspace "alpha" and "beta" (registered in another order per worker): tagspace's own path
  (awaitable on the event loop, blocking in a task thread) and ucxx's own calls with
  tagspace's tags on the plugin's endpoints;
* a RAFT-style library on raw ucxx: full-mask tags ``((1 << 31) | rank)`` in 32-bit arithmetic,
  on its own endpoints;
* rapidsmpf: the real communicator (``rapidsmpf.communicator.ucxx``) on Dask's ucxx worker and
  its barrier, and, for the part that needs a GPU (its shuffler's ``recv_any``), a library that
  repeats that probe loop exactly: ``tagProbe(tag, mask 0xFFFFFFFF, remove=true)`` then a
  receive by handle, with its sends tagged ``rank << 32 | tag``.
Every message's body names its library, path, sender, receiver, index and round.
"""

from __future__ import annotations

import asyncio
import os
import time

import ucxx
import ucxx._lib.libucxx as ucx_api
from ucxx._lib.arr import Array

import tagspace
import tagspace.dask as tsd

S: dict = {}  # this worker process's test state
LIBS = ["alpha", "beta"]
BODY = 48
FULL = (1 << 64) - 1
LOW32 = 0xFFFFFFFF
RAFT_TAG = 1  # the user tag: (1 << 31) | rank, bits 32..63 zero (RAFT's 32-bit shift)


def payload(path: int, src: int, k: int, rnd: int) -> int:
    """Small numbers, as every library uses: all inside rapidsmpf's tag range (< 2**23)."""
    return ((rnd * 2 + path) * 3 + src) * 64 + k


PROBE_TAGS = range(payload(1, 2, 63, 3) + 1)  # every tag value the tagspace payloads take


def body(lib: str, path: int, src: int, dst: int, k: int, rnd: int) -> bytes:
    b = f"{lib}|{path}|{src}>{dst}|{k}|{rnd}".encode()
    assert len(b) <= BODY
    return b.ljust(BODY, b".")


def rank_of(addr: str) -> int:
    return S["ws"].index(addr)


async def setup(ws, raw: bool = True, dask_worker=None) -> dict:
    """Registers the tagspace libraries (order per worker) and the raw libraries' listener."""
    S["ws"] = sorted(ws)
    S["me"] = dask_worker.address
    S["rank"] = rank = rank_of(S["me"])
    order = LIBS if rank % 2 == 0 else LIBS[::-1]
    for name in order:
        tsd.register(name).listen()
    S["order"] = order
    S["raw_eps"] = {}
    out = {"pid": os.getpid(), "order": order, "mode": ucxx.core._get_ctx().progress_mode,
           "info": tsd.node().info}
    if raw:
        async def on_raw(ep):
            buf = bytearray(8)
            await ep.recv(buf)
            S["raw_eps"][int.from_bytes(buf, "little")] = ep

        S["raw_listener"] = ucxx.create_listener(on_raw)
        out["port"] = S["raw_listener"].port
    return out


async def connect_raw(ports, dask_worker=None) -> int:
    rank = S["rank"]
    for r in range(rank):
        ep = await ucxx.create_endpoint("127.0.0.1", ports[S["ws"][r]])
        await ep.send(bytearray(rank.to_bytes(8, "little")))
        S["raw_eps"][r] = ep
    deadline = time.monotonic() + 60
    while len(S["raw_eps"]) < len(S["ws"]) - 1:
        assert time.monotonic() < deadline, "raw endpoints never connected"
        await asyncio.sleep(0.01)
    return len(S["raw_eps"])


# -- rapidsmpf, the real communicator -------------------------------------------------------

def _rapidsmpf_comm(nranks: int, root_address):
    from rapidsmpf.communicator.ucxx import new_communicator
    from rapidsmpf.config import Options, get_environment_variables
    from rapidsmpf.progress_thread import ProgressThread
    from rapidsmpf.statistics import Statistics

    return new_communicator(nranks, ucxx.core._get_ctx().worker, root_address,
                            Options(get_environment_variables()),
                            ProgressThread(Statistics(enable=False)))


def rapidsmpf_root(nranks: int) -> bytes:
    """A task: the root rank on Dask's ucxx worker; its address for the others."""
    from rapidsmpf.communicator.ucxx import get_root_ucxx_address

    S["rmpf"] = _rapidsmpf_comm(nranks, None)
    return get_root_ucxx_address(S["rmpf"])


def rapidsmpf_barrier(nranks: int, root: bytes) -> tuple:
    """A task: joins (non-root ranks) and passes the communicator's first barrier."""
    from rapidsmpf.communicator.ucxx import barrier

    if "rmpf" not in S:
        S["rmpf"] = _rapidsmpf_comm(nranks, ucx_api.UCXAddress.create_from_buffer(root))
    barrier(S["rmpf"])
    return S["rmpf"].rank, S["rmpf"].nranks


# -- rapidsmpf's recv_any, repeated ---------------------------------------------------------

def probe_loop(own_expected: int, timeout: float = 120.0) -> dict:
    """A task: rapidsmpf's ``recv_any`` over every tag value in PROBE_TAGS until told to stop
    and all its own messages came: what it takes that is not its own is stolen."""
    worker = ucxx.core._get_ctx().worker
    own, foreign = 0, []
    deadline = time.monotonic() + timeout
    while not (S.get("stop") and own >= own_expected):
        if time.monotonic() > deadline:
            break
        for t in PROBE_TAGS:
            p = worker.tag_probe(ucx_api.UCXXTag(t), ucx_api.UCXXTagMask(LOW32), True)
            if not p.matched:
                continue
            buf = bytearray(p.length)
            req = worker.tag_recv_with_handle(Array(buf), p)
            while not req.completed:
                time.sleep(0.0001)
            req.check_error()
            if bytes(buf).startswith(b"rmpf|"):
                own += 1
            else:
                foreign.append(hex(p.sender_tag.value))
        time.sleep(0.002)
    S.pop("stop", None)
    return {"own": own, "foreign": len(foreign), "foreign_tags": foreign[:8]}


def stop_probe(dask_worker=None) -> None:
    S["stop"] = True


# -- a round ----------------------------------------------------------------------------------

async def _guard(aw, timeout):
    """True/False for a check, None for a receive that never completed (taken by another)."""
    try:
        return await asyncio.wait_for(aw, timeout)
    except (asyncio.TimeoutError, TimeoutError):
        return None


async def round_async(rnd: int, raw: bool, n: int, timeout: float = 60.0,
                      peers=None, delay: float = 0.0, dask_worker=None) -> dict:
    """Event-loop half of a round: alpha's tagspace path, both libraries' ucxx path, and (raw)
    the RAFT-style and rapidsmpf-style sends. Receives are posted ``delay`` s after the sends
    (a library slower to receive: its messages wait in ucxx's unexpected queue meanwhile)."""
    me, rank = S["me"], S["rank"]
    peers = [w for w in (peers or S["ws"]) if w != me]
    alpha = tsd.register("alpha")
    libs = {name: tsd.register(name) for name in LIBS}

    async def ts_path(o, k):
        r = rank_of(o)
        send = asyncio.ensure_future(
            alpha.asend(o, payload(0, rank, k, rnd), body("alpha", 0, rank, r, k, rnd)))
        await asyncio.sleep(delay)
        got = await alpha.arecv(payload(0, r, k, rnd), 64, o, timeout=timeout)
        await send
        return got == body("alpha", 0, r, rank, k, rnd)

    async def ucxx_path(name, o, k):
        lib, r = libs[name], rank_of(o)
        ep = await lib.aendpoint(o)
        out = bytearray(body(name, 1, rank, r, k, rnd))
        inbuf = bytearray(BODY)
        tag_in, mask = await lib.amatcher(o, payload(1, r, k, rnd))
        assert mask == FULL
        send = asyncio.ensure_future(
            ep.send(out, tag=await lib.atag(o, payload(1, rank, k, rnd)), force_tag=True))
        await asyncio.sleep(delay)
        await ep.recv(inbuf, tag=tag_in, force_tag=True)
        await send
        return bytes(inbuf) == body(name, 1, r, rank, k, rnd)

    async def raft(o):
        r = rank_of(o)
        ep = S["raw_eps"][r]
        tag_out = ((RAFT_TAG << 31) | rank) & LOW32
        tag_in = ((RAFT_TAG << 31) | r) & LOW32
        bufs = [bytearray(BODY) for _ in range(n)]
        await asyncio.gather(
            *(ep.send(bytearray(body("raft", 2, rank, r, k, rnd)), tag=tag_out, force_tag=True)
              for k in range(n)),
            *(ep.recv(b, tag=tag_in, force_tag=True) for b in bufs),
        )
        return [bytes(b) == body("raft", 2, r, rank, k, rnd) for k, b in enumerate(bufs)]

    async def rmpf_sends(o):
        ep = S["raw_eps"][rank_of(o)]
        await asyncio.gather(*(
            ep.send(bytearray(body("rmpf", 3, rank, rank_of(o), j, rnd)),
                    tag=(rank << 32) | (j * 8), force_tag=True)
            for j in range(n)))

    checks = [ts_path(o, k) for o in peers for k in range(n)]
    checks += [ucxx_path(name, o, k) for name in LIBS for o in peers for k in range(n)]
    results = await asyncio.gather(*(_guard(c, timeout) for c in checks))
    out = {"ok": sum(1 for x in results if x is True),
           "bad": sum(1 for x in results if x is False),
           "lost": sum(1 for x in results if x is None)}
    if raw:
        raft_ok = await asyncio.gather(*(_guard(raft(o), timeout) for o in peers))
        await asyncio.gather(*(rmpf_sends(o) for o in peers))
        flat = [x for r in raft_ok for x in (r if r is not None else [None] * n)]
        out["raft_ok"] = sum(1 for x in flat if x is True)
        out["raft_bad"] = sum(1 for x in flat if x is not True)
    return out


def round_blocking(rnd: int, n: int, peers=None, timeout: float = 60.0,
                   delay: float = 0.0) -> dict:
    """A task: beta's tagspace path with the blocking forms, in a task thread (receives
    posted ``delay`` s after the sends)."""
    me, rank = S["me"], S["rank"]
    peers = [w for w in (peers or S["ws"]) if w != me]
    beta = tsd.register("beta")
    sends = [beta.send_nb(o, payload(0, rank, k, rnd), body("beta", 0, rank, rank_of(o), k, rnd))
             for o in peers for k in range(n)]
    time.sleep(delay)
    recvs = [(o, k, beta.recv_nb(payload(0, rank_of(o), k, rnd), 64, o))
             for o in peers for k in range(n)]
    deadline = time.monotonic() + timeout  # one deadline for all: a lost one costs it once
    for s in sends:
        beta.wait(s, max(0.01, deadline - time.monotonic()))
    ok = bad = lost = 0
    for o, k, op in recvs:
        try:
            got = beta.wait(op, max(0.01, deadline - time.monotonic()))
        except TimeoutError:
            lost += 1
            beta.raw.cancel(op)
            continue
        if got == body("beta", 0, rank_of(o), rank, k, rnd):
            ok += 1
        else:
            bad += 1
    return {"ok": ok, "bad": bad, "lost": lost}


def leftovers(rnds, peers=None, dask_worker=None) -> int:
    """A second copy of any tagspace message of these rounds still waiting in ucxx's worker
    (exactly once)."""
    worker = ucxx.core._get_ctx().worker
    me = S["me"]
    dup = 0
    for name in LIBS:
        lib = tsd.register(name)
        for o in peers or S["ws"]:
            if o == me:
                continue
            for rnd in rnds:
                for path in (0, 1):
                    for k in range(64):
                        t, m = lib.matcher_any_worker(payload(path, rank_of(o), k, rnd))
                        if worker.tag_probe(ucx_api.UCXXTag(t), ucx_api.UCXXTagMask(m)).matched:
                            dup += 1
    return dup


# -- a worker killed ---------------------------------------------------------------------------

async def during_kill(victim: str, victim_pid: int, n: int, bound: float,
                      dask_worker=None) -> dict:
    """On each survivor: a receive waiting on the victim, peer events, and an exchange with
    the other survivors that spans the kill (rank 0 kills the victim halfway through)."""
    me, rank = S["me"], S["rank"]
    others = [w for w in S["ws"] if w not in (me, victim)]
    alpha = tsd.register("alpha")
    victim_token = await alpha.atoken(victim)
    rnd = 1
    out: dict = {}

    async def waiting_on_victim():
        t0 = time.monotonic()
        try:
            await alpha.arecv(payload(1, 2, 63, 3), 64, victim, timeout=bound)
            return "received?"
        except tagspace.PeerDownError:
            return "down after %.1f s" % (time.monotonic() - t0)
        except TimeoutError:
            return "timeout"

    async def exchange():
        ok = 0
        for k in range(n):
            if rank == 0 and k == n // 2:
                os.kill(victim_pid, 9)
                out["killed_at"] = time.monotonic()
            got = await asyncio.gather(*(
                alpha.arecv(payload(0, rank_of(o), k, rnd), 64, o, timeout=60) for o in others),
                *(alpha.asend(o, payload(0, rank, k, rnd), body("alpha", 0, rank, rank_of(o), k,
                                                                rnd)) for o in others))
            ok += sum(1 for o, g in zip(others, got) if g == body("alpha", 0, rank_of(o), rank,
                                                                  k, rnd))
            await asyncio.sleep(0.02)
        return ok

    async def events():
        seen = {}
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline and set(seen) != set(LIBS):
            for name in LIBS:
                ev = tsd.register(name).peer_event()
                while ev is not None:
                    if ev[0] == "down" and ev[1] == victim:
                        seen[name] = ev[2]
                    ev = tsd.register(name).peer_event()
            await asyncio.sleep(0.01)
        return seen

    victim_wait, ok, seen = await asyncio.gather(waiting_on_victim(), exchange(), events())
    out.update(victim_wait=victim_wait, exchanged=ok, expected=n * len(others),
               down_events=sorted(seen))
    try:
        tsd.register("beta").raw.tag(victim_token, 1)
        out["route_gone"] = False
    except tagspace.NotConnectedError:
        out["route_gone"] = True
    return out


async def close_raw(dask_worker=None) -> None:
    for ep in S.get("raw_eps", {}).values():
        try:
            await asyncio.wait_for(ep.close(), 5)
        except Exception:
            pass
    S["raw_eps"] = {}
    if "raw_listener" in S:
        S.pop("raw_listener").close()


# -- a worker stopped past the heartbeat, resumed: the plugin reconnects by itself ----------

async def rejoin_start(ws, dask_worker=None) -> dict:
    """Worker pair `ws`: the lower connects (first use), one message each way."""
    me = dask_worker.address
    peer = [w for w in ws if w != me][0]
    lib = tsd.register("rejoin")
    lib.listen()
    if me == min(ws):
        await lib.atoken(peer)
    got, _ = await asyncio.gather(lib.arecv(1, 8, peer, timeout=30), lib.asend(peer, 1, b"r1"))
    assert got == b"r1", got
    S["rejoin_old"] = (await lib.aendpoint(peer), await lib.atoken(peer))
    return {"pid": os.getpid()}


async def rejoin_wait(ws, timeout: float, dask_worker=None) -> dict:
    """After the stop: the peer back with no call of this library's in between (the plugin
    reconnects by itself), then a round exactly once on the new connection, and the endpoint
    ucxx's own calls would use is the live one. What this worker saw comes back whatever
    happens (events, whether it got there, the node's counters), so that a failure on either
    side shows both.

    Back means the peer's "down" then "up" events — or, on the stopped worker, possibly no
    event at all: its heartbeat clock does not count the time it was stopped (a process's own
    pause is not held against its peers), so it need not time its peer out, and the running
    worker's new connection can replace the old one before the old one's end reaches it. Then
    the peer is simply served by a new connection (the old endpoint serves it no more)."""
    me = dask_worker.address
    peer = [w for w in ws if w != me][0]
    lib = tsd.register("rejoin")
    node = tsd.node()
    old_ep, token = S["rejoin_old"]

    def old_connection_ended() -> bool:
        try:
            return node.peer_on(old_ep) != token
        except ValueError:  # ucxx closed it: it serves nobody
            return True

    events = []
    deadline = time.monotonic() + timeout
    while True:
        # Every queued event first: a state seen below was queued as events before it.
        while (ev := lib.peer_event()) is not None:
            if ev[1] == peer:
                events.append(ev[0])
        if events[-2:] == ["down", "up"]:
            break
        if not events and old_connection_ended() and token in node.peers():
            break
        if time.monotonic() > deadline:
            return {"events": events, "rejoined": False, "stats": node.stats()}
        await asyncio.sleep(0.01)
    try:
        got, _ = await asyncio.gather(lib.arecv(2, 8, peer, timeout=30),
                                      lib.asend(peer, 2, b"r2"))
    except Exception as e:
        return {"events": events, "rejoined": True, "round2": f"{type(e).__name__}: {e}",
                "stats": node.stats()}
    again = lib.raw.recv(2, 8, await lib.atoken(peer))
    await asyncio.sleep(0.5)
    finished, _ = lib.raw.take(again)
    if not finished:
        lib.raw.cancel(again)
    ep = await lib.aendpoint(peer)
    return {"events": events, "rejoined": True, "round2": got == b"r2",
            "again": finished, "live_ep": node.peer_on(ep) == await lib.atoken(peer),
            "stats": node.stats()}
