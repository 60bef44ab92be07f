//! [`FairRLock`]: the re-entrant variant.

use std::path::Path;

use crate::FairLock;
use crate::api::guard::LockGuard;
use crate::api::kind_options::RLockOptions;
use crate::api::options::OpenOptions;
use crate::error::Result;
use crate::raw::acquire::Mode;
use crate::raw::handle::RawLock;
use crate::raw::owned_guard::arc_guard;
use crate::raw::surface::acquire_surface;

/// A re-entrant [`FairLock`]: the thread holding it may lock it again, which bumps a count and
/// takes **no** ticket (it never queues behind itself). The lock is released when the last
/// guard is dropped. Fairness, crash recovery, leases and tokens are those of [`FairLock`];
/// nested guards share the outer grant's token, and all of them report a lost lease.
///
/// Re-entrancy is per (process, thread): handles opened on the same file in one process
/// share it.
///
/// ```
/// let path = std::env::temp_dir().join(format!("fairlock-rdoc-{}.lock", std::process::id()));
/// let lock = fairlock::FairRLock::open(&path)?;
/// let outer = lock.lock()?;
/// let inner = lock.lock()?; // same thread: no ticket, no wait
/// assert_eq!(outer.token(), inner.token());
/// drop(inner);
/// drop(outer); // released here
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct FairRLock {
    pub(crate) raw: RawLock,
}

impl std::fmt::Debug for FairRLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairRLock")
            .field("path", &self.path())
            .field("lease_ms", &self.raw.lease_ms)
            .finish_non_exhaustive()
    }
}

impl From<FairLock> for FairRLock {
    fn from(lock: FairLock) -> Self {
        FairRLock { raw: lock.raw }
    }
}

impl FairRLock {
    /// Opens the lock file at `path`, creating it if needed.
    ///
    /// # Errors
    /// See [`OpenOptions::open`].
    pub fn open(path: impl AsRef<Path>) -> Result<FairRLock> {
        OpenOptions::default().open_rlock(path)
    }

    /// A builder of this kind (its `open` opens a `FairRLock`): lease, file mode, geometry and
    /// the other settings of [`OpenOptions`] that it takes.
    pub fn options() -> RLockOptions {
        RLockOptions::default()
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        self.raw.path()
    }

    acquire_surface! {
        what: "the lock (at once, nesting, if this thread holds it)",
        mode: Mode::Reentrant,
        guard: LockGuard [LockGuard<'_>],
        arc: ArcRLockGuard [ArcRLockGuard],
        names: [
            lock, try_lock, lock_timeout, lock_until, lock_interruptible,
            lock_arc, try_lock_arc, lock_arc_timeout,
        ],
    }
}

arc_guard!(
    /// Proof of holding a [`FairRLock`] kept in an [`Arc`](std::sync::Arc) (from [`FairRLock::lock_arc`]): as
    /// [`ArcLockGuard`](crate::ArcLockGuard), one level of the re-entrant hold.
    ArcRLockGuard [] [],
    handle: FairRLock,
    guard: LockGuard<'static>,
    borrowed: LockGuard<'_>,
    deref: guard,
);
