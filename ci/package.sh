#!/usr/bin/env bash
# What users install, checked the way they install it:
#   1. a crate that depends on the library (as `cargo add fairlock` makes it) locks only the
#      library's own dependencies: loom, behind `cfg(fairlock_loom)` and a private feature,
#      stays out of users' Cargo.lock;
#   2. `cargo package --workspace`: every crate makes its package, and the library's builds
#      from its package alone;
#   3. `cargo install --path crates/fairlock-cli` on a machine without protoc (PROTOC points
#      at nothing, so a build that needed it would fail), then README's `fairlock generate
#      --install`, after which `man fairlock` finds the page.
#   4. the Python sdist (ci/wheel.sh's, which the test run makes before; made here when
#      missing) builds and imports in a fresh venv, as
#      `pip install fairlock-VERSION.tar.gz` does where no wheel fits.
# The wheel is checked by ci/wheel.sh and tested in a fresh venv by ci/python.sh.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
tmp="$(mktemp -d -t fairlock-package.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT

echo "== package: a user's Cargo.lock"
mkdir -p "$tmp/user/src"
cat >"$tmp/user/Cargo.toml" <<TOML
[package]
name = "a-user-of-fairlock"
version = "0.0.0"
edition = "2024"
publish = false

[dependencies]
fairlock = { path = "$root" }

[workspace]
TOML
echo 'fn main() {}' >"$tmp/user/src/main.rs"
cargo generate-lockfile --offline --manifest-path "$tmp/user/Cargo.toml" 2>/dev/null ||
    cargo generate-lockfile --manifest-path "$tmp/user/Cargo.toml"
locked="$(sed -n 's/^name = "\(.*\)"/\1/p' "$tmp/user/Cargo.lock" | sort | tr '\n' ' ')"
echo "   $locked"
want="a-user-of-fairlock bytemuck fairlock libc memmap2 "
if [ "$locked" != "$want" ]; then
    echo "package: a user's Cargo.lock lists $locked; expected $want" >&2
    exit 1
fi

echo "== package: cargo package --workspace (the library built from its package)"
# Every member's package is made, its manifest and dependencies resolved against the others'
# packages; the library's (the one package whose files are chosen by a list) is then built
# from its package alone.
cargo package --workspace --locked --no-verify
cargo package --locked -p fairlock
for crate in fairlock fairlock-cli fairlock-etcd; do
    f="target/package/$crate-$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1).crate"
    [ -s "$f" ] || { echo "package: no $f" >&2; exit 1; }
    tar -tzf "$f" >"$tmp/files"
    grep -qx "$crate-[0-9.]*/LICENSE-MIT" "$tmp/files" ||
        { echo "package: $f has no LICENSE-MIT" >&2; exit 1; }
done

echo "== package: cargo install --path crates/fairlock-cli without protoc, then the manual"
PROTOC="$tmp/no-protoc" cargo install --locked --quiet --path crates/fairlock-cli \
    --root "$tmp/prefix" --target-dir "$root/target"
"$tmp/prefix/bin/fairlock" generate --install >/dev/null
page="$(env -u MANPATH PATH="$tmp/prefix/bin:/usr/bin:/bin" man -w fairlock)"
if [ "$page" != "$tmp/prefix/share/man/man1/fairlock.1" ]; then
    echo "package: man -w fairlock found '$page', not the installed page" >&2
    exit 1
fi
echo "   man fairlock: $page"

echo "== package: pip install of the Python sdist in a fresh venv"
sdist="$(ls target/wheels/fairlock-*.tar.gz 2>/dev/null | head -1)"
if [ -z "$sdist" ]; then
    bash ci/wheel.sh
    sdist="$(ls target/wheels/fairlock-*.tar.gz | head -1)"
fi
"${PYTHON:-python3}" -m venv "$tmp/venv"
PIP_DISABLE_PIP_VERSION_CHECK=1 CARGO_TARGET_DIR="$root/target/sdist" \
    "$tmp/venv/bin/python" -m pip install --quiet "$sdist"
(cd "$tmp" && "$tmp/venv/bin/python" -c '
import fairlock, os
lock = fairlock.Lock(os.path.join(os.getcwd(), "sdist.lock"))
with lock:
    assert lock.token >= 1
print("   fairlock", fairlock.__version__, "from the sdist: a lock taken and released")
')
