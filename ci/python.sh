#!/usr/bin/env bash
# The Python package (python/, built from crates/fairlock-python), tested as users install
# it: builds the wheel and the sdist for the package index (ci/wheel.sh, into
# target/wheels/), creates a fresh virtual environment in target/python-venv, installs the
# pinned test tools, the peers the tests and python/bench compare against, and the wheel
# (`pip install target/wheels/fairlock-*.whl`, nothing else), runs the tests against it
# (pytest, real processes) and a quick run of its bench. Runnable on its own; ci/test.sh
# runs it after the Rust tests. PYTHON picks the interpreter (default python3, CPython >= 3.9).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3}"
venv="$root/target/python-venv"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1

start=$SECONDS
bash ci/wheel.sh
echo "== python: venv ($("$python" --version)) in ${venv#"$root"/}"
"$python" -m venv --clear "$venv"
py="$venv/bin/python"
echo "== python: test tools and peers (pinned)"
"$py" -m pip install --quiet \
    pytest==9.2.0 mypy==2.4.1 \
    diskcache==5.6.3 filelock==4.3.2 portalocker==4.4.2 fasteners==0.20
echo "== python: pip install target/wheels/fairlock-*.whl (the wheel, into the fresh venv)"
"$py" -m pip install --quiet --no-index "$root"/target/wheels/fairlock-*.whl
"$py" -c 'import fairlock; print("fairlock", fairlock.__version__, "from", fairlock.__file__)'
echo "== python: the type stubs match the module (mypy.stubtest)"
(cd "$venv" && "$py" -m mypy.stubtest fairlock) # in the venv: its .mypy_cache goes there
echo "== python: diskcache's own recipe tests (its sdist, pinned), run against the drop-ins"
peers="$root/target/python-peers"
if [ ! -f "$peers/diskcache-5.6.3/tests/test_recipes.py" ]; then
    mkdir -p "$peers"
    "$py" -m pip download --quiet --no-deps --no-binary :all: -d "$peers" diskcache==5.6.3
    tar -xzf "$peers/diskcache-5.6.3.tar.gz" -C "$peers" diskcache-5.6.3/tests
fi
export FAIRLOCK_DISKCACHE_TESTS="$peers/diskcache-5.6.3/tests"
echo "== python: tests (python/tests; CPython's own lock tests from $("$py" -c 'import test.lock_tests as t; print(t.__file__)'))"
# From the repository root, so that `import fairlock` is the installed package, not the
# sources in python/fairlock (which lack the native module).
"$py" -m pytest -p no:cacheprovider -q python/tests
echo "== python: bench smoke run (python/bench/run.py --quick: that it runs; its figures are not results)"
"$py" python/bench/run.py --quick
echo "== python: done in $((SECONDS - start)) s"
