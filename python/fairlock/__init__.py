"""fairlock: a strictly fair (FIFO), fast, crash-safe lock for threads *and processes*.

The lock's state is a small memory-mapped file: every process that opens the same path
shares the lock, and waiters are served in the order they arrived, across processes. A
holder that dies never blocks the others (the next one is told ``owner_died``); a holder
past its lease is taken over and learns it (``LockLost``); every grant carries a strictly
increasing fencing ``token``.

>>> import fairlock, tempfile, os
>>> lock = fairlock.Lock(os.path.join(tempfile.gettempdir(), "doc-jobs.lock"))
>>> with lock:
...     lock.token > 0
True

The classes have ``threading``'s shape: ``Lock`` and ``RLock`` (``acquire(blocking=True,
timeout=-1)``, ``release()``, ``locked()``, ``with``), ``RWLock``, whose ``read()`` and
``write()`` sides have that shape too, and ``Semaphore`` (``threading.Semaphore``'s shape,
bounded: ``BoundedSemaphore`` is the same class); ``status(path)`` shows holders and queue.
Every class takes ``name=`` for one of many locks in one file. As with ``threading``, a
``Lock``'s grant (and an ``RWLock`` side's) is the process's, an ``RLock``'s the thread's, a
semaphore's permits the object's; see ``help(fairlock.Lock)``.
"""

import os as _os

from ._errors import CorruptLockFile, Error, IncompatibleLockFile, LockLost, NotALockFile
from ._fairlock import (
    Lock,
    RLock,
    RWLock,
    RWLockSide,
    Semaphore,
    __version__,
    _after_fork_in_child,
    status,
)

# A semaphore shared through a file cannot grow: every release gives back a permit taken.
BoundedSemaphore = Semaphore

# A child does not hold the locks its parent held: tell the native module, which tags every
# grant with the fork generation it was made in, that the older ones are the parent's.
_os.register_at_fork(after_in_child=_after_fork_in_child)

__all__ = [
    "Lock",
    "RLock",
    "RWLock",
    "RWLockSide",
    "Semaphore",
    "BoundedSemaphore",
    "status",
    "Error",
    "LockLost",
    "NotALockFile",
    "CorruptLockFile",
    "IncompatibleLockFile",
    "__version__",
]
