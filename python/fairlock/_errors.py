"""fairlock's exceptions (raised by the native module, fairlock._fairlock)."""

__all__ = ["Error", "LockLost", "NotALockFile", "CorruptLockFile", "IncompatibleLockFile"]


class Error(OSError):
    """Base of fairlock's errors: an ``OSError`` about a lock file.

    ``str(e)`` is the message, which names the file; ``e.filename`` is the file and
    ``e.errno`` the OS error number where there is one (``None`` otherwise), for example
    ``errno.EACCES`` when the file cannot be opened, ``errno.ETIMEDOUT`` when another
    process kept a new file's initialisation locked too long. Built as ``Error(errno, message,
    filename)``, as ``OSError`` is, so that it pickles.
    """

    def __str__(self) -> str:
        if self.strerror is not None:
            return str(self.strerror)
        return super().__str__()


class LockLost(Error):
    """The lock is no longer ours: its lease ran out and another holder took it over, or the
    grant was inherited through ``fork`` (a child never holds its parent's lock).

    Whatever was done under the lock since may have overlapped another holder: have
    downstream stores reject stale writes with the fencing ``token``.
    """


class NotALockFile(Error):
    """The file exists, is not empty, and is not a fairlock file; it was left untouched."""


class CorruptLockFile(Error):
    """The file is a fairlock file whose contents are inconsistent; it was left untouched.
    Also raised by every call of a lock object whose file another process truncated while it
    was in use (the lock's state is gone; the process survives it): open the path again."""


class IncompatibleLockFile(Error):
    """The file is a fairlock file of a format (or for a use) this version does not
    understand; it was left untouched."""
