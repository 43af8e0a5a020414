"""tagspace on a Dask cluster against Dask's own shuffle and plain ucxx, in the same run.

One ``LocalCluster(protocol="ucxx")`` with tagspace's worker plugin. Blocks of the baseline
and of tagspace alternate; the medians of the blocks are compared.

* Shuffle: the same DataFrame, one part on each worker, shuffled by key. tagspace: the
  all-to-all of examples/dask_shuffle.py (one task per worker, a "shuffle" namespace). Dask:
  ``dd.from_delayed(parts).shuffle("key", shuffle_method="p2p")``, persisted. Both end with
  the shuffled parts in the workers' memory; both results are checked.
* Sends on the plugin's endpoints between two workers (on their event loops): ucxx's own
  ``ep.send``/``ep.recv`` with one fixed tag (plain) and with the tag tagspace gives for every
  message (``lib.raw.tag(peer, k)`` to send, ``lib.raw.matcher(peer, k)`` to receive): 8 B ping-pong
  latency and 1 MiB streaming bandwidth.

    python benchmarks/bench_dask.py            # full run (needs pyarrow for dask.dataframe)
    python benchmarks/bench_dask.py --quick    # smoke run: the numbers mean nothing
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import cloudpickle  # noqa: E402

import dask_shuffle as ex  # noqa: E402

cloudpickle.register_pickle_by_value(ex)  # the workers need not import the example

FIXED_OUT, FIXED_IN = 0x5A5A, 0xA5A5
BIG = 1 << 20


async def _pairs(a, b, rounds, size, tagged, stream, dask_worker=None):
    """On workers a and b at once: ``rounds`` ping-pongs (or a stream from a to b) of ``size``
    bytes on the plugin's endpoint; seconds taken, timed on a."""
    import tagspace.dask as tsd

    me = dask_worker.address
    peer = b if me == a else a
    lib = tsd.register("bench")
    ep = await lib.aendpoint(peer)
    token = await lib.atoken(peer)
    await lib.atag(peer, 0)  # the peer registered "bench"
    buf = bytearray(size)
    if tagged:
        def out(k):
            return lib.raw.tag(token, k)

        def inn(k):
            return lib.raw.matcher(token, k)[0]
    else:
        def out(k):
            return FIXED_OUT if me == a else FIXED_IN

        def inn(k):
            return FIXED_IN if me == a else FIXED_OUT
    t0 = time.perf_counter()
    for k in range(rounds):
        k &= 0xFFF
        if stream:
            if me == a:
                await ep.send(buf, tag=out(k), force_tag=True)
            else:
                await ep.recv(buf, tag=inn(k), force_tag=True)
        elif me == a:
            await ep.send(buf, tag=out(k), force_tag=True)
            await ep.recv(buf, tag=inn(k), force_tag=True)
        else:
            await ep.recv(buf, tag=inn(k), force_tag=True)
            await ep.send(buf, tag=out(k), force_tag=True)
    if stream:  # the last message arrived: one 8 B reply
        ack = bytearray(8)
        if me == a:
            await ep.recv(ack, tag=inn(0), force_tag=True)
        else:
            await ep.send(ack, tag=out(0), force_tag=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--mode", choices=["blocking", "thread"], default="blocking")
    args = ap.parse_args()
    blocks = 2 if args.quick else 9
    rows = 20_000 if args.quick else args.rows
    pings = 50 if args.quick else 2000
    stream = 4 if args.quick else 64
    ex.cluster_env(args.mode)

    import dask.dataframe as dd
    import tagspace
    import tagspace.dask as tsd
    import ucxx
    from distributed import Client, LocalCluster, wait

    with LocalCluster(protocol="ucxx", n_workers=args.workers, threads_per_worker=2,
                      processes=True, host="127.0.0.1", dashboard_address=None) as cluster, \
            Client(cluster) as client:
        client.register_plugin(tsd.Plugin())
        ws = sorted(client.scheduler_info()["workers"])
        n = len(ws)
        df = ex.frame(rows, 10_000)
        parts = ex.scatter_parts(client, df, ws)
        meta = df.head(0)

        def ts_shuffle(rnd):
            out = ex.tagspace_shuffle(client, parts, ws, "key", rnd)
            wait(out)
            return out

        def dask_shuffle(rnd):
            # A new name each block: the same graph again would be found already in memory.
            out = dd.from_delayed(parts, meta=meta, verify_meta=False,
                                  prefix=f"bench-{rnd}").shuffle(
                "key", npartitions=n, shuffle_method="p2p").persist()
            wait(out)
            return out

        t_ts, t_dask = [], []
        for rnd in range(blocks + 1):  # block 0 warms both up; either goes first
            out_d = out_t = None  # the previous block's results leave the workers
            for which in (("dask", "ts") if rnd % 2 else ("ts", "dask")):
                t0 = time.perf_counter()
                if which == "dask":
                    out_d = dask_shuffle(rnd)
                else:
                    out_t = ts_shuffle(rnd)
                if rnd:
                    (t_dask if which == "dask" else t_ts).append(time.perf_counter() - t0)
        ex.check_shuffle(df, client.gather(out_t), "key")
        got = out_d.compute().sort_values("id", ignore_index=True)
        assert got.equals(df.sort_values("id", ignore_index=True)), "Dask's shuffle lost rows"
        del out_d, out_t

        a, b = ws[0], ws[1]

        def pairs(tagged, rounds, size, is_stream):
            res = client.run(_pairs, a, b, rounds, size, tagged, is_stream, workers=[a, b])
            return res[a]

        lat = {False: [], True: []}
        bw = {False: [], True: []}
        for blk in range(blocks + 1):
            for tagged in ((False, True) if blk % 2 else (True, False)):  # either goes first
                s = pairs(tagged, pings, 8, False)
                m = pairs(tagged, stream, BIG, True)
                if blk:
                    lat[tagged].append(s / pings * 1e6)
                    bw[tagged].append(stream * BIG / m / 1e6)

    med = statistics.median
    if args.quick:
        print("(--quick: smoke run, the numbers mean nothing)")
    print(f"ucxx {ucxx.__version__}, UCX {'.'.join(map(str, tagspace.ucx_version()))}, "
          f"{n} Dask workers ({args.mode} progress), {blocks} blocks, medians")
    print(f"shuffle of {rows} rows (s): Dask p2p {med(t_dask):.3f}, tagspace {med(t_ts):.3f}, "
          f"ratio tagspace/Dask {med(t_ts) / med(t_dask):.3f}")
    print(f"8 B ping-pong on the plugin's endpoints (us per round trip): plain ucxx "
          f"{med(lat[False]):.1f}, tagspace tags {med(lat[True]):.1f}, "
          f"ratio {med(lat[True]) / med(lat[False]):.3f}")
    print(f"1 MiB streaming (MB/s): plain ucxx {med(bw[False]):.0f}, tagspace tags "
          f"{med(bw[True]):.0f}, ratio {med(bw[True]) / med(bw[False]):.3f}")


if __name__ == "__main__":
    main()
