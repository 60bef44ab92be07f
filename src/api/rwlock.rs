//! [`FairRwLock`]: readers together, writers alone, everybody in arrival order.

use std::path::Path;

use crate::api::kind_guard::{RwLockReadGuard, RwLockWriteGuard};
use crate::api::kind_options::RwLockOptions;
use crate::api::options::OpenOptions;
use crate::error::Result;
use crate::raw::acquire::Mode;
use crate::raw::handle::RawLock;
use crate::raw::owned_guard::arc_guard;
use crate::raw::surface::{acquire_surface, process_surface};

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
/// told of it still holds: the whole batch that reads what a dead writer left). Leases (see
/// [`OpenOptions::lease`]) work for readers and writers, each grant with its own, however many
/// a process holds.
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
pub struct FairRwLock {
    pub(crate) raw: RawLock,
}

impl std::fmt::Debug for FairRwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairRwLock")
            .field("path", &self.path())
            .field("lease_ms", &self.raw.lease_ms)
            .finish_non_exhaustive()
    }
}

impl FairRwLock {
    /// Opens the reader/writer lock file at `path`, creating it (mode `0600`) if needed.
    ///
    /// # Errors
    /// See [`OpenOptions::open_rwlock`].
    pub fn open(path: impl AsRef<Path>) -> Result<FairRwLock> {
        OpenOptions::default().open_rwlock(path)
    }

    /// A builder of this kind (its `open` opens a `FairRwLock`): lease, file mode, geometry and
    /// the other settings of [`OpenOptions`] that it takes.
    pub fn options() -> RwLockOptions {
        RwLockOptions::default()
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        self.raw.path()
    }

    acquire_surface! {
        what: "a read (shared) grant",
        mode: Mode::Shared,
        guard: RwLockReadGuard [RwLockReadGuard<'_>],
        arc: ArcRwLockReadGuard [ArcRwLockReadGuard],
        names: [
            read, try_read, read_timeout, read_until, read_interruptible,
            read_arc, try_read_arc, read_arc_timeout,
        ],
    }

    acquire_surface! {
        what: "a write (exclusive) grant",
        mode: Mode::Whole,
        guard: RwLockWriteGuard [RwLockWriteGuard<'_>],
        arc: ArcRwLockWriteGuard [ArcRwLockWriteGuard],
        names: [
            write, try_write, write_timeout, write_until, write_interruptible,
            write_arc, try_write_arc, write_arc_timeout,
        ],
    }

    process_surface! {
        what: "a read (shared) grant",
        mode: Mode::Shared,
        names: [
            read_process, try_read_process, read_process_timeout, read_process_interruptible,
            read_async, read_async_timeout,
        ],
    }

    process_surface! {
        what: "a write (exclusive) grant",
        mode: Mode::Whole,
        names: [
            write_process, try_write_process, write_process_timeout, write_process_interruptible,
            write_async, write_async_timeout,
        ],
    }
}

arc_guard!(
    /// A read grant of a [`FairRwLock`] kept in an [`Arc`](std::sync::Arc) (from [`FairRwLock::read_arc`]).
    ArcRwLockReadGuard [] [],
    handle: FairRwLock,
    guard: RwLockReadGuard<'static>,
    borrowed: RwLockReadGuard<'_>,
    deref: guard,
);

arc_guard!(
    /// A write grant of a [`FairRwLock`] kept in an [`Arc`](std::sync::Arc) (from [`FairRwLock::write_arc`]).
    ArcRwLockWriteGuard [] [],
    handle: FairRwLock,
    guard: RwLockWriteGuard<'static>,
    borrowed: RwLockWriteGuard<'_>,
    deref: guard,
);
