"""fairlock.Semaphore: at most `value` holders across real processes (tests/peer.py with KIND
Semaphore:N) and threads, in arrival order; a dead holder's permit comes back; threading's
argument rules; permits released by any thread; Ctrl-C."""

import pickle
import signal
import threading
import time

import pytest

import fairlock
from conftest import wait_until, waiters


def test_at_most_value_holders_across_processes_in_arrival_order(lock_path, peers):
    a, b = peers(lock_path, kind="Semaphore:2"), peers(lock_path, kind="Semaphore:2")
    assert a.call("acquire").startswith("acquired")
    assert b.call("acquire").startswith("acquired")
    sem = fairlock.Semaphore(lock_path, 2)
    assert sem.acquire(blocking=False) is False, "two permits, both held"
    st = fairlock.status(lock_path)
    assert st["kind"] == "semaphore" and st["permits"] == 2 and len(st["holders"]) == 2
    # Three waiters arrive in a known order and are served in it.
    w = [peers(lock_path, kind="Semaphore:2") for _ in range(3)]
    for i, p in enumerate(w):
        p.send("acquire")
        wait_until(lambda: waiters(lock_path) == i + 1)
    assert a.call("release") == "ok"
    assert w[0].reply().startswith("acquired")
    assert not w[1].has_reply() and not w[2].has_reply()
    assert b.call("release") == "ok"
    assert w[1].reply().startswith("acquired")
    assert not w[2].has_reply()
    assert w[0].call("release") == "ok"
    assert w[2].reply().startswith("acquired")


def test_a_killed_holders_permit_comes_back_and_the_next_is_told(lock_path, peers):
    holder = peers(lock_path, kind="Semaphore:1")
    assert holder.call("acquire").startswith("acquired")
    sem = fairlock.Semaphore(lock_path, 1)
    assert sem.acquire(timeout=0.05) is False
    holder.kill()
    assert sem.acquire(timeout=10) is True
    assert sem.owner_died is True and sem.held == 1
    sem.release()


def test_threading_rules_and_release_from_another_thread(lock_path):
    sem = fairlock.Semaphore(lock_path, 2)
    assert repr(sem).startswith("<fairlock.Semaphore")
    with pytest.raises(ValueError, match="can't specify timeout"):
        sem.acquire(blocking=False, timeout=1)
    with pytest.raises(ValueError, match="released too many times"):
        sem.release()
    assert sem.acquire() and sem.acquire(timeout=1)
    assert sem.acquire(blocking=False) is False
    assert sem.acquire(timeout=0) is False and sem.acquire(timeout=-1) is False
    started = time.monotonic()
    assert sem.acquire(timeout=0.1) is False
    assert time.monotonic() - started >= 0.09
    # Any thread may release a permit the object holds.
    t = threading.Thread(target=sem.release, args=(2,))
    t.start()
    t.join()
    assert sem.held == 0
    with sem as got:
        assert got is True and sem.held == 1 and sem.token > 0
    assert sem.held == 0
    assert fairlock.BoundedSemaphore is fairlock.Semaphore
    with pytest.raises(ValueError):
        fairlock.Semaphore(lock_path, 0)


def test_another_value_is_refused_naming_both(lock_path):
    fairlock.Semaphore(lock_path, 3)
    with pytest.raises(fairlock.IncompatibleLockFile) as e:
        fairlock.Semaphore(lock_path, 2)
    assert "3 permits" in str(e.value) and "2 permits" in str(e.value)
    assert e.value.filename == lock_path


def test_named_semaphores_and_pickling(lock_path):
    gpu = fairlock.Semaphore(lock_path, 1, name="gpu")
    disk = fairlock.Semaphore(lock_path, 1, name="disk")
    assert gpu.acquire(blocking=False) and disk.acquire(blocking=False)
    copy = pickle.loads(pickle.dumps(gpu))
    assert copy.value == 1 and copy.held == 0 and "gpu" in repr(copy)
    assert copy.acquire(blocking=False) is False, "the same name, held by `gpu`"
    gpu.release()
    assert copy.acquire(blocking=False) is True
    copy.release()
    disk.release()
    names = {n["name"]: n for n in fairlock.status(lock_path)["names"]}
    assert names["gpu"]["kind"] == "semaphore" and names["gpu"]["permits"] == 1


def test_ctrl_c_interrupts_a_waiting_acquire(lock_path, peers):
    sem = fairlock.Semaphore(lock_path, 1)
    assert sem.acquire()
    waiter = peers(lock_path, kind="Semaphore:1")
    waiter.send("acquire")
    wait_until(lambda: waiters(lock_path) == 1)
    time.sleep(0.05)
    sent = time.monotonic()
    waiter.signal(signal.SIGINT)
    answer = waiter.reply(timeout=5).split()
    assert answer[:2] == ["raise", "KeyboardInterrupt"], answer
    assert float(answer[2]) - sent < 0.1
    assert waiters(lock_path) == 0, "the interrupted waiter gave its place up"
    sem.release()


def test_a_dropped_object_keeps_its_permits_until_the_process_exits(lock_path, peers):
    import gc

    fairlock.Semaphore(lock_path, 1).acquire()
    gc.collect()
    assert fairlock.Semaphore(lock_path, 1).acquire(blocking=False) is False
    # Another process sees it held too.
    other = peers(lock_path, kind="Semaphore:1")
    assert other.call("try") == "false"
