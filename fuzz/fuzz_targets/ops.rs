//! Operation sequences against the core on heap memory, with arbitrary (corrupt) words
//! written into the shared state between them: never a panic, never an endless loop (every
//! wait has a deadline on an auto-ticking clock).
#![no_main]

use std::sync::atomic::Ordering::Relaxed;

use fairlock::__internal::core::model::ModelPlatform;
use fairlock::__internal::core::{Watch, recover};
use fairlock::__internal::core::{
    Grant, Me, OwnedState, Platform, Tuning, advance, check, extend, lock, release, revoke_own,
    try_lock,
};
use libfuzzer_sys::fuzz_target;

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn u64(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for _ in 0..8 {
            v = v << 8 | u64::from(self.u8()?);
        }
        Some(v)
    }
}

const SLOTS: u32 = 4;
const PARTICIPANTS: u32 = 4;

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let o = OwnedState::new(SLOTS, PARTICIPANTS);
    let st = o.view();
    // Every clock reading moves 1 ms, so a deadline a few ms away passes within a few loops.
    let p = ModelPlatform::new(1_000_000);
    let tuning = Tuning {
        grace_ns: 5_000_000,
        ..Tuning::default()
    };
    let mut held: Vec<(u32, Grant)> = Vec::new();
    let mut watch = Watch::default();
    for _ in 0..64 {
        let Some(op) = b.u8() else { break };
        let who = u32::from(op >> 4) % (PARTICIPANTS + 1); // includes an out-of-range index
        let me = Me {
            participant: who,
            tid: 7,
            lease_ms: (op & 8 != 0).then_some(u64::from(op >> 4) + 1),
            shared: false,
            beacon: 0,
        };
        match op % 12 {
            0 | 1 => {
                let deadline = p.now_ns() + 4_000_000;
                if let Ok(g) = lock(&st, &p, &me, Some(deadline), &tuning) {
                    held.push((who, g));
                }
            }
            2 => {
                if let Ok(Some(g)) = try_lock(&st, &p, &me, &tuning) {
                    held.push((who, g));
                }
            }
            3 | 4 => {
                if let Some((w, g)) = held.pop() {
                    let _ = release(&st, &p, &g, w);
                }
            }
            5 => {
                if let Some((w, g)) = held.last() {
                    let _ = extend(&st, &p, g.ticket, *w, 1 + u64::from(op >> 4));
                    let _ = check(&st, &p, g, *w);
                }
            }
            6 => {
                if let Some((w, g)) = held.pop() {
                    let _ = revoke_own(&st, &p, &g, w);
                }
            }
            7 => {
                let t = b.u64().unwrap_or(0);
                recover(&st, &p, t, &mut watch, &tuning);
            }
            8 => advance(&st, &p, b.u64().unwrap_or(0), op & 16 != 0),
            9 => p.set_dead(who, op & 64 != 0),
            10 => p.advance(b.u64().unwrap_or(0) % 10_000_000_000),
            _ => {
                // Corrupt something: a slot word, a lease, head or the lock word.
                let v = b.u64().unwrap_or(0);
                let i = u64::from(op >> 4);
                match (op >> 4) % 4 {
                    0 | 1 => st.slot(i).word.store(v, Relaxed),
                    2 => st.slot(i).lease.store(v, Relaxed),
                    _ => {
                        if i & 1 == 0 {
                            st.header().head.store(v, Relaxed)
                        } else {
                            st.header().word.store(v, Relaxed)
                        }
                    }
                }
            }
        }
    }
    for (w, g) in held {
        let _ = release(&st, &p, &g, w);
    }
});
