//! Asynchronous acquisitions against the blocking ones and against `tokio::sync::Mutex`
//! (in-process only), all interleaved in one run: an uncontended acquire/release
//! pair, and a hand-off (two contenders taking turns: with a FIFO lock every acquisition
//! after the first waits for the other's release).
//!
//! ```sh
//! cargo run --release -p fairlock-bench --example asyncbench
//! ```

use std::sync::Arc;
use std::time::Instant;

const ROUNDS: usize = 7;
const PAIRS: u64 = 200_000;
const HANDOFFS: u64 = 20_000;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// ns per uncontended acquire + release.
fn pair(
    case: &str,
    lock: &Arc<fairlock::FairLock>,
    tokio_mutex: &Arc<tokio::sync::Mutex<()>>,
) -> f64 {
    let rt = current_thread();
    let t = Instant::now();
    match case {
        "fairlock lock_async().await" => rt.block_on(async {
            for _ in 0..PAIRS {
                drop(lock.lock_async().await.unwrap());
            }
        }),
        "fairlock lock_process()" => {
            for _ in 0..PAIRS {
                drop(lock.lock_process().unwrap());
            }
        }
        "fairlock lock()" => {
            for _ in 0..PAIRS {
                drop(lock.lock().unwrap());
            }
        }
        "tokio Mutex lock().await" => rt.block_on(async {
            for _ in 0..PAIRS {
                drop(tokio_mutex.lock().await);
            }
        }),
        _ => unreachable!(),
    }
    t.elapsed().as_nanos() as f64 / PAIRS as f64
}

/// ns per hand-off between two contenders (tasks on a 2-worker runtime, or threads).
fn handoff(
    case: &str,
    lock: &Arc<fairlock::FairLock>,
    tokio_mutex: &Arc<tokio::sync::Mutex<()>>,
) -> f64 {
    let t = Instant::now();
    match case {
        "fairlock lock_async().await" => {
            let rt = multi_thread();
            rt.block_on(async {
                let tasks: Vec<_> = (0..2)
                    .map(|_| {
                        let l = lock.clone();
                        tokio::spawn(async move {
                            for _ in 0..HANDOFFS {
                                drop(l.lock_async().await.unwrap());
                            }
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await.unwrap();
                }
            });
        }
        "fairlock lock_process()" | "fairlock lock()" => {
            let process = case == "fairlock lock_process()";
            let threads: Vec<_> = (0..2)
                .map(|_| {
                    let l = lock.clone();
                    std::thread::spawn(move || {
                        for _ in 0..HANDOFFS {
                            if process {
                                drop(l.lock_process().unwrap());
                            } else {
                                drop(l.lock().unwrap());
                            }
                        }
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
        }
        "tokio Mutex lock().await" => {
            let rt = multi_thread();
            rt.block_on(async {
                let tasks: Vec<_> = (0..2)
                    .map(|_| {
                        let m = tokio_mutex.clone();
                        tokio::spawn(async move {
                            for _ in 0..HANDOFFS {
                                drop(m.lock().await);
                            }
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await.unwrap();
                }
            });
        }
        _ => unreachable!(),
    }
    t.elapsed().as_nanos() as f64 / (2 * HANDOFFS) as f64
}

const CASES: [&str; 4] = [
    "fairlock lock_async().await",
    "fairlock lock_process()",
    "fairlock lock()",
    "tokio Mutex lock().await",
];

fn main() {
    let dir = std::env::temp_dir().join(format!("asyncbench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let lock = Arc::new(fairlock::FairLock::open(dir.join("l")).unwrap());
    let tokio_mutex = Arc::new(tokio::sync::Mutex::new(()));
    let mut pairs = vec![Vec::new(); CASES.len()];
    let mut handoffs = vec![Vec::new(); CASES.len()];
    for _ in 0..ROUNDS {
        for (i, case) in CASES.iter().enumerate() {
            pairs[i].push(pair(case, &lock, &tokio_mutex));
            handoffs[i].push(handoff(case, &lock, &tokio_mutex));
        }
    }
    let pair_med: Vec<f64> = pairs.iter_mut().map(|v| median(v)).collect();
    let hand_med: Vec<f64> = handoffs.iter_mut().map(|v| median(v)).collect();
    println!(
        "medians of {ROUNDS} interleaved rounds ({PAIRS} pairs, {HANDOFFS} turns per contender)"
    );
    println!(
        "{:<30} {:>12} {:>10} {:>14} {:>10}",
        "case", "pair ns", "÷ tokio", "hand-off ns", "÷ tokio"
    );
    let tokio = CASES.len() - 1;
    for (i, case) in CASES.iter().enumerate() {
        println!(
            "{:<30} {:>12.1} {:>10.2} {:>14.1} {:>10.2}",
            case,
            pair_med[i],
            pair_med[i] / pair_med[tokio],
            hand_med[i],
            hand_med[i] / hand_med[tokio]
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
