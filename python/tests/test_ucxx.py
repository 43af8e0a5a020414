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
