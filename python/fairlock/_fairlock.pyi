"""Type stubs of the native module (crates/fairlock-python); use it through ``fairlock``."""

import os
from types import TracebackType
from typing import Any, Awaitable, Callable, List, Optional, Tuple, Type, TypedDict, Union, final

_Path = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

__all__ = [
    "Lock",
    "RLock",
    "RWLock",
    "RWLockSide",
    "Semaphore",
    "status",
    "_after_fork_in_child",
    "_reopen",
    "_reopen_semaphore",
    "__version__",
]
__version__: str

@final
class Lock:
    """A strictly fair lock shared by threads and processes through the file at ``path``,
    in the shape of ``threading.Lock``: its grant is the process's (any thread releases it;
    the holding thread's ``acquire`` waits, for another thread's release)."""

    def __new__(
        cls, path: _Path, *, name: Optional[str] = None, lease: Optional[float] = None
    ) -> "Lock": ...
    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Waits in line; False if not acquired (``blocking=False`` or ``timeout``)."""
    def release(self) -> None:
        """Releases, from any thread; ``RuntimeError`` if this object does not hold it,
        ``LockLost`` if it was taken over."""
    def locked(self) -> bool:
        """True if held by any thread of any process."""
    def check(self) -> None:
        """``LockLost`` if this object's grant was taken over."""
    def extend(self, seconds: float) -> None:
        """Renews the lease to ``seconds`` from now."""
    @property
    def token(self) -> int:
        """This object's grant's fencing token."""
    @property
    def owner_died(self) -> bool:
        """The previous holder did not release (died, or its lease was taken over)."""
    @property
    def path(self) -> str: ...
    @property
    def lease(self) -> Optional[float]: ...
    def __enter__(self) -> bool: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...
    def acquire_async(self, timeout: Optional[float] = None) -> "Awaitable[bool]":
        """Waits in line without blocking the event loop (asyncio); True once acquired,
        False after ``timeout`` seconds. Cancelling the awaiting task gives the place up."""
    async def __aenter__(self) -> bool: ...
    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...
    def _is_owned(self) -> bool: ...
    def __reduce__(self) -> Tuple[Callable[..., "Lock"], Tuple[str, str, Optional[float], Optional[str]]]: ...

@final
class RLock:
    """A re-entrant ``Lock``, in the shape of ``threading.RLock``: its grant is the thread's
    (only that thread releases it; its exit gives it up)."""

    def __new__(
        cls, path: _Path, *, name: Optional[str] = None, lease: Optional[float] = None
    ) -> "RLock": ...
    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """One more level if this thread holds it; otherwise as ``Lock.acquire``."""
    def release(self) -> None:
        """Releases one level; the last one releases the lock."""
    def locked(self) -> bool: ...
    def check(self) -> None: ...
    def extend(self, seconds: float) -> None: ...
    @property
    def token(self) -> int: ...
    @property
    def owner_died(self) -> bool: ...
    @property
    def path(self) -> str: ...
    @property
    def lease(self) -> Optional[float]: ...
    def __enter__(self) -> bool: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...
    def _is_owned(self) -> bool: ...
    def _release_save(self) -> int: ...
    def _acquire_restore(self, depth: int) -> None: ...
    def _recursion_count(self) -> int: ...
    def __reduce__(self) -> Tuple[Callable[..., "RLock"], Tuple[str, str, Optional[float], Optional[str]]]: ...

@final
class RWLockSide:
    """One side of an ``RWLock`` (``read()`` or ``write()``), in the shape of
    ``threading.Lock``: its grants are the process's, as a ``Lock``'s."""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Waits in line for this side; False if not acquired."""
    def release(self) -> None: ...
    def locked(self) -> bool:
        """True if this side is held by any thread of any process."""
    def check(self) -> None: ...
    def extend(self, seconds: float) -> None: ...
    @property
    def token(self) -> int: ...
    @property
    def owner_died(self) -> bool: ...
    @property
    def mode(self) -> str:
        """``"read"`` or ``"write"``."""
    def __enter__(self) -> bool: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...
    def acquire_async(self, timeout: Optional[float] = None) -> "Awaitable[bool]":
        """Waits in line without blocking the event loop (asyncio); True once acquired,
        False after ``timeout`` seconds. Cancelling the awaiting task gives the place up."""
    async def __aenter__(self) -> bool: ...
    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...

@final
class RWLock:
    """A strictly fair reader/writer lock shared by threads and processes through the file at
    ``path``: readers together, writers alone, all in arrival order."""

    def __new__(
        cls, path: _Path, *, name: Optional[str] = None, lease: Optional[float] = None
    ) -> "RWLock": ...
    def read(self) -> RWLockSide:
        """The read side."""
    def write(self) -> RWLockSide:
        """The write side."""
    @property
    def path(self) -> str: ...
    @property
    def lease(self) -> Optional[float]: ...
    def __reduce__(self) -> Tuple[Callable[..., "RWLock"], Tuple[str, str, Optional[float], Optional[str]]]: ...

@final
class Semaphore:
    """At most ``value`` holders at once across threads and processes, in arrival order, in
    the shape of ``threading.BoundedSemaphore``: ``value`` is at least 1 (a semaphore shared
    through a file has all its permits from the start and cannot grow: releasing more than
    the object took raises ``ValueError``); permits belong to the object."""

    def __new__(
        cls,
        path: _Path,
        value: int = 1,
        *,
        name: Optional[str] = None,
        lease: Optional[float] = None,
    ) -> "Semaphore": ...
    def acquire(self, blocking: bool = True, timeout: Optional[float] = None) -> bool:
        """Takes a permit, waiting in line; False if none was taken."""
    def release(self, n: int = 1) -> None:
        """Gives ``n`` permits back (any thread may)."""
    @property
    def held(self) -> int:
        """How many permits this object holds."""
    @property
    def value(self) -> int:
        """The semaphore's number of permits."""
    @property
    def token(self) -> int:
        """The fencing token of the last permit this object acquired."""
    @property
    def owner_died(self) -> bool:
        """Whether the last permit was told a holder before it died."""
    def __enter__(self) -> bool: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...
    def acquire_async(self, timeout: Optional[float] = None) -> "Awaitable[bool]":
        """Waits in line for a permit without blocking the event loop (asyncio); True once
        taken, False after ``timeout`` seconds. Cancelling the awaiting task gives the place
        (or the permit) up."""
    async def __aenter__(self) -> bool: ...
    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...
    def __reduce__(
        self,
    ) -> Tuple[Callable[..., "Semaphore"], Tuple[str, int, Optional[str], Optional[float]]]: ...

class _Ticket(TypedDict):
    ticket: int
    token: int
    state: str
    pid: Optional[int]
    tid: Optional[int]
    alive: Optional[bool]
    shared: bool

class _HolderStatus(_Ticket):
    held_ms: Optional[int]
    lease_remaining_ms: Optional[int]
    owner_died: bool

class _WaiterStatus(_Ticket):
    waited_ms: Optional[int]

class _Status(TypedDict, total=False):
    name: str
    names: List["_Status"]
    path: str
    kind: str
    permits: Optional[int]
    bypass_bound: Optional[int]
    held: bool
    owner_pid: Optional[int]
    owner_tid: Optional[int]
    token: int
    next_ticket: int
    waiters: int
    arriving: int
    lease_remaining_ms: Optional[int]
    holder: Optional[_HolderStatus]
    holders: List[_HolderStatus]
    queue: List[_WaiterStatus]

def status(path: _Path) -> _Status:
    """Holder and queue of the lock file at ``path``, as ``fairlock status --json``; for a
    file of named locks, ``kind`` is ``"names"`` and ``names`` lists each name's."""

def _after_fork_in_child() -> None: ...
def _reopen_semaphore(
    path: _Path, value: int, name: Optional[str] = None, lease: Optional[float] = None
) -> Semaphore: ...
def _reopen(
    class_: str, path: _Path, lease: Optional[float], name: Optional[str] = None
) -> Any: ...
