"""Crash safety and leases: a SIGKILLed holder, a thread that ends holding, a lease taken
over."""

import signal
import threading
import time

import pytest

import fairlock
from conftest import wait_until, waiters


def test_sigkilled_holder_next_gets_owner_died(lock_path, peers):
    holder = peers(lock_path)
    answer = holder.call("acquire").split()
    assert answer[0] == "acquired"
    lock = fairlock.Lock(lock_path)
    assert lock.acquire(timeout=0.1) is False  # really held
    got = []

    def wait_for_it():
        got.append(lock.acquire(timeout=10))
        got.append(lock.owner_died)
        got.append(lock.token)
        lock.release()

    t = threading.Thread(target=wait_for_it)
    t.start()
    wait_until(lambda: waiters(lock_path) == 1)
    killed = time.monotonic()
    holder.signal(signal.SIGKILL)
    t.join()
    took = time.monotonic() - killed
    assert got[:2] == [True, True], "the next holder is told the owner died"
    assert got[2] > int(answer[1])
    assert took < 2.0
    assert lock.acquire(blocking=False)
    assert lock.owner_died is False  # released properly this time
    lock.release()


def test_waiter_of_a_sigkilled_holder_is_told(lock_path, peers):
    holder = peers(lock_path)
    waiter = peers(lock_path)
    assert holder.call("acquire").startswith("acquired")
    waiter.send("acquire")
    wait_until(lambda: waiters(lock_path) == 1)
    holder.signal(signal.SIGKILL)
    answer = waiter.reply(timeout=10).split()
    assert answer[0] == "acquired" and answer[2] == "True"
    assert waiter.call("release") == "ok"


def test_thread_that_ends_holding_an_rlock_gives_it_up_as_dead(lock_path):
    # An RLock's grant is its thread's (a Lock's is the process's: test_lock_api).
    lock = fairlock.RLock(lock_path)
    t = threading.Thread(target=lock.acquire)
    t.start()
    t.join()
    assert lock.acquire(timeout=5), "a thread's end releases what it held"
    assert lock.owner_died is True
    lock.release()


def test_lease_taken_over_lock_lost(lock_path, peers):
    lock = fairlock.Lock(lock_path, lease=0.3)
    waiter = peers(lock_path)
    assert lock.acquire()
    mine = lock.token
    lock.check()
    waiter.send("acquire")
    answer = waiter.reply(timeout=10).split()  # waits out our lease, then takes over
    assert answer[0] == "acquired" and answer[2] == "True"
    assert int(answer[1]) > mine
    with pytest.raises(fairlock.LockLost) as e:
        lock.check()
    assert e.value.filename == lock_path and lock_path in str(e.value)
    with pytest.raises(fairlock.LockLost):
        lock.extend(10)
    assert lock.token == mine  # still this thread's (lost) grant until it is released
    with pytest.raises(fairlock.LockLost):
        lock.release()
    with pytest.raises(RuntimeError):
        lock.release()  # the lost grant is gone now
    assert waiter.call("release") == "ok"
    assert lock.acquire(blocking=False)
    lock.release()


def test_lease_lost_is_raised_at_the_end_of_a_with_block(lock_path, peers):
    lock = fairlock.Lock(lock_path, lease=0.2)
    waiter = peers(lock_path)
    with pytest.raises(fairlock.LockLost):
        with lock:
            waiter.send("acquire")
            assert waiter.reply(timeout=10).startswith("acquired")
    assert waiter.call("release") == "ok"


def test_extended_lease_is_not_taken_over(lock_path, peers):
    lock = fairlock.Lock(lock_path, lease=0.5)
    waiter = peers(lock_path)
    assert lock.acquire()
    waiter.send("acquire 1.5")
    wait_until(lambda: waiters(lock_path) == 1)
    for _ in range(20):  # 2 s in all, renewed to 0.5 s every 0.1 s
        time.sleep(0.1)
        lock.extend(0.5)
    assert waiter.reply(timeout=10) == "false"  # it timed out: never took over
    lock.check()
    lock.release()
