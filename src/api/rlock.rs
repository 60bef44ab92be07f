//! [`FairRLock`]: the re-entrant variant.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::FairLock;
use crate::api::guard::LockGuard;
use crate::api::lock::{deadline_after, deadline_at};
use crate::api::options::OpenOptions;
use crate::error::Result;

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
#[derive(Debug)]
pub struct FairRLock {
    inner: FairLock,
}

impl From<FairLock> for FairRLock {
    fn from(inner: FairLock) -> Self {
        FairRLock { inner }
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

    /// A builder; finish with [`OpenOptions::open_rlock`].
    pub fn options() -> OpenOptions {
        OpenOptions::default()
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        self.inner.path()
    }

    /// Acquires the lock, or one more level of it if this thread holds it.
    ///
    /// # Errors
    /// [`crate::Error::Corrupt`] if the shared state is damaged.
    #[inline]
    pub fn lock(&self) -> Result<LockGuard<'_>> {
        self.inner.acquire(None, true, None)
    }

    /// Like [`FairLock::try_lock`], but succeeds at once if this thread holds the lock.
    ///
    /// # Errors
    /// [`crate::Error::WouldBlock`] if another holds it or waiters are queued.
    pub fn try_lock(&self) -> Result<LockGuard<'_>> {
        self.inner.try_acquire(true)
    }

    /// Like [`FairLock::lock_timeout`]; succeeds at once if this thread holds the lock.
    ///
    /// # Errors
    /// [`crate::Error::Timeout`]; as [`FairRLock::lock`] otherwise.
    pub fn lock_timeout(&self, timeout: Duration) -> Result<LockGuard<'_>> {
        self.inner
            .acquire(Some(deadline_after(timeout)), true, None)
    }

    /// Like [`FairLock::lock_until`]; succeeds at once if this thread holds the lock.
    ///
    /// # Errors
    /// [`crate::Error::Timeout`]; as [`FairRLock::lock`] otherwise.
    pub fn lock_until(&self, deadline: Instant) -> Result<LockGuard<'_>> {
        self.inner.acquire(Some(deadline_at(deadline)), true, None)
    }

    /// As [`FairLock::lock_interruptible`]; a re-entrant lock by the holder never waits.
    ///
    /// # Errors
    /// As [`FairLock::lock_interruptible`].
    pub fn lock_interruptible(
        &self,
        deadline: Option<Instant>,
        mut stop: impl FnMut() -> bool,
    ) -> Result<LockGuard<'_>> {
        self.inner
            .acquire(deadline.map(deadline_at), true, Some(&mut stop))
    }
}
