//! Telling a signal sent to `fairlock` alone from one sent to everyone — its process group
//! (`kill -INT -PGID`, the terminal's Ctrl-C) or every process of its cgroup — so that the
//! command gets each signal exactly once: the first kind is forwarded, the second already
//! reached the command and is not.
//!
//! The sentinel is a forked helper in `fairlock`'s process group that blocks every signal and
//! only reads a pipe. A signal sent to the group stays pending in it, visible in
//! `/proc/PID/status`. The kernel signals a group's members newest first, so a group signal is
//! already pending in the sentinel (newer than `fairlock`) when `fairlock`'s own handler runs;
//! a signal delivered process by process (a cgroup kill) may reach it a little later, so
//! `fairlock` looks for up to [`WINDOW`]. After looking, `fairlock` asks the sentinel (one
//! byte on the pipe) to consume that signal, so the next one can be told apart too. The
//! sentinel dies with `fairlock` (the pipe's end, and `PR_SET_PDEATHSIG`). If it cannot be
//! started, every signal is forwarded, as before.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// How long `fairlock` looks for a signal in the sentinel before forwarding it.
pub const WINDOW: Duration = Duration::from_millis(20);

pub struct Sentinel {
    pid: libc::pid_t,
    tx: Option<File>,
}

impl Sentinel {
    /// Forks the sentinel.
    pub fn start() -> Option<Sentinel> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return None;
        }
        // SAFETY: both were just created and are owned by nobody else.
        let (rx, tx) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // Block everything around the fork, so the sentinel starts (and stays) blocked.
        // SAFETY: zeroed sigsets are valid buffers; sigfillset initialises `all`.
        let (mut all, mut old): (libc::sigset_t, libc::sigset_t) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        // SAFETY: valid sigset pointers.
        unsafe {
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        }
        // SAFETY: fork; the child only makes async-signal-safe calls (`run`) and never returns.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            run(rx.as_raw_fd());
        }
        // SAFETY: restores the mask saved above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
        drop(rx);
        if pid < 0 {
            return None;
        }
        Some(Sentinel {
            pid,
            tx: Some(File::from(tx)),
        })
    }

    /// Whether `sig` reached the sentinel too (looking for up to [`WINDOW`]); either way it is
    /// consumed there afterwards.
    pub fn also_got(&mut self, sig: libc::c_int) -> bool {
        let until = Instant::now() + WINDOW;
        let got = loop {
            if self.pending(sig) {
                break true;
            }
            if Instant::now() >= until {
                break false;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        if let Some(tx) = &mut self.tx {
            let _ = tx.write_all(&[sig as u8]);
        }
        got
    }

    /// Whether `sig` is pending in the sentinel (`SigPnd`/`ShdPnd` of its status).
    fn pending(&self, sig: libc::c_int) -> bool {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", self.pid)) else {
            return false;
        };
        status
            .lines()
            .filter_map(|l| {
                l.strip_prefix("ShdPnd:")
                    .or_else(|| l.strip_prefix("SigPnd:"))
            })
            .filter_map(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            .any(|bits| (1..=64).contains(&sig) && bits & (1 << (sig - 1)) != 0)
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        drop(self.tx.take()); // end of the pipe: the sentinel exits
        // SAFETY: reaps our own child; a null status pointer is allowed.
        unsafe { libc::waitpid(self.pid, std::ptr::null_mut(), 0) };
    }
}

/// The sentinel's life, in the forked child: async-signal-safe calls only.
fn run(rx: libc::c_int) -> ! {
    // SAFETY: every call below is async-signal-safe and takes valid arguments; the child owns
    // its copies of the descriptors.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if null >= 0 {
            for fd in 0..3 {
                libc::dup2(null, fd);
            }
        }
        // Hold nothing of fairlock's: not its lock file, not a pipe someone waits on.
        for fd in 3..4096 {
            if fd != rx {
                libc::close(fd);
            }
        }
        let mut byte = 0u8;
        loop {
            let n = libc::read(rx, (&raw mut byte).cast(), 1);
            if n <= 0 {
                libc::_exit(0);
            }
            let mut one: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut one);
            libc::sigaddset(&mut one, libc::c_int::from(byte));
            let zero = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            libc::sigtimedwait(&one, std::ptr::null_mut(), &zero);
        }
    }
}
