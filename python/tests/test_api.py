"""The API in one process on ucxx's worker: what it accepts, and the errors for what it
does not (a bad handle, a bad name, a closed node or library) — exceptions, never a crash."""

import asyncio
import os
import subprocess
import sys

import pytest

os.environ.setdefault("UCX_TLS", "tcp,self,sm")
os.environ.setdefault("UCX_NET_DEVICES", "lo")
os.environ.setdefault("UCX_LOG_LEVEL", "error")
os.environ["UCX_WARN_UNUSED_ENV_VARS"] = "n"

import tagspace  # noqa: E402
import ucxx  # noqa: E402


@pytest.fixture(scope="module")
def ucxx_ready():
    ucxx.init()
    yield
    ucxx.reset()


@pytest.fixture
def node(ucxx_ready):
    n = tagspace.Node()
    yield n
    n.close()


def test_one_ucx_for_ucxx_and_tagspace(node):
    assert tagspace.ucx_version() == ucxx.get_ucx_version()
    info = node.info
    assert info["thread_mode"] == "multi"
    assert info["progress"] == "host"
    assert info["ucx_version"] == ".".join(map(str, ucxx.get_ucx_version()))
    assert node.token != 0
    assert node.peers() == []


def test_namespaces_tags_and_matchers(node):
    dask = node.register("dask")
    cuml = node.register("cuml")
    assert (dask.name, cuml.name) == ("dask", "cuml")
    assert dask.namespace_id != cuml.namespace_id
    t1, m1 = dask.matcher(12345, 7)  # a peer not met yet: its pair value is made now
    t2, _ = cuml.matcher(12345, 7)
    assert m1 == (1 << 64) - 1 and t1 != t2
    assert dask.matcher(12345, 7) == (t1, m1), "one pair value per peer"
    assert dask.matcher(67890, 7)[0] != t1, "another peer's messages carry another value"
    ta, ma = dask.matcher_any_peer(7)
    assert ma != (1 << 64) - 1 and t1 & ma == ta, "any peer: the pair field free"
    assert node.sender_of(t1) is None, "12345 never proved itself here"
    assert dask.inbox_matcher(12345)[1] == (1 << 64) - 1
    assert dask.counters() == {"sent": 0, "received": 0, "failed": 0}
    # Routing before any peer: a clear error, not a tag.
    with pytest.raises(tagspace.NotConnectedError):
        dask.tag(12345, 1)


def test_bad_input_is_an_exception(node):
    lib = node.register("blazingsql")
    with pytest.raises(ValueError, match="name"):
        node.register("")
    with pytest.raises(ValueError):
        lib.matcher(1, 1 << 63)  # a payload reaching into the namespace field
    with pytest.raises(ValueError):
        lib.matcher(1, 1 << 40)  # ... or the pair field
    with pytest.raises(ValueError, match="worker handle is 0"):
        tagspace.Node(0)
    with pytest.raises(TypeError):
        tagspace.Node("not a worker")
    with pytest.raises(TypeError):
        node.attach(object(), "initiator")
    with pytest.raises(ValueError, match="side"):
        node.attach(1, "sideways")
    with pytest.raises(ValueError, match="endpoint handle is 0"):
        node.attach(0, "initiator")
    with pytest.raises(tagspace.TagspaceError, match="not attached"):
        node.detach(12345)
    with pytest.raises(ValueError, match="UCX status"):
        node.peer_failed(12345, 5)
    with pytest.raises(TypeError, match="buffer"):
        lib.send(1, 1, 12345)


def test_a_refused_progress_mode(ucxx_ready):
    with pytest.raises(ValueError, match="progress"):
        tagspace.Node(progress="sometimes")


def test_closed_node_and_library(ucxx_ready):
    n = tagspace.Node()
    lib = n.register("dask")
    op = lib.recv(1, 8)
    lib.close()
    assert lib.closed
    with pytest.raises(tagspace.ClosedError):
        lib.wait(op, timeout=0.1)
    lib2 = n.register("dask")
    n.close()
    assert n.closed and lib2.closed
    with pytest.raises(tagspace.ClosedError):
        n.register("cuml")
    with pytest.raises(tagspace.ClosedError):
        lib2.matcher(1, 1)
    with pytest.raises(tagspace.ClosedError):
        _ = n.token


def test_waits_time_out_and_receives_cancel(node):
    lib = node.register("dask")
    op = lib.recv(99, 8)
    with pytest.raises(TimeoutError):
        lib.wait(op, timeout=0.05)
    with pytest.raises(TimeoutError):
        asyncio.run(lib.await_op(op, timeout=0.05))
    lib.cancel(op)
    with pytest.raises(tagspace.UcxError, match="CANCELED|canceled"):
        lib.wait(op, timeout=5)
    with pytest.raises(tagspace.TagspaceError, match="taken"):
        lib.wait(op, timeout=5)


def test_import_order_does_not_matter():
    # ucxx first, then tagspace: both on the wheel's one libucp.
    code = (
        "import ucxx, tagspace; ucxx.init(); n = tagspace.Node(); "
        "assert tagspace.ucx_version() == ucxx.get_ucx_version(); n.close(); print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ))
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]


def test_layout_against_foreign_libraries(node):
    # rapidsmpf's recv_any reaches the default layout; the chosen one is out of its reach
    assert tagspace.layout_against("rapidsmpf") == "ns=24:8,pair=40:24"
    both = tagspace.layout_against("rapidsmpf", "blazingsql", "ucxx")
    assert both == "ns=56:8,pair=32:24,guard=0x80000000/0x80000000"
    tagspace.check_layout(both, "rapidsmpf", "blazingsql", "0x0/0xffffffff00000000")
    with pytest.raises(ValueError, match="not safe beside rapidsmpf"):
        tagspace.check_layout("default", "rapidsmpf")
    with pytest.raises(ValueError, match="full wildcard"):
        tagspace.layout_against("ucxx-drain")
    with pytest.raises(ValueError, match="neither a preset"):
        tagspace.check_layout("default", "nosuchlib")
    with pytest.raises(ValueError, match="guard value"):
        tagspace.check_layout("ns=56:8,guard=1/0")
    # a node checks its layout against the foreign libraries it is told about
    with pytest.raises(ValueError, match="not safe beside rapidsmpf"):
        tagspace.Node(foreign=["rapidsmpf"])
    tagspace.Node(foreign=["raft", "blazingsql"]).close()
    # the process's layout is fixed by its first node: another one is refused, naming both
    with pytest.raises(ValueError, match="already in use with another layout"):
        tagspace.Node(layout="ns=24:8")


def test_a_process_with_a_chosen_layout():
    # A fresh process: its first node fixes the layout; tags then carry the namespace id in
    # bits 24..31, where rapidsmpf's probes never look for anything but zero.
    code = (
        "import ucxx, tagspace; ucxx.init(); "
        "spec = tagspace.layout_against('rapidsmpf'); "
        "n = tagspace.Node(layout=spec, foreign=['rapidsmpf']); "
        "lib = n.register('shuffle'); t, m = lib.matcher_any_peer(5); "
        "assert (t >> 24) & 0xff == lib.namespace_id and t & 0xffffff == 5, hex(t); "
        "n.close(); print('ok', hex(t))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ))
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]


def test_advertise_takes_a_listener_a_pair_or_a_string_and_refuses_the_rest(node):
    async def on_connect(ep):
        pass

    listener = ucxx.create_listener(on_connect)
    try:
        assert node.advertised is None
        node.advertise(listener)  # on every interface: this host's address
        assert node.advertised == f"{ucxx.get_address()}:{listener.port}"
        node.advertise(("127.0.0.1", 13337))
        assert node.advertised == "127.0.0.1:13337"
        node.advertise("[::1]:13337")
        assert node.advertised == "[::1]:13337"
        for bad in [("0.0.0.0", 13337), "127.0.0.1:0", "localhost:13337", "13337"]:
            with pytest.raises(ValueError, match="advertise address"):
                node.advertise(bad)
        for bad in [5, ("127.0.0.1", "13337"), ("127.0.0.1", True)]:
            with pytest.raises(TypeError, match="advertise"):
                node.advertise(bad)
        assert node.advertised == "[::1]:13337", "a refused address changes nothing"
        node.advertise(None)
        assert node.advertised is None
        assert node.reconnect_needed() is None
        with pytest.raises(ValueError, match="initiator"):
            node.attach(12345, "acceptor", reconnects=1)
    finally:
        listener.close()
