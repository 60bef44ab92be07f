#!/usr/bin/env bash
# Fuzzing smoke run: each cargo-fuzz target in fuzz/ for FUZZ_SECONDS (default 30) seconds on
# the nightly toolchain. Exits non-zero on a crash (the input is left in fuzz/artifacts/).
# Long campaigns: see fuzz/README.md.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
secs="${FUZZ_SECONDS:-30}"
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "== cargo-fuzz missing: installing it (cargo install cargo-fuzz --locked)"
    cargo install cargo-fuzz --locked
fi
cd "$root/fuzz"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/fuzz/target}"
for target in header ops; do
    echo "== fuzz $target for ${secs}s"
    start=$(date +%s)
    mkdir -p "corpus/$target"
    cargo +nightly fuzz run "$target" "corpus/$target" -- \
        -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
    echo "== fuzz $target done in $(( $(date +%s) - start )) s"
done
