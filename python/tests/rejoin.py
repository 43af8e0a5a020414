"""One process of the rejoin test (started by test_ucxx.py, two ranks).

Both ranks listen with ucxx and tell their tagspace node the listener's address
(``advertise``); rank 1 connects to rank 0. One round of messages each way, then "ready";
the parent stops rank 1 (SIGSTOP) for longer than the heartbeat's timeout and resumes it.
Rank 0 sends one message into the cut. Each rank must see the other go down (the heartbeat),
reconnect by itself (``areconnect``: the node reports the lost peer with its address, the
process connects there with ucxx and attaches the endpoint; the other side's listener
attaches its end), see it come back with the same token, and run a second round exactly once.
The message sent into the cut arrives at most once. With --no-advertise neither rank tells an
address: nothing is reported, the peers stay apart, and the rank says so (the control).
Results go to DIR/result.RANK as JSON.
"""

import argparse
import asyncio
import json
import os
import time

import tagspace
import ucxx

p = argparse.ArgumentParser()
p.add_argument("--rank", type=int, required=True)
p.add_argument("--dir", required=True)
p.add_argument("--no-advertise", action="store_true")
p.add_argument("--wait", type=float, default=20.0, help="seconds to wait for the rejoin")
args = p.parse_args()
rank, other = args.rank, 1 - args.rank


def path(name):
    return os.path.join(args.dir, name)


def write(name, value):
    with open(path(name + ".tmp"), "w") as f:
        json.dump(value, f)
    os.rename(path(name + ".tmp"), path(name))


async def wait_file(name, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path(name)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"rank {rank}: {name} never appeared")
        await asyncio.sleep(0.01)
    with open(path(name)) as f:
        return json.load(f)


async def next_event(lib, kind, peer, timeout):
    """The time.time() at which `lib` hears `kind` ("up"/"down") for `peer`, or None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ev = lib.peer_event()
        if ev is None:
            lib._node.progress()
            await asyncio.sleep(0.005)
        elif ev[0] == kind and ev[1] == peer:
            return time.time()
    return None


async def main():
    ucxx.init(progress_mode="thread")
    eps = []

    async def on_connect(ep):
        node.attach(ep, "acceptor", watch=True)
        eps.append(ep)

    listener = ucxx.create_listener(on_connect)
    node = tagspace.Node(
        heartbeat_interval_ms=200,
        heartbeat_timeout_ms=1500,
        advertise=None if args.no_advertise else ("127.0.0.1", listener.port),
    )
    result = {"rank": rank, "advertised": node.advertised}
    lib = node.register("dask")
    lib.listen()
    write(f"port.{rank}", listener.port)
    if rank == 1:
        ep = await ucxx.create_endpoint("127.0.0.1", await wait_file("port.0"))
        node.attach(ep, "initiator", watch=True)
        eps.append(ep)
    while not eps:
        await asyncio.sleep(0.01)
    peer = await node.apeer(eps[0])
    assert await next_event(lib, "up", peer, 30) is not None

    async def exchange(payload):
        got, _ = await asyncio.gather(
            lib.arecv(payload, 64, peer=peer),
            lib.asend(peer, payload, f"{rank}:{payload}".encode()),
        )
        assert got == f"{other}:{payload}".encode(), got

    async def received(payload, wait=0.5):
        """1 if a message with `payload` from the peer arrives within `wait` s, else 0."""
        op = lib.recv(payload, 64, peer=peer)
        try:
            await lib.await_op(op, wait)
            return 1
        except TimeoutError:
            lib.cancel(op)
            return 0

    await exchange(1)
    write(f"ready.{rank}", True)

    if rank == 0:
        await wait_file("stopped")
        op = lib.send(peer, 9, b"0:9", timeout_ms=5000)  # into the cut
    down = await next_event(lib, "down", peer, 30)
    result["down_at"] = down
    if rank == 0:
        try:
            await lib.await_op(op, 10)
            result["in_cut_send"] = "delivered to UCX"
        except tagspace.PeerDownError:
            result["in_cut_send"] = "PeerDownError"

    # Reconnect: whoever hears of the loss first connects; the other side's listener
    # attaches the endpoint as the acceptor.
    up = None
    deadline = time.monotonic() + args.wait
    reconnected = []
    while up is None and time.monotonic() < deadline:
        for token, res in await node.areconnect(timeout=10):
            assert not isinstance(res, Exception), res
            assert token == peer
            reconnected.append(token)
            eps.append(res)
        up = await next_event(lib, "up", peer, 0.05)
    result["up_at"] = up
    result["dialled"] = len(reconnected)
    result["stats"] = node.stats()
    if up is None:
        result["rejoined"] = False
        write(f"result.{rank}", result)
        node.close()
        return
    result["rejoined"] = True
    result["same_token"] = node.peers() == [peer]

    await exchange(2)
    # Exactly once: no second copy of round 2; the message sent into the cut at most once.
    result["round2_again"] = await received(2)
    if rank == 1:
        result["in_cut_received"] = await received(9) + await received(9)
    result["waiting"] = lib.oldest_waiting()
    write(f"done.{rank}", True)
    await wait_file(f"done.{other}")
    write(f"result.{rank}", result)
    for ep in eps:
        await node.close_endpoint(ep)
    node.close()
    await asyncio.sleep(0.1)


asyncio.run(main())
