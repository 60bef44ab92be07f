//! `fairlock.Lock`.

use std::ffi::OsString;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::acquire::{Blocking, Timeout, Wait};
use crate::async_acquire as asynchronous;
use crate::grants::Grants;
use crate::handle::Handle;
use crate::lock_object::{self as object, LockPath};
use crate::process_object as process;

/// A strictly fair (first come, first served) lock shared by threads and processes through the
/// lock file at ``path``, in the shape of ``threading.Lock``.
///
/// ``Lock(path, *, name=None, lease=None)`` opens the file, creating it (mode 0600) if needed;
/// every process that opens the same file shares the lock. Waiters are served in the order
/// they arrived, across processes; a non-blocking ``acquire`` never jumps the queue.
///
/// * ``lease``: seconds. A holder past its lease may be taken over by the next waiter; it
///   then learns it lost the lock from ``check()``, ``extend()`` or ``release()``
///   (``fairlock.LockLost``; at the end of a ``with`` block, from its exit).
/// * ``name``: a ``str`` of at most 255 bytes: the lock of that name in a *file of named
///   locks* (any number of independent locks in one file, each created on first use). A file
///   holds either one unnamed lock or named ones; opening one as the other raises
///   ``fairlock.IncompatibleLockFile``.
///
/// A holder that dies (killed, crashed, its thread ended) never blocks the others: the next
/// holder gets the lock with ``owner_died`` set. Every grant carries a fencing ``token`` that
/// strictly increases.
///
/// As ``threading.Lock``, the lock is not a thread's: any thread of the process may release it
/// (a hand-off between threads, a lock used as a signal), a blocking ``acquire`` by the thread
/// that holds it waits (for another thread's release) and a timed one returns False. The grant
/// belongs to the process: a thread's exit leaves it held, the process's death gives it up.
/// Dropping the object while it holds the lock keeps it held until the process ends. After
/// ``os.fork()`` the child does not hold its parent's lock: its ``release()`` raises
/// ``fairlock.LockLost`` and its ``acquire()`` waits in line like anyone's.
#[pyclass(frozen, weakref, module = "fairlock", name = "Lock")]
pub(crate) struct Lock {
    handle: Arc<Handle>,
    grants: Arc<Grants>,
}

impl Lock {
    pub(crate) fn from_handle(handle: Arc<Handle>) -> Lock {
        Lock {
            handle,
            grants: Arc::default(),
        }
    }
}

#[pymethods]
impl Lock {
    #[new]
    #[pyo3(signature = (path, *, name = None, lease = None))]
    fn new(
        py: Python<'_>,
        path: LockPath,
        name: Option<&Bound<'_, PyAny>>,
        lease: Option<f64>,
    ) -> PyResult<Lock> {
        Ok(Lock::from_handle(object::open(
            py, path, name, lease, false,
        )?))
    }

    /// Waits in line for the lock and returns True once it is this process's; as
    /// ``threading.Lock.acquire``. With ``blocking=False`` (or ``timeout=0``) it takes the lock
    /// only if it is free and nobody waits, else returns False at once. With a ``timeout``
    /// (seconds) it gives its place up and returns False when the time is out. The GIL is
    /// released while waiting; a signal handler that raises (Ctrl-C: ``KeyboardInterrupt``)
    /// ends the wait, gives the place up and the exception propagates. The thread holding the
    /// lock waits too, for another thread's ``release()``.
    #[pyo3(
        signature = (blocking = Blocking(true), timeout = Timeout::UNSET),
        text_signature = "($self, /, blocking=True, timeout=-1)"
    )]
    fn acquire(&self, py: Python<'_>, blocking: Blocking, timeout: Timeout) -> PyResult<bool> {
        let wait = Wait::from_threading(py, blocking, timeout)?;
        process::acquire(py, &self.handle, &self.grants, wait)
    }

    /// Releases the lock, from any thread; the next in line gets it. Raises ``RuntimeError``
    /// if this object does not hold it, ``fairlock.LockLost`` if it was taken over meanwhile
    /// (its lease ran out): whatever was done under it may have overlapped the next holder.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        process::release(py, &self.handle, &self.grants)
    }

    /// True if the lock is held, by any thread of any process.
    fn locked(&self, py: Python<'_>) -> PyResult<bool> {
        if self.grants.count() > 0 {
            return Ok(true);
        }
        object::locked_in_file(py, &self.handle)
    }

    /// Returns None while the lock is still this object's; raises ``fairlock.LockLost`` if its
    /// lease ran out and it was taken over, ``RuntimeError`` if this object does not hold it.
    fn check(&self, py: Python<'_>) -> PyResult<()> {
        process::check(py, &self.handle, &self.grants)
    }

    /// Renews the lease: it now ends ``seconds`` from now. Raises ``fairlock.LockLost`` if it
    /// was already taken over, ``ValueError`` for a lock opened without a lease.
    fn extend(&self, py: Python<'_>, seconds: f64) -> PyResult<()> {
        process::extend(py, &self.handle, &self.grants, seconds)
    }

    /// The fencing token of this object's grant (strictly increasing across grants of the
    /// file). ``RuntimeError`` if this object does not hold the lock.
    #[getter]
    fn token(&self) -> PyResult<u64> {
        process::with_grant(&self.handle, &self.grants, |g| g.token())
    }

    /// True if the previous holder did not release the lock (it died, or its lease was taken
    /// over): the data it protects may be half-written. ``RuntimeError`` if this object does
    /// not hold the lock.
    #[getter]
    fn owner_died(&self) -> PyResult<bool> {
        process::with_grant(&self.handle, &self.grants, |g| g.owner_died())
    }

    /// The lock file's path.
    #[getter]
    fn path(&self) -> OsString {
        self.handle.path().as_os_str().to_owned()
    }

    /// The lease in seconds, or None.
    #[getter]
    fn lease(&self) -> Option<f64> {
        self.handle.lease().map(|d| d.as_secs_f64())
    }

    /// Waits in line for the lock without blocking the event loop (asyncio): ``await
    /// lock.acquire_async()`` returns True once the lock is this process's, as ``acquire()``
    /// would; ``timeout`` (seconds) gives the place up and returns False when the time is out.
    /// The waiting is done by a thread of the library's own; the place in line is taken at the
    /// call. Cancelling the awaiting task (``asyncio.wait_for``'s timeout included) gives the
    /// place up at once. ``async with lock:`` does the same.
    #[pyo3(signature = (timeout = None))]
    fn acquire_async<'py>(
        slf: &Bound<'py, Self>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let me = slf.get();
        asynchronous::acquire_grant(slf.as_any(), &me.handle, &me.grants, timeout)
    }

    fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        Self::acquire_async(slf, None)
    }

    #[pyo3(signature = (*_exc))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _exc: &Bound<'_, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        process::release(py, &self.handle, &self.grants)?;
        asynchronous::done(py)
    }

    fn __enter__(&self, py: Python<'_>) -> PyResult<bool> {
        process::acquire(py, &self.handle, &self.grants, Wait::Forever)
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<()> {
        process::release(py, &self.handle, &self.grants)
    }

    /// For ``threading.Condition``: whether this object holds the lock.
    fn _is_owned(&self) -> bool {
        self.grants.count() > 0
    }

    fn __repr__(slf: &Bound<'_, Self>) -> String {
        let me = slf.get();
        let locked =
            me.grants.count() > 0 || object::locked_in_file(slf.py(), &me.handle).unwrap_or(false);
        object::repr("Lock", &me.handle, locked, "", slf.as_ptr())
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        object::reduce(py, "Lock", &self.handle)
    }
}
