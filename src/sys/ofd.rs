//! Open-file-description byte-range locks (`F_OFD_SETLK`, `F_OFD_GETLK`; see `fcntl(2)`),
//! used as liveness beacons.
//!
//! Participant `i` holds a write lock on byte [`BEACON_BASE`]` + i` of the lock file (in a file
//! of named locks, file-wide entry `i`: a process has one beacon per file, whatever the number
//! of names it has open; every beacon index below is counted from `BEACON_BASE`). The
//! kernel releases it when the last descriptor of the open file description is closed — when
//! the process dies, already before it becomes a zombie — so "the byte is unlocked" means "the
//! process is dead", with no PID-reuse race and across PID namespaces. Unlike classic `fcntl`
//! locks, OFD locks are not dropped when the process closes some *other* descriptor of the file.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Byte offset of participant 0's beacon: far past the end of any lock file (locks beyond the
/// end of a file are allowed and do not grow it).
pub const BEACON_BASE: u64 = 1 << 40;

fn flock_for(index: u64, kind: libc::c_short) -> libc::flock {
    // SAFETY: `flock` is a plain C struct for which all-zero is a valid value.
    let mut fl: libc::flock = unsafe { core::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = (BEACON_BASE + index) as libc::off_t;
    fl.l_len = 1;
    fl.l_pid = 0; // must be 0 for OFD locks
    fl
}

fn fcntl(fd: BorrowedFd<'_>, cmd: libc::c_int, fl: &mut libc::flock) -> io::Result<()> {
    loop {
        // SAFETY: `fd` is a valid open descriptor for the duration of the borrow; `fl` is a
        // valid, writable flock that outlives the call.
        let r = unsafe { libc::fcntl(fd.as_raw_fd(), cmd, fl as *mut libc::flock) };
        if r != -1 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Tries to take beacon `index` (`F_OFD_SETLK`, write lock). `Ok(false)` if another open file
/// description holds it.
pub fn try_claim(fd: BorrowedFd<'_>, index: u64) -> io::Result<bool> {
    let mut fl = flock_for(index, libc::F_WRLCK as libc::c_short);
    match fcntl(fd, libc::F_OFD_SETLK, &mut fl) {
        Ok(()) => Ok(true),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether some *other* open file description holds beacon `index` (`F_OFD_GETLK`). Our own
/// locks never conflict with us, so callers must not ask about their own index.
pub fn is_held(fd: BorrowedFd<'_>, index: u64) -> io::Result<bool> {
    let mut fl = flock_for(index, libc::F_WRLCK as libc::c_short);
    fcntl(fd, libc::F_OFD_GETLK, &mut fl)?;
    Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
}

/// Whether some other open file description holds any of beacons `first..first + count` (one
/// `F_OFD_GETLK` over the whole range: it reports a conflicting lock if there is one).
pub fn any_held(fd: BorrowedFd<'_>, first: u64, count: u64) -> io::Result<bool> {
    let mut fl = flock_for(first, libc::F_WRLCK as libc::c_short);
    fl.l_len = count.max(1) as libc::off_t;
    fcntl(fd, libc::F_OFD_GETLK, &mut fl)?;
    Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
}

/// Gives up beacon `index` held through `fd`'s open file description (`F_OFD_SETLK`,
/// `F_UNLCK`).
pub fn unlock_beacon(fd: BorrowedFd<'_>, index: u64) -> io::Result<()> {
    let mut fl = flock_for(index, libc::F_UNLCK as libc::c_short);
    fcntl(fd, libc::F_OFD_SETLK, &mut fl)
}

/// The byte (counted from [`BEACON_BASE`] backwards: `BEACON_BASE - 1`) whose write lock
/// serialises changes to a file's table of names (creating, reclaiming).
const NAMES_LOCK: u64 = BEACON_BASE - 1;

fn names_lock_flock(kind: libc::c_short) -> libc::flock {
    // SAFETY: `flock` is a plain C struct for which all-zero is a valid value.
    let mut fl: libc::flock = unsafe { core::mem::zeroed() };
    fl.l_type = kind;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = NAMES_LOCK as libc::off_t;
    fl.l_len = 1;
    fl
}

/// Takes the names lock of the file behind `fd`, waiting as long as it takes
/// (`F_OFD_SETLKW`; held for the microseconds a name's creation takes, released by the kernel
/// if its holder dies).
pub fn lock_names(fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut fl = names_lock_flock(libc::F_WRLCK as libc::c_short);
    fcntl(fd, libc::F_OFD_SETLKW, &mut fl)
}

/// Releases the names lock taken with [`lock_names`].
pub fn unlock_names(fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut fl = names_lock_flock(libc::F_UNLCK as libc::c_short);
    fcntl(fd, libc::F_OFD_SETLK, &mut fl)
}
