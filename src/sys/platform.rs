//! The production [`Platform`]: futexes, `CLOCK_MONOTONIC`, OFD-lock beacons.

use std::fs::File;
use std::os::fd::AsFd;

use super::{clock, futex, ofd};
use crate::core::platform::Watched;
use crate::core::state::Participant;
use crate::core::{Liveness, Platform};
use crate::names::table::owner_liveness;
use crate::primitive::Ordering::{Acquire, Relaxed};
use crate::primitive::{AtomicU32, AtomicU64};

/// The platform as seen from one process's open lock file.
pub struct SysPlatform<'a> {
    /// The lock file (its open file description holds our beacon).
    pub file: &'a File,
    /// Our participant index.
    pub me: u32,
    /// For a lock in a file of named locks: how its participants are told alive (else each
    /// participant's own beacon byte says it).
    pub owners: Option<Owners<'a>>,
    /// Number of participant entries in the file.
    pub participants: u32,
    /// The participant entries (for the beacon segments their processes recorded).
    pub entries: &'a [Participant],
    /// A waiter's bell (see `futex::wait_ringing`): every sleep also ends once it is rung
    /// (non-zero). `None` for a waiter nobody calls back that way.
    pub bell: Option<&'a AtomicU32>,
}

/// The participants of a lock in a file of named locks: each entry names its owning process's
/// file-wide entry (see `core::name_layout`).
#[derive(Clone, Copy)]
pub struct Owners<'a> {
    /// The lock's participant entries.
    pub record: &'a [Participant],
    /// The file-wide entries, one per process.
    pub processes: &'a [Participant],
    /// Our file-wide entry and the generation of our claim of it.
    pub me: (u32, u64),
}

impl Owners<'_> {
    /// The beacon segment of the process that owns entry `index` of the lock, read from its
    /// file-wide entry — only while that entry is still the owner word's claim (its
    /// generation unchanged around the read): a file-wide entry claimed since by another
    /// process names *that* process's segment, whose beacons say nothing of the holder (and
    /// whose claimer does not revoke the records the dead one held, unlike a file of one
    /// lock's).
    fn identity(&self, index: u32) -> Option<u64> {
        // Acquire: pairs with the claimer's compare-and-swap of the owner word.
        let word = self.record.get(index as usize)?.claim.load(Acquire);
        let k = crate::names::layout::owner_of(word)?;
        let process = self.processes.get(k as usize)?;
        // Acquire (all three): the claimer bumps the generation, then stores the identity
        // (Release); an identity newer than `before` makes `after` differ.
        let before = process.generation.load(Acquire);
        if !crate::names::layout::same_generation(word, before) {
            return None;
        }
        let identity = process.claim.load(Acquire);
        let after = process.generation.load(Acquire);
        (after == before).then_some(identity)
    }

    /// Whether the owner of entry `index` lives, probing beacons through `file`.
    pub fn liveness(&self, file: &File, index: u32) -> Liveness {
        let Some(entry) = self.record.get(index as usize) else {
            return Liveness::Alive;
        };
        // Acquire: pairs with the claimer's compare-and-swap of the owner word.
        self.liveness_of(file, entry.claim.load(Acquire))
    }

    /// Whether the owner that owner word `word` names lives (for a claimer, about the very
    /// word it will compare-and-swap: judging a reloaded word instead would let a live
    /// owner's `W → 0 → W` pass as dead).
    pub fn liveness_of(&self, file: &File, word: u64) -> Liveness {
        owner_liveness(
            word,
            self.me,
            // Acquire: pairs with the claimer's bump (informational either way).
            |j| {
                self.processes
                    .get(j as usize)
                    .map(|p| p.generation.load(Acquire))
            },
            |j| ofd::is_held(file.as_fd(), u64::from(j)).ok(),
        )
    }
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
        match self.bell {
            Some(bell) => futex::wait_ringing(word, expected, bell, until),
            None => futex::wait(word, expected, until),
        }
    }

    fn wake(&self, word: &AtomicU64) {
        futex::wake(word);
    }

    fn pause(&self, until: Option<u64>) {
        let now = clock::monotonic_ns();
        let nap = until.map_or(200_000, |u| u.saturating_sub(now).min(200_000));
        std::thread::sleep(std::time::Duration::from_nanos(nap.max(1)));
    }

    fn watch_holder(
        &self,
        word: &AtomicU64,
        expected: u32,
        index: u32,
        beacon: u32,
        until: Option<u64>,
    ) -> Watched {
        if !futex::waitv_works() || index >= self.participants || beacon == 0 {
            return Watched::Unavailable;
        }
        let identity = match &self.owners {
            // Acquire: pairs with the owner's Release store, made after it cleaned up what a
            // dead predecessor of its entry held; the segment's nonce makes a stale or reused
            // identity harmless.
            None => self
                .entries
                .get(index as usize)
                .map_or(0, |e| e.claim.load(Acquire)),
            Some(owners) => owners.identity(index).unwrap_or(0),
        };
        let Some(att) = super::beacon::attach(identity, beacon - 1) else {
            return Watched::Unavailable;
        };
        let died = || {
            // Acquire: the death comes after everything the dead thread wrote.
            if att.word().load(Acquire) & super::beacon::OWNER_DIED != 0 {
                // The kernel woke one watcher of the beacon; there may be more (one per lock
                // its thread held): wake them all, whatever woke us.
                futex::wake_all_u32(att.word());
                true
            } else {
                false
            }
        };
        if died() {
            return Watched::Died;
        }
        // Relaxed: the value futex_waitv compares; any change wakes us.
        let v = att.word().load(Relaxed);
        futex::wait_watching(word, expected, att.word(), v, self.bell, until);
        if died() {
            Watched::Died
        } else {
            Watched::Waited
        }
    }

    fn liveness(&self, index: u32) -> Liveness {
        // Our own process: its threads are alive (a thread that exits while holding gives the
        // lock up itself). An index outside the table cannot be judged: never call it dead.
        if index == self.me || index >= self.participants {
            return Liveness::Alive;
        }
        if let Some(owners) = &self.owners {
            return owners.liveness(self.file, index);
        }
        match ofd::is_held(self.file.as_fd(), u64::from(index)) {
            Ok(false) => Liveness::Dead,
            Ok(true) | Err(_) => Liveness::Alive,
        }
    }
}
