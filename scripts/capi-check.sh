#!/usr/bin/env bash
# The C ABI as a host author meets it: install it under a scratch prefix, build the C hosts with
# the system compilers through pkg-config (tagspace's and the system UCX's) and the C++ host
# through CMake's find_package (capi/cmake-example), compile every C and C++ example of the
# user documents (README, guide, crate READMEs; linked too when it has a main), and run
# them as real processes over TCP and shared memory; link once statically too. Also checks what
# the shared library promises: a soname, no rpath, UCX only as libucp.so.0 (whichever the host
# loads; nothing of UCX bundled), and every function of the header exported. Ends with the data-path benchmark (capi/c/bench.c) as a smoke run; the full
# run, over shared memory and TCP:  CAPI_BENCH=full scripts/capi-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/tagspace-capi.XXXXXX)
trap 'rm -rf "$work"' EXIT
scripts/install-capi.sh "$work/prefix"
export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
lib="$work/prefix/lib/libtagspace.so.2"

echo "--- the shared library"
dyn=$(readelf -d "$lib")
grep -q 'SONAME.*libtagspace.so.2' <<<"$dyn" || { echo "no soname libtagspace.so.2"; exit 1; }
if grep -Eq 'RPATH|RUNPATH' <<<"$dyn"; then echo "libtagspace carries an rpath"; exit 1; fi
grep -q 'NEEDED.*\[libucp.so.0\]' <<<"$dyn" || { echo "libtagspace does not need libucp.so.0"; exit 1; }
if grep 'NEEDED.*libuc' <<<"$dyn" | grep -qv 'libucp.so.0'; then
  echo "libtagspace needs another UCX library than libucp.so.0"; exit 1
fi
if nm -D --defined-only "$lib" | awk '{print $3}' | grep -q '^ucp_'; then
  echo "libtagspace bundles UCX symbols"; exit 1
fi
declared=$(grep -oE '\btagspace_[a-z_]+\(' capi/include/tagspace.h | tr -d '(' | sort -u)
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep '^tagspace_' | sort -u)
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
[ -z "$missing" ] || { echo "declared in tagspace.h but not exported: $missing"; exit 1; }
echo "soname libtagspace.so.2, no rpath, UCX only as NEEDED libucp.so.0; $(wc -l <<<"$declared") functions exported"

echo "--- the headers compile on their own (C99 and C11 pedantic, C++17)"
for std in c99 c11; do
  echo '#include <tagspace.h>' | cc -std=$std -pedantic -Wall -Wextra -Werror \
    $(pkg-config --cflags tagspace) -x c -c - -o /dev/null
done
echo '#include <tagspace.hpp>' | c++ -std=c++17 -pedantic -Wall -Wextra -Werror \
  $(pkg-config --cflags tagspace) -x c++ -c - -o /dev/null

echo "--- build the hosts (system compilers, system UCX $(pkg-config --modversion ucx))"
cc -std=c11 -O2 -Wall -Wextra -Werror capi/c/host.c -o "$work/c-host" \
  $(pkg-config --cflags --libs tagspace ucx)
cc -std=c11 -O2 -Wall -Wextra -Werror capi/c/adopt.c -o "$work/c-adopt" \
  $(pkg-config --cflags --libs tagspace ucx)
cc -std=c11 -O2 -Wall -Wextra -Werror capi/c/bench.c -o "$work/c-bench" \
  $(pkg-config --cflags --libs tagspace ucx)
cc -std=c11 -O2 -Wall -Wextra -Werror -pthread capi/c/threads.c -o "$work/c-threads" \
  $(pkg-config --cflags --libs tagspace ucx)
# Static: libtagspace.a and what it needs (Libs.private), UCX still the system's shared one.
cc -std=c11 -O2 -Wall -Wextra -Werror capi/c/host.c -o "$work/c-host-static" \
  $(pkg-config --cflags tagspace) "$work/prefix/lib/libtagspace.a" \
  $(pkg-config --libs ucx) $(pkg-config --libs-only-l --static tagspace | sed 's/-ltagspace//')
if ldd "$work/c-host-static" | grep -q libtagspace; then echo "static host loads libtagspace.so"; exit 1; fi

echo "--- the C++ host and a static C host through CMake: find_package(tagspace CONFIG REQUIRED)"
cmake -S capi/cmake-example -B "$work/cmake" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="-Wall -Wextra -Werror -pedantic" >/dev/null
cmake --build "$work/cmake" -- -s >/dev/null
cp "$work/cmake/cpp-host" "$work/cpp-host"
if ldd "$work/cmake/c-host-static" | grep -q libtagspace; then echo "CMake's static host loads libtagspace.so"; exit 1; fi
# The version file: 0.x is semver's unstable range, so 0.1 must not satisfy a request for 0.2.
mkdir -p "$work/cmake-too-new"
printf 'cmake_minimum_required(VERSION 3.16)\nproject(p NONE)\nfind_package(tagspace 0.2 CONFIG REQUIRED)\n' \
  >"$work/cmake-too-new/CMakeLists.txt"
if cmake -S "$work/cmake-too-new" -B "$work/cmake-too-new/b" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null 2>&1; then
  echo "find_package(tagspace 0.2) accepted version $(pkg-config --modversion tagspace)"; exit 1
fi

echo "--- the C and C++ examples of the user documents"
cargo build -q --release -p tagspace-guide
for lang in c cpp; do target/release/guide extract "$lang" "$work/doc-$lang"; done
for f in "$work"/doc-c/*/*.c "$work"/doc-cpp/*/*.cpp; do
  [ -e "$f" ] || continue
  case $f in
    *.c) compile=(cc -std=c11) ;;
    *) compile=(c++ -std=c++17) ;;
  esac
  if grep -Eq '\bmain[[:space:]]*\(' "$f"; then out=("-o" "${f%.*}") link=($(pkg-config --libs tagspace ucx))
  else out=("-c" "-o" /dev/null) link=(); fi
  "${compile[@]}" -Wall -Wextra -Werror $(pkg-config --cflags tagspace ucx) "$f" "${out[@]}" "${link[@]}" \
    || { echo "example $(basename "$f") does not build (its name gives its page and line)"; exit 1; }
  echo "built $(basename "$f")${link:+ (linked)}"
done

echo "--- run them"
export LD_LIBRARY_PATH="$work/prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
run() { echo "+ $*"; timeout 300 "$@"; }
run env UCX_TLS=tcp "$work/c-host" --procs 2 --rounds 300
run env UCX_TLS=shm,self "$work/c-host" --procs 4 --rounds 300
run "$work/c-host" --procs 3 --rounds 200
run env UCX_TLS=tcp "$work/cpp-host" --rounds 300
run env UCX_TLS=shm,self "$work/cpp-host" --rounds 300
run env UCX_TLS=shm,self "$work/c-host-static" --procs 2 --rounds 100
# Host mode: tagspace adopts each process's worker and endpoints (dynamic names, handshake,
# routing for the host's own sends).
run env UCX_TLS=tcp "$work/c-adopt" --procs 2 --rounds 300
run env UCX_TLS=shm,self "$work/c-adopt" --procs 4 --rounds 300
run "$work/c-adopt" --procs 3 --rounds 200
# Library threads + a host progress thread + peer_failed from inside UCX, on MULTI workers.
run env UCX_TLS=tcp "$work/c-threads"
run env UCX_TLS=shm,self "$work/c-threads"
# The host's UCX is whichever libucp the host loads: the same binaries against UCX 1.22 (PyPI's
# libucx-cu12 wheel), built against the system's 1.13 headers.
wheel=$(scripts/ucx-lib.sh wheel)
run env LD_LIBRARY_PATH="$wheel:$LD_LIBRARY_PATH" UCX_TLS=shm,self "$work/c-host" --procs 4 --rounds 200
run env LD_LIBRARY_PATH="$wheel:$LD_LIBRARY_PATH" UCX_TLS=tcp "$work/cpp-host" --rounds 200
run env LD_LIBRARY_PATH="$wheel:$LD_LIBRARY_PATH" UCX_TLS=shm,self "$work/c-adopt" --procs 4 --rounds 200
run env LD_LIBRARY_PATH="$wheel:$LD_LIBRARY_PATH" UCX_TLS=tcp "$work/c-adopt" --procs 2 --rounds 200
run env LD_LIBRARY_PATH="$wheel:$LD_LIBRARY_PATH" UCX_TLS=shm,self "$work/c-threads"
echo "--- data-path benchmark (ratios against raw libucp in the same run)"
if [ "${CAPI_BENCH:-quick}" = full ]; then
  for tls in shm,self tcp; do run env UCX_TLS=$tls "$work/c-bench"; done
else
  run env UCX_TLS=shm,self "$work/c-bench" --quick
fi
echo "C ABI checks passed"
