"""One process of the ucxx tests (started by test_ucxx.py, one per rank).

Rank r listens with ucxx, connects with ucxx to every lower rank (sending its rank first, on
ucxx's own default tag), and attaches every ucxx endpoint to its tagspace node. Three
libraries ("dask", "cuml", "blazingsql") are registered in a different order per rank. Per
peer and library it then sends and receives, all at once:
  * K messages through ucxx's own `ep.send`/`ep.recv` with tagspace's tags (force_tag=True);
  * K messages through tagspace's own `asend`/`arecv` (with the peer named, so a death fails
    them);
  * ucxx's own traffic on the same endpoints: K messages with ucxx's hashed tags (its default
    `tag=` handling) and K Active Messages (ucxx's AM id 0).
Every received body names its sender, library and payload: the checks count misdelivered
(wrong body), stolen (a ucxx message that never came) and duplicates (exactly once: no second
copy waits afterwards). With --victim, that rank is SIGKILLed by the parent once everyone
reported "ready"; the others then see it go down (PeerDownError) and run a second round among
themselves. Results go to DIR/result.RANK as JSON.
"""

import argparse
import asyncio
import json
import os
import struct
import sys
import time

LIBS = ["dask", "cuml", "blazingsql"]

p = argparse.ArgumentParser()
p.add_argument("--rank", type=int, required=True)
p.add_argument("--nprocs", type=int, required=True)
p.add_argument("--dir", required=True)
p.add_argument("--mode", default="thread")
p.add_argument("--msgs", type=int, default=50)
p.add_argument("--victim", type=int, default=-1)
args = p.parse_args()
rank, n = args.rank, args.nprocs

# Import order must not matter: even ranks import tagspace first, odd ranks ucxx first.
if rank % 2 == 0:
    import tagspace
    import ucxx
else:
    import ucxx
    import tagspace

from ucxx.types import Tag  # noqa: E402


def path(name):
    return os.path.join(args.dir, name)


def write(name, value):
    tmp = path(name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(value, f)
    os.rename(tmp, path(name))


async def wait_file(name, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path(name)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank {rank}: {name} never appeared")
        await asyncio.sleep(0.01)
    with open(path(name)) as f:
        return json.load(f)


def body(src, lib, payload):
    return struct.pack("<QQQ", src, lib, payload)


def payload_of(src, k, round_):
    # The payload names the sender too, so that a message taken by the wrong receive would
    # show (the pair field already keeps each sender's tags apart).
    return round_ * 10_000_000 + src * 100_000 + k


async def main():
    ucxx.init(progress_mode=args.mode)
    node = tagspace.Node(heartbeat_interval_ms=200, heartbeat_timeout_ms=3000)
    eps = {}
    accepted = asyncio.Event()

    async def on_connect(ep):
        buf = bytearray(8)
        await ep.recv(buf)  # ucxx's own default tag: the initiator's rank
        r = int.from_bytes(buf, "little")
        node.attach(ep, "acceptor", watch=True)
        eps[r] = ep
        if len(eps) == n - 1:
            accepted.set()

    listener = ucxx.create_listener(on_connect)
    write(f"port.{rank}", listener.port)
    for r in range(rank):
        port = await wait_file(f"port.{r}")
        ep = await ucxx.create_endpoint("127.0.0.1", port)
        await ep.send(bytearray(rank.to_bytes(8, "little")))
        node.attach(ep, "initiator", watch=True)
        eps[r] = ep
    if n - 1 > len(eps):
        await asyncio.wait_for(accepted.wait(), 60)

    order = LIBS[rank % 3 :] + LIBS[: rank % 3]
    if rank % 2:
        order.reverse()
    libs = {name: node.register(name) for name in order}
    for lib in libs.values():
        lib.am_listen(3)
    token = {r: await node.apeer(ep) for r, ep in eps.items()}
    for r in eps:
        for lib in libs.values():
            await lib.atag(token[r])
    result = {"rank": rank, "order": order, "info": node.info, "misdelivered": 0, "stolen": 0}

    async def exchange(peers, round_):
        misdelivered = 0
        k_all = range(args.msgs)
        tasks = []

        async def ucxx_path(r, i, lib, k):
            ep = eps[r]
            out = body(rank, i, payload_of(rank, k, round_))
            inbuf = bytearray(24)
            tag_in, mask = lib.matcher(token[r], payload_of(r, k, round_))
            assert mask == (1 << 64) - 1
            await asyncio.gather(
                ep.send(bytearray(out), tag=lib.tag(token[r], payload_of(rank, k, round_)),
                        force_tag=True),
                ep.recv(inbuf, tag=tag_in, force_tag=True),
            )
            return bytes(inbuf) == body(r, i, payload_of(r, k, round_))

        async def tagspace_path(r, i, lib, k):
            pay = 5_000_000 + payload_of(rank, k, round_)
            got, _ = await asyncio.gather(
                lib.arecv(5_000_000 + payload_of(r, k, round_), 64, peer=token[r]),
                lib.asend(token[r], pay, body(rank, i, pay)),
            )
            return got == body(r, i, 5_000_000 + payload_of(r, k, round_))

        async def host_path(r, k):
            ep = eps[r]
            out = body(rank, 99, payload_of(rank, k, round_))
            inbuf = bytearray(24)
            await asyncio.gather(
                ep.send(bytearray(out), tag=7_000_000 + round_ * 100_000 + k),
                ep.recv(inbuf, tag=7_000_000 + round_ * 100_000 + k),
            )
            return bytes(inbuf) == body(r, 99, payload_of(r, k, round_))

        async def am_path(r):
            ep = eps[r]
            sends = [ep.am_send(bytearray(body(rank, 98, k))) for k in range(args.msgs)]
            got = []

            async def take():
                for _ in range(args.msgs):
                    got.append(bytes(await ep.am_recv()))

            await asyncio.gather(take(), *sends)
            return sorted(got) == sorted(body(r, 98, k) for k in range(args.msgs))

        async def inbox_path(i, lib):
            # One "a new transmission has begun" per peer on ucxx's own calls: the inbox tag
            # is per library and per sender (its pair value), so each peer's goes to its own
            # receive; the bodies say who sent them.
            sends = [
                eps[r].send(bytearray(body(rank, i, round_)), tag=lib.inbox_tag(token[r]),
                            force_tag=True)
                for r in peers
            ]
            bufs = [bytearray(24) for _ in peers]
            recvs = [
                eps[r].recv(b, tag=lib.inbox_matcher(token[r])[0], force_tag=True)
                for r, b in zip(peers, bufs)
            ]
            await asyncio.gather(*sends, *recvs)
            return sorted(bytes(b) for b in bufs) == sorted(body(r, i, round_) for r in peers)

        async def tagspace_am_and_inbox(i, lib):
            # tagspace's own Active Messages (the library's local AM id 3, on the peer's ids for
            # it) and inbox, one of each per peer: the bodies say who sent them.
            sends = []
            for r in peers:
                sends.append(lib.await_op(lib.am_send(token[r], 3, body(rank, i, round_))))
                sends.append(lib.await_op(lib.send_inbox(token[r], body(rank, i, 100 + round_))))
            ams = [await_am(lib) for _ in peers]
            inbox = [lib.anext_inbox(64) for _ in peers]
            got = await asyncio.gather(*sends, *ams, *inbox)
            n_ = len(peers)
            got_am, got_inbox = got[2 * n_:3 * n_], got[3 * n_:]
            return (sorted(got_am) == sorted(body(r, i, round_) for r in peers)
                    and sorted(got_inbox) == sorted(body(r, i, 100 + round_) for r in peers))

        async def await_am(lib):
            return await lib.am_recv(3)

        for i, name in enumerate(LIBS):
            tasks.append(inbox_path(i, libs[name]))
        for r in peers:
            for i, name in enumerate(LIBS):
                lib = libs[name]
                for k in k_all:
                    tasks.append(ucxx_path(r, i, lib, k))
                    tasks.append(tagspace_path(r, i, lib, k))
            for k in k_all:
                tasks.append(host_path(r, k))
            tasks.append(am_path(r))
        oks = await asyncio.wait_for(asyncio.gather(*tasks), 120)
        # tagspace's own inbox shares the inbox tag with the ucxx-path inbox messages above:
        # every peer must be done with those first (a barrier on ucxx's own tags).
        mark = 8_000_000 + round_
        await asyncio.gather(*(eps[r].send(bytearray(b"m"), tag=mark) for r in peers),
                             *(eps[r].recv(bytearray(1), tag=mark) for r in peers))
        oks += await asyncio.wait_for(
            asyncio.gather(*(tagspace_am_and_inbox(i, libs[n_]) for i, n_ in enumerate(LIBS))),
            120)
        misdelivered += sum(1 for ok in oks if not ok)
        return misdelivered, len(oks)

    peers = sorted(eps)
    bad, checked = await exchange(peers, 0)
    result["misdelivered"] += bad
    result["checked"] = checked
    write(f"ready.{rank}", True)

    if args.victim >= 0:
        if rank == args.victim:
            await asyncio.sleep(3600)  # the parent kills this process
        for r in range(n):
            await wait_file(f"ready.{r}")
        await wait_file("killed")
        v = args.victim
        # A receive waiting on the victim fails: heartbeats or ucxx's close callback.
        try:
            await libs["dask"].arecv(999_999, 64, peer=token[v], timeout=30)
            result["victim_seen_down"] = False
        except tagspace.PeerDownError:
            result["victim_seen_down"] = True
        try:
            libs["cuml"].tag(token[v], 1)
            result["victim_route_gone"] = False
        except tagspace.NotConnectedError:
            result["victim_route_gone"] = True
        node.detach(eps[v])
        peers = [r for r in peers if r != v]
        bad, checked = await exchange(peers, 1)
        result["misdelivered"] += bad
        result["checked"] += checked

    # Exactly once: no second copy of any tagspace payload waits in ucxx's worker.
    worker = ucxx.core._get_ctx().worker
    dup = 0
    for r in peers:
        for name in LIBS:
            for round_ in (0, 1) if args.victim >= 0 else (0,):
                for k in range(args.msgs):
                    for pay in (payload_of(r, k, round_), 5_000_000 + payload_of(r, k, round_)):
                        t, _ = libs[name].matcher(token[r], pay)
                        if worker.tag_probe(Tag(t)).matched:
                            dup += 1
    result["duplicates"] = dup
    result["counters"] = {name: lib.counters() for name, lib in libs.items()}

    # Done: tell every live peer on ucxx's own tags, wait to hear from each, then leave.
    await asyncio.gather(*(eps[r].send(bytearray(b"bye"), tag=424242) for r in peers))
    for r in peers:
        buf = bytearray(3)
        await eps[r].recv(buf, tag=424242)
    for r in peers:
        await node.close_endpoint(eps[r])
    node.close()
    result["closed"] = node.closed
    write(f"result.{rank}", result)
    listener.close()


asyncio.run(main())
sys.exit(0)
