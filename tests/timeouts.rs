//! `lock_timeout`: waiters that give up never stall anyone, never break mutual exclusion, and
//! a waiter queued behind a timed-out one is served as soon as the holder releases.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Gate, Shm, TempDir, Worker, racy_increment, role, wait_all, wait_for_waiters};
use fairlock::{Error, FairLock};

const PROCS: usize = 2;
const THREADS: usize = 3;
const ITERS: u64 = 1_500;
/// Shared words: the racy counter, successes, timeouts.
const COUNTER: usize = 0;
const OK: usize = 1;
const TIMED_OUT: usize = 2;
const PLAIN_OK: usize = 3;

/// One worker thread: thread 0 of each process waits plainly, the others with timeouts from
/// zero to 20 ms; every 4th holder sleeps 200 µs so that short timeouts do expire.
fn mixed_worker(lock: &FairLock, shm: &Shm, thread: usize) {
    let timeouts = [
        Duration::ZERO,
        Duration::from_micros(50),
        Duration::from_micros(300),
        Duration::from_millis(2),
        Duration::from_millis(20),
    ];
    for i in 0..ITERS {
        let res = if thread == 0 {
            lock.lock()
        } else {
            lock.lock_timeout(timeouts[(i as usize + thread) % timeouts.len()])
        };
        match res {
            Ok(g) => {
                racy_increment(shm, COUNTER, 20);
                if i % 4 == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
                drop(g);
                shm.atomic(OK).fetch_add(1, SeqCst);
                if thread == 0 {
                    shm.atomic(PLAIN_OK).fetch_add(1, SeqCst);
                }
            }
            Err(Error::Timeout { .. }) if thread != 0 => {
                shm.atomic(TIMED_OUT).fetch_add(1, SeqCst);
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
}

#[test]
fn mixed_plain_and_timed_waiters_across_processes() {
    if role().is_some() {
        let lock = Arc::new(FairLock::open(common::env("FL_LOCK")).expect("worker open"));
        let shm = Arc::new(Shm::open(common::env("FL_SHM").as_ref()));
        let gate = Arc::new(Gate::open(common::env("FL_GATE").as_ref()));
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (lock, shm, gate) = (lock.clone(), shm.clone(), gate.clone());
                std::thread::spawn(move || {
                    gate.arrive_and_wait();
                    mixed_worker(&lock, &shm, t);
                })
            })
            .collect();
        for t in threads {
            t.join().expect("worker thread panicked");
        }
        return;
    }
    let dir = TempDir::new("timeouts-mixed");
    let lock_path = dir.join("lock");
    let shm_path = dir.join("shm");
    let gate_path = dir.join("gate");
    let shm = Shm::create(&shm_path, 4);
    let gate = Gate::create(&gate_path);
    let lock = FairLock::open(&lock_path).expect("open");
    let mut workers: Vec<Worker> = (0..PROCS)
        .map(|i| {
            Worker::spawn(
                dir.path(),
                "mixed_plain_and_timed_waiters_across_processes",
                "worker",
                &format!("w{i}"),
                &[
                    ("FL_LOCK", lock_path.display().to_string()),
                    ("FL_SHM", shm_path.display().to_string()),
                    ("FL_GATE", gate_path.display().to_string()),
                ],
            )
        })
        .collect();
    gate.open_when_arrived((PROCS * THREADS) as u64, &mut workers);
    // Generous wall-clock limit: a waiter stalled behind an abandoned ticket would hang here.
    wait_all(&mut workers, Duration::from_secs(60));
    let ok = shm.atomic(OK).load(SeqCst);
    let timed_out = shm.atomic(TIMED_OUT).load(SeqCst);
    let total = (PROCS * THREADS) as u64 * ITERS;
    assert_eq!(
        ok + timed_out,
        total,
        "every attempt ends in a grant or a timeout"
    );
    assert_eq!(shm.read(COUNTER), ok, "lost update: two holders at once");
    assert_eq!(shm.atomic(PLAIN_OK).load(SeqCst), PROCS as u64 * ITERS);
    assert!(timed_out > 0, "no timeout expired (test too gentle)");
    assert!(
        ok > PROCS as u64 * ITERS,
        "no timed waiter ever got the lock"
    );
    eprintln!("timeouts: {ok} grants, {timed_out} timeouts");
    let st = fairlock::inspect(&lock_path).expect("inspect");
    assert!(st.holder.is_none() && st.waiters.is_empty(), "{st:?}");
    let g = lock.try_lock().expect("free at the end");
    drop(g);
}

#[test]
fn mixed_plain_and_timed_waiters_threads() {
    let dir = TempDir::new("timeouts-mixed-threads");
    let shm = Arc::new(Shm::create(&dir.join("shm"), 4));
    let lock = Arc::new(FairLock::open(dir.join("lock")).expect("open"));
    const N: usize = 4;
    let threads: Vec<_> = (0..N)
        .map(|t| {
            let (lock, shm) = (lock.clone(), shm.clone());
            std::thread::spawn(move || mixed_worker(&lock, &shm, t % 2))
        })
        .collect();
    common::with_time_limit(Duration::from_secs(60), "mixed threads", move || {
        for t in threads {
            t.join().expect("thread panicked");
        }
    });
    let ok = shm.atomic(OK).load(SeqCst);
    let timed_out = shm.atomic(TIMED_OUT).load(SeqCst);
    assert_eq!(ok + timed_out, N as u64 * ITERS);
    assert_eq!(shm.read(COUNTER), ok);
    assert_eq!(shm.atomic(PLAIN_OK).load(SeqCst), (N / 2) as u64 * ITERS);
}

#[test]
fn waiter_behind_timed_out_threads_is_served_promptly() {
    let dir = TempDir::new("timeouts-behind-threads");
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::open(&path).expect("open"));
    let guard = lock.lock().expect("lock");
    let held = guard.token();
    // Two waiters that will time out, then one plain waiter queued behind them.
    let mut timed = Vec::new();
    for (k, ms) in [(0usize, 200u64), (1, 300)] {
        let l = lock.clone();
        timed.push(std::thread::spawn(move || {
            let t0 = Instant::now();
            let r = l.lock_timeout(Duration::from_millis(ms));
            (r.map(|g| g.token()), t0.elapsed())
        }));
        wait_for_waiters(&path, k + 1, Duration::from_secs(20));
    }
    let (tx, rx) = mpsc::channel();
    let l = lock.clone();
    let plain = std::thread::spawn(move || {
        let g = l.lock().expect("plain lock");
        tx.send((Instant::now(), g.token())).unwrap();
    });
    wait_for_waiters(&path, 3, Duration::from_secs(20));
    for (h, ms) in timed.into_iter().zip([200u64, 300]) {
        let (r, elapsed) = h.join().expect("timed waiter panicked");
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
        assert!(
            elapsed >= Duration::from_millis(ms),
            "{elapsed:?} < {ms} ms"
        );
    }
    // Only the plain waiter is left in the queue.
    let st = fairlock::inspect(&path).expect("inspect");
    assert_eq!(st.waiters.len(), 1, "{st:?}");
    assert_eq!(st.waiters[0].token, held + 3, "{st:?}");
    let released = Instant::now();
    drop(guard);
    let (granted, token) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("waiter behind timed-out ones never got the lock");
    plain.join().unwrap();
    assert_eq!(token, held + 3, "the timed-out tickets are skipped");
    let delay = granted.saturating_duration_since(released);
    assert!(
        delay < Duration::from_secs(2),
        "served {delay:?} after release"
    );
}

#[test]
fn waiter_behind_timed_out_process_is_served_promptly() {
    const FLAG: usize = 0;
    const TOKEN: usize = 1;
    if let Some(r) = role() {
        let lock = FairLock::open(common::env("FL_LOCK")).expect("worker open");
        let shm = Shm::open(common::env("FL_SHM").as_ref());
        if r == "timed" {
            let t0 = Instant::now();
            let res = lock.lock_timeout(Duration::from_millis(300));
            assert!(matches!(res, Err(Error::Timeout { .. })), "{res:?}");
            assert!(t0.elapsed() >= Duration::from_millis(300));
        } else {
            let g = lock.lock().expect("lock");
            shm.write(TOKEN, g.token());
            shm.atomic(FLAG).store(1, SeqCst);
        }
        return;
    }
    let dir = TempDir::new("timeouts-behind-procs");
    let path = dir.join("lock");
    let shm_path = dir.join("shm");
    let shm = Shm::create(&shm_path, 2);
    let lock = FairLock::open(&path).expect("open");
    let guard = lock.lock().expect("lock");
    let env = [
        ("FL_LOCK", path.display().to_string()),
        ("FL_SHM", shm_path.display().to_string()),
    ];
    let test = "waiter_behind_timed_out_process_is_served_promptly";
    let mut timed = vec![Worker::spawn(dir.path(), test, "timed", "timed", &env)];
    wait_for_waiters(&path, 1, Duration::from_secs(20));
    let mut plain = vec![Worker::spawn(dir.path(), test, "plain", "plain", &env)];
    wait_for_waiters(&path, 2, Duration::from_secs(20));
    wait_all(&mut timed, Duration::from_secs(20));
    assert_eq!(shm.atomic(FLAG).load(SeqCst), 0, "granted while held");
    let released = Instant::now();
    drop(guard);
    common::wait_until(Duration::from_secs(10), "the plain waiter's grant", || {
        shm.atomic(FLAG).load(SeqCst) == 1
    });
    let delay = released.elapsed();
    assert!(
        delay < Duration::from_secs(2),
        "served {delay:?} after release"
    );
    wait_all(&mut plain, Duration::from_secs(20));
    assert_eq!(shm.read(TOKEN), lock.lock().unwrap().token() - 1);
}

#[test]
fn zero_timeout() {
    let dir = TempDir::new("timeouts-zero");
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::open(&path).expect("open"));
    // Free: granted at once.
    let g = lock
        .lock_timeout(Duration::ZERO)
        .expect("zero timeout on a free lock");
    let token = g.token();
    // Held by this thread: another thread's zero timeout times out.
    let l = lock.clone();
    let r = std::thread::spawn(move || l.lock_timeout(Duration::ZERO).map(|g| g.token()))
        .join()
        .unwrap();
    assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    // Its ticket was given up: nobody is left waiting, and the next grant is not blocked.
    let st = fairlock::inspect(&path).expect("inspect");
    assert!(st.waiters.is_empty(), "{st:?}");
    assert_eq!(st.holder.as_ref().map(|h| h.token), Some(token));
    drop(g);
    let l = lock.clone();
    let t2 = std::thread::spawn(move || l.try_lock().map(|g| g.token()))
        .join()
        .unwrap()
        .expect("try_lock after the abandoned ticket");
    assert!(t2 > token);
}

#[test]
fn expiring_timeout_takes_about_the_time_asked() {
    let dir = TempDir::new("timeouts-expiry");
    let lock = Arc::new(FairLock::open(dir.join("lock")).expect("open"));
    let _g = lock.lock().expect("lock");
    for ms in [1u64, 30, 250] {
        let l = lock.clone();
        let (r, elapsed) = std::thread::spawn(move || {
            let t0 = Instant::now();
            let r = l.lock_timeout(Duration::from_millis(ms)).map(|g| g.token());
            (r, t0.elapsed())
        })
        .join()
        .unwrap();
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
        assert!(
            elapsed >= Duration::from_millis(ms),
            "returned early: {elapsed:?} < {ms} ms"
        );
        assert!(
            elapsed < Duration::from_millis(ms) + Duration::from_secs(3),
            "returned late: {elapsed:?} for {ms} ms"
        );
    }
}
