//! `fairlock.RLock`.

use std::ffi::OsString;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::acquire::{self, Blocking, Timeout, Wait};
use crate::handle::Handle;
use crate::held;
use crate::lock_object::{self as object, LockPath};

/// A re-entrant ``fairlock.Lock``, in the shape of ``threading.RLock``: the thread holding it
/// may acquire it again, which counts a level and takes no place in line; it is released when
/// every level was released. Fairness, crash recovery, leases and tokens are ``Lock``'s;
/// nested levels share the first level's token.
///
/// ``RLock(path, *, name=None, lease=None)``: as ``Lock``. Re-entrancy is per thread and per
/// process: two ``RLock`` objects on the same file re-enter each other in one thread.
/// Works with ``threading.Condition``.
#[pyclass(frozen, weakref, module = "fairlock", name = "RLock")]
pub(crate) struct RLock {
    handle: Arc<Handle>,
}

impl RLock {
    pub(crate) fn from_handle(handle: Arc<Handle>) -> RLock {
        RLock { handle }
    }
}

#[pymethods]
impl RLock {
    #[new]
    #[pyo3(signature = (path, *, name = None, lease = None))]
    fn new(
        py: Python<'_>,
        path: LockPath,
        name: Option<&Bound<'_, PyAny>>,
        lease: Option<f64>,
    ) -> PyResult<RLock> {
        Ok(RLock::from_handle(object::open(
            py, path, name, lease, true,
        )?))
    }

    /// Acquires the lock, or one more level of it if this thread holds it (at once, whatever
    /// the arguments); otherwise as ``fairlock.Lock.acquire``: waits in line (the GIL
    /// released, Ctrl-C honoured), ``blocking=False`` never jumps the queue, a ``timeout``
    /// gives the place up and returns False.
    #[pyo3(
        signature = (blocking = Blocking(true), timeout = Timeout::UNSET),
        text_signature = "($self, /, blocking=True, timeout=-1)"
    )]
    fn acquire(&self, py: Python<'_>, blocking: Blocking, timeout: Timeout) -> PyResult<bool> {
        let wait = Wait::from_threading(py, blocking, timeout)?;
        acquire::acquire(py, &self.handle, wait)
    }

    /// Releases one level; the last one releases the lock. Raises ``RuntimeError`` if this
    /// thread does not hold it, ``fairlock.LockLost`` (at the last level) if it was taken over
    /// meanwhile.
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        object::release(py, &self.handle, false)
    }

    /// True if the lock is held, by any thread of any process.
    fn locked(&self, py: Python<'_>) -> PyResult<bool> {
        object::locked(py, &self.handle)
    }

    /// Returns None while the lock is still this thread's; raises ``fairlock.LockLost`` if its
    /// lease ran out and it was taken over, ``RuntimeError`` if this thread does not hold it.
    fn check(&self, py: Python<'_>) -> PyResult<()> {
        object::check(py, &self.handle)
    }

    /// Renews the lease: it now ends ``seconds`` from now. Raises ``fairlock.LockLost`` if it
    /// was already taken over, ``ValueError`` for a lock opened without a lease.
    fn extend(&self, py: Python<'_>, seconds: f64) -> PyResult<()> {
        object::extend(py, &self.handle, seconds)
    }

    /// The fencing token of this thread's grant. ``RuntimeError`` if this thread does not hold
    /// the lock.
    #[getter]
    fn token(&self) -> PyResult<u64> {
        object::with_grant(&self.handle, |g| g.token())
    }

    /// True if the previous holder did not release the lock (it died, or its lease was taken
    /// over). ``RuntimeError`` if this thread does not hold the lock.
    #[getter]
    fn owner_died(&self) -> PyResult<bool> {
        object::with_grant(&self.handle, |g| g.owner_died())
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

    fn __enter__(&self, py: Python<'_>) -> PyResult<bool> {
        acquire::acquire(py, &self.handle, Wait::Forever)
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<()> {
        object::release(py, &self.handle, false)
    }

    /// For ``threading.Condition``: whether this thread holds the lock.
    fn _is_owned(&self) -> bool {
        object::with_grant(&self.handle, |_| ()).is_ok()
    }

    /// For ``threading.Condition.wait``: releases every level, returns how many there were.
    fn _release_save(&self, py: Python<'_>) -> PyResult<u32> {
        let depth = held::with_grant(&self.handle, |_, depth| depth).unwrap_or(0);
        object::release(py, &self.handle, true)?;
        Ok(depth)
    }

    /// For ``threading.Condition.wait``: acquires again (waiting in line), as ``depth``
    /// levels.
    fn _acquire_restore(&self, py: Python<'_>, depth: u32) -> PyResult<()> {
        acquire::acquire(py, &self.handle, Wait::Forever)?;
        for _ in 1..depth {
            acquire::acquire(py, &self.handle, Wait::Forever)?;
        }
        Ok(())
    }

    /// For ``threading``'s tests and debugging: how many levels this thread holds (0 if none).
    fn _recursion_count(&self) -> u32 {
        held::with_grant(&self.handle, |_, depth| depth).unwrap_or(0)
    }

    fn __repr__(slf: &Bound<'_, Self>) -> String {
        let me = slf.get();
        let depth = held::with_grant(&me.handle, |_, depth| depth).unwrap_or(0);
        let locked = depth > 0 || object::locked_in_file(slf.py(), &me.handle).unwrap_or(false);
        let extra = if depth > 0 {
            format!(", count={depth} (this thread)")
        } else {
            String::new()
        };
        object::repr("RLock", &me.handle, locked, &extra, slf.as_ptr())
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        object::reduce(py, "RLock", &self.handle)
    }
}
