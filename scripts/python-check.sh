#!/usr/bin/env bash
# The Python package (python/: PyO3 + maturin, issue 13) against real ucxx: builds the wheel
# and installs it with ucxx into a virtualenv (the README's one install step, `pip install
# ./python`), then runs its pytest suite (ucxx in 2-4 processes, TCP and shm, "thread" and
# "blocking" progress, a peer SIGKILLed; a real Dask cluster with rapidsmpf), its doctests,
# the examples as the README shows them, and smoke runs of the benchmarks (full: python
# python/benchmarks/bench_ucxx.py, bench_dask.py).
#   scripts/python-check.sh            (TAGSPACE_PY_VENV=DIR to choose the virtualenv)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${TAGSPACE_PY_VENV:-target/py-venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
# The wheel's own build (maturin, in pip's isolated environment) shares this workspace's
# target directory, so UCX is not built again when cargo has built it already. A local
# directory is always rebuilt and reinstalled.
# The Dask suite's cluster: distributed-ucxx (the `dask` extra) and rapidsmpf, pinned to the
# versions it was written against; TAGSPACE_REQUIRE_DASK=1 makes it fail, not skip, without them.
# pyarrow: dask.dataframe, which the Dask benchmark's baseline shuffle uses.
"$venv/bin/python" -m pip install -q "./python[test,dask]" distributed-ucxx-cu12==0.52.0 \
    rapidsmpf-cu12==26.10.0 pyarrow
export TAGSPACE_REQUIRE_DASK=1
"$venv/bin/python" -c 'import tagspace, ucxx; print("tagspace on UCX", tagspace.ucx_version(), "with ucxx", ucxx.__version__)'
export UCX_LOG_LEVEL=error UCX_WARN_UNUSED_ENV_VARS=n
# From the repository root: no `tagspace/` directory here, so the installed package is tested.
"$venv/bin/pytest" -q -p no:cacheprovider python/tests
"$venv/bin/pytest" -q -p no:cacheprovider --doctest-modules --pyargs tagspace
"$venv/bin/python" python/examples/shuffle_and_collectives.py | tail -n 7
"$venv/bin/python" python/examples/shuffle_and_collectives.py --procs 3 --transport shm --mode blocking | tail -n 1
"$venv/bin/python" python/examples/dask_shuffle.py | tail -n 2
"$venv/bin/python" python/benchmarks/bench_ucxx.py --quick
"$venv/bin/python" python/benchmarks/bench_dask.py --quick | tail -n 3
