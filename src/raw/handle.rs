//! [`RawLock`]: what every handle of every kind is over — this process's view of the lock file
//! (replaced after a `fork`), the handle's lease and tuning, and how its grants are recorded.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, Ordering::Acquire, Ordering::Release};
use std::sync::{Arc, Mutex};

use crate::core::Tuning;
use crate::error::{Error, Result};
use crate::file::CreateOptions;
use crate::process::view::{KEPT_ON_EXIT, Shared};
use crate::sys::thread::ForkGuard;

/// A handle's state, whatever its kind: the public handles ([`crate::FairLock`],
/// [`crate::FairRLock`], [`crate::FairMutex`], [`crate::FairRwLock`],
/// [`crate::FairSemaphore`]) are each one of these and the acquire surface
/// (`crate::raw::surface`) over it.
pub(crate) struct RawLock {
    /// The view of the current process: one of `views`, replaced after a `fork`.
    current: AtomicPtr<Shared>,
    /// Every view this handle has used; keeps `current` alive.
    views: Mutex<Vec<Arc<Shared>>>,
    pub(crate) lease_ms: Option<u64>,
    pub(crate) tuning: Tuning,
    create: CreateOptions,
    /// The name, for a named lock (a forked child opens it again).
    name: Option<Arc<str>>,
    /// [`KEPT_ON_EXIT`] for a `FairMutex`'s lock (its thread's exit never gives a grant up),
    /// else 0.
    pub(crate) kept_on_exit: u64,
    /// Whether its grants publish their thread's beacon (`sys::beacon`), so that waiters learn
    /// of the holder's death from the kernel: only grants that end with their thread — not a
    /// `FairMutex`'s (kept on exit), not the fd form's (held for a descriptor).
    pub(crate) beacon_hints: bool,
    /// Whether a leased grant is its thread's (recorded in `thread_leases`): not the fd form's,
    /// held for a descriptor, its guard forgotten by design.
    pub(crate) per_thread: bool,
}

// SAFETY: all fields are Send + Sync except the raw pointer `current`, which always points into
// an `Arc<Shared>` held by `views` (and `Shared` is Send + Sync), and is only dereferenced as
// `&Shared` while `views` keeps the pointee alive.
unsafe impl Send for RawLock {}
// SAFETY: as for `Send`: shared access only ever produces `&Shared`, which is Sync.
unsafe impl Sync for RawLock {}

impl std::fmt::Debug for RawLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawLock")
            .field("path", &self.path())
            .field("lease_ms", &self.lease_ms)
            .finish_non_exhaustive()
    }
}

/// This process's view of the lock at `path` (named `name` in a file of named locks), of the
/// kind `create` asks for. Also when a forked child opens it again: a name may have been freed
/// and created again as another kind meanwhile.
fn open_view(path: &Path, create: &CreateOptions, name: Option<&str>) -> Result<Arc<Shared>> {
    let shared = match name {
        Some(key) => crate::names::open::open_named(path, create, key)?,
        None => Shared::open(path, create)?,
    };
    // A view this process already had open was not checked against what we ask for.
    let (found, wanted) = (shared.geometry().kind, create.kind);
    if found != wanted {
        let named = |k: crate::core::state::RecordKind| match name {
            Some(n) => format!("{} named {n:?}", k.describe()),
            None => k.describe(),
        };
        return Err(Error::KindMismatch {
            path: shared.path.clone(),
            found: named(found),
            wanted: named(wanted),
        });
    }
    Ok(shared)
}

/// What a handle asks of its grants, whatever opened it: the lease (ms) and the tuning of
/// its waits.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Asks {
    /// The lease each grant asks for, in ms; `None` to hold until released.
    pub(crate) lease_ms: Option<u64>,
    /// Spinning, graces and polling of the waits.
    pub(crate) tuning: Tuning,
}

impl RawLock {
    /// Opens the lock at `path` (named `name` in a file of named locks) as `create` says.
    pub(crate) fn open(
        path: &Path,
        create: CreateOptions,
        name: Option<Arc<str>>,
        asks: Asks,
    ) -> Result<RawLock> {
        let shared = open_view(path, &create, name.as_deref())?;
        Ok(RawLock::with_view(shared, asks, create, name))
    }

    /// A handle over `shared` (a view opened for it), asking `asks` of its grants.
    pub(crate) fn with_view(
        shared: Arc<Shared>,
        asks: Asks,
        create: CreateOptions,
        name: Option<Arc<str>>,
    ) -> RawLock {
        let current = AtomicPtr::new(Arc::as_ptr(&shared).cast_mut());
        RawLock {
            current,
            views: Mutex::new(vec![shared]),
            lease_ms: asks.lease_ms,
            tuning: asks.tuning,
            create,
            kept_on_exit: if create.data_type.is_empty() {
                0
            } else {
                KEPT_ON_EXIT
            },
            beacon_hints: create.data_type.is_empty(),
            per_thread: true,
            name,
        }
    }

    /// The lock file's path.
    pub(crate) fn path(&self) -> &Path {
        // SAFETY: `current` points into an Arc kept alive by `views` for as long as `self`.
        let sh = unsafe { &*self.current.load(Acquire) };
        &sh.path
    }

    /// This process's view of the file; after a `fork`, the child opens its own (new
    /// participant, new beacon) so it never acts under its parent's identity.
    #[inline]
    pub(crate) fn shared(&self) -> Result<&Shared> {
        // Acquire: pairs with the Release store below, so the new view is fully built.
        let p = self.current.load(Acquire);
        // SAFETY: `p` points into an Arc kept alive by `views` for as long as `self`.
        let sh = unsafe { &*p };
        if sh.is_current() {
            return Ok(sh);
        }
        self.reopen_after_fork()
    }

    /// After a `fork`: this process's own view (opened now if no thread of ours did yet).
    /// `views` is locked only under the fork lock, and never across the open (which may wait).
    #[cold]
    fn reopen_after_fork(&self) -> Result<&Shared> {
        // Not a fork: a truncation broke the mapping (`sys::sigbus`). Every call of this handle
        // fails from now on; opening the path again makes a new handle on whatever is there.
        // SAFETY: `current` points into an Arc kept alive by `views` for as long as `self`.
        let sh = unsafe { &*self.current.load(Acquire) };
        if sh.is_broken() {
            return Err(truncated(&sh.path));
        }
        let path = match self.current_view() {
            Ok(sh) => return Ok(sh),
            Err(path) => path,
        };
        let fresh = open_view(&path, &self.create, self.name.as_deref())?;
        let _fork = ForkGuard::lock();
        let mut views = self.views.lock().unwrap_or_else(|e| e.into_inner());
        // `Shared::open` joins a view another thread of ours opened meanwhile, so `fresh` is
        // that one or new; either way it is pushed (a duplicate Arc is harmless) and kept.
        let p = Arc::as_ptr(&fresh).cast_mut();
        views.push(fresh);
        self.current.store(p, Release);
        // SAFETY: the Arc was just pushed into `views`, which lives as long as `self`.
        Ok(unsafe { &*p })
    }

    /// The view `sh` (one of this handle's, from [`RawLock::shared`]) as an `Arc`, for a grant
    /// that outlives the borrow of the handle (a [`ProcessGuard`](crate::ProcessGuard)).
    pub(crate) fn view_arc(&self, sh: &Shared) -> Arc<Shared> {
        let _fork = ForkGuard::lock();
        let views = self.views.lock().unwrap_or_else(|e| e.into_inner());
        let v = views
            .iter()
            .find(|v| std::ptr::eq(Arc::as_ptr(v), sh))
            .expect("every view a handle hands out is in its list of views");
        Arc::clone(v)
    }

    /// Our current view if `views` has one (then made `current`), else the path to reopen.
    fn current_view(&self) -> std::result::Result<&Shared, PathBuf> {
        let _fork = ForkGuard::lock();
        let views = self.views.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = views.iter().find(|v| v.is_current()) {
            let p = Arc::as_ptr(v).cast_mut();
            self.current.store(p, Release);
            // SAFETY: the Arc stays in `views` for as long as `self`.
            return Ok(unsafe { &*p });
        }
        Err(views.last().map(|v| v.path.clone()).unwrap_or_default())
    }
}

/// The error of every call through a view whose mapping a truncation broke.
pub(crate) fn truncated(path: &Path) -> Error {
    Error::corrupt(
        path,
        "the file was truncated (by another process) while this one had it mapped: the lock's \
         state is gone and every grant in it is lost; open the path again for a new lock",
    )
}
