//! The one place the crate takes its atomics from.
//!
//! Under `cfg(loom)` these are loom's model-checked atomics, otherwise `core`'s. Every module
//! imports atomics from here, so the lock algorithm in [`crate::core`] runs unchanged under loom,
//! under Miri and over the shared mapping.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64};

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicU32, AtomicU64};

pub(crate) use core::sync::atomic::Ordering;

/// Exponential back-off for the one waiter that spins: `crossbeam_utils::Backoff` in
/// production (spins, then yields the CPU), a plain yield under loom.
pub(crate) struct Backoff {
    #[cfg(not(loom))]
    inner: crossbeam_utils::Backoff,
}

impl Backoff {
    #[inline]
    pub(crate) fn new() -> Backoff {
        Backoff {
            #[cfg(not(loom))]
            inner: crossbeam_utils::Backoff::new(),
        }
    }

    #[inline]
    pub(crate) fn snooze(&self) {
        #[cfg(not(loom))]
        self.inner.snooze();
        #[cfg(loom)]
        loom::thread::yield_now();
    }
}
