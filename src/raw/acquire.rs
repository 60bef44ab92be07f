//! Acquiring through a [`RawLock`], for every kind and every way of waiting: the uncontended
//! exclusive path inlined, re-entry, leased grants kept per thread, weighted shares, and the
//! interrupt hook made safe to call inside the wait.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use crate::api::guard::LockGuard;
use crate::core::{self, Grant, Me, WaitError};
use crate::error::{Error, Result};
use crate::process::thread_leases;
use crate::process::view::{ExitWatch, Hold, POISONED, PROCESS_TID, Shared};
use crate::raw::handle::RawLock;
use crate::sys::{clock, thread};

/// What a grant is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The whole lock; the holding thread asking again is refused (`WouldDeadlock`).
    Exclusive,
    /// The whole lock; the holding thread asking again nests (`FairRLock`).
    Reentrant,
    /// A share of a weighted kind: a read, a permit.
    Shared,
    /// A weighted kind's whole lock: a write.
    Whole,
}

/// How long an acquire may wait.
pub(crate) enum Wait<'h> {
    /// Not at all: only a grant made at once, never jumping the queue.
    Now,
    /// Until the monotonic deadline (ns), if any, or until `stop` says so.
    Until(Option<u64>, Option<&'h mut dyn FnMut() -> bool>),
}

impl RawLock {
    /// Acquires as `mode` asks, waiting as `wait` says: the one entry of every handle's
    /// acquire surface. Inlined, so that each surface method keeps only its own path (the
    /// uncontended exclusive lock is one CAS here).
    #[inline(always)]
    pub(crate) fn acquire(&self, mode: Mode, wait: Wait<'_>) -> Result<LockGuard<'_>> {
        match (mode, wait) {
            (Mode::Exclusive, Wait::Now) => self.try_acquire(false),
            (Mode::Reentrant, Wait::Now) => self.try_acquire(true),
            (Mode::Exclusive, Wait::Until(d, stop)) => self.acquire_exclusive(d, false, stop),
            (Mode::Reentrant, Wait::Until(d, stop)) => self.acquire_exclusive(d, true, stop),
            (Mode::Shared, Wait::Now) => self.try_acquire_weighted(true),
            (Mode::Whole, Wait::Now) => self.try_acquire_weighted(false),
            (Mode::Shared, Wait::Until(d, stop)) => self.acquire_weighted(d, true, stop),
            (Mode::Whole, Wait::Until(d, stop)) => self.acquire_weighted(d, false, stop),
        }
    }

    fn try_acquire(&self, reentrant: bool) -> Result<LockGuard<'_>> {
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
        match settle(sh, r)? {
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
    /// it (as [`RawLock::reenter`]) if it is still the thread's own — `LockLost` if it was
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

    /// Acquires the whole lock: the uncontended path inlined, the rest out of line. `stop`: an
    /// interrupt hook for the waiting (see `FairLock::lock_interruptible`).
    #[inline(always)]
    pub(crate) fn acquire_exclusive(
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
            && let Some(g) = core::try_fast_on(sh.header(), sh.participant, beacon, || sh.state())
        {
            // The CAS may have been the access that found the file truncated: then it was
            // made on private zero pages, and is no grant (`sys::sigbus`).
            if sh.is_broken() {
                return Err(broken(sh));
            }
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
        self.queue(sh, &self.me(sh, tid), deadline, stop)
    }

    /// Waits in line as `me` (the uncontended attempt first, for the exclusive kind) until
    /// granted, `deadline` or `stop()`; a panic in `stop` gives the ticket up, releases a grant
    /// that raced it, and goes on.
    fn queue(
        &self,
        sh: &Shared,
        me: &Me,
        deadline: Option<u64>,
        stop: Option<&mut dyn FnMut() -> bool>,
    ) -> Result<Grant> {
        let st = sh.state();
        let mut panicked = None;
        let mut hook = stop.map(|f| guarded_hook(f, &mut panicked));
        // A wait whose lock state a truncation destroyed ends at its next wake-up.
        let broken = || sh.is_broken();
        let watch = match hook.as_mut() {
            Some(h) => core::Watch::interruptible(h),
            None => core::Watch::default(),
        }
        .abandoning(&broken);
        let r = core::lock_watched(&st, &sh.platform(), me, deadline, &self.tuning, None, watch);
        drop(hook);
        if let Some(payload) = panicked {
            // The hook panicked: its ticket was given up as for a `true`; a grant that raced
            // it is released before the panic goes on.
            if let Ok(g) = r {
                let _ = core::release(&st, &sh.platform(), &g, sh.participant);
            }
            std::panic::resume_unwind(payload);
        }
        settle(sh, r)
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
    fn acquire_weighted(
        &self,
        deadline: Option<u64>,
        shared: bool,
        stop: Option<&mut dyn FnMut() -> bool>,
    ) -> Result<LockGuard<'_>> {
        let sh = self.shared()?;
        let tid = thread::current_tid();
        self.refuse_reentry(sh, tid)?;
        // No beacon: a share may be released by another thread (a permit is `Send`).
        let me = Me {
            shared,
            beacon: 0,
            ..self.me(sh, tid)
        };
        let g = self.queue(sh, &me, deadline, stop)?;
        Ok(LockGuard::new(sh, g, tid, self.lease_ms))
    }

    /// `try_*` of a weighted kind: only if granted at once, never jumping the queue.
    fn try_acquire_weighted(&self, shared: bool) -> Result<LockGuard<'_>> {
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
        match settle(sh, r)? {
            Some(g) => Ok(LockGuard::new(sh, g, tid, self.lease_ms)),
            None => Err(Error::WouldBlock {
                path: sh.path.clone(),
            }),
        }
    }

    /// Acquires as `mode` asks (not `Reentrant`: re-entry is a thread's) for the process
    /// rather than the calling thread: the grant of a [`ProcessGuard`](crate::ProcessGuard).
    /// It is recorded in no per-thread structure (neither `Hold` nor `thread_leases`), publishes
    /// no thread beacon (its liveness is the process's) and is made with thread id
    /// [`PROCESS_TID`], which no recorded grant and no thread has: any thread may release it, a thread's exit leaves it
    /// alone, and no re-entry check ever takes it for a thread's. A
    /// thread that holds the lock already, either way, is not refused: it waits in line behind
    /// its own grant, as with `threading.Lock` (until another thread releases that grant).
    pub(crate) fn acquire_for_process(&self, mode: Mode, wait: Wait<'_>) -> Result<LockGuard<'_>> {
        let sh = self.shared()?;
        // `PROCESS_TID` in the slot too: the weighted kinds' re-entry check (`holds_already`)
        // matches a slot's thread id, and a process grant must never be taken for the
        // thread's that took it (it may have been handed to another thread, or its taker may
        // have exited and its id been reused).
        let me = Me {
            participant: sh.participant,
            tid: PROCESS_TID,
            lease_ms: self.lease_ms,
            shared: mode == Mode::Shared,
            beacon: 0,
        };
        let st = sh.state();
        let g = match wait {
            Wait::Now => {
                let r = core::try_lock(&st, &sh.platform(), &me, &self.tuning);
                settle(sh, r)?.ok_or_else(|| Error::WouldBlock {
                    path: sh.path.clone(),
                })?
            }
            Wait::Until(deadline, stop) => self.queue(sh, &me, deadline, stop)?,
        };
        Ok(LockGuard::new(sh, g, PROCESS_TID, self.lease_ms))
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
/// (A hook that unwound through the wait would leave its published ticket behind: granted
/// later, claimed by nobody and passed by nobody while the process lived.)
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

/// The error of an acquisition that found the file truncated (out of line: the uncontended
/// path only tests for it).
#[cold]
#[inline(never)]
fn broken(sh: &Shared) -> Error {
    crate::raw::handle::truncated(&sh.path)
}

/// The outcome of an acquisition in the core, as the handle reports it. A grant made while a
/// truncation broke the mapping (`sys::sigbus`) was made in private zero pages, not in the
/// file: it is no grant (and there is nothing to give back), so the acquisition fails.
pub(crate) fn settle<T>(sh: &Shared, r: std::result::Result<T, WaitError>) -> Result<T> {
    if sh.is_broken() {
        return Err(crate::raw::handle::truncated(&sh.path));
    }
    r.map_err(|e| wait_error(sh, e))
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
