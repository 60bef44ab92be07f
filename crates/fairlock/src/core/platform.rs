//! What the lock algorithm needs from the world: sleeping, waking, time and liveness.
//!
//! Production implements it with futexes, `CLOCK_MONOTONIC` and OFD-lock beacons
//! (`src/sys`); model tests implement it with yields and a scripted clock.

use crate::primitive::{AtomicU32, AtomicU64};

/// Whether a participant (a process) is alive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Liveness {
    /// Certainly alive (or cannot be shown dead).
    Alive,
    /// Certainly dead: the kernel dropped its beacon. (A thread of ours that exits while holding
    /// gives its lock up itself; a live process is never called dead.)
    Dead,
}

/// The services the algorithm uses. Every method may be called from any thread.
pub trait Platform {
    /// Nanoseconds on a monotonic clock shared with [`Platform::wait`]'s deadlines.
    fn now_ns(&self) -> u64;

    /// A cheap, coarse reading of the same clock, for informational time stamps only.
    fn coarse_now_ns(&self) -> u64 {
        self.now_ns()
    }

    /// Sleeps while the low 32 bits of `word` equal `expected`: until [`Platform::wake`] on the
    /// same word, until `until` (on [`Platform::now_ns`]'s clock) passes, or spuriously.
    fn wait(&self, word: &AtomicU64, expected: u32, until: Option<u64>);

    /// Wakes the (at most one) thread sleeping in [`Platform::wait`] on `word`.
    fn wake(&self, word: &AtomicU64);

    /// Sleeps a short while (a lapped waiter polling for its slot), never past `until`.
    fn pause(&self, until: Option<u64>);

    /// Whether participant `index` is alive. `index` comes from the shared file and may be
    /// anything; implementations must not trust it.
    fn liveness(&self, index: u32) -> Liveness;

    /// The death notice of a holder's thread: the futex word of beacon `beacon` (1 + index,
    /// as published in `Slot::beacon` or the header's `fast_hint`) of participant `index`'s
    /// process, if it can be watched; its owner thread's death sets [`OWNER_DIED`] in it and
    /// wakes a watcher. `None` (the default, and wherever it cannot be attached): the waiter
    /// polls the holder's liveness instead. `index` and `beacon` come from the shared file and
    /// may be anything; implementations must not trust them.
    fn beacon(&self, index: u32, beacon: u32) -> Option<&AtomicU32> {
        let _ = (index, beacon);
        None
    }

    /// Sleeps while the low 32 bits of `word` equal `expected` *and* `beacon` equals
    /// `beacon_expected`: until a wake of either, `until`, or spuriously. The default waits on
    /// `word` alone, for at most a millisecond (so that a death is still seen soon).
    fn wait_watching(
        &self,
        word: &AtomicU64,
        expected: u32,
        beacon: &AtomicU32,
        beacon_expected: u32,
        until: Option<u64>,
    ) {
        let _ = (beacon, beacon_expected);
        let cap = self.now_ns().saturating_add(1_000_000);
        self.wait(word, expected, Some(until.map_or(cap, |u| u.min(cap))));
    }

    /// Wakes every watcher of a beacon whose owner died (the kernel woke one).
    fn wake_watchers(&self, beacon: &AtomicU32) {
        let _ = beacon;
    }

    /// Runs `f` under this process's lock for writing its participant entry's lease deadline
    /// (see [`crate::core::lease`]): two threads of one process never interleave their
    /// check-then-write of it. A lock of the process, never of the file: no other process
    /// needs it, and a process stopped while holding it stops only itself.
    fn with_lease_lock<R>(&self, f: impl FnOnce() -> R) -> R;
}

/// The bit the kernel sets in a robust futex word when its owner thread dies.
pub const OWNER_DIED: u32 = 0x4000_0000;

/// Timing parameters of the waiting strategy.
#[derive(Clone, Copy, Debug)]
pub struct Tuning {
    /// How long the next-in-line waiter spins before parking.
    pub spin_ns: u64,
    /// How often the next-in-line waiter first checks the holder's liveness and lease while
    /// parked; the interval doubles at each check up to `head_poll_ns`.
    pub head_poll_min_ns: u64,
    /// The longest interval between the next-in-line waiter's checks.
    pub head_poll_ns: u64,
    /// How often other parked waiters wake to re-check their position.
    pub idle_poll_ns: u64,
    /// How long a ticket granted before its taker published may stay unclaimed before it is
    /// skipped (the taker is presumed dead between taking the ticket and publishing).
    pub grace_ns: u64,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            spin_ns: 50_000,
            head_poll_min_ns: 100_000,
            head_poll_ns: 1_000_000,
            idle_poll_ns: 50_000_000,
            grace_ns: 50_000_000,
        }
    }
}
