//! Mutual exclusion: a non-atomic read-dawdle-write counter in shared memory, incremented under
//! the lock by several processes and threads, must end exactly right.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Gate, Shm, TempDir, Worker, racy_increment, role, wait_all};
use fairlock::FairLock;

const PROCS: usize = 4;
const THREADS: usize = 2;
const ITERS: u64 = 2_500;

#[test]
fn processes_and_threads_exclude_each_other() {
    if role().is_some() {
        let path = common::env("FL_LOCK");
        let shm = Arc::new(Shm::open(common::env("FL_SHM").as_ref()));
        let lock = Arc::new(FairLock::open(&path).expect("worker open"));
        let gate = Arc::new(Gate::open(common::env("FL_GATE").as_ref()));
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let (lock, shm, gate) = (lock.clone(), shm.clone(), gate.clone());
                std::thread::spawn(move || {
                    gate.arrive_and_wait();
                    for _ in 0..ITERS {
                        let g = lock.lock().expect("lock");
                        racy_increment(&shm, 0, 50);
                        // A second word, written twice, must never be seen odd by a holder.
                        assert_eq!(shm.read(1) % 2, 0, "saw another holder's half update");
                        shm.write(1, shm.read(1) + 1);
                        std::hint::spin_loop();
                        shm.write(1, shm.read(1) + 1);
                        drop(g);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("worker thread panicked");
        }
        return;
    }
    let dir = TempDir::new("mutex-procs");
    let lock_path = dir.join("lock");
    let shm_path = dir.join("shm");
    let shm = Shm::create(&shm_path, 2);
    // Created by the parent; the workers open the existing file.
    let parent = FairLock::open(&lock_path).expect("open");
    let gate_path = dir.join("gate");
    let gate = Gate::create(&gate_path);
    let env = [
        ("FL_LOCK", lock_path.display().to_string()),
        ("FL_SHM", shm_path.display().to_string()),
        ("FL_GATE", gate_path.display().to_string()),
    ];
    let mut workers: Vec<Worker> = (0..PROCS)
        .map(|i| {
            Worker::spawn(
                dir.path(),
                "processes_and_threads_exclude_each_other",
                "worker",
                &format!("w{i}"),
                &env,
            )
        })
        .collect();
    gate.open_when_arrived((PROCS * THREADS) as u64, &mut workers);
    wait_all(&mut workers, Duration::from_secs(60));
    let total = PROCS as u64 * THREADS as u64 * ITERS;
    assert_eq!(
        shm.read(0),
        total,
        "lost updates: the lock let two holders in"
    );
    assert_eq!(shm.read(1), 2 * total);
    // The lock is free again and tokens kept rising.
    let g = parent.try_lock().expect("free after all workers");
    assert!(
        g.token() > total,
        "token {} after {total} grants",
        g.token()
    );
}

#[test]
fn threads_sharing_one_handle_exclude_each_other() {
    const N: usize = 8;
    const ITERS: u64 = 5_000;
    let dir = TempDir::new("mutex-threads");
    let shm = Arc::new(Shm::create(&dir.join("shm"), 1));
    let lock = Arc::new(FairLock::open(dir.join("lock")).expect("open"));
    let threads: Vec<_> = (0..N)
        .map(|_| {
            let (lock, shm) = (lock.clone(), shm.clone());
            std::thread::spawn(move || {
                for _ in 0..ITERS {
                    let g = lock.lock().expect("lock");
                    racy_increment(&shm, 0, 20);
                    g.unlock().expect("unlock");
                }
            })
        })
        .collect();
    common::with_time_limit(Duration::from_secs(60), "8 threads", move || {
        for t in threads {
            t.join().expect("thread panicked");
        }
    });
    assert_eq!(shm.read(0), N as u64 * ITERS);
    let st = fairlock::inspect(dir.join("lock")).expect("inspect");
    assert!(st.holder.is_none() && st.waiters.is_empty(), "{st:?}");
}

#[test]
fn separate_handles_in_threads_exclude_each_other() {
    // Each thread opens its own handle (the process shares one mapping behind them).
    const N: usize = 4;
    const ITERS: u64 = 3_000;
    let dir = TempDir::new("mutex-handles");
    let shm = Arc::new(Shm::create(&dir.join("shm"), 1));
    let path = dir.join("lock");
    let threads: Vec<_> = (0..N)
        .map(|_| {
            let (path, shm) = (path.clone(), shm.clone());
            std::thread::spawn(move || {
                let lock = FairLock::open(&path).expect("open");
                for _ in 0..ITERS {
                    let _g = lock.lock().expect("lock");
                    racy_increment(&shm, 0, 20);
                }
            })
        })
        .collect();
    common::with_time_limit(Duration::from_secs(60), "threads", move || {
        for t in threads {
            t.join().expect("thread panicked");
        }
    });
    assert_eq!(shm.read(0), N as u64 * ITERS);
}

#[test]
fn no_spinning_waiters_park_and_are_woken() {
    // spin(0): every waiter parks on its futex at once, so every hand-off is a wake-up; a lost
    // wake-up would stall (bounded by the time limit). Grants stay in ticket order.
    const N: usize = 4;
    const ITERS: u64 = 2_000;
    let dir = TempDir::new("mutex-nospin");
    let shm = Arc::new(Shm::create(&dir.join("shm"), N * ITERS as usize + 2));
    let lock = Arc::new(
        FairLock::options()
            .spin(Duration::ZERO)
            .open(dir.join("lock"))
            .expect("open"),
    );
    let threads: Vec<_> = (0..N)
        .map(|_| {
            let (lock, shm) = (lock.clone(), shm.clone());
            std::thread::spawn(move || {
                for _ in 0..ITERS {
                    let g = lock.lock().expect("lock");
                    common::log_append(&shm, g.token());
                }
            })
        })
        .collect();
    common::with_time_limit(Duration::from_secs(60), "no-spin waiters", move || {
        for t in threads {
            t.join().expect("thread panicked");
        }
    });
    let log = common::log_entries(&shm);
    assert_eq!(log.len(), N * ITERS as usize);
    assert!(
        log.windows(2).all(|w| w[1] > w[0]),
        "grants out of ticket order"
    );
}
