#!/usr/bin/env bash
# Builds the C ABI (capi/) and installs it under PREFIX: lib/libtagspace.so.2 (+ the
# libtagspace.so link for the linker), lib/libtagspace.a, include/tagspace.h and tagspace.hpp,
# and lib/pkgconfig/tagspace.pc. The library needs libucp.so.0 (no rpath, nothing of UCX
# bundled): it uses whichever libucp the host loads.
#   scripts/install-capi.sh PREFIX        (e.g. /usr/local, or a staging directory)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: $0 PREFIX" >&2; exit 2; }
prefix=$(realpath -m "$1")
cargo build --release -p tagspace-capi
target=${CARGO_TARGET_DIR:-target}/release
version=$(sed -n 's/^version = "\(.*\)"/\1/p' capi/Cargo.toml | head -n 1)
# What a static link needs besides libtagspace.a (rustc's --print native-static-libs on Linux).
static_libs="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
install -d "$prefix/lib/pkgconfig" "$prefix/include"
install -m 0755 "$target/libtagspace.so" "$prefix/lib/libtagspace.so.2"
ln -sf libtagspace.so.2 "$prefix/lib/libtagspace.so"
install -m 0644 "$target/libtagspace.a" "$prefix/lib/libtagspace.a"
install -m 0644 capi/include/tagspace.h capi/include/tagspace.hpp "$prefix/include/"
cat > "$prefix/lib/pkgconfig/tagspace.pc" <<PC
prefix=$prefix
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: tagspace
Description: Namespaced UCX tags and Active-Message ids for libraries sharing a worker (C ABI)
Version: $version
Libs: -L\${libdir} -ltagspace
Libs.private: $static_libs
Cflags: -I\${includedir}
PC
echo "installed tagspace $version (ABI $(sed -n 's/^#define TAGSPACE_ABI_VERSION //p' capi/include/tagspace.h)) under $prefix"
