"""tagspace with real ucxx in several processes (tests/peer.py is one process).

ucxx's own traffic (its hashed tags, its Active Messages on id 0) and three tagspace
namespaces share ucxx's endpoints, registered in a different order per process; checked:
0 misdelivered, 0 stolen, exactly once — over TCP and shared memory, with ucxx progressing in
"thread" and in "blocking" mode, and with a process SIGKILLed.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

PEER = os.path.join(os.path.dirname(__file__), "peer.py")
TRANSPORTS = {
    # ucxx connects through its listener (TCP sockaddr) either way; data over TCP or shm.
    "tcp": {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo"},
    "shm": {"UCX_TLS": "sm,self,tcp", "UCX_NET_DEVICES": "lo"},
}
DEADLINE = 180.0


def run(tmp_path, nprocs, transport, mode, msgs=30, victim=-1):
    env = dict(os.environ)
    env.update(TRANSPORTS[transport])
    env.setdefault("UCX_LOG_LEVEL", "error")
    env["UCX_WARN_UNUSED_ENV_VARS"] = "n"
    procs = []
    logs = []
    for rank in range(nprocs):
        log = open(tmp_path / f"log.{rank}", "w")
        logs.append(log)
        procs.append(
            subprocess.Popen(
                [sys.executable, PEER, "--rank", str(rank), "--nprocs", str(nprocs),
                 "--dir", str(tmp_path), "--mode", mode, "--msgs", str(msgs),
                 "--victim", str(victim)],
                env=env, stdout=log, stderr=subprocess.STDOUT,
            )
        )
    try:
        start = time.monotonic()
        if victim >= 0:
            while not all((tmp_path / f"ready.{r}").exists() for r in range(nprocs)):
                assert time.monotonic() - start < DEADLINE, "processes never got ready"
                assert all(p.poll() is None for p in procs), failure(tmp_path, procs)
                time.sleep(0.05)
            procs[victim].send_signal(signal.SIGKILL)
            procs[victim].wait()
            # Atomically (the survivors poll for it and read it).
            (tmp_path / "killed.tmp").write_text("1")
            (tmp_path / "killed.tmp").rename(tmp_path / "killed")
        for rank, p in enumerate(procs):
            if rank == victim:
                continue
            left = max(1.0, DEADLINE - (time.monotonic() - start))
            rc = p.wait(timeout=left)
            assert rc == 0, failure(tmp_path, procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
    results = {}
    for rank in range(nprocs):
        if rank != victim:
            results[rank] = json.loads((tmp_path / f"result.{rank}").read_text())
    return results


def failure(tmp_path, procs):
    out = [f"exit codes: {[p.poll() for p in procs]}"]
    for rank in range(len(procs)):
        path = tmp_path / f"log.{rank}"
        if path.exists():
            out.append(f"--- rank {rank} ---\n" + path.read_text()[-3000:])
    return "\n".join(out)


def check(results, nprocs, msgs, alive):
    orders = {tuple(r["order"]) for r in results.values()}
    assert len(orders) > 1 or nprocs == 1, "registration orders should differ"
    for rank, r in results.items():
        assert r["info"]["thread_mode"] == "multi"
        assert r["misdelivered"] == 0, f"rank {rank}: {r['misdelivered']} misdelivered"
        assert r["duplicates"] == 0, f"rank {rank}: {r['duplicates']} arrived twice"
        assert r["closed"] is True
        # Per peer: per library msgs on ucxx's path and msgs on tagspace's, msgs with ucxx's
        # own tags, and one AM batch; every one checked (none stolen, none lost).
        peers = alive - 1
        assert r["checked"] >= peers * (3 * 2 * msgs + msgs + 1)
        for name, c in r["counters"].items():
            assert c["failed"] == (1 if name == "dask" and "victim_seen_down" in r else 0), c


@pytest.mark.parametrize(
    "nprocs,transport,mode",
    [
        (2, "tcp", "thread"),
        (2, "shm", "blocking"),
        (3, "shm", "thread"),
        (4, "tcp", "blocking"),
    ],
)
def test_libraries_share_ucxx_endpoints(tmp_path, nprocs, transport, mode):
    msgs = 30
    results = run(tmp_path, nprocs, transport, mode, msgs=msgs)
    check(results, nprocs, msgs, nprocs)


@pytest.mark.parametrize("mode", ["thread", "blocking"])
def test_a_peer_killed_with_sigkill(tmp_path, mode):
    nprocs, msgs = 3, 20
    results = run(tmp_path, nprocs, "tcp", mode, msgs=msgs, victim=nprocs - 1)
    check(results, nprocs, msgs, nprocs - 1 + 1)
    for rank, r in results.items():
        assert r["victim_seen_down"] is True, f"rank {rank} never saw the victim go down"
        assert r["victim_route_gone"] is True, f"rank {rank} still routes to the victim"


REJOIN = os.path.join(os.path.dirname(__file__), "rejoin.py")


def rejoin(tmp_path, *extra, stop_s=4.0):
    """Two ranks of rejoin.py; rank 1 stopped for `stop_s` s once both are ready. Returns
    the results and the moments (time.time()) of the stop and the resume."""
    env = dict(os.environ)
    env.update(TRANSPORTS["tcp"])
    env.setdefault("UCX_LOG_LEVEL", "error")
    env["UCX_WARN_UNUSED_ENV_VARS"] = "n"
    logs = [open(tmp_path / f"log.{r}", "w") for r in range(2)]
    procs = [
        subprocess.Popen([sys.executable, REJOIN, "--rank", str(r), "--dir", str(tmp_path),
                          *extra], env=env, stdout=logs[r], stderr=subprocess.STDOUT)
        for r in range(2)
    ]
    try:
        start = time.monotonic()
        while not all((tmp_path / f"ready.{r}").exists() for r in range(2)):
            assert time.monotonic() - start < DEADLINE, "processes never got ready"
            assert all(p.poll() is None for p in procs), failure(tmp_path, procs)
            time.sleep(0.02)
        procs[1].send_signal(signal.SIGSTOP)
        stopped = time.time()
        (tmp_path / "stopped.tmp").write_text("1")
        (tmp_path / "stopped.tmp").rename(tmp_path / "stopped")
        time.sleep(stop_s)
        resumed = time.time()
        procs[1].send_signal(signal.SIGCONT)
        for p in procs:
            rc = p.wait(timeout=max(1.0, DEADLINE - (time.monotonic() - start)))
            assert rc == 0, failure(tmp_path, procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait()
        for log in logs:
            log.close()
    results = [json.loads((tmp_path / f"result.{r}").read_text()) for r in range(2)]
    return results, stopped, resumed


def test_a_peer_stopped_past_the_heartbeat_rejoins_by_itself(tmp_path):
    results, stopped, resumed = rejoin(tmp_path)
    for r in results:
        assert r["advertised"].startswith("127.0.0.1:"), r["advertised"]
        assert r["rejoined"] is True, failure_of(tmp_path, results)
        assert r["same_token"] is True
        assert r["round2_again"] == 0, "round 2 delivered twice"
        assert r["waiting"] is None, f"left over: {r['waiting']}"
        assert r["up_at"] > resumed
    # Rank 0 kept running: its heartbeat cut the stopped rank off, and it counts it back.
    assert results[0]["stats"]["heartbeat_timeouts"] >= 1, results[0]["stats"]
    assert results[0]["stats"]["reconnects"] == 1, results[0]["stats"]
    assert results[1]["in_cut_received"] <= 1, "the message sent into the cut arrived twice"
    assert results[0]["in_cut_send"] in ("delivered to UCX", "PeerDownError")
    assert sum(r["dialled"] for r in results) >= 1, "nobody reconnected"
    # The times the README gives: cut -> down on the side that kept running (the heartbeat's
    # timeout), resume -> up on both.
    print(f"cut -> down {results[0]['down_at'] - stopped:.2f} s; resume -> up "
          f"{max(r['up_at'] for r in results) - resumed:.2f} s")


def test_without_an_address_the_stopped_peer_stays_apart(tmp_path):
    """The control: the same run with no address told — nothing reconnects."""
    results, _, _ = rejoin(tmp_path, "--no-advertise", "--wait", "6")
    for r in results:
        assert r["advertised"] is None
        assert r["down_at"] is not None
        assert r["rejoined"] is False
        assert r["dialled"] == 0


def failure_of(tmp_path, results):
    return json.dumps(results, indent=1) + "\n" + "\n".join(
        (tmp_path / f"log.{r}").read_text()[-2000:] for r in range(2))
