"""Python-grade waiting: the GIL is released while waiting, and Ctrl-C (SIGINT) ends a wait
at once and gives the place in line up."""

import signal
import threading
import time

import fairlock
from conftest import wait_until, waiters


def test_other_threads_run_while_one_waits(lock_path, peers):
    holder = peers(lock_path)
    assert holder.call("acquire").startswith("acquired")
    lock = fairlock.Lock(lock_path)
    stamps = []
    stop = threading.Event()

    def count():
        n = 0
        while not stop.is_set():
            n += 1
            if n % 1000 == 0:
                stamps.append(time.monotonic())

    t = threading.Thread(target=count)
    t.start()
    try:
        start = time.monotonic()
        assert lock.acquire(timeout=0.6) is False
        end = time.monotonic()
    finally:
        stop.set()
        t.join()
    during = [s for s in stamps if start + 0.1 < s < end - 0.1]
    # Had the wait kept the GIL, the counting thread could not have run at all in between.
    assert len(during) > 10, f"{len(during)} thousands counted while waiting"
    assert holder.call("release") == "ok"


def test_waiting_threads_do_not_block_the_holder_thread(lock_path):
    lock = fairlock.Lock(lock_path)
    results = []
    lock.acquire()
    def take_and_give_back():
        results.append(lock.acquire(timeout=5))
        lock.release()

    waiting = [threading.Thread(target=take_and_give_back) for _ in range(3)]
    for t in waiting:
        t.start()
    wait_until(lambda: waiters(lock_path) == 3)
    total = sum(range(200_000))  # the holder (this thread) computes while 3 threads wait
    assert total > 0
    lock.release()
    for t in waiting:
        t.join()
    # Each waiter got the lock in turn.
    assert results == [True, True, True]


def interrupt(peer, lock_path, expected_waiters=1):
    """Sends SIGINT to `peer`, which waits in line; returns how long until it raised."""
    wait_until(lambda: waiters(lock_path) == expected_waiters)
    time.sleep(0.05)  # asleep in the futex wait by now, not spinning
    sent = time.monotonic()
    peer.signal(signal.SIGINT)
    answer = peer.reply(timeout=5).split()
    assert answer[:2] == ["raise", "KeyboardInterrupt"], answer
    return float(answer[2]) - sent


def test_ctrl_c_interrupts_a_blocking_acquire_within_100_ms(lock_path, peers):
    lock = fairlock.Lock(lock_path)
    waiter = peers(lock_path)
    behind = peers(lock_path)
    assert lock.acquire()
    latencies = []
    for _ in range(5):
        waiter.send("acquire")
        latencies.append(interrupt(waiter, lock_path))
        assert waiters(lock_path) == 0, "the interrupted waiter gave its ticket up"
    waiter.send("acquire 30")  # a timed wait too
    latencies.append(interrupt(waiter, lock_path))
    assert max(latencies) < 0.1, latencies
    # Nobody waits for the interrupted tickets: the next in line gets the lock at once.
    behind.send("acquire")
    wait_until(lambda: waiters(lock_path) == 1)
    lock.release()
    answer = behind.reply(timeout=5).split()
    assert answer[0] == "acquired" and answer[2] == "False"
    assert behind.call("release") == "ok"
    assert waiter.call("try").startswith("acquired")  # the interrupted peer is fine


def test_a_signal_handler_that_does_not_raise_keeps_the_wait(lock_path, peers):
    lock = fairlock.Lock(lock_path)
    waiter = peers(lock_path)
    assert waiter.call("count-sigint") == "ok"
    assert lock.acquire()
    waiter.send("acquire")
    wait_until(lambda: waiters(lock_path) == 1)
    for _ in range(3):
        waiter.signal(signal.SIGINT)
        time.sleep(0.05)
    assert not waiter.has_reply()
    assert waiters(lock_path) == 1, "still in line"
    lock.release()
    assert waiter.reply(timeout=5).startswith("acquired")
    # The handler ran (signals sent while one is pending merge into it, hence not always 3).
    assert 1 <= int(waiter.call("sigints")) <= 3
    assert waiter.call("release") == "ok"
