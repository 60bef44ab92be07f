//! A barger SIGKILLed right after its barge CAS (`barge.taken`): the grantee it barged ahead
//! of must still get the lock, told `owner_died`.
#![cfg(feature = "__test-crash-points")]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{TempDir, Worker, role};
use fairlock::{FairLock, Fairness};

fn open(path: &std::path::Path) -> FairLock {
    FairLock::options()
        .fairness(Fairness::Bounded(4))
        .open(path)
        .unwrap()
}

#[test]
fn review3_barger_killed_at_barge_taken() {
    killed_at("review3_barger_killed_at_barge_taken", "barge.taken", true);
}

#[test]
fn review3_barger_killed_at_barge_ended() {
    killed_at("review3_barger_killed_at_barge_ended", "barge.ended", false);
}

fn killed_at(test: &str, point: &str, told: bool) {
    if role().is_some() {
        let lock = open(common::env("FL_LOCK").as_ref());
        // Keep trying: every call spins in `barge` for up to 50 µs first (a deadline not yet
        // past: one already past makes one try, as `try_lock`, and never barges).
        loop {
            if let Ok(g) = lock.lock_timeout(Duration::from_micros(200)) {
                drop(g);
            }
        }
    }
    let dir = TempDir::new("review3-crash-barge");
    let path = dir.join("lock");
    let lock = Arc::new(open(&path));
    let mut child = Worker::spawn(
        dir.path(),
        test,
        "barger",
        "barger",
        &[
            ("FL_LOCK", path.display().to_string()),
            ("FAIRLOCK_CRASH", point.into()),
        ],
    );
    for round in 0..200 {
        let g = lock.lock().unwrap();
        // The barger may also die barging into the lock between two rounds (nobody waiting):
        // then this grant is the first after its death, and is the one told.
        let first_told = g.owner_died();
        let l2 = lock.clone();
        let b = std::thread::spawn(move || {
            let t0 = Instant::now();
            let g = l2.lock().unwrap();
            (g.owner_died(), t0.elapsed())
        });
        // b parks (the child's short-deadline tickets come and go meanwhile).
        std::thread::sleep(Duration::from_millis(5));
        drop(g);
        let (died, took) = b.join().unwrap();
        if child.poll() {
            eprintln!(
                "round {round}: barger dead; holder told={first_told}, waiter died={died} took {took:?}"
            );
            assert!(
                died || first_told || !told,
                "the grantee behind a barger killed at {point} was not told"
            );
            assert!(took < Duration::from_secs(2), "took {took:?}");
            // And the lock still works.
            drop(lock.lock_timeout(Duration::from_secs(2)).unwrap());
            return;
        }
    }
    panic!("the barger never hit {point}");
}
