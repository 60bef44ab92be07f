//! What the lock algorithm needs from the world: sleeping, waking, time and liveness.
//!
//! Production implements it with futexes, `CLOCK_MONOTONIC` and OFD-lock beacons
//! (`src/sys`); model tests implement it with yields and a scripted clock.

use crate::primitive::AtomicU64;

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

    /// Wakes every thread sleeping in [`Platform::wait`] on `word` (usually one).
    fn wake(&self, word: &AtomicU64);

    /// Sleeps a short while (a lapped waiter polling for its slot), never past `until`.
    fn pause(&self, until: Option<u64>);

    /// Offers the CPU to another runnable thread, from a spinning waiter, and returns
    /// promptly (`sched_yield` in production; by default a yield of loom's scheduler under
    /// loom, of the OS's otherwise). Test platforms may count the calls.
    fn yield_cpu(&self) {
        crate::primitive::yield_now();
    }

    /// Whether participant `index` is alive. `index` comes from the shared file and may be
    /// anything; implementations must not trust it.
    fn liveness(&self, index: u32) -> Liveness;

    /// Sleeps while the low 32 bits of `word` equal `expected`, watching the death notice of
    /// the holder's thread: beacon `beacon` (1 + index, as published in `Slot::beacon` or the
    /// header's `fast_hint`) of participant `index`'s process. Wakes at a wake of `word`, the
    /// beacon owner's death, `until`, or spuriously. `index` and `beacon` come from the shared
    /// file and may be anything; implementations must not trust them. The default (and
    /// wherever no beacon can be watched) waits for nothing and says so.
    fn watch_holder(
        &self,
        word: &AtomicU64,
        expected: u32,
        index: u32,
        beacon: u32,
        until: Option<u64>,
    ) -> Watched {
        let _ = (word, expected, index, beacon, until);
        Watched::Unavailable
    }
}

/// What [`Platform::watch_holder`] came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watched {
    /// No beacon could be watched (none published, none attachable, `futex_waitv` refused):
    /// nothing was waited for; the caller polls instead.
    Unavailable,
    /// The beacon's owner thread has ended (seen before or after the wait); its other
    /// watchers were woken.
    Died,
    /// The wait ended (a wake of the word, `until`, a signal, or spuriously).
    Waited,
}

/// Timing parameters of the waiting strategy.
#[derive(Clone, Copy, Debug)]
pub struct Tuning {
    /// How long the next-in-line waiter spins before parking.
    pub spin_ns: u64,
    /// How long of that spin keeps the CPU (in a file without a bypass bound); after it, the
    /// spinner yields the CPU every 32 steps (see `wait::spin_while`). At least `spin_ns`:
    /// never yields.
    pub spin_keep_cpu_ns: u64,
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
            spin_keep_cpu_ns: 5_000,
            head_poll_min_ns: 100_000,
            head_poll_ns: 1_000_000,
            idle_poll_ns: 50_000_000,
            grace_ns: 50_000_000,
        }
    }
}
