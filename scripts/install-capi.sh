#!/usr/bin/env bash
# Builds the C ABI (capi/) and installs it under PREFIX: lib/libtagspace.so.2 (+ the
# libtagspace.so link for the linker), lib/libtagspace.a, include/tagspace.h and tagspace.hpp,
# lib/pkgconfig/tagspace.pc and a CMake package (lib/cmake/tagspace/: `find_package(tagspace
# CONFIG REQUIRED)` gives the targets tagspace::tagspace and tagspace::tagspace_static; it finds
# its files relative to itself, so the installed tree can move). The library needs libucp.so.0 (no rpath, nothing of UCX
# bundled): it uses whichever libucp the host loads.
#   scripts/install-capi.sh PREFIX        (e.g. /usr/local, or a staging directory)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: $0 PREFIX" >&2; exit 2; }
prefix=$(realpath -m "$1")
cargo build --release -p tagspace-capi
target=${CARGO_TARGET_DIR:-target}/release
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)  # [workspace.package]
# What a static link needs besides libtagspace.a (rustc's --print native-static-libs on Linux).
static_libs="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
install -d "$prefix/lib/pkgconfig" "$prefix/include" "$prefix/lib/cmake/tagspace"
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
abi=$(sed -n 's/^#define TAGSPACE_ABI_VERSION //p' capi/include/tagspace.h)
# The host brings its own UCX (tagspace works with whichever libucp it loads), so the package
# does not look for one; the shared library's NEEDED libucp.so.0 is resolved at link time
# from the linker's search path, as with pkg-config.
cat > "$prefix/lib/cmake/tagspace/tagspace-config.cmake" <<'CMAKE'
# tagspace's CMake package: find_package(tagspace CONFIG REQUIRED) defines
#   tagspace::tagspace         the shared library (libtagspace.so.ABI) and its headers
#   tagspace::tagspace_static  libtagspace.a and the system libraries it needs
# and TAGSPACE_ABI_VERSION. UCX is the host's own (link ucx::ucp, or libucp through
# pkg-config): tagspace uses whichever libucp.so.0 the process loads.
get_filename_component(_tagspace_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET tagspace::tagspace)
  add_library(tagspace::tagspace SHARED IMPORTED)
  set_target_properties(tagspace::tagspace PROPERTIES
    IMPORTED_LOCATION "${_tagspace_prefix}/lib/libtagspace.so.@ABI@"
    IMPORTED_SONAME "libtagspace.so.@ABI@"
    INTERFACE_INCLUDE_DIRECTORIES "${_tagspace_prefix}/include")
  add_library(tagspace::tagspace_static STATIC IMPORTED)
  set_target_properties(tagspace::tagspace_static PROPERTIES
    IMPORTED_LOCATION "${_tagspace_prefix}/lib/libtagspace.a"
    INTERFACE_INCLUDE_DIRECTORIES "${_tagspace_prefix}/include"
    INTERFACE_LINK_LIBRARIES "@STATIC_LIBS@")
endif()
set(TAGSPACE_ABI_VERSION @ABI@)
unset(_tagspace_prefix)
CMAKE
# CMake wants the system libraries of a static link as a list of names, not -l flags.
cmake_static=$(sed 's/-l//g; s/ /;/g' <<<"$static_libs")
sed -i "s/@ABI@/$abi/g; s/@STATIC_LIBS@/$cmake_static/" "$prefix/lib/cmake/tagspace/tagspace-config.cmake"
# Semver with the crates' version: a request for 0.1 accepts 0.1.x (0.x: the minor is major).
cat > "$prefix/lib/cmake/tagspace/tagspace-config-version.cmake" <<CMAKE
set(PACKAGE_VERSION "$version")
if(PACKAGE_FIND_VERSION_MAJOR EQUAL "$(cut -d. -f1 <<<"$version")" AND
   PACKAGE_FIND_VERSION_MINOR EQUAL "$(cut -d. -f2 <<<"$version")" AND
   NOT PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
elseif(NOT PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
else()
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
endif()
CMAKE
echo "installed tagspace $version (ABI $abi) under $prefix"
