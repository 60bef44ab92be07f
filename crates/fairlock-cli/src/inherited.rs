//! The signal state `fairlock` inherited, captured before Rust's runtime changes it, so that
//! the command starts with exactly that state (as under `flock(1)`).
//!
//! Rust's runtime sets `SIGPIPE` to ignored before `main`, and `std::process::Command` resets
//! the child's signal mask to empty and `SIGPIPE` to the default before `exec` (and glibc's
//! `posix_spawn`, which `Command` uses when it can, leaves glibc's internal signals 32 and 33
//! ignored in the child). A constructor in `.init_array` runs before all of that and records
//! the inherited `SIGPIPE` disposition and the signal mask; the child restores both after
//! `std`'s reset (`pre_exec`, which also makes `Command` fork rather than `posix_spawn`).
//! `SIGINT`, `SIGTERM` and `SIGHUP` are left alone when inherited ignored (`nohup`,
//! `trap '' HUP`): ignored signals stay ignored across `exec`, caught ones return to the
//! default, so the command sees exactly what `fairlock` was given.

use std::io;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

static SIGPIPE_IGNORED: AtomicBool = AtomicBool::new(false);
static MASK: OnceLock<libc::sigset_t> = OnceLock::new();

extern "C" fn save() {
    // SAFETY: querying a disposition (null new action) into a zeroed sigaction we own.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `old` is valid for writing.
    if unsafe { libc::sigaction(libc::SIGPIPE, std::ptr::null(), &mut old) } == 0 {
        // Relaxed: written once, before main, before any other thread exists.
        SIGPIPE_IGNORED.store(old.sa_sigaction == libc::SIG_IGN, Relaxed);
    }
    // SAFETY: a zeroed sigset_t is a valid buffer for pthread_sigmask to fill.
    let mut mask: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: querying the calling thread's mask (null new set) into `mask`.
    if unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), &mut mask) } == 0 {
        let _ = MASK.set(mask);
    }
}

/// Runs [`save`] before `main` (and before Rust's runtime touches `SIGPIPE`).
#[used]
// SAFETY: `.init_array` entries are called once by the dynamic loader / libc start-up, before
// `main`, on the main thread, with (argc, argv, envp), which a no-argument C function ignores.
#[unsafe(link_section = ".init_array")]
static SAVE_AT_START: extern "C" fn() = save;

/// Whether `sig` is ignored now (for `SIGINT`/`SIGTERM`/`SIGHUP`, which only `fairlock`'s own
/// handlers change: called before installing them, this is what was inherited).
pub fn ignored(sig: libc::c_int) -> bool {
    // SAFETY: as in `save`.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as in `save`.
    unsafe {
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// In the child, between `fork` and `exec`: restore the inherited `SIGPIPE` disposition and
/// signal mask. Only async-signal-safe calls (`sigaction`, `pthread_sigmask`).
pub fn restore_in_child() -> io::Result<()> {
    // SAFETY: a zeroed sigaction with an empty mask and no flags is a valid argument.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    // Relaxed: see `save`; read in the forked child, a copy of memory written long before.
    sa.sa_sigaction = if SIGPIPE_IGNORED.load(Relaxed) {
        libc::SIG_IGN
    } else {
        libc::SIG_DFL
    };
    // SAFETY: `sa` is fully initialised.
    if unsafe { libc::sigaction(libc::SIGPIPE, &sa, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if let Some(mask) = MASK.get() {
        // SAFETY: `mask` is a valid sigset_t captured at start-up.
        let r = unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, mask, std::ptr::null_mut()) };
        if r != 0 {
            return Err(io::Error::from_raw_os_error(r));
        }
    }
    Ok(())
}
