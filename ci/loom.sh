#!/usr/bin/env bash
# loom model checking of the lock algorithm (tests/loom.rs), i.e.
#   RUSTFLAGS="--cfg fairlock_loom" cargo test --release --features __loom --test loom
# with a preemption bound (LOOM_MAX_PREEMPTIONS, default 2).
#
# Under cfg(fairlock_loom) the crate builds only `core` (the API, files and system calls are
# out) on loom's atomics; loom is an optional dependency behind the private feature `__loom`
# (so that users' lock files never list it). The script compiles tests/loom.rs as the one test
# of a small harness package (generated under the target dir) that depends on this crate by
# path with that feature, with this repository's Cargo.lock: the library's dev-dependencies
# (proptest, ...) are then not built. The models run one at a time: two at a time took 335 s
# instead of 203 s on the 2-core dev machine (2026-12-07), with 315 s of system time.
#
# Measured there (2026-12-07): 23 models in 203 s with the default LOOM_MAX_PREEMPTIONS=2 (the
# three-thread models fix 1: three_threads_lock_unlock ran > 400 s with 2); the build, 20 s.
# LOOM_MAX_BRANCHES is raised to 20000 because waiters poll by yielding.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/loom}"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
export LOOM_MAX_BRANCHES="${LOOM_MAX_BRANCHES:-20000}"
harness="$CARGO_TARGET_DIR/loom-harness"
mkdir -p "$harness/src"
cat >"$harness/Cargo.toml" <<TOML
[package]
name = "fairlock-loom-harness"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
fairlock = { path = "$root", features = ["__loom"] }
loom = "0.7"

[[test]]
name = "loom"
path = "$root/tests/loom.rs"

[lints.rust]
unexpected_cfgs = { level = "warn", check-cfg = ['cfg(fairlock_loom)'] }

[workspace]
TOML
: >"$harness/src/lib.rs"
cp "$root/Cargo.lock" "$harness/Cargo.lock"
echo "== loom (LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS LOOM_MAX_BRANCHES=$LOOM_MAX_BRANCHES)"
start=$(date +%s)
RUSTFLAGS="--cfg fairlock_loom ${RUSTFLAGS:-}" cargo test --release \
    --manifest-path "$harness/Cargo.toml" --test loom -- --test-threads=1 "$@"
echo "== loom done in $(( $(date +%s) - start )) s"
