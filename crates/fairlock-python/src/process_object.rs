//! The methods of a lock object whose grants are its process's (`fairlock.Lock` and the sides
//! of a `fairlock.RWLock`), in `threading.Lock`'s shape: any thread releases, the holding
//! thread's blocking `acquire` waits (for another thread's release), a timed one returns
//! False. The grants are kept in the object (`grants.rs`).

use std::sync::Arc;

use fairlock::Error;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::acquire::{Wait, try_then_wait, wait_with_signals};
use crate::errors;
use crate::grants::{Grants, Taken};
use crate::handle::Handle;
use crate::lock_object::duration;

/// `acquire`: whether this process got the lock (through this object).
///
/// # Errors
/// The exception a signal handler raised while waiting (`KeyboardInterrupt`); the library's
/// errors otherwise (see `errors.rs`).
pub(crate) fn acquire(
    py: Python<'_>,
    handle: &Arc<Handle>,
    grants: &Grants,
    wait: Wait,
) -> PyResult<bool> {
    try_then_wait(
        py,
        wait,
        || handle.try_process(),
        |guard| grants.push(guard),
        |deadline| {
            wait_with_signals(
                py,
                |stop| handle.process_interruptible(deadline, stop),
                |guard| grants.push(guard),
                |guard| {
                    let _ = guard.unlock();
                },
            )
        },
    )
}

/// `release()`: ends the object's oldest grant.
///
/// # Errors
/// `RuntimeError` if the object holds none; `fairlock.LockLost` if it had been taken over (its
/// lease ran out) or was inherited through `fork` (the parent's: not released).
pub(crate) fn release(py: Python<'_>, handle: &Handle, grants: &Grants) -> PyResult<()> {
    match grants.take_oldest() {
        Taken::Grant(g) => g.unlock().map_err(|e| errors::to_py(py, e)),
        Taken::Inherited => Err(errors::to_py(
            py,
            Error::LockLost {
                path: handle.path().to_path_buf(),
            },
        )),
        Taken::NotHeld => Err(PyRuntimeError::new_err("release unlocked lock")),
    }
}

/// `f` of the object's oldest grant (the one `release()` ends next).
///
/// # Errors
/// `RuntimeError` if it holds none.
pub(crate) fn with_grant<R>(
    handle: &Handle,
    grants: &Grants,
    f: impl FnOnce(&fairlock::ProcessGuard) -> R,
) -> PyResult<R> {
    grants.with_oldest(f).ok_or_else(|| {
        PyRuntimeError::new_err(format!(
            "{}: this lock object holds no grant",
            handle.path().display()
        ))
    })
}

/// `check()`: `None` while the oldest grant is still ours.
///
/// # Errors
/// `fairlock.LockLost` if it was taken over; `RuntimeError` if the object holds none.
pub(crate) fn check(py: Python<'_>, handle: &Handle, grants: &Grants) -> PyResult<()> {
    with_grant(handle, grants, |g| g.check())?.map_err(|e| errors::to_py(py, e))
}

/// `extend(seconds)`: the oldest grant's lease now ends `seconds` from now.
///
/// # Errors
/// `fairlock.LockLost` if it was already taken over; `ValueError` for a lock without a lease
/// or a non-positive duration; `RuntimeError` if the object holds none.
pub(crate) fn extend(
    py: Python<'_>,
    handle: &Handle,
    grants: &Grants,
    seconds: f64,
) -> PyResult<()> {
    let d = duration("extend: seconds", seconds)?;
    with_grant(handle, grants, |g| g.extend(d))?.map_err(|e| errors::to_py(py, e))
}
