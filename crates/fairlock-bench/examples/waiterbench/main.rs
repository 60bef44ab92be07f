//! The waiter designs for asynchronous acquisitions, measured against each other in one run
//! (the choice of `raw::waiters`): how long a hand-off takes when the task that waits is
//! woken by each design, with 2 and with 64 tasks passing a turn around a ring (each task
//! waits on its own futex word, as each waiter of a lock waits on its slot).
//!
//! Designs (each fires the task's waker once its word is set):
//! * `pool thread`: a thread per wait, asleep in `futex_waitv` on the wait's words (the
//!   library's design);
//! * `multiplexer`: one thread, asleep in one `futex_waitv` over every wait's word;
//! * `io_uring, thread reaps`: `IORING_OP_FUTEX_WAIT` requests submitted by the task,
//!   completions reaped by a thread asleep in `io_uring_enter`;
//! * `io_uring, thread submits+reaps`: the same thread also submits every wait (handed to it
//!   through a list and a bell), so that completions run on it;
//! * `io_uring, reactor reaps`: the same, reaped by the runtime's reactor (an eventfd in
//!   tokio's epoll; not open to a library that knows no runtime);
//!
//! and, for scale: `tokio Notify` (a task wakes the next directly: no futex, in-process only),
//! `threads, FUTEX_WAIT` (threads, not tasks: the bare futex hand-off), and the library itself,
//! `fairlock lock_async` (the tasks contend for one lock, which grants in FIFO order: the same
//! ring, through the whole protocol).
//!
//! ```sh
//! cargo run --release -p fairlock-bench --example waiterbench
//! ```

mod mux;
mod pool;
mod uring;
mod words;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Instant;

use words::{Design, Signal, Words};

const ROUNDS: usize = 7;
/// Hand-offs per measurement.
const HOPS: usize = 40_000;

/// Waits until it is waiter `i`'s turn (and takes it: the word back to 0).
struct Turn<'a> {
    words: &'a Words,
    design: &'a dyn Design,
    i: usize,
    signal: &'a Arc<Signal>,
}

impl Future for Turn<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let turn = self.words.turn(self.i);
        // Acquire: pairs with the Release store of `Words::give`.
        if turn.load(Ordering::Acquire) != 0 {
            turn.store(0, Ordering::Relaxed);
            return Poll::Ready(());
        }
        self.signal.set_waker(cx.waker());
        // AcqRel: pairs with the Release store of `Signal::fire`.
        if !self.signal.armed.swap(true, Ordering::AcqRel) {
            self.design.arm(self.i, self.signal.clone());
        }
        Poll::Pending
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// `n` tasks pass the turn around the ring through `design`: ns per hand-off.
async fn ring(words: &Arc<Words>, design: Arc<dyn Design>, n: usize) -> f64 {
    let laps = HOPS / n;
    for i in 0..n {
        words.turn(i).store(0, Ordering::Relaxed);
    }
    let start = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let words = words.clone();
            let design = design.clone();
            tokio::spawn(async move {
                let signal = Arc::new(Signal::default());
                for _ in 0..laps {
                    Turn {
                        words: &words,
                        design: &*design,
                        i,
                        signal: &signal,
                    }
                    .await;
                    words.give((i + 1) % n);
                }
            })
        })
        .collect();
    words.give(0);
    for t in tasks {
        t.await.unwrap();
    }
    let ns = start.elapsed().as_nanos() as f64 / (laps * n) as f64;
    // The last task gave the turn back to task 0, which is gone.
    words.turn(0).store(0, Ordering::Relaxed);
    ns
}

/// The same ring with tokio's `Notify` (in-process, no futex).
async fn notify_ring(n: usize) -> f64 {
    let laps = HOPS / n;
    let notes: Arc<Vec<tokio::sync::Notify>> =
        Arc::new((0..n).map(|_| tokio::sync::Notify::new()).collect());
    let start = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let notes = notes.clone();
            tokio::spawn(async move {
                for _ in 0..laps {
                    notes[i].notified().await;
                    notes[(i + 1) % n].notify_one();
                }
            })
        })
        .collect();
    notes[0].notify_one();
    for t in tasks {
        t.await.unwrap();
    }
    start.elapsed().as_nanos() as f64 / (laps * n) as f64
}

/// The same ring with threads in `FUTEX_WAIT`.
fn thread_ring(words: &Arc<Words>, n: usize) -> f64 {
    let laps = HOPS / n;
    for i in 0..n {
        words.turn(i).store(0, Ordering::Relaxed);
    }
    let start = Instant::now();
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let words = words.clone();
            std::thread::spawn(move || {
                let turn = words.turn(i);
                for _ in 0..laps {
                    // Acquire: pairs with the Release store of `Words::give`.
                    while turn.load(Ordering::Acquire) == 0 {
                        fairlock_bench::futex::wait(turn, 0, None);
                    }
                    turn.store(0, Ordering::Relaxed);
                    words.give((i + 1) % n);
                }
            })
        })
        .collect();
    words.give(0);
    for t in threads {
        t.join().unwrap();
    }
    let ns = start.elapsed().as_nanos() as f64 / (laps * n) as f64;
    words.turn(0).store(0, Ordering::Relaxed);
    ns
}

/// `n` tasks contend for one `FairLock` (FIFO: each acquisition after the first waits for the
/// n-1 before it).
async fn fairlock_ring(lock: &Arc<fairlock::FairLock>, n: usize) -> f64 {
    let laps = HOPS / n;
    let start = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let lock = lock.clone();
            tokio::spawn(async move {
                for _ in 0..laps {
                    drop(lock.lock_async().await.unwrap());
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    start.elapsed().as_nanos() as f64 / (laps * n) as f64
}

const CASES: [&str; 8] = [
    "pool thread (the library's)",
    "multiplexer",
    "io_uring, thread reaps",
    "io_uring, thread submits+reaps",
    "io_uring, reactor reaps",
    "tokio Notify",
    "threads, FUTEX_WAIT",
    "fairlock lock_async",
];

fn measure(case: &str, n: usize, words: &Arc<Words>, lock: &Arc<fairlock::FairLock>) -> f64 {
    let rt = runtime();
    rt.block_on(async {
        match case {
            "pool thread (the library's)" => {
                ring(words, Arc::new(pool::Pool::new(words.clone())), n).await
            }
            "multiplexer" => ring(words, Arc::new(mux::Mux::new(words.clone())), n).await,
            "io_uring, thread reaps"
            | "io_uring, thread submits+reaps"
            | "io_uring, reactor reaps" => {
                let reaper = match case {
                    "io_uring, thread reaps" => uring::Reaper::Thread,
                    "io_uring, thread submits+reaps" => uring::Reaper::ThreadSubmits,
                    _ => uring::Reaper::Reactor,
                };
                let design = Arc::new(uring::Uring::new(words.clone(), reaper));
                let ns = ring(words, design.clone(), n).await;
                Arc::into_inner(design)
                    .expect("the tasks are done")
                    .stop()
                    .await;
                ns
            }
            "tokio Notify" => notify_ring(n).await,
            "threads, FUTEX_WAIT" => thread_ring(words, n),
            "fairlock lock_async" => fairlock_ring(lock, n).await,
            _ => unreachable!(),
        }
    })
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let dir = std::env::temp_dir().join(format!("waiterbench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let lock = Arc::new(fairlock::FairLock::open(dir.join("lock")).unwrap());
    // `waiterbench [WORD]`: only the designs whose name contains WORD.
    let only = std::env::args().nth(1).unwrap_or_default();
    let sizes = [2usize, 64];
    println!(
        "ns per hand-off, medians of {ROUNDS} interleaved rounds ({HOPS} hand-offs each; \
         tokio multi-thread runtime, 2 workers)"
    );
    let mut results = vec![vec![Vec::new(); CASES.len()]; sizes.len()];
    for _ in 0..ROUNDS {
        for (s, &n) in sizes.iter().enumerate() {
            let words = Arc::new(Words::new(&dir, n));
            for (c, case) in CASES.iter().enumerate() {
                if !case.contains(only.as_str()) && !case.starts_with("pool") {
                    results[s][c].push(f64::NAN);
                    continue;
                }
                results[s][c].push(measure(case, n, &words, &lock));
            }
        }
    }
    print!("{:<30}", "design");
    for n in sizes {
        print!(" {:>12} {:>9}", format!("{n} tasks"), "÷ pool");
    }
    println!();
    let med: Vec<Vec<f64>> = results
        .iter_mut()
        .map(|r| r.iter_mut().map(|v| median(v)).collect())
        .collect();
    for (c, case) in CASES.iter().enumerate() {
        print!("{case:<30}");
        for m in &med {
            print!(" {:>12.0} {:>9.2}", m[c], m[c] / m[0]);
        }
        println!();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
