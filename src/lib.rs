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
//! ## Layers
//!
//! * [`core`] — the algorithm over a [`core::LockState`] of atomics and a [`core::Platform`];
//!   no system calls, runs under loom and Miri.
//! * `sys` — futex, clocks, OFD-lock beacons, thread ids (Linux only).
//! * `file` — creating, validating, re-initialising and mapping lock files (private: a
//!   read-only view of a file is a type of its own that hands out no references into it).
//! * the API — [`FairLock`], [`FairRLock`], [`LockGuard`], [`OpenOptions`], [`Status`].

#![warn(missing_docs)]

/// Marks a named step of the protocol for the crash suite (private feature `__test-crash-points`, see
/// `src/sys/crash.rs`); nothing otherwise.
macro_rules! crash_point {
    ($name:literal) => {
        #[cfg(all(feature = "__test-crash-points", not(loom)))]
        $crate::sys::crash::hit($name);
    };
}
pub(crate) use crash_point;

pub mod core;
mod error;
mod primitive;

#[cfg(not(loom))]
mod api;
#[cfg(not(loom))]
mod file;
#[cfg(not(loom))]
mod sys;

/// Not part of the API: what the fuzz targets reach (header validation is pure and total).
///
/// The file layer itself is private: a read-only view of a file used to hand out `&AtomicU64`
/// into read-only memory through it, which safe code could store to (and fault).
///
/// ```compile_fail
/// let _ = fairlock::file::open_read_only;
/// ```
#[cfg(not(loom))]
#[doc(hidden)]
pub mod internal {
    pub use crate::file::{Verdict, validate_header};
}

pub use error::{Error, Result};

#[cfg(not(loom))]
pub use api::{
    guard::{FairLockGuard, FairRLockGuard, LockGuard},
    lock::FairLock,
    options::{DEFAULT_PARTICIPANTS, DEFAULT_SLOTS, OpenOptions},
    rlock::FairRLock,
    status::{Status, TicketInfo, inspect},
};
