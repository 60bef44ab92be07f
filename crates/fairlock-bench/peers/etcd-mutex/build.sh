#!/usr/bin/env bash
# Builds the etcd-mutex peer (etcd's own clientv3/concurrency.Mutex, driven like fairlock-etcd
# by etcdbench) offline, from Debian's packages only: Go 1.19 and etcd 3.4.23's sources with
# their dependencies under /usr/share/gocode, built in GOPATH mode (no module proxy).
#
#   bash crates/fairlock-bench/peers/etcd-mutex/build.sh [OUTPUT]
#
# OUTPUT defaults to target/peers/etcd-mutex at the workspace root, where etcdbench looks.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
out=${1:-$root/target/peers/etcd-mutex}

need=()
command -v go >/dev/null 2>&1 || need+=(golang-go)
[ -d /usr/share/gocode/src/go.etcd.io/etcd/clientv3/concurrency ] || need+=(golang-etcd-server-dev)
if [ ${#need[@]} -gt 0 ]; then
    echo "installing ${need[*]} from Debian" >&2
    sudo_=""
    [ "$(id -u)" = 0 ] || sudo_=sudo
    $sudo_ apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y --no-install-recommends "${need[@]}"
fi

mkdir -p "$(dirname "$out")"
cd "$here"
GO111MODULE=off GOPATH=/usr/share/gocode:${HOME:-/root}/go GOFLAGS= go build -o "$out" .
echo "built $out ($(go version))" >&2
