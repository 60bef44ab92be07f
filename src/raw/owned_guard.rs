//! The owned guards, written once: [`arc_guard!`] makes, for a guard type, the guard that
//! holds its handle through an `Arc` (as `parking_lot`'s `ArcMutexGuard`), for holds that
//! outlive a borrow. Each handle's file invokes it for its guards; the `*_arc` methods of every
//! handle make them (see `crate::raw::surface`).

/// `guard`, borrowing for `'static` instead of its own lifetime.
///
/// # Safety
/// `A` and `B` must be the same type but for lifetimes, and the caller must keep what `guard`
/// borrows alive, at a stable address, for as long as the result lives.
pub(crate) unsafe fn extend_borrow<A, B>(guard: A) -> B {
    debug_assert_eq!(size_of::<A>(), size_of::<B>());
    let guard = std::mem::ManuallyDrop::new(guard);
    // SAFETY: the caller's promise: `B` is `A` with another lifetime (same layout), and the
    // value is read once from a `ManuallyDrop` that is never dropped.
    unsafe { std::ptr::read((&*guard as *const A).cast::<B>()) }
}

macro_rules! arc_guard {
    // What the owned guard dereferences to: the guard (shared access only, so that the
    // `'static` guard can never be moved out or swapped with another handle's), or, for a
    // guard of a value, the value itself (shared and exclusive access).
    (@deref guard, $name:ident [$($gen:tt)*] [$($args:tt)*], $guard:ty) => {
        impl<$($gen)*> std::ops::Deref for $name<$($args)*> {
            type Target = $guard;

            fn deref(&self) -> &$guard {
                &self.guard
            }
        }
    };
    (@deref value($value:ty), $name:ident [$($gen:tt)*] [$($args:tt)*], $guard:ty) => {
        impl<$($gen)*> std::ops::Deref for $name<$($args)*> {
            type Target = $value;

            fn deref(&self) -> &$value {
                &self.guard
            }
        }

        impl<$($gen)*> std::ops::DerefMut for $name<$($args)*> {
            fn deref_mut(&mut self) -> &mut $value {
                &mut self.guard
            }
        }
    };
    (
        $(#[$doc:meta])*
        $name:ident [$($gen:tt)*] [$($args:tt)*],
        handle: $handle:ty,
        guard: $guard:ty,
        borrowed: $borrowed:ty,
        deref: $($deref:ident)? $(($value:ty))? $(,)?
    ) => {
        $(#[$doc])*
        #[must_use = "the grant is given back as soon as the guard is dropped"]
        pub struct $name<$($gen)*> {
            // Declared before `handle`: fields drop in order, so the grant is given back while
            // the handle it borrows from is still alive.
            guard: $guard,
            handle: std::sync::Arc<$handle>,
        }

        impl<$($gen)*> $name<$($args)*> {
            pub(crate) fn new(handle: std::sync::Arc<$handle>, guard: $borrowed) -> Self {
                // SAFETY: the guard borrows the handle's view of the file (a `Shared` in an
                // `Arc` that the handle's list of views keeps for as long as the handle
                // exists: views are only ever added) and nothing else of the handle; the
                // handle lives at a stable address inside `handle`'s `Arc`, which this struct
                // owns and drops after the guard (field order). So the borrow is valid for
                // the guard's whole life, and `'static` is never observable: the guard is
                // only reachable as a shared reference tied to `&self` (`Deref`, `guard`),
                // never as `&mut` (so it cannot be moved out or swapped with another handle's
                // guard), or consumed by `unlock`.
                let guard = unsafe {
                    $crate::raw::owned_guard::extend_borrow::<$borrowed, $guard>(guard)
                };
                $name { guard, handle }
            }

            /// The guard this owned guard holds (its token, its lease, whether the owner died).
            pub fn guard(&self) -> &$guard {
                &self.guard
            }

            /// The handle this guard holds.
            pub fn handle(&self) -> &std::sync::Arc<$handle> {
                &self.handle
            }

            /// Gives the grant back and reports whether it was still ours (see
            /// [`LockGuard::unlock`](crate::LockGuard::unlock)).
            ///
            /// # Errors
            /// [`Error::LockLost`](crate::Error::LockLost) if it had been taken over or
            /// revoked.
            pub fn unlock(self) -> $crate::Result<()> {
                let $name { guard, handle } = self;
                let r = guard.unlock();
                drop(handle);
                r
            }
        }

        $crate::raw::owned_guard::arc_guard!(
            @deref $($deref)? $(($value))?, $name [$($gen)*] [$($args)*], $guard
        );

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
pub(crate) use arc_guard;
