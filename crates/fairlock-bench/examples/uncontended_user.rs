//! Uncontended `lock` + `unlock` written the way users write it, from a crate that depends on
//! fairlock like any other (issue 15: "measured from a user's crate ... `drop(black_box(l.lock()?))`
//! in a loop"), with and without `black_box` on the guard, next to std's `Mutex` written the
//! same ways and the robust process-shared pthread mutex — all interleaved in one run.
//!
//! ```sh
//! cargo run --release -p fairlock-bench --example uncontended_user
//! ```

use std::hint::black_box;
use std::time::Instant;

#[allow(dead_code)]
#[path = "lockbench/competitors.rs"]
mod competitors;

use competitors::{Competitor, Pthread};

const ROUNDS: usize = 8;
const ITERS: u64 = 2_000_000;

/// Nanoseconds per iteration of `f`, run `ITERS` times.
#[inline(always)]
fn time(mut f: impl FnMut()) -> f64 {
    for _ in 0..10_000 {
        f();
    }
    let t = Instant::now();
    for _ in 0..ITERS {
        f();
    }
    t.elapsed().as_nanos() as f64 / ITERS as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The locks every case measures, made once.
struct Locks {
    fair: fairlock::FairLock,
    std: std::sync::Mutex<()>,
    pthread: Pthread,
}

/// One loop as a user writes it: monomorphised, so the loop body is inlined as in a user's
/// binary (a `dyn` call per iteration would change what is measured).
type Case = (&'static str, fn(&Locks) -> f64);

const CASES: [Case; 6] = [
    ("fairlock: drop(black_box(l.lock()?))", |l| {
        time(|| drop(black_box(l.fair.lock().unwrap())))
    }),
    ("fairlock: drop(l.lock()?)", |l| {
        time(|| drop(l.fair.lock().unwrap()))
    }),
    ("fairlock: l.lock()?.unlock()?", |l| {
        time(|| l.fair.lock().unwrap().unlock().unwrap())
    }),
    ("std Mutex: drop(black_box(m.lock()))", |l| {
        time(|| drop(black_box(l.std.lock().unwrap())))
    }),
    ("std Mutex: drop(m.lock())", |l| {
        time(|| drop(l.std.lock().unwrap()))
    }),
    ("robust pthread (mapped file): lock; unlock", |l| {
        time(|| {
            l.pthread.with(black_box);
        })
    }),
];

fn main() {
    let dir = std::env::temp_dir().join(format!("uncontended-user-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let locks = Locks {
        fair: fairlock::FairLock::open(dir.join("fair.lock")).unwrap(),
        std: std::sync::Mutex::new(()),
        pthread: Pthread::create(&dir.join("pthread")),
    };
    let mut res = vec![Vec::new(); CASES.len()];
    for r in 0..ROUNDS {
        // ABBA: every other round in reverse, so drifts hit all alike.
        let order: Vec<usize> = if r % 2 == 0 {
            (0..CASES.len()).collect()
        } else {
            (0..CASES.len()).rev().collect()
        };
        for i in order {
            res[i].push((CASES[i].1)(&locks));
        }
    }
    let med: Vec<f64> = res.iter_mut().map(|v| median(v)).collect();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "Uncontended lock + unlock from a user's crate: median of {ROUNDS} interleaved rounds of {ITERS} (load {})\n",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "| loop | ns | ÷ robust pthread | ÷ std `drop(black_box(..))` |\n|---|---:|---:|---:|"
    );
    let (pt, sm) = (med[5], med[3]);
    for ((name, _), m) in CASES.iter().zip(&med) {
        println!("| `{name}` | {m:.1} | {:.2}× | {:.2}× |", m / pt, m / sm);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
