#!/usr/bin/env bash
# Checks that the library and the command build with the declared minimum Rust version
# (`rust-version` in the workspace Cargo.toml), with that exact toolchain: the claim in the
# manifest is only as good as this check. Uses the rustup toolchain of that version if it is
# installed (or can be installed), else the default toolchain if it is that version; fails
# otherwise rather than pretend. When the default toolchain is that version, the other builds
# of the run are the check and this script builds nothing (FAIRLOCK_MSRV_ALWAYS=1: build
# anyway).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
msrv="$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
[ -n "$msrv" ] || { echo "msrv: no rust-version in Cargo.toml" >&2; exit 1; }
full="$msrv"; [[ "$msrv" =~ ^[0-9]+\.[0-9]+$ ]] && full="$msrv.0"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/msrv}"
if rustc --version | grep -q "^rustc $full " && [ -z "${FAIRLOCK_MSRV_ALWAYS:-}" ]; then
    # The default toolchain is the declared minimum: every other build of the run (clippy, the
    # tests, ci/package.sh's install of the command with its default features) is this check.
    echo "== msrv $full: the default toolchain is $full; the other builds check it"
    exit 0
fi
if rustup toolchain list 2>/dev/null | grep -q "^$full-" ||
    rustup toolchain install --profile minimal "$full" >/dev/null 2>&1; then
    run=(cargo "+$full")
elif rustc --version | grep -q "^rustc $full "; then
    run=(cargo)
else
    echo "msrv: toolchain $full is neither installed nor installable, and the default is $(rustc --version)" >&2
    exit 1
fi
echo "== msrv $full: ${run[*]} check (library and command)"
"${run[@]}" --version
"${run[@]}" check --locked -p fairlock -p fairlock-cli
