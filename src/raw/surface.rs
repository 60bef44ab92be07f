//! The acquire surface, written once: every handle's `lock` / `try_lock` / `lock_timeout` /
//! `lock_until` / `lock_interruptible` and their owned (`Arc`) forms, generated over its
//! [`RawLock`](crate::raw::handle::RawLock) for its kind's mode and guard (as `lock_api`'s
//! `Mutex<R, T>` over a `RawMutex`). A handle's `impl` block invokes [`acquire_surface!`] once
//! per way of holding it (a `FairRwLock` twice: read and write).

/// Generates the eight acquire methods of one way of holding a handle whose [`RawLock`] is
/// its field `raw`.
///
/// * `what`: what is waited for, for the docs ("the lock", "a read grant", "a permit");
/// * `mode`: the [`Mode`](crate::raw::acquire::Mode) asked for;
/// * `guard`: the guard type returned (with lifetime `'_`), built from the raw guard by
///   `$guard_ty::from_raw`;
/// * `arc`: the owned guard type, built by `$arc_ty::new(Arc<Self>, guard)`;
/// * the eight method names: wait, try, timeout, until, interruptible, and the owned forms of
///   wait, try and timeout.
///
/// [`RawLock`]: crate::raw::handle::RawLock
macro_rules! acquire_surface {
    (
        what: $what:literal,
        mode: $mode:expr,
        guard: $guard_ty:ident [$($guard:tt)+],
        arc: $arc_ty:ident [$($arc:tt)+],
        names: [
            $lock:ident, $try_lock:ident, $lock_timeout:ident, $lock_until:ident,
            $lock_interruptible:ident, $lock_arc:ident, $try_lock_arc:ident,
            $lock_arc_timeout:ident $(,)?
        ] $(,)?
    ) => {
        #[doc = concat!("Waits in line for ", $what, ".")]
        ///
        /// # Errors
        /// [`Error::WouldDeadlock`](crate::Error::WouldDeadlock) if this thread holds it in a
        /// way that would wait for itself; [`Error::Corrupt`](crate::Error::Corrupt) if the
        /// shared state is damaged; [`Error::DataMismatch`](crate::Error::DataMismatch) for a
        /// `FairMutex` whose path, reopened after a `fork`, holds other data.
        #[inline]
        pub fn $lock(&self) -> $crate::Result<$($guard)+> {
            $guard_ty::from_raw(
                self.raw.acquire($mode, $crate::raw::acquire::Wait::Until(None, None)),
            )
        }

        #[doc = concat!("Takes ", $what, " only if it is granted at once: never jumping the queue.")]
        ///
        /// # Errors
        #[doc = concat!("[`Error::WouldBlock`](crate::Error::WouldBlock) if it is not; as [`", stringify!($lock), "`](Self::", stringify!($lock), ") otherwise.")]
        pub fn $try_lock(&self) -> $crate::Result<$($guard)+> {
            $guard_ty::from_raw(self.raw.acquire($mode, $crate::raw::acquire::Wait::Now))
        }

        #[doc = concat!("Waits in line for ", $what, " for at most `timeout`. A waiter that times out")]
        /// gives up its ticket, so nobody behind it waits for it; if the grant races the
        /// timeout, the grant wins. `Duration::ZERO` takes it only if it is granted at once
        /// (after one recovery pass).
        ///
        /// # Errors
        #[doc = concat!("[`Error::Timeout`](crate::Error::Timeout); as [`", stringify!($lock), "`](Self::", stringify!($lock), ") otherwise.")]
        pub fn $lock_timeout(&self, timeout: std::time::Duration) -> $crate::Result<$($guard)+> {
            let deadline = $crate::raw::acquire::deadline_after(timeout);
            $guard_ty::from_raw(
                self.raw.acquire($mode, $crate::raw::acquire::Wait::Until(Some(deadline), None)),
            )
        }

        #[doc = concat!("Waits in line for ", $what, " until `deadline` at most (a deadline in the past")]
        #[doc = concat!("gives up after one recovery pass); otherwise as [`", stringify!($lock_timeout), "`](Self::", stringify!($lock_timeout), ").")]
        ///
        /// # Errors
        #[doc = concat!("[`Error::Timeout`](crate::Error::Timeout); as [`", stringify!($lock), "`](Self::", stringify!($lock), ") otherwise.")]
        pub fn $lock_until(&self, deadline: std::time::Instant) -> $crate::Result<$($guard)+> {
            let deadline = $crate::raw::acquire::deadline_at(deadline);
            $guard_ty::from_raw(
                self.raw.acquire($mode, $crate::raw::acquire::Wait::Until(Some(deadline), None)),
            )
        }

        #[doc = concat!("Waits in line for ", $what, " until `deadline` (or for good without one), and")]
        /// also gives its place up as soon as `stop()` returns true: for a caller that must
        /// stay responsive while it waits (a signal to honour, a shutdown flag, a language
        /// runtime's `KeyboardInterrupt`). `stop` is called by the waiting thread after every
        /// wake-up — a signal delivered to it interrupts the sleep at once — and at least every
        /// 50 ms; not on the uncontended path, which never waits. A grant that races the
        /// interruption wins: the guard is returned. A panic in `stop` gives the place up and
        /// goes on once it is given up.
        ///
        /// # Errors
        /// [`Error::Interrupted`](crate::Error::Interrupted) once `stop()` said so;
        #[doc = concat!("[`Error::Timeout`](crate::Error::Timeout) at the deadline; as [`", stringify!($lock), "`](Self::", stringify!($lock), ") otherwise.")]
        pub fn $lock_interruptible(
            &self,
            deadline: Option<std::time::Instant>,
            mut stop: impl FnMut() -> bool,
        ) -> $crate::Result<$($guard)+> {
            let deadline = deadline.map($crate::raw::acquire::deadline_at);
            $guard_ty::from_raw(self.raw.acquire(
                $mode,
                $crate::raw::acquire::Wait::Until(deadline, Some(&mut stop)),
            ))
        }

        #[doc = concat!("Like [`", stringify!($lock), "`](Self::", stringify!($lock), "), for a handle in an [`Arc`](std::sync::Arc): the guard")]
        /// owns a clone of the `Arc` instead of borrowing the handle, so it can be stored in a
        /// struct or returned from a function (as `parking_lot`'s `lock_arc`).
        ///
        /// # Errors
        #[doc = concat!("As [`", stringify!($lock), "`](Self::", stringify!($lock), ").")]
        pub fn $lock_arc(self: &std::sync::Arc<Self>) -> $crate::Result<$($arc)+> {
            let guard = self.$lock()?;
            Ok($arc_ty::new(std::sync::Arc::clone(self), guard))
        }

        #[doc = concat!("Like [`", stringify!($try_lock), "`](Self::", stringify!($try_lock), "), with an owned guard as [`", stringify!($lock_arc), "`](Self::", stringify!($lock_arc), ").")]
        ///
        /// # Errors
        #[doc = concat!("As [`", stringify!($try_lock), "`](Self::", stringify!($try_lock), ").")]
        pub fn $try_lock_arc(self: &std::sync::Arc<Self>) -> $crate::Result<$($arc)+> {
            let guard = self.$try_lock()?;
            Ok($arc_ty::new(std::sync::Arc::clone(self), guard))
        }

        #[doc = concat!("Like [`", stringify!($lock_timeout), "`](Self::", stringify!($lock_timeout), "), with an owned guard as [`", stringify!($lock_arc), "`](Self::", stringify!($lock_arc), ").")]
        ///
        /// # Errors
        #[doc = concat!("As [`", stringify!($lock_timeout), "`](Self::", stringify!($lock_timeout), ").")]
        pub fn $lock_arc_timeout(
            self: &std::sync::Arc<Self>,
            timeout: std::time::Duration,
        ) -> $crate::Result<$($arc)+> {
            let guard = self.$lock_timeout(timeout)?;
            Ok($arc_ty::new(std::sync::Arc::clone(self), guard))
        }
    };
}
pub(crate) use acquire_surface;

/// Generates the six acquire methods of one way of holding a handle for the **process**
/// (a [`ProcessGuard`](crate::ProcessGuard): `Send`, released by any thread, kept when its
/// thread exits): wait, try, timeout, interruptible with a deadline, and the asynchronous
/// wait and timeout.
macro_rules! process_surface {
    (
        what: $what:literal,
        mode: $mode:expr,
        names: [
            $lock:ident, $try_lock:ident, $lock_timeout:ident, $lock_interruptible:ident,
            $lock_async:ident, $lock_async_timeout:ident $(,)?
        ] $(,)?
    ) => {
        #[doc = concat!("Waits in line for ", $what, " without blocking the calling thread: a future (for")]
        /// any async runtime) that resolves to a [`ProcessGuard`](crate::ProcessGuard), which
        /// is `Send`, so the task may move between threads while it holds it.
        ///
        /// Its place in line is taken at its first poll (tasks are served in the order they
        /// first polled, with threads and other processes, first come first served); a waiter
        /// thread of the library's own waits for the grant and wakes the task. Dropping the
        /// future before it resolves gives its place up at once (a grant made meanwhile is
        /// given back), so `tokio::time::timeout` and `select!` are safe. The future owns what
        /// it needs: it may outlive the handle. Leases, tokens and
        /// [`owner_died`](crate::ProcessGuard::owner_died) are as for the blocking form (see
        /// [`AcquireFuture`](crate::AcquireFuture) for an example).
        ///
        /// # Errors
        /// (From the future.) [`Error::Corrupt`](crate::Error::Corrupt) if the shared state
        /// is damaged; [`Error::Io`](crate::Error::Io) if no waiter thread could be started.
        pub fn $lock_async(&self) -> $crate::AcquireFuture {
            self.raw.acquire_async($mode, None)
        }

        #[doc = concat!("Like [`", stringify!($lock_async), "`](Self::", stringify!($lock_async), "), giving the place up after `timeout` (the")]
        /// deadline is counted from this call; a grant that races it wins).
        ///
        /// # Errors
        /// (From the future.) [`Error::Timeout`](crate::Error::Timeout) after `timeout`; as
        #[doc = concat!("[`", stringify!($lock_async), "`](Self::", stringify!($lock_async), ") otherwise.")]
        pub fn $lock_async_timeout(&self, timeout: std::time::Duration) -> $crate::AcquireFuture {
            self.raw
                .acquire_async($mode, Some($crate::raw::acquire::deadline_after(timeout)))
        }

        #[doc = concat!("Waits in line for ", $what, " for this process rather than the calling thread:")]
        /// the [`ProcessGuard`](crate::ProcessGuard) is `Send`, any thread may release it, and
        /// its thread's exit leaves it held. A thread that holds the lock already is not
        /// refused: it waits behind its own grant, as with `threading.Lock`.
        ///
        /// # Errors
        /// [`Error::Corrupt`](crate::Error::Corrupt) if the shared state is damaged.
        pub fn $lock(&self) -> $crate::Result<$crate::ProcessGuard> {
            let r = self.raw.acquire_for_process($mode, $crate::raw::acquire::Wait::Until(None, None));
            $crate::ProcessGuard::from_raw(&self.raw, r)
        }

        #[doc = concat!("Like [`", stringify!($lock), "`](Self::", stringify!($lock), "), only if it is granted at once: never jumping the queue.")]
        ///
        /// # Errors
        /// [`Error::WouldBlock`](crate::Error::WouldBlock) if it is not.
        pub fn $try_lock(&self) -> $crate::Result<$crate::ProcessGuard> {
            let r = self.raw.acquire_for_process($mode, $crate::raw::acquire::Wait::Now);
            $crate::ProcessGuard::from_raw(&self.raw, r)
        }

        #[doc = concat!("Like [`", stringify!($lock), "`](Self::", stringify!($lock), "), for at most `timeout` (giving the place up after it).")]
        ///
        /// # Errors
        /// [`Error::Timeout`](crate::Error::Timeout).
        pub fn $lock_timeout(
            &self,
            timeout: std::time::Duration,
        ) -> $crate::Result<$crate::ProcessGuard> {
            let deadline = $crate::raw::acquire::deadline_after(timeout);
            let r = self.raw.acquire_for_process(
                $mode,
                $crate::raw::acquire::Wait::Until(Some(deadline), None),
            );
            $crate::ProcessGuard::from_raw(&self.raw, r)
        }

        #[doc = concat!("Like [`", stringify!($lock), "`](Self::", stringify!($lock), "), until `deadline` if any, giving the place up as soon as")]
        /// `stop()` returns true (as the thread's `_interruptible` form).
        ///
        /// # Errors
        /// [`Error::Interrupted`](crate::Error::Interrupted) once `stop()` said so;
        /// [`Error::Timeout`](crate::Error::Timeout) at the deadline.
        pub fn $lock_interruptible(
            &self,
            deadline: Option<std::time::Instant>,
            mut stop: impl FnMut() -> bool,
        ) -> $crate::Result<$crate::ProcessGuard> {
            let deadline = deadline.map($crate::raw::acquire::deadline_at);
            let r = self.raw.acquire_for_process(
                $mode,
                $crate::raw::acquire::Wait::Until(deadline, Some(&mut stop)),
            );
            $crate::ProcessGuard::from_raw(&self.raw, r)
        }
    };
}
pub(crate) use process_surface;
