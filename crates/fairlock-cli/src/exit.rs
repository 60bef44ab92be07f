//! Exit codes and the one-line error every failure ends in.

use std::fmt;
use std::path::Path;

/// Default for `-E`: the lock was busy (`-n`) or the wait timed out (`-w`).
pub const CONFLICT: u8 = 1;
/// Usage error: bad option, bad number, missing argument (`EX_USAGE`).
pub const USAGE: u8 = 64;
/// Not a lock file, corrupt or incompatible lock file; it was left untouched (`EX_DATAERR`).
pub const DATA: u8 = 65;
/// The lock file cannot be opened or created: missing, unreadable, a directory, a
/// symlink, a device (`EX_NOINPUT`).
pub const NO_INPUT: u8 = 66;
/// etcd: no quorum answered (unreachable, refused, or no leader) within the timeouts
/// (`EX_NOHOST`).
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
pub const QUORUM: u8 = 68;
/// etcd: the cluster refused us: a TLS certificate (its, or ours) or the user and password
/// (`EX_NOPERM`).
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
pub const DENIED: u8 = 77;
/// The lock was lost while the command ran: its lease expired and the next waiter took it
/// over (`EX_UNAVAILABLE`).
pub const LOST: u8 = 69;
/// An internal error (`EX_SOFTWARE`).
pub const SOFTWARE: u8 = 70;
/// An operating-system call failed (`EX_OSERR`).
pub const OS: u8 = 71;
/// Every participant entry of the lock file is in use by a live process; or, with etcd, our
/// lease ended while we waited in line, so the command did not run (`EX_TEMPFAIL`: try again).
pub const TEMP: u8 = 75;
/// The command was found but could not be executed (like shells).
pub const NOT_EXECUTABLE: u8 = 126;
/// The command was not found (like shells).
pub const NOT_FOUND: u8 = 127;

/// The exit-code table shown by `fairlock --help` and in docs/CLI.md.
pub const TABLE: &str = "\
Exit status:
  N        fairlock run: the command's own status (128+SIG if a signal killed it)
  1        the lock was busy (-n) or the wait timed out (-w); change with -E
  64       usage error: unknown option, bad number, missing argument
  65       not a fairlock file, or a corrupt/incompatible one (left untouched)
  66       the lock file cannot be opened or created (missing directory, permission,
           symlink, directory, device)
  68       etcd://: cannot reach a quorum (members unreachable, refused, or no leader)
  69       the lock was lost while the command ran (its --lease ran out and the next
           waiter took over), whatever the command's status
  70/71    internal error / operating-system error
  77       etcds://, etcd://: the cluster refused our certificate, its certificate is not
           signed by ETCDCTL_CACERT, or the user and password were refused
  75       all participant entries of the lock file are in use; etcd://: our lease
           ended while we waited in line (revoked, or fairlock stopped or cut off for
           longer than it): the command did not run
  126/127  the command could not be executed / was not found";

/// A failure: an exit code and, unless empty, one line for stderr.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// A failure that prints nothing (e.g. a conflict without `-v`).
    pub fn silent(code: u8) -> Failure {
        Failure::new(code, String::new())
    }

    /// A library error while opening or inspecting `path`.
    pub fn open(path: &Path, e: &fairlock::Error) -> Failure {
        use fairlock::Error as E;
        let code = match e {
            E::NotALockFile { .. }
            | E::Corrupt { .. }
            | E::Incompatible { .. }
            | E::KindMismatch { .. } => DATA,
            E::InvalidPath { .. } | E::NoWriteAccess { .. } | E::Io { .. } => NO_INPUT,
            E::TooManyParticipants { .. } | E::TooManyNames { .. } | E::TooManyOpenFiles { .. } => {
                TEMP
            }
            E::InvalidOption { .. } => USAGE,
            E::LockLost { .. } => LOST,
            _ => SOFTWARE,
        };
        Failure::new(code, with_path(path, e))
    }

    /// A library error while waiting for or holding the lock of `path`.
    pub fn locking(path: &Path, e: &fairlock::Error) -> Failure {
        use fairlock::Error as E;
        match e {
            E::Io { .. } => Failure::new(OS, with_path(path, e)),
            _ => Failure::open(path, e),
        }
    }
}

/// The error's message and its causes (`source()` chain, each said once), prefixed with the
/// path unless it already names it.
fn with_path(path: &Path, e: &fairlock::Error) -> String {
    let mut msg = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        msg = format!("{msg}: {c}");
        cause = c.source();
    }
    let shown = path.display().to_string();
    if msg.contains(&shown) {
        msg
    } else {
        format!("{shown}: {msg}")
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}
