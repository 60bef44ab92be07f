//! The command `fairlock run` runs under a lock, whichever backend holds the lock: started
//! with the grant in its environment, watched until it ends (signals forwarded, the lease
//! checked), and its end told as the shells tell it.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

use crate::args::RunArgs;
use crate::exit::{self, Failure};
use crate::sentinel::Sentinel;
use crate::{inherited, signals};

/// How often the lease is checked while the command runs.
const POLL: Duration = Duration::from_millis(50);

/// The grant the command runs under, as its environment tells it.
pub struct Grant<'a> {
    /// FAIRLOCK_TOKEN.
    pub token: u64,
    /// FAIRLOCK_OWNER_DIED.
    pub owner_died: bool,
    /// FAIRLOCK_FILE: the lock file's absolute path, or the etcd:// address.
    pub lock: &'a OsStr,
    /// The grant whose liveness the command inherits (`ProcessGuard::share_liveness`), so
    /// that the lock outlives a `fairlock` killed while the command runs. `None` for etcd (a
    /// lease kept by `fairlock`) and with `-o`.
    pub keep_alive: Option<&'a fairlock::ProcessGuard>,
}

/// How the command ended.
pub struct Ended {
    pub status: ExitStatus,
    /// Whether `lost` said the lock was lost while the command ran.
    pub lost: bool,
}

impl Ended {
    /// The shell convention: the exit code, or 128 + the signal that killed it.
    pub fn code(&self) -> u8 {
        match (self.status.code(), self.status.signal()) {
            (Some(c), _) => c as u8,
            (None, Some(sig)) => (128 + sig).min(255) as u8,
            _ => exit::SOFTWARE,
        }
    }

    /// "exited with status N", "was killed by SIGNAME".
    pub fn describe(&self) -> String {
        let s = self.status;
        match (s.code(), s.signal()) {
            (Some(c), _) => format!("exited with status {c}"),
            (None, Some(sig)) => format!("was killed by {}", signals::name(sig)),
            _ => format!("ended: {s}"),
        }
    }
}

/// Runs the command under `grant` and waits for it, forwarding the signals `fairlock` gets
/// (install the handlers first) and asking `lost()` whether the lock is lost (with
/// `--kill-on-lost`, the command then gets SIGTERM). The lock is released by the caller,
/// after this returns.
pub fn run(a: &RunArgs, grant: &Grant<'_>, lost: &dyn Fn() -> bool) -> Result<Ended, Failure> {
    // Before the command, so that the command does not inherit the sentinel's pipe; and
    // before the descriptor that keeps the grant alive, which the sentinel (a forked copy of
    // this process that dies only after it) must not hold.
    let mut sentinel = Sentinel::start();
    let liveness = match grant.keep_alive {
        Some(g) => Some(g.share_liveness().map_err(|e| {
            Failure::new(exit::OS, format!("keeping the lock for the command: {e}"))
        })?),
        None => None,
    };
    let mut child = command(a, grant, liveness.as_ref())
        .spawn()
        .map_err(|e| spawn_failure(a, &e))?;
    drop(liveness); // the command has its copy
    let outcome = supervise(&mut child, lost, a, sentinel.as_mut());
    drop(sentinel);
    outcome.map_err(|e| Failure::new(exit::OS, format!("waiting for the command: {e}")))
}

/// The command, with FAIRLOCK_TOKEN, FAIRLOCK_FILE and FAIRLOCK_OWNER_DIED, inheriting
/// `liveness` (see [`Grant::keep_alive`]).
fn command(a: &RunArgs, grant: &Grant<'_>, liveness: Option<&OwnedFd>) -> Command {
    let mut cmd = match &a.shell {
        Some(script) => {
            let mut c = Command::new("/bin/sh");
            c.arg("-c").arg(script);
            c
        }
        None => {
            let mut c = Command::new(&a.command[0]);
            c.args(&a.command[1..]);
            c
        }
    };
    let liveness = liveness.map(AsRawFd::as_raw_fd);
    // SAFETY: the closure runs in the child between fork and exec and only makes
    // async-signal-safe calls (sigaction, pthread_sigmask, fcntl); see `inherited`.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(fd) = liveness {
                // Kept across exec: the command keeps the grant alive.
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            inherited::restore_in_child()
        });
    }
    cmd.env("FAIRLOCK_TOKEN", grant.token.to_string())
        .env("FAIRLOCK_FILE", grant.lock)
        .env(
            "FAIRLOCK_OWNER_DIED",
            if grant.owner_died { "1" } else { "0" },
        );
    cmd
}

/// The command could not be started: 127 if not found, else 126, as shells say.
fn spawn_failure(a: &RunArgs, e: &io::Error) -> Failure {
    let name: OsString = match &a.shell {
        Some(_) => "/bin/sh".into(),
        None => a.command[0].clone(),
    };
    let name = name.to_string_lossy();
    match e.kind() {
        io::ErrorKind::NotFound => {
            Failure::new(exit::NOT_FOUND, format!("{name}: command not found"))
        }
        io::ErrorKind::PermissionDenied => {
            Failure::new(exit::NOT_EXECUTABLE, format!("{name}: permission denied"))
        }
        _ => Failure::new(exit::NOT_EXECUTABLE, format!("{name}: cannot execute: {e}")),
    }
}

/// Waits for the command, forwarding signals and watching the lease (`lost_now()` says
/// whether the lock is lost).
fn supervise(
    child: &mut Child,
    lost_now: &dyn Fn() -> bool,
    a: &RunArgs,
    mut sentinel: Option<&mut Sentinel>,
) -> io::Result<Ended> {
    let pidfd = pidfd_open(child.id());
    let mut lost = false;
    loop {
        for sig in signals::take() {
            // Sent to everyone (our process group, or each process of our cgroup): the command
            // got it too, unless it left our process group.
            let everyone = sentinel.as_deref_mut().is_some_and(|s| s.also_got(sig))
                && same_process_group(child.id());
            if !everyone {
                signals::send(child.id(), sig);
            }
        }
        if let Some(status) = child.try_wait()? {
            return Ok(Ended { status, lost });
        }
        if !lost && lost_now() {
            lost = true;
            if a.kill_on_lost {
                signals::send(child.id(), libc::SIGTERM);
            }
        }
        match &pidfd {
            Some(fd) => {
                let mut p = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd; EINTR (a signal) just ends the wait early.
                unsafe { libc::poll(&mut p, 1, POLL.as_millis() as libc::c_int) };
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// Whether process `pid` is in our process group.
fn same_process_group(pid: u32) -> bool {
    // SAFETY: getpgid/getpgrp have no memory-safety preconditions.
    unsafe { libc::getpgid(pid as libc::pid_t) == libc::getpgrp() }
}

/// A descriptor that becomes readable when the process exits (Linux 5.3+), if available.
fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    let fd = libc::c_int::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}
