"""tagspace on a real Dask cluster (distributed-ucxx, ``LocalCluster(protocol="ucxx")``).

Three worker processes; on each one's single ucxx worker at the same time: Dask computing a
graph that moves data between workers, two tagspace libraries (tagspace's path awaited on the
event loop and blocking in a task thread, and ucxx's own calls with tagspace's tags), a
RAFT-style library on raw ucxx, and rapidsmpf (its real communicator and barrier; its
``recv_any`` probe loop repeated) under the layout chosen against rapidsmpf. The control run
shows the same probe loop taking tagspace's messages under the default layout. Then a worker
is SIGKILLed mid-exchange and the nanny's replacement joins a second round.
The workers run tests/dask_roles.py.
"""

import contextlib
import os
import sys
import time

import pytest

if os.environ.get("TAGSPACE_REQUIRE_DASK") != "1":
    pytest.importorskip("distributed_ucxx")
    pytest.importorskip("rapidsmpf")

import dask.array as da  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

import tagspace  # noqa: E402
import tagspace.dask as tsd  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
import dask_roles as roles  # noqa: E402

N = 16  # messages per library, path and worker pair
HEARTBEAT_TIMEOUT_MS = 5000
# PeerDown comes within the heartbeat timeout (at once when UCX reports the endpoint failed);
# a receive waiting longer than this must end with PeerDownError, never a timeout.
DOWN_BOUND = 3 * HEARTBEAT_TIMEOUT_MS / 1000


@contextlib.contextmanager
def cluster(mode, n_workers=3):
    env = {
        "UCX_TLS": "tcp,self,sm",
        "UCX_NET_DEVICES": "lo",
        "UCX_LOG_LEVEL": "error",
        "UCX_WARN_UNUSED_ENV_VARS": "n",
        "UCXPY_PROGRESS_MODE": mode,
        "PYTHONPATH": os.pathsep.join(
            [os.path.dirname(__file__)] + [p for p in [os.environ.get("PYTHONPATH")] if p]),
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with LocalCluster(protocol="ucxx", n_workers=n_workers, threads_per_worker=3,
                          processes=True, host="127.0.0.1", dashboard_address=None) as c, \
                Client(c) as client:
            yield client
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def workers(client):
    return sorted(client.scheduler_info()["workers"])


def graph():
    """A graph that moves chunks between workers; its exact answer."""
    n = 400
    x = da.arange(n * n, chunks=n * n // 16).reshape(n, n).rechunk((100, 100))
    return (x + x.T).sum(), n * n * (n * n - 1)


def submit_each(client, ws, fn, *args, **kw):
    return [client.submit(fn, *args, workers=[w], pure=False, allow_other_workers=False, **kw)
            for w in ws]


def start_rapidsmpf(client, ws):
    """The real rapidsmpf communicator on Dask's ucxx workers: the root rank waits in its
    first barrier before the others join."""
    root = client.submit(roles.rapidsmpf_root, len(ws), workers=[ws[0]], pure=False).result()
    first = client.submit(roles.rapidsmpf_barrier, len(ws), root, workers=[ws[0]], pure=False)
    time.sleep(0.5)
    rest = [client.submit(roles.rapidsmpf_barrier, len(ws), root, workers=[w], pure=False)
            for w in ws[1:]]
    return sorted(client.gather([first] + rest, direct=False))


def round_one(client, ws, n, delay=0.0, timeout=60.0):
    """Every library at once on every worker: returns (async, blocking, probe, dask) results."""
    setup = client.run(roles.setup, ws)
    ports = {w: r["port"] for w, r in setup.items()}
    client.run(roles.connect_raw, ports)
    y, expect = graph()
    dask_result = client.compute(y)
    probes = submit_each(client, ws, roles.probe_loop, n * (len(ws) - 1))
    blocking = submit_each(client, ws, roles.round_blocking, 0, n, None, timeout, delay)
    asyncs = client.run(roles.round_async, 0, True, n, timeout, None, delay)
    blocking = dict(zip(ws, client.gather(blocking)))
    client.run(roles.stop_probe)
    probes = dict(zip(ws, client.gather(probes)))
    return setup, asyncs, blocking, probes, (dask_result.result(), expect)


@pytest.mark.parametrize("mode", ["blocking", "thread"])
def test_libraries_beside_dask_rapidsmpf_raft_and_a_killed_worker(mode):
    layout = tagspace.layout_against("rapidsmpf")
    with cluster(mode) as client:
        client.register_plugin(tsd.Plugin(layout=layout, foreign=["rapidsmpf"],
                                          heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS))
        ws = workers(client)
        assert start_rapidsmpf(client, ws) == [(r, 3) for r in range(3)]

        setup, asyncs, blocking, probes, (got, expect) = round_one(client, ws, N, delay=0.5)
        for w in ws:
            assert setup[w]["mode"] == mode, setup[w]
            assert asyncs[w] == {"ok": 6 * N, "bad": 0, "lost": 0, "raft_ok": 2 * N,
                                 "raft_bad": 0}, (w, asyncs[w])
            assert blocking[w] == {"ok": 2 * N, "bad": 0, "lost": 0}, (w, blocking[w])
            # rapidsmpf's probe took all its own messages and none of tagspace's.
            assert probes[w]["own"] == 2 * N and probes[w]["foreign"] == 0, (w, probes[w])
        assert len({tuple(setup[w]["order"]) for w in ws}) == 2  # registered in other orders
        assert got == expect
        assert client.run(roles.leftovers, [0]) == {w: 0 for w in ws}

        # A worker SIGKILLed in the middle of an exchange between the two others.
        victim, survivors = ws[2], ws[:2]
        killed = client.run(roles.during_kill, victim, setup[victim]["pid"], N, DOWN_BOUND,
                            workers=survivors)
        for w in survivors:
            k = killed[w]
            assert k["victim_wait"].startswith("down"), (w, k)
            assert k["exchanged"] == k["expected"] == N, (w, k)
            assert k["down_events"] == roles.LIBS, (w, k)
            assert k["route_gone"], (w, k)

        # The nanny's replacement: a new address, a new identity, and a round with it.
        deadline = time.monotonic() + 120
        while True:
            now = workers(client)
            new = [w for w in now if w not in ws]
            if len(now) == 3 and new:
                try:
                    client.run(lambda: tsd.node().token, workers=new)
                    break
                except Exception:
                    pass
            assert time.monotonic() < deadline, f"no replacement worker: {now}"
            time.sleep(0.2)
        ws2 = workers(client)
        client.run(roles.close_raw, workers=survivors)
        client.run(roles.setup, ws2, False)
        y, expect = graph()
        dask_result = client.compute(y)
        blocking = submit_each(client, ws2, roles.round_blocking, 2, N, None, 60.0)
        asyncs = client.run(roles.round_async, 2, False, N)
        assert client.gather(blocking) == [{"ok": 2 * N, "bad": 0, "lost": 0}] * 3
        assert asyncs == {w: {"ok": 6 * N, "bad": 0, "lost": 0} for w in ws2}
        assert client.run(roles.leftovers, [2]) == {w: 0 for w in ws2}
        assert dask_result.result() == expect


def test_a_worker_stopped_past_the_heartbeat_rejoins_by_itself():
    """A worker process stopped (SIGSTOP) for longer than tagspace's heartbeat timeout, then
    resumed: its peer sees it go down, the plugin connects to it again by itself (no library
    call), it comes back with the same identity, and a second round is exactly once. (That a
    peer that tells no address is not reconnected is the control in test_ucxx.py.)"""
    import signal

    with cluster("thread", n_workers=2) as client:
        client.register_plugin(tsd.Plugin(heartbeat_interval_ms=200, heartbeat_timeout_ms=1500))
        ws = workers(client)
        pids = client.run(roles.rejoin_start, ws)
        stopped = ws[1]
        os.kill(pids[stopped]["pid"], signal.SIGSTOP)
        try:
            time.sleep(4.0)
        finally:
            os.kill(pids[stopped]["pid"], signal.SIGCONT)
        res = client.run(roles.rejoin_wait, ws, 60.0)
        for w in ws:
            r = res[w]
            assert r["rejoined"], (w, res)
            # The running worker saw the stopped one go down and come back; the stopped one
            # may have seen nothing (see rejoin_wait).
            if w != stopped or r["events"]:
                assert r["events"][-2:] == ["down", "up"], (w, res)
            assert r["round2"] is True and not r["again"], (w, res)
            assert r["live_ep"], (w, r)
        assert res[ws[0]]["stats"]["reconnects"] == 1, res[ws[0]]
        assert res[ws[0]]["stats"]["heartbeat_timeouts"] >= 1, res[ws[0]]


def test_control_default_layout_the_probe_takes_tagspace_messages():
    """The same round, with tagspace's default layout: rapidsmpf's probe loop takes
    tagspace's messages (which then never arrive), so the assertions above can fail."""
    with cluster("blocking", n_workers=2) as client:
        client.register_plugin(tsd.Plugin(heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS))
        ws = workers(client)
        _, asyncs, blocking, probes, (got, expect) = round_one(client, ws, N, delay=0.5,
                                                             timeout=3.0)
        stolen = sum(p["foreign"] for p in probes.values())
        lost = sum(a["lost"] for a in asyncs.values()) + sum(b["lost"] for b in blocking.values())
        assert stolen > 0, probes
        assert lost > 0, (asyncs, blocking)
        assert got == expect


async def _stranger(port, dask_worker=None):
    """A peer that is no tagspace worker: connects to a plugin's listener, says nonsense."""
    import ucxx

    ep = await ucxx.create_endpoint("127.0.0.1", port)
    await ep.send(bytearray(b"GET / HTTP/1.1".ljust(512, b"\0")))
    return True


def _errors(other):
    from distributed import get_worker

    lib = tsd.register("errors")
    out = {}
    for what, call in [
        ("unknown", lambda: lib.send("ucxx://127.0.0.1:9", 1, b"x", timeout=10)),
        ("self", lambda: lib.send(get_worker().address, 1, b"x")),
    ]:
        try:
            call()
            out[what] = None
        except Exception as e:
            out[what] = (type(e).__name__, str(e))
    lib.send(other, 1, b"still works")
    roles.S["held"] = lib
    return out


def _after_teardown():
    out = {}
    try:
        tsd.register("x")
    except Exception as e:
        out["register"] = (type(e).__name__, str(e))
    try:
        roles.S["held"].raw.tag(1, 1)
    except Exception as e:
        out["held"] = type(e).__name__
    return out


def test_plugin_errors_are_clear():
    with pytest.raises(ValueError, match="rapidsmpf"):
        tsd.Plugin(foreign=["rapidsmpf"])  # the default layout is in its reach
    with pytest.raises(ValueError):
        tsd.Plugin(layout="ns=60:8")
    with pytest.raises(ValueError, match="heartbeat"):
        tsd.Plugin(heartbeat_interval_ms=500, heartbeat_timeout_ms=100)
    with pytest.raises(RuntimeError, match="not on a Dask worker"):
        tsd.register("x")
    with cluster("blocking", n_workers=2) as client:
        a, b = workers(client)
        before = client.submit(lambda: _try(lambda: tsd.register("x")), workers=[a]).result()
        assert before[0] == "RuntimeError" and "register_plugin" in before[1], before
        client.register_plugin(tsd.Plugin())
        # A stranger on b's tagspace listener is dropped; b keeps working.
        port = client.run(lambda: tsd._state().listener.port, workers=[b])[b]
        assert client.run(_stranger, port, workers=[a])[a]
        client.run(lambda: tsd.register("errors").name, workers=[b])
        out = client.submit(_errors, b, workers=[a], pure=False).result()
        assert out["unknown"][0] == "UnknownWorkerError" and "ucxx://127.0.0.1:9" in out[
            "unknown"][1], out
        assert out["self"][0] == "ValueError", out
        got = client.submit(lambda: tsd.register("errors").recv(1, 64), workers=[b]).result()
        assert got == b"still works"
        client.unregister_worker_plugin(tsd.PLUGIN_NAME)
        after = client.submit(_after_teardown, workers=[a], pure=False).result()
        assert after["register"][0] == "RuntimeError", after
        assert after["held"] == "ClosedError", after


def _try(call):
    try:
        call()
        return None
    except Exception as e:
        return type(e).__name__, str(e)
