#!/usr/bin/env bash
# The test suite: README's test command, and what .ci/run runs. Installs the packages the
# etcd tests need if they are missing (ci/deps.sh), then runs every test of every crate. The
# etcd tests start and stop their own 3-member clusters on 127.0.0.1 ports of their own.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/deps.sh
cargo test --release --all-features "$@"
bash ci/python.sh
