//! The guard: the very existence of a [`LockGuard`] means its thread was granted the lock.

use std::marker::PhantomData;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use super::shared::Shared;
use crate::core::{self, Grant};
use crate::error::{Error, Result};

/// Proof of holding a [`FairLock`](crate::FairLock) or [`FairRLock`](crate::FairRLock).
/// Dropping it releases the lock (or, for a nested re-entrant guard, one level of it).
///
/// It is not `Send`: the lock belongs to the thread that acquired it.
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard<'a> {
    shared: &'a Shared,
    grant: Grant,
    /// `Shared::owner_key` of the thread that made this guard.
    key: u64,
    lease_ms: Option<u64>,
    released: bool,
    _not_send: PhantomData<*const ()>,
}

/// The guard of a [`FairLock`](crate::FairLock).
pub type FairLockGuard<'a> = LockGuard<'a>;
/// The guard of a [`FairRLock`](crate::FairRLock).
pub type FairRLockGuard<'a> = LockGuard<'a>;

impl<'a> LockGuard<'a> {
    #[inline]
    pub(crate) fn new(shared: &'a Shared, grant: Grant, tid: u32, lease_ms: Option<u64>) -> Self {
        LockGuard {
            shared,
            grant,
            key: Shared::owner_key(tid, grant.ticket),
            lease_ms,
            released: false,
            _not_send: PhantomData,
        }
    }

    /// The fencing token of this grant: it strictly increases with every grant of the lock
    /// file, across processes and takeovers. Hand it to downstream resources and have them
    /// reject a token smaller than the largest they have seen: that stops a holder that was
    /// paused past its lease from writing after it lost the lock.
    pub fn token(&self) -> u64 {
        self.grant.token()
    }

    /// True if the previous holder did not release the lock: it died (killed, crashed, its
    /// thread exited while holding) or its lease was taken over. The data the lock protects may
    /// be half-written; check it, like a robust mutex's `EOWNERDEAD`.
    pub fn owner_died(&self) -> bool {
        self.grant.died
    }

    /// `Ok` while the lock is still ours.
    ///
    /// # Errors
    /// [`Error::LockLost`] if it was taken over (lease expired) or revoked, or if this guard
    /// was inherited through `fork` (the child does not own its parent's lock).
    pub fn check(&self) -> Result<()> {
        if !self.shared.is_current() {
            return Err(Error::LockLost);
        }
        let st = self.shared.state();
        core::check(
            &st,
            &self.shared.platform(),
            &self.grant,
            self.shared.participant,
        )
        .map_err(|_| Error::LockLost)
    }

    /// Renews the lease: it now ends `d` from now. Extension and takeover are decided by one
    /// compare-and-swap, so they never both win.
    ///
    /// # Errors
    /// [`Error::LockLost`] if the lock was already taken over; [`Error::InvalidOption`] for a
    /// zero duration or a lock opened without a lease.
    pub fn extend(&self, d: Duration) -> Result<()> {
        if d.is_zero() || !self.grant.leased {
            return Err(Error::InvalidOption {
                what: if d.is_zero() {
                    "extend(0): a lease must be at least 1 ms".into()
                } else {
                    "extend: this lock was opened without a lease".into()
                },
            });
        }
        if !self.shared.is_current() {
            return Err(Error::LockLost);
        }
        let ms = d.as_nanos().div_ceil(1_000_000).min(1 << 40) as u64;
        let st = self.shared.state();
        core::extend(
            &st,
            &self.shared.platform(),
            &self.grant,
            self.shared.participant,
            ms,
        )
        .map_err(|_| Error::LockLost)
    }

    /// Records this thread and "now" as the start of this hold, so that [`crate::inspect`]
    /// (and `fairlock status`) can show the holder's thread and how long it has held the lock.
    /// The uncontended path skips this to stay fast; a grant that had to wait is stamped
    /// already.
    pub fn stamp_time(&self) {
        // Only while the grant is ours: a lost grant's slot may belong to a later ticket.
        if self.check().is_ok() {
            let tid = (self.key >> 32) as u32;
            let st = self.shared.state();
            core::wait::stamp_holder(&st, &self.shared.platform(), self.grant.ticket, tid);
        }
    }

    /// The lease this guard's handle asks for, if any.
    pub fn lease(&self) -> Option<Duration> {
        self.lease_ms.map(Duration::from_millis)
    }

    /// Releases the lock (one level, for a nested re-entrant guard) and reports whether it
    /// was still ours.
    ///
    /// # Errors
    /// [`Error::LockLost`] if it had been taken over or revoked: whatever was done under it
    /// may have overlapped another holder.
    pub fn unlock(mut self) -> Result<()> {
        self.release()
    }

    #[inline]
    fn release(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.released, true) {
            return Ok(());
        }
        let sh = self.shared;
        if !sh.is_current() {
            return Err(Error::LockLost); // inherited through fork: the parent's, not ours
        }
        let st = sh.state();
        let p = sh.platform();
        // Relaxed: `owner`/`depth` are only written by the holding thread, which is us.
        if sh.owner.load(Relaxed) == self.key {
            let depth = sh.depth.load(Relaxed);
            if depth > 1 {
                sh.depth.store(depth - 1, Relaxed);
                return core::check(&st, &p, &self.grant, sh.participant)
                    .map_err(|_| Error::LockLost);
            }
            sh.depth.store(0, Relaxed);
            sh.owner.store(0, Relaxed);
        }
        core::release(&st, &p, &self.grant, sh.participant).map_err(|_| Error::LockLost)
    }
}

impl Drop for LockGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        let _ = self.release();
    }
}

impl std::fmt::Debug for LockGuard<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("token", &self.token())
            .field("owner_died", &self.owner_died())
            .finish()
    }
}
