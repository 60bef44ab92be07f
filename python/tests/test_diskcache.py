"""fairlock.diskcache against real diskcache (installed by ci/python.sh): the recipes' own
documented behaviour (diskcache.recipes' doctests, run against ours), the same program giving
the same results with theirs and ours, and what only ours gives: arrival order across
processes and a killed holder taken over at once."""

import doctest
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import diskcache
import diskcache.recipes
import pytest

import fairlock
import fairlock.diskcache as recipes
from conftest import wait_until


@pytest.fixture
def cache(tmp_path):
    c = diskcache.Cache(str(tmp_path / "cache"))
    yield c
    c.close()


def _doctest_of(obj, globs):
    """Runs `obj`'s docstring examples (diskcache's) with `globs`; returns (failed, tried)."""
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(obj, globs=globs):
        runner.run(test)
    return runner.summarize(verbose=False)


@pytest.mark.parametrize("name", ["Lock", "RLock", "BoundedSemaphore"])
def test_diskcache_s_own_doctests_pass_with_ours(name, tmp_path, monkeypatch):
    # diskcache's examples make `diskcache.Cache()` in a temporary directory; ours keeps its
    # lock file there too.
    monkeypatch.chdir(tmp_path)
    theirs = getattr(diskcache.recipes, name)
    globs = {name: getattr(recipes, name)}
    failed, tried = _doctest_of(theirs, globs)
    assert tried > 0 and failed == 0


def test_the_seed_s_fair_rlock(cache):
    rlock = recipes.FairRLock(cache, "user-123")
    assert rlock.acquire() is None and rlock.acquire() is None
    rlock.release()
    with rlock:
        pass
    rlock.release()
    with pytest.raises(AssertionError, match="cannot release un-acquired lock"):
        rlock.release()


COUNTER = textwrap.dedent(
    """
    import sys, diskcache
    which, directory, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if which == "ours":
        import fairlock.diskcache as recipes
    else:
        import diskcache.recipes as recipes
    cache = diskcache.Cache(directory)
    lock = recipes.Lock(cache, "counter-lock")
    for _ in range(n):
        with lock:
            cache["count"] = cache.get("count", 0) + 1
    """
)


@pytest.mark.parametrize("which", ["theirs", "ours"])
def test_the_same_program_counts_exactly_with_theirs_and_ours(which, tmp_path):
    directory = str(tmp_path / "cache")
    procs = [
        subprocess.Popen([sys.executable, "-c", COUNTER, which, directory, "50"])
        for _ in range(4)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    with diskcache.Cache(directory) as c:
        assert c["count"] == 200


WAITER = textwrap.dedent(
    """
    import sys, diskcache
    import fairlock.diskcache as recipes
    directory, me = sys.argv[1], sys.argv[2]
    cache = diskcache.Cache(directory)
    with recipes.Lock(cache, ("job", 7)):
        with open(directory + "/order", "a") as f:
            f.write(me + "\\n")
    """
)


def test_ours_serve_processes_in_arrival_order(cache):
    lock = recipes.Lock(cache, ("job", 7))
    lock.acquire()
    path = recipes.lock_file(cache)
    name = recipes.lock_name(("job", 7))

    def queued():
        for n in fairlock.status(path)["names"]:
            if n["name"] == name:
                return n["waiters"]
        return 0

    procs = []
    for i in range(4):
        procs.append(subprocess.Popen([sys.executable, "-c", WAITER, cache.directory, str(i)]))
        wait_until(lambda: queued() == i + 1, timeout=30)
    lock.release()
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0, 0]
    with open(os.path.join(cache.directory, "order")) as f:
        assert f.read().split() == ["0", "1", "2", "3"]


HOLDER = textwrap.dedent(
    """
    import sys, time, diskcache
    import fairlock.diskcache as recipes
    cache = diskcache.Cache(sys.argv[1])
    recipes.BoundedSemaphore(cache, "gpu", value=1).acquire()
    print("held", flush=True)
    time.sleep(600)
    """
)


def test_a_killed_holder_is_taken_over_at_once(cache):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, cache.directory], stdout=subprocess.PIPE
    )
    assert holder.stdout.readline().strip() == b"held"
    sem = recipes.BoundedSemaphore(cache, "gpu", value=1)
    assert sem.acquire(timeout=0.05) is False
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    started = time.monotonic()
    assert sem.acquire(timeout=10) is True
    assert time.monotonic() - started < 2 and sem.owner_died
    sem.release()
    with pytest.raises(AssertionError, match="cannot release un-acquired semaphore"):
        sem.release()
    holder.stdout.close()


def test_keys_and_caches(cache, tmp_path):
    a, b = recipes.Lock(cache, 1), recipes.Lock(cache, "1")
    a.acquire()
    assert b.acquire(blocking=False) is True, "1 and '1' are different keys"
    b.release()
    a.release()
    # As diskcache's cache keys: 1 and 1.0 are one key (SQLite compares numbers by value), so
    # one lock; True is another (pickled), and inside tuples they differ (pickled).
    cache.set(1, "x")
    assert cache.get(1.0) == "x" and cache.get(True) is None
    assert cache.get((1.0,)) is None
    assert recipes.lock_name(1) == recipes.lock_name(1.0) != recipes.lock_name(True)
    assert recipes.lock_name((1,)) != recipes.lock_name((1.0,))
    long_key = "x" * 1000
    assert recipes.lock_name(long_key).startswith("h:")
    with recipes.Lock(cache, long_key):
        pass
    with pytest.raises(TypeError, match="a key must be"):
        recipes.Lock(cache, ["a", "list"])
    # A cache directory's path works too, and is the same lock file.
    by_path = recipes.Lock(cache.directory, 1)
    assert recipes.lock_file(cache.directory) == recipes.lock_file(cache)
    with by_path:
        assert recipes.Lock(cache, 1).locked()
    # Not the holder: diskcache's Lock deletes the key anyway; ours refuses.
    with pytest.raises(RuntimeError):
        recipes.Lock(cache, 2).release()
    # expire is the lease: a holder past it is taken over and told when it releases.
    short = recipes.Lock(cache, "short", expire=0.05)
    short.acquire()
    time.sleep(0.1)
    other = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, fairlock.diskcache as r; "
            "l = r.Lock(sys.argv[1], 'short'); l.acquire(); print(l.owner_died); l.release()",
            cache.directory,
        ],
        capture_output=True,
        timeout=60,
    )
    assert other.stdout.strip() == b"True", other.stderr
    with pytest.raises(fairlock.LockLost):
        short.release()


def test_a_leased_semaphore_shared_by_two_threads_lets_both_in(cache):
    # diskcache lets both in: each grant has its own lease (one leased permit per process was
    # refused with ValueError).
    sem = recipes.BoundedSemaphore(cache, "pool", value=2, expire=60)
    entered = []

    def worker():
        sem.acquire()
        entered.append(threading.get_ident())

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert len(entered) == 2, "both threads in"
    sem.release()
    sem.release()


@pytest.mark.parametrize("kind", ["Cache", "FanoutCache"])
def test_diskcache_s_own_check_and_fix_leave_a_held_lock_alone(kind, tmp_path):
    """`Cache.check(fix=True)` deletes the files its database does not know: a lock file it
    deleted while held would let the next `Lock` on the key create a new one and hold the same
    key (two holders)."""
    import warnings

    cache = getattr(diskcache, kind)(str(tmp_path / "cache"))
    cache["some"] = b"x" * 100_000  # a value kept in a file of its own
    held = recipes.Lock(cache, "job")
    held.acquire()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        cache.check(fix=True)
    assert not [w for w in seen if "fairlock" in str(w.message)], [str(w.message) for w in seen]
    assert os.path.exists(recipes.lock_file(cache))
    second = recipes.Lock(cache, "job")
    assert second.acquire(timeout=0.1) is False, "two holders"
    held.release()
    assert second.acquire(timeout=5) is True
    second.release()
    cache.close()


def test_diskcache_s_own_recipe_tests_pass_with_ours(tmp_path):
    """diskcache's own `tests/test_recipes.py` (`test_lock`, `test_rlock`, `test_semaphore`,
    from its sdist, which ci/python.sh downloads and names in FAIRLOCK_DISKCACHE_TESTS) with
    `diskcache.Lock`, `RLock` and `BoundedSemaphore` replaced by ours (tests/diskcache_dropins.py,
    a pytest plugin)."""
    suite = os.environ.get("FAIRLOCK_DISKCACHE_TESTS")
    assert suite, "FAIRLOCK_DISKCACHE_TESTS is not set: run ci/python.sh, which downloads diskcache's sdist"
    here = os.path.dirname(os.path.abspath(__file__))
    run = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "diskcache_dropins",
            "-k", "test_lock or test_rlock or test_semaphore",
            os.path.join(suite, "test_recipes.py"),
        ],
        cwd=str(tmp_path),
        env={**os.environ, "PYTHONPATH": here},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "3 passed" in run.stdout, run.stdout
    assert "fairlock drop-ins: Lock RLock BoundedSemaphore" in run.stdout, run.stdout
