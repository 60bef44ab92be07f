//! [`ProcessGuard`]: a grant that belongs to the process, not to the thread that took it.

use std::sync::Arc;
use std::time::Duration;

use crate::api::guard::LockGuard;
use crate::error::Result;
use crate::process::view::Shared;
use crate::raw::handle::RawLock;
use crate::raw::owned_guard::extend_borrow;

/// A grant that belongs to the **process**, not to the thread that took it (from
/// [`FairLock::lock_process`](crate::FairLock::lock_process), the read and write sides of a
/// [`FairRwLock`](crate::FairRwLock), [`FairSemaphore::acquire_process`](crate::FairSemaphore::acquire_process),
/// and their `try_`, `_timeout` and `_interruptible` forms): the shape of `threading.Lock` and of an async task's lock, which may migrate
/// between threads.
///
/// * It is `Send` and `Sync`: any thread may release it, check it or extend its lease.
/// * A thread's exit leaves it held; the process's death gives it up (the next holder is
///   told [`owner_died`](ProcessGuard::owner_died)), as for every grant.
/// * A thread that holds the lock (either way) and asks for a process grant is not refused:
///   it waits in line behind its own grant, until another thread releases that one (a
///   `threading.Lock` used as a signal between threads works this way).
/// * It owns what it needs of its handle: it may outlive the handle.
/// * Leases, tokens and [`LockLost`](crate::Error::LockLost) are as for a [`LockGuard`]; a
///   process grant inherited through `fork` is the parent's ([`check`](Self::check) says
///   `LockLost`; dropping it releases nothing).
///
/// Dropping it releases the grant (dropped while its thread panics, it gives the grant up as
/// if its owner died, as a [`LockGuard`] does).
///
/// ```
/// let path = std::env::temp_dir().join(format!("fairlock-process-{}.lock", std::process::id()));
/// let lock = fairlock::FairLock::open(&path)?;
/// let grant = lock.lock_process()?;
/// // Released by another thread:
/// std::thread::spawn(move || grant.unlock()).join().unwrap()?;
/// assert!(lock.try_lock().is_ok());
/// # std::fs::remove_file(&path)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "the grant is given back as soon as the guard is dropped"]
pub struct ProcessGuard {
    // Declared before `view`: fields drop in order, so the grant is given back while the view
    // it borrows is alive.
    guard: LockGuard<'static>,
    view: Arc<Shared>,
}

// SAFETY: a `LockGuard` is `!Send`/`!Sync` only by its marker: its fields are a `&Shared`
// (`Shared` is `Sync`) and plain integers. What makes a guard its thread's is the per-thread
// record of its grant (`Hold`, `thread_leases`) and its thread id; a process grant has
// neither: `RawLock::acquire_for_process` records it nowhere and gives it thread id
// `PROCESS_TID`, which `LockGuard::in_hold` never takes for `Hold`'s grant, so its release or check on any thread
// finds no record of its ticket and touches only the shared state, through atomics, as any
// thread may. Its `&self` methods (token, check, extend) only
// read the guard's own fields and use the shared state's atomics.
unsafe impl Send for ProcessGuard {}
// SAFETY: as for `Send`.
unsafe impl Sync for ProcessGuard {}

impl ProcessGuard {
    /// The process grant `guard`, taken through `raw` by `acquire_for_process`.
    pub(crate) fn new(raw: &RawLock, guard: LockGuard<'_>) -> ProcessGuard {
        ProcessGuard::of_view(raw.view_arc(guard.shared()), guard)
    }

    /// The process grant `guard`, made in `view` (the view it borrows).
    pub(crate) fn of_view(view: Arc<Shared>, guard: LockGuard<'_>) -> ProcessGuard {
        assert!(
            std::ptr::eq(guard.shared(), Arc::as_ptr(&view)),
            "a process grant keeps the view it was made in"
        );
        // SAFETY: `guard` borrows only the `Shared` that `view` owns a reference to (checked
        // above); the `Shared` lives in the `Arc`'s allocation at a stable address for
        // as long as `view` does, and `view` is dropped after the guard (field order) or, in
        // `unlock`, after the guard is consumed. `'static` is never observable: the guard is
        // only reached through `&self` methods that return plain values, or consumed by
        // `unlock`.
        let guard = unsafe { extend_borrow::<LockGuard<'_>, LockGuard<'static>>(guard) };
        // Every process grant records the thread that took it and when, for `inspect` and
        // `fairlock status` (the thread's own uncontended path leaves this out to stay fast).
        guard.stamp_time();
        ProcessGuard { guard, view }
    }

    /// The result of a process acquire through `raw`.
    pub(crate) fn from_raw(raw: &RawLock, r: Result<LockGuard<'_>>) -> Result<ProcessGuard> {
        r.map(|g| ProcessGuard::new(raw, g))
    }

    /// The view of the lock file this grant was made in.
    pub(crate) fn view(&self) -> &Arc<Shared> {
        &self.view
    }

    /// The fencing token of this grant (see [`LockGuard::token`]).
    pub fn token(&self) -> u64 {
        self.guard.token()
    }

    /// True if the previous holder did not release (see [`LockGuard::owner_died`]).
    pub fn owner_died(&self) -> bool {
        self.guard.owner_died()
    }

    /// `Ok` while the grant is ours.
    ///
    /// # Errors
    /// [`Error::LockLost`](crate::Error::LockLost) if it was taken over (lease expired), or if
    /// this guard was inherited through `fork`.
    pub fn check(&self) -> Result<()> {
        self.guard.check()
    }

    /// Renews the lease: it now ends `d` from now (see [`LockGuard::extend`]).
    ///
    /// # Errors
    /// As [`LockGuard::extend`].
    pub fn extend(&self, d: Duration) -> Result<()> {
        self.guard.extend(d)
    }

    /// The lease this grant was made with, if any.
    pub fn lease(&self) -> Option<Duration> {
        self.guard.lease()
    }

    /// A new descriptor (close-on-exec) of the open file description whose OFD locks tell the
    /// other users of the lock file that this process lives (its beacon). A child that
    /// inherits it — clear `FD_CLOEXEC` in the child before `exec` — keeps this process's
    /// grants of the file alive after this process dies, until the child, and every process
    /// it passed the descriptor on to, has closed it or ended; the next holder is then told
    /// [`owner_died`](Self::owner_died) (unless a living copy of this guard released first).
    /// This is how `fairlock run` gives its command the lock, as flock(1)'s child inherits
    /// it: a wrapper killed while its command runs does not free the lock under the command.
    /// It covers every grant this process holds in the file (they share its beacon), and
    /// only process grants (a thread's grant also ends with its thread).
    ///
    /// # Errors
    /// [`Error::Io`](crate::Error::Io) if the descriptor cannot be duplicated.
    pub fn share_liveness(&self) -> Result<std::os::fd::OwnedFd> {
        use std::os::fd::AsFd;
        self.view
            .beacon_fd()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| crate::Error::io(&self.view.path, "duplicate the beacon descriptor", e))
    }

    /// Gives back a grant nobody used, passing on the news of a dead owner it carries (see
    /// `LockGuard::give_back_unused`).
    pub(crate) fn give_back_unused(self) {
        let ProcessGuard { guard, view } = self;
        guard.give_back_unused();
        drop(view);
    }

    /// Releases the grant and reports whether it was still ours.
    ///
    /// # Errors
    /// [`Error::LockLost`](crate::Error::LockLost) if it had been taken over.
    pub fn unlock(self) -> Result<()> {
        let ProcessGuard { guard, view } = self;
        let r = guard.unlock();
        drop(view);
        r
    }
}

impl std::fmt::Debug for ProcessGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessGuard")
            .field("path", &self.view.path)
            .field("token", &self.token())
            .field("owner_died", &self.owner_died())
            .finish()
    }
}
