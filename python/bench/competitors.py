"""The locks the bench compares, behind one small interface (as parking_lot's benchmark/ and
crates/fairlock-bench's lockbench do): each competitor makes, in the process that uses it, a
lock object with acquire() and release() on a file (or key) in a given directory.

Each peer is configured as its documentation's basic example uses it; where a default would
fail under contention (portalocker's default is a non-blocking attempt with a timeout of 0),
the blocking form is used, which is also its fastest hand-off.
"""

import os
import threading
from dataclasses import dataclass
from typing import Callable, List


@dataclass(frozen=True)
class Competitor:
    name: str
    # How the contended run shares it: "processes" (each worker opens its own lock on the same
    # file) or "threads" (one lock object, worker threads of one process).
    workers: str
    make: Callable[[str], object]
    # How its acquire waits, for the report.
    waits: str


def _fairlock(d: str):
    import fairlock

    return fairlock.Lock(os.path.join(d, "fairlock.lock"))


def _filelock(d: str):
    import filelock

    return filelock.FileLock(os.path.join(d, "filelock.lock"))


def _portalocker(d: str):
    import portalocker

    return portalocker.Lock(
        os.path.join(d, "portalocker.lock"), flags=portalocker.LockFlags.EXCLUSIVE
    )


def _fasteners(d: str):
    import fasteners

    return fasteners.InterProcessLock(os.path.join(d, "fasteners.lock"))


class _DiskcacheLock:
    """diskcache.Lock with the Cache it needs (opened in the process that uses it)."""

    def __init__(self, d: str):
        import diskcache

        self.cache = diskcache.Cache(os.path.join(d, "diskcache"))
        self.lock = diskcache.Lock(self.cache, "bench")
        self.acquire = self.lock.acquire
        self.release = self.lock.release


COMPETITORS: List[Competitor] = [
    Competitor("fairlock", "processes", _fairlock, "futex, FIFO hand-off"),
    Competitor("threading.Lock", "threads", lambda d: threading.Lock(), "in-process only"),
    Competitor("filelock", "processes", _filelock, "flock LOCK_NB, polls every 50 ms"),
    Competitor("portalocker", "processes", _portalocker, "blocking flock (LockFlags.EXCLUSIVE)"),
    Competitor("fasteners", "processes", _fasteners, "lockf F_TLOCK, polls 10 ms doubling to 100 ms"),
    Competitor("diskcache.Lock", "processes", _DiskcacheLock, "SQLite add(), polls every 1 ms"),
]


def by_name(names: List[str]) -> List[Competitor]:
    known = {c.name: c for c in COMPETITORS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown competitors {unknown}; known: {sorted(known)}")
    return [known[n] for n in names]
