"""fairlock.RWLock: readers together, writers alone, arrival order, dead holders, across real
processes (tests/peer.py with KIND Read or Write) and threads."""

import errno
import pickle
import signal
import threading
import time

import pytest

import fairlock
from conftest import wait_until, waiters


def test_readers_hold_together_across_processes(lock_path, peers):
    a = peers(lock_path, kind="Read")
    b = peers(lock_path, kind="Read")
    assert a.call("acquire").startswith("acquired")
    assert b.call("try").startswith("acquired"), "a second reader shares the lock"
    rw = fairlock.RWLock(lock_path)
    assert rw.read().locked() and not rw.write().locked()
    assert rw.write().acquire(blocking=False) is False, "a writer waits for the readers"
    st = fairlock.status(lock_path)
    assert st["kind"] == "rwlock" and len(st["holders"]) == 2
    assert all(h["shared"] for h in st["holders"])
    assert a.call("release") == "ok" and b.call("release") == "ok"
    with rw.write() as got:
        assert got is True and rw.write().locked()
        assert rw.write().token > 0 and rw.write().mode == "write"


def test_a_writer_excludes_readers_and_goes_before_later_readers(lock_path, peers):
    reader = peers(lock_path, kind="Read")
    assert reader.call("acquire").startswith("acquired")
    writer = peers(lock_path, kind="Write")
    writer.send("acquire")
    wait_until(lambda: waiters(lock_path) == 1)
    late = peers(lock_path, kind="Read")
    assert late.call("try") == "false", "a reader may not pass a waiting writer"
    late.send("acquire")
    wait_until(lambda: waiters(lock_path) == 2)
    assert reader.call("release") == "ok"
    w = writer.reply(timeout=10).split()
    assert w[0] == "acquired"
    assert not late.has_reply(), "the late reader went with (or before) the writer"
    time.sleep(0.05)
    assert not late.has_reply()
    assert writer.call("release") == "ok"
    r = late.reply(timeout=10).split()
    assert r[0] == "acquired" and int(r[1]) > int(w[1])


def test_a_killed_reader_and_a_killed_writer_are_recovered(lock_path, peers):
    rw = fairlock.RWLock(lock_path)
    for kind, mine in (("Read", rw.write()), ("Write", rw.read())):
        holder = peers(lock_path, kind=kind)
        assert holder.call("acquire").startswith("acquired")
        assert mine.acquire(timeout=0.05) is False
        holder.signal(signal.SIGKILL)
        assert mine.acquire(timeout=10) is True, kind
        assert mine.owner_died is True, f"a dead {kind} holder is reported"
        mine.release()
        assert mine.acquire(blocking=False) and mine.owner_died is False
        mine.release()


def test_a_thread_asking_again_waits_in_line_as_anyone(lock_path):
    rw = fairlock.RWLock(lock_path)
    with rw.read():
        # A second read is granted at once (nobody waits to write); a write waits behind the
        # read, as with threading.Lock, and times out.
        assert rw.read().acquire(timeout=0.1) is True
        rw.read().release()
        start = time.monotonic()
        assert rw.write().acquire(timeout=0.2) is False
        assert time.monotonic() - start >= 0.19
        # Another thread reads alongside.
        other = fairlock.RWLock(lock_path)
        got = []
        t = threading.Thread(target=lambda: got.append(other.read().acquire(False)))
        t.start()
        t.join()
        assert got == [True]
        other.read().release()
    # The write side is released by another thread (a hand-off), as threading.Lock's.
    assert rw.write().acquire()
    t = threading.Thread(target=rw.write().release)
    t.start()
    t.join()
    assert not rw.write().locked()


def test_sides_release_and_errors_as_threading(lock_path):
    rw = fairlock.RWLock(lock_path)
    with pytest.raises(RuntimeError):
        rw.read().release()
    assert rw.read().acquire() is True
    with pytest.raises(RuntimeError):
        rw.write().release()  # this object holds the read side, not the write side
    rw.read().release()
    with pytest.raises(RuntimeError):
        rw.read().token
    with pytest.raises(fairlock.IncompatibleLockFile):
        fairlock.RWLock(lock_path, name="x")  # a file of one lock has no names
    with pytest.raises(fairlock.IncompatibleLockFile) as e:
        fairlock.Lock(lock_path)  # an exclusive lock cannot open a reader/writer lock file
    assert "reader/writer lock" in str(e.value) and e.value.filename == lock_path
    again = pickle.loads(pickle.dumps(rw))
    assert isinstance(again, fairlock.RWLock) and again.path == rw.path
    assert "RWLock" in repr(rw)


def test_leased_grants_of_one_process_each_have_their_lease_and_are_taken_over(lock_path, peers):
    rw = fairlock.RWLock(lock_path, lease=0.3)
    assert rw.read().acquire()
    other = fairlock.RWLock(lock_path, lease=0.3)
    got = []
    t = threading.Thread(target=lambda: got.append(_try_read(other)))
    t.start()
    t.join()
    assert got == ["acquired"], "a second leased grant of the process, with its own lease"
    writer = peers(lock_path, kind="Write")
    w = writer.call("acquire 10").split()
    assert w[0] == "acquired" and w[2] == "True", "the overdue reader was taken over"
    with pytest.raises(fairlock.LockLost):
        rw.read().release()
    assert writer.call("release") == "ok"


def _try_read(rw):
    try:
        rw.read().acquire()
        return "acquired"
    except ValueError:
        return "ValueError"
