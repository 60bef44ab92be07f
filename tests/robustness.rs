//! Robustness: a holder or waiter that dies never blocks the others (the next holder learns of
//! it through `owner_died`), and leases: expiry, takeover, `extend`, `check`, `LockLost`.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Shm, TempDir, Worker, role, wait_all, wait_for_waiters};
use fairlock::{Error, FairLock};

const FLAG: usize = 0;
const TOKEN: usize = 1;

/// Worker roles shared by the tests below.
fn run_worker(r: &str) {
    let lock = FairLock::open(common::env("FL_LOCK")).expect("worker open");
    let shm = Shm::open(common::env("FL_SHM").as_ref());
    match r {
        // Take the lock, report, and wait to be killed.
        "hold-forever" => {
            let g = lock.lock().expect("lock");
            shm.write(TOKEN, g.token());
            shm.atomic(FLAG).store(1, SeqCst);
            std::thread::sleep(Duration::from_secs(60));
            panic!("not killed");
        }
        // Take the lock and exit the process without releasing it.
        "hold-and-exit" => {
            let g = lock.lock().expect("lock");
            shm.write(TOKEN, g.token());
            std::mem::forget(g);
            std::process::exit(0);
        }
        // Queue for the lock (to be killed while waiting).
        "wait" => {
            let _ = lock.lock();
            std::thread::sleep(Duration::from_secs(60));
            panic!("not killed");
        }
        other => panic!("unknown role {other}"),
    }
}

fn env_for(dir: &TempDir) -> [(&'static str, String); 2] {
    [
        ("FL_LOCK", dir.join("lock").display().to_string()),
        ("FL_SHM", dir.join("shm").display().to_string()),
    ]
}

#[test]
fn killed_holder_process_is_recovered() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    let dir = TempDir::new("robust-killed-holder");
    let shm = Shm::create(&dir.join("shm"), 2);
    let lock = Arc::new(FairLock::open(dir.join("lock")).expect("open"));
    let test = "killed_holder_process_is_recovered";
    let mut w = Worker::spawn(dir.path(), test, "hold-forever", "holder", &env_for(&dir));
    common::wait_until(Duration::from_secs(30), "the worker's grant", || {
        shm.atomic(FLAG).load(SeqCst) == 1
    });
    let held = shm.read(TOKEN);
    let (tx, rx) = mpsc::channel();
    let l = lock.clone();
    let waiter = std::thread::spawn(move || {
        let g = l
            .lock_timeout(Duration::from_secs(30))
            .expect("lock after the holder died");
        tx.send((Instant::now(), g.token(), g.owner_died()))
            .unwrap();
    });
    wait_for_waiters(&dir.join("lock"), 1, Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(50));
    assert!(rx.try_recv().is_err(), "granted while the holder lives");
    let killed = Instant::now();
    w.child.kill().expect("kill");
    let (at, token, died) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("waiter never recovered the lock");
    waiter.join().unwrap();
    assert!(died, "owner_died not reported after the holder was killed");
    assert!(token > held, "token {token} <= dead holder's {held}");
    let delay = at.saturating_duration_since(killed);
    assert!(
        delay < Duration::from_secs(5),
        "recovered {delay:?} after the kill"
    );
    // The grant after a clean release does not report a death.
    let g = lock.lock().expect("lock");
    assert!(!g.owner_died());
}

#[test]
fn holder_process_exiting_without_unlock_is_recovered() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    let dir = TempDir::new("robust-exit-holder");
    let shm = Shm::create(&dir.join("shm"), 2);
    let lock = FairLock::open(dir.join("lock")).expect("open");
    let test = "holder_process_exiting_without_unlock_is_recovered";
    let mut w = vec![Worker::spawn(
        dir.path(),
        test,
        "hold-and-exit",
        "holder",
        &env_for(&dir),
    )];
    wait_all(&mut w, Duration::from_secs(30));
    let held = shm.read(TOKEN);
    assert!(held > 0);
    // Nobody is waiting yet; the next locker finds the dead holder and takes over.
    let g = lock
        .lock_timeout(Duration::from_secs(10))
        .expect("lock after the holder exited");
    assert!(g.owner_died(), "owner_died not reported");
    assert!(g.token() > held);
    drop(g);
    assert!(!lock.lock().expect("lock").owner_died());
}

#[test]
fn killed_waiter_does_not_stall_the_queue() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    let dir = TempDir::new("robust-killed-waiter");
    let path = dir.join("lock");
    let _shm = Shm::create(&dir.join("shm"), 2);
    let lock = Arc::new(FairLock::open(&path).expect("open"));
    let guard = lock.lock().expect("lock");
    let test = "killed_waiter_does_not_stall_the_queue";
    let mut w = Worker::spawn(dir.path(), test, "wait", "waiter", &env_for(&dir));
    wait_for_waiters(&path, 1, Duration::from_secs(20));
    let (tx, rx) = mpsc::channel();
    let l = lock.clone();
    let behind = std::thread::spawn(move || {
        let g = l
            .lock_timeout(Duration::from_secs(30))
            .expect("lock behind a dead waiter");
        tx.send((Instant::now(), g.owner_died())).unwrap();
    });
    wait_for_waiters(&path, 2, Duration::from_secs(20));
    w.child.kill().expect("kill");
    w.child.wait().unwrap();
    let released = Instant::now();
    drop(guard);
    let (at, died) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the waiter behind a killed one never got the lock");
    behind.join().unwrap();
    assert!(
        !died,
        "the holder released normally; a dead *waiter* is not a dead owner"
    );
    let delay = at.saturating_duration_since(released);
    assert!(
        delay < Duration::from_secs(5),
        "served {delay:?} after release"
    );
}

#[test]
fn thread_exiting_while_holding_is_recovered() {
    let dir = TempDir::new("robust-thread-exit");
    let lock = Arc::new(FairLock::open(dir.join("lock")).expect("open"));
    let l = lock.clone();
    let held = std::thread::spawn(move || {
        let g = l.lock().expect("lock");
        let t = g.token();
        std::mem::forget(g);
        t
    })
    .join()
    .unwrap();
    let l = lock.clone();
    let r = common::with_time_limit(
        Duration::from_secs(20),
        "lock after thread exit",
        move || {
            l.lock_timeout(Duration::from_secs(5))
                .map(|g| (g.token(), g.owner_died()))
        },
    );
    let (token, died) = r.expect("lock after the holding thread exited");
    assert!(died);
    assert!(token > held);
}

#[test]
fn expired_lease_is_taken_over() {
    let dir = TempDir::new("robust-lease");
    let path = dir.join("lock");
    let leased = Arc::new(
        FairLock::options()
            .lease(Duration::from_millis(200))
            .open(&path)
            .expect("open leased"),
    );
    let t0 = Instant::now();
    let g = leased.lock().expect("lock");
    assert_eq!(g.lease(), Some(Duration::from_millis(200)));
    g.check().expect("ours");
    let st = fairlock::inspect(&path).unwrap();
    let remaining = st.holder.as_ref().and_then(|h| h.lease_remaining);
    assert!(
        remaining.is_some_and(|r| r <= Duration::from_millis(200)),
        "{st:?}"
    );
    let plain = Arc::new(FairLock::open(&path).expect("open"));
    let l = plain.clone();
    let (tx, rx) = mpsc::channel();
    let taker = std::thread::spawn(move || {
        let g = l.lock_timeout(Duration::from_secs(30)).expect("takeover");
        tx.send((t0.elapsed(), g.token(), g.owner_died())).unwrap();
        // Hold until told, so the old holder's calls see a live successor.
        std::thread::sleep(Duration::from_millis(300));
    });
    let (after, token, died) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("lease never taken over");
    assert!(
        after >= Duration::from_millis(190),
        "taken over after only {after:?} of a 200 ms lease"
    );
    assert!(died, "a takeover must report owner_died");
    assert!(token > g.token());
    assert!(matches!(g.check(), Err(Error::LockLost { .. })));
    assert!(matches!(
        g.extend(Duration::from_secs(1)),
        Err(Error::LockLost { .. })
    ));
    assert!(matches!(g.unlock(), Err(Error::LockLost { .. })));
    // The stale guard's unlock did not release the taker's lock.
    let p = path.clone();
    let r = std::thread::spawn(move || {
        FairLock::open(&p)
            .expect("open")
            .try_lock()
            .map(|g| g.token())
    })
    .join()
    .unwrap();
    assert!(matches!(r, Err(Error::WouldBlock { .. })), "{r:?}");
    taker.join().unwrap();
}

#[test]
fn nested_rlock_guards_all_report_a_lost_lease() {
    let dir = TempDir::new("robust-rlease");
    let path = dir.join("lock");
    let r = fairlock::FairRLock::options()
        .lease(Duration::from_millis(100))
        .open_rlock(&path)
        .expect("open");
    let outer = r.lock().expect("outer");
    let inner = r.lock().expect("inner");
    let (tx, rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let p = path.clone();
    let taker = std::thread::spawn(move || {
        let l = FairLock::open(&p).expect("open");
        let g = l.lock_timeout(Duration::from_secs(30)).expect("takeover");
        tx.send((g.token(), g.owner_died())).unwrap();
        release_rx.recv().unwrap();
        g.check()
            .expect("the taker still holds after the old guards dropped");
        g.unlock().expect("taker unlock");
    });
    let (token, died) = rx.recv_timeout(Duration::from_secs(30)).expect("takeover");
    assert!(died);
    assert!(token > outer.token());
    assert!(matches!(inner.check(), Err(Error::LockLost { .. })));
    assert!(matches!(outer.check(), Err(Error::LockLost { .. })));
    assert!(matches!(inner.unlock(), Err(Error::LockLost { .. })));
    assert!(matches!(outer.unlock(), Err(Error::LockLost { .. })));
    let st = fairlock::inspect(&path).unwrap();
    assert_eq!(st.holder.as_ref().map(|h| h.token), Some(token), "{st:?}");
    release_tx.send(()).unwrap();
    taker.join().unwrap();
    // Usable again by the old holder.
    let g = r.lock().expect("relock");
    assert!(g.token() > token);
}

#[test]
fn extended_lease_is_not_taken_over() {
    let dir = TempDir::new("robust-extend");
    let path = dir.join("lock");
    let leased = FairLock::options()
        .lease(Duration::from_millis(150))
        .open(&path)
        .expect("open leased");
    let g = leased.lock().expect("lock");
    let plain = Arc::new(FairLock::open(&path).expect("open"));
    let l = plain.clone();
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let g = l.lock_timeout(Duration::from_secs(30)).expect("lock");
        tx.send(g.owner_died()).unwrap();
    });
    wait_for_waiters(&path, 1, Duration::from_secs(20));
    // Hold for 6 leases, extending well before each runs out.
    for _ in 0..12 {
        g.extend(Duration::from_millis(150)).expect("extend");
        std::thread::sleep(Duration::from_millis(40));
        g.check().expect("still ours");
        assert!(rx.try_recv().is_err(), "taken over despite extensions");
    }
    g.unlock().expect("unlock after extending");
    let died = rx.recv_timeout(Duration::from_secs(10)).expect("waiter");
    waiter.join().unwrap();
    assert!(!died, "a released lease is not a death");
}

#[test]
fn extend_argument_errors() {
    let dir = TempDir::new("robust-extend-errors");
    let path = dir.join("lock");
    let plain = FairLock::open(&path).expect("open");
    let g = plain.lock().expect("lock");
    assert_eq!(g.lease(), None);
    assert!(matches!(
        g.extend(Duration::from_secs(1)),
        Err(Error::InvalidOption { .. })
    ));
    g.check().expect("ours");
    drop(g);
    let leased = FairLock::options()
        .lease(Duration::from_secs(10))
        .open(dir.join("leased"))
        .expect("open");
    let g = leased.lock().expect("lock");
    assert!(matches!(
        g.extend(Duration::ZERO),
        Err(Error::InvalidOption { .. })
    ));
    g.extend(Duration::from_secs(5)).expect("extend");
    g.unlock().expect("unlock");
}
