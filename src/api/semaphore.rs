//! [`FairSemaphore`]: at most N holders, granted in arrival order.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::FairLock;
use crate::api::kind_guard::SemaphorePermit;
use crate::api::lock::{deadline_after, deadline_at};
use crate::api::options::OpenOptions;
use crate::error::Result;

/// A strictly fair counting semaphore shared by threads and processes through a lock file: at
/// most `permits` holders at once, each acquisition granted in arrival order (one permit per
/// acquisition; nobody overtakes anybody).
///
/// A dead holder's permit comes back (the next grant learns it through `owner_died()`), leases
/// work as for [`FairLock`] (a process holds at most one *leased* permit of a file at a time;
/// unleased permits are not limited), and tokens strictly increase over grants. The number of permits is
/// fixed when the file is created: opening it with another number is refused with
/// [`Error::KindMismatch`](crate::Error::KindMismatch), which names both. One thread may hold
/// several permits.
///
/// ```
/// let path = std::env::temp_dir().join(format!("fairlock-semdoc-{}.lock", std::process::id()));
/// let gpus = fairlock::FairSemaphore::open(&path, 2)?;
/// let a = gpus.acquire()?;
/// let b = gpus.acquire()?;
/// assert!(gpus.try_acquire().is_err()); // both permits are held
/// drop(a);
/// let c = gpus.try_acquire()?;          // one came back
/// # drop((b, c));
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct FairSemaphore {
    inner: FairLock,
    permits: u32,
}

impl FairSemaphore {
    pub(crate) fn from_lock(inner: FairLock, permits: u32) -> FairSemaphore {
        FairSemaphore { inner, permits }
    }

    /// Opens the semaphore file at `path` with `permits` permits (1 to 2^19), creating it
    /// (mode `0600`) if needed.
    ///
    /// # Errors
    /// See [`OpenOptions::open_semaphore`].
    pub fn open(path: impl AsRef<Path>, permits: u32) -> Result<FairSemaphore> {
        OpenOptions::default().open_semaphore(path, permits)
    }

    /// A builder; finish with [`OpenOptions::open_semaphore`].
    pub fn options() -> OpenOptions {
        OpenOptions::default()
    }

    /// The semaphore file's path.
    pub fn path(&self) -> &Path {
        self.inner.path()
    }

    /// The number of permits.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Waits in line for a permit.
    ///
    /// # Errors
    /// [`Error::Corrupt`](crate::Error::Corrupt) if the shared state is damaged.
    pub fn acquire(&self) -> Result<SemaphorePermit<'_>> {
        self.inner
            .acquire_weighted(None, true, None)
            .map(SemaphorePermit::new)
    }

    /// A permit only if one is free and nobody is waiting (never jumps the queue).
    ///
    /// # Errors
    /// [`Error::WouldBlock`](crate::Error::WouldBlock); as [`FairSemaphore::acquire`]
    /// otherwise.
    pub fn try_acquire(&self) -> Result<SemaphorePermit<'_>> {
        self.inner
            .try_acquire_weighted(true)
            .map(SemaphorePermit::new)
    }

    /// Waits in line for a permit for at most `timeout`; a waiter that times out gives its
    /// ticket up.
    ///
    /// # Errors
    /// [`Error::Timeout`](crate::Error::Timeout); as [`FairSemaphore::acquire`] otherwise.
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<SemaphorePermit<'_>> {
        self.inner
            .acquire_weighted(Some(deadline_after(timeout)), true, None)
            .map(SemaphorePermit::new)
    }

    /// Waits in line for a permit until `deadline` at most.
    ///
    /// # Errors
    /// As [`FairSemaphore::acquire_timeout`].
    pub fn acquire_until(&self, deadline: Instant) -> Result<SemaphorePermit<'_>> {
        self.inner
            .acquire_weighted(Some(deadline_at(deadline)), true, None)
            .map(SemaphorePermit::new)
    }

    /// Waits for a permit until `deadline` (if any), giving the place up once `stop()` returns
    /// true (as [`FairLock::lock_interruptible`]).
    ///
    /// # Errors
    /// [`Error::Interrupted`](crate::Error::Interrupted); as
    /// [`FairSemaphore::acquire_timeout`] otherwise.
    pub fn acquire_interruptible(
        &self,
        deadline: Option<Instant>,
        mut stop: impl FnMut() -> bool,
    ) -> Result<SemaphorePermit<'_>> {
        self.inner
            .acquire_weighted(deadline.map(deadline_at), true, Some(&mut stop))
            .map(SemaphorePermit::new)
    }
}
