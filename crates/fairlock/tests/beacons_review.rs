//! Adversarial review of thread beacons (commit 8932c34, "Waiting without timers"). Each test
//! shows a bug: it fails on the code as reviewed.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use common::{Shm, TempDir, Worker, role, wait_for_waiters};
use fairlock::FairLock;

const GRANTED: usize = 0;

fn envs(dir: &TempDir) -> Vec<(&'static str, String)> {
    vec![
        ("FL_LOCK", dir.join("lock").display().to_string()),
        ("FL_LOCK2", dir.join("lock2").display().to_string()),
        ("FL_SHM", dir.join("shm").display().to_string()),
    ]
}

fn worker(dir: &TempDir, test: &str, role: &str) -> Worker {
    Worker::spawn(dir.path(), test, role, role, &envs(dir))
}

/// SIGKILL, then reap.
fn kill(w: &mut Worker) {
    let _ = w.child.kill();
    w.status = w.child.wait().ok();
}

fn run_worker(r: &str) {
    let shm = Shm::open(common::env("FL_SHM").as_ref());
    match r {
        // One thread takes two locks (nested, as any code holding two locks does), reports,
        // and waits to be killed: both grants name the same thread beacon.
        "hold-two" => {
            let a = FairLock::open(common::env("FL_LOCK")).expect("open a");
            let b = FairLock::open(common::env("FL_LOCK2")).expect("open b");
            let ga = a.lock().expect("lock a");
            let gb = b.lock().expect("lock b");
            shm.atomic(GRANTED).store(1, SeqCst);
            std::thread::sleep(Duration::from_secs(120));
            drop((ga, gb));
        }
        other => panic!("unknown role {other}"),
    }
}

/// Two waiters — the next in line of two different locks that one thread of another process
/// holds — both sleep untimed on that thread's one beacon. The process is SIGKILLed: the
/// kernel's robust-list walk wakes *one* waiter of the beacon word (`futex_wake(.., 1)`), and
/// the woken waiter is relied on to wake the others (`wake_watchers`). But it does so only on
/// the path where it reads `OWNER_DIED` itself before anything else frees it: its own
/// `recover` (run first after every wake-up) finds the holder's process dead (its OFD
/// beacon went with the process) and revokes the grant, after which `holder_beacon` no longer
/// finds a holder and the waiter claims its grant without ever calling `wake_watchers`. The
/// other waiter is never woken: it sleeps forever behind a dead holder (nobody else polls).
///
/// Expected: both waiters get their lock, told the owner died, within a few seconds.
#[test]
fn every_watcher_of_a_dead_thread_s_beacon_is_woken() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    let test = "every_watcher_of_a_dead_thread_s_beacon_is_woken";
    let dir = TempDir::new("beacons-review-two-watchers");
    let shm = Shm::create(&dir.join("shm"), 4);
    let path = dir.join("lock");
    let path2 = dir.join("lock2");
    let a = Arc::new(FairLock::open(&path).unwrap());
    let b = Arc::new(FairLock::open(&path2).unwrap());
    let mut holder = worker(&dir, test, "hold-two");
    common::wait_until(Duration::from_secs(30), "the holder's grants", || {
        shm.read(GRANTED) == 1
    });
    let (tx, rx) = std::sync::mpsc::channel();
    for (name, lock) in [("a", Arc::clone(&a)), ("b", Arc::clone(&b))] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let g = lock.lock().unwrap();
            let _ = tx.send((name, g.owner_died()));
            // Keep the grant: the test only looks at who got one.
            std::mem::forget(g);
        });
    }
    wait_for_waiters(&path, 1, Duration::from_secs(10));
    wait_for_waiters(&path2, 1, Duration::from_secs(10));
    // Both are parked on the beacon by now (they park after a few µs of spinning).
    std::thread::sleep(Duration::from_millis(300));
    let killed = Instant::now();
    kill(&mut holder);
    let mut got = Vec::new();
    while got.len() < 2 {
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(x) => got.push(x),
            Err(_) => break,
        }
    }
    assert_eq!(
        got.len(),
        2,
        "after the holder's death ({:?} ago) only {got:?} got their lock; lock a: {:?}; lock b: {:?}",
        killed.elapsed(),
        fairlock::inspect(&path).map(|s| s.waiters.len()),
        fairlock::inspect(&path2).map(|s| s.waiters.len()),
    );
    assert!(got.iter().all(|&(_, died)| died));
}
