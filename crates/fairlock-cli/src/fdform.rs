//! `fairlock lock FD` and `fairlock unlock FD`: the lock held by a shell's descriptor, as
//! scripts use `flock 9` (`exec 9>>jobs.lock; fairlock lock 9; …; fairlock unlock 9`). The
//! grant belongs to the open file description behind FD (the library's
//! `OpenOptions::lock_for_fd`), so it lasts after `fairlock lock` exits, for as long as the
//! shell keeps FD open, and the next waiter takes over (told the owner died) if the shell dies.

use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use fairlock::{Error, FairLock, FdMode, LockKind};

use crate::args::{LockArgs, UnlockArgs};
use crate::exit::{self, Failure};
use crate::secs::human;
use crate::signals;

/// A descriptor number given on the command line, if it is open.
fn descriptor(fd: i32) -> Result<BorrowedFd<'static>, Failure> {
    // SAFETY: F_GETFD on any number: EBADF if it is not an open descriptor.
    if fd < 0 || unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(Failure::new(
            exit::NO_INPUT,
            format!("descriptor {fd} is not open (open the lock file first: exec {fd}>>FILE)"),
        ));
    }
    // SAFETY: checked open just above; it stays open for this process's life (we never
    // close descriptors we did not open).
    Ok(unsafe { BorrowedFd::borrow_raw(fd) })
}

/// The mode the options ask for; without -s, -x or --permits, the file's own kind decides
/// (a reader/writer lock is taken as a writer, a new or empty file is an exclusive lock).
fn mode(a: &LockArgs, fd: i32) -> FdMode {
    match (a.permits, a.shared, a.exclusive) {
        (Some(n), _, _) => FdMode::Permit(n),
        (None, true, _) => FdMode::Read,
        (None, false, exclusive) => {
            match fairlock::inspect(format!("/proc/self/fd/{fd}")).map(|s| s.kind) {
                Ok(LockKind::RwLock) => FdMode::Write,
                Err(_) if exclusive => FdMode::Write,
                _ => FdMode::Exclusive,
            }
        }
    }
}

pub fn lock(a: &LockArgs) -> Result<u8, Failure> {
    let fd = descriptor(a.fd)?;
    let shown = std::fs::read_link(format!("/proc/self/fd/{}", a.fd))
        .unwrap_or_else(|_| format!("fd {}", a.fd).into());
    signals::install().map_err(|e| Failure::new(exit::OS, format!("sigaction: {e}")))?;
    let mut opts = FairLock::options();
    if let Some(lease) = a.lease {
        opts.lease(lease);
    }
    let started = Instant::now();
    let deadline = if a.nonblock {
        Some(started)
    } else {
        a.wait.map(|d| started + d)
    };
    if a.nonblock || a.wait.is_some() {
        opts.init_timeout(a.wait.unwrap_or(Duration::ZERO));
    }
    // Every caught signal counts, also one the terminal sent to the whole process group
    // (which `fairlock run` leaves to its command): here there is no command.
    let stop = || signals::last().is_some();
    let conflict = |what: &str| {
        if a.verbose {
            Failure::new(a.conflict_exit_code, format!("{}: {what}", shown.display()))
        } else {
            Failure::silent(a.conflict_exit_code)
        }
    };
    match opts.lock_for_fd(fd, mode(a, a.fd), deadline, stop) {
        Ok(g) => {
            if a.verbose {
                eprintln!(
                    "fairlock: fd {} holds {} (token {}) after {}{}",
                    a.fd,
                    shown.display(),
                    g.token,
                    human(started.elapsed()),
                    if g.owner_died {
                        "; the previous holder died or was taken over"
                    } else {
                        ""
                    }
                );
            }
            Ok(0)
        }
        Err(Error::Timeout { .. } | Error::WouldBlock { .. } | Error::InitLocked { .. }) => {
            Err(conflict(if a.nonblock {
                "is held or has waiters"
            } else {
                "still busy when the wait ran out"
            }))
        }
        Err(Error::Interrupted { .. }) => {
            let sig = signals::last().unwrap_or(libc::SIGINT);
            Err(Failure::silent(128 + sig as u8))
        }
        Err(Error::WouldDeadlock { .. }) => Err(Failure::new(
            exit::USAGE,
            format!(
                "{}: fd {} holds this lock already, or held it and lost it to a lease takeover (fairlock unlock {} first; it exits 69 for a loss)",
                shown.display(),
                a.fd,
                a.fd
            ),
        )),
        Err(e) => Err(Failure::locking(&shown, &e)),
    }
}

pub fn unlock(a: &UnlockArgs) -> Result<u8, Failure> {
    let fd = descriptor(a.fd)?;
    let shown = std::fs::read_link(format!("/proc/self/fd/{}", a.fd))
        .unwrap_or_else(|_| format!("fd {}", a.fd).into());
    match fairlock::unlock_fd(fd) {
        Ok(Some(g)) => {
            if a.verbose {
                eprintln!("fairlock: released {} (token {})", shown.display(), g.token);
            }
            Ok(0)
        }
        Ok(None) => {
            if a.verbose {
                eprintln!("fairlock: fd {} held no lock of {}", a.fd, shown.display());
            }
            Ok(0)
        }
        Err(Error::LockLost { .. }) => Err(Failure::new(
            exit::LOST,
            format!(
                "{}: the lock fd {} held was lost (its lease ran out and the next waiter took over)",
                shown.display(),
                a.fd
            ),
        )),
        Err(e) => Err(Failure::open(&shown, &e)),
    }
}
