//! Third review of bounded bypass: a grantee that claimed its grant while a barge holds the
//! lock waits in `barge::after_claim` — which knows neither the caller's deadline nor its
//! interrupt hook. `lock_timeout` / `lock_interruptible` then return only when the barge ends
//! (never, if the barger is stopped or its `FairMutex` guard is leaked).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::{TempDir, wait_for_waiters};
use fairlock::{FairLock, Fairness};

/// How long the barge holds the lock.
const BARGE_HOLD: Duration = Duration::from_secs(2);
/// The waiter's timeout (or the delay before its interrupt hook says stop).
const PATIENCE: Duration = Duration::from_millis(200);

/// Runs the scenario until the main thread's re-lock is a barge ahead of the waiter's fresh
/// grant (token not a multiple of 512), holds that barge for `BARGE_HOLD`, and returns how
/// long the waiter's call took. `wait` is the waiter's acquisition (`lock_timeout` or
/// `lock_interruptible`); it returns whether it got the lock.
fn waiter_behind_a_long_barge(
    name: &str,
    wait: impl Fn(&FairLock) -> bool + Send + Sync + Clone + 'static,
) -> Duration {
    waiter_behind_a_barge(name, wait, false).expect("the waiter returned")
}

/// The scenario above; with `leak`, the barge's guard is forgotten (the lock stays held, as
/// a leaked std `MutexGuard` keeps its `Mutex`) and the waiter is given 5 s: `None` if it
/// had not returned by then.
fn waiter_behind_a_barge(
    name: &str,
    wait: impl Fn(&FairLock) -> bool + Send + Sync + Clone + 'static,
    leak: bool,
) -> Option<Duration> {
    let dir = TempDir::new(name);
    let path = dir.join("lock");
    let lock = Arc::new(
        FairLock::options()
            .fairness(Fairness::Bounded(4))
            .open(&path)
            .unwrap(),
    );
    for _attempt in 0..50 {
        let g = lock.lock().unwrap(); // a fast grant
        let (l2, w2) = (lock.clone(), wait.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let t0 = Instant::now();
            let got = w2(&l2);
            let _ = tx.send((got, t0.elapsed()));
        });
        // The waiter queued, then parked (it spins 50 µs at most).
        wait_for_waiters(&path, 1, Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(20));
        // Release (grants the sleeping waiter and wakes it) and re-lock at once: a barge,
        // unless the waiter claimed first.
        drop(g);
        let g = lock.lock().unwrap();
        let barged = !g.token().is_multiple_of(512);
        if barged && leak {
            std::mem::forget(g);
            return rx
                .recv_timeout(Duration::from_secs(5))
                .ok()
                .map(|(_, took)| took);
        }
        if barged {
            std::thread::sleep(BARGE_HOLD);
        }
        drop(g);
        let (_got, took) = rx.recv().unwrap();
        if barged {
            return Some(took);
        }
    }
    panic!("no barge in 50 attempts");
}

#[test]
fn review3_lock_timeout_behind_a_barge_returns_by_its_deadline() {
    let took = waiter_behind_a_long_barge("review3-timeout", |l: &FairLock| {
        l.lock_timeout(PATIENCE).is_ok() // the guard (if any) is dropped here
    });
    assert!(
        took < Duration::from_secs(1),
        "lock_timeout({PATIENCE:?}) returned after {took:?}: its grantee waited out a \
         {BARGE_HOLD:?} barge in `after_claim`, ignoring its deadline"
    );
}

#[test]
fn review3_lock_interruptible_behind_a_barge_honours_its_hook() {
    let took = waiter_behind_a_long_barge("review3-interrupt", |l: &FairLock| {
        let t0 = Instant::now();
        let stop = AtomicBool::new(false);
        l.lock_interruptible(None, || {
            if t0.elapsed() >= PATIENCE {
                stop.store(true, SeqCst);
            }
            stop.load(SeqCst)
        })
        .is_ok()
    });
    assert!(
        took < Duration::from_secs(1),
        "lock_interruptible (stop after {PATIENCE:?}) returned after {took:?}: its hook is \
         not called while its grantee waits for a {BARGE_HOLD:?} barge"
    );
}

#[test]
fn review3_lock_timeout_behind_a_leaked_barge_guard_times_out() {
    // Behind a leaked guard of a fast grant (or in a strict file) the waiter times out after
    // 200 ms; behind a leaked barge, once granted, it never returns.
    let took = waiter_behind_a_barge(
        "review3-leaked",
        |l: &FairLock| l.lock_timeout(PATIENCE).is_ok(),
        true,
    );
    assert!(
        took.is_some_and(|t| t < Duration::from_secs(1)),
        "lock_timeout({PATIENCE:?}) behind a leaked barge guard: {took:?} (None: still \
         waiting after 5 s)"
    );
}
