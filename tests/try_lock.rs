//! `try_lock`: fails with `WouldBlock` while the lock is held *or* anyone is queued (it never
//! jumps the queue), succeeds on a free lock, and `WouldDeadlock` for the holding thread.

mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Shm, TempDir, Worker, role, wait_all, wait_for_waiters};
use fairlock::{Error, FairLock};

#[test]
fn free_lock_try_lock_succeeds() {
    let dir = TempDir::new("try-free");
    let path = dir.join("lock");
    let lock = FairLock::open(&path).expect("open");
    let g = lock.try_lock().expect("try_lock on a fresh lock");
    let t1 = g.token();
    let st = fairlock::inspect(&path).expect("inspect");
    assert_eq!(st.holder.as_ref().map(|h| h.token), Some(t1), "{st:?}");
    drop(g);
    let g = lock.try_lock().expect("try_lock after release");
    assert!(g.token() > t1);
    g.unlock().expect("unlock");
    assert!(fairlock::inspect(&path).unwrap().holder.is_none());
}

#[test]
fn held_lock_try_lock_from_another_thread_would_block() {
    let dir = TempDir::new("try-held-thread");
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::open(&path).expect("open"));
    let g = lock.lock().expect("lock");
    let before = fairlock::inspect(&path).unwrap().next_ticket;
    for _ in 0..3 {
        let l = lock.clone();
        let r = std::thread::spawn(move || l.try_lock().map(|g| g.token()))
            .join()
            .unwrap();
        assert!(matches!(r, Err(Error::WouldBlock { .. })), "{r:?}");
    }
    // A failed try_lock takes no ticket and leaves no waiter.
    let st = fairlock::inspect(&path).unwrap();
    assert_eq!(st.next_ticket, before, "{st:?}");
    assert!(st.waiters.is_empty(), "{st:?}");
    // A separate handle in another thread is refused too.
    let p = path.clone();
    let r = std::thread::spawn(move || {
        let other = FairLock::open(&p).expect("open");
        other.try_lock().map(|g| g.token())
    })
    .join()
    .unwrap();
    assert!(matches!(r, Err(Error::WouldBlock { .. })), "{r:?}");
    drop(g);
    let l = lock.clone();
    std::thread::spawn(move || l.try_lock().map(|g| g.token()))
        .join()
        .unwrap()
        .expect("free after release");
}

#[test]
fn held_lock_try_lock_from_another_process_would_block() {
    const RESULT: usize = 0;
    if role().is_some() {
        let lock = FairLock::open(common::env("FL_LOCK")).expect("worker open");
        let shm = Shm::open(common::env("FL_SHM").as_ref());
        let code = match lock.try_lock() {
            Ok(_) => 1,
            Err(Error::WouldBlock { .. }) => 2,
            Err(e) => panic!("unexpected: {e}"),
        };
        shm.atomic(RESULT).store(code, SeqCst);
        return;
    }
    let dir = TempDir::new("try-held-proc");
    let path = dir.join("lock");
    let shm_path = dir.join("shm");
    let shm = Shm::create(&shm_path, 1);
    let lock = FairLock::open(&path).expect("open");
    let env = [
        ("FL_LOCK", path.display().to_string()),
        ("FL_SHM", shm_path.display().to_string()),
    ];
    let test = "held_lock_try_lock_from_another_process_would_block";
    let g = lock.lock().expect("lock");
    let mut w = vec![Worker::spawn(dir.path(), test, "try", "held", &env)];
    wait_all(&mut w, Duration::from_secs(30));
    assert_eq!(
        shm.atomic(RESULT).load(SeqCst),
        2,
        "worker's try_lock on a held lock"
    );
    drop(g);
    let mut w = vec![Worker::spawn(dir.path(), test, "try", "free", &env)];
    wait_all(&mut w, Duration::from_secs(30));
    assert_eq!(
        shm.atomic(RESULT).load(SeqCst),
        1,
        "worker's try_lock on a free lock"
    );
}

#[test]
fn try_lock_never_jumps_the_queue() {
    let dir = TempDir::new("try-queue");
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::open(&path).expect("open"));
    let order = Arc::new(Mutex::new(Vec::new()));
    let g = lock.lock().expect("lock");
    let held = g.token();
    // A queued waiter.
    let (l, o) = (lock.clone(), order.clone());
    let waiter = std::thread::spawn(move || {
        let g = l.lock().expect("waiter lock");
        o.lock().unwrap().push(("waiter", g.token()));
        std::thread::sleep(Duration::from_millis(50));
        drop(g);
    });
    wait_for_waiters(&path, 1, Duration::from_secs(20));
    // A third party: refused while someone is queued, even once the lock is released.
    let (l, o) = (lock.clone(), order.clone());
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let trier = std::thread::spawn(move || {
        let r = l.try_lock().map(|g| g.token());
        assert!(
            matches!(r, Err(Error::WouldBlock { .. })),
            "with a waiter queued: {r:?}"
        );
        tx.send(()).unwrap();
        // Keep trying; it must only succeed after the waiter had its turn.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            match l.try_lock() {
                Ok(g) => {
                    o.lock().unwrap().push(("trier", g.token()));
                    return;
                }
                Err(Error::WouldBlock { .. }) => {}
                Err(e) => panic!("unexpected: {e}"),
            }
            assert!(
                std::time::Instant::now() < deadline,
                "try_lock never succeeded"
            );
            std::thread::yield_now();
        }
    });
    rx.recv_timeout(Duration::from_secs(20))
        .expect("trier started");
    drop(g);
    common::with_time_limit(Duration::from_secs(30), "waiter and trier", move || {
        waiter.join().expect("waiter panicked");
        trier.join().expect("trier panicked");
    });
    let order = order.lock().unwrap().clone();
    assert_eq!(order.len(), 2, "{order:?}");
    assert_eq!(
        order[0],
        ("waiter", held + 1),
        "the queued waiter goes first: {order:?}"
    );
    assert_eq!(order[1].0, "trier", "{order:?}");
    assert!(order[1].1 > held + 1, "{order:?}");
}

#[test]
fn try_lock_by_holder_would_deadlock() {
    let dir = TempDir::new("try-deadlock");
    let lock = FairLock::open(dir.join("lock")).expect("open");
    let g = lock.lock().expect("lock");
    assert!(matches!(lock.try_lock(), Err(Error::WouldDeadlock { .. })));
    let g2 = lock.try_lock();
    assert!(matches!(g2, Err(Error::WouldDeadlock { .. })), "{g2:?}");
    drop(g2);
    // Still held by us; released normally afterwards.
    g.unlock().expect("unlock");
    drop(lock.try_lock().expect("free after unlock"));
}
