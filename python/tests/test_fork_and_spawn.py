"""Locks across multiprocessing (fork and spawn) and os.fork: children share the lock, and a
child never releases its parent's hold."""

import multiprocessing
import os
import time

import pytest

import fairlock
import mp_workers
from conftest import wait_until, waiters


@pytest.mark.parametrize("method", ["fork", "spawn"])
@pytest.mark.parametrize("cls", [fairlock.Lock, fairlock.RLock])
def test_children_exclude_each_other(tmp_path, method, cls):
    ctx = multiprocessing.get_context(method)
    lock = cls(str(tmp_path / "count.lock"))
    counter = tmp_path / "counter"
    counter.write_text("0")
    children = [
        ctx.Process(target=mp_workers.count_under_lock, args=(lock, str(counter), 40))
        for _ in range(4)
    ]
    for c in children:
        c.start()
    for c in children:
        c.join(timeout=60)
        assert c.exitcode == 0
    assert counter.read_text() == "160"


@pytest.mark.parametrize(
    "method,expected",
    [
        # fork: the child inherits this thread's hold, which is not its own to release.
        ("fork", ["LockLost", "False", "True"]),
        # spawn: the lock object is pickled, reopened on the same file, holding nothing.
        ("spawn", ["RuntimeError", "False", "True"]),
    ],
)
def test_child_does_not_release_the_parents_hold(lock_path, method, expected):
    ctx = multiprocessing.get_context(method)
    lock = fairlock.Lock(lock_path)
    results = ctx.SimpleQueue()
    with lock:
        child = ctx.Process(target=mp_workers.try_inherited_hold, args=(lock, results))
        child.start()
        child.join(timeout=60)
        assert child.exitcode == 0
        assert results.get() == expected
        lock.check()  # still ours
        st = fairlock.status(lock_path)
        assert st["owner_pid"] == os.getpid() and st["waiters"] == 0


def test_os_fork_child_exiting_normally_keeps_the_parents_hold(lock_path, peers):
    """The peer forks while holding; its child tries to release and to take the lock, then
    exits through the interpreter's normal exit."""
    peer = peers(lock_path)
    assert peer.call("acquire").startswith("acquired")
    assert peer.call("fork") == "child LockLost False True"
    st = fairlock.status(lock_path)
    assert st["owner_pid"] == peer.pid and st["holder"]["alive"]
    assert peer.call("check") == "ok"
    assert peer.call("release") == "ok"
    lock = fairlock.Lock(lock_path)
    assert lock.acquire(blocking=False)
    assert lock.owner_died is False
    lock.release()


def test_child_of_a_holder_waits_in_line(lock_path):
    """After fork, the child's acquire drops the inherited entry and queues like anyone."""
    lock = fairlock.Lock(lock_path)
    lock.acquire()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            got = lock.acquire(timeout=10)  # waits for the parent's release
            os.write(w, f"{got} {lock.owner_died}".encode())
            lock.release()
        finally:
            os._exit(0)
    os.close(w)
    wait_until(lambda: waiters(lock_path) == 1)
    time.sleep(0.05)
    lock.release()
    with os.fdopen(r) as f:
        assert f.read() == "True False"
    os.waitpid(pid, 0)


def _in_child(work) -> str:
    """Runs `work()` in an os.fork() child; returns what it returned (a str) or its error."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            try:
                out = work()
            except BaseException as e:  # reported to the parent
                out = f"{type(e).__name__}: {e}"
            os.write(w, out.encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        out = f.read()
    os.waitpid(pid, 0)
    return out


def test_a_forked_child_gives_back_its_own_semaphore_permit(lock_path):
    """The child of a process holding one permit takes and gives back its own (`with sem:`):
    the release is its own permit's, not the inherited one's (which is the parent's)."""
    sem = fairlock.Semaphore(lock_path, 2)
    sem.acquire()

    def child():
        with sem:
            held, holders = sem.held, len(fairlock.status(lock_path)["holders"])
        return f"{held} {holders} {sem.held}"

    # In the child: 1 permit of its own inside `with` (the parent's is not counted), 2 holders
    # in the file (parent and child), then none of its own.
    assert _in_child(child) == "1 2 0"
    st = fairlock.status(lock_path)
    assert [h["pid"] for h in st["holders"]] == [os.getpid()], "the child's permit came back"
    assert sem.held == 1
    sem.release()
    assert fairlock.status(lock_path)["holders"] == []


def test_a_forked_child_releasing_only_inherited_grants_gets_lock_lost(lock_path):
    sem = fairlock.Semaphore(lock_path, 2)
    lock = fairlock.Lock(lock_path + "-lock")
    sem.acquire()
    lock.acquire()
    out = _in_child(lambda: " ".join(_outcome(f) for f in (sem.release, lock.release)))
    assert out == "LockLost LockLost"
    lock.check()  # still the parent's
    assert sem.held == 1
    sem.release()
    lock.release()


def _outcome(f) -> str:
    try:
        f()
        return "ok"
    except Exception as e:
        return type(e).__name__
