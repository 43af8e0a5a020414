"""Shuffle a pandas DataFrame by key across Dask workers through a tagspace namespace.

A real ``LocalCluster(protocol="ucxx")``; tagspace's worker plugin puts a node on each
worker's own ucxx worker. Then, at the same time on every worker:

* "shuffle" sends every other worker the rows whose key belongs to it and receives its own
  (an all-to-all of partitions, as a SQL engine or rapidsmpf does);
* "allreduce", a second library, sums a column across the workers;
* Dask computes a graph of its own that moves data between the workers.

The shuffled frame is checked against pandas (every row exactly once, each on the worker its
key belongs to, per-key sums equal), the allreduce against pandas' sum, Dask's result against
its exact value.

    python examples/dask_shuffle.py                    # 3 workers, 300 000 rows
    python examples/dask_shuffle.py --workers 2 --rows 1000000 --mode thread
"""

from __future__ import annotations

import argparse
import os
import pickle
import time

import numpy as np
import pandas as pd

import tagspace
import tagspace.dask as tsd

SIZE, DATA = 0, 1  # per round and sender: a piece's length, then the piece


def shuffle_payload(rnd: int, sender: int, n: int, kind: int) -> int:
    """A receive takes its payload from any worker (its worker argument only ties its failure
    to that worker), so the payload names the sender."""
    return (rnd * n + sender) * 2 + kind


def dest_of(keys: np.ndarray, n: int) -> np.ndarray:
    """The worker (index in the sorted worker list) each key belongs to."""
    return keys % n


def shuffle_part(part: pd.DataFrame, ws: list, key: str, rnd: int = 0) -> pd.DataFrame:
    """A task on each worker: sends each other worker its rows of ``part``, returns the rows
    of every worker's part that belong here."""
    from distributed import get_worker

    lib = tsd.register("shuffle")
    me = get_worker().address
    n, rank = len(ws), ws.index(me)
    dest = dest_of(part[key].to_numpy(), n)
    sends = []
    for i, w in enumerate(ws):
        if w != me:
            blob = pickle.dumps(part[dest == i], protocol=5)
            sends.append(lib.send_nb(w, shuffle_payload(rnd, rank, n, SIZE),
                                     len(blob).to_bytes(8, "little")))
            sends.append(lib.send_nb(w, shuffle_payload(rnd, rank, n, DATA), blob))
    got = [part[dest == rank]]
    for i, w in enumerate(ws):
        if w != me:
            size = int.from_bytes(lib.recv(shuffle_payload(rnd, i, n, SIZE), 8, w), "little")
            # Dask's workers trust each other's pickles already; so does this example.
            got.append(pickle.loads(lib.recv(shuffle_payload(rnd, i, n, DATA), size, w)))
    for op in sends:
        lib.wait(op)
    return pd.concat(got, ignore_index=True)


def allreduce_sum(part: pd.DataFrame, ws: list, column: str, rnd: int = 0) -> int:
    """A task on each worker: the sum of ``column`` over every worker's part (each worker
    sends its partial sum to all others)."""
    from distributed import get_worker

    lib = tsd.register("allreduce")
    me = get_worker().address
    n, rank = len(ws), ws.index(me)
    mine = int(part[column].sum())
    sends = [lib.send_nb(w, rnd * n + rank, mine.to_bytes(8, "little", signed=True))
             for w in ws if w != me]
    total = mine + sum(int.from_bytes(lib.recv(rnd * n + i, 8, w), "little", signed=True)
                       for i, w in enumerate(ws) if w != me)
    for op in sends:
        lib.wait(op)
    return total


def frame(rows: int, keys: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"id": np.arange(rows, dtype=np.int64),
                         "key": rng.integers(0, keys, rows, dtype=np.int64),
                         "value": rng.integers(-1000, 1000, rows, dtype=np.int64)})


def scatter_parts(client, df: pd.DataFrame, ws: list) -> list:
    """One contiguous part of ``df`` on each worker."""
    bounds = np.linspace(0, len(df), len(ws) + 1).astype(int)
    return [client.scatter(df.iloc[a:b].reset_index(drop=True), workers=[w])
            for a, b, w in zip(bounds[:-1], bounds[1:], ws)]


def tagspace_shuffle(client, parts: list, ws: list, key: str, rnd: int = 0) -> list:
    """Futures of the shuffled parts, one per worker, in ``ws`` order."""
    return [client.submit(shuffle_part, p, ws, key, rnd, workers=[w], pure=False,
                          allow_other_workers=False) for p, w in zip(parts, ws)]


def check_shuffle(df: pd.DataFrame, out: list, key: str) -> None:
    n = len(out)
    for i, part in enumerate(out):
        wrong = int((dest_of(part[key].to_numpy(), n) != i).sum())
        assert wrong == 0, f"worker {i} holds {wrong} rows that belong elsewhere"
    merged = pd.concat(out, ignore_index=True).sort_values("id", ignore_index=True)
    assert len(merged) == len(df), f"{len(merged)} rows after the shuffle, {len(df)} before"
    pd.testing.assert_frame_equal(merged, df.sort_values("id", ignore_index=True))
    pd.testing.assert_series_equal(merged.groupby(key)["value"].sum(),
                                   df.groupby(key)["value"].sum())


def cluster_env(mode: str) -> None:
    os.environ.setdefault("UCX_TLS", "tcp,self,sm")
    os.environ.setdefault("UCX_NET_DEVICES", "lo")
    os.environ.setdefault("UCX_LOG_LEVEL", "error")
    os.environ.setdefault("UCX_WARN_UNUSED_ENV_VARS", "n")
    os.environ["UCXPY_PROGRESS_MODE"] = mode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--mode", choices=["blocking", "thread"], default="blocking",
                    help="distributed-ucxx's progress mode")
    args = ap.parse_args()
    cluster_env(args.mode)

    import dask.array as da
    from distributed import Client, LocalCluster

    with LocalCluster(protocol="ucxx", n_workers=args.workers, threads_per_worker=2,
                      processes=True, host="127.0.0.1", dashboard_address=None) as cluster, \
            Client(cluster) as client:
        client.register_plugin(tsd.Plugin())
        ws = sorted(client.scheduler_info()["workers"])
        df = frame(args.rows, args.keys)
        parts = scatter_parts(client, df, ws)

        x = da.arange(400 * 400, chunks=10_000).reshape(400, 400).rechunk((100, 100))
        dask_graph = client.compute((x + x.T).sum())
        t0 = time.perf_counter()
        shuffled = tagspace_shuffle(client, parts, ws, "key")
        sums = [client.submit(allreduce_sum, p, ws, "value", workers=[w], pure=False,
                              allow_other_workers=False) for p, w in zip(parts, ws)]
        out = client.gather(shuffled)
        took = time.perf_counter() - t0
        totals = client.gather(sums)

        check_shuffle(df, out, "key")
        assert totals == [int(df["value"].sum())] * len(ws), totals
        assert dask_graph.result() == 400 * 400 * (400 * 400 - 1)
        tokens = client.run(lambda: tsd.node().token)
        print(f"tagspace on UCX {tagspace.ucx_version()}, "
              f"{len(ws)} Dask workers ({args.mode} progress)")
        for w, part in zip(ws, out):
            print(f"  {w}: {len(part):>8} rows after the shuffle (tagspace node {tokens[w]:#018x})")
        print(f"shuffled {len(df)} rows by key in {took:.2f} s; allreduce {totals[0]}; "
              "Dask's graph right")
        print("OK: every row exactly once, on the worker its key belongs to; sums match pandas")


if __name__ == "__main__":
    main()
