//! FIFO: grants happen in exactly ticket order (tokens logged under the lock strictly
//! increase), and waiters that arrive one after another are served in arrival order, across
//! processes and across threads.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{
    Gate, Shm, TempDir, Worker, log_append, log_entries, role, wait_all, wait_for_waiters,
};
use fairlock::FairLock;

const PROCS: usize = 3;
const THREADS: usize = 2;
const ITERS: usize = 17_000; // 3 × 2 × 17,000 = 102,000 acquisitions

#[test]
fn continuous_contention_grants_in_ticket_order() {
    if role().is_some() {
        let lock = Arc::new(FairLock::open(common::env("FL_LOCK")).expect("worker open"));
        let shm = Arc::new(Shm::open(common::env("FL_SHM").as_ref()));
        let gate = Arc::new(Gate::open(common::env("FL_GATE").as_ref()));
        let proc_id: u64 = common::env_parse("FL_ID");
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (lock, shm, gate) = (lock.clone(), shm.clone(), gate.clone());
                let who = proc_id * THREADS as u64 + t as u64;
                std::thread::spawn(move || {
                    gate.arrive_and_wait();
                    for i in 0..ITERS {
                        let g = lock.lock().expect("lock");
                        log_append(&shm, (g.token() << 8) | who);
                        for _ in 0..20 {
                            std::hint::spin_loop();
                        }
                        drop(g);
                        if i % 4 == 0 {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("worker thread panicked");
        }
        return;
    }
    let total = PROCS * THREADS * ITERS;
    let dir = TempDir::new("fifo-continuous");
    let lock_path = dir.join("lock");
    let shm_path = dir.join("shm");
    let shm = Shm::create(&shm_path, total + 2);
    let gate_path = dir.join("gate");
    let gate = Gate::create(&gate_path);
    let parent = FairLock::open(&lock_path).expect("open");
    let first = parent.lock().expect("lock").token();
    let mut workers: Vec<Worker> = (0..PROCS)
        .map(|i| {
            Worker::spawn(
                dir.path(),
                "continuous_contention_grants_in_ticket_order",
                "worker",
                &format!("w{i}"),
                &[
                    ("FL_LOCK", lock_path.display().to_string()),
                    ("FL_SHM", shm_path.display().to_string()),
                    ("FL_GATE", gate_path.display().to_string()),
                    ("FL_ID", i.to_string()),
                ],
            )
        })
        .collect();
    gate.open_when_arrived((PROCS * THREADS) as u64, &mut workers);
    let started = std::time::Instant::now();
    wait_all(&mut workers, Duration::from_secs(90));
    let elapsed = started.elapsed();
    let entries = log_entries(&shm);
    let log: Vec<u64> = entries.iter().map(|v| v >> 8).collect();
    let who: Vec<u64> = entries.iter().map(|v| v & 0xff).collect();
    // How often the lock passed to another process: contention was real.
    let cross = who
        .windows(2)
        .filter(|w| w[0] / THREADS as u64 != w[1] / THREADS as u64)
        .count();
    assert!(
        cross >= 100,
        "only {cross} hand-offs between processes: no real contention"
    );
    for w in 0..(PROCS * THREADS) as u64 {
        assert_eq!(
            who.iter().filter(|&&x| x == w).count(),
            ITERS,
            "thread {w} logged a wrong number of grants"
        );
    }
    assert_eq!(log.len(), total, "every acquisition logged exactly once");
    assert!(log[0] > first, "first logged token {} <= {first}", log[0]);
    let mut gaps = 0u64;
    for (i, w) in log.windows(2).enumerate() {
        assert!(
            w[1] > w[0],
            "grant out of ticket order at entry {}: token {} after {}",
            i + 1,
            w[1],
            w[0]
        );
        gaps += w[1] - w[0] - 1;
    }
    let last = parent.lock().expect("lock after").token();
    assert!(last > *log.last().unwrap());
    eprintln!(
        "fifo: {total} grants by {PROCS} processes x {THREADS} threads in {elapsed:?}; \
         {gaps} skipped tickets between logged grants (tokens {}..={}); \
         {cross} hand-offs to another process",
        log[0],
        log.last().unwrap()
    );
}

const STAGGERED: usize = 5;

#[test]
fn staggered_processes_are_served_in_arrival_order() {
    if role().is_some() {
        let id: u64 = common::env_parse("FL_ID");
        let lock = FairLock::open(common::env("FL_LOCK")).expect("worker open");
        let shm = Shm::open(common::env("FL_SHM").as_ref());
        let g = lock.lock().expect("lock");
        log_append(&shm, id);
        g.unlock().expect("unlock");
        return;
    }
    let dir = TempDir::new("fifo-staggered-procs");
    let lock_path = dir.join("lock");
    let shm_path = dir.join("shm");
    let shm = Shm::create(&shm_path, STAGGERED + 2);
    let lock = FairLock::open(&lock_path).expect("open");
    let guard = lock.lock().expect("lock");
    let mut workers = Vec::new();
    for k in 0..STAGGERED {
        workers.push(Worker::spawn(
            dir.path(),
            "staggered_processes_are_served_in_arrival_order",
            "worker",
            &format!("w{k}"),
            &[
                ("FL_LOCK", lock_path.display().to_string()),
                ("FL_SHM", shm_path.display().to_string()),
                ("FL_ID", k.to_string()),
            ],
        ));
        let st = wait_for_waiters(&lock_path, k + 1, Duration::from_secs(20));
        // The newest waiter is the worker just started.
        assert_eq!(st.waiters[k].pid, Some(workers[k].pid()), "{st:?}");
    }
    assert!(
        log_entries(&shm).is_empty(),
        "a waiter ran while the lock was held"
    );
    drop(guard);
    wait_all(&mut workers, Duration::from_secs(30));
    let expected: Vec<u64> = (0..STAGGERED as u64).collect();
    assert_eq!(log_entries(&shm), expected, "grants not in arrival order");
}

#[test]
fn staggered_threads_are_served_in_arrival_order() {
    const N: usize = 6;
    let dir = TempDir::new("fifo-staggered-threads");
    let lock_path = dir.join("lock");
    let shm = Arc::new(Shm::create(&dir.join("shm"), N + 2));
    let lock = Arc::new(FairLock::open(&lock_path).expect("open"));
    let guard = lock.lock().expect("lock");
    let mut threads = Vec::new();
    for k in 0..N {
        let (lock, shm) = (lock.clone(), shm.clone());
        threads.push(std::thread::spawn(move || {
            let g = lock.lock().expect("lock");
            log_append(&shm, k as u64);
            // Hold a little so a late claimant would be noticed out of order.
            std::thread::sleep(Duration::from_millis(1));
            drop(g);
        }));
        wait_for_waiters(&lock_path, k + 1, Duration::from_secs(20));
    }
    assert!(
        log_entries(&shm).is_empty(),
        "a waiter ran while the lock was held"
    );
    drop(guard);
    common::with_time_limit(Duration::from_secs(30), "staggered threads", move || {
        for t in threads {
            t.join().expect("thread panicked");
        }
    });
    let expected: Vec<u64> = (0..N as u64).collect();
    assert_eq!(log_entries(&shm), expected, "grants not in arrival order");
}

#[test]
fn every_kind_of_acquisition_is_granted_in_ticket_order() {
    // lock, try_lock and lock_timeout (some expiring) mixed: whatever the way in, grants
    // follow ticket order, and try_lock never takes a grant out of turn.
    const N: usize = 4;
    const ITERS: usize = 4_000;
    let dir = TempDir::new("fifo-kinds");
    let shm = Arc::new(Shm::create(&dir.join("shm"), N * ITERS + 2));
    let lock = Arc::new(FairLock::open(dir.join("lock")).expect("open"));
    let threads: Vec<_> = (0..N)
        .map(|t| {
            let (lock, shm) = (lock.clone(), shm.clone());
            std::thread::spawn(move || {
                let mut got = 0u64;
                for i in 0..ITERS {
                    let r = match (t + i) % 4 {
                        0 | 1 => lock.lock(),
                        2 => lock.try_lock(),
                        _ => lock.lock_timeout(Duration::from_micros(((i % 5) * 40) as u64)),
                    };
                    match r {
                        Ok(g) => {
                            log_append(&shm, g.token());
                            got += 1;
                        }
                        Err(
                            fairlock::Error::WouldBlock { .. } | fairlock::Error::Timeout { .. },
                        ) => {}
                        Err(e) => panic!("unexpected: {e}"),
                    }
                }
                got
            })
        })
        .collect();
    let granted: u64 = common::with_time_limit(Duration::from_secs(60), "mixed kinds", move || {
        threads.into_iter().map(|t| t.join().unwrap()).sum()
    });
    let log = log_entries(&shm);
    assert_eq!(log.len() as u64, granted);
    assert!(
        granted >= (N * ITERS / 2) as u64,
        "every plain lock() is granted"
    );
    for (i, w) in log.windows(2).enumerate() {
        assert!(
            w[1] > w[0],
            "out of ticket order at {}: {} after {}",
            i + 1,
            w[1],
            w[0]
        );
    }
}
