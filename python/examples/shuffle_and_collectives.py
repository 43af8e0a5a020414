"""Two libraries in each of N Python processes sharing ucxx's endpoints through tagspace.

A Dask-style picture: every worker process runs a shuffle engine ("shuffle", sending
partitions to every other worker) and a collective library ("collectives", an all-reduce of
one number per worker). Both use ucxx's own endpoints — one per pair of workers, created once
— and ucxx's own send/recv; tagspace gives each library its own tags, agreed by every process
although each registered the two names in its own order. ucxx's own messages on the same
endpoints (its hashed tags) carry a heartbeat of the "application". Prints, per process, the
table of what each namespace carried.

    python examples/shuffle_and_collectives.py            # 4 processes over TCP
    python examples/shuffle_and_collectives.py --procs 3 --transport shm --mode blocking
"""

import argparse
import asyncio
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--procs", type=int, default=4)
p.add_argument("--transport", choices=["tcp", "shm"], default="tcp")
p.add_argument("--mode", choices=["thread", "blocking"], default="thread")
p.add_argument("--partitions", type=int, default=20, help="partitions per peer")
p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
p.add_argument("--dir", help=argparse.SUPPRESS)
args = p.parse_args()


def launcher():
    env = dict(os.environ)
    env["UCX_TLS"] = "tcp,self" if args.transport == "tcp" else "sm,self,tcp"
    env.setdefault("UCX_NET_DEVICES", "lo")
    env.setdefault("UCX_LOG_LEVEL", "error")
    env["UCX_WARN_UNUSED_ENV_VARS"] = "n"
    with tempfile.TemporaryDirectory() as d:
        procs = [
            subprocess.Popen([sys.executable, __file__, "--procs", str(args.procs),
                              "--transport", args.transport, "--mode", args.mode,
                              "--partitions", str(args.partitions), "--rank", str(r),
                              "--dir", d], env=env)
            for r in range(args.procs)
        ]
        codes = [pr.wait(timeout=300) for pr in procs]
    if any(codes):
        print(f"FAILED: exit codes {codes}")
        sys.exit(1)
    print(f"OK: {args.procs} processes, every partition and every reduction in its own "
          f"namespace, ucxx's own messages untouched")


async def worker():
    import tagspace
    import ucxx

    rank, n, d = args.rank, args.procs, args.dir
    ucxx.init(progress_mode=args.mode)
    node = tagspace.Node()
    eps = {}
    everyone = asyncio.Event()

    async def accepted(ep):
        buf = bytearray(8)
        await ep.recv(buf)
        node.attach(ep, "acceptor")
        eps[int.from_bytes(buf, "little")] = ep
        if len(eps) == n - 1:
            everyone.set()

    listener = ucxx.create_listener(accepted)
    with open(os.path.join(d, f"port.{rank}.tmp"), "w") as f:
        f.write(str(listener.port))
    os.rename(os.path.join(d, f"port.{rank}.tmp"), os.path.join(d, f"port.{rank}"))
    for r in range(rank):
        path = os.path.join(d, f"port.{r}")
        while not os.path.exists(path):
            await asyncio.sleep(0.01)
        ep = await ucxx.create_endpoint("127.0.0.1", int(open(path).read()))
        await ep.send(bytearray(rank.to_bytes(8, "little")))
        node.attach(ep, "initiator")
        eps[r] = ep
    if len(eps) < n - 1:
        await everyone.wait()

    # Each process registers the two libraries in its own order: tagspace's handshake makes
    # the tags agree anyway.
    names = ["shuffle", "collectives"] if rank % 2 == 0 else ["collectives", "shuffle"]
    libs = {name: node.register(name) for name in names}
    shuffle, coll = libs["shuffle"], libs["collectives"]
    token = {r: await node.apeer(ep) for r, ep in eps.items()}
    for r in eps:
        await shuffle.atag(token[r])
        await coll.atag(token[r])
    started = time.monotonic()

    # The shuffle engine: partition k of every peer, on ucxx's own calls with shuffle's tags.
    async def send_partition(r, k):
        data = struct.pack("<QQ", rank, k) * 512  # 8 KiB
        await eps[r].send(bytearray(data), tag=shuffle.tag(token[r], rank * 1000 + k),
                          force_tag=True)

    async def recv_partition(r, k):
        buf = bytearray(16 * 512)
        tag, _ = shuffle.matcher(token[r], r * 1000 + k)  # only r's message matches
        await eps[r].recv(buf, tag=tag, force_tag=True)
        return bytes(buf[:16]) == struct.pack("<QQ", r, k)

    # The collective library: an all-reduce (everyone sends its value to everyone).
    async def send_value(r):
        await eps[r].send(bytearray(struct.pack("<q", rank + 1)),
                          tag=coll.tag(token[r], rank), force_tag=True)

    async def recv_value(r):
        buf = bytearray(8)
        tag, _ = coll.matcher(token[r], r)
        await eps[r].recv(buf, tag=tag, force_tag=True)
        return struct.unpack("<q", buf)[0]

    # The application's own traffic on ucxx's hashed tags, on the same endpoints.
    async def app_ping(r):
        await asyncio.gather(eps[r].send(bytearray(b"ping"), tag=77),
                             eps[r].recv(bytearray(4), tag=77))

    peers = sorted(eps)
    parts = args.partitions
    results = await asyncio.gather(
        *(send_partition(r, k) for r in peers for k in range(parts)),
        *(recv_partition(r, k) for r in peers for k in range(parts)),
        *(send_value(r) for r in peers),
        *(recv_value(r) for r in peers),
        *(app_ping(r) for r in peers),
    )
    np_ = len(peers) * parts
    got_parts = results[np_:2 * np_]
    values = results[2 * np_ + len(peers):2 * np_ + 2 * len(peers)]
    total = rank + 1 + sum(values)
    elapsed = time.monotonic() - started
    ok = all(got_parts) and total == n * (n + 1) // 2

    lines = [f"rank {rank} (token {node.token:#018x}, registered {' then '.join(names)}):"]
    lines.append(f"  {'namespace':<12} {'id':>3}  {'messages in':>11}  {'messages out':>12}  checked")
    lines.append(f"  {'shuffle':<12} {shuffle.namespace_id:>3}  {np_:>11}  {np_:>12}  "
                 f"{sum(got_parts)}/{np_} partitions intact")
    lines.append(f"  {'collectives':<12} {coll.namespace_id:>3}  {len(peers):>11}  "
                 f"{len(peers):>12}  all-reduce = {total} (expected {n * (n + 1) // 2})")
    lines.append(f"  {'(ucxx own)':<12} {'-':>3}  {len(peers):>11}  {len(peers):>12}  "
                 f"ucxx's hashed tags, untouched")
    lines.append(f"  {elapsed * 1000:.1f} ms, UCX {'.'.join(map(str, tagspace.ucx_version()))}, "
                 f"ucxx progress mode {args.mode!r}")
    print("\n".join(lines), flush=True)

    # Leave together: a last ucxx message each way, then detach before closing.
    await asyncio.gather(*(eps[r].send(bytearray(b"bye"), tag=78) for r in peers),
                         *(eps[r].recv(bytearray(3), tag=78) for r in peers))
    for r in peers:
        await node.close_endpoint(eps[r])  # detach, then ucxx's close
    node.close()
    listener.close()
    if not ok:
        sys.exit(2)


if args.rank is None:
    launcher()
else:
    asyncio.run(worker())
