//! `fairlock run`: wait in line, run the command while holding the lock, pass its status on.

use std::ffi::OsString;
use std::io;
use std::os::fd::AsRawFd;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use fairlock::{Error, FairLock};

use crate::exit::{self, Failure};
use crate::kind::{self, Held, Lock};
use crate::secs::human;
use crate::sentinel::Sentinel;
use crate::{RunArgs, inherited, signals};

pub const USAGE: &str = "\
fairlock run [OPTIONS] LOCKFILE [--] COMMAND [ARGS]...
       fairlock run [OPTIONS] LOCKFILE -c SHELL_COMMAND";

pub const AFTER_HELP: &str = "\
Examples:
  fairlock run /tmp/job.lock -- make -j4           # wait in line, then run make
  fairlock run -n /tmp/job.lock ./nightly.sh       # skip if running or anyone waits
  fairlock run -w 2.5 -E 75 /tmp/job.lock -c 'cat a >> b'
  fairlock run --lease 60 --kill-on-lost /tmp/job.lock ./step.sh
  fairlock run etcd://10.0.0.1:2379,10.0.0.2:2379/deploy -- ./deploy.sh   # across hosts

The command sees FAIRLOCK_TOKEN (the grant's fencing token, strictly increasing),
FAIRLOCK_FILE (absolute path of the lock file) and FAIRLOCK_OWNER_DIED (1 if the
previous holder died or was taken over, else 0). With etcd://, FAIRLOCK_FILE is the
address, the lease (--lease, whole seconds, default 10) is renewed while fairlock lives,
and a holder that dies is taken over once its lease expires. SIGINT, SIGTERM and SIGHUP sent to
fairlock alone are forwarded to the command (once: not when the command got them too,
as from Ctrl-C or kill -PGID); signals fairlock inherited ignored (nohup) stay ignored.
A conflict (-n) or timeout (-w) prints nothing unless -v is given.

Exit status: the command's (128+SIG if killed by a signal); 1 (or -E N) busy/timeout;
64 usage; 65 not a lock file; 66 cannot open; 68 etcd: cannot reach a quorum; 69 lock lost (--lease expired and was
taken over while the command ran); 126 cannot execute; 127 command not found.";

/// How often the lease is checked while the command runs.
const POLL: Duration = Duration::from_millis(50);

pub fn main(a: &RunArgs) -> Result<u8, Failure> {
    if let Some(address) = a.lockfile.to_str().filter(|s| s.starts_with("etcd://")) {
        if kind::asks_for_a_kind(a) {
            return Err(Failure::new(
                exit::USAGE,
                format!("{address}: etcd locks are exclusive: -s and --permits need a lock file"),
            ));
        }
        return crate::etcd::run(a, address);
    }
    let path = a.lockfile.as_path();
    let started = Instant::now();
    // How long we may wait in all, the file's initialisation included: nothing with -n,
    // SECS with -w.
    let budget = if a.nonblock {
        Some(Duration::ZERO)
    } else {
        a.wait
    };
    let mut opts = FairLock::options();
    if let Some(name) = &a.name {
        opts.name(name.as_str());
    }
    if let Some(lease) = a.lease {
        opts.lease(lease);
    }
    if let Some(b) = budget {
        opts.init_timeout(b);
    }
    let lock = match kind::open(a, &opts, path) {
        Ok(lock) => lock,
        Err(Error::InitLocked { .. }) => {
            return Err(conflict(
                a,
                "is not initialised yet and another process holds its flock",
            ));
        }
        Err(e) => return Err(Failure::open(path, &e)),
    };
    let remaining = budget.map(|b| b.saturating_sub(started.elapsed()));
    let guard = acquire(&lock, a, remaining)?;
    if a.verbose {
        eprintln!(
            "fairlock: got {}{} (token {}) after {}{}",
            lock.what(),
            path.display(),
            guard.token(),
            human(started.elapsed()),
            if guard.owner_died() {
                "; the previous holder died or was taken over"
            } else {
                ""
            },
        );
    }
    guard.stamp_time(); // so that `fairlock status` can show "held for"
    signals::install().map_err(|e| Failure::new(exit::OS, format!("sigaction: {e}")))?;
    // Before the command: it must not inherit the sentinel's pipe.
    let mut sentinel = Sentinel::start();
    let file = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut child = match command(a, guard.token(), guard.owner_died(), file.as_os_str()).spawn() {
        Ok(child) => child,
        Err(e) => {
            drop(guard);
            return Err(spawn_failure(a, &e));
        }
    };
    let lost = || a.lease.is_some() && guard.check().is_err();
    let outcome = supervise(&mut child, &lost, a, sentinel.as_mut());
    drop(sentinel);
    let lost_at_release = matches!(guard.unlock(), Err(Error::LockLost { .. }));
    let (status, lost_while_running) =
        outcome.map_err(|e| Failure::new(exit::OS, format!("waiting for the command: {e}")))?;
    let code = status_code(status);
    if lost_while_running || lost_at_release {
        return Err(Failure::new(
            exit::LOST,
            format!(
                "{}: lost the lock while the command ran (its {} lease ran out and the next waiter took over){}; the command {}",
                path.display(),
                a.lease.map(human).unwrap_or_default(),
                if a.kill_on_lost && lost_while_running {
                    "; sent SIGTERM to the command"
                } else {
                    ""
                },
                describe(status),
            ),
        ));
    }
    if a.verbose {
        eprintln!(
            "fairlock: released {}; the command {}",
            path.display(),
            describe(status)
        );
    }
    Ok(code)
}

/// Waits for the lock as the options say (`remaining`: what is left of `-w`).
fn acquire<'a>(
    lock: &'a Lock,
    a: &RunArgs,
    remaining: Option<Duration>,
) -> Result<Held<'a>, Failure> {
    let path = a.lockfile.as_path();
    if a.nonblock {
        return lock.try_lock().map_err(|e| match e {
            Error::WouldBlock { .. } => conflict(a, "is held or has waiters"),
            e => Failure::locking(path, &e),
        });
    }
    if a.verbose
        && let Ok(st) = fairlock::inspect(path)
    {
        let ahead = st.waiters.len() as u64 + st.holders.len() as u64 + st.arriving;
        if ahead > 0 {
            eprintln!("fairlock: waiting for {} ({ahead} ahead)", path.display());
        }
    }
    match (a.wait, remaining) {
        (Some(d), Some(left)) => lock.lock_timeout(left).map_err(|e| match e {
            Error::Timeout { .. } | Error::WouldBlock { .. } => {
                conflict(a, &format!("still busy after {}", human(d)))
            }
            e => Failure::locking(path, &e),
        }),
        _ => lock.lock().map_err(|e| Failure::locking(path, &e)),
    }
}

/// A busy lock or a timeout: silent unless verbose, with the `-E` code.
pub fn conflict(a: &RunArgs, what: &str) -> Failure {
    if a.verbose {
        Failure::new(
            a.conflict_exit_code,
            format!("{}: {what}", a.lockfile.display()),
        )
    } else {
        Failure::silent(a.conflict_exit_code)
    }
}

/// The command, with FAIRLOCK_TOKEN, FAIRLOCK_FILE (the lock file's absolute path, or the
/// etcd:// address) and FAIRLOCK_OWNER_DIED.
pub fn command(a: &RunArgs, token: u64, owner_died: bool, lock: &std::ffi::OsStr) -> Command {
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
    // SAFETY: the closure runs in the child between fork and exec and only makes
    // async-signal-safe calls (sigaction, pthread_sigmask); see `inherited`.
    unsafe {
        cmd.pre_exec(inherited::restore_in_child);
    }
    cmd.env("FAIRLOCK_TOKEN", token.to_string())
        .env("FAIRLOCK_FILE", lock)
        .env("FAIRLOCK_OWNER_DIED", if owner_died { "1" } else { "0" });
    cmd
}

pub fn spawn_failure(a: &RunArgs, e: &io::Error) -> Failure {
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

/// Waits for the command, forwarding signals and watching the lease (`lost()` says whether
/// the lock is lost); returns its status and whether the lock was lost meanwhile.
pub fn supervise(
    child: &mut Child,
    lost_now: &dyn Fn() -> bool,
    a: &RunArgs,
    mut sentinel: Option<&mut Sentinel>,
) -> io::Result<(ExitStatus, bool)> {
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
            return Ok((status, lost));
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

/// The shell convention: the exit code, or 128 + the signal that killed it.
pub fn status_code(s: ExitStatus) -> u8 {
    match (s.code(), s.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(sig)) => (128 + sig).min(255) as u8,
        _ => exit::SOFTWARE,
    }
}

pub fn describe(s: ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(sig)) => format!("was killed by {}", signals::name(sig)),
        _ => format!("ended: {s}"),
    }
}
