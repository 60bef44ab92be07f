//! The crate's one error type.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Everything that can go wrong with a fair lock.
///
/// Messages name the lock file and the problem. The variants for bad files
/// ([`Error::Corrupt`], [`Error::Incompatible`], [`Error::NotALockFile`]) guarantee that the
/// file was not modified.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// `try_lock`: the lock is held, or others are queued for it (try_lock never jumps the queue).
    WouldBlock,
    /// `lock_timeout`: the deadline passed before the lock was granted. The ticket was given up,
    /// so nobody queued behind it waits for it.
    Timeout,
    /// The calling thread already holds this (non-re-entrant) lock; waiting would never end.
    WouldDeadlock,
    /// The lock is no longer ours: it was taken over (lease expired, or the holder was judged
    /// dead) or revoked. Anything done under it since may have overlapped another holder; use the
    /// fencing token to reject stale writes downstream.
    LockLost,
    /// The file is a fairlock file whose contents are inconsistent.
    Corrupt {
        /// The lock file.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// The file is a fairlock file of a format this version does not understand.
    Incompatible {
        /// The lock file.
        path: PathBuf,
        /// What does not match.
        what: String,
    },
    /// The file exists, is not empty and is not a fairlock file; it was left untouched.
    NotALockFile {
        /// The file.
        path: PathBuf,
    },
    /// The path is not something a lock can live in (a symbolic link, a directory, a device).
    InvalidPath {
        /// The path.
        path: PathBuf,
        /// What it is.
        what: &'static str,
    },
    /// Every participant entry of the lock file is in use by a live process.
    TooManyParticipants {
        /// The lock file.
        path: PathBuf,
        /// How many participant entries the file has.
        capacity: u32,
    },
    /// This process has as many lock files open as it can track for `fork` (each needs a
    /// beacon descriptor the fork handler can find without allocating).
    TooManyOpenFiles {
        /// The lock file that could not be opened.
        path: PathBuf,
        /// How many lock files one process can have open at once.
        capacity: usize,
    },
    /// The file is not a valid lock file yet (empty, half-initialised, or from an earlier
    /// boot) and another process holds its `flock` — another fairlock initialising it, or a
    /// foreign program such as `flock(1)` — for longer than
    /// [`OpenOptions::init_timeout`](crate::OpenOptions::init_timeout) allowed.
    InitLocked {
        /// The lock file.
        path: PathBuf,
    },
    /// An option value is out of range.
    InvalidOption {
        /// Which option, and why.
        what: String,
    },
    /// An operating-system call failed.
    Io {
        /// The lock file concerned (empty when none).
        path: PathBuf,
        /// What we were doing.
        op: &'static str,
        /// The underlying error.
        source: io::Error,
    },
}

impl Error {
    pub(crate) fn io(path: &Path, op: &'static str, source: io::Error) -> Error {
        Error::Io {
            path: path.to_path_buf(),
            op,
            source,
        }
    }

    pub(crate) fn corrupt(path: &Path, what: impl Into<String>) -> Error {
        Error::Corrupt {
            path: path.to_path_buf(),
            what: what.into(),
        }
    }

    pub(crate) fn incompatible(path: &Path, what: impl Into<String>) -> Error {
        Error::Incompatible {
            path: path.to_path_buf(),
            what: what.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::WouldBlock => f.write_str("the lock is held or has waiters"),
            Error::Timeout => f.write_str("timed out waiting for the lock"),
            Error::WouldDeadlock => f.write_str("this thread already holds the lock"),
            Error::LockLost => f.write_str(
                "the lock was lost: it was taken over after the lease expired or revoked",
            ),
            Error::Corrupt { path, what } => {
                write!(f, "{}: corrupt lock file: {what}", path.display())
            }
            Error::Incompatible { path, what } => {
                write!(f, "{}: incompatible lock file: {what}", path.display())
            }
            Error::NotALockFile { path } => write!(
                f,
                "{}: not a fairlock file (it is not empty and has no fairlock header); left untouched",
                path.display()
            ),
            Error::InvalidPath { path, what } => write!(f, "{}: {what}", path.display()),
            Error::TooManyParticipants { path, capacity } => write!(
                f,
                "{}: all {capacity} participant entries are used by live processes",
                path.display()
            ),
            Error::TooManyOpenFiles { path, capacity } => write!(
                f,
                "{}: this process already has {capacity} lock files open, the most it can track",
                path.display()
            ),
            Error::InitLocked { path } => write!(
                f,
                "{}: not initialised yet, and another process holds its flock (another fairlock initialising it, or a program such as flock(1)); gave up waiting",
                path.display()
            ),
            Error::InvalidOption { what } => write!(f, "invalid option: {what}"),
            Error::Io { path, op, source } => {
                if path.as_os_str().is_empty() {
                    write!(f, "{op}: {source}")
                } else {
                    write!(f, "{}: {op}: {source}", path.display())
                }
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
