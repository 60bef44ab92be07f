//! `fairlock.RWLock`: readers together, writers alone, all in arrival order; `read()` and
//! `write()` give its two sides, each a lock object in `threading.Lock`'s shape.

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

/// A strictly fair reader/writer lock shared by threads and processes through the lock file at
/// ``path``: readers hold together, a writer alone, and everybody is served in arrival order (a
/// writer that arrives while readers hold goes before the readers that arrive after it).
///
/// ``RWLock(path, *, name=None, lease=None)`` opens the file, creating it (mode 0600) if needed.
/// ``read()`` and ``write()`` return its two sides; each has ``acquire(blocking=True,
/// timeout=-1)``, ``release()``, ``with``, ``token``, ``owner_died``, ``check()`` and
/// ``extend()``, as ``fairlock.Lock``:
///
///     lock = fairlock.RWLock("/run/myapp/db.lock")
///     with lock.read():
///         ...            # other readers may hold too
///     with lock.write():
///         ...            # alone
///
/// A grant belongs to the process, as a ``fairlock.Lock``'s: any thread may release it, and a
/// thread that asks again waits in line like anyone (a thread holding a read that asks to
/// write waits behind its own read: release it first). A dead reader or writer never blocks
/// the others (the next grant is told ``owner_died``).
/// With a ``lease``, each grant has its own: any number of threads of a process may hold leased
/// reads at once. ``name``: the reader/writer lock of that name in a file of named locks (as
/// for ``Lock``).
#[pyclass(frozen, weakref, module = "fairlock", name = "RWLock")]
pub(crate) struct RWLock {
    read: Py<RWLockSide>,
    write: Py<RWLockSide>,
}

impl RWLock {
    pub(crate) fn from_handles(py: Python<'_>, read: Handle, write: Handle) -> PyResult<RWLock> {
        Ok(RWLock {
            read: Py::new(
                py,
                RWLockSide {
                    handle: Arc::new(read),
                    grants: Arc::default(),
                },
            )?,
            write: Py::new(
                py,
                RWLockSide {
                    handle: Arc::new(write),
                    grants: Arc::default(),
                },
            )?,
        })
    }
}

#[pymethods]
impl RWLock {
    #[new]
    #[pyo3(signature = (path, *, name = None, lease = None))]
    fn new(
        py: Python<'_>,
        path: LockPath,
        name: Option<&Bound<'_, PyAny>>,
        lease: Option<f64>,
    ) -> PyResult<RWLock> {
        let (read, write) = object::open_rw(py, path, name, lease)?;
        RWLock::from_handles(py, read, write)
    }

    /// The read side: held by any number of readers at once, never with a writer.
    fn read(&self, py: Python<'_>) -> Py<RWLockSide> {
        self.read.clone_ref(py)
    }

    /// The write side: held alone.
    fn write(&self, py: Python<'_>) -> Py<RWLockSide> {
        self.write.clone_ref(py)
    }

    /// The lock file's path.
    #[getter]
    fn path(&self) -> OsString {
        self.read.get().handle.path().as_os_str().to_owned()
    }

    /// The lease in seconds, or None.
    #[getter]
    fn lease(&self) -> Option<f64> {
        self.read.get().handle.lease().map(|d| d.as_secs_f64())
    }

    fn __repr__(slf: &Bound<'_, Self>) -> String {
        let me = slf.get();
        let (read, write) = (me.read.get(), me.write.get());
        let held = read.grants.count() + write.grants.count() > 0;
        // Held at all, either way: the file's holders (the read side's handle asks for reads).
        let locked =
            held || fairlock::inspect(read.handle.path()).is_ok_and(|st| !st.holders.is_empty());
        object::repr("RWLock", &read.handle, locked, "", slf.as_ptr())
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        object::reduce(py, "RWLock", &self.read.get().handle)
    }
}

/// One side of a ``fairlock.RWLock`` (``lock.read()`` or ``lock.write()``), in the shape of
/// ``threading.Lock``: ``acquire(blocking=True, timeout=-1)``, ``release()``, ``locked()``,
/// ``with``, and the grant's ``token``, ``owner_died``, ``check()``, ``extend()``.
#[pyclass(frozen, weakref, module = "fairlock", name = "RWLockSide")]
pub(crate) struct RWLockSide {
    handle: Arc<Handle>,
    grants: Arc<Grants>,
}

#[pymethods]
impl RWLockSide {
    /// Waits in line for this side and returns True once it is this process's; as
    /// ``threading.Lock.acquire`` (``blocking=False``: only if granted at once, never jumping
    /// the queue; ``timeout``: seconds, then False). The GIL is released while waiting, and
    /// Ctrl-C ends the wait.
    #[pyo3(
        signature = (blocking = Blocking(true), timeout = Timeout::UNSET),
        text_signature = "($self, /, blocking=True, timeout=-1)"
    )]
    fn acquire(&self, py: Python<'_>, blocking: Blocking, timeout: Timeout) -> PyResult<bool> {
        let wait = Wait::from_threading(py, blocking, timeout)?;
        process::acquire(py, &self.handle, &self.grants, wait)
    }

    /// Releases the oldest grant of this side that this object holds, from any thread.
    /// ``RuntimeError`` if it holds none, ``fairlock.LockLost`` if it was taken over meanwhile
    /// (its lease ran out).
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        process::release(py, &self.handle, &self.grants)
    }

    /// True if this side is held, by any thread of any process (the read side: by at least one
    /// reader).
    fn locked(&self, py: Python<'_>) -> PyResult<bool> {
        if self.grants.count() > 0 {
            return Ok(true);
        }
        object::locked_in_file(py, &self.handle)
    }

    /// None while this object's oldest grant (the one ``release()`` ends next) is still its own; ``fairlock.LockLost`` if it was
    /// taken over, ``RuntimeError`` if it holds none.
    fn check(&self, py: Python<'_>) -> PyResult<()> {
        process::check(py, &self.handle, &self.grants)
    }

    /// Renews the oldest grant's lease to ``seconds`` from now.
    fn extend(&self, py: Python<'_>, seconds: f64) -> PyResult<()> {
        process::extend(py, &self.handle, &self.grants, seconds)
    }

    /// The fencing token of this object's oldest grant. A write's token exceeds that of every
    /// grant before it, reads included.
    #[getter]
    fn token(&self) -> PyResult<u64> {
        process::with_grant(&self.handle, &self.grants, |g| g.token())
    }

    /// True if a holder before this grant did not give its grant back (it died, or its lease
    /// was taken over).
    #[getter]
    fn owner_died(&self) -> PyResult<bool> {
        process::with_grant(&self.handle, &self.grants, |g| g.owner_died())
    }

    /// "read" or "write".
    #[getter]
    fn mode(&self) -> &'static str {
        if self.handle.rw_side() == Some(true) {
            "write"
        } else {
            "read"
        }
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

    fn __repr__(slf: &Bound<'_, Self>) -> String {
        let me = slf.get();
        let locked =
            me.grants.count() > 0 || object::locked_in_file(slf.py(), &me.handle).unwrap_or(false);
        let class = if me.handle.rw_side() == Some(true) {
            "RWLockSide (write)"
        } else {
            "RWLockSide (read)"
        };
        object::repr(class, &me.handle, locked, "", slf.as_ptr())
    }
}
