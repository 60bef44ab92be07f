//! Waiting without timers (issue 15): the next-in-line waiter sleeps on its slot word and the
//! holder thread's beacon (a robust mutex in the holder process's own segment), woken by the
//! grant or by the kernel at the holder thread's death — and never by a clock.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::{Shm, TempDir, Worker, role, wait_for_waiters};
use fairlock::FairLock;

/// Voluntary context switches of the calling thread so far.
fn voluntary_switches() -> i64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD is the calling thread.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
    u.ru_nvcsw
}

/// A waiter blocked for a second behind a live holder sleeps through it: a handful of
/// context switches (its spin, its park, its grant), where the timed liveness poll of format 1
/// woke it every millisecond (about a thousand).
#[test]
fn a_waiter_blocked_for_a_second_wakes_only_for_its_grant() {
    let dir = TempDir::new("beacons-no-timer");
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::open(&path).unwrap());
    let held = lock.lock().unwrap();
    let waiter = {
        let lock = Arc::clone(&lock);
        std::thread::spawn(move || {
            let before = voluntary_switches();
            let g = lock.lock().unwrap();
            let switches = voluntary_switches() - before;
            assert!(!g.owner_died());
            drop(g);
            switches
        })
    };
    wait_for_waiters(&path, 1, Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(1));
    drop(held);
    let switches = waiter.join().unwrap();
    assert!(
        switches < 20,
        "the waiter woke {switches} times while blocked for a second"
    );
}

const GRANTED: usize = 0;
const TOKEN: usize = 1;

fn run_worker(r: &str) {
    let shm = Shm::open(common::env("FL_SHM").as_ref());
    if r == "hold-named" {
        let lock = FairLock::options()
            .name("jobs")
            .open(common::env("FL_LOCK"))
            .expect("worker open");
        let g = lock.lock().expect("lock");
        shm.write(TOKEN, g.token());
        shm.atomic(GRANTED).store(1, SeqCst);
        std::thread::sleep(Duration::from_secs(60));
        drop(g);
        return;
    }
    let lock = FairLock::open(common::env("FL_LOCK")).expect("worker open");
    match r {
        // Take the lock, report, and wait to be killed.
        "hold" => {
            let g = lock.lock().expect("lock");
            shm.write(TOKEN, g.token());
            shm.atomic(GRANTED).store(1, SeqCst);
            std::thread::sleep(Duration::from_secs(60));
            drop(g);
        }
        // Take the lock; meanwhile a thread of ours that claimed a beacon (it locked and
        // released the lock first) ends; report, and wait to be killed.
        "hold-while-a-sibling-ends" => {
            let lock = Arc::new(lock);
            let sibling_done = Arc::new(AtomicBool::new(false));
            {
                let lock = Arc::clone(&lock);
                let done = Arc::clone(&sibling_done);
                std::thread::spawn(move || {
                    drop(lock.lock().expect("sibling lock"));
                    // Wait until the main thread holds, then end (its beacon dies).
                    while shm_granted() == 0 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    done.store(true, SeqCst);
                });
            }
            // Let the sibling take and release the lock first, so that it owns a beacon.
            std::thread::sleep(Duration::from_millis(100));
            let g = lock.lock().expect("lock");
            shm.write(TOKEN, g.token());
            shm.atomic(GRANTED).store(1, SeqCst);
            std::thread::sleep(Duration::from_secs(60));
            drop(g);
        }
        other => panic!("unknown role {other}"),
    }
}

fn shm_granted() -> u64 {
    Shm::open(common::env("FL_SHM").as_ref()).read(GRANTED)
}

/// SIGKILL, then reap.
fn kill(w: &mut Worker) {
    let _ = w.child.kill();
    w.status = w.child.wait().ok();
}

fn worker(dir: &TempDir, test: &str, role: &str) -> Worker {
    let envs = vec![
        ("FL_LOCK", dir.join("lock").display().to_string()),
        ("FL_SHM", dir.join("shm").display().to_string()),
    ];
    Worker::spawn(dir.path(), test, role, role, &envs)
}

/// A holder process SIGKILLed while a waiter sleeps (untimed) behind it: the kernel's
/// robust-list walk marks the holder thread's beacon and wakes the waiter, which takes over
/// with `owner_died` — well within the 1 ms liveness poll the waiter no longer makes.
#[test]
fn a_killed_holder_s_waiter_is_woken_by_the_kernel() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    let test = "a_killed_holder_s_waiter_is_woken_by_the_kernel";
    let dir = TempDir::new("beacons-kill");
    let shm = Shm::create(&dir.join("shm"), 4);
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::open(&path).unwrap());
    let mut holder = worker(&dir, test, "hold");
    common::wait_until(Duration::from_secs(30), "the holder's grant", || {
        shm.read(GRANTED) == 1
    });
    let waiter = {
        let lock = Arc::clone(&lock);
        std::thread::spawn(move || {
            let before = voluntary_switches();
            let g = lock.lock().unwrap();
            let at = Instant::now();
            (g.owner_died(), g.token(), voluntary_switches() - before, at)
        })
    };
    wait_for_waiters(&path, 1, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(500));
    let killed = Instant::now();
    kill(&mut holder);
    let (died, token, switches, at) = waiter.join().unwrap();
    assert!(died, "the next holder is told the owner died");
    assert!(token > shm.read(TOKEN));
    assert!(
        switches < 20,
        "the waiter woke {switches} times in half a second behind the holder"
    );
    let took = at.saturating_duration_since(killed);
    assert!(took < Duration::from_secs(1), "recovery took {took:?}");
}

/// A thread of the holder's process that owned a beacon ends while the holder holds: its
/// death is not the holder's. The waiter behind it stays parked (the grant is the holder
/// thread's, whose beacon lives), and is granted only when the holder's process dies.
#[test]
fn a_sibling_thread_s_end_is_not_the_holder_s_death() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    let test = "a_sibling_thread_s_end_is_not_the_holder_s_death";
    let dir = TempDir::new("beacons-sibling");
    let shm = Shm::create(&dir.join("shm"), 4);
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::open(&path).unwrap());
    let mut holder = worker(&dir, test, "hold-while-a-sibling-ends");
    common::wait_until(Duration::from_secs(30), "the holder's grant", || {
        shm.read(GRANTED) == 1
    });
    let got = Arc::new(AtomicBool::new(false));
    let waiter = {
        let lock = Arc::clone(&lock);
        let got = Arc::clone(&got);
        std::thread::spawn(move || {
            let g = lock.lock().unwrap();
            got.store(true, SeqCst);
            g.owner_died()
        })
    };
    wait_for_waiters(&path, 1, Duration::from_secs(10));
    // The sibling has ended by now (it ends as soon as the holder holds); give a wrong
    // revocation every chance to happen.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !got.load(SeqCst),
        "the waiter took over a live holder: {:?}",
        fairlock::inspect(&path)
    );
    kill(&mut holder);
    assert!(waiter.join().unwrap(), "told the owner died once it did");
}

/// The same for a named lock: the waiter finds the holder's segment through the name's entry,
/// its owner word and the holder process's file-wide entry, and is woken by the kernel.
#[test]
fn a_killed_holder_of_a_name_s_waiter_is_woken_by_the_kernel() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    let test = "a_killed_holder_of_a_name_s_waiter_is_woken_by_the_kernel";
    let dir = TempDir::new("beacons-kill-named");
    let shm = Shm::create(&dir.join("shm"), 4);
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::options().name("jobs").open(&path).unwrap());
    let mut holder = worker(&dir, test, "hold-named");
    common::wait_until(Duration::from_secs(30), "the holder's grant", || {
        shm.read(GRANTED) == 1
    });
    let waiter = {
        let lock = Arc::clone(&lock);
        std::thread::spawn(move || {
            let before = voluntary_switches();
            let g = lock.lock().unwrap();
            (g.owner_died(), voluntary_switches() - before)
        })
    };
    common::wait_until(Duration::from_secs(10), "the waiter queued", || {
        fairlock::inspect(&path)
            .ok()
            .and_then(|st| {
                st.names
                    .into_iter()
                    .find(|n| n.name.as_deref() == Some("jobs"))
            })
            .is_some_and(|n| !n.waiters.is_empty())
    });
    std::thread::sleep(Duration::from_millis(500));
    kill(&mut holder);
    let (died, switches) = waiter.join().unwrap();
    assert!(died, "the next holder is told the owner died");
    assert!(
        switches < 20,
        "the waiter woke {switches} times in half a second behind the holder of the name"
    );
}

/// Waiters further back than the next in line sleep too: each watches the waiter just ahead
/// of it (whose death would be its ticket's), woken by its grant or a nudge.
#[test]
fn waiters_further_back_sleep_through_a_long_hold() {
    let dir = TempDir::new("beacons-queue");
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::open(&path).unwrap());
    let held = lock.lock().unwrap();
    let waiters: Vec<_> = (0..3)
        .map(|k| {
            let lock = Arc::clone(&lock);
            let path = path.clone();
            let w = std::thread::spawn(move || {
                let before = voluntary_switches();
                let g = lock.lock().unwrap();
                let switches = voluntary_switches() - before;
                drop(g);
                switches
            });
            wait_for_waiters(&path, k + 1, Duration::from_secs(10));
            w
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    drop(held);
    for (k, w) in waiters.into_iter().enumerate() {
        let switches = w.join().unwrap();
        assert!(
            switches < 10,
            "waiter {k} woke {switches} times while blocked for a second"
        );
    }
}

/// A waiter that gives up (its timeout) nudges the one behind it, which was asleep on the
/// giver-up's beacon and must now watch the holder: when the holder's process is then killed,
/// it takes over at once (not after the 10 s backstop).
#[test]
fn a_waiter_that_gives_up_nudges_the_one_behind() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    let test = "a_waiter_that_gives_up_nudges_the_one_behind";
    let dir = TempDir::new("beacons-nudge");
    let shm = Shm::create(&dir.join("shm"), 4);
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::open(&path).unwrap());
    let mut holder = worker(&dir, test, "hold");
    common::wait_until(Duration::from_secs(30), "the holder's grant", || {
        shm.read(GRANTED) == 1
    });
    // The quitter's thread lives on after it gave up (its beacon does not die).
    let (gave_up_tx, gave_up) = std::sync::mpsc::channel();
    let done = Arc::new(AtomicBool::new(false));
    let quitter = {
        let (lock, done) = (Arc::clone(&lock), Arc::clone(&done));
        std::thread::spawn(move || {
            gave_up_tx
                .send(lock.lock_timeout(Duration::from_millis(300)).is_err())
                .unwrap();
            while !done.load(SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    wait_for_waiters(&path, 1, Duration::from_secs(10));
    let behind = {
        let lock = Arc::clone(&lock);
        std::thread::spawn(move || lock.lock().unwrap().owner_died())
    };
    wait_for_waiters(&path, 2, Duration::from_secs(10));
    assert!(gave_up.recv().unwrap(), "the first waiter timed out");
    std::thread::sleep(Duration::from_millis(200));
    let killed = Instant::now();
    kill(&mut holder);
    assert!(behind.join().unwrap(), "told the owner died");
    let took = killed.elapsed();
    done.store(true, SeqCst);
    quitter.join().unwrap();
    assert!(took < Duration::from_secs(2), "took over after {took:?}");
}
