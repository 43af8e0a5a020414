#!/usr/bin/env bash
# The Python package (python/: PyO3 + maturin) as its users get it: `maturin build --release`
# makes the abi3 wheel (manylinux_2_34, UCX not bundled: it needs libucp.so.0 from the
# `libucx-cu12` wheel it depends on); the wheel's contents and links are checked; a fresh
# virtualenv with no Rust toolchain on PATH installs it (binary packages only) and passes a
# smoke test; then the test virtualenv installs the same wheel with real ucxx and runs the
# pytest suite (ucxx in 2-4 processes, TCP and shm, "thread" and "blocking" progress, a peer
# SIGKILLed; a real Dask cluster with rapidsmpf), the doctests, the guide's Python examples,
# the example programs, and smoke runs of the benchmarks (full: python
# python/benchmarks/bench_ucxx.py, bench_dask.py).
#   scripts/python-check.sh            (TAGSPACE_PY_VENV=DIR to choose the test virtualenv)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${TAGSPACE_PY_VENV:-target/py-venv}
work=$(mktemp -d /tmp/tagspace-py.XXXXXX)
trap 'rm -rf "$work"' EXIT
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip "maturin>=1.7,<2"

echo "--- the wheel"
# The documented command, nothing added: pyproject.toml sets the tag (manylinux_2_34) and
# `auditwheel = "warn"` (maturin still refuses symbols newer than the tag's glibc, but leaves
# libucp.so.0 to the libucx-cu12 dependency instead of copying UCX into the wheel). It shares
# this workspace's target directory, so UCX is not built again when cargo has built it already.
rm -rf target/wheels
if ! "$venv/bin/maturin" build --release -m python/Cargo.toml --out target/wheels >"$work/maturin.log" 2>&1; then
  cat "$work/maturin.log"; echo "maturin build failed"; exit 1
fi
wheel=$(realpath target/wheels/tagspace-*-cp310-abi3-manylinux_2_34_x86_64.whl)
echo "built $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"
(cd "$work" && python3 -m zipfile -e "$wheel" unpacked)
libs=$(cd "$work/unpacked" && find . -name '*.so*' | sort)
[ "$libs" = "./tagspace/_tagspace.abi3.so" ] || { echo "the wheel carries other libraries: $libs"; exit 1; }
needed=$(readelf -d "$work/unpacked/tagspace/_tagspace.abi3.so" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
[ "$needed" = "ld-linux-x86-64.so.2 libc.so.6 libgcc_s.so.1 libucp.so.0 " ] \
  || { echo "the extension needs unexpected libraries: $needed"; exit 1; }
grep -q '^Requires-Dist: libucx-cu12' "$work"/unpacked/tagspace-*.dist-info/METADATA \
  || { echo "the wheel does not depend on libucx-cu12"; exit 1; }
echo "one extension module; it needs only libucp.so.0 (from libucx-cu12) and the C runtime"

echo "--- installed without a Rust toolchain"
python3 -m venv "$work/clean"
bare_path="$work/clean/bin:/usr/bin:/bin"
for tool in cargo rustc; do
  if PATH=$bare_path command -v "$tool" >/dev/null; then echo "$tool is still on PATH"; exit 1; fi
done
PATH=$bare_path "$work/clean/bin/pip" install -q --only-binary :all: "$wheel"
(cd "$work" && PATH=$bare_path "$work/clean/bin/python" - <<'PY'
import importlib.metadata, pathlib, tagspace
assert pathlib.Path(tagspace.__file__).is_relative_to(pathlib.Path.cwd() / "clean"), tagspace.__file__
maps = pathlib.Path("/proc/self/maps").read_text()
ucp = sorted({line.split()[-1] for line in maps.splitlines() if "libucp.so" in line})
assert len(ucp) == 1 and "/libucx/" in ucp[0], ucp  # the libucx-cu12 wheel's, nothing else
tagspace.check_layout(tagspace.layout_against("rapidsmpf"), "rapidsmpf")
try:
    tagspace.Node(0)
except ValueError as e:
    assert "worker handle is 0" in str(e), e
else:
    raise AssertionError("Node(0) was accepted")
print("tagspace", importlib.metadata.version("tagspace"), "imported on UCX",
      ".".join(map(str, tagspace.ucx_version())), "from", ucp[0])
PY
)

echo "--- the test virtualenv: the same wheel, with ucxx, Dask and rapidsmpf"
# The Dask suite's cluster: distributed-ucxx (the `dask` extra) and rapidsmpf, pinned to the
# versions it was written against; TAGSPACE_REQUIRE_DASK=1 makes it fail, not skip, without them.
# pyarrow: dask.dataframe, which the Dask benchmark's baseline shuffle uses.
"$venv/bin/python" -m pip uninstall -q -y tagspace 2>/dev/null || true
"$venv/bin/python" -m pip install -q --only-binary :all: "$wheel[test,dask]" \
  distributed-ucxx-cu12==0.52.0 rapidsmpf-cu12==26.10.0 pyarrow
export TAGSPACE_REQUIRE_DASK=1
"$venv/bin/python" -c 'import tagspace, ucxx; print("tagspace on UCX", tagspace.ucx_version(), "with ucxx", ucxx.__version__)'
export UCX_LOG_LEVEL=error UCX_WARN_UNUSED_ENV_VARS=n
# From the repository root: no `tagspace/` directory here, so the installed package is tested.
"$venv/bin/pytest" -q -p no:cacheprovider python/tests
"$venv/bin/pytest" -q -p no:cacheprovider --doctest-modules --pyargs tagspace

echo "--- the Python examples of the README, the guide and the crate READMEs"
cargo build -q --release -p tagspace-guide
target/release/guide extract python "$work/doc-python"
for f in "$work"/doc-python/compile/*.py; do
  [ -e "$f" ] || continue
  "$venv/bin/python" -m py_compile "$f" || { echo "example $(basename "$f") is not valid Python"; exit 1; }
  echo "compiled $(basename "$f") (no_run)"
done
for f in "$work"/doc-python/run/*.py; do
  [ -e "$f" ] || continue
  UCX_TLS=tcp,self,sm UCX_NET_DEVICES=lo timeout 120 "$venv/bin/python" "$f" >"$f.out" 2>&1 \
    || { cat "$f.out"; echo "example $(basename "$f") failed (its name gives its page and line)"; exit 1; }
  echo "ran $(basename "$f")"
done

echo "--- the example programs and the benchmarks (smoke)"
"$venv/bin/python" python/examples/shuffle_and_collectives.py | tail -n 7
"$venv/bin/python" python/examples/shuffle_and_collectives.py --procs 3 --transport shm --mode blocking | tail -n 1
"$venv/bin/python" python/examples/dask_shuffle.py | tail -n 2
"$venv/bin/python" python/benchmarks/bench_ucxx.py --quick
"$venv/bin/python" python/benchmarks/bench_dask.py --quick | tail -n 3
