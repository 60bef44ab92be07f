//! SIGINT/SIGTERM/SIGHUP handling while the command runs: the handler only records the
//! signal; the waiting loop forwards it to the command with `kill`, unless the command got it
//! anyway (see `sentinel`). A signal `fairlock` inherited as ignored (`nohup`, `trap '' HUP`)
//! is left ignored — not caught, not forwarded — so the command inherits it ignored too.

use std::io;
use std::sync::atomic::{AtomicU32, Ordering::SeqCst};

/// The signals forwarded to the command.
pub const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Bit `n` set: signal `n` arrived and was not forwarded yet.
static PENDING: AtomicU32 = AtomicU32::new(0);
/// Bit `n` set: signal `n` arrived, from anyone (the terminal included).
static SEEN: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    if (0..32).contains(&sig) {
        SEEN.fetch_or(1 << sig, SeqCst);
    }
    // A signal the terminal sent to the whole foreground process group (Ctrl-C) reached the
    // command too: forwarding it would deliver it twice.
    // SAFETY: with SA_SIGINFO the kernel passes a valid siginfo_t (or null, checked).
    if !info.is_null() && unsafe { (*info).si_code } == libc::SI_KERNEL {
        return;
    }
    if (0..32).contains(&sig) {
        PENDING.fetch_or(1 << sig, SeqCst);
    }
}

/// Installs the recording handler for each of [`FORWARDED`] that was not inherited ignored (no
/// `SA_RESTART`, so a blocking `poll` returns early).
pub fn install() -> io::Result<()> {
    for sig in FORWARDED {
        if crate::inherited::ignored(sig) {
            continue;
        }
        // SAFETY: a zeroed sigaction is a valid starting point (empty mask, no flags).
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = on_signal as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        // SAFETY: `sa.sa_mask` is a valid sigset_t owned by us.
        unsafe { libc::sigemptyset(&mut sa.sa_mask) };
        // SAFETY: `sa` is fully initialised and the handler is async-signal-safe (one atomic
        // read-modify-write).
        if unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The signals received since the last call, lowest number first.
pub fn take() -> Vec<libc::c_int> {
    let bits = PENDING.swap(0, SeqCst);
    (0..32).filter(|s| bits & (1 << s) != 0).collect()
}

/// The lowest-numbered handled signal received so far, from anyone.
pub fn seen() -> Option<libc::c_int> {
    let bits = SEEN.load(SeqCst);
    (0..32).find(|s| bits & (1 << s) != 0)
}

/// Sends `sig` to process `pid`.
pub fn send(pid: u32, sig: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill has no memory-safety preconditions; `pid` is our own child (positive).
    unsafe { libc::kill(pid, sig) };
}

/// The signal's name, e.g. `SIGTERM`.
pub fn name(sig: libc::c_int) -> String {
    match sig {
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGINT => "SIGINT".into(),
        libc::SIGQUIT => "SIGQUIT".into(),
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGSEGV => "SIGSEGV".into(),
        libc::SIGABRT => "SIGABRT".into(),
        libc::SIGPIPE => "SIGPIPE".into(),
        _ => format!("signal {sig}"),
    }
}

/// The last of the caught signals seen so far (pending or taken), if any.
pub fn last() -> Option<libc::c_int> {
    let bits = SEEN.load(SeqCst);
    (0..32).rev().find(|s| bits & (1 << s) != 0)
}
