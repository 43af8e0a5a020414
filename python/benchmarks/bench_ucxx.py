"""tagspace-routed ucxx send/recv against plain ucxx with fixed tags, in the same run.

Two processes on ucxx endpoints (over TCP, or shm with --transport shm). Plain: ucxx's
`ep.send`/`ep.recv` with one fixed tag (`force_tag=True`). tagspace: the same calls with the
tag looked up for every message (`lib.tag(peer, k)` on the sender, `lib.matcher(peer, k)` on the
receiver). Blocks of plain and tagspace alternate; the medians of the blocks are compared.

    python benchmarks/bench_ucxx.py                 # full run
    python benchmarks/bench_ucxx.py --quick         # smoke run: the numbers mean nothing

Reported: 8 B ping-pong latency (ratio tagspace/plain; target <= 1.05), with the time the
tag lookups themselves take per round trip (timed around the calls: steadier than the ratio
on a shared machine), and 1 MiB streaming bandwidth (ratio tagspace/plain; target >= 0.98).
"""

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--quick", action="store_true")
p.add_argument("--transport", choices=["tcp", "shm"], default="tcp")
p.add_argument("--mode", choices=["thread", "blocking"], default="thread")
p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
p.add_argument("--dir", help=argparse.SUPPRESS)
args = p.parse_args()

FIXED = 0x5A5A
BLOCKS = 3 if args.quick else 21
PINGS = 50 if args.quick else 1000
STREAM = 4 if args.quick else 64
BIG = 1 << 20


def launcher():
    env = dict(os.environ)
    env["UCX_TLS"] = "tcp,self" if args.transport == "tcp" else "sm,self,tcp"
    env.setdefault("UCX_NET_DEVICES", "lo")
    env.setdefault("UCX_LOG_LEVEL", "error")
    env["UCX_WARN_UNUSED_ENV_VARS"] = "n"
    with tempfile.TemporaryDirectory() as d:
        cmd = [sys.executable, __file__, "--transport", args.transport, "--mode", args.mode,
               "--dir", d] + (["--quick"] if args.quick else [])
        procs = [subprocess.Popen(cmd + ["--rank", str(r)], env=env) for r in (0, 1)]
        codes = [pr.wait(timeout=900) for pr in procs]
        if any(codes):
            print(f"FAILED: exit codes {codes}")
            sys.exit(1)
        res = json.load(open(os.path.join(d, "result")))
    if args.quick:
        print("(--quick: smoke run, the numbers mean nothing)")
    lat_raw, lat_ts = res["lat_raw"], res["lat_ts"]
    bw_raw, bw_ts = res["bw_raw"], res["bw_ts"]
    print(f"ucxx {res['ucxx']}, UCX {res['ucx']}, transport {args.transport}, "
          f"progress mode {args.mode!r}, {BLOCKS} blocks")
    print(f"8 B ping-pong (us per round trip): plain {lat_raw:.2f}, tagspace {lat_ts:.2f}, "
          f"ratio {lat_ts / lat_raw:.3f} (target <= 1.05)")
    # The steadier figure on a noisy machine: what the lookups themselves cost (rank 0's
    # lib.tag + lib.matcher per round trip; rank 1 makes the same two calls).
    calls = 2 * res["calls_us"]
    print(f"   tagspace's lookups: {calls:.2f} us per round trip (both ranks) = "
          f"{calls / lat_raw * 100:.1f}% of plain's round trip")
    print(f"1 MiB streaming (MB/s): plain {bw_raw:.0f}, tagspace {bw_ts:.0f}, "
          f"ratio {bw_ts / bw_raw:.3f} (target >= 0.98)")


async def worker():
    import tagspace
    import ucxx

    ucxx.init(progress_mode=args.mode)
    node = tagspace.Node()
    got = asyncio.Event()
    box = {}

    async def accepted(ep):
        node.attach(ep, "acceptor")
        box["ep"] = ep
        got.set()

    listener = None
    if args.rank == 0:
        listener = ucxx.create_listener(accepted)
        with open(os.path.join(args.dir, "port.tmp"), "w") as f:
            f.write(str(listener.port))
        os.rename(os.path.join(args.dir, "port.tmp"), os.path.join(args.dir, "port"))
        await got.wait()
        ep = box["ep"]
    else:
        path = os.path.join(args.dir, "port")
        while not os.path.exists(path):
            await asyncio.sleep(0.01)
        ep = await ucxx.create_endpoint("127.0.0.1", int(open(path).read()))
        node.attach(ep, "initiator")
    lib = node.register("bench")
    peer = await node.apeer(ep)
    await lib.atag(peer)

    small = bytearray(8)
    big = bytearray(BIG)
    ack = bytearray(1)

    async def pingpong(routed):
        t = time.perf_counter()
        for k in range(PINGS):
            pay = k & 0xFFFF
            if args.rank == 0:
                t0 = time.perf_counter()
                stag = lib.tag(peer, pay) if routed else FIXED
                rtag = lib.matcher(peer, pay)[0] if routed else FIXED
                spent[routed] += time.perf_counter() - t0
                await ep.send(small, tag=stag, force_tag=True)
                await ep.recv(small, tag=rtag, force_tag=True)
            else:
                rtag = lib.matcher(peer, pay)[0] if routed else FIXED
                await ep.recv(small, tag=rtag, force_tag=True)
                stag = lib.tag(peer, pay) if routed else FIXED
                await ep.send(small, tag=stag, force_tag=True)
        return (time.perf_counter() - t) / PINGS * 1e6

    async def stream(routed):
        t = time.perf_counter()
        if args.rank == 0:
            await asyncio.gather(*(
                ep.send(big, tag=lib.tag(peer, k) if routed else FIXED + 1 + k, force_tag=True)
                for k in range(STREAM)
            ))
            await ep.recv(ack, tag=FIXED - 1, force_tag=True)
        else:
            bufs = [bytearray(BIG) for _ in range(STREAM)]
            await asyncio.gather(*(
                ep.recv(bufs[k], tag=lib.matcher(peer, k)[0] if routed else FIXED + 1 + k,
                        force_tag=True)
                for k in range(STREAM)
            ))
            await ep.send(ack, tag=FIXED - 1, force_tag=True)
        return STREAM * BIG / (time.perf_counter() - t) / 1e6

    spent = {False: 0.0, True: 0.0}  # rank 0's time in the tag lookups, per mode
    await pingpong(False)  # warm-up
    spent[False] = spent[True] = 0.0
    lat = {False: [], True: []}
    bw = {False: [], True: []}
    for b in range(BLOCKS):
        for routed in (b % 2 == 0, b % 2 != 0):
            lat[routed].append(await pingpong(routed))
            bw[routed].append(await stream(routed))
    if args.rank == 0:
        out = {
            "lat_raw": statistics.median(lat[False]),
            "lat_ts": statistics.median(lat[True]),
            "bw_raw": statistics.median(bw[False]),
            "bw_ts": statistics.median(bw[True]),
            "calls_us": (spent[True] - spent[False]) / (BLOCKS * PINGS) * 1e6,
            "ucx": ".".join(map(str, tagspace.ucx_version())),
            "ucxx": ucxx.__version__,
        }
        json.dump(out, open(os.path.join(args.dir, "result"), "w"))
    await ep.send(ack, tag=FIXED - 2, force_tag=True)
    await ep.recv(ack, tag=FIXED - 2, force_tag=True)
    await node.close_endpoint(ep)
    node.close()
    if listener is not None:
        listener.close()


if args.rank is None:
    launcher()
else:
    asyncio.run(worker())
