//! # fairlock
//!
//! A lock for threads **and processes** on one Linux machine that is
//!
//! * **strictly fair** — first come, first served, across processes; `try_lock` never jumps
//!   the queue;
//! * **fast** — uncontended `lock` + `unlock` is a few atomic operations and no system call;
//!   a hand-off wakes only the next waiter, and nudges the one after it to start spinning
//!   (targeted futex wakes, never a wake-all);
//! * **robust** — a holder or waiter killed at any instruction never blocks the others; a
//!   holder whose lease ran out is taken over and finds out it lost the lock; every grant
//!   carries a strictly increasing fencing token.
//!
//! Its state is a fixed-layout `#[repr(C)]` struct of atomics in a memory-mapped file (see
//! `docs/FILE_FORMAT.md`); waiters sleep on futexes; liveness comes from OFD-lock beacons the
//! kernel drops when a process dies.
//!
//! ```
//! use fairlock::FairLock;
//! # let path = std::env::temp_dir().join(format!("fairlock-lib-{}.lock", std::process::id()));
//! let lock = FairLock::open(&path)?;           // shared by every process that opens `path`
//! let guard = lock.lock()?;                     // waits its turn, FIFO
//! let token = guard.token();                    // fencing token: strictly increasing
//! if guard.owner_died() { /* the previous holder crashed: check the data */ }
//! guard.unlock()?;                              // or just drop it
//! # assert!(token > 0);
//! # std::fs::remove_file(&path)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## What is here
//!
//! * [`FairLock`] — the lock; [`FairRLock`] — re-entrant per thread; [`FairMutex<T>`] — a lock
//!   with a value of plain-old-data type `T` kept in the file (std's `Mutex<T>` across
//!   processes).
//! * [`LockGuard`] (one guard type for both locks), [`ArcLockGuard`] (owned, from
//!   [`FairLock::lock_arc`]), [`MutexGuard`] (derefs to the value).
//! * [`OpenOptions`] — leases, file mode, geometry; [`inspect`] and [`Status`] — holder and
//!   queue, read without disturbing them.
//! * [`Error`] — one error type; every variant about a file names it, `Display` says what
//!   failed and why (the OS reason included) once; it converts into [`std::io::Error`].
//!
//! [`LockGuard::owner_died`] mirrors `EOWNERDEAD` and means either that the previous holder
//! died *or* that its lease was taken over; [`LockGuard::check`] and [`LockGuard::unlock`]
//! tell a holder that it lost the lock (`Drop` cannot, so use `unlock` where it matters).
//!
//! ## Layers
//!
//! * `core` — the algorithm over a `LockState` of atomics and a `Platform`; no system calls,
//!   runs under loom and Miri (private; fairlock's own harnesses reach it through a hidden
//!   module that is not part of the API).
//! * `sys` — futex, clocks, OFD-lock beacons, thread ids (Linux only).
//! * `file` — creating, validating, re-initialising and mapping lock files (private: a
//!   read-only view of a file is a type of its own that hands out no references into it).
//! * the API — the types above.

#![warn(missing_docs)]
// Under loom only `core` is built: what the rest of the crate uses of it is unused then.
#![cfg_attr(fairlock_loom, allow(dead_code))]

/// Marks a named step of the protocol for the crash suite (private feature `__test-crash-points`, see
/// `src/sys/crash.rs`); nothing otherwise.
macro_rules! crash_point {
    ($name:literal) => {
        #[cfg(all(feature = "__test-crash-points", not(fairlock_loom)))]
        $crate::sys::crash::hit($name);
    };
}
pub(crate) use crash_point;

mod core;
mod error;
mod names;
mod primitive;
#[cfg(not(fairlock_loom))]
mod process;
#[cfg(not(fairlock_loom))]
mod raw;

#[cfg(not(fairlock_loom))]
mod api;
#[cfg(not(fairlock_loom))]
mod file;
#[cfg(not(fairlock_loom))]
mod sys;

/// Not part of the API, and not covered by semver: what fairlock's own harnesses reach.
///
/// The loom models, the proptest model and the fuzz targets drive the algorithm over a
/// [`LockState`](__internal::core::LockState) directly, and the header fuzzer calls the
/// (pure, total) header validation. Nothing here is meant for users; it may change in any
/// release.
///
/// The file layer itself stays private: a read-only view of a file used to hand out
/// `&AtomicU64` into read-only memory through it, which safe code could store to (and fault).
///
/// ```compile_fail
/// let _ = fairlock::file::open_read_only;
/// ```
///
/// ```compile_fail
/// let _ = fairlock::core::LockState::new;
/// ```
#[doc(hidden)]
pub mod __internal {
    /// The lock algorithm over a `&LockState` (see `src/core/`).
    pub mod core {
        pub use crate::core::*;
    }
    #[cfg(not(fairlock_loom))]
    pub use crate::file::{Verdict, validate_header};
}

/// The crate of [`FairMutex`]'s `Pod` bound, re-exported so that its version is the one
/// this crate uses (deriving `Pod` needs `bytemuck` with its `derive` feature in your own
/// `Cargo.toml`).
pub use bytemuck;
pub use error::{Error, Result};
#[cfg(not(fairlock_loom))]
pub use raw::acquire_async::AcquireFuture;

#[cfg(not(fairlock_loom))]
pub use api::{
    fd_form::{FdGrant, FdMode, unlock_fd},
    guard::LockGuard,
    kind_guard::{RwLockReadGuard, RwLockWriteGuard, SemaphorePermit},
    kind_options::{MutexOptions, RLockOptions, RwLockOptions, SemaphoreOptions},
    lock::{ArcLockGuard, FairLock},
    mutex::{ArcMutexGuard, FairMutex, MutexGuard},
    mutex_async::{MutexFuture, OwnedMutexGuard},
    options::{DEFAULT_PARTICIPANTS, DEFAULT_SLOTS, Fairness, OpenOptions},
    process_guard::ProcessGuard,
    rlock::{ArcRLockGuard, FairRLock},
    rwlock::{ArcRwLockReadGuard, ArcRwLockWriteGuard, FairRwLock},
    semaphore::{ArcSemaphorePermit, FairSemaphore},
    status::{LockKind, Status, TicketInfo, inspect},
};

/// Compile-time refusals, checked as doctests (`cargo test --doc`).
///
/// Guards stay on the thread that took the lock:
/// ```compile_fail
/// fn needs_send<T: Send>(_: T) {}
/// let l = fairlock::FairLock::open("/tmp/x.lock").unwrap();
/// needs_send(l.lock().unwrap());
/// ```
/// ```compile_fail
/// fn needs_send<T: Send>(_: T) {}
/// let l = std::sync::Arc::new(fairlock::FairLock::open("/tmp/x.lock").unwrap());
/// needs_send(l.lock_arc().unwrap());
/// ```
/// ```compile_fail
/// fn needs_send<T: Send>(_: T) {}
/// let l = fairlock::FairMutex::<u64>::open("/tmp/x.lock").unwrap();
/// needs_send(l.lock().unwrap());
/// ```
/// A `FairMutex` holds only plain old data (no pointers into one process's memory):
/// ```compile_fail
/// let _ = fairlock::FairMutex::<&'static str>::open("/tmp/x.lock");
/// ```
/// An owned guard never hands its inner guard out mutably (swapped between two handles, a
/// guard would outlive the handle it borrows):
/// ```compile_fail
/// let m = std::sync::Arc::new(fairlock::FairMutex::<u64>::open("/tmp/x.lock").unwrap());
/// let mut g = m.lock_arc().unwrap();
/// let _: &mut fairlock::MutexGuard<'static, u64> = &mut *g;
/// ```
/// ```compile_fail
/// let l = std::sync::Arc::new(fairlock::FairLock::open("/tmp/x.lock").unwrap());
/// let mut g = l.lock_arc().unwrap();
/// let _: &mut fairlock::LockGuard<'static> = &mut *g;
/// ```
/// Each kind's builder opens that kind, never a plain lock:
/// ```compile_fail
/// let _: fairlock::FairLock = fairlock::FairRwLock::options().open("/tmp/x.lock").unwrap();
/// ```
/// ```compile_fail
/// let _: fairlock::FairLock = fairlock::FairSemaphore::options().open("/tmp/x.lock").unwrap();
/// ```
/// A `FairMutex` takes no lease, and its builder has none:
/// ```compile_fail
/// let _ = fairlock::FairMutex::<u64>::options().lease(std::time::Duration::from_secs(1));
/// ```
/// The value cannot outlive its guard:
/// ```compile_fail
/// let m = fairlock::FairMutex::<u64>::open("/tmp/x.lock").unwrap();
/// let r: &u64 = { let g = m.lock().unwrap(); &*g };
/// ```
#[cfg(doctest)]
pub struct CompileFailChecks;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
