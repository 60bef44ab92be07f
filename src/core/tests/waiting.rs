//! How the next in line waits for a holder: it spins, keeping its CPU for a while and then
//! yielding it now and then (at once in a file with a bypass bound).

use super::support::{HookedPlatform, me};
use crate::core::state::{OwnedState, RecordKind};
use crate::core::{LockState, Platform, Tuning, WaitError, lock, release};
use std::sync::Mutex;

/// The next in line waits for a holder that never lets go, until a deadline 40 µs away
/// (the scripted clock moves 100 ns per reading); the clock readings at its yields.
fn yields_while_next_in_line(st: &LockState<'_>, tuning: &Tuning) -> (u64, Vec<u64>) {
    let yields = Mutex::new(Vec::new());
    let p = HookedPlatform::new(100);
    // Each yield records the clock instead of yielding.
    p.at_yield(|model| yields.lock().unwrap().push(model.now_ns()));
    let held = lock(st, &p, &me(1), None, tuning).unwrap();
    let start = p.now_ns();
    assert!(matches!(
        lock(st, &p, &me(2), Some(start + 40_000), tuning),
        Err(WaitError::Timeout)
    ));
    release(st, &p, &held, 1).unwrap();
    let yields = yields.lock().unwrap().clone();
    (start, yields)
}

#[test]
fn a_long_spin_yields_the_cpu_after_keeping_it_a_while() {
    // With a spin that never yields, two contenders that alternate never sleep, and a process
    // preempted before it took a ticket waits a scheduler tick (4 ms; 4 processes on 2 CPUs).
    // The spin keeps its CPU for `spin_keep_cpu_ns`, then yields it now and then.
    let o = OwnedState::new(8, 4);
    let st = o.view();
    let tuning = Tuning::default();
    let (start, yields) = yields_while_next_in_line(&st, &tuning);
    assert!(
        yields.len() >= 10,
        "a 40 µs spin yielded {} times",
        yields.len()
    );
    let first = yields[0] - start;
    assert!(
        (tuning.spin_keep_cpu_ns..tuning.spin_keep_cpu_ns + 5_000).contains(&first),
        "first yield {first} ns into the wait"
    );
    assert!(yields.iter().all(|&y| y < start + 45_000));
    // Every 32 steps, not every step: two clock readings (one per 16 steps, 100 ns each) and
    // the one the hook makes at each yield lie between two yields.
    let closest = yields.windows(2).map(|w| w[1] - w[0]).min().unwrap();
    assert!(closest >= 300, "yields {closest} ns apart");
}

#[test]
fn a_short_spin_keeps_the_cpu_and_a_bounded_file_s_spin_yields_at_once() {
    let o = OwnedState::new(8, 4);
    let st = o.view();
    // A spin shorter than the part that keeps the CPU never yields.
    let short = Tuning {
        spin_ns: 4_000,
        ..Tuning::default()
    };
    let (_, yields) = yields_while_next_in_line(&st, &short);
    assert_eq!(yields, Vec::<u64>::new());
    // Nor does one that keeps the CPU for ever (`OpenOptions::spin_keep_cpu(Duration::MAX)`).
    let never = Tuning {
        spin_keep_cpu_ns: u64::MAX,
        ..Tuning::default()
    };
    let (_, yields) = yields_while_next_in_line(&st, &never);
    assert_eq!(yields, Vec::<u64>::new());
    // In a file with a bypass bound the spinner yields from the start.
    let o = OwnedState::of_kind(8, 4, RecordKind::bounded(4));
    let st = o.view();
    let (start, yields) = yields_while_next_in_line(&st, &Tuning::default());
    assert!(!yields.is_empty());
    assert!(
        yields[0] - start < 5_000,
        "first yield {} ns in",
        yields[0] - start
    );
}
