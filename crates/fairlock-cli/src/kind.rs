//! Which kind of lock `fairlock run` takes — the exclusive lock, a reader or writer of a
//! reader/writer lock (`-s`, `-x`), a semaphore's permit (`--permits N`) — and one guard type
//! over the four grants.

use std::path::Path;
use std::time::Duration;

use fairlock::{
    FairLock, FairRwLock, FairSemaphore, Fairness, LockKind, OpenOptions, ProcessGuard, Result,
};

use crate::args::RunArgs;

/// An open lock of the kind the run asked for.
pub enum Lock {
    Exclusive(FairLock),
    Read(FairRwLock),
    Write(FairRwLock),
    Permit(FairSemaphore),
}

/// A grant of any kind: the process's (`ProcessGuard`), so that the command can be given its
/// liveness (`ProcessGuard::share_liveness`).
pub type Held = ProcessGuard;

/// What the run asks for, before the file is looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wanted {
    /// No -s, -x or --permits: the file's own kind decides (a new file: exclusive).
    Default,
    Shared,
    Exclusive,
    Permits(u32),
}

fn wanted(a: &RunArgs) -> Wanted {
    match (a.permits, a.shared, a.exclusive) {
        (Some(n), _, _) => Wanted::Permits(n),
        (None, true, _) => Wanted::Shared,
        (None, false, true) => Wanted::Exclusive,
        (None, false, false) => Wanted::Default,
    }
}

/// Whether the run asked for anything but the plain exclusive lock (etcd has only that).
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
pub fn asks_for_a_kind(a: &RunArgs) -> bool {
    wanted(a) != Wanted::Default && wanted(a) != Wanted::Exclusive
}

/// Opens `path` as the lock the run asks for. An existing file's kind decides what no flag
/// asked for: a reader/writer lock is taken as a writer without -s, a semaphore only with
/// its own --permits; a new file is a reader/writer lock with -s or -x, a semaphore with
/// --permits, else an exclusive lock. An existing exclusive lock with a bypass bound (made by
/// a program with `Fairness::Bounded`) is taken with its bound.
pub fn open(a: &RunArgs, opts: &OpenOptions, path: &Path) -> Result<Lock> {
    let existing = fairlock::inspect(path).ok().and_then(|st| match &a.name {
        Some(name) => st
            .names
            .into_iter()
            .find(|n| n.name.as_ref() == Some(name))
            .map(|n| (n.kind, n.fairness)),
        None => Some((st.kind, st.fairness)),
    });
    let fairness = existing.map(|(_, f)| f);
    let existing = existing.map(|(k, _)| k);
    match (wanted(a), existing) {
        (Wanted::Permits(n), _) => opts.open_semaphore(path, n).map(Lock::Permit),
        (Wanted::Shared, _) => opts.open_rwlock(path).map(Lock::Read),
        (Wanted::Exclusive | Wanted::Default, Some(LockKind::RwLock)) => {
            opts.open_rwlock(path).map(Lock::Write)
        }
        (Wanted::Exclusive, None) => opts.open_rwlock(path).map(Lock::Write),
        // An exclusive file, a new one without flags, or a semaphore without --permits (which
        // the exclusive open refuses, naming its permits).
        (Wanted::Exclusive | Wanted::Default, _) => match fairness {
            Some(bounded @ Fairness::Bounded(_)) => opts
                .clone()
                .fairness(bounded)
                .open(path)
                .map(Lock::Exclusive),
            _ => opts.open(path).map(Lock::Exclusive),
        },
    }
}

/// For a run without `--permits` refused by a semaphore file: the `--permits` it takes, as
/// `fairlock run` would need it (`take a permit with --permits 3`). `None` otherwise.
pub fn permits_hint(a: &RunArgs, path: &Path, e: &fairlock::Error) -> Option<String> {
    if a.permits.is_some() || !matches!(e, fairlock::Error::KindMismatch { .. }) {
        return None;
    }
    let st = fairlock::inspect(path).ok()?;
    let kind = match &a.name {
        Some(name) => {
            st.names
                .into_iter()
                .find(|n| n.name.as_ref() == Some(name))?
                .kind
        }
        None => st.kind,
    };
    match kind {
        LockKind::Semaphore { permits } => Some(format!(
            "to take one of its permits: fairlock run --permits {permits} ..."
        )),
        _ => None,
    }
}

impl Lock {
    /// Waits in line.
    pub fn lock(&self) -> Result<Held> {
        match self {
            Lock::Exclusive(l) => l.lock_process(),
            Lock::Read(l) => l.read_process(),
            Lock::Write(l) => l.write_process(),
            Lock::Permit(s) => s.acquire_process(),
        }
    }

    /// Only if granted at once (never jumping the queue).
    pub fn try_lock(&self) -> Result<Held> {
        match self {
            Lock::Exclusive(l) => l.try_lock_process(),
            Lock::Read(l) => l.try_read_process(),
            Lock::Write(l) => l.try_write_process(),
            Lock::Permit(s) => s.try_acquire_process(),
        }
    }

    /// Waits in line for at most `d`.
    pub fn lock_timeout(&self, d: Duration) -> Result<Held> {
        match self {
            Lock::Exclusive(l) => l.lock_process_timeout(d),
            Lock::Read(l) => l.read_process_timeout(d),
            Lock::Write(l) => l.write_process_timeout(d),
            Lock::Permit(s) => s.acquire_process_timeout(d),
        }
    }

    /// How `-v` names what was taken: "", "a read of ", "a write of ", "a permit of ".
    pub fn what(&self) -> &'static str {
        match self {
            Lock::Exclusive(_) => "",
            Lock::Read(_) => "a read of ",
            Lock::Write(_) => "a write of ",
            Lock::Permit(_) => "a permit of ",
        }
    }
}
