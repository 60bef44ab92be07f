//! One lock file opened for Python: the library's lock (a Python lock object is shared by
//! threads); its process grants (`Lock`, `RWLock` sides: `ProcessGuard`, kept in the object,
//! `grants.rs`), and for an `RLock` [`OwnedGuard`], a thread's grant that owns the handle's
//! `Arc` so it can be kept in the per-thread table of held grants (`held.rs`) between
//! `acquire()` and `release()`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fairlock::{FairLock, FairRLock, FairRwLock, LockGuard, ProcessGuard, Result};

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

    /// The identity of this handle in the per-thread table: its address, which stays reserved
    /// while any [`OwnedGuard`] of it exists (each keeps the `Arc`).
    pub(crate) fn key(self: &Arc<Self>) -> usize {
        Arc::as_ptr(self) as usize
    }

    /// A process grant (`Lock`, `RWLock` sides) only if it is granted at once: never jumping
    /// the queue.
    ///
    /// # Errors
    /// As `FairLock::try_lock_process`.
    pub(crate) fn try_process(&self) -> Result<ProcessGuard> {
        match &self.kind {
            Kind::Lock(l) => l.try_lock_process(),
            Kind::Read(l) => l.try_read_process(),
            Kind::Write(l) => l.try_write_process(),
            Kind::RLock(_) => unreachable!("an RLock's grants are its threads'"),
        }
    }

    /// A process grant, waited for without blocking (see `async_acquire.rs`), for at most
    /// `timeout` if given.
    pub(crate) fn process_async(&self, timeout: Option<Duration>) -> fairlock::AcquireFuture {
        match (&self.kind, timeout) {
            (Kind::Lock(l), None) => l.lock_async(),
            (Kind::Lock(l), Some(d)) => l.lock_async_timeout(d),
            (Kind::Read(l), None) => l.read_async(),
            (Kind::Read(l), Some(d)) => l.read_async_timeout(d),
            (Kind::Write(l), None) => l.write_async(),
            (Kind::Write(l), Some(d)) => l.write_async_timeout(d),
            (Kind::RLock(_), _) => unreachable!("an RLock's grants are its threads'"),
        }
    }

    /// A process grant, waiting in line until granted, `deadline`, or `stop()`.
    ///
    /// # Errors
    /// As `FairLock::lock_process_interruptible`.
    pub(crate) fn process_interruptible(
        &self,
        deadline: Option<Instant>,
        stop: impl FnMut() -> bool,
    ) -> Result<ProcessGuard> {
        match &self.kind {
            Kind::Lock(l) => l.lock_process_interruptible(deadline, stop),
            Kind::Read(l) => l.read_process_interruptible(deadline, stop),
            Kind::Write(l) => l.write_process_interruptible(deadline, stop),
            Kind::RLock(_) => unreachable!("an RLock's grants are its threads'"),
        }
    }

    /// The `RLock`'s `try_lock` (never jumps the queue), as an owned grant of this thread.
    ///
    /// # Errors
    /// As `FairRLock::try_lock`.
    pub(crate) fn try_lock(self: &Arc<Self>) -> Result<OwnedGuard> {
        let guard = self.rlock().try_lock()?;
        Ok(OwnedGuard::new(self, guard))
    }

    /// The `RLock`'s wait in line until granted, `deadline`, or `stop()` (see
    /// `lock_interruptible`).
    ///
    /// # Errors
    /// As `FairRLock::lock_interruptible`.
    pub(crate) fn lock_interruptible(
        self: &Arc<Self>,
        deadline: Option<Instant>,
        stop: impl FnMut() -> bool,
    ) -> Result<OwnedGuard> {
        let guard = self.rlock().lock_interruptible(deadline, stop)?;
        Ok(OwnedGuard::new(self, guard))
    }

    fn rlock(&self) -> &FairRLock {
        match &self.kind {
            Kind::RLock(l) => l,
            _ => unreachable!("only an RLock's grants are its threads'"),
        }
    }
}

/// An `RLock`'s grant that owns its lock: the library's [`LockGuard`] and the `Arc<Handle>` it
/// borrows from. The library's owned guard (`ArcRLockGuard`) comes from the `*_arc` methods,
/// which wait without an interrupt hook; a grant of `lock_interruptible` (which the binding
/// uses, so that `KeyboardInterrupt` stops a wait) has no owned form there, hence this one.
///
/// Not `Send` (the guard is not): it stays on the thread that acquired, in `held.rs`'s table.
pub(crate) struct OwnedGuard {
    // Declared before `handle`: fields drop in order, so the guard is released while the lock
    // it borrows from is still alive.
    guard: LockGuard<'static>,
    handle: Arc<Handle>,
}

impl OwnedGuard {
    /// Ties `guard`, which every caller (all in this file) has just taken from `handle`'s lock,
    /// to a clone of `handle`.
    fn new<'a>(handle: &'a Arc<Handle>, guard: LockGuard<'a>) -> OwnedGuard {
        // SAFETY: `guard` was returned by a `&self` method of the lock inside `handle` (see the
        // callers above), so it borrows from that `Handle` and nothing shorter-lived. The
        // `Handle` lives in the `Arc`'s heap allocation at a stable address, is never moved or
        // mutably borrowed (an `Arc` gives shared access only), and is kept alive by the clone
        // stored below, which is dropped after the guard (field order) or, in `unlock`, after
        // the guard is consumed. So the borrow is valid for the guard's whole life, and
        // `'static` is never observable: the guard is only reached through `&self` methods
        // that return plain values, or consumed by `unlock`.
        let guard = unsafe { std::mem::transmute::<LockGuard<'a>, LockGuard<'static>>(guard) };
        // Every grant records its thread and start time, so that `fairlock.status()` and
        // `fairlock status` show who holds the lock and for how long (as `fairlock run` does).
        // The library leaves this out of its uncontended path; from Python it costs ~30 ns of
        // an acquire + release of ~200 ns.
        guard.stamp_time();
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
