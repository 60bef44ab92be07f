//! One lock file opened for Python: the library's lock in an `Arc` (a Python lock object is
//! shared by threads), and [`OwnedGuard`], a grant that owns that `Arc` so it can be kept in the
//! per-thread table of held grants (`held.rs`) between `acquire()` and `release()`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fairlock::{
    FairLock, FairRLock, FairRwLock, LockGuard, Result, RwLockReadGuard, RwLockWriteGuard,
};

/// The library lock a Python lock object stands for.
enum Kind {
    /// `fairlock.Lock`: the holder locking again is refused (`WouldDeadlock`).
    Lock(FairLock),
    /// `fairlock.RLock`: the holder locking again through *another* object on the same file
    /// re-enters (the library's re-entrancy is per process and thread); re-entering through the
    /// same object never reaches the library (`held.rs` counts it).
    RLock(FairRLock),
    /// The read side of a `fairlock.RWLock` (the write side is another `Handle` on the same
    /// `FairRwLock`, so that each side has its own key in `held.rs`).
    Read(Arc<FairRwLock>),
    /// The write side of a `fairlock.RWLock`.
    Write(Arc<FairRwLock>),
}

/// A lock file opened by a `fairlock.Lock` or `fairlock.RLock`.
pub(crate) struct Handle {
    kind: Kind,
    /// The lease every grant through this handle carries, if any.
    lease: Option<Duration>,
    /// The lock's name in a file of named locks, if any.
    name: Option<String>,
}

/// The library's options for a handle: its lease and name.
fn options(lease: Option<Duration>, name: Option<&str>) -> fairlock::OpenOptions {
    let mut options = FairLock::options();
    if let Some(d) = lease {
        options.lease(d);
    }
    if let Some(n) = name {
        options.name(n);
    }
    options
}

impl Handle {
    /// Opens (creating if needed) the lock file at `path`; `reentrant` for an `RLock`.
    pub(crate) fn open(
        path: &Path,
        lease: Option<Duration>,
        name: Option<String>,
        reentrant: bool,
    ) -> Result<Handle> {
        let options = options(lease, name.as_deref());
        let kind = if reentrant {
            Kind::RLock(options.open_rlock(path)?)
        } else {
            Kind::Lock(options.open(path)?)
        };
        Ok(Handle { kind, lease, name })
    }

    /// Opens (creating if needed) the reader/writer lock file at `path`: its read side and its
    /// write side.
    pub(crate) fn open_rw(
        path: &Path,
        lease: Option<Duration>,
        name: Option<String>,
    ) -> Result<(Handle, Handle)> {
        let rw = Arc::new(options(lease, name.as_deref()).open_rwlock(path)?);
        Ok((
            Handle {
                kind: Kind::Read(Arc::clone(&rw)),
                lease,
                name: name.clone(),
            },
            Handle {
                kind: Kind::Write(rw),
                lease,
                name,
            },
        ))
    }

    /// The lock file's path.
    pub(crate) fn path(&self) -> &Path {
        match &self.kind {
            Kind::Lock(l) => l.path(),
            Kind::RLock(l) => l.path(),
            Kind::Read(l) | Kind::Write(l) => l.path(),
        }
    }

    /// Whether this is a side of a reader/writer lock (`Some(true)`: the write side).
    pub(crate) fn rw_side(&self) -> Option<bool> {
        match &self.kind {
            Kind::Read(_) => Some(false),
            Kind::Write(_) => Some(true),
            _ => None,
        }
    }

    pub(crate) fn lease(&self) -> Option<Duration> {
        self.lease
    }

    /// The lock's name in a file of named locks, if any.
    pub(crate) fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    pub(crate) fn is_reentrant(&self) -> bool {
        matches!(self.kind, Kind::RLock(_))
    }

    /// The identity of this handle in the per-thread table: its address, which stays reserved
    /// while any [`OwnedGuard`] of it exists (each keeps the `Arc`).
    pub(crate) fn key(self: &Arc<Self>) -> usize {
        Arc::as_ptr(self) as usize
    }

    /// `try_lock` (never jumps the queue), as an owned grant.
    ///
    /// # Errors
    /// As `FairLock::try_lock` / `FairRLock::try_lock`.
    pub(crate) fn try_lock(self: &Arc<Self>) -> Result<OwnedGuard> {
        let grant = match &self.kind {
            Kind::Lock(l) => Grant::Lock(l.try_lock()?),
            Kind::RLock(l) => Grant::Lock(l.try_lock()?),
            Kind::Read(l) => Grant::Read(l.try_read()?),
            Kind::Write(l) => Grant::Write(l.try_write()?),
        };
        Ok(OwnedGuard::new(self, grant))
    }

    /// Waits in line until granted, `deadline`, or `stop()` (see `lock_interruptible`).
    ///
    /// # Errors
    /// As `FairLock::lock_interruptible`.
    pub(crate) fn lock_interruptible(
        self: &Arc<Self>,
        deadline: Option<Instant>,
        stop: impl FnMut() -> bool,
    ) -> Result<OwnedGuard> {
        let grant = match &self.kind {
            Kind::Lock(l) => Grant::Lock(l.lock_interruptible(deadline, stop)?),
            Kind::RLock(l) => Grant::Lock(l.lock_interruptible(deadline, stop)?),
            Kind::Read(l) => Grant::Read(l.read_interruptible(deadline, stop)?),
            Kind::Write(l) => Grant::Write(l.write_interruptible(deadline, stop)?),
        };
        Ok(OwnedGuard::new(self, grant))
    }
}

/// A grant of any of the library's locks, borrowing from a [`Handle`].
enum Grant<'a> {
    Lock(LockGuard<'a>),
    Read(RwLockReadGuard<'a>),
    Write(RwLockWriteGuard<'a>),
}

impl Grant<'_> {
    fn token(&self) -> u64 {
        match self {
            Grant::Lock(g) => g.token(),
            Grant::Read(g) => g.token(),
            Grant::Write(g) => g.token(),
        }
    }

    fn owner_died(&self) -> bool {
        match self {
            Grant::Lock(g) => g.owner_died(),
            Grant::Read(g) => g.owner_died(),
            Grant::Write(g) => g.owner_died(),
        }
    }

    fn check(&self) -> Result<()> {
        match self {
            Grant::Lock(g) => g.check(),
            Grant::Read(g) => g.check(),
            Grant::Write(g) => g.check(),
        }
    }

    fn extend(&self, d: Duration) -> Result<()> {
        match self {
            Grant::Lock(g) => g.extend(d),
            Grant::Read(g) => g.extend(d),
            Grant::Write(g) => g.extend(d),
        }
    }

    fn unlock(self) -> Result<()> {
        match self {
            Grant::Lock(g) => g.unlock(),
            Grant::Read(g) => g.unlock(),
            Grant::Write(g) => g.unlock(),
        }
    }
}

/// A grant that owns its lock: the library's [`LockGuard`] and the `Arc<Handle>` it borrows
/// from. The library's owned guards (`ArcLockGuard` and the others) come from the `*_arc`
/// methods, which wait without an interrupt hook; a grant of `lock_interruptible` (which the
/// binding uses, so that `KeyboardInterrupt` stops a wait) has no owned form there, hence this
/// one, over whichever kind the handle is.
///
/// Not `Send` (the guard is not): it stays on the thread that acquired, in `held.rs`'s table.
pub(crate) struct OwnedGuard {
    // Declared before `handle`: fields drop in order, so the guard is released while the lock
    // it borrows from is still alive.
    guard: Grant<'static>,
    handle: Arc<Handle>,
}

impl OwnedGuard {
    /// Ties `guard`, which every caller (all in this file) has just taken from `handle`'s lock,
    /// to a clone of `handle`.
    fn new<'a>(handle: &'a Arc<Handle>, guard: Grant<'a>) -> OwnedGuard {
        // SAFETY: `guard` was returned by a `&self` method of the lock inside `handle` (see the
        // callers above), so it borrows from that `Handle` and nothing shorter-lived. The
        // `Handle` lives in the `Arc`'s heap allocation at a stable address, is never moved or
        // mutably borrowed (an `Arc` gives shared access only), and is kept alive by the clone
        // stored below, which is dropped after the guard (field order) or, in `unlock`, after
        // the guard is consumed. So the borrow is valid for the guard's whole life, and
        // `'static` is never observable: the guard is only reached through `&self` methods
        // that return plain values, or consumed by `unlock`.
        // (A `Read`/`Write` grant borrows the `FairRwLock` that the `Handle` keeps in an `Arc`:
        // alive as long as the `Handle`, so the same argument holds.)
        let guard = unsafe { std::mem::transmute::<Grant<'a>, Grant<'static>>(guard) };
        // Every grant records its thread and start time, so that `fairlock.status()` and
        // `fairlock status` show who holds the lock and for how long (as `fairlock run` does).
        // The library leaves this out of its uncontended path; from Python it costs ~30 ns of
        // an acquire + release of ~200 ns. (Reads and writes are stamped by the library: every
        // such grant queues.)
        if let Grant::Lock(g) = &guard {
            g.stamp_time();
        }
        OwnedGuard {
            guard,
            handle: Arc::clone(handle),
        }
    }

    /// The grant's fencing token.
    pub(crate) fn token(&self) -> u64 {
        self.guard.token()
    }

    /// Whether the previous holder did not release (died, or its lease was taken over).
    pub(crate) fn owner_died(&self) -> bool {
        self.guard.owner_died()
    }

    /// `Ok` while the lock is still ours.
    ///
    /// # Errors
    /// `LockLost` (see `LockGuard::check`).
    pub(crate) fn check(&self) -> Result<()> {
        self.guard.check()
    }

    /// Renews the lease to `d` from now.
    ///
    /// # Errors
    /// As `LockGuard::extend`.
    pub(crate) fn extend(&self, d: Duration) -> Result<()> {
        self.guard.extend(d)
    }

    /// Releases the grant and reports whether it was still ours.
    ///
    /// # Errors
    /// `LockLost` (see `LockGuard::unlock`).
    pub(crate) fn unlock(self) -> Result<()> {
        let OwnedGuard { guard, handle } = self;
        let r = guard.unlock();
        drop(handle);
        r
    }
}
