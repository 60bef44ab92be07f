#!/usr/bin/env bash
# Miri: the library's unit tests (the heap-backed core tests included) under
#   cargo +nightly miri test --lib
# Tests that need files, mappings, /proc or other processes are skipped under cfg(miri).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
if ! cargo +nightly miri --version >/dev/null 2>&1; then
    echo "== miri missing: installing it (rustup +nightly component add miri rust-src)"
    rustup +nightly component add miri rust-src
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/miri}"
echo "== miri"
start=$(date +%s)
cargo +nightly miri test -p fairlock --lib "$@"
echo "== miri done in $(( $(date +%s) - start )) s"
