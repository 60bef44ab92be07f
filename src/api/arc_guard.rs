//! [`ArcLockGuard`]: a guard that owns its lock through an `Arc` (as `parking_lot`'s
//! `ArcMutexGuard`), for holds that outlive a borrow.

use std::ops::Deref;
use std::sync::Arc;

use crate::FairLock;
use crate::api::guard::LockGuard;
use crate::error::Result;

/// Proof of holding a [`FairLock`] kept in an [`Arc`], returned by
/// [`FairLock::lock_arc`]: it owns a clone of the `Arc`, so it has no lifetime and can be
/// stored in a struct or returned from a function. It dereferences to the [`LockGuard`], whose
/// methods it has: [`token`](LockGuard::token), [`owner_died`](LockGuard::owner_died),
/// [`check`](LockGuard::check), [`extend`](LockGuard::extend); end it with
/// [`ArcLockGuard::unlock`] (to learn whether the lock was still ours) or by dropping it.
///
/// Like [`LockGuard`] it is not `Send`: the lock belongs to the thread that acquired it.
///
/// ```
/// use std::sync::Arc;
/// let path = std::env::temp_dir().join(format!("fairlock-arc-{}.lock", std::process::id()));
/// let lock = Arc::new(fairlock::FairLock::open(&path)?);
///
/// struct Job { _hold: fairlock::ArcLockGuard }
/// let job = Job { _hold: lock.lock_arc()? };    // no borrow of `lock` is kept
/// assert!(lock.try_lock().is_err());
/// drop(job);
/// assert!(lock.try_lock().is_ok());
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct ArcLockGuard {
    // Declared before `lock`: fields drop in order, so the guard is released while the lock
    // it borrows from is still alive.
    guard: LockGuard<'static>,
    lock: Arc<FairLock>,
}

impl ArcLockGuard {
    pub(crate) fn new(lock: Arc<FairLock>, guard: LockGuard<'_>) -> ArcLockGuard {
        // SAFETY: the guard borrows the `Shared` view it was granted in, which lives in an
        // `Arc` kept by `lock`'s list of views for as long as the `FairLock` exists (views are
        // only ever added); the `FairLock` lives at a stable address inside `lock`'s `Arc`,
        // which this struct owns and drops after the guard (field order). So the borrow is
        // valid for the guard's whole life, and `'static` is never observable: the guard is
        // only reachable as `&LockGuard<'static>` (through `Deref`, tied to `&self`) or
        // consumed by `unlock`.
        let guard = unsafe { std::mem::transmute::<LockGuard<'_>, LockGuard<'static>>(guard) };
        ArcLockGuard { guard, lock }
    }

    /// The lock this guard holds.
    pub fn fair_lock(&self) -> &Arc<FairLock> {
        &self.lock
    }

    /// Releases the lock and reports whether it was still ours (see [`LockGuard::unlock`]).
    ///
    /// # Errors
    /// [`Error::LockLost`](crate::Error::LockLost) if it had been taken over or revoked.
    pub fn unlock(self) -> Result<()> {
        let ArcLockGuard { guard, lock } = self;
        let r = guard.unlock();
        drop(lock);
        r
    }
}

impl Deref for ArcLockGuard {
    type Target = LockGuard<'static>;

    fn deref(&self) -> &LockGuard<'static> {
        &self.guard
    }
}

impl std::fmt::Debug for ArcLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArcLockGuard")
            .field("path", &self.lock.path())
            .field("token", &self.guard.token())
            .field("owner_died", &self.guard.owner_died())
            .finish()
    }
}
