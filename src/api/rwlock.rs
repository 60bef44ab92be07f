//! [`FairRwLock`]: readers together, writers alone, everybody in arrival order.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::FairLock;
use crate::api::kind_guard::{RwLockReadGuard, RwLockWriteGuard};
use crate::api::lock::{deadline_after, deadline_at};
use crate::api::options::OpenOptions;
use crate::error::Result;

/// A strictly fair reader/writer lock shared by threads and processes through a lock file.
///
/// Tickets are granted in arrival order, each as soon as it fits: a read when no write is
/// held, a write when nothing is held. Readers that arrive one after another hold together; a
/// writer waits for the readers ahead of it and holds back every reader that arrives after it,
/// so a stream of readers never starves a writer and a stream of writers never starves a
/// reader (task-fair FIFO with reader batching; `docs/DESIGN.md` says why rather than
/// phase-fair). `try_read` and `try_write` never jump the queue.
///
/// A dead reader's or writer's grant is recovered like a dead `FairLock` holder's, and the
/// next grant learns it through `owner_died()` (so does every reader granted while a reader
/// told of it still holds: the whole batch that reads what a dead writer left). Leases (see [`OpenOptions::lease`]) work for readers and writers; a process
/// holds at most one *leased* grant of a file at a time (a second is refused with
/// [`Error::InvalidOption`](crate::Error::InvalidOption); unleased grants are not limited).
/// Fencing tokens strictly increase over grants: a write's token exceeds that of every grant
/// before it. A reader whose slot is still held by a read taken `N` tickets before (`N` = the
/// file's slots) takes another ticket rather than wait for it, which may let the few tickets
/// taken in between go first.
///
/// A thread that holds the lock (either way) and asks for it again gets
/// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock): it would wait behind itself.
///
/// ```
/// let path = std::env::temp_dir().join(format!("fairlock-rwdoc-{}.lock", std::process::id()));
/// let lock = fairlock::FairRwLock::open(&path)?;
/// {
///     let r1 = lock.read()?;
///     let r2 = lock.try_read();   // another thread's read would hold together with r1
///     assert!(r2.is_err());       // (this thread asking twice is refused: WouldDeadlock)
///     drop(r1);
/// }
/// let w = lock.write()?;          // alone
/// assert!(w.token() > 0);
/// drop(w);
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct FairRwLock {
    inner: FairLock,
}

impl FairRwLock {
    pub(crate) fn from_lock(inner: FairLock) -> FairRwLock {
        FairRwLock { inner }
    }

    /// Opens the reader/writer lock file at `path`, creating it (mode `0600`) if needed.
    ///
    /// # Errors
    /// See [`OpenOptions::open_rwlock`].
    pub fn open(path: impl AsRef<Path>) -> Result<FairRwLock> {
        OpenOptions::default().open_rwlock(path)
    }

    /// A builder; finish with [`OpenOptions::open_rwlock`].
    pub fn options() -> OpenOptions {
        OpenOptions::default()
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        self.inner.path()
    }

    /// Waits in line for a read (shared) grant.
    ///
    /// # Errors
    /// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock) if this thread holds the lock;
    /// [`Error::Corrupt`](crate::Error::Corrupt) if the shared state is damaged.
    pub fn read(&self) -> Result<RwLockReadGuard<'_>> {
        self.inner
            .acquire_weighted(None, true, None)
            .map(RwLockReadGuard::new)
    }

    /// Waits in line for a write (exclusive) grant.
    ///
    /// # Errors
    /// As [`FairRwLock::read`].
    pub fn write(&self) -> Result<RwLockWriteGuard<'_>> {
        self.inner
            .acquire_weighted(None, false, None)
            .map(RwLockWriteGuard::new)
    }

    /// A read grant only if it is granted at once: no write held and nobody waiting.
    ///
    /// # Errors
    /// [`Error::WouldBlock`](crate::Error::WouldBlock); as [`FairRwLock::read`] otherwise.
    pub fn try_read(&self) -> Result<RwLockReadGuard<'_>> {
        self.inner
            .try_acquire_weighted(true)
            .map(RwLockReadGuard::new)
    }

    /// A write grant only if it is granted at once: nothing held and nobody waiting.
    ///
    /// # Errors
    /// [`Error::WouldBlock`](crate::Error::WouldBlock); as [`FairRwLock::read`] otherwise.
    pub fn try_write(&self) -> Result<RwLockWriteGuard<'_>> {
        self.inner
            .try_acquire_weighted(false)
            .map(RwLockWriteGuard::new)
    }

    /// Waits in line for a read grant for at most `timeout`; a waiter that times out gives its
    /// ticket up (and whoever it held back behind it is granted).
    ///
    /// # Errors
    /// [`Error::Timeout`](crate::Error::Timeout); as [`FairRwLock::read`] otherwise.
    pub fn read_timeout(&self, timeout: Duration) -> Result<RwLockReadGuard<'_>> {
        self.inner
            .acquire_weighted(Some(deadline_after(timeout)), true, None)
            .map(RwLockReadGuard::new)
    }

    /// Waits in line for a write grant for at most `timeout` (see
    /// [`read_timeout`](FairRwLock::read_timeout)).
    ///
    /// # Errors
    /// As [`FairRwLock::read_timeout`].
    pub fn write_timeout(&self, timeout: Duration) -> Result<RwLockWriteGuard<'_>> {
        self.inner
            .acquire_weighted(Some(deadline_after(timeout)), false, None)
            .map(RwLockWriteGuard::new)
    }

    /// Waits in line for a read grant until `deadline` at most.
    ///
    /// # Errors
    /// As [`FairRwLock::read_timeout`].
    pub fn read_until(&self, deadline: Instant) -> Result<RwLockReadGuard<'_>> {
        self.inner
            .acquire_weighted(Some(deadline_at(deadline)), true, None)
            .map(RwLockReadGuard::new)
    }

    /// Waits in line for a write grant until `deadline` at most.
    ///
    /// # Errors
    /// As [`FairRwLock::read_timeout`].
    pub fn write_until(&self, deadline: Instant) -> Result<RwLockWriteGuard<'_>> {
        self.inner
            .acquire_weighted(Some(deadline_at(deadline)), false, None)
            .map(RwLockWriteGuard::new)
    }

    /// A read grant, waiting until `deadline` (if any) and giving the place up once `stop()`
    /// returns true (as [`FairLock::lock_interruptible`]).
    ///
    /// # Errors
    /// [`Error::Interrupted`](crate::Error::Interrupted); as [`FairRwLock::read_timeout`]
    /// otherwise.
    pub fn read_interruptible(
        &self,
        deadline: Option<Instant>,
        mut stop: impl FnMut() -> bool,
    ) -> Result<RwLockReadGuard<'_>> {
        self.inner
            .acquire_weighted(deadline.map(deadline_at), true, Some(&mut stop))
            .map(RwLockReadGuard::new)
    }

    /// A write grant, as [`read_interruptible`](FairRwLock::read_interruptible).
    ///
    /// # Errors
    /// As [`FairRwLock::read_interruptible`].
    pub fn write_interruptible(
        &self,
        deadline: Option<Instant>,
        mut stop: impl FnMut() -> bool,
    ) -> Result<RwLockWriteGuard<'_>> {
        self.inner
            .acquire_weighted(deadline.map(deadline_at), false, Some(&mut stop))
            .map(RwLockWriteGuard::new)
    }
}
