//! The crate's one error type.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Everything that can go wrong with a fair lock.
///
/// Every variant that concerns a lock file names it (`path`). `Display` says what failed and
/// why, once, as `std::io::Error`'s does: for [`Error::Io`] the operating system's reason
/// ("…: open failed: No such file or directory"). So `{}` shows the reason, and reporters that
/// print the chain (`anyhow`'s `{:#}`, the `fairlock` command) show it once: no error has a
/// [`source`](std::error::Error::source). The `io::Error` itself is [`Error::Io`]'s `source`
/// field. An [`Error`] converts into an [`io::Error`] (with a matching [`io::ErrorKind`]) for
/// code that speaks `io::Result`.
///
/// The variants for bad files ([`Error::Corrupt`], [`Error::Incompatible`],
/// [`Error::NotALockFile`], [`Error::DataMismatch`]) guarantee that the file was not modified.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// `try_lock`: the lock is held, or others are queued for it (try_lock never jumps the queue).
    WouldBlock {
        /// The lock file.
        path: PathBuf,
    },
    /// `lock_timeout` / `lock_until`: the deadline passed before the lock was granted. The
    /// ticket was given up, so nobody queued behind it waits for it.
    Timeout {
        /// The lock file.
        path: PathBuf,
    },
    /// `lock_interruptible`: the caller's hook asked to stop waiting before the lock was
    /// granted. The ticket was given up, as at a timeout.
    Interrupted {
        /// The lock file.
        path: PathBuf,
    },
    /// The calling thread already holds this (non-re-entrant) lock; waiting would never end.
    WouldDeadlock {
        /// The lock file.
        path: PathBuf,
    },
    /// A re-entrant lock was locked again by its holder more times than it counts (guards
    /// forgotten in a loop, most likely).
    TooDeep {
        /// The lock file.
        path: PathBuf,
        /// The most nested levels a grant may have.
        levels: u32,
    },
    /// The lock is no longer ours: it was taken over (lease expired, or the holder was judged
    /// dead) or revoked, or the guard was inherited through `fork`. Anything done under it
    /// since may have overlapped another holder; use the fencing token to reject stale writes
    /// downstream.
    LockLost {
        /// The lock file.
        path: PathBuf,
    },
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
    /// A [`FairMutex<T>`](crate::FairMutex) was opened on a lock file whose data area does
    /// not fit `T`: the file was created for data of another layout (size or alignment) or
    /// schema ([`MutexOptions::schema`](crate::MutexOptions::schema)), or without data (by
    /// [`FairLock::open`](crate::FairLock::open)).
    DataMismatch {
        /// The lock file.
        path: PathBuf,
        /// The type the caller asked for (`std::any::type_name`).
        wanted: &'static str,
        /// What the file holds and what `wanted` needs.
        what: String,
    },
    /// The file holds another kind of lock than the one asked for (an exclusive lock opened as a
    /// reader/writer lock, a semaphore of 3 permits opened as one of 2, …). The file was left
    /// untouched.
    KindMismatch {
        /// The lock file.
        path: PathBuf,
        /// What the file holds ("semaphore of 3 permits").
        found: String,
        /// What the caller asked for.
        wanted: String,
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
    /// Every record of a file of named locks holds a name some live process has open (or
    /// lies on the probe sequence of one), so a new name has no room.
    TooManyNames {
        /// The lock file.
        path: PathBuf,
        /// How many records the file has.
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
    /// An option value is out of range, or options that do not go together.
    InvalidOption {
        /// Which option, and why.
        what: String,
    },
    /// The lock file cannot be opened for writing (`in_directory`: it does not exist and
    /// cannot be created in its directory). Every user of a lock needs write access to its
    /// file, because the lock's state lives in the file (flock(1) needs only read access: the
    /// kernel keeps its lock). Give the users a group and the file mode `0660`
    /// ([`OpenOptions::mode`](crate::OpenOptions::mode), `fairlock run --mode 660`).
    NoWriteAccess {
        /// The lock file.
        path: PathBuf,
        /// Whether it was its directory that refused (the file did not exist).
        in_directory: bool,
        /// What the system said (`EACCES`, `EPERM`, `EROFS`).
        source: io::Error,
    },
    /// An operating-system call failed; the error it returned is [`source`](std::error::Error::source).
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

    /// The same error about `path` (a file opened through `/proc/self/fd/N`, named by the
    /// path it was opened as).
    pub(crate) fn with_path(mut self, new: &Path) -> Error {
        match &mut self {
            Error::WouldBlock { path }
            | Error::Timeout { path }
            | Error::Interrupted { path }
            | Error::WouldDeadlock { path }
            | Error::TooDeep { path, .. }
            | Error::LockLost { path }
            | Error::Corrupt { path, .. }
            | Error::Incompatible { path, .. }
            | Error::NotALockFile { path }
            | Error::DataMismatch { path, .. }
            | Error::KindMismatch { path, .. }
            | Error::InvalidPath { path, .. }
            | Error::TooManyParticipants { path, .. }
            | Error::TooManyNames { path, .. }
            | Error::TooManyOpenFiles { path, .. }
            | Error::InitLocked { path }
            | Error::NoWriteAccess { path, .. }
            | Error::Io { path, .. } => *path = new.to_path_buf(),
            Error::InvalidOption { .. } => {}
        }
        self
    }

    /// The lock file this error concerns, if it concerns one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Error::WouldBlock { path }
            | Error::Timeout { path }
            | Error::Interrupted { path }
            | Error::WouldDeadlock { path }
            | Error::TooDeep { path, .. }
            | Error::LockLost { path }
            | Error::Corrupt { path, .. }
            | Error::Incompatible { path, .. }
            | Error::NotALockFile { path }
            | Error::DataMismatch { path, .. }
            | Error::KindMismatch { path, .. }
            | Error::InvalidPath { path, .. }
            | Error::TooManyParticipants { path, .. }
            | Error::TooManyNames { path, .. }
            | Error::TooManyOpenFiles { path, .. }
            | Error::InitLocked { path }
            | Error::NoWriteAccess { path, .. } => Some(path),
            Error::Io { path, .. } => Some(path.as_path()).filter(|p| !p.as_os_str().is_empty()),
            Error::InvalidOption { .. } => None,
        }
    }

    /// The [`io::ErrorKind`] this error converts to (see `From<Error> for io::Error`).
    pub fn kind(&self) -> io::ErrorKind {
        use io::ErrorKind as K;
        match self {
            Error::WouldBlock { .. } => K::WouldBlock,
            Error::Timeout { .. } | Error::InitLocked { .. } => K::TimedOut,
            Error::Interrupted { .. } => K::Interrupted,
            Error::WouldDeadlock { .. } => K::Deadlock,
            Error::TooDeep { .. } => K::ResourceBusy,
            Error::LockLost { .. } => K::Other,
            Error::Corrupt { .. }
            | Error::Incompatible { .. }
            | Error::NotALockFile { .. }
            | Error::DataMismatch { .. }
            | Error::KindMismatch { .. } => K::InvalidData,
            Error::InvalidPath { .. } | Error::InvalidOption { .. } => K::InvalidInput,
            Error::TooManyParticipants { .. }
            | Error::TooManyNames { .. }
            | Error::TooManyOpenFiles { .. } => K::ResourceBusy,
            Error::NoWriteAccess { source, .. } | Error::Io { source, .. } => source.kind(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::WouldBlock { path } => {
                write!(f, "{}: the lock is held or has waiters", path.display())
            }
            Error::Timeout { path } => {
                write!(f, "{}: timed out waiting for the lock", path.display())
            }
            Error::Interrupted { path } => {
                write!(
                    f,
                    "{}: waiting for the lock was interrupted",
                    path.display()
                )
            }
            Error::WouldDeadlock { path } => {
                write!(f, "{}: this thread already holds the lock", path.display())
            }
            Error::TooDeep { path, levels } => write!(
                f,
                "{}: this thread holds the lock {levels} levels deep already (guards forgotten?)",
                path.display()
            ),
            Error::LockLost { path } => write!(
                f,
                "{}: the lock was lost: taken over after the lease expired, or revoked",
                path.display()
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
            Error::KindMismatch {
                path,
                found,
                wanted,
            } => write!(
                f,
                "{}: holds {} {found}, not the {wanted} asked for; left untouched",
                path.display(),
                // "an exclusive lock", "a semaphore of 2 permits", "a reader/writer lock"
                if found.starts_with(['a', 'e', 'i', 'o', 'u']) {
                    "an"
                } else {
                    "a"
                }
            ),
            Error::DataMismatch { path, wanted, what } => write!(
                f,
                "{}: its data does not fit FairMutex<{wanted}>: {what}; left untouched",
                path.display()
            ),
            Error::InvalidPath { path, what } => write!(f, "{}: {what}", path.display()),
            Error::TooManyParticipants { path, capacity } => write!(
                f,
                "{}: all {capacity} participant entries are used by live processes",
                path.display()
            ),
            Error::TooManyNames { path, capacity } => write!(
                f,
                "{}: all {capacity} records for names are taken by names in use; create the file with a larger name capacity",
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
            Error::NoWriteAccess {
                path,
                in_directory,
                source,
            } => write!(
                f,
                "{}: {} ({source}): every user of a lock needs write access to its file, where the lock's state lives (flock(1) needs only read access: the kernel keeps its lock); share it through a group with mode 660 (fairlock run --mode 660, OpenOptions::mode)",
                path.display(),
                if *in_directory {
                    "cannot be created: no write access to its directory"
                } else {
                    "no write access"
                }
            ),
            Error::Io { path, op, source } => {
                if path.as_os_str().is_empty() {
                    write!(f, "{op} failed: {source}")
                } else {
                    write!(f, "{}: {op} failed: {source}", path.display())
                }
            }
        }
    }
}

impl std::error::Error for Error {
    /// None: the message already says the OS reason (once), as `std::io::Error`'s does; the
    /// `io::Error` itself is the `source` field of [`Error::Io`] (and [`Error::kind`] its kind).
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        None
    }
}

/// For code that speaks `io::Result`: the kind is [`Error::kind`], and the [`Error`] itself is
/// kept inside (`io::Error::get_ref` / `into_inner` and a downcast give it back, with the io
/// cause of [`Error::Io`] in its `source` field).
impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        io::Error::new(e.kind(), e)
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
