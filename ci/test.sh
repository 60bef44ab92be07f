#!/usr/bin/env bash
# The test suite: README's test command, and what .ci/run runs. Installs the packages the
# tests need if they are missing (ci/deps.sh: etcd, protoc, man; needs root or sudo then),
# then runs every test of every crate (the etcd tests start and stop their own 3-member
# clusters on 127.0.0.1 ports of their own), the loom models (ci/loom.sh) and the Python
# package's tests (ci/python.sh: its wheel, a fresh venv, packages from the package index).
# About 9 minutes on a 2-core machine from a fresh clone. Arguments go to `cargo test` (a
# filter, say); with arguments the loom and Python suites are left out.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/deps.sh
# Every test, doctest and Python test makes its files under a temporary directory of this run
# (std::env::temp_dir and pytest's tmp_path follow TMPDIR): a lock file left in /tmp by another
# checkout or version (README's examples use fixed names there) is then never in the way.
tmp="$(mktemp -d -t fairlock-tests.XXXXXX)"
loom_pid=
cleanup() {
    [ -z "$loom_pid" ] || kill "$loom_pid" 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
export TMPDIR="$tmp"
# The tests' build: line tables in their backtraces (a failing worker's stderr names file and
# line), and integer overflow and debug assertions checked as in a debug build (a review found
# an overflow that release builds had hidden: docs/TESTING.md, "Issue 12"). The release
# profile itself ships none of these; ci/wheel.sh unsets them.
export CARGO_PROFILE_RELEASE_DEBUG=line-tables-only
export CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true
export CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true
full=$(( $# == 0 ))
if [ "$full" = 1 ]; then
    # The loom models are CPU-bound and the suites below mostly wait (for processes, timeouts,
    # etcd): loom runs beside them at the lowest priority, in their idle time.
    loom_log="$tmp/loom.log"
    nice -n 19 bash ci/loom.sh >"$loom_log" 2>&1 &
    loom_pid=$!
fi
start=$SECONDS
cargo test --release --all-features --workspace "$@"
echo "== cargo test done in $((SECONDS - start)) s"
if [ "$full" = 1 ]; then
    bash ci/python.sh
    echo "== loom (ran beside the tests above; ci/loom.sh)"
    status=0
    wait "$loom_pid" || status=$?
    loom_pid=
    cat "$loom_log"
    exit "$status"
fi
