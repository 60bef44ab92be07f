#!/usr/bin/env bash
# Installs what the tests need beyond Rust, when it is missing, from Debian's packages:
#   etcd-server, etcd-client  a real etcd cluster for fairlock-etcd's tests (etcd, etcdctl)
#   protobuf-compiler         protoc, which etcd-client's build script runs
#   man-db                    man, for the test that reads the installed manual pages
#   libprotobuf-dev           protobuf's well-known types (google/protobuf/*.proto), which
#                             etcd's .proto files import (only "recommended" by protoc's
#                             package, so --no-install-recommends leaves them out)
# Idempotent: does nothing when all are there.
set -euo pipefail
need=()
command -v etcd >/dev/null || need+=(etcd-server)
command -v etcdctl >/dev/null || need+=(etcd-client)
command -v man >/dev/null || need+=(man-db)
command -v protoc >/dev/null || need+=(protobuf-compiler)
[ -e /usr/include/google/protobuf/descriptor.proto ] || need+=(libprotobuf-dev)
if [ ${#need[@]} -eq 0 ]; then
    exit 0
fi
echo "ci/deps.sh: installing ${need[*]}"
as_root=()
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "ci/deps.sh: need root (or sudo) to apt-get install ${need[*]}" >&2; exit 1; }
    as_root=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
if ! "${as_root[@]}" apt-get install -y --no-install-recommends "${need[@]}"; then
    "${as_root[@]}" apt-get update
    "${as_root[@]}" apt-get install -y --no-install-recommends "${need[@]}"
fi
