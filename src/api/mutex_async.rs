//! [`FairMutex::lock_async`](crate::FairMutex::lock_async)'s future and its guard: a process
//! grant of the mutex's lock that gives access to the value, `Send` so that a task may hold it
//! across `.await` on any thread.

use std::future::Future;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll};

use bytemuck::Pod;

use crate::api::mutex::holds;
use crate::api::process_guard::ProcessGuard;
use crate::error::Result;
use crate::raw::acquire_async::AcquireFuture;

/// The future of [`FairMutex::lock_async`](crate::FairMutex::lock_async): resolves to an
/// [`OwnedMutexGuard`]. As [`AcquireFuture`]: `Send`, owns what it needs, and dropped before
/// it resolves it gives its place in line up at once.
#[must_use = "futures do nothing unless polled; the place in line is taken at the first poll"]
pub struct MutexFuture<T: Pod> {
    acquire: AcquireFuture,
    _value: PhantomData<fn() -> T>,
}

impl<T: Pod> MutexFuture<T> {
    pub(crate) fn new(acquire: AcquireFuture) -> MutexFuture<T> {
        MutexFuture {
            acquire,
            _value: PhantomData,
        }
    }
}

impl<T: Pod> Future for MutexFuture<T> {
    type Output = Result<OwnedMutexGuard<T>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.acquire)
            .poll(cx)
            .map(|r| r.and_then(OwnedMutexGuard::new))
    }
}

impl<T: Pod> std::fmt::Debug for MutexFuture<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("MutexFuture").field(&self.acquire).finish()
    }
}

/// Proof of holding a [`FairMutex<T>`](crate::FairMutex) for the process (from
/// [`lock_async`](crate::FairMutex::lock_async)): dereferences to the value in the file, and
/// is `Send` (any thread may use and release it). Dropping it releases the lock; dropping it
/// while its thread panics gives the lock up as if its owner died. Its thread's exit leaves it
/// held; the process's death gives it up, and the next holder is told
/// [`owner_died`](OwnedMutexGuard::owner_died). It owns what it needs: it may outlive the
/// handle. Inherited through `fork`, it gives no access to the value (dereferencing it in the
/// child panics: the lock is the parent's).
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct OwnedMutexGuard<T: Pod> {
    grant: ProcessGuard,
    data: NonNull<T>,
    _value: PhantomData<T>,
}

// SAFETY: the grant is a `ProcessGuard` (`Send` and `Sync`: any thread may release it); the
// value is `Pod` (plain bytes, no pointers or thread-bound state), reached through `data`,
// which points into the mapping the grant's view keeps alive. Access follows the borrow
// rules of `&self`/`&mut self`, as a `Box<T>`'s would: `Send` and `Sync` as `T` is.
unsafe impl<T: Pod + Send> Send for OwnedMutexGuard<T> {}
// SAFETY: as for `Send`: shared access gives `&T` only.
unsafe impl<T: Pod + Sync> Sync for OwnedMutexGuard<T> {}

impl<T: Pod> OwnedMutexGuard<T> {
    fn new(grant: ProcessGuard) -> Result<OwnedMutexGuard<T>> {
        let sh = grant.view();
        holds::<T>(sh)?; // the grant is given back on the way out
        let data = match sh.data() {
            Some(p) => p.cast::<T>(),
            None => NonNull::dangling(), // a zero-sized `T`
        };
        Ok(OwnedMutexGuard {
            grant,
            data,
            _value: PhantomData,
        })
    }

    /// The fencing token of this grant (see [`LockGuard::token`](crate::LockGuard::token)).
    pub fn token(&self) -> u64 {
        self.grant.token()
    }

    /// True if the previous holder did not release the lock: it died or panicked while
    /// holding, so the value may be half-updated.
    pub fn owner_died(&self) -> bool {
        self.grant.owner_died()
    }

    /// `Ok` while the lock is still ours.
    ///
    /// # Errors
    /// [`Error::LockLost`](crate::Error::LockLost) if this guard was inherited through
    /// `fork`, or the grant was revoked.
    pub fn check(&self) -> Result<()> {
        self.grant.check()
    }

    /// Releases the lock and reports whether it was still ours.
    ///
    /// # Errors
    /// [`Error::LockLost`](crate::Error::LockLost) as for [`check`](Self::check).
    pub fn unlock(self) -> Result<()> {
        self.grant.unlock()
    }

    /// The value's address, after checking this process owns the grant.
    fn ptr(&self) -> NonNull<T> {
        let sh = self.grant.view();
        assert!(
            sh.is_same_process(),
            "{}: a FairMutex guard inherited through fork gives no access to the value: the lock is the parent's",
            sh.path.display()
        );
        self.data
    }
}

impl<T: Pod> Deref for OwnedMutexGuard<T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: `data` points to the file's data area inside the mapping that the grant's
        // view (owned by `grant`) keeps alive, aligned for `T` and `size_of::<T>()` long (the
        // file's data shape was checked equal to `T`'s in `new`), or is dangling for a
        // zero-sized `T`. Any bytes are a valid `T` (`Pod`). Nobody else accesses it while we
        // hold the lock: every `FairMutex` user touches the value only through a guard, a
        // holder is taken over only when dead (no leases), and a forked child's inherited
        // guard is refused by `ptr`.
        unsafe { self.ptr().as_ref() }
    }
}

impl<T: Pod> DerefMut for OwnedMutexGuard<T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference made through this
        // guard, and the lock makes the guard the only one.
        unsafe { self.ptr().as_mut() }
    }
}

impl<T: Pod + std::fmt::Debug> std::fmt::Debug for OwnedMutexGuard<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedMutexGuard")
            .field("value", &**self)
            .field("token", &self.token())
            .field("owner_died", &self.owner_died())
            .finish()
    }
}
