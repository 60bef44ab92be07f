//! [`FairSemaphore`]: at most N holders, granted in arrival order.

use std::path::Path;

use crate::api::kind_guard::SemaphorePermit;
use crate::api::kind_options::SemaphoreOptions;
use crate::api::options::OpenOptions;
use crate::error::Result;
use crate::raw::acquire::Mode;
use crate::raw::handle::RawLock;
use crate::raw::owned_guard::arc_guard;
use crate::raw::surface::{acquire_surface, process_surface};

/// A strictly fair counting semaphore shared by threads and processes through a lock file: at
/// most `permits` holders at once, each acquisition granted in arrival order (one permit per
/// acquisition; nobody overtakes anybody).
///
/// A dead holder's permit comes back (the next grant learns it through `owner_died()`), leases
/// work as for [`FairLock`](crate::FairLock) (each permit has its own, however many a process
/// holds), and tokens strictly increase over grants. The number of permits is fixed when the
/// file is created: opening it with another number is refused with
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
pub struct FairSemaphore {
    pub(crate) raw: RawLock,
    permits: u32,
}

impl std::fmt::Debug for FairSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairSemaphore")
            .field("path", &self.path())
            .field("permits", &self.permits)
            .field("lease_ms", &self.raw.lease_ms)
            .finish_non_exhaustive()
    }
}

impl FairSemaphore {
    pub(crate) fn from_raw(raw: RawLock, permits: u32) -> FairSemaphore {
        FairSemaphore { raw, permits }
    }

    /// Opens the semaphore file at `path` with `permits` permits (1 to 2^19), creating it
    /// (mode `0600`) if needed.
    ///
    /// # Errors
    /// See [`OpenOptions::open_semaphore`].
    pub fn open(path: impl AsRef<Path>, permits: u32) -> Result<FairSemaphore> {
        OpenOptions::default().open_semaphore(path, permits)
    }

    /// A builder of this kind (its `open` opens a `FairSemaphore`): lease, file mode, geometry and
    /// the other settings of [`OpenOptions`] that it takes.
    pub fn options() -> SemaphoreOptions {
        SemaphoreOptions::default()
    }

    /// The semaphore file's path.
    pub fn path(&self) -> &Path {
        self.raw.path()
    }

    /// The number of permits.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    acquire_surface! {
        what: "a permit",
        mode: Mode::Shared,
        guard: SemaphorePermit [SemaphorePermit<'_>],
        arc: ArcSemaphorePermit [ArcSemaphorePermit],
        names: [
            acquire, try_acquire, acquire_timeout, acquire_until, acquire_interruptible,
            acquire_arc, try_acquire_arc, acquire_arc_timeout,
        ],
    }

    process_surface! {
        what: "a permit",
        mode: Mode::Shared,
        names: [
            acquire_process, try_acquire_process, acquire_process_timeout,
            acquire_process_interruptible, acquire_async, acquire_async_timeout,
        ],
    }
}

arc_guard!(
    /// A permit of a [`FairSemaphore`] kept in an [`Arc`](std::sync::Arc) (from
    /// [`FairSemaphore::acquire_arc`]); `Send`, as the [`SemaphorePermit`].
    ArcSemaphorePermit [] [],
    handle: FairSemaphore,
    guard: SemaphorePermit<'static>,
    borrowed: SemaphorePermit<'_>,
    deref: guard,
);
