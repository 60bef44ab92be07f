//! The production [`Platform`]: futexes, `CLOCK_MONOTONIC`, OFD-lock beacons.

use std::fs::File;
use std::os::fd::AsFd;

use super::{clock, futex, ofd};
use crate::core::{Liveness, Platform};
use crate::primitive::AtomicU64;

/// The platform as seen from one process's open lock file.
pub struct SysPlatform<'a> {
    /// The lock file (its open file description holds our beacon).
    pub file: &'a File,
    /// Our participant index.
    pub me: u32,
    /// Number of participant entries in the file.
    pub participants: u32,
    /// This process's lock for writing its lease deadline into its participant entry.
    pub lease_lock: &'a std::sync::Mutex<()>,
}

impl Platform for SysPlatform<'_> {
    #[inline]
    fn now_ns(&self) -> u64 {
        clock::monotonic_ns()
    }

    #[inline]
    fn coarse_now_ns(&self) -> u64 {
        clock::coarse_ns()
    }

    fn wait(&self, word: &AtomicU64, expected: u32, until: Option<u64>) {
        futex::wait(word, expected, until);
    }

    fn wake(&self, word: &AtomicU64) {
        futex::wake(word);
    }

    fn pause(&self, until: Option<u64>) {
        let now = clock::monotonic_ns();
        let nap = until.map_or(200_000, |u| u.saturating_sub(now).min(200_000));
        std::thread::sleep(std::time::Duration::from_nanos(nap.max(1)));
    }

    fn liveness(&self, index: u32) -> Liveness {
        // Our own process: its threads are alive (a thread that exits while holding gives the
        // lock up itself). An index outside the table cannot be judged: never call it dead.
        if index == self.me || index >= self.participants {
            return Liveness::Alive;
        }
        match ofd::is_held(self.file.as_fd(), index) {
            Ok(false) => Liveness::Dead,
            Ok(true) | Err(_) => Liveness::Alive,
        }
    }

    fn with_lease_lock<R>(&self, f: impl FnOnce() -> R) -> R {
        // Poisoning cannot leave the deadline half-written (it is one atomic store): go on.
        let _g = self.lease_lock.lock().unwrap_or_else(|e| e.into_inner());
        f()
    }
}
