"""CPython's own lock tests (``Lib/test/lock_tests.py`` of the interpreter running them, as
installed with it: ``test.lock_tests``), run against fairlock's classes, each lock on a fresh
lock file:

* ``LockTests`` against ``fairlock.Lock`` and against ``RWLock(...).write()``;
* ``RLockTests`` against ``fairlock.RLock``;
* ``BoundedSemaphoreTests`` against ``fairlock.Semaphore`` (bounded: ``BoundedSemaphore`` is
  the same class);
* ``ConditionTests`` with ``threading.Condition(fairlock.RLock(...))``.

Only what may differ from ``threading`` is left out, each with its reason: ``repr`` formats that
name CPython's own classes, and CPython-private methods (``_at_fork_reinit``). Without the
interpreter's ``test`` package the module fails to import: these tests never skip quietly.
"""

import itertools
import os
import tempfile
import threading

from test import lock_tests

import fairlock

_DIR = tempfile.TemporaryDirectory(prefix="fairlock-cpython-lock-tests-")
_COUNTER = itertools.count()


def _fresh_path() -> str:
    return os.path.join(_DIR.name, f"lock-{next(_COUNTER)}")


def _lock():
    return fairlock.Lock(_fresh_path())


def _rwlock_write_side():
    return fairlock.RWLock(_fresh_path()).write()


def _rlock():
    return fairlock.RLock(_fresh_path())


def _semaphore(value=1):
    return fairlock.Semaphore(_fresh_path(), value)


def _condition(lock=None):
    return threading.Condition(_rlock() if lock is None else lock)


_PRIVATE = "a CPython-private method of threading's own locks"


class FairLockTests(lock_tests.LockTests):
    locktype = staticmethod(_lock)

    def test_at_fork_reinit(self):
        self.skipTest(_PRIVATE)


class RWLockWriteSideTests(lock_tests.LockTests):
    locktype = staticmethod(_rwlock_write_side)

    def test_repr(self):
        # "<unlocked fairlock.RWLockSide (write) object ...>": the class name has a space.
        self.assertRegex(repr(self.locktype()), "<unlocked fairlock.RWLockSide .* at .*>")

    def test_locked_repr(self):
        lock = self.locktype()
        lock.acquire()
        self.assertRegex(repr(lock), "<locked fairlock.RWLockSide .* at .*>")

    def test_at_fork_reinit(self):
        self.skipTest(_PRIVATE)


class FairRLockTests(lock_tests.RLockTests):
    locktype = staticmethod(_rlock)


class FairBoundedSemaphoreTests(lock_tests.BoundedSemaphoreTests):
    semtype = staticmethod(_semaphore)

    def test_repr(self):
        # threading's is "<threading.BoundedSemaphore at 0x...: value=3/3>"; ours names the file
        # and counts this object's permits.
        sem = self.semtype(3)
        self.assertRegex(repr(sem), r"<fairlock\.Semaphore '.*', value=3, 0 held by this object>")
        sem.acquire()
        self.assertRegex(repr(sem), r"<fairlock\.Semaphore '.*', value=3, 1 held by this object>")


class FairConditionTests(lock_tests.ConditionTests):
    condtype = staticmethod(_condition)
