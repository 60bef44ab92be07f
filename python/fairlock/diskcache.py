"""diskcache's lock recipes, fair and crash-safe: drop-in replacements for
``diskcache.Lock``, ``diskcache.RLock`` and ``diskcache.BoundedSemaphore`` — the same
constructors, ``acquire()``, ``release()``, ``locked()`` where diskcache has it, and ``with`` —
plus the seed's ``FairRLock(cache, key, expire=None)``, from which fairlock grew.

>>> import diskcache, tempfile
>>> import fairlock.diskcache as recipes
>>> cache = diskcache.Cache(tempfile.mkdtemp())
>>> lock = recipes.Lock(cache, 'report-123')
>>> lock.acquire()
>>> lock.release()
>>> with lock:
...     pass

``cache`` is a ``diskcache.Cache`` or ``FanoutCache`` (anything with a ``directory``) or the
path of its directory: ``diskcache`` itself is not needed (it is an optional dependency). The
lock state lives in one file, ``cache.db.fairlock``, in that directory: a file of named locks,
one name per key, not in the cache's database. Its name keeps it out of diskcache's own
maintenance: ``Cache.check(fix=True)`` deletes every file of the directory that its database
does not know, except those whose path contains ``cache.db`` (its database's name); a lock
file deleted while held would let the next opener make a new one and hold the same key. Keys are ``str``, ``bytes``, ``int``, ``float``
(``bool`` included) or tuples of these, encoded so that two keys are one lock exactly when
diskcache takes them for one cache key: ``1`` and ``"1"`` are different, ``1`` and ``1.0``
the same (SQLite compares numbers by value), ``True`` another; a key whose encoding is longer than 255 bytes is named
by its SHA-256. ``expire`` (seconds) becomes the lock's lease; ``tag`` is accepted and ignored
(there is no cache entry to tag).

What differs from diskcache's recipes, deliberately:

* **Arrival order**: waiters are served first come, first served, across threads and
  processes; diskcache's poll every millisecond and whoever polls first wins.
* **Crashes**: a holder that dies (killed, crashed) is taken over at once, the next holder
  seeing ``owner_died``; diskcache's key stays until ``expire`` (forever without one).
* **Expiry**: a holder past ``expire`` may be taken over by the next waiter, and finds out:
  its ``release()`` raises ``fairlock.LockLost``. diskcache's ``release()`` then silently
  deletes the *next* holder's key.
* **Ownership**: a ``Lock``'s grant is its process's, as with diskcache (any thread of the
  process may release it), but only through the object that acquired it: ``release()`` of an
  object that holds nothing raises ``RuntimeError`` (diskcache's deletes the key, whoever
  calls it, from any process); ``RLock.release()`` and
  ``BoundedSemaphore.release()`` without a hold raise diskcache's ``AssertionError`` with its
  message (also under ``python -O``, where diskcache's ``assert`` does nothing). A semaphore's
  permits belong to the object that acquired them (any thread of it may release them, and
  they stay taken if the object is dropped, until the process exits); diskcache's count is
  shared, so another object — even in another process — may release.
* ``acquire()`` also takes ``blocking`` and ``timeout`` (as ``threading``'s); with none it
  waits as long as it takes and returns ``None``, as diskcache's.
"""

import hashlib
import os
import struct
from typing import Any, Optional, Union

from ._fairlock import Lock as _Lock
from ._fairlock import RLock as _RLock
from ._fairlock import Semaphore as _Semaphore

__all__ = ["Lock", "RLock", "BoundedSemaphore", "FairRLock", "lock_file"]

#: The lock file's name in the cache directory.
FILE_NAME = "cache.db.fairlock"

_MAX_NAME = 255


def lock_file(cache: Union[str, "os.PathLike[str]", Any]) -> str:
    """The lock file of ``cache`` (a diskcache cache or its directory's path)."""
    directory = getattr(cache, "directory", cache)
    return os.path.join(os.fspath(directory), FILE_NAME)


def _encode(key: Any, top: bool = True) -> str:
    if isinstance(key, str):
        return "s:" + key
    if isinstance(key, bytes):
        return "b:" + key.hex()
    # diskcache stores ints and floats as SQLite numbers, which compare by value: 1 and 1.0
    # are one key there, so one lock here (a bool is pickled: a key of its own). Inside tuples
    # (pickled) types differ.
    if isinstance(key, bool):
        return "B:" + str(int(key))
    if top and isinstance(key, float) and key.is_integer():
        return "i:" + str(int(key))
    if isinstance(key, int):
        return "i:" + str(key)
    if isinstance(key, float):
        return "f:" + struct.pack(">d", key).hex()
    if isinstance(key, tuple):
        return "t:(" + ",".join(_encode(k, False) for k in key) + ")"
    raise TypeError(
        f"fairlock.diskcache: a key must be str, bytes, int, float or a tuple of these, "
        f"not {type(key).__name__}"
    )


def lock_name(key: Any) -> str:
    """The name of ``key``'s lock in the lock file (stable across processes and runs)."""
    name = _encode(key)
    if len(name.encode("utf-8")) > _MAX_NAME:
        name = "h:" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
    return name


def _wait(lock, blocking: bool, timeout: Optional[float]) -> Optional[bool]:
    if timeout is None:
        got = lock.acquire(blocking)
        return None if blocking else got
    return lock.acquire(blocking, timeout)


class _Recipe:
    """What the recipes share: ``acquire`` with diskcache's return (``None``) unless asked
    otherwise, the grant's ``token`` and ``owner_died``, and ``with``."""

    _lock: Any

    def acquire(self, blocking: bool = True, timeout: Optional[float] = None):
        """Waits in line (``None``, as diskcache's; with ``blocking=False`` or a ``timeout``,
        whether it was acquired)."""
        return _wait(self._lock, blocking, timeout)

    def release(self):
        raise NotImplementedError

    @property
    def token(self) -> int:
        """The fencing token of the grant (of this thread; of a semaphore, its last permit)."""
        return self._lock.token

    @property
    def owner_died(self) -> bool:
        """Whether a holder before that grant died or was taken over instead of releasing."""
        return self._lock.owner_died

    def __enter__(self):
        self.acquire()

    def __exit__(self, *exc_info):
        self.release()


class Lock(_Recipe):
    """A fair, crash-safe ``diskcache.Lock``: ``Lock(cache, key, expire=None, tag=None)``."""

    def __init__(self, cache, key, expire=None, tag=None):
        self._lock = _Lock(lock_file(cache), name=lock_name(key), lease=expire)
        self._key = key

    def release(self):
        """Releases the lock, from any thread (``RuntimeError`` if this object does not hold
        it; ``fairlock.LockLost`` if it was taken over after ``expire``)."""
        self._lock.release()

    def locked(self) -> bool:
        """Whether anyone holds the lock."""
        return self._lock.locked()


class RLock(_Recipe):
    """A fair, crash-safe ``diskcache.RLock``: re-entrant per process and thread."""

    def __init__(self, cache, key, expire=None, tag=None):
        self._lock = _RLock(lock_file(cache), name=lock_name(key), lease=expire)
        self._key = key

    def release(self):
        """Leaves one level; ``AssertionError('cannot release un-acquired lock')`` if this
        thread holds nothing."""
        try:
            self._lock.release()
        except RuntimeError as e:
            if type(e) is RuntimeError:  # not held by this thread (not LockLost, an OSError)
                raise AssertionError("cannot release un-acquired lock") from None
            raise


#: The seed's name for the fair re-entrant lock (``FairRLock(cache, key, expire=None)``).
FairRLock = RLock


class BoundedSemaphore(_Recipe):
    """A fair, crash-safe ``diskcache.BoundedSemaphore``:
    ``BoundedSemaphore(cache, key, value=1, expire=None, tag=None)``. Every user of the key
    must give the same ``value``."""

    def __init__(self, cache, key, value=1, expire=None, tag=None):
        self._lock = _Semaphore(lock_file(cache), value, name=lock_name(key), lease=expire)
        self._key = key

    def release(self):
        """Gives one of this object's permits back; ``AssertionError('cannot release
        un-acquired semaphore')`` if it holds none."""
        if self._lock.held == 0:
            raise AssertionError("cannot release un-acquired semaphore")
        self._lock.release()
