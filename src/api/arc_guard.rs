//! The owned guards: one per guard type, each holding its handle through an `Arc` (as
//! `parking_lot`'s `ArcMutexGuard`), for holds that outlive a borrow. Made by the `*_arc`
//! methods of every handle (see `crate::raw::surface`).

use std::ops::Deref;
use std::sync::Arc;

use bytemuck::Pod;

use crate::api::guard::LockGuard;
use crate::api::kind_guard::{RwLockReadGuard, RwLockWriteGuard, SemaphorePermit};
use crate::api::mutex::MutexGuard;
use crate::error::Result;
use crate::{FairLock, FairMutex, FairRLock, FairRwLock, FairSemaphore};

/// `guard`, borrowing for `'static` instead of its own lifetime.
///
/// # Safety
/// `A` and `B` must be the same type but for lifetimes, and the caller must keep what `guard`
/// borrows alive, at a stable address, for as long as the result lives.
unsafe fn extend_borrow<A, B>(guard: A) -> B {
    debug_assert_eq!(size_of::<A>(), size_of::<B>());
    let guard = std::mem::ManuallyDrop::new(guard);
    // SAFETY: the caller's promise: `B` is `A` with another lifetime (same layout), and the
    // value is read once from a `ManuallyDrop` that is never dropped.
    unsafe { std::ptr::read((&*guard as *const A).cast::<B>()) }
}

macro_rules! arc_guard {
    (
        $(#[$doc:meta])*
        $name:ident [$($gen:tt)*] [$($args:tt)*],
        handle: $handle:ty,
        guard: $guard:ty,
        borrowed: $borrowed:ty $(,)?
    ) => {
        $(#[$doc])*
        #[must_use = "the grant is given back as soon as the guard is dropped"]
        pub struct $name<$($gen)*> {
            // Declared before `handle`: fields drop in order, so the grant is given back while
            // the handle it borrows from is still alive.
            guard: $guard,
            handle: Arc<$handle>,
        }

        impl<$($gen)*> $name<$($args)*> {
            pub(crate) fn new(handle: Arc<$handle>, guard: $borrowed) -> Self {
                // SAFETY: the guard borrows the handle's view of the file (a `Shared` in an
                // `Arc` that the handle's list of views keeps for as long as the handle
                // exists: views are only ever added) and nothing else of the handle; the
                // handle lives at a stable address inside `handle`'s `Arc`, which this struct
                // owns and drops after the guard (field order). So the borrow is valid for
                // the guard's whole life, and `'static` is never observable: the guard is
                // only reachable through `Deref` (tied to `&self`) or consumed by `unlock`.
                let guard = unsafe { extend_borrow::<$borrowed, $guard>(guard) };
                $name { guard, handle }
            }

            /// The handle this guard holds.
            pub fn handle(&self) -> &Arc<$handle> {
                &self.handle
            }

            /// Gives the grant back and reports whether it was still ours (see
            /// [`LockGuard::unlock`]).
            ///
            /// # Errors
            /// [`Error::LockLost`](crate::Error::LockLost) if it had been taken over or
            /// revoked.
            pub fn unlock(self) -> Result<()> {
                let $name { guard, handle } = self;
                let r = guard.unlock();
                drop(handle);
                r
            }
        }

        impl<$($gen)*> Deref for $name<$($args)*> {
            type Target = $guard;

            fn deref(&self) -> &$guard {
                &self.guard
            }
        }

        impl<$($gen)*> std::fmt::Debug for $name<$($args)*> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("path", &self.handle.path())
                    .field("token", &self.guard.token())
                    .field("owner_died", &self.guard.owner_died())
                    .finish()
            }
        }
    };
}

arc_guard!(
    /// Proof of holding a [`FairLock`] kept in an [`Arc`], returned by
    /// [`FairLock::lock_arc`]: it owns a clone of the `Arc`, so it has no lifetime and can be
    /// stored in a struct or returned from a function. It dereferences to the [`LockGuard`],
    /// whose methods it has: [`token`](LockGuard::token), [`owner_died`](LockGuard::owner_died),
    /// [`check`](LockGuard::check), [`extend`](LockGuard::extend); end it with
    /// [`ArcLockGuard::unlock`] (to learn whether the lock was still ours) or by dropping it.
    ///
    /// Like [`LockGuard`] it is not `Send`: the lock belongs to the thread that acquired it.
    ///
    /// ```
    /// use std::sync::Arc;
    /// let path = std::env::temp_dir().join(format!("fairlock-arc-{}.lock", std::process::id()));
    /// let lock = Arc::new(fairlock::FairLock::open(&path)?);
    ///
    /// struct Job { _hold: fairlock::ArcLockGuard }
    /// let job = Job { _hold: lock.lock_arc()? };    // no borrow of `lock` is kept
    /// assert!(lock.try_lock().is_err());
    /// drop(job);
    /// assert!(lock.try_lock().is_ok());
    /// # std::fs::remove_file(&path)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ArcLockGuard [] [],
    handle: FairLock,
    guard: LockGuard<'static>,
    borrowed: LockGuard<'_>,
);

impl ArcLockGuard {
    /// The lock this guard holds (the same as [`handle`](ArcLockGuard::handle)).
    pub fn fair_lock(&self) -> &Arc<FairLock> {
        &self.handle
    }
}

arc_guard!(
    /// Proof of holding a [`FairRLock`] kept in an [`Arc`] (from [`FairRLock::lock_arc`]): as
    /// [`ArcLockGuard`], one level of the re-entrant hold.
    ArcRLockGuard [] [],
    handle: FairRLock,
    guard: LockGuard<'static>,
    borrowed: LockGuard<'_>,
);

arc_guard!(
    /// Proof of holding a [`FairMutex<T>`] kept in an [`Arc`] (from [`FairMutex::lock_arc`]):
    /// it dereferences to the [`MutexGuard`], and through it to the value (`guard.field`,
    /// `**guard = value`). Not `Send`, as the `MutexGuard`.
    ArcMutexGuard [T: Pod] [T],
    handle: FairMutex<T>,
    guard: MutexGuard<'static, T>,
    borrowed: MutexGuard<'_, T>,
);

impl<T: Pod> std::ops::DerefMut for ArcMutexGuard<T> {
    fn deref_mut(&mut self) -> &mut MutexGuard<'static, T> {
        &mut self.guard
    }
}

arc_guard!(
    /// A read grant of a [`FairRwLock`] kept in an [`Arc`] (from [`FairRwLock::read_arc`]).
    ArcRwLockReadGuard [] [],
    handle: FairRwLock,
    guard: RwLockReadGuard<'static>,
    borrowed: RwLockReadGuard<'_>,
);

arc_guard!(
    /// A write grant of a [`FairRwLock`] kept in an [`Arc`] (from [`FairRwLock::write_arc`]).
    ArcRwLockWriteGuard [] [],
    handle: FairRwLock,
    guard: RwLockWriteGuard<'static>,
    borrowed: RwLockWriteGuard<'_>,
);

arc_guard!(
    /// A permit of a [`FairSemaphore`] kept in an [`Arc`] (from
    /// [`FairSemaphore::acquire_arc`]); `Send`, as the [`SemaphorePermit`].
    ArcSemaphorePermit [] [],
    handle: FairSemaphore,
    guard: SemaphorePermit<'static>,
    borrowed: SemaphorePermit<'_>,
);
