//! What the lock objects share: opening, `repr()`, pickling and `locked()`; and for an
//! `RLock`, whose grants are its threads' (`held.rs`), releasing, the current grant's token and
//! owner-died flag and lease checks (the process grants of a `Lock` and of the `RWLock` sides
//! are `process_object.rs`'s).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::errors;
use crate::handle::{Handle, OwnedGuard};
use crate::held::{self, Holding, Released};

/// A lock file's path argument: a `str`, `bytes` or `os.PathLike`, as `open()` takes it.
pub(crate) struct LockPath(pub(crate) PathBuf);

impl FromPyObject<'_, '_> for LockPath {
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, '_, PyAny>) -> PyResult<LockPath> {
        let py = obj.py();
        let path = py.import("os")?.call_method1("fspath", (obj,))?;
        if let Ok(bytes) = path.cast::<PyBytes>() {
            return Ok(LockPath(PathBuf::from(OsStr::from_bytes(bytes.as_bytes()))));
        }
        Ok(LockPath(path.extract()?))
    }
}

/// Opens the lock file of a new `Lock` (or, `reentrant`, `RLock`) object, the GIL released (the
/// open may wait for another process initialising the file).
///
/// # Errors
/// `TypeError` for a `name` that is not a `str`; `ValueError` for a bad lease or a name of more
/// than 255 bytes; the library's errors for the file.
pub(crate) fn open(
    py: Python<'_>,
    LockPath(path): LockPath,
    name: Option<&Bound<'_, PyAny>>,
    lease: Option<f64>,
    reentrant: bool,
) -> PyResult<Arc<Handle>> {
    let name = name_of(name)?;
    let lease = lease.map(|s| duration("lease", s)).transpose()?;
    let handle = py
        .detach(|| Handle::open(&path, lease, name, reentrant))
        .map_err(|e| errors::to_py(py, e))?;
    Ok(Arc::new(handle))
}

/// Opens the lock file of a new `RWLock` object: its read side and its write side (the GIL
/// released, as in [`open`]).
///
/// # Errors
/// As [`open`].
pub(crate) fn open_rw(
    py: Python<'_>,
    LockPath(path): LockPath,
    name: Option<&Bound<'_, PyAny>>,
    lease: Option<f64>,
) -> PyResult<(Handle, Handle)> {
    let name = name_of(name)?;
    let lease = lease.map(|s| duration("lease", s)).transpose()?;
    py.detach(|| Handle::open_rw(&path, lease, name))
        .map_err(|e| errors::to_py(py, e))
}

/// The `name` argument: `None`, or a `str` (a lock in a file of named locks).
///
/// # Errors
/// `TypeError` for anything else.
pub(crate) fn name_of(name: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
    match name {
        Some(n) if !n.is_none() => n.extract::<String>().map(Some).map_err(|_| {
            PyTypeError::new_err(format!(
                "name must be a str (a lock's name in a file of named locks), not {}",
                n.get_type()
                    .name()
                    .map_or_else(|_| "?".to_string(), |t| t.to_string())
            ))
        }),
        _ => Ok(None),
    }
}

/// `seconds` as a `Duration`, for the argument `what`.
///
/// # Errors
/// `ValueError` unless it is a positive, finite number.
pub(crate) fn duration(what: &str, seconds: f64) -> PyResult<Duration> {
    match Duration::try_from_secs_f64(seconds) {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err(PyValueError::new_err(format!(
            "{what} must be a positive number of seconds, not {seconds}"
        ))),
    }
}

/// `release()` of an `RLock`: gives back one level of the calling thread's grant (`all`: every
/// level).
///
/// # Errors
/// `RuntimeError` if the calling thread holds nothing of this lock; `fairlock.LockLost` if the
/// grant had been taken over (its lease ran out) or was inherited through `fork`.
pub(crate) fn release(py: Python<'_>, handle: &Arc<Handle>, all: bool) -> PyResult<()> {
    match held::release(handle, all) {
        Released::Level | Released::Grant(Ok(())) => Ok(()),
        Released::Grant(Err(e)) => Err(errors::to_py(py, e)),
        Released::NotHeld => Err(PyRuntimeError::new_err(
            "cannot release un-acquired lock (a fairlock.RLock is released by the thread that \
             acquired it)",
        )),
    }
}

/// `f` of the calling thread's grant.
///
/// # Errors
/// `RuntimeError` if the calling thread does not hold the lock.
pub(crate) fn with_grant<R>(handle: &Arc<Handle>, f: impl FnOnce(&OwnedGuard) -> R) -> PyResult<R> {
    held::with_grant(handle, |g, _| f(g)).ok_or_else(|| {
        PyRuntimeError::new_err(format!(
            "{}: this thread does not hold the lock",
            handle.path().display()
        ))
    })
}

/// `check()`: `None` while the lock is still ours.
///
/// # Errors
/// `fairlock.LockLost` if it was taken over; `RuntimeError` if this thread does not hold it.
pub(crate) fn check(py: Python<'_>, handle: &Arc<Handle>) -> PyResult<()> {
    with_grant(handle, |g| g.check())?.map_err(|e| errors::to_py(py, e))
}

/// `extend(seconds)`: the lease now ends `seconds` from now.
///
/// # Errors
/// `fairlock.LockLost` if it was already taken over; `ValueError` for a lock without a lease
/// or a non-positive duration; `RuntimeError` if this thread does not hold it.
pub(crate) fn extend(py: Python<'_>, handle: &Arc<Handle>, seconds: f64) -> PyResult<()> {
    let d = duration("extend: seconds", seconds)?;
    with_grant(handle, |g| g.extend(d))?.map_err(|e| errors::to_py(py, e))
}

/// `locked()` of an `RLock`: whether anyone (any thread, any process) holds the lock now.
///
/// # Errors
/// The library's errors reading the file (it was removed, say).
pub(crate) fn locked(py: Python<'_>, handle: &Arc<Handle>) -> PyResult<bool> {
    if let Holding::Yes { .. } = held::holding(handle) {
        return Ok(true); // this thread's (an inherited hold is asked of the file: the parent's)
    }
    locked_in_file(py, handle)
}

/// Whether the lock file says the lock is held now (by any thread of any process; for a side of
/// a reader/writer lock, held that way).
///
/// # Errors
/// The library's errors reading the file (it was removed, say).
pub(crate) fn locked_in_file(py: Python<'_>, handle: &Handle) -> PyResult<bool> {
    let path = handle.path();
    let st = py
        .detach(|| fairlock::inspect(path))
        .map_err(|e| errors::to_py(py, e))?;
    if let Some(write) = handle.rw_side() {
        return Ok(st.holders.iter().any(|h| h.shared != write));
    }
    Ok(match handle.name() {
        // A lock in a file of named locks: that name's holder.
        Some(name) => st
            .names
            .iter()
            .any(|n| n.name.as_deref() == Some(name) && n.holder.is_some()),
        None => st.holder.is_some(),
    })
}

/// `repr()`, in `threading`'s shape: `<locked fairlock.Lock object '/path', lease=30.0 at
/// 0x7f...>` (`extra` after the lease: an `RLock`'s levels).
pub(crate) fn repr(
    class: &str,
    handle: &Handle,
    locked: bool,
    extra: &str,
    addr: *mut pyo3::ffi::PyObject,
) -> String {
    let lease = handle
        .lease()
        .map_or_else(|| "None".to_string(), |d| format!("{:?}", d.as_secs_f64()));
    let name = handle
        .name()
        .map_or_else(String::new, |n| format!(", name={n:?}"));
    format!(
        "<{} fairlock.{class} object '{}'{name}, lease={lease}{extra} at {addr:p}>",
        if locked { "locked" } else { "unlocked" },
        handle.path().display()
    )
}

/// `__reduce__`: a pickled lock object is reopened on the same file (with the same lease) in
/// the process that unpickles it (a `multiprocessing` child under `spawn`, say); a hold is not
/// carried over.
pub(crate) fn reduce<'py>(
    py: Python<'py>,
    class: &str,
    handle: &Arc<Handle>,
) -> PyResult<Bound<'py, PyTuple>> {
    let reopen = py.import("fairlock._fairlock")?.getattr("_reopen")?;
    let lease = handle.lease().map(|d| d.as_secs_f64());
    let args = (class, handle.path().as_os_str(), lease, handle.name()).into_pyobject(py)?;
    (reopen, args).into_pyobject(py)
}
