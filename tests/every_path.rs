//! The contract on every acquire path, not only the blocking one: `try_lock`, a zero timeout
//! and a short one pass a dead holder, a dead waiter and a frozen leased grantee — with nobody
//! else waiting — and tell the next holder `owner_died()`; a panic while holding counts as a
//! death (issue 11, bugs 1, 2, 5 and 6). Real processes, killed and stopped for real.

mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use common::{Shm, TempDir, Worker, role, wait_for_waiters, wait_until};
use fairlock::{FairLock, FairRLock};

const GRANTED: usize = 0;
const TOKEN: usize = 1;

fn run_worker(r: &str) {
    let path = common::env("FL_LOCK");
    let shm = Shm::open(common::env("FL_SHM").as_ref());
    let lease_ms: u64 = std::env::var("FL_LEASE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let lock = if lease_ms > 0 {
        FairLock::options()
            .lease(Duration::from_millis(lease_ms))
            .open(&path)
    } else {
        FairLock::open(&path)
    }
    .expect("worker open");
    match r {
        // Take the lock, report, and wait to be killed.
        "hold" => {
            let g = lock.lock().expect("lock");
            shm.write(TOKEN, g.token());
            shm.atomic(GRANTED).store(1, SeqCst);
            std::thread::sleep(Duration::from_secs(60));
            panic!("not killed");
        }
        // Queue for the lock; report when granted (a stopped or killed one never does).
        "wait" => {
            let g = lock.lock().expect("lock");
            shm.write(TOKEN, g.token());
            shm.atomic(GRANTED).store(1, SeqCst);
            drop(g);
        }
        other => panic!("unknown role {other}"),
    }
}

fn env_for(dir: &TempDir, lease_ms: u64) -> Vec<(&'static str, String)> {
    vec![
        ("FL_LOCK", dir.join("lock").display().to_string()),
        ("FL_SHM", dir.join("shm").display().to_string()),
        ("FL_LEASE_MS", lease_ms.to_string()),
    ]
}

fn kill(w: &Worker, sig: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(w.pid() as libc::pid_t, sig) };
}

/// A worker that holds the lock, then is SIGKILLed; waits until it is really gone.
fn dead_holder(dir: &TempDir, test: &str, shm: &Shm) -> u64 {
    let mut w = Worker::spawn(dir.path(), test, "hold", "holder", &env_for(dir, 0));
    wait_until(Duration::from_secs(30), "the worker's grant", || {
        shm.atomic(GRANTED).load(SeqCst) == 1
    });
    kill(&w, libc::SIGKILL);
    let _ = w.child.wait();
    w.status = Some(std::os::unix::process::ExitStatusExt::from_raw(9));
    shm.read(TOKEN)
}

/// Bug 1: a dead holder jammed `try_lock` for good (only a blocking waiter ever recovered it).
#[test]
fn try_lock_passes_a_dead_holder() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    let dir = TempDir::new("every-path-try");
    let shm = Shm::create(&dir.join("shm"), 4);
    let held = dead_holder(&dir, "try_lock_passes_a_dead_holder", &shm);
    let lock = FairLock::open(dir.join("lock")).expect("open");
    let g = lock.try_lock().expect("try_lock after the holder died");
    assert!(
        g.owner_died(),
        "the next holder must be told the owner died"
    );
    assert!(g.token() > held);
    drop(g);
    // And the lock is clean again for the next one.
    assert!(!lock.try_lock().expect("free").owner_died());
}

/// Bug 1: the same with a zero timeout (`fairlock run -w 0`) and a short one.
#[test]
fn zero_and_short_timeouts_pass_a_dead_holder() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    for timeout in [Duration::ZERO, Duration::from_millis(1)] {
        let dir = TempDir::new("every-path-timeout");
        let shm = Shm::create(&dir.join("shm"), 4);
        dead_holder(&dir, "zero_and_short_timeouts_pass_a_dead_holder", &shm);
        let lock = FairLock::open(dir.join("lock")).expect("open");
        let g = lock
            .lock_timeout(timeout)
            .unwrap_or_else(|e| panic!("lock_timeout({timeout:?}) after the holder died: {e}"));
        assert!(g.owner_died());
    }
}

/// Bug 2: a waiter killed while queued was granted the lock after its death, and `try_lock`
/// then failed until some blocking waiter came by.
#[test]
fn try_lock_passes_a_waiter_killed_in_the_queue() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    for sig in [libc::SIGKILL, libc::SIGTERM, libc::SIGINT] {
        let dir = TempDir::new("every-path-dead-waiter");
        let shm = Shm::create(&dir.join("shm"), 4);
        let path = dir.join("lock");
        let lock = FairLock::open(&path).expect("open");
        let g = lock.lock().expect("lock");
        let test = "try_lock_passes_a_waiter_killed_in_the_queue";
        let mut w = Worker::spawn(dir.path(), test, "wait", "waiter", &env_for(&dir, 0));
        wait_for_waiters(&path, 1, Duration::from_secs(30));
        kill(&w, sig);
        let _ = w.child.wait();
        w.status = Some(std::os::unix::process::ExitStatusExt::from_raw(9));
        drop(g); // grants the dead waiter
        let g = lock
            .try_lock()
            .unwrap_or_else(|e| panic!("try_lock after a waiter died of signal {sig}: {e}"));
        // The dead waiter never held: the previous holder released cleanly.
        assert!(!g.owner_died());
        assert_eq!(shm.atomic(GRANTED).load(SeqCst), 0);
    }
}

/// Bug 5: a leased waiter granted and then frozen before it claims blocked the queue forever.
/// It is timed like a held lease and skipped; the waiter behind gets the lock; the frozen one,
/// thawed, queues again and is served after it.
#[test]
fn frozen_leased_grantee_is_passed_over() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    let dir = TempDir::new("every-path-frozen");
    let shm = Shm::create(&dir.join("shm"), 4);
    let path = dir.join("lock");
    let lock = FairLock::open(&path).expect("open");
    let g = lock.lock().expect("lock");
    let test = "frozen_leased_grantee_is_passed_over";
    let mut frozen = Worker::spawn(dir.path(), test, "wait", "frozen", &env_for(&dir, 100));
    let st = wait_for_waiters(&path, 1, Duration::from_secs(30));
    // Parked (not spinning), then frozen; the release grants it while it is stopped.
    wait_until(Duration::from_secs(10), "the waiter parks", || {
        fairlock::inspect(&path).unwrap().waiters[0].state == "sleeping"
    });
    kill(&frozen, libc::SIGSTOP);
    let frozen_ticket = st.waiters[0].ticket;
    let (tx, rx) = std::sync::mpsc::channel();
    let p2 = path.clone();
    let behind = std::thread::spawn(move || {
        let lock = FairLock::open(&p2).expect("open");
        let started = Instant::now();
        let r = lock
            .lock_timeout(Duration::from_secs(5))
            .map(|g| (g.token(), g.owner_died()));
        tx.send(started.elapsed()).unwrap();
        r
    });
    wait_for_waiters(&path, 2, Duration::from_secs(30));
    let released = Instant::now();
    drop(g);
    let (token, died) = behind
        .join()
        .unwrap()
        .expect("the waiter behind a frozen grantee must get the lock");
    let waited = rx.recv().unwrap();
    assert!(token > frozen_ticket + 1, "granted after the frozen ticket");
    assert!(!died, "the frozen grantee never held");
    let after_release = released.elapsed();
    assert!(
        after_release < Duration::from_secs(3),
        "took {after_release:?} (waited {waited:?}); the lease is 100 ms"
    );
    // Thawed, the frozen one queues again and gets a later grant.
    kill(&frozen, libc::SIGCONT);
    common::wait_all(std::slice::from_mut(&mut frozen), Duration::from_secs(30));
    assert!(
        shm.read(TOKEN) > token,
        "requeued behind the one that overtook it"
    );
}

/// Bug 6: a guard dropped while its thread panics gave the next holder `owner_died() ==
/// false`, as if the half-done update were complete. std poisons its `Mutex` here.
#[test]
fn a_panic_while_holding_is_a_death() {
    let dir = TempDir::new("every-path-panic");
    let path = dir.join("lock");
    let lock = std::sync::Arc::new(FairLock::open(&path).expect("open"));
    let l = lock.clone();
    let r = std::thread::spawn(move || {
        let _g = l.lock().expect("lock");
        panic!("mid-update");
    })
    .join();
    assert!(r.is_err());
    let g = lock.try_lock().expect("free after the panic");
    assert!(
        g.owner_died(),
        "a panic while holding must count as a death"
    );
    drop(g);
    assert!(
        !lock.try_lock().unwrap().owner_died(),
        "one report, not more"
    );

    // An explicit unlock during unwinding (from a destructor) counts the same.
    struct UnlockOnDrop<'a>(Option<fairlock::LockGuard<'a>>);
    impl Drop for UnlockOnDrop<'_> {
        fn drop(&mut self) {
            let _ = self.0.take().unwrap().unlock();
        }
    }
    let l = lock.clone();
    let _ = std::thread::spawn(move || {
        let _u = UnlockOnDrop(Some(l.lock().unwrap()));
        panic!("mid-update");
    })
    .join();
    assert!(lock.try_lock().unwrap().owner_died());
}

/// Bug 6, re-entrant: a panic inside a nested guard poisons the grant; the outer guard, even
/// if dropped after the panic was caught, gives the lock up as dead.
#[test]
fn a_panic_in_a_nested_guard_poisons_the_grant() {
    let dir = TempDir::new("every-path-panic-nested");
    let path = dir.join("lock");
    let lock = std::sync::Arc::new(FairRLock::open(&path).expect("open"));
    let l = lock.clone();
    std::thread::spawn(move || {
        let outer = l.lock().expect("lock");
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _inner = l.lock().expect("nested");
            panic!("mid-update");
        }));
        assert!(caught.is_err());
        drop(outer); // not panicking any more, but the grant was poisoned
    })
    .join()
    .unwrap();
    let other = FairLock::open(&path).expect("open");
    let g = other.try_lock().expect("free");
    assert!(g.owner_died());
    drop(g);
    // A panic that never touched the lock's guards does not poison it.
    let l = lock.clone();
    std::thread::spawn(move || {
        let g = l.lock().unwrap();
        let _ = std::panic::catch_unwind(|| panic!("unrelated"));
        drop(g);
    })
    .join()
    .unwrap();
    assert!(!other.try_lock().unwrap().owner_died());
}
