#!/usr/bin/env bash
# The test suite: README's test command, and what .ci/run runs. Installs the packages the
# etcd tests need if they are missing (ci/deps.sh), then runs every test of every crate. The
# etcd tests start and stop their own 3-member clusters on 127.0.0.1 ports of their own.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/deps.sh
# Every test, doctest and Python test makes its files under a temporary directory of this run
# (std::env::temp_dir and pytest's tmp_path follow TMPDIR): a lock file left in /tmp by another
# checkout or version (README's examples use fixed names there) is then never in the way.
tmp="$(mktemp -d -t fairlock-tests.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
export TMPDIR="$tmp"
# Line tables in the tests' backtraces (a failing worker's stderr names file and line); the
# release profile itself ships none.
export CARGO_PROFILE_RELEASE_DEBUG=line-tables-only
cargo test --release --all-features --workspace "$@"
# The library's unit tests and the tests of the newest, arithmetic-heavy code again in a debug
# build, where integer overflow panics instead of wrapping (a review found one that every
# release run had hidden: docs/TESTING.md, "Issue 12").
cargo test -p fairlock --all-features --lib --test names --test fd_form \
    --test model_weighted_proptest
bash ci/python.sh
