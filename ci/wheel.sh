#!/usr/bin/env bash
# Builds the Python package as the package index takes it, into target/wheels/:
#   fairlock-VERSION-cp39-abi3-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
#       one wheel for every CPython >= 3.9 (abi3) on every Linux with glibc >= 2.17: zig
#       links the native module against glibc 2.17's symbols whatever the build machine's
#       glibc is (maturin --zig; maturin then checks the symbols, as auditwheel does)
#   fairlock-VERSION.tar.gz
#       the sdist: the Rust sources of the library and the binding with the Python sources,
#       so that `pip install fairlock-VERSION.tar.gz` builds where no wheel fits
# both with the licence files, and checks both with `twine check --strict`. The tools
# (maturin, ziglang, twine; pinned) go into their own virtual environment,
# target/wheel-venv, made once. PYTHON picks the interpreter that makes it (default python3).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3}"
venv="$root/target/wheel-venv"
out="$root/target/wheels"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
# What ships is built as users build it: the test suite's line tables stay out of it.
unset CARGO_PROFILE_RELEASE_DEBUG

tools="maturin==1.16.0 ziglang==0.15.1 twine==7.0.0"
if [ "$(cat "$venv/.tools" 2>/dev/null)" != "$tools" ]; then
    echo "== wheel: build tools ($tools) in ${venv#"$root"/}"
    "$python" -m venv --clear "$venv"
    # shellcheck disable=SC2086
    "$venv/bin/python" -m pip install --quiet $tools
    echo "$tools" >"$venv/.tools"
fi
rm -rf "$out"
echo "== wheel: abi3 manylinux2014 wheel (maturin --zig)"
# maturin finds zig through the venv's python (`python3 -m ziglang`).
(cd python && PATH="$venv/bin:$PATH" maturin build --release --strip --zig \
    --compatibility manylinux2014 --interpreter "$python" --out "$out")
echo "== wheel: sdist"
# What pip's build of an sdist runs (PEP 517); `maturin sdist` from python/ makes the same
# archive but first runs `cargo metadata` on a Cargo.toml that python/ does not have, and
# prints cargo's error while succeeding.
(cd python && "$venv/bin/maturin" pep517 write-sdist --sdist-directory "$out")
echo "== wheel: twine check --strict"
"$venv/bin/twine" check --strict "$out"/*
for f in "$out"/*.whl; do
    "$venv/bin/python" - "$f" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
need = ("licenses/LICENSE-MIT", "licenses/LICENSE-APACHE", "fairlock/_fairlock.abi3.so",
        "fairlock/py.typed", "fairlock/_fairlock.pyi")
missing = [n for n in need if not any(x.endswith(n) for x in names)]
if missing:
    sys.exit(f"{sys.argv[1]}: missing {missing}")
PY
done
ls -l "$out"
