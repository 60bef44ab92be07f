//! The one place the crate takes its atomics from.
//!
//! Under `cfg(fairlock_loom)` these are loom's model-checked atomics, otherwise `core`'s. Every module
//! imports atomics from here, so the lock algorithm in [`crate::core`] runs unchanged under loom,
//! under Miri and over the shared mapping.

#[cfg(fairlock_loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, fence};

#[cfg(not(fairlock_loom))]
pub(crate) use core::sync::atomic::{AtomicU32, AtomicU64, fence};

pub(crate) use core::sync::atomic::Ordering;

/// Offers the CPU to another runnable thread: `sched_yield` in production, loom's yield under
/// loom.
#[inline]
pub(crate) fn yield_now() {
    #[cfg(fairlock_loom)]
    loom::thread::yield_now();
    #[cfg(not(fairlock_loom))]
    std::thread::yield_now();
}

/// One step of the next-in-line waiter's spin: a `pause` instruction in production, a yield
/// under loom (whose scheduler must be told). Deliberately not `crossbeam_utils::Backoff`:
/// its `snooze` turns into `sched_yield` after a few steps, and measurements here showed the
/// "spinning" waiter then mostly yielding (one `sched_yield` and a context switch per
/// acquisition), which cost contended throughput an order of magnitude (4 threads, 100 ns
/// sections). In a strict file the waiter keeps its CPU for `Tuning::spin_keep_cpu_ns`
/// before it yields; in a file with a bypass bound it yields from the start (see
/// `core::acquire::spin_while`).
#[inline]
pub(crate) fn spin_step() {
    #[cfg(fairlock_loom)]
    loom::thread::yield_now();
    #[cfg(not(fairlock_loom))]
    core::hint::spin_loop();
}
