//! `inspect`: who holds the lock (pid, tid) and who waits, in ticket order, as seen from
//! another process; and it never disturbs the lock.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use common::{Shm, TempDir, Worker, role, wait_all, wait_for_waiters};
use fairlock::FairLock;

/// Shared words: holder flag (1 = holding, 2 = release now), holder tid, then waiter tids.
const FLAG: usize = 0;
const HOLDER_TID: usize = 1;
const WAITER_TID: usize = 2;
const WAITERS: usize = 3;

#[test]
fn inspect_shows_holder_and_waiters_of_other_processes() {
    if let Some(r) = role() {
        let lock = FairLock::open(common::env("FL_LOCK")).expect("worker open");
        let shm = Shm::open(common::env("FL_SHM").as_ref());
        if r == "holder" {
            let g = lock.lock().expect("lock");
            g.stamp_time(); // an uncontended grant shows its thread and age only when stamped
            shm.atomic(HOLDER_TID)
                .store(u64::from(common::gettid()), SeqCst);
            shm.atomic(FLAG).store(1, SeqCst);
            common::wait_until(Duration::from_secs(30), "release order", || {
                shm.atomic(FLAG).load(SeqCst) == 2
            });
            g.unlock().expect("unlock");
        } else {
            let id: usize = common::env_parse("FL_ID");
            shm.atomic(WAITER_TID + id)
                .store(u64::from(common::gettid()), SeqCst);
            drop(lock.lock().expect("lock"));
        }
        return;
    }
    let dir = TempDir::new("inspect-procs");
    let path = dir.join("lock");
    let shm_path = dir.join("shm");
    let shm = Shm::create(&shm_path, WAITER_TID + WAITERS);
    drop(FairLock::open(&path).expect("create"));
    let test = "inspect_shows_holder_and_waiters_of_other_processes";
    let env = |id: usize| {
        vec![
            ("FL_LOCK", path.display().to_string()),
            ("FL_SHM", shm_path.display().to_string()),
            ("FL_ID", id.to_string()),
        ]
    };
    let mut holder = vec![Worker::spawn(dir.path(), test, "holder", "holder", &env(0))];
    common::wait_until(Duration::from_secs(30), "the holder", || {
        shm.atomic(FLAG).load(SeqCst) == 1
    });
    let st = fairlock::inspect(&path).expect("inspect");
    let h = st.holder.clone().expect("a holder");
    assert_eq!(h.pid, Some(holder[0].pid()), "{st:?}");
    assert_eq!(
        h.tid,
        Some(shm.atomic(HOLDER_TID).load(SeqCst) as u32),
        "{st:?}"
    );
    assert_eq!(h.state, "held", "{st:?}");
    assert_eq!(h.token, h.ticket + 1);
    assert!(!h.owner_died);
    assert_eq!(h.lease_remaining, None, "no lease was asked for: {st:?}");
    assert!(st.waiters.is_empty(), "{st:?}");
    assert_eq!(st.next_ticket, h.ticket + 1);
    assert_eq!(st.token(), h.token);

    let mut waiters = Vec::new();
    for id in 0..WAITERS {
        waiters.push(Worker::spawn(
            dir.path(),
            test,
            "waiter",
            &format!("waiter{id}"),
            &env(id),
        ));
        wait_for_waiters(&path, id + 1, Duration::from_secs(20));
    }
    let st = fairlock::inspect(&path).expect("inspect");
    assert_eq!(
        st.holder.as_ref().map(|h| h.ticket),
        Some(h.ticket),
        "{st:?}"
    );
    assert_eq!(st.waiters.len(), WAITERS, "{st:?}");
    for (k, w) in st.waiters.iter().enumerate() {
        assert_eq!(w.ticket, h.ticket + 1 + k as u64, "ticket order: {st:?}");
        assert_eq!(w.token, w.ticket + 1);
        assert_eq!(w.pid, Some(waiters[k].pid()), "waiter {k}: {st:?}");
        assert_eq!(
            w.tid,
            Some(shm.atomic(WAITER_TID + k).load(SeqCst) as u32),
            "waiter {k}: {st:?}"
        );
        assert!(
            w.state == "waiting" || w.state == "sleeping",
            "waiter {k} state {}",
            w.state
        );
    }
    assert_eq!(st.next_ticket, h.ticket + 1 + WAITERS as u64);
    assert_eq!(st.arriving, 0, "{st:?}");
    // inspect never disturbs the lock: nothing changed while we looked.
    let again = fairlock::inspect(&path).expect("inspect");
    assert_eq!(again.next_ticket, st.next_ticket);
    assert_eq!(again.waiters.len(), WAITERS);

    shm.atomic(FLAG).store(2, SeqCst);
    wait_all(&mut holder, Duration::from_secs(30));
    wait_all(&mut waiters, Duration::from_secs(30));
    let st = fairlock::inspect(&path).expect("inspect");
    assert!(st.holder.is_none() && st.waiters.is_empty(), "{st:?}");
    assert_eq!(st.next_ticket, h.ticket + 1 + WAITERS as u64);
    assert_eq!(st.token(), st.next_ticket + 1);
}

#[test]
fn inspect_shows_threads_of_this_process() {
    let dir = TempDir::new("inspect-threads");
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::open(&path).expect("open"));
    let g = lock.lock().expect("lock");
    // Uncontended: the fast path records no thread or time...
    let st = fairlock::inspect(&path).expect("inspect");
    let h = st.holder.clone().expect("holder");
    assert_eq!(h.pid, Some(std::process::id()));
    assert_eq!((h.tid, h.elapsed), (None, None), "{st:?}");
    // ...until the holder stamps them.
    g.stamp_time();
    let st = fairlock::inspect(&path).expect("inspect");
    let h = st.holder.clone().expect("holder");
    assert_eq!(h.pid, Some(std::process::id()));
    assert_eq!(h.tid, Some(common::gettid()));
    assert_eq!(h.token, g.token());
    let mut threads = Vec::new();
    let (tx, rx) = std::sync::mpsc::channel();
    for k in 0..2 {
        let (l, tx) = (lock.clone(), tx.clone());
        threads.push(std::thread::spawn(move || {
            tx.send(common::gettid()).unwrap();
            drop(l.lock().expect("lock"));
        }));
        let tid = rx.recv().unwrap();
        let st = wait_for_waiters(&path, k + 1, Duration::from_secs(20));
        assert_eq!(st.waiters[k].tid, Some(tid), "{st:?}");
        assert_eq!(st.waiters[k].pid, Some(std::process::id()));
        assert_eq!(st.waiters[k].ticket, h.ticket + 1 + k as u64);
    }
    drop(g);
    common::with_time_limit(Duration::from_secs(20), "waiters", move || {
        for t in threads {
            t.join().unwrap();
        }
    });
}

#[test]
fn inspect_holder_elapsed_is_plausible() {
    // `elapsed` is coarse, but it must never exceed how long the lock has been held by much,
    // also when the grant took the uncontended path and its slot carries an older time stamp
    // (2 slots: tickets reuse them every other grant).
    let dir = TempDir::new("inspect-elapsed-holder");
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::options().slots(2).open(&path).expect("open"));
    // Contended grants stamp both slots.
    for _ in 0..2 {
        let g = lock.lock().expect("lock");
        let l = lock.clone();
        let w = std::thread::spawn(move || drop(l.lock().expect("lock")));
        wait_for_waiters(&path, 1, Duration::from_secs(20));
        drop(g);
        w.join().unwrap();
    }
    std::thread::sleep(Duration::from_millis(400));
    for _ in 0..2 {
        let t0 = Instant::now();
        let g = lock.lock().expect("lock");
        std::thread::sleep(Duration::from_millis(30));
        let st = fairlock::inspect(&path).expect("inspect");
        let held_for = t0.elapsed();
        let h = st.holder.clone().expect("holder");
        assert_eq!(h.token, g.token());
        if let Some(e) = h.elapsed {
            assert!(
                e <= held_for + Duration::from_millis(200),
                "holder elapsed {e:?}, but it has held for {held_for:?}: {st:?}"
            );
        }
        drop(g);
    }
}

#[test]
fn inspect_waiter_elapsed_is_plausible() {
    let dir = TempDir::new("inspect-elapsed-waiter");
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::open(&path).expect("open"));
    // Some history in the slots first.
    for _ in 0..10 {
        drop(lock.lock().expect("lock"));
    }
    let g = lock.lock().expect("lock");
    let l = lock.clone();
    let t1 = Instant::now();
    let waiter = std::thread::spawn(move || drop(l.lock().expect("lock")));
    wait_for_waiters(&path, 1, Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(50));
    let st = fairlock::inspect(&path).expect("inspect");
    let waited = t1.elapsed();
    let e = st.waiters[0]
        .elapsed
        .expect("a published waiter's elapsed is known");
    assert!(
        e <= waited + Duration::from_secs(1),
        "waiter elapsed {e:?}, but it has waited {waited:?}: {st:?}"
    );
    drop(g);
    waiter.join().unwrap();
}
