//! [`FairLock`]: the strictly FIFO, cross-process lock.

use std::path::Path;

use crate::api::guard::LockGuard;
use crate::api::options::OpenOptions;
use crate::error::Result;
use crate::raw::acquire::Mode;
use crate::raw::handle::RawLock;
use crate::raw::owned_guard::arc_guard;
use crate::raw::surface::{acquire_surface, process_surface};

/// A strictly fair (first come, first served) lock shared by threads and processes through a
/// memory-mapped lock file.
///
/// * Waiters are granted in the order they arrived, across threads and processes;
///   [`FairLock::try_lock`] never jumps the queue.
/// * Uncontended `lock` + `unlock` is a handful of atomic operations and no system call; a
///   hand-off wakes only the next waiter (and nudges the one after it to spin).
/// * A holder or waiter that dies never blocks the others: the next waiter takes over and
///   learns it through [`LockGuard::owner_died`].
/// * Every grant carries a fencing [`token`](LockGuard::token) that strictly increases.
///
/// `FairLock` is `Send + Sync`: share one handle between threads (for example in an `Arc`).
/// Handles opened on the same file in one process share one mapping and one identity.
///
/// ```
/// let dir = std::env::temp_dir().join(format!("fairlock-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let lock = fairlock::FairLock::open(dir.join("example.lock"))?;
/// {
///     let guard = lock.lock()?;
///     println!("holding with token {}", guard.token());
/// } // released here
/// assert!(lock.try_lock().is_ok());
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct FairLock {
    pub(crate) raw: RawLock,
}

impl std::fmt::Debug for FairLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairLock")
            .field("path", &self.path())
            .field("lease_ms", &self.raw.lease_ms)
            .finish_non_exhaustive()
    }
}

impl FairLock {
    /// Opens the lock file at `path`, creating it (mode `0600`) if needed.
    ///
    /// # Errors
    /// See [`OpenOptions::open`].
    pub fn open(path: impl AsRef<Path>) -> Result<FairLock> {
        OpenOptions::default().open(path)
    }

    /// A builder for opening with a lease, a file mode, and other options.
    pub fn options() -> OpenOptions {
        OpenOptions::default()
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        self.raw.path()
    }

    acquire_surface! {
        what: "the lock",
        mode: Mode::Exclusive,
        guard: LockGuard [LockGuard<'_>],
        arc: ArcLockGuard [ArcLockGuard],
        names: [
            lock, try_lock, lock_timeout, lock_until, lock_interruptible,
            lock_arc, try_lock_arc, lock_arc_timeout,
        ],
    }

    process_surface! {
        what: "the lock",
        mode: Mode::Exclusive,
        names: [
            lock_process, try_lock_process, lock_process_timeout, lock_process_interruptible,
            lock_async, lock_async_timeout,
        ],
    }
}

arc_guard!(
    /// Proof of holding a [`FairLock`] kept in an [`Arc`](std::sync::Arc), returned by
    /// [`FairLock::lock_arc`]: it owns a clone of the `Arc`, so it has no lifetime and can be
    /// stored in a struct or returned from a function. It dereferences to the [`LockGuard`],
    /// whose methods it has: [`token`](LockGuard::token), [`owner_died`](LockGuard::owner_died),
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
    ArcLockGuard [] [],
    handle: FairLock,
    guard: LockGuard<'static>,
    borrowed: LockGuard<'_>,
    deref: guard,
);

impl ArcLockGuard {
    /// The lock this guard holds (the same as [`handle`](ArcLockGuard::handle)).
    pub fn fair_lock(&self) -> &std::sync::Arc<FairLock> {
        &self.handle
    }
}
