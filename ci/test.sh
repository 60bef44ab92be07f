#!/usr/bin/env bash
# The test suite: README's test command, and what .ci/run runs. Installs the packages the
# tests need if they are missing (ci/deps.sh: etcd, protoc, man; needs root or sudo then),
# then runs every test of every crate (the etcd tests start and stop their own 3-member
# clusters on 127.0.0.1 ports of their own), the loom models (ci/loom.sh) and the Python
# package's tests (ci/python.sh: its wheel, a fresh venv, packages from the package index).
# About 8 minutes on a 2-core machine from a fresh clone (472 s, 2026-12-07). Arguments go
# to `cargo test` (a filter, say); with arguments the loom and Python suites are left out.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/deps.sh
# Every test, doctest and Python test makes its files under a temporary directory of this run
# (std::env::temp_dir and pytest's tmp_path follow TMPDIR): a lock file left in /tmp by another
# checkout or version (README's examples use fixed names there) is then never in the way.
outer_tmp="${TMPDIR:-/tmp}"
tmp="$(mktemp -d -t fairlock-tests.XXXXXX)"
loom_pid=
cleanup() {
    [ -z "$loom_pid" ] || kill -- -"$loom_pid" 2>/dev/null || kill "$loom_pid" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
export TMPDIR="$tmp"
# The tests' build: line tables in their backtraces (a failing worker's stderr names file and
# line); in fairlock's own crates, integer overflow and debug assertions checked as in a debug
# build (release builds wrap an overflow silently; docs/TESTING.md, "Regressions", has the one
# that hid). The release profile itself ships none of these (ci/wheel.sh unsets the line tables).
export CARGO_PROFILE_RELEASE_DEBUG=line-tables-only
checks=()
for crate in fairlock fairlock-cli fairlock-etcd fairlock-python; do
    checks+=(--config "profile.release.package.$crate.overflow-checks=true"
        --config "profile.release.package.$crate.debug-assertions=true")
done
# Every crate but the benchmarks (which have no tests; clippy builds them).
what=(--release --all-features --workspace --exclude fairlock-bench "${checks[@]}")
full=$(( $# == 0 ))
nextest=0
if [ "$full" = 1 ] && cargo nextest --version >/dev/null 2>&1; then
    # cargo-nextest, where it is installed, runs the test binaries side by side (two tests
    # at a time, as cargo test runs the tests of one binary), each test in a process of its
    # own; the doctests, which it does not run, then run through cargo test.
    nextest=1
fi
start=$SECONDS
if [ "$full" = 1 ]; then
    # The tests are built first, alone: the loom models are CPU-bound, and beside the build
    # they slowed it from 191 s to 238-360 s on this 2-vCPU machine (2026-12-07), whatever
    # their priority. Then they run beside the tests and the Python suite, which mostly wait
    # (for processes, timeouts, etcd), at the lowest priority. With FAIRLOCK_LOOM_DEFER=FILE
    # (.ci/run) this script does not wait for them: FILE gets the directory where their log
    # and, once they end, their exit status appear.
    if [ "$nextest" = 1 ]; then
        cargo nextest run "${what[@]}" --no-run
    else
        cargo test "${what[@]}" --no-run
    fi
    echo "== Rust tests built in $((SECONDS - start)) s"
    loom_dir="$(mktemp -d "$outer_tmp/fairlock-loom.XXXXXX")"
    # A process group of its own (setsid), so that an early exit stops all of it.
    TMPDIR="$outer_tmp" setsid bash -c 'status=0; nice -n 19 bash ci/loom.sh >"$1/log" 2>&1 ||
        status=$?; echo "$status" >"$1/status"' loom "$loom_dir" &
    loom_pid=$!
    echo "$loom_pid" >"$loom_dir/pid"
fi
if [ "$nextest" = 1 ]; then
    cargo nextest run "${what[@]}" --no-fail-fast
    cargo test "${what[@]}" --doc
else
    cargo test "${what[@]}" "$@"
fi
echo "== Rust tests done in $((SECONDS - start)) s"
if [ "$full" = 1 ]; then
    bash ci/python.sh
    if [ -n "${FAIRLOCK_LOOM_DEFER:-}" ]; then
        echo "$loom_dir" >"$FAIRLOCK_LOOM_DEFER"
        loom_pid=
        exit 0
    fi
    echo "== loom (ran beside the tests above; ci/loom.sh)"
    wait "$loom_pid" || true
    loom_pid=
    cat "$loom_dir/log"
    status="$(cat "$loom_dir/status" 2>/dev/null || echo 1)"
    rm -rf "$loom_dir"
    exit "$status"
fi
