//! [`FairLock`]: the strictly FIFO, cross-process lock.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicPtr, Ordering::Acquire, Ordering::Relaxed, Ordering::Release};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::api::arc_guard::ArcLockGuard;
use crate::api::guard::LockGuard;
use crate::api::options::OpenOptions;
use crate::core::{self, Grant, Me, Tuning, WaitError};
use crate::error::{Error, Result};
use crate::file::CreateOptions;
use crate::process::thread_leases;
use crate::process::view::POISONED;
use crate::process::view::{ExitWatch, Hold, KEPT_ON_EXIT, Shared};
use crate::sys::thread::ForkGuard;
use crate::sys::{clock, thread};

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
    /// The view of the current process: one of `views`, replaced after a `fork`.
    current: AtomicPtr<Shared>,
    /// Every view this handle has used; keeps `current` alive.
    views: Mutex<Vec<Arc<Shared>>>,
    lease_ms: Option<u64>,
    tuning: Tuning,
    create: CreateOptions,
    /// The name, for a named lock (a forked child opens it again).
    name: Option<Arc<str>>,
    /// [`KEPT_ON_EXIT`] for a `FairMutex`'s lock (its thread's exit never gives a grant up),
    /// else 0.
    kept_on_exit: u64,
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
unsafe impl Send for FairLock {}
// SAFETY: as for `Send`: shared access only ever produces `&Shared`, which is Sync.
unsafe impl Sync for FairLock {}

impl std::fmt::Debug for FairLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairLock")
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

    pub(crate) fn with_options(path: &Path, o: &OpenOptions) -> Result<FairLock> {
        let create = o.create_options();
        let name = o.name_key().cloned();
        let shared = open_view(path, &create, name.as_deref())?;
        Ok(FairLock::with_view(shared, o, create, name))
    }

    /// A handle over `shared` (a view opened for it), with `o`'s lease and tuning.
    pub(crate) fn with_view(
        shared: Arc<Shared>,
        o: &OpenOptions,
        create: CreateOptions,
        name: Option<Arc<str>>,
    ) -> FairLock {
        let current = AtomicPtr::new(Arc::as_ptr(&shared).cast_mut());
        FairLock {
            current,
            views: Mutex::new(vec![shared]),
            lease_ms: o.lease_ms(),
            tuning: o.tuning(),
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
    pub fn path(&self) -> &Path {
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

    /// Waits in line for the lock.
    ///
    /// # Errors
    /// [`Error::WouldDeadlock`] if this thread already holds it, [`Error::Corrupt`] if the
    /// shared state is damaged.
    #[inline]
    pub fn lock(&self) -> Result<LockGuard<'_>> {
        self.acquire(None, false, None)
    }

    /// Takes the lock only if it is free *and nobody is waiting*: it never jumps the queue.
    ///
    /// # Errors
    /// [`Error::WouldBlock`] if it is held or has waiters; as [`FairLock::lock`] otherwise.
    pub fn try_lock(&self) -> Result<LockGuard<'_>> {
        self.try_acquire(false)
    }

    /// Waits in line for at most `timeout`. A waiter that times out gives up its ticket, so
    /// nobody behind it waits for it; if the grant races the timeout, the grant wins.
    /// `Duration::ZERO` takes the lock only if it is granted at once (like
    /// [`try_lock`](FairLock::try_lock), after one recovery pass).
    ///
    /// # Errors
    /// [`Error::Timeout`]; otherwise as [`FairLock::lock`].
    pub fn lock_timeout(&self, timeout: Duration) -> Result<LockGuard<'_>> {
        self.acquire(Some(deadline_after(timeout)), false, None)
    }

    /// Waits in line until `deadline` at most (a deadline in the past gives up after one
    /// recovery pass, as `lock_timeout(Duration::ZERO)`); otherwise as
    /// [`lock_timeout`](FairLock::lock_timeout).
    ///
    /// # Errors
    /// [`Error::Timeout`]; otherwise as [`FairLock::lock`].
    pub fn lock_until(&self, deadline: Instant) -> Result<LockGuard<'_>> {
        self.acquire(Some(deadline_at(deadline)), false, None)
    }

    /// Waits in line like [`lock_until`](FairLock::lock_until) (or [`lock`](FairLock::lock)
    /// with no deadline), and also gives its place up as soon as `stop()` returns true: for a
    /// caller that must stay responsive while it waits (a signal to honour, a shutdown flag, a
    /// language runtime's `KeyboardInterrupt`). `stop` is called by the waiting thread after
    /// every wake-up — a signal delivered to it interrupts the sleep at once — and at least
    /// every 50 ms; not on the uncontended path, which never waits. A grant that races the
    /// interruption wins: the guard is returned, and the caller may release it.
    ///
    /// # Errors
    /// [`Error::Interrupted`] once `stop()` said so; [`Error::Timeout`] at the deadline;
    /// otherwise as [`FairLock::lock`].
    pub fn lock_interruptible(
        &self,
        deadline: Option<Instant>,
        mut stop: impl FnMut() -> bool,
    ) -> Result<LockGuard<'_>> {
        self.acquire(deadline.map(deadline_at), false, Some(&mut stop))
    }

    /// Like [`lock`](FairLock::lock), for a lock in an [`Arc`]: the guard owns a clone of the
    /// `Arc` instead of borrowing the lock, so it can be stored in a struct or returned from
    /// a function (as `parking_lot`'s `lock_arc`). Still not `Send`.
    ///
    /// # Errors
    /// As [`FairLock::lock`].
    pub fn lock_arc(self: &Arc<Self>) -> Result<ArcLockGuard> {
        let guard = self.lock()?;
        Ok(ArcLockGuard::new(Arc::clone(self), guard))
    }

    /// Like [`try_lock`](FairLock::try_lock), with an owned guard as
    /// [`lock_arc`](FairLock::lock_arc).
    ///
    /// # Errors
    /// As [`FairLock::try_lock`].
    pub fn try_lock_arc(self: &Arc<Self>) -> Result<ArcLockGuard> {
        let guard = self.try_lock()?;
        Ok(ArcLockGuard::new(Arc::clone(self), guard))
    }

    /// Like [`lock_timeout`](FairLock::lock_timeout), with an owned guard as
    /// [`lock_arc`](FairLock::lock_arc).
    ///
    /// # Errors
    /// As [`FairLock::lock_timeout`].
    pub fn lock_arc_timeout(self: &Arc<Self>, timeout: Duration) -> Result<ArcLockGuard> {
        let guard = self.lock_timeout(timeout)?;
        Ok(ArcLockGuard::new(Arc::clone(self), guard))
    }

    pub(crate) fn try_acquire(&self, reentrant: bool) -> Result<LockGuard<'_>> {
        let sh = self.shared()?;
        let tid = thread::current_tid();
        if sh.holder_tid() == tid {
            return self.reenter(sh, reentrant);
        }
        if let Some((ticket, meta, depth)) = thread_leases::held(sh) {
            return self.reenter_leased(sh, tid, reentrant, ticket, meta, depth);
        }
        ExitWatch::arm();
        let me = self.me(sh, tid);
        let r = core::try_lock(&sh.state(), &sh.platform(), &me, &self.tuning);
        match r.map_err(|e| wait_error(sh, e))? {
            Some(g) => Ok(self.held(sh, tid, g)),
            None => Err(Error::WouldBlock {
                path: sh.path.clone(),
            }),
        }
    }

    #[cold]
    fn reenter<'a>(&'a self, sh: &'a Shared, reentrant: bool) -> Result<LockGuard<'a>> {
        if !reentrant {
            return Err(Error::WouldDeadlock {
                path: sh.path.clone(),
            });
        }
        // Relaxed: only the holding thread (us) reads or writes these. Bounded, so that the
        // count can never reach the poison bit or wrap (a guard forgotten in a loop would
        // otherwise make the outer grant look like its last level).
        let depth = sh.hold.depth.load(Relaxed);
        if depth & !POISONED >= MAX_DEPTH {
            return Err(Error::TooDeep {
                path: sh.path.clone(),
                levels: MAX_DEPTH,
            });
        }
        sh.hold.depth.store(depth + 1, Relaxed);
        // The grant's lease, which the handle that took it chose (maybe not this one).
        let (grant, lease_ms) = Hold::grant_of(
            sh.hold.grant_meta.load(Relaxed),
            sh.hold.ticket.load(Relaxed),
        );
        Ok(LockGuard::new(sh, grant, thread::current_tid(), lease_ms))
    }

    /// A lock by a thread that holds a leased grant of this file ([`thread_leases`]): nests on
    /// it (as [`FairLock::reenter`]) if it is still the thread's own — `LockLost` if it was
    /// taken over meanwhile (its lease ran out): the lock is not held, and a new grant would
    /// let the code since the takeover believe it ran under the lock.
    #[cold]
    #[inline(never)]
    fn reenter_leased<'a>(
        &'a self,
        sh: &'a Shared,
        tid: u32,
        reentrant: bool,
        ticket: u64,
        meta: u64,
        depth: u32,
    ) -> Result<LockGuard<'a>> {
        let (grant, lease_ms) = Hold::grant_of(meta, ticket);
        if core::check(&sh.state(), &sh.platform(), &grant, sh.participant).is_err() {
            return Err(Error::LockLost {
                path: sh.path.clone(),
            });
        }
        if !reentrant {
            return Err(Error::WouldDeadlock {
                path: sh.path.clone(),
            });
        }
        if depth & !POISONED >= MAX_DEPTH {
            return Err(Error::TooDeep {
                path: sh.path.clone(),
                levels: MAX_DEPTH,
            });
        }
        thread_leases::set_depth(sh, ticket, |d| d + 1);
        Ok(LockGuard::new(sh, grant, tid, lease_ms))
    }

    /// Acquires: the uncontended path inlined, the rest out of line. `stop`: an interrupt hook
    /// for the waiting (see [`FairLock::lock_interruptible`]).
    #[inline(always)]
    pub(crate) fn acquire(
        &self,
        deadline: Option<u64>,
        reentrant: bool,
        stop: Option<&mut dyn FnMut() -> bool>,
    ) -> Result<LockGuard<'_>> {
        let sh = self.shared()?;
        let (tid, beacon) = crate::sys::beacon::current_tid_and_beacon();
        if sh.holder_tid() == tid {
            return self.reenter(sh, reentrant);
        }
        if let Some((ticket, meta, depth)) = thread_leases::held(sh) {
            return self.reenter_leased(sh, tid, reentrant, ticket, meta, depth);
        }
        ExitWatch::arm();
        // The uncontended path (see `core::lock`, of which this is the inlined first step):
        // one CAS on the lock word.
        let beacon = if self.beacon_hints { beacon } else { 0 };
        if self.lease_ms.is_none()
            && let Some(g) = core::try_fast(&sh.state(), sh.participant, beacon)
        {
            return Ok(self.held_unleased(sh, tid, g));
        }
        let g = self.contended(sh, tid, deadline, stop)?;
        Ok(self.held(sh, tid, g))
    }

    /// Everything but the uncontended path, out of line so that the inlined fast path builds
    /// nothing it does not use.
    #[cold]
    #[inline(never)]
    fn contended(
        &self,
        sh: &Shared,
        tid: u32,
        deadline: Option<u64>,
        stop: Option<&mut dyn FnMut() -> bool>,
    ) -> Result<Grant> {
        let me = self.me(sh, tid);
        let mut panicked = None;
        let mut hook = stop.map(|f| guarded_hook(f, &mut panicked));
        let watch = match hook.as_mut() {
            Some(h) => core::Watch::interruptible(h),
            None => core::Watch::default(),
        };
        let r = core::lock_watched(
            &sh.state(),
            &sh.platform(),
            &me,
            deadline,
            &self.tuning,
            None,
            watch,
        );
        drop(hook);
        if let Some(payload) = panicked {
            // The hook panicked: its ticket was given up as for a `true`; a grant that raced
            // it is released before the panic goes on.
            if let Ok(g) = r {
                let _ = core::release(&sh.state(), &sh.platform(), &g, sh.participant);
            }
            std::panic::resume_unwind(payload);
        }
        r.map_err(|e| wait_error(sh, e))
    }

    #[inline]
    fn me(&self, sh: &Shared, tid: u32) -> Me {
        Me {
            participant: sh.participant,
            tid,
            lease_ms: self.lease_ms,
            shared: false,
            beacon: self.beacon(),
        }
    }

    /// The calling thread's beacon to publish with a grant (1 + index), 0 for none.
    #[inline]
    fn beacon(&self) -> u32 {
        if !self.beacon_hints {
            return 0;
        }
        crate::sys::beacon::thread_beacon().map_or(0, |i| i + 1)
    }

    /// Acquires a ticket of a weighted kind (`FairRwLock`, `FairSemaphore`): a share if
    /// `shared`, the whole lock otherwise. Always queued (see `core::weighted::walk`); the grant is
    /// not recorded in `Hold`, which describes the one exclusive grant of a process: several
    /// threads of a process may hold shares at once.
    pub(crate) fn acquire_weighted(
        &self,
        deadline: Option<u64>,
        shared: bool,
        stop: Option<&mut dyn FnMut() -> bool>,
    ) -> Result<LockGuard<'_>> {
        let sh = self.shared()?;
        let tid = thread::current_tid();
        let st = sh.state();
        self.refuse_reentry(sh, tid)?;
        // No beacon: a share may be released by another thread (a permit is `Send`).
        let me = Me {
            shared,
            beacon: 0,
            ..self.me(sh, tid)
        };
        let mut panicked = None;
        let mut hook = stop.map(|f| guarded_hook(f, &mut panicked));
        let watch = match hook.as_mut() {
            Some(h) => core::Watch::interruptible(h),
            None => core::Watch::default(),
        };
        let r = core::lock_watched(
            &st,
            &sh.platform(),
            &me,
            deadline,
            &self.tuning,
            None,
            watch,
        );
        drop(hook);
        if let Some(payload) = panicked {
            // As in `contended`: the ticket was given up, a racing grant is released.
            if let Ok(g) = r {
                let _ = core::release(&st, &sh.platform(), &g, sh.participant);
            }
            std::panic::resume_unwind(payload);
        }
        let g = r.map_err(|e| wait_error(sh, e))?;
        Ok(LockGuard::new(sh, g, tid, self.lease_ms))
    }

    /// `try_*` of a weighted kind: only if granted at once, never jumping the queue.
    pub(crate) fn try_acquire_weighted(&self, shared: bool) -> Result<LockGuard<'_>> {
        let sh = self.shared()?;
        let tid = thread::current_tid();
        self.refuse_reentry(sh, tid)?;
        // No beacon: a share may be released by another thread (a permit is `Send`).
        let me = Me {
            shared,
            beacon: 0,
            ..self.me(sh, tid)
        };
        let r = core::try_lock(&sh.state(), &sh.platform(), &me, &self.tuning);
        match r.map_err(|e| wait_error(sh, e))? {
            Some(g) => Ok(LockGuard::new(sh, g, tid, self.lease_ms)),
            None => Err(Error::WouldBlock {
                path: sh.path.clone(),
            }),
        }
    }

    /// A thread that holds a reader/writer lock (either way) and asks for it again would wait
    /// for itself behind its own grant (a writer behind its own read, a read behind its own
    /// write, or a read behind a writer queued after its own read): refused. Semaphores allow
    /// a thread several permits.
    fn refuse_reentry(&self, sh: &Shared, tid: u32) -> Result<()> {
        let st = sh.state();
        if st.is_rwlock() && core::weighted::admit::holds_already(&st, sh.participant, tid) {
            return Err(Error::WouldDeadlock {
                path: sh.path.clone(),
            });
        }
        Ok(())
    }

    #[inline]
    fn held<'a>(&'a self, sh: &'a Shared, tid: u32, g: Grant) -> LockGuard<'a> {
        if self.lease_ms.is_some() {
            // A leased grant may be taken over while we live: kept per thread, not in `Hold`
            // (see `thread_leases`) — unless it is held for a descriptor (the fd form).
            if self.per_thread {
                let meta = Hold::meta(self.lease_ms, &g, self.kept_on_exit);
                thread_leases::record(sh, g.ticket, meta);
            }
            return LockGuard::new(sh, g, tid, self.lease_ms);
        }
        self.held_unleased(sh, tid, g)
    }

    /// An unleased grant: its thread in `Hold`.
    #[inline]
    fn held_unleased<'a>(&'a self, sh: &'a Shared, tid: u32, g: Grant) -> LockGuard<'a> {
        // Relaxed: these are read back only by this thread (see `Hold::owner`).
        sh.hold.ticket.store(g.ticket, Relaxed);
        sh.hold
            .grant_meta
            .store(Hold::meta(None, &g, self.kept_on_exit), Relaxed);
        sh.hold.depth.store(1, Relaxed);
        sh.hold
            .owner
            .store(Shared::owner_key(tid, g.ticket), Relaxed);
        LockGuard::new(sh, g, tid, None)
    }
}

/// The caller's interrupt hook, made safe to call inside the wait: a panic in it is caught
/// and kept in `panicked` (to be resumed once the ticket is given up), and counts as "stop".
/// A hook that unwound through the wait left its published ticket behind: granted later,
/// nobody claimed it and nobody passed it while the process lived.
fn guarded_hook<'h>(
    stop: &'h mut dyn FnMut() -> bool,
    panicked: &'h mut Option<Box<dyn std::any::Any + Send>>,
) -> impl FnMut() -> bool + 'h {
    move || {
        if panicked.is_some() {
            return true;
        }
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(&mut *stop)) {
            Ok(v) => v,
            Err(payload) => {
                *panicked = Some(payload);
                true
            }
        }
    }
}

fn wait_error(sh: &Shared, e: WaitError) -> Error {
    match e {
        WaitError::Timeout => Error::Timeout {
            path: sh.path.clone(),
        },
        WaitError::Interrupted => Error::Interrupted {
            path: sh.path.clone(),
        },
        WaitError::Corrupt(what) => Error::corrupt(&sh.path, what),
    }
}

/// The most nested levels a re-entrant grant may have (far below the poison bit).
pub(crate) const MAX_DEPTH: u32 = 1 << 24;

/// The monotonic deadline (`CLOCK_MONOTONIC` ns) `timeout` from now.
pub(crate) fn deadline_after(timeout: Duration) -> u64 {
    let ns = timeout.as_nanos().min(u128::from(u64::MAX / 2)) as u64;
    clock::monotonic_ns().saturating_add(ns)
}

/// The monotonic deadline of `deadline` (std's `Instant` is `CLOCK_MONOTONIC` on Linux, but
/// it is converted through "how long from now" so that nothing depends on that).
pub(crate) fn deadline_at(deadline: Instant) -> u64 {
    deadline_after(deadline.saturating_duration_since(Instant::now()))
}
