//! [`FairMutex<T>`]: a fair lock with a value of type `T` in the lock file, next to the lock
//! state — std's `Mutex<T>`, shared by processes.

use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::path::Path;
use std::ptr::NonNull;

use bytemuck::Pod;

use crate::api::guard::LockGuard;
use crate::api::kind_options::MutexOptions;
use crate::api::options::OpenOptions;
use crate::core::state::DataShape;
use crate::error::{Error, Result};
use crate::raw::acquire::Mode;
use crate::raw::handle::RawLock;
use crate::raw::owned_guard::arc_guard;
use crate::raw::surface::acquire_surface;

/// A strictly fair, crash-robust lock that guards a value of type `T` kept **in the lock
/// file**: every thread and process that opens the path sees (under the lock) the same
/// value, and the value outlives the processes — it survives reopening, a crash of its writer
/// and a reboot (only the lock state is reset after a reboot; the value is the file's).
///
/// `T` is plain old data that accepts any bit pattern ([`bytemuck::Pod`], re-exported as
/// [`fairlock::bytemuck`](crate::bytemuck)): another process may have written any bytes there,
/// and a writer killed half-way leaves a half-written value. A new file starts with
/// `T::zeroed()`. Deriving `Pod` takes the one dependency `bytemuck = { version = "1",
/// features = ["derive"] }` in your `Cargo.toml` (`#[derive(Clone, Copy, Pod, Zeroable)]` on a
/// `#[repr(C)]` struct without padding).
///
/// **What identifies the data: its layout, and a schema you may name.** The processes that
/// share a file are usually different programs, each with its own copy of the struct; the file
/// records `T`'s size and alignment, and a schema tag ([`MutexOptions::schema`], none by
/// default), and a `FairMutex` whose `T` differs in any of the three is refused with
/// [`Error::DataMismatch`] before anything is written. Two programs that declare the same
/// `#[repr(C)]` struct share the file, whatever the type is called or which crate declares it.
/// **Evolving the struct**: a change of size or alignment is refused by the programs built
/// with the old one (and the reverse): start a new file, or migrate (read the old file with
/// the old type, write a new file). A change of meaning that keeps the size — a field renamed,
/// reinterpreted, or reordered — is not seen by the layout: name a schema and change it with
/// the meaning (`.schema("stats/2")`), or keep a version field in the struct.
///
/// Fairness, crash recovery and fencing tokens are [`FairLock`](crate::FairLock)'s. When a holder dies or
/// panics while holding, the next holder's guard reports [`owner_died`](MutexGuard::owner_died):
/// the value may be half-updated, repair it (there is no poisoning that refuses access).
///
/// **Who creates the file decides what it holds.** A new (or half-initialised) file gets the
/// shape of whoever initialises it first: if a [`FairLock`](crate::FairLock), a [`FairRLock`](crate::FairRLock)
/// or `fairlock run` gets there before the `FairMutex<T>`, the file has no data area, and
/// every `FairMutex::open` of it fails with [`Error::DataMismatch`] until it is deleted. Create
/// a `FairMutex` file with `FairMutex::open` before anything else uses the path (the other
/// kinds then use it fine).
///
/// **A leaked guard keeps the lock.** A plain lock's grant is given up when its thread exits
/// still holding it; a `FairMutex` grant is not, because a leaked guard (`mem::forget`,
/// `Box::leak`) or one kept in a thread-local may still reach the value. As with std's
/// `Mutex`, such a lock stays held until the guard is dropped — or its process dies.
///
/// **No leases.** A `FairMutex` cannot be opened with [`OpenOptions::lease`]: a holder whose
/// lease ran out would still hold `&mut T` while the next holder writes the same bytes, and
/// nothing can take a reference back. A holder is therefore only ever taken over when it is
/// dead. Use a [`FairLock`](crate::FairLock) with a lease and fencing tokens to guard data that lives elsewhere
/// if holders may stall.
///
/// ```
/// let path = std::env::temp_dir().join(format!("fairlock-mutex-{}.lock", std::process::id()));
/// let counter = fairlock::FairMutex::<u64>::open(&path)?;
/// {
///     let mut n = counter.lock()?;   // waits its turn, FIFO across processes
///     *n += 1;
/// }
/// assert_eq!(*counter.lock()?, 1);
/// // Opening the same file as another type is refused:
/// assert!(matches!(
///     fairlock::FairMutex::<[u8; 3]>::open(&path),
///     Err(fairlock::Error::DataMismatch { .. })
/// ));
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct FairMutex<T: Pod> {
    raw: RawLock,
    _data: PhantomData<T>,
}

impl<T: Pod> std::fmt::Debug for FairMutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairMutex")
            .field("path", &self.raw.path())
            .field("type", &std::any::type_name::<T>())
            .finish_non_exhaustive()
    }
}

/// What the data area of a file for `T` under schema `schema` looks like ("" when none is
/// named: then only the layout identifies the data).
pub(crate) fn shape_of<T: Pod>(schema: &str) -> DataShape {
    DataShape {
        size: std::mem::size_of::<T>() as u64,
        align: std::mem::align_of::<T>() as u32,
        tag: DataShape::tag_of(schema),
    }
}

impl<T: Pod> FairMutex<T> {
    /// Opens the lock file at `path` for a value of type `T`, creating it (mode `0600`, value
    /// `T::zeroed()`) if needed.
    ///
    /// # Errors
    /// See [`OpenOptions::open_mutex`].
    pub fn open(path: impl AsRef<Path>) -> Result<FairMutex<T>> {
        OpenOptions::default().open_mutex(path)
    }

    /// A builder of this kind (its `open` opens a `FairMutex<T>`): file mode, geometry and the
    /// other settings of [`OpenOptions`] that it takes (no lease).
    pub fn options() -> MutexOptions<T> {
        MutexOptions::default()
    }

    pub(crate) fn with_options(path: &Path, o: &OpenOptions, schema: &str) -> Result<FairMutex<T>> {
        if o.lease_option().is_some() {
            return Err(Error::InvalidOption {
                what: format!(
                    "{}: a FairMutex takes no lease (a holder taken over would still hold &mut {}); use a FairLock with a lease and fencing tokens for data kept elsewhere",
                    path.display(),
                    std::any::type_name::<T>()
                ),
            });
        }
        let want = shape_of::<T>(schema);
        if !want.is_valid() {
            return Err(Error::InvalidOption {
                what: format!(
                    "{}: FairMutex<{}>: {} bytes with alignment {}; at most 1 GiB with alignment at most 4096",
                    path.display(),
                    std::any::type_name::<T>(),
                    want.size,
                    want.align
                ),
            });
        }
        // The file layer refuses a file of another shape before writing anything.
        let lock = o.with_data(want, std::any::type_name::<T>()).open(path)?;
        Ok(FairMutex {
            raw: lock.raw,
            _data: PhantomData,
        })
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        self.raw.path()
    }

    acquire_surface! {
        what: "the lock, then gives access to the value",
        mode: Mode::Exclusive,
        guard: MutexGuard [MutexGuard<'_, T>],
        arc: ArcMutexGuard [ArcMutexGuard<T>],
        names: [
            lock, try_lock, lock_timeout, lock_until, lock_interruptible,
            lock_arc, try_lock_arc, lock_arc_timeout,
        ],
    }

    /// Waits in line for the lock without blocking the calling thread, then gives access to
    /// the value: a future (for any async runtime) that resolves to an [`OwnedMutexGuard`](crate::OwnedMutexGuard),
    /// which is `Send`, so the task may move between threads while it holds it. As
    /// [`FairLock::lock_async`](crate::FairLock::lock_async): the place in line is taken at
    /// the first poll, and dropping the future gives it up at once.
    ///
    /// # Errors
    /// (From the future.) As [`lock`](Self::lock); [`Error::Io`] if no waiter thread could be
    /// started.
    pub fn lock_async(&self) -> crate::MutexFuture<T> {
        crate::MutexFuture::new(self.raw.acquire_async(Mode::Exclusive, None))
    }

    /// Like [`lock_async`](Self::lock_async), giving the place up after `timeout`.
    ///
    /// # Errors
    /// (From the future.) [`Error::Timeout`] after `timeout`; as
    /// [`lock_async`](Self::lock_async) otherwise.
    pub fn lock_async_timeout(&self, timeout: std::time::Duration) -> crate::MutexFuture<T> {
        let deadline = crate::raw::acquire::deadline_after(timeout);
        crate::MutexFuture::new(self.raw.acquire_async(Mode::Exclusive, Some(deadline)))
    }
}

/// Whether the file a view maps holds `T` (its data area's size and alignment), checked on
/// every grant: after a fork the path may name another file.
pub(crate) fn holds<T: Pod>(sh: &crate::process::view::Shared) -> Result<()> {
    let found = sh.geometry().data;
    if found.size != std::mem::size_of::<T>() as u64
        || found.align != std::mem::align_of::<T>() as u32
    {
        // After a fork the child reopened the path and found another file there (or, in
        // any process, a view shared by device and inode whose file was re-initialised by
        // a plain opener after its creator died initialising it).
        return Err(Error::DataMismatch {
            path: sh.path.clone(),
            wanted: std::any::type_name::<T>(),
            what: "the lock file this handle now uses does not hold this data".into(),
        });
    }
    Ok(())
}

/// Proof of holding a [`FairMutex<T>`]: dereferences to the value in the file
/// (`*guard += 1`). Dropping it releases the lock; dropping it while panicking gives the lock
/// up as if its owner died, so the next holder sees [`owner_died`](MutexGuard::owner_died)
/// and knows the value may be half-updated.
///
/// Not `Send`: the lock belongs to the thread that acquired it. A guard inherited through
/// `fork` is the parent's: dereferencing it in the child panics (the parent may be writing the
/// same bytes), and [`check`](MutexGuard::check) returns [`Error::LockLost`].
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct MutexGuard<'a, T: Pod> {
    guard: LockGuard<'a>,
    data: NonNull<T>,
    _data: PhantomData<&'a mut T>,
}

impl<'a, T: Pod> MutexGuard<'a, T> {
    /// The guard of a raw grant of this mutex's lock (see `crate::raw::surface`).
    #[inline]
    pub(crate) fn from_raw(r: Result<LockGuard<'a>>) -> Result<MutexGuard<'a, T>> {
        MutexGuard::new(r?)
    }

    #[inline]
    fn new(guard: LockGuard<'a>) -> Result<MutexGuard<'a, T>> {
        let sh = guard.shared();
        // The layout (what memory safety needs; the schema was checked when the file was
        // opened, and is again whenever the path is reopened after a fork).
        if let Err(e) = holds::<T>(sh) {
            drop(guard);
            return Err(e);
        }
        let data = match sh.data() {
            Some(p) => p.cast::<T>(),
            None => NonNull::dangling(), // a zero-sized `T`
        };
        Ok(MutexGuard {
            guard,
            data,
            _data: PhantomData,
        })
    }

    /// The fencing token of this grant (see [`LockGuard::token`]).
    pub fn token(&self) -> u64 {
        self.guard.token()
    }

    /// How many barges overtook this grant's waiter (see [`LockGuard::overtaken`]).
    pub fn overtaken(&self) -> u32 {
        self.guard.overtaken()
    }

    /// True if the previous holder did not release the lock: it died or panicked while
    /// holding, so the value may be half-updated (see [`LockGuard::owner_died`]; a
    /// `FairMutex` has no leases, so here it always means a death).
    pub fn owner_died(&self) -> bool {
        self.guard.owner_died()
    }

    /// `Ok` while the lock is still ours.
    ///
    /// # Errors
    /// [`Error::LockLost`] if this guard was inherited through `fork`, or the grant was
    /// revoked.
    pub fn check(&self) -> Result<()> {
        self.guard.check()
    }

    /// Releases the lock and reports whether it was still ours.
    ///
    /// # Errors
    /// [`Error::LockLost`] as for [`MutexGuard::check`].
    pub fn unlock(self) -> Result<()> {
        self.guard.unlock()
    }

    /// The value's address, after checking this process owns the grant.
    #[inline]
    fn ptr(&self) -> NonNull<T> {
        assert!(
            self.guard.shared().is_same_process(),
            "{}: a FairMutex guard inherited through fork gives no access to the value: the lock is the parent's",
            self.guard.shared().path.display()
        );
        self.data
    }
}

impl<T: Pod> Deref for MutexGuard<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: `data` points to the file's data area, inside the mapping that the guard's
        // view keeps alive for `'a`, aligned for `T` and `size_of::<T>()` long (the file's
        // data shape was checked equal to `T`'s in `new`), or is dangling for a zero-sized
        // `T`. Any bytes are a valid `T` (`Pod`). No one else accesses it while we hold the
        // lock: every `FairMutex` user touches the value only through a guard, a holder is
        // taken over only when dead (no leases), and a forked child's inherited guard is
        // refused by `ptr`.
        unsafe { self.ptr().as_ref() }
    }
}

impl<T: Pod> DerefMut for MutexGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference made through
        // this guard, and the lock makes the guard the only one.
        unsafe { self.ptr().as_mut() }
    }
}

impl<T: Pod + std::fmt::Debug> std::fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MutexGuard")
            .field("value", &**self)
            .field("token", &self.token())
            .field("owner_died", &self.owner_died())
            .finish()
    }
}

arc_guard!(
    /// Proof of holding a [`FairMutex<T>`] kept in an [`Arc`](std::sync::Arc) (from
    /// [`FairMutex::lock_arc`]): it dereferences to the value (`*guard += 1`), and
    /// [`guard`](ArcMutexGuard::guard) gives the [`MutexGuard`] (its token, whether the owner
    /// died). Not `Send`, as the `MutexGuard`.
    ArcMutexGuard [T: Pod] [T],
    handle: FairMutex<T>,
    guard: MutexGuard<'static, T>,
    borrowed: MutexGuard<'_, T>,
    deref: value(T),
);
