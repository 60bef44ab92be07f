//! The Python binding of fairlock: the native module `fairlock._fairlock`, which the package
//! in `python/fairlock/` re-exports (the exceptions are defined there, in `_errors.py`).
//!
//! * `Lock`, `RLock` (`lock.rs`, `rlock.rs`, sharing `lock_object.rs`): `threading`'s shape
//!   over `FairLock` / `FairRLock`, opened in `handle.rs`; `RWLock` (`rwlock.rs`) over
//!   `FairRwLock`, whose two sides are lock objects of that shape; `Semaphore` (`semaphore.rs`)
//!   over `FairSemaphore`, its permits the object's, not a thread's.
//! * `acquire.rs`: threading's argument rules; the uncontended attempt keeps the GIL, the
//!   wait in line releases it and runs Python's signal handlers after every wake-up (Ctrl-C).
//! * `held.rs`: the grants each thread holds, by lock object (guards stay on their thread).
//! * `errors.rs`: the library's errors as Python exceptions; `status.rs`: `status(path)`.
//!
//! Built by maturin from `python/pyproject.toml`; tested by `python/tests` (`ci/python.sh`).

mod acquire;
mod async_acquire;
mod errors;
mod grants;
mod handle;
mod held;
mod lock;
mod lock_object;
mod process_object;
mod rlock;
mod rwlock;
mod semaphore;
mod status;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::lock_object::LockPath;

/// Called in a child after `os.fork()` (fairlock/__init__.py registers it with
/// `os.register_at_fork`): the grants the forking thread held are its parent's from now on.
#[pyfunction]
fn _after_fork_in_child() {
    held::after_fork_in_child();
}

/// Unpickles a lock object (see `lock_object::reduce`): opens `path` again.
#[pyfunction]
#[pyo3(signature = (class, path, lease, name = None))]
fn _reopen(
    py: Python<'_>,
    class: &str,
    path: LockPath,
    lease: Option<f64>,
    name: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<PyAny>> {
    let reentrant = match class {
        "Lock" => false,
        "RLock" => true,
        "RWLock" => {
            let (read, write) = lock_object::open_rw(py, path, name, lease)?;
            return Ok(Py::new(py, rwlock::RWLock::from_handles(py, read, write)?)?.into_any());
        }
        _ => {
            return Err(PyValueError::new_err(format!(
                "fairlock: no lock class {class:?}"
            )));
        }
    };
    let handle = lock_object::open(py, path, name, lease, reentrant)?;
    Ok(if reentrant {
        Py::new(py, rlock::RLock::from_handle(handle))?.into_any()
    } else {
        Py::new(py, lock::Lock::from_handle(handle))?.into_any()
    })
}

#[pymodule]
fn _fairlock(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<lock::Lock>()?;
    m.add_class::<rlock::RLock>()?;
    m.add_class::<rwlock::RWLock>()?;
    m.add_class::<rwlock::RWLockSide>()?;
    m.add_class::<semaphore::Semaphore>()?;
    m.add_function(wrap_pyfunction!(semaphore::_reopen_semaphore, m)?)?;
    m.add_function(wrap_pyfunction!(status::status, m)?)?;
    m.add_function(wrap_pyfunction!(_after_fork_in_child, m)?)?;
    m.add_function(wrap_pyfunction!(_reopen, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
