//! The guards of the shared kinds: [`RwLockReadGuard`], [`RwLockWriteGuard`] and
//! [`SemaphorePermit`]. Each is a [`LockGuard`] under a name that says what it holds; the
//! grant, its token, its lease and its release work exactly as a `FairLock`'s.

use std::time::Duration;

use crate::api::guard::LockGuard;
use crate::error::Result;

macro_rules! kind_guard {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[must_use = "the grant is given back as soon as the guard is dropped"]
        #[derive(Debug)]
        pub struct $name<'a> {
            inner: LockGuard<'a>,
        }

        impl<'a> $name<'a> {
            pub(crate) fn new(inner: LockGuard<'a>) -> Self {
                $name { inner }
            }

            /// The guard of a raw grant (see `crate::raw::surface`).
            #[inline]
            pub(crate) fn from_raw(r: Result<LockGuard<'a>>) -> Result<Self> {
                r.map($name::new)
            }

            /// How many barges overtook this grant's waiter: always 0, as the shared kinds
            /// take no bypass bound (see [`LockGuard::overtaken`]).
            pub fn overtaken(&self) -> u32 {
                self.inner.overtaken()
            }

            /// The grant as a plain guard.
            pub(crate) fn into_inner(self) -> LockGuard<'a> {
                self.inner
            }

            /// The fencing token of this grant: `ticket + 1`. Tokens strictly increase in
            /// grant order over all grants of the file; see the type's documentation for what
            /// a shared grant's token means.
            pub fn token(&self) -> u64 {
                self.inner.token()
            }

            /// Whether a holder before this grant did not give its grant back: it died, or its
            /// lease was taken over. Reported to the first grant made after the death was
            /// found (possibly a spurious `true` if the one who found it died right after).
            pub fn owner_died(&self) -> bool {
                self.inner.owner_died()
            }

            /// `Ok` while the grant is ours; [`Error::LockLost`](crate::Error::LockLost) once
            /// its lease was taken over (or, in a forked child, always: the grant is the
            /// parent's).
            ///
            /// # Errors
            /// [`Error::LockLost`](crate::Error::LockLost).
            pub fn check(&self) -> Result<()> {
                self.inner.check()
            }

            /// Extends the lease to `d` from now (a handle opened with a lease only).
            ///
            /// # Errors
            /// [`Error::LockLost`](crate::Error::LockLost) if the lease was already taken over,
            /// [`Error::InvalidOption`](crate::Error::InvalidOption) without a lease or for
            /// zero.
            pub fn extend(&self, d: Duration) -> Result<()> {
                self.inner.extend(d)
            }

            /// The lease this grant was made with, if any.
            pub fn lease(&self) -> Option<Duration> {
                self.inner.lease()
            }

            /// Gives the grant back (as dropping the guard does), reporting whether it was
            /// still ours.
            ///
            /// # Errors
            /// [`Error::LockLost`](crate::Error::LockLost) if its lease had been taken over.
            pub fn unlock(self) -> Result<()> {
                self.inner.unlock()
            }
        }
    };
}

kind_guard!(
    /// A read (shared) grant of a [`FairRwLock`](crate::FairRwLock): other readers may hold
    /// with it, writers not. Its token is larger than that of every write granted before it
    /// and smaller than that of every write granted after it; readers that hold together have
    /// distinct tokens in no particular relation to each other.
    RwLockReadGuard
);

kind_guard!(
    /// A write (exclusive) grant of a [`FairRwLock`](crate::FairRwLock): nobody else holds.
    /// Its token is larger than every token granted before it, reads included: a store that
    /// rejects tokens below the largest it has seen fences writers as with a `FairLock`.
    RwLockWriteGuard
);

kind_guard!(
    /// One permit of a [`FairSemaphore`](crate::FairSemaphore). Tokens strictly increase in
    /// grant order.
    ///
    /// Unlike the other guards, a permit is not its thread's: it is `Send`, so another thread
    /// may release it (as `threading.Semaphore.release` may be called by any thread). A thread
    /// that exits holding a permit does not give it up; the process's death does.
    SemaphorePermit
);

// SAFETY: a `LockGuard` is `!Send` only by its marker: its fields are a `&Shared` (`Shared` is
// `Sync`: atomics, a mutex, a mapping of atomics), a ticket, a lease, a thread id and a flag.
// The marker keeps an exclusive grant on the thread recorded in the process's `Hold` (its
// re-entrancy, its thread-exit watch); a weighted grant is never recorded there
// (`RawLock::acquire_weighted`, src/raw/acquire.rs), so releasing a permit from another thread finds no `Hold` of
// its own (the thread id it compares belongs to no exclusive grant of a semaphore file) and
// releases by ticket and participant, which are the process's, not the thread's.
unsafe impl Send for SemaphorePermit<'_> {}
