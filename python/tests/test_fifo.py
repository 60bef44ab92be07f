"""FIFO across processes and threads: grants follow arrival order exactly."""

import threading

import fairlock
from conftest import wait_until, waiters


def test_fifo_across_8_processes(lock_path, peers):
    """8 processes queue one after the other behind our hold; each is told to release only
    when it holds, so the order in which they report holding is the grant order."""
    lock = fairlock.Lock(lock_path)
    ps = [peers(lock_path) for _ in range(8)]
    assert lock.acquire()
    for i, p in enumerate(ps):
        p.send("acquire")
        wait_until(lambda: waiters(lock_path) == i + 1)  # p is in line: arrival order fixed
    queue = fairlock.status(lock_path)["queue"]
    assert [w["pid"] for w in queue] == [p.pid for p in ps]
    lock.release()
    tokens = []
    for i, p in enumerate(ps):
        answer = p.reply(timeout=10).split()
        assert answer[0] == "acquired", answer
        others = [q.pid for q in ps[i + 1 :] if q.has_reply()]
        assert others == [], f"peer {i} holds, yet {others} answered too"
        tokens.append(int(answer[1]))
        assert answer[2] == "False"  # everyone released properly
        assert fairlock.status(lock_path)["owner_pid"] == p.pid
        assert p.call("release") == "ok"
    assert tokens == sorted(tokens) and len(set(tokens)) == 8
    assert lock.acquire(blocking=False)
    assert lock.token > tokens[-1]
    lock.release()


def test_nonblocking_acquire_never_jumps_the_queue(lock_path, peers):
    lock = fairlock.Lock(lock_path)
    p = peers(lock_path)
    lock.acquire()
    p.send("acquire")
    wait_until(lambda: waiters(lock_path) == 1)
    lock.release()
    # The release granted the lock to the peer in line: it is not free for a try, not even
    # before the peer has woken up.
    assert lock.acquire(blocking=False) is False
    assert p.reply().startswith("acquired")
    assert lock.acquire(blocking=False) is False  # held by the peer
    assert p.call("release") == "ok"
    assert lock.acquire(blocking=False) is True
    lock.release()


def test_fifo_across_threads(lock_path):
    lock = fairlock.Lock(lock_path)
    order = []
    lock.acquire()
    threads = []
    for i in range(6):

        def work(i=i):
            with lock:
                order.append(i)

        t = threading.Thread(target=work)
        t.start()
        threads.append(t)
        wait_until(lambda: waiters(lock_path) == i + 1)
    lock.release()
    for t in threads:
        t.join()
    assert order == list(range(6))


def test_mutual_exclusion_across_threads(lock_path):
    lock = fairlock.Lock(lock_path)
    counter = {"n": 0}

    def work():
        for _ in range(200):
            with lock:
                n = counter["n"]
                threading.Event().wait(0)  # a chance for another thread to run
                counter["n"] = n + 1

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counter["n"] == 1200
