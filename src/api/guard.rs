//! The guard: the very existence of a [`LockGuard`] means its thread was granted the lock.

use std::marker::PhantomData;
use std::num::NonZeroU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use crate::core::{self, Grant};
use crate::error::{Error, Result};
use crate::process::thread_leases;
use crate::process::view::{POISONED, Shared};

/// Proof of holding a [`FairLock`](crate::FairLock) or [`FairRLock`](crate::FairRLock) (one
/// guard type for both). Dropping it releases the lock (or, for a nested re-entrant guard, one
/// level of it).
///
/// It is not `Send`: the lock belongs to the thread that acquired it.
///
/// # Dropping a guard whose lease was lost
///
/// `Drop` cannot return an error: a guard dropped after its lease was taken over releases
/// nothing (the lock is someone else's) and says nothing. Code that must know whether
/// everything it did under the lock was done alone ends the hold with
/// [`unlock`](LockGuard::unlock), which returns [`Error::LockLost`] in that case — or calls
/// [`check`](LockGuard::check) before committing its work.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard<'a> {
    // Kept to 32 bytes, with no drop flag (`unlock` forgets the guard instead): the guard is
    // returned through memory on every `lock`, and a larger one with byte-sized fields was
    // copied by the caller with loads that straddle the callee's stores, which stalled store
    // forwarding for about a third of the uncontended lock + unlock.
    shared: &'a Shared,
    ticket: u64,
    /// The grant's lease (see [`LockGuard::lease`]); `None` without one.
    lease_ms: Option<NonZeroU64>,
    /// The thread that made this guard (and, as the guard is not `Send`, drops it); 0 for a
    /// process's grant (inside a [`ProcessGuard`](crate::ProcessGuard), which any thread may
    /// drop): `PROCESS_TID`, which no grant recorded in `Hold` has.
    tid: u32,
    /// The grant's flags as [`Grant::pack`] packs them: died, fast (granted by the lock word:
    /// released by a CAS on it, not through a slot) and, in a file with a bypass bound, a
    /// barge's count and bypass number, or a queued grant's overtaken count.
    bits: u32,
    _not_send: PhantomData<*const ()>,
}

// See the comment on the fields: the uncontended path depends on this size.
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<LockGuard<'static>>() == 32);

impl<'a> LockGuard<'a> {
    #[inline]
    pub(crate) fn new(shared: &'a Shared, grant: Grant, tid: u32, lease_ms: Option<u64>) -> Self {
        LockGuard {
            shared,
            ticket: grant.ticket,
            lease_ms: lease_ms.and_then(NonZeroU64::new),
            tid,
            bits: grant.pack(),
            _not_send: PhantomData,
        }
    }

    /// The guard of a raw grant (see `crate::raw::surface`): itself.
    #[inline(always)]
    pub(crate) fn from_raw(r: Result<LockGuard<'a>>) -> Result<LockGuard<'a>> {
        r
    }

    /// The view of the lock file this guard was granted in.
    #[inline]
    pub(crate) fn shared(&self) -> &'a Shared {
        self.shared
    }

    /// The grant this guard stands for.
    #[inline]
    fn grant(&self) -> Grant {
        Grant::unpack(self.ticket, self.bits, self.lease_ms.is_some())
    }

    /// Granted by the lock word (a fast grant or a barge).
    #[inline]
    fn fast(&self) -> bool {
        self.bits & Grant::PACKED_FAST != 0
    }

    /// The previous holder did not release.
    #[inline]
    fn died(&self) -> bool {
        self.bits & Grant::PACKED_DIED != 0
    }

    /// The fencing token of this grant: it strictly increases with every grant of the lock
    /// file, across processes and takeovers. Hand it to downstream resources and have them
    /// reject a token smaller than the largest they have seen: that stops a holder that was
    /// paused past its lease from writing after it lost the lock.
    ///
    /// In a file opened with [`Fairness::Bounded`](crate::Fairness::Bounded) tokens are
    /// `(ticket + 1) · 512 + j`, where `j` (1 to the bound) numbers the barges that took the lock
    /// ahead of the queue's next grant, and is 0 for grants in queue order.
    pub fn token(&self) -> u64 {
        let g = self.grant();
        crate::core::state::token_of(self.shared.bypass_bound(), g.ticket, g.bypass)
    }

    /// In a file opened with [`Fairness::Bounded`](crate::Fairness::Bounded): how many times
    /// this grant's waiter was overtaken by threads that took the lock ahead of the queue
    /// (never more than the bound; barges that were undone are counted too). 0 for a grant
    /// that did not wait in the queue, and in a strict file.
    pub fn overtaken(&self) -> u32 {
        u32::from(self.grant().overtaken)
    }

    /// True if the previous holder did not release the lock. The name mirrors a robust
    /// mutex's `EOWNERDEAD`, and it means either of two things:
    ///
    /// * **the owner died**: it was killed, crashed, its thread exited while holding, or it
    ///   panicked while holding (its guard was dropped during unwinding, as std poisons a
    ///   `Mutex`);
    /// * **its lease was taken over**: it held past its lease (stopped, stuck, or slow) and
    ///   the next waiter took the lock from it; that holder may still be running, and learns
    ///   it lost the lock from [`check`](LockGuard::check) or [`unlock`](LockGuard::unlock).
    ///
    /// Either way, the data the lock protects may be half-written: check it.
    pub fn owner_died(&self) -> bool {
        self.died()
    }

    /// `Ok` while the lock is still ours.
    ///
    /// # Errors
    /// [`Error::LockLost`] if it was taken over (lease expired) or revoked, or if this guard
    /// was inherited through `fork` (the child does not own its parent's lock).
    pub fn check(&self) -> Result<()> {
        if !self.shared.is_current() {
            return Err(self.lost());
        }
        let st = self.shared.state();
        core::check(
            &st,
            &self.shared.platform(),
            &self.grant(),
            self.shared.participant,
        )
        .map_err(|_| self.lost())
    }

    /// Renews the lease: it now ends `d` from now. Extension and takeover are decided by one
    /// compare-and-swap, so they never both win.
    ///
    /// # Errors
    /// [`Error::LockLost`] if the lock was already taken over; [`Error::InvalidOption`] for a
    /// zero duration or a lock opened without a lease.
    pub fn extend(&self, d: Duration) -> Result<()> {
        if d.is_zero() || self.lease_ms.is_none() {
            return Err(Error::InvalidOption {
                what: if d.is_zero() {
                    "extend(0): a lease must be at least 1 ms".into()
                } else {
                    "extend: this lock was opened without a lease".into()
                },
            });
        }
        if !self.shared.is_current() {
            return Err(self.lost());
        }
        let ms = d.as_nanos().div_ceil(1_000_000).min(1 << 40) as u64;
        let st = self.shared.state();
        core::extend(
            &st,
            &self.shared.platform(),
            self.ticket,
            self.shared.participant,
            ms,
        )
        .map_err(|_| self.lost())
    }

    /// Records this thread and "now" as the start of this hold, so that [`crate::inspect`]
    /// (and `fairlock status`) can show the holder's thread and how long it has held the lock.
    /// The uncontended path skips this to stay fast; a grant that had to wait is stamped
    /// already.
    pub fn stamp_time(&self) {
        // Only while the grant is ours: a lost grant's slot may belong to a later ticket.
        if self.check().is_ok() {
            // A process's grant (`PROCESS_TID`) shows no thread (see `inspect`).
            let tid = self.tid;
            let st = self.shared.state();
            if self.fast() {
                core::queue::claim::stamp_fast(&st, &self.shared.platform(), self.ticket, tid);
            } else {
                core::queue::claim::stamp_holder(&st, &self.shared.platform(), self.ticket, tid);
            }
        }
    }

    /// The lease of this grant, if any: the one the handle that took the lock asked for (a
    /// nested re-entrant guard reports the outer grant's, whichever handle it came from).
    pub fn lease(&self) -> Option<Duration> {
        self.lease_ms.map(|ms| Duration::from_millis(ms.get()))
    }

    /// Releases the lock (one level, for a nested re-entrant guard) and reports whether it
    /// was still ours. Called while the thread panics, it gives the lock up as a drop would
    /// then (the next holder is told [`owner_died`](LockGuard::owner_died)).
    ///
    /// # Errors
    /// [`Error::LockLost`] if it had been taken over or revoked: whatever was done under it
    /// may have overlapped another holder.
    pub fn unlock(self) -> Result<()> {
        let r = if std::thread::panicking() {
            self.release_poisoned()
        } else {
            self.release()
        };
        std::mem::forget(self); // released above; nothing else to drop
        r
    }

    #[inline(always)]
    fn release(&self) -> Result<()> {
        let sh = self.shared;
        if !sh.is_current() {
            return Err(self.lost()); // inherited through fork: the parent's, not ours
        }
        if self.lease_ms.is_some() {
            return self.release_leased_level();
        }
        // Relaxed: `owner`/`depth` are only written by the holding thread, which is us.
        if self.in_hold(sh) {
            let depth = sh.hold.depth.load(Relaxed);
            // A nested level, or the poison mark a nested guard left: out of line.
            if depth != 1 {
                return self.release_nested(depth);
            }
            // Before the release: the next holder may be another thread of this process.
            sh.hold.depth.store(0, Relaxed);
            sh.hold.owner.store(0, Relaxed);
        }
        let outcome = if self.fast() {
            Some(core::release_fast_grant(
                sh.header(),
                self.ticket,
                sh.participant,
            ))
        } else {
            core::release_unleased_fast(&sh.state(), self.ticket, sh.participant, false)
        };
        match outcome {
            Some(true) => Ok(()),
            outcome => self.finish_unleased(outcome),
        }
    }

    /// A leased guard gives back its level of its thread's grant (`thread_leases`): a nested
    /// one only that; the outermost (or a share's, never recorded) releases — or, if a nested
    /// guard was dropped while panicking, gives the grant up as if its owner died.
    #[cold]
    fn release_leased_level(&self) -> Result<()> {
        let sh = self.shared;
        let before =
            thread_leases::set_depth(
                sh,
                self.ticket,
                |d| {
                    if d & !POISONED > 1 { d - 1 } else { 0 }
                },
            );
        match before {
            Some(d) if d & !POISONED > 1 => {
                core::check(&sh.state(), &sh.platform(), &self.grant(), sh.participant)
                    .map_err(|_| self.lost())
            }
            Some(d) if d & POISONED != 0 => self.give_up_as_dead(),
            _ => self.release_leased(),
        }
    }

    /// A nested re-entrant guard gives back one level: nothing is released. The outermost
    /// level of a grant that a nested guard poisoned (dropped while panicking) is given up
    /// as if its owner died.
    #[cold]
    fn release_nested(&self, depth: u32) -> Result<()> {
        let sh = self.shared;
        let levels = depth & !POISONED;
        if levels <= 1 {
            return self.give_up_as_dead();
        }
        // Relaxed: as in `release`.
        sh.hold.depth.store(depth - 1, Relaxed);
        core::check(&sh.state(), &sh.platform(), &self.grant(), sh.participant)
            .map_err(|_| self.lost())
    }

    /// Dropped (or unlocked) while this thread panics: whatever the guard protected may be
    /// half-updated, so the lock is given up as if its owner died — the next holder gets
    /// `owner_died()` — like std's `Mutex` poisoning. A nested re-entrant guard only marks the
    /// grant; its outermost guard gives it up.
    #[cold]
    fn release_poisoned(&self) -> Result<()> {
        let sh = self.shared;
        if !sh.is_current() {
            return Err(self.lost());
        }
        if self.lease_ms.is_some() {
            let before = thread_leases::set_depth(sh, self.ticket, |d| {
                if d & !POISONED > 1 {
                    (d - 1) | POISONED
                } else {
                    0
                }
            });
            if before.is_some_and(|d| d & !POISONED > 1) {
                return core::check(&sh.state(), &sh.platform(), &self.grant(), sh.participant)
                    .map_err(|_| self.lost());
            }
            return self.give_up_as_dead();
        }
        // Relaxed: as in `release`.
        if self.in_hold(sh) {
            let depth = sh.hold.depth.load(Relaxed);
            if depth & !POISONED > 1 {
                sh.hold.depth.store((depth - 1) | POISONED, Relaxed);
                return core::check(&sh.state(), &sh.platform(), &self.grant(), sh.participant)
                    .map_err(|_| self.lost());
            }
        }
        self.give_up_as_dead()
    }

    /// Gives back a grant nobody used (an asynchronous acquisition dropped once its grant was
    /// made): released, or — if it carries the news that a previous owner died — given up as
    /// dead, so that the news reaches the next holder instead of being lost with this grant.
    pub(crate) fn give_back_unused(self) {
        let r = if self.owner_died() {
            self.give_up_as_dead()
        } else {
            self.release()
        };
        std::mem::forget(self); // given back above; nothing else to drop
        drop(r);
    }

    /// Revokes our own grant: the next holder is told the owner died.
    fn give_up_as_dead(&self) -> Result<()> {
        let sh = self.shared;
        if self.lease_ms.is_some() {
            // Its thread's record of it (gone already if the last level was given back).
            thread_leases::set_depth(sh, self.ticket, |_| 0);
        }
        // Relaxed: as in `release`. Before the revocation, as for a release.
        if self.in_hold(sh) {
            sh.hold.depth.store(0, Relaxed);
            sh.hold.owner.store(0, Relaxed);
        }
        core::revoke_own(&sh.state(), &sh.platform(), &self.grant(), sh.participant)
            .map_err(|_| self.lost())
    }

    /// The rare endings of the unleased release (the next ticket already published, or the
    /// grant no longer ours), out of line.
    #[cold]
    fn finish_unleased(&self, outcome: Option<bool>) -> Result<()> {
        let sh = self.shared;
        core::finish_unleased_release(
            &sh.state(),
            &sh.platform(),
            self.ticket,
            sh.participant,
            self.fast(),
            outcome,
            core::release::barge_of(&self.grant()),
        )
        .map_err(|_| self.lost())
    }

    /// A grant with a lease is released with a CAS (a takeover may race it).
    #[cold]
    fn release_leased(&self) -> Result<()> {
        let sh = self.shared;
        core::release(&sh.state(), &sh.platform(), &self.grant(), sh.participant)
            .map_err(|_| self.lost())
    }
}

impl LockGuard<'_> {
    /// Whether `Hold` records this guard's grant as its thread's. Never for a process's grant:
    /// its thread id is `PROCESS_TID`, which no key of `Hold` (nor its "nobody", 0) is made with.
    #[inline(always)]
    fn in_hold(&self, sh: &Shared) -> bool {
        // Relaxed: `owner` is only written by the holding thread, which is us if it names us.
        sh.hold.owner.load(Relaxed) == Shared::owner_key(self.tid, self.ticket)
    }

    /// The error for a grant that is no longer ours.
    #[cold]
    fn lost(&self) -> Error {
        Error::LockLost {
            path: self.shared.path.clone(),
        }
    }
}

impl Drop for LockGuard<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        let released = if std::thread::panicking() {
            self.release_poisoned()
        } else {
            self.release()
        };
        // Only an error has anything to drop: out of line, so that the uncontended unlock
        // does not call the drop of a `Result` that is `Ok`.
        if let Err(e) = released {
            discard(e);
        }
    }
}

/// Drops an error that `Drop` cannot report (see "Dropping a guard whose lease was lost").
#[cold]
#[inline(never)]
fn discard(e: Error) {
    drop(e);
}

impl std::fmt::Debug for LockGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("token", &self.token())
            .field("owner_died", &self.owner_died())
            .finish()
    }
}
