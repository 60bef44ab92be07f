//! A [`Platform`] for tests: a clock the test moves by hand, participants the test declares
//! dead, and waits that only yield. Used by unit tests, property tests, fuzzing and loom.

use crate::core::platform::{Liveness, Platform};
use crate::primitive::{AtomicU64, Ordering::Relaxed, yield_now};

/// A scripted platform. Participants `0..64` can be declared dead.
pub struct ModelPlatform {
    now: AtomicU64,
    dead: AtomicU64,
    auto_tick: u64,
}

impl ModelPlatform {
    /// Clock at 1 s, everyone alive. Each `now_ns` call advances the clock by `auto_tick` ns
    /// (0: the clock moves only through [`ModelPlatform::advance`]).
    pub fn new(auto_tick: u64) -> ModelPlatform {
        ModelPlatform {
            now: AtomicU64::new(1_000_000_000),
            dead: AtomicU64::new(0),
            auto_tick,
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, ns: u64) {
        self.now.fetch_add(ns, Relaxed);
    }

    /// Declares participant `i` (< 64) dead or alive.
    pub fn set_dead(&self, i: u32, dead: bool) {
        let bit = 1u64 << (i % 64);
        if dead {
            self.dead.fetch_or(bit, Relaxed);
        } else {
            self.dead.fetch_and(!bit, Relaxed);
        }
    }
}

impl Platform for ModelPlatform {
    fn now_ns(&self) -> u64 {
        self.now.fetch_add(self.auto_tick, Relaxed)
    }

    fn wait(&self, _word: &AtomicU64, _expected: u32, _until: Option<u64>) {
        yield_now();
    }

    fn wake(&self, _word: &AtomicU64) {}

    fn pause(&self, _until: Option<u64>) {
        yield_now();
    }

    fn liveness(&self, index: u32) -> Liveness {
        if index < 64 && self.dead.load(Relaxed) & (1 << index) != 0 {
            Liveness::Dead
        } else {
            Liveness::Alive
        }
    }
}
