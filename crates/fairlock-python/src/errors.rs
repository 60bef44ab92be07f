//! The library's [`fairlock::Error`] as Python exceptions.
//!
//! The classes are defined in Python (`fairlock/_errors.py`): `fairlock.Error` is an `OSError`
//! whose `str()` is the library's message, which names the file, and whose `filename` and
//! `errno` are set (`errno` to the OS error number where there is one). Raised here:
//!
//! | library error | Python exception | errno |
//! |---|---|---|
//! | `LockLost` | `fairlock.LockLost` | |
//! | `NotALockFile` | `fairlock.NotALockFile` | |
//! | `Corrupt` | `fairlock.CorruptLockFile` | |
//! | `Incompatible`, `DataMismatch`, `KindMismatch` | `fairlock.IncompatibleLockFile` | |
//! | `Io`, `NoWriteAccess` | `fairlock.Error` | the OS's (`EACCES`, `EPERM`, `EROFS` for the second) |
//! | `WouldDeadlock` | `fairlock.Error` | `EDEADLK` |
//! | `InitLocked`, `Timeout` | `fairlock.Error` | `ETIMEDOUT` |
//! | `WouldBlock` | `fairlock.Error` | `EAGAIN` |
//! | `Interrupted` | `fairlock.Error` | `EINTR` |
//! | `InvalidOption` | `ValueError` | |
//! | any other | `fairlock.Error` | |
//!
//! `acquire` never raises for `WouldBlock` or `Timeout` (it returns `False`, as threading's),
//! nor `Interrupted` (it raises what the signal handler raised).

use fairlock::Error;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// The Python exception for `e`.
pub(crate) fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let class = match &e {
        Error::LockLost { .. } => "LockLost",
        Error::NotALockFile { .. } => "NotALockFile",
        Error::Corrupt { .. } => "CorruptLockFile",
        Error::Incompatible { .. } | Error::DataMismatch { .. } | Error::KindMismatch { .. } => {
            "IncompatibleLockFile"
        }
        Error::InvalidOption { .. } => return PyValueError::new_err(e.to_string()),
        _ => "Error",
    };
    let errno = match &e {
        Error::Io { source, .. } | Error::NoWriteAccess { source, .. } => source.raw_os_error(),
        Error::WouldDeadlock { .. } => Some(libc::EDEADLK),
        Error::InitLocked { .. } | Error::Timeout { .. } => Some(libc::ETIMEDOUT),
        Error::WouldBlock { .. } => Some(libc::EAGAIN),
        Error::Interrupted { .. } => Some(libc::EINTR),
        _ => None,
    };
    // `Display` says what failed and why, the OS reason included, once.
    let message = e.to_string();
    let filename = e.path().map(|p| p.as_os_str().to_owned());
    raise(py, class, errno, &message, filename)
}

/// An instance of `fairlock._errors.<class>(errno, message, filename)`, as a `PyErr`.
fn raise(
    py: Python<'_>,
    class: &str,
    errno: Option<i32>,
    message: &str,
    filename: Option<std::ffi::OsString>,
) -> PyErr {
    let made = py
        .import("fairlock._errors")
        .and_then(|m| m.getattr(class))
        .and_then(|c| c.call1((errno, message, filename)));
    match made {
        Ok(instance) => PyErr::from_value(instance),
        Err(e) => e,
    }
}
