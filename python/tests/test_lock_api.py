"""fairlock.Lock in one process: threading's argument rules, ownership, errors, status."""

import errno
import math
import os
import pickle
import re
import threading
import time
import weakref

import pytest

import fairlock

class Index:
    """An int-like object (threading takes `blocking` as a C int)."""

    def __index__(self) -> int:
        return 1


# (args, kwargs) for acquire(), each run on a free threading.Lock and a free fairlock.Lock.
ACQUIRE_CALLS = [
    ((), {}),
    ((True,), {}),
    ((False,), {}),
    ((0,), {}),
    ((1,), {}),
    (("",), {}),
    (([1],), {}),
    ((1.5,), {}),
    ((None,), {}),
    ((2**70,), {}),
    ((-1,), {}),
    ((Index(),), {}),
    ((True, -1), {}),
    ((True, -1.0), {}),
    ((True, 0), {}),
    ((True, 0.0), {}),
    ((True, 0.05), {}),
    ((True, 3), {}),
    ((False, -1), {}),
    ((False, 0), {}),
    ((False, 1.5), {}),
    ((True, -2), {}),
    ((True, -0.5), {}),
    ((True, math.nan), {}),
    ((True, math.inf), {}),
    ((True, 1e10), {}),
    ((True, 1e20), {}),
    ((True, "1"), {}),
    ((True, None), {}),
    ((), {"timeout": 0.01}),
    ((), {"blocking": False}),
    ((), {"blocking": False, "timeout": -1}),
    ((), {"blocking": False, "timeout": 2}),
    ((), {"blocking": 0, "timeout": -1}),
    ((True, 1, 2), {}),
    ((), {"block": True}),
]


def outcome(lock, args, kwargs):
    """What acquire(*args, **kwargs) did: ("returned", value) or ("raised", exception type);
    a successful acquire is released again."""
    try:
        got = lock.acquire(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - compared below
        return ("raised", type(e))
    if got:
        lock.release()
    return ("returned", got)


@pytest.mark.parametrize("args,kwargs", ACQUIRE_CALLS)
def test_acquire_arguments_as_threading(lock_path, args, kwargs):
    theirs = outcome(threading.Lock(), args, kwargs)
    ours = outcome(fairlock.Lock(lock_path), args, kwargs)
    assert ours == theirs


@pytest.mark.parametrize(
    "args,kwargs,expected",
    [((False,), {}, False), ((True, 0), {}, False), ((True, 0.05), {}, False)],
)
def test_acquire_of_a_lock_held_by_another_thread_returns_false(lock_path, args, kwargs, expected):
    lock = fairlock.Lock(lock_path)
    held, done = threading.Event(), threading.Event()

    def holder():
        with lock:
            held.set()
            done.wait()

    t = threading.Thread(target=holder)
    t.start()
    held.wait()
    try:
        assert lock.acquire(*args, **kwargs) is expected
    finally:
        done.set()
        t.join()
    assert lock.acquire(blocking=False)
    lock.release()


def test_timed_acquire_waits_its_timeout_and_gives_its_place_up(lock_path):
    holder = fairlock.Lock(lock_path)
    waiter = fairlock.Lock(lock_path)
    got = []
    with holder:
        t = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=0.2)))
        start = time.monotonic()
        t.start()
        t.join()
        waited = time.monotonic() - start
        assert got == [False]
        assert 0.19 <= waited < 2.0
        assert fairlock.status(lock_path)["waiters"] == 0  # the ticket was given up
    assert waiter.acquire(blocking=False)  # and nobody is left in line for it
    waiter.release()


def test_release_rules(lock_path):
    lock = fairlock.Lock(lock_path)
    with pytest.raises(RuntimeError, match="release unlocked lock"):
        lock.release()
    assert lock.acquire()
    errors = []

    def other_thread():
        try:
            lock.release()
        except RuntimeError as e:
            errors.append(e)

    # As threading.Lock: another thread of the process releases it.
    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    assert errors == []
    assert not lock.locked()
    with pytest.raises(RuntimeError, match="release unlocked lock"):
        lock.release()


def test_the_holder_asking_again_waits_for_another_threads_release(lock_path):
    lock = fairlock.Lock(lock_path)
    other = fairlock.Lock(lock_path)  # another object on the same file: the same lock
    with lock:
        for l in (lock, other):
            assert l.acquire(blocking=False) is False
            assert l.acquire(timeout=0) is False
            start = time.monotonic()
            assert l.acquire(timeout=0.3) is False  # waits its timeout, as threading's
            assert time.monotonic() - start >= 0.29
            assert fairlock.status(lock_path)["waiters"] == 0
    # A blocking acquire by the holding thread is let in by another thread's release.
    assert lock.acquire()
    threading.Timer(0.1, lock.release).start()
    assert lock.acquire(timeout=10) is True
    lock.release()
    assert not lock.locked()


def test_a_lock_outlives_the_thread_that_acquired_it(lock_path):
    lock = fairlock.Lock(lock_path)
    t = threading.Thread(target=lock.acquire)
    t.start()
    t.join()
    # The grant is the process's: the thread's end leaves it held, with no owner_died.
    assert lock.locked()
    assert fairlock.Lock(lock_path).acquire(timeout=0.1) is False
    token = lock.token
    lock.release()
    with lock:
        assert lock.token > token
        assert lock.owner_died is False


def test_with_returns_true_and_releases(lock_path):
    lock = fairlock.Lock(lock_path)
    with lock as entered:
        assert entered is True
        assert lock.locked()
    assert not lock.locked()
    with pytest.raises(ZeroDivisionError):
        with lock:
            1 / 0
    assert not lock.locked()


def test_tokens_strictly_increase_and_are_per_grant(lock_path):
    lock = fairlock.Lock(lock_path)
    tokens = []
    for _ in range(5):
        with lock:
            tokens.append(lock.token)
            assert lock.owner_died is False
    assert tokens == sorted(set(tokens))
    assert tokens[0] > 0
    with pytest.raises(RuntimeError, match="holds no grant"):
        lock.token
    with pytest.raises(RuntimeError):
        lock.owner_died
    with pytest.raises(RuntimeError):
        lock.check()


def test_lease_check_and_extend(lock_path):
    lock = fairlock.Lock(lock_path, lease=5)
    assert lock.lease == 5.0
    with lock:
        lock.check()
        lock.extend(10)
        assert 9000 < fairlock.status(lock_path)["lease_remaining_ms"] <= 10000
        with pytest.raises(ValueError):
            lock.extend(0)
        with pytest.raises(ValueError):
            lock.extend(-1)
    unleased = fairlock.Lock(lock_path)
    assert unleased.lease is None
    with unleased:
        with pytest.raises(ValueError, match="without a lease"):
            unleased.extend(1)


@pytest.mark.parametrize("lease", [0, -1, math.nan, math.inf])
def test_bad_lease_is_a_value_error(lock_path, lease):
    with pytest.raises(ValueError):
        fairlock.Lock(lock_path, lease=lease)


def test_named_locks_share_one_file(lock_path):
    jobs = fairlock.Lock(lock_path, name="jobs")
    users = fairlock.Lock(lock_path, name="user-\u00e9")
    again = fairlock.RLock(lock_path, name="again")
    assert jobs.acquire(blocking=False)
    assert users.acquire(blocking=False)  # another name: not excluded by "jobs"
    assert fairlock.Lock(lock_path, name="jobs").locked()  # that name's holder, not the file's
    assert not fairlock.Lock(lock_path, name="other").locked()
    got = []
    t = threading.Thread(
        target=lambda: got.append(fairlock.Lock(lock_path, name="jobs").acquire(timeout=0.01))
    )
    t.start()
    t.join()
    assert got == [False]  # "jobs" is held (by this thread)
    with again, again:
        pass
    st = fairlock.status(lock_path)
    assert st["kind"] == "names"
    by_name = {n["name"]: n for n in st["names"]}
    assert set(by_name) == {"jobs", "user-\u00e9", "again", "other"}
    assert by_name["jobs"]["held"] and by_name["jobs"]["kind"] == "exclusive"
    assert not by_name["again"]["held"]
    assert "name='jobs'" in repr(jobs) or 'name="jobs"' in repr(jobs)
    copy = pickle.loads(pickle.dumps(jobs))
    assert "jobs" in repr(copy)  # the same name, reopened
    jobs.release()
    users.release()
    with pytest.raises(TypeError, match="name must be a str"):
        fairlock.Lock(lock_path, name=b"jobs")
    with pytest.raises(ValueError):
        fairlock.Lock(lock_path, name="x" * 256)
    with pytest.raises(fairlock.IncompatibleLockFile) as e:
        fairlock.Lock(lock_path)  # a file of named locks is not a file of one lock
    assert "named locks" in str(e.value)
    fairlock.Lock(str(lock_path) + ".single", name=None)  # the default is accepted


def test_errors_name_the_file(tmp_path):
    missing = str(tmp_path / "no" / "such" / "dir.lock")
    with pytest.raises(fairlock.Error) as e:
        fairlock.Lock(missing)
    assert isinstance(e.value, OSError)
    assert e.value.errno == errno.ENOENT
    assert e.value.filename == missing
    assert missing in str(e.value)

    not_a_lock = tmp_path / "notes.txt"
    not_a_lock.write_text("my notes")
    with pytest.raises(fairlock.NotALockFile) as e:
        fairlock.Lock(str(not_a_lock))
    assert str(not_a_lock) in str(e.value)
    assert not_a_lock.read_text() == "my notes", "left untouched"

    with pytest.raises(fairlock.Error, match="directory"):
        fairlock.Lock(str(tmp_path))
    with pytest.raises(fairlock.Error):
        fairlock.status(str(tmp_path / "absent.lock"))


@pytest.mark.parametrize(
    "offset,value,error",
    [
        (8, 3, fairlock.IncompatibleLockFile),  # a newer version (docs/FILE_FORMAT.md)
        (8, 1, fairlock.IncompatibleLockFile),  # the old version 1
        (36, 100, fairlock.CorruptLockFile),  # slots_offset, inside the participants
    ],
)
def test_damaged_files_are_refused_and_left_alone(lock_path, offset, value, error):
    with fairlock.Lock(lock_path):
        pass
    with open(lock_path, "r+b") as f:
        f.seek(offset)
        f.write(value.to_bytes(4, "little"))
    with open(lock_path, "rb") as f:
        damaged = f.read()
    with pytest.raises(error) as e:
        fairlock.Lock(lock_path)
    assert lock_path in str(e.value) and e.value.filename == lock_path
    with open(lock_path, "rb") as f:
        assert f.read() == damaged


def test_exceptions_pickle():
    e = fairlock.LockLost(None, "/x.lock: the lock was lost", "/x.lock")
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is fairlock.LockLost
    assert (str(back), back.filename, back.errno) == (str(e), "/x.lock", None)
    assert issubclass(fairlock.NotALockFile, fairlock.Error)
    assert issubclass(fairlock.Error, OSError)


def test_status_has_the_keys_of_the_cli_json(lock_path):
    lock = fairlock.Lock(lock_path, lease=30)
    with lock:
        st = fairlock.status(lock_path)
        assert set(st) == {
            "path", "kind", "permits", "bypass_bound", "held", "owner_pid", "owner_tid", "token",
            "next_ticket", "waiters", "arriving", "lease_remaining_ms", "holder", "holders", "queue",
        }
        assert st["kind"] == "exclusive" and st["permits"] is None and st["bypass_bound"] is None
        assert st["holders"] == [st["holder"]]
        assert st["held"] is True and st["path"] == lock_path
        assert st["owner_pid"] == os.getpid()
        assert st["owner_tid"] is None  # a Lock's grant is the process's, not a thread's
        assert st["token"] == lock.token
        assert set(st["holder"]) == {
            "ticket", "token", "state", "pid", "tid", "alive", "held_ms",
            "lease_remaining_ms", "owner_died", "shared",
        }
        assert st["holder"]["shared"] is False
        assert st["holder"]["alive"] is True
        assert 0 <= st["holder"]["held_ms"] < 5000
        assert st["queue"] == [] and st["waiters"] == 0
    st = fairlock.status(lock_path)
    assert st["held"] is False and st["holder"] is None and st["owner_pid"] is None
    rlock = fairlock.RLock(lock_path + "-r")
    with rlock:  # an RLock's grant is its thread's
        assert fairlock.status(lock_path + "-r")["owner_tid"] == threading.get_native_id()


def test_pickled_lock_reopens_the_same_file(lock_path):
    lock = fairlock.Lock(lock_path, lease=7.5)
    with lock:
        copy = pickle.loads(pickle.dumps(lock))
        assert type(copy) is fairlock.Lock
        assert (copy.path, copy.lease) == (lock_path, 7.5)
        assert copy.locked()
        assert copy.acquire(blocking=False) is False  # same thread, same lock
    r = pickle.loads(pickle.dumps(fairlock.RLock(lock_path)))
    assert type(r) is fairlock.RLock


def test_path_like_and_bytes_paths(tmp_path):
    p = tmp_path / "pathlike.lock"
    with fairlock.Lock(p) as got:
        assert got
    assert fairlock.Lock(bytes(p)).path == str(p)
    assert fairlock.status(p)["held"] is False


@pytest.mark.parametrize("cls", [fairlock.Lock, fairlock.RLock])
def test_weak_references(lock_path, cls):
    lock = cls(lock_path)
    ref = weakref.ref(lock)
    assert ref() is lock
    del lock
    assert ref() is None


def test_repr(lock_path):
    lock = fairlock.Lock(lock_path, lease=2)
    assert re.fullmatch(
        rf"<unlocked fairlock\.Lock object '{re.escape(lock_path)}', lease=2\.0 at 0x[0-9a-f]+>",
        repr(lock),
    )
    with lock:
        assert repr(lock).startswith("<locked fairlock.Lock object ")
    rlock = fairlock.RLock(lock_path + "-r")
    with rlock, rlock:
        assert "count=2 (this thread)" in repr(rlock)


def test_a_lock_object_dropped_while_holding_keeps_the_lock(lock_path):
    """Nothing can release a dropped object's grant, and releasing it behind the code that
    believes it holds the lock would make two holders: it is kept until the process ends."""
    fairlock.Lock(lock_path).acquire()
    import gc

    gc.collect()
    st = fairlock.status(lock_path)
    assert st["held"] and st["owner_pid"] == os.getpid()
    assert fairlock.Lock(lock_path).acquire(timeout=0.05) is False
