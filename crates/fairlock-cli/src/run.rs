//! `fairlock run LOCKFILE`: wait in line on a lock file (of the kind the options ask for),
//! run the command while holding the lock, pass its status on. (`etcd://` is in `etcd.rs`.)

use std::time::{Duration, Instant};

use fairlock::{Error, FairLock};

use crate::args::RunArgs;
use crate::child::{self, Grant};
use crate::exit::{self, Failure};
use crate::kind::{self, Held, Lock};
use crate::secs::human;
use crate::signals;

pub fn main(a: &RunArgs) -> Result<u8, Failure> {
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
    if let Some(mode) = a.mode {
        opts.mode(mode);
    }
    if let Some(b) = budget {
        opts.init_timeout(b);
    }
    let lock = match kind::open(a, &opts, path) {
        Ok(lock) => lock,
        Err(Error::InitLocked { .. }) => {
            return Err(a.conflict("is not initialised yet and another process holds its flock"));
        }
        Err(e) => {
            let mut f = Failure::open(path, &e);
            if let Some(hint) = kind::permits_hint(a, path, &e) {
                f.message = format!("{}; {hint}", f.message);
            }
            return Err(f);
        }
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
    signals::install().map_err(|e| Failure::new(exit::OS, format!("sigaction: {e}")))?;
    let file = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let grant = Grant {
        token: guard.token(),
        owner_died: guard.owner_died(),
        lock: file.as_os_str(),
        // The command inherits what keeps the grant alive: if `fairlock` itself is killed
        // while the command runs, the lock stays held until the command (and whatever it
        // handed the descriptor on to) ends, and the next holder is told the owner died — as
        // flock(1)'s child keeps its lock. Not with -o (flock's "the command does not hold
        // the lock").
        keep_alive: (!a.close).then_some(&guard),
    };
    let ended = child::run(a, &grant, &|| a.lease.is_some() && guard.check().is_err())?;
    let lost_at_release = matches!(guard.unlock(), Err(Error::LockLost { .. }));
    if ended.lost || lost_at_release {
        return Err(Failure::new(
            exit::LOST,
            format!(
                "{}: lost the lock while the command ran (its {} lease ran out and the next waiter took over){}; the command {}",
                path.display(),
                a.lease.map(human).unwrap_or_default(),
                if a.kill_on_lost && ended.lost {
                    "; sent SIGTERM to the command"
                } else {
                    ""
                },
                ended.describe(),
            ),
        ));
    }
    if a.verbose {
        eprintln!(
            "fairlock: released {}; the command {}",
            path.display(),
            ended.describe()
        );
    }
    Ok(ended.code())
}

/// Waits for the lock as the options say (`remaining`: what is left of `-w`).
fn acquire(lock: &Lock, a: &RunArgs, remaining: Option<Duration>) -> Result<Held, Failure> {
    let path = a.lockfile.as_path();
    if a.nonblock {
        return lock.try_lock().map_err(|e| match e {
            Error::WouldBlock { .. } => a.conflict("is held or has waiters"),
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
                a.conflict(&format!("still busy after {}", human(d)))
            }
            e => Failure::locking(path, &e),
        }),
        _ => lock.lock().map_err(|e| Failure::locking(path, &e)),
    }
}
