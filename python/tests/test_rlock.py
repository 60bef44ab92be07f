"""fairlock.RLock: re-entrant per thread, threading.RLock's rules, threading.Condition."""

import threading

import pytest

import fairlock
from conftest import wait_until, waiters


def test_reentrant_levels_share_one_grant(lock_path, peers):
    lock = fairlock.RLock(lock_path)
    peer = peers(lock_path, kind="RLock")
    assert lock.acquire()
    token = lock.token
    assert lock.acquire(blocking=False) is True  # the holder re-enters, whatever the args
    assert lock.acquire(timeout=0) is True
    with lock:
        assert lock.token == token
        assert "count=3" not in repr(lock) and "count=4 (this thread)" in repr(lock)
    assert fairlock.status(lock_path)["next_ticket"] == token, "levels take no ticket"
    peer.send("acquire")
    wait_until(lambda: waiters(lock_path) == 1)
    for _ in range(2):
        lock.release()
    assert "count=1 (this thread)" in repr(lock) and lock._is_owned()
    assert not peer.has_reply() and waiters(lock_path) == 1, "one level is still held"
    lock.release()
    assert peer.reply().startswith("acquired")
    assert peer.call("release") == "ok"
    with pytest.raises(RuntimeError, match="un-acquired"):
        lock.release()


def test_argument_rules_still_apply_to_the_holder(lock_path):
    lock = fairlock.RLock(lock_path)
    with lock:
        with pytest.raises(ValueError):
            lock.acquire(False, 1)
        with pytest.raises(ValueError):
            lock.acquire(True, -5)


def test_only_the_owner_releases(lock_path):
    lock = fairlock.RLock(lock_path)
    lock.acquire()
    errors = []

    def other():
        try:
            lock.release()
        except RuntimeError as e:
            errors.append(str(e))
        errors.append(lock._is_owned())

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert errors[0].startswith("cannot release un-acquired lock")
    assert errors[1] is False
    assert lock._is_owned()
    lock.release()
    assert not lock._is_owned()


def test_two_objects_on_one_file_reenter_in_one_thread(lock_path):
    a = fairlock.RLock(lock_path)
    b = fairlock.RLock(lock_path)
    with a:
        assert b.acquire(blocking=False), "same file, same thread: the same lock"
        assert b.token == a.token
        b.release()
        assert a.locked()
    assert not a.locked()


def test_works_with_threading_condition(lock_path):
    lock = fairlock.RLock(lock_path)
    cond = threading.Condition(lock)
    items = []

    def consumer():
        with cond:
            with cond:  # two levels: wait() must release both
                assert cond.wait_for(lambda: items, timeout=10)
                items.append("consumed")

    t = threading.Thread(target=consumer)
    t.start()
    wait_until(lambda: not lock.locked())  # the consumer waits on the condition
    with cond:
        items.append("produced")
        cond.notify()
    t.join()
    assert items == ["produced", "consumed"]
    assert not lock.locked()
