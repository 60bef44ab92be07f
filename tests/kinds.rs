//! The shared kinds: `FairRwLock` (readers overlap, a writer excludes everyone, a writer that
//! arrives while readers hold goes before readers that arrive after it, dead readers and
//! writers recovered) and `FairSemaphore` (at most N, arrival order, a dead holder's permit
//! comes back, a file of another count refused), across real processes and threads.
//!
//! Also: shares beside a long-held share (each lap of its slot is retaken, nothing stalls
//! however many laps go by), several leased shares of one process (each with its own lease),
//! a dead reader's slot reused, a write behind the thread's own retaken read, and interrupt
//! hooks that panic.

mod common;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Gate, Shm, TempDir, Worker, log_append, log_entries, role, wait_all};
use fairlock::{Error, FairLock, FairRwLock, FairSemaphore, LockKind};

/// Waits until `inspect` shows `holders` holders and `waiters` waiters.
fn wait_for(path: &std::path::Path, holders: usize, waiters: usize) -> fairlock::Status {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = fairlock::inspect(path).expect("inspect");
        if st.holders.len() == holders && st.waiters.len() == waiters {
            return st;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {holders} holders and {waiters} waiters: {st:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn readers_overlap_across_processes() {
    const READERS: u64 = 4;
    if role().is_some() {
        let lock = FairRwLock::open(common::env("FL_LOCK")).expect("open");
        let shm = Shm::open(common::env("FL_SHM").as_ref());
        let gate = Gate::open(common::env("FL_GATE").as_ref());
        gate.arrive_and_wait();
        let g = lock.read().expect("read");
        // Every reader stays until all of them are inside: this finishes only if they hold
        // together.
        shm.atomic(0).fetch_add(1, SeqCst);
        let deadline = Instant::now() + Duration::from_secs(20);
        while shm.atomic(0).load(SeqCst) < READERS {
            assert!(
                Instant::now() < deadline,
                "the readers did not hold together"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        g.unlock().expect("unlock");
        return;
    }
    let dir = TempDir::new("kinds-readers-overlap");
    let lock_path = dir.join("lock");
    let (shm_path, gate_path) = (dir.join("shm"), dir.join("gate"));
    let _shm = Shm::create(&shm_path, 1);
    let gate = Gate::create(&gate_path);
    drop(FairRwLock::open(&lock_path).expect("create"));
    let mut workers: Vec<Worker> = (0..READERS)
        .map(|i| {
            Worker::spawn(
                dir.path(),
                "readers_overlap_across_processes",
                "reader",
                &format!("r{i}"),
                &[
                    ("FL_LOCK", lock_path.display().to_string()),
                    ("FL_SHM", shm_path.display().to_string()),
                    ("FL_GATE", gate_path.display().to_string()),
                ],
            )
        })
        .collect();
    gate.open_when_arrived(READERS, &mut workers);
    wait_all(&mut workers, Duration::from_secs(60));
    let st = fairlock::inspect(&lock_path).expect("inspect");
    assert_eq!(st.kind, LockKind::RwLock);
    assert!(st.holders.is_empty() && st.waiters.is_empty(), "{st:?}");
}

#[test]
fn a_writer_excludes_everyone_and_readers_exclude_writers() {
    const PROCS: usize = 3;
    const THREADS: usize = 2;
    const OPS: u64 = 1500;
    // Shm words: 0 readers inside, 1 writers inside, 2 violations, 3 writes, 4 reads,
    // 5 most readers seen together.
    if role().is_some() {
        let lock = Arc::new(FairRwLock::open(common::env("FL_LOCK")).expect("open"));
        let shm = Arc::new(Shm::open(common::env("FL_SHM").as_ref()));
        let gate = Arc::new(Gate::open(common::env("FL_GATE").as_ref()));
        let id: u64 = common::env_parse("FL_ID");
        let threads: Vec<_> = (0..THREADS as u64)
            .map(|t| {
                let (lock, shm, gate) = (lock.clone(), shm.clone(), gate.clone());
                std::thread::spawn(move || {
                    gate.arrive_and_wait();
                    let mut x = (id * 31 + t * 7 + 1) | 1;
                    for _ in 0..OPS {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        if x.is_multiple_of(4) {
                            let g = lock.write().expect("write");
                            if shm.atomic(0).load(SeqCst) != 0
                                || shm.atomic(1).fetch_add(1, SeqCst) != 0
                            {
                                shm.atomic(2).fetch_add(1, SeqCst);
                            }
                            for _ in 0..200 {
                                std::hint::spin_loop();
                            }
                            if shm.atomic(0).load(SeqCst) != 0 {
                                shm.atomic(2).fetch_add(1, SeqCst);
                            }
                            shm.atomic(1).fetch_sub(1, SeqCst);
                            shm.atomic(3).fetch_add(1, SeqCst);
                            drop(g);
                        } else {
                            let g = lock.read().expect("read");
                            let inside = shm.atomic(0).fetch_add(1, SeqCst) + 1;
                            shm.atomic(5).fetch_max(inside, SeqCst);
                            if shm.atomic(1).load(SeqCst) != 0 {
                                shm.atomic(2).fetch_add(1, SeqCst);
                            }
                            for _ in 0..400 {
                                std::hint::spin_loop();
                            }
                            if shm.atomic(1).load(SeqCst) != 0 {
                                shm.atomic(2).fetch_add(1, SeqCst);
                            }
                            shm.atomic(0).fetch_sub(1, SeqCst);
                            shm.atomic(4).fetch_add(1, SeqCst);
                            drop(g);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("worker thread");
        }
        return;
    }
    let dir = TempDir::new("kinds-exclusion");
    let lock_path = dir.join("lock");
    let (shm_path, gate_path) = (dir.join("shm"), dir.join("gate"));
    let shm = Shm::create(&shm_path, 6);
    let gate = Gate::create(&gate_path);
    drop(FairRwLock::open(&lock_path).expect("create"));
    let mut workers: Vec<Worker> = (0..PROCS)
        .map(|i| {
            Worker::spawn(
                dir.path(),
                "a_writer_excludes_everyone_and_readers_exclude_writers",
                "worker",
                &format!("w{i}"),
                &[
                    ("FL_LOCK", lock_path.display().to_string()),
                    ("FL_SHM", shm_path.display().to_string()),
                    ("FL_GATE", gate_path.display().to_string()),
                    ("FL_ID", i.to_string()),
                ],
            )
        })
        .collect();
    gate.open_when_arrived((PROCS * THREADS) as u64, &mut workers);
    wait_all(&mut workers, Duration::from_secs(120));
    let (violations, writes, reads, most) = (shm.read(2), shm.read(3), shm.read(4), shm.read(5));
    eprintln!("writes {writes}, reads {reads}, at most {most} readers together");
    assert_eq!(violations, 0, "a writer held with someone else");
    assert_eq!(writes + reads, (PROCS * THREADS) as u64 * OPS);
    assert!(writes > 0 && reads > 0);
    assert!(most >= 2, "readers never held together");
}

#[test]
fn a_writer_arriving_while_readers_hold_goes_before_later_readers() {
    if let Some(r) = role() {
        let lock = FairRwLock::open(common::env("FL_LOCK")).expect("open");
        let shm = Shm::open(common::env("FL_SHM").as_ref());
        let tag = if r == "writer" {
            1u64 << 60
        } else {
            2u64 << 60
        };
        if r == "writer" {
            let g = lock.write().expect("write");
            log_append(&shm, tag | g.token());
            std::thread::sleep(Duration::from_millis(50));
        } else {
            let g = lock.read().expect("read");
            log_append(&shm, tag | g.token());
        }
        return;
    }
    let dir = TempDir::new("kinds-writer-first");
    let lock_path = dir.join("lock");
    let shm_path = dir.join("shm");
    let shm = Shm::create(&shm_path, 8);
    let lock = FairRwLock::open(&lock_path).expect("create");
    let held = lock.read().expect("read");
    let spawn = |role: &str| {
        Worker::spawn(
            dir.path(),
            "a_writer_arriving_while_readers_hold_goes_before_later_readers",
            role,
            role,
            &[
                ("FL_LOCK", lock_path.display().to_string()),
                ("FL_SHM", shm_path.display().to_string()),
            ],
        )
    };
    let writer = spawn("writer");
    wait_for(&lock_path, 1, 1);
    let reader = spawn("reader");
    // The reader queues behind the writer although only a reader holds.
    let st = wait_for(&lock_path, 1, 2);
    assert!(st.holders[0].shared && !st.waiters[0].shared && st.waiters[1].shared);
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        log_entries(&shm).is_empty(),
        "someone went past the held read"
    );
    held.unlock().expect("unlock");
    let mut both = vec![writer, reader];
    wait_all(&mut both, Duration::from_secs(30));
    let log = log_entries(&shm);
    assert_eq!(log.len(), 2, "{log:x?}");
    assert_eq!(log[0] >> 60, 1, "the writer went first: {log:x?}");
    assert_eq!(log[1] >> 60, 2);
    let token = |e: u64| e & ((1 << 60) - 1);
    assert!(token(log[0]) < token(log[1]));
}

#[test]
fn dead_readers_writers_and_permit_holders_are_recovered() {
    if let Some(r) = role() {
        let path = common::env("FL_LOCK");
        let shm = Shm::open(common::env("FL_SHM").as_ref());
        // Take the grant(s), say so, and wait to be killed.
        let _keep: Vec<Box<dyn std::any::Any>> = match r.as_str() {
            "reader" => {
                let l = Box::leak(Box::new(FairRwLock::open(&path).expect("open")));
                vec![Box::new(l.read().expect("read"))]
            }
            "writer" => {
                let l = Box::leak(Box::new(FairRwLock::open(&path).expect("open")));
                vec![Box::new(l.write().expect("write"))]
            }
            _ => {
                let s = Box::leak(Box::new(FairSemaphore::open(&path, 2).expect("open")));
                vec![
                    Box::new(s.acquire().expect("acquire")),
                    Box::new(s.acquire().expect("acquire")),
                ]
            }
        };
        shm.write(0, 1);
        std::thread::sleep(Duration::from_secs(60));
        panic!("not killed");
    }
    let dir = TempDir::new("kinds-dead");
    let shm_path = dir.join("shm");
    let shm = Shm::create(&shm_path, 1);
    for role in ["reader", "writer", "permits"] {
        shm.write(0, 0);
        let lock_path = dir.join(role);
        let mut w = Worker::spawn(
            dir.path(),
            "dead_readers_writers_and_permit_holders_are_recovered",
            role,
            role,
            &[
                ("FL_LOCK", lock_path.display().to_string()),
                ("FL_SHM", shm_path.display().to_string()),
            ],
        );
        common::wait_until(Duration::from_secs(20), "the grant", || {
            assert!(!w.poll(), "worker exited: {}", w.stderr());
            shm.read(0) == 1
        });
        w.child.kill().expect("kill");
        w.child.wait().expect("wait");
        match role {
            "reader" | "writer" => {
                let l = FairRwLock::open(&lock_path).expect("open");
                // A write needs the dead reader's share back; a read the dead writer's grant.
                if role == "reader" {
                    let g = l.write_timeout(Duration::from_secs(20)).expect("write");
                    assert!(g.owner_died(), "{role}: owner_died not reported");
                } else {
                    let g = l.read_timeout(Duration::from_secs(20)).expect("read");
                    assert!(g.owner_died(), "{role}: owner_died not reported");
                }
                let again = l.try_write().expect("free again");
                assert!(!again.owner_died(), "{role}: the death is reported once");
            }
            _ => {
                let s = FairSemaphore::open(&lock_path, 2).expect("open");
                let a = s.acquire_timeout(Duration::from_secs(20)).expect("first");
                let b = s.acquire_timeout(Duration::from_secs(20)).expect("second");
                assert!(a.owner_died(), "permits: owner_died not reported");
                assert!(!b.owner_died());
                assert!(matches!(s.try_acquire(), Err(Error::WouldBlock { .. })));
            }
        }
    }
}

#[test]
fn a_semaphore_admits_at_most_its_permits_in_arrival_order() {
    const PERMITS: u32 = 2;
    const PROCS: usize = 5;
    if role().is_some() {
        let s = FairSemaphore::open(common::env("FL_LOCK"), PERMITS).expect("open");
        let shm = Shm::open(common::env("FL_SHM").as_ref());
        let id: u64 = common::env_parse("FL_ID");
        let p = s.acquire().expect("acquire");
        let inside = shm.atomic(0).fetch_add(1, SeqCst) + 1;
        shm.atomic(1).fetch_max(inside, SeqCst);
        log_append_at(&shm, 2, (p.token() << 8) | id);
        std::thread::sleep(Duration::from_millis(30));
        shm.atomic(0).fetch_sub(1, SeqCst);
        drop(p);
        return;
    }
    let dir = TempDir::new("kinds-semaphore");
    let lock_path = dir.join("lock");
    let shm_path = dir.join("shm");
    let shm = Shm::create(&shm_path, 4 + PROCS);
    let sem = FairSemaphore::open(&lock_path, PERMITS).expect("create");
    assert_eq!(sem.permits(), PERMITS);
    // Hold both permits, then let the workers queue one by one: their order is known.
    let (a, b) = (sem.acquire().expect("a"), sem.acquire().expect("b"));
    let mut workers = Vec::new();
    for i in 0..PROCS {
        workers.push(Worker::spawn(
            dir.path(),
            "a_semaphore_admits_at_most_its_permits_in_arrival_order",
            "worker",
            &format!("w{i}"),
            &[
                ("FL_LOCK", lock_path.display().to_string()),
                ("FL_SHM", shm_path.display().to_string()),
                ("FL_ID", i.to_string()),
            ],
        ));
        wait_for(&lock_path, 2, i + 1);
    }
    drop(a);
    drop(b);
    wait_all(&mut workers, Duration::from_secs(60));
    assert!(
        shm.read(1) <= u64::from(PERMITS),
        "more holders than permits"
    );
    assert_eq!(
        shm.read(1),
        u64::from(PERMITS),
        "the permits were never all used"
    );
    let log: Vec<u64> = (0..PROCS).map(|i| shm.read(3 + i)).collect();
    assert_eq!(shm.read(2), PROCS as u64);
    let mut by_token = log.clone();
    by_token.sort();
    let order: Vec<u64> = by_token.iter().map(|e| e & 0xff).collect();
    assert_eq!(
        order,
        (0..PROCS as u64).collect::<Vec<_>>(),
        "arrival order: {log:x?}"
    );
}

/// Appends to a log at words `at` (count) and `at + 1..` of `shm`.
fn log_append_at(shm: &Shm, at: usize, value: u64) {
    let i = shm.atomic(at).fetch_add(1, SeqCst) as usize;
    shm.write(at + 1 + i, value);
}

#[test]
fn another_kind_or_permit_count_is_refused_naming_both() {
    let dir = TempDir::new("kinds-mismatch");
    let sem = dir.join("sem");
    let mut s3 = Some(FairSemaphore::open(&sem, 3).expect("create"));
    let before = std::fs::read(&sem).expect("read");
    let e = FairSemaphore::open(&sem, 2).expect_err("another count");
    let msg = e.to_string();
    assert!(matches!(e, Error::KindMismatch { .. }), "{e:?}");
    assert!(
        msg.contains("3 permits") && msg.contains("2 permits"),
        "{msg}"
    );
    assert!(msg.contains(&sem.display().to_string()), "{msg}");
    // With this process's view of the file open (reused, checked by the handle) and without
    // (the file layer's check, before anything is written).
    for open_view in [true, false] {
        assert!(
            matches!(FairLock::open(&sem), Err(Error::KindMismatch { .. })),
            "view open: {open_view}"
        );
        assert!(matches!(
            FairRwLock::open(&sem),
            Err(Error::KindMismatch { .. })
        ));
        assert!(matches!(
            FairSemaphore::open(&sem, 4),
            Err(Error::KindMismatch { .. })
        ));
        if open_view {
            drop(FairSemaphore::open(&sem, 3).expect("the same count"));
            s3 = None; // the process's last handle: the view closes
        }
    }
    assert!(s3.is_none());
    assert_eq!(std::fs::read(&sem).expect("read"), before, "file written");
    let plain = dir.join("plain");
    drop(FairLock::open(&plain).expect("create"));
    let e = FairRwLock::open(&plain).expect_err("an exclusive lock");
    assert!(e.to_string().contains("exclusive lock"), "{e}");
    assert!(matches!(
        FairSemaphore::open(dir.join("zero"), 0),
        Err(Error::InvalidOption { .. })
    ));
    assert!(matches!(
        FairSemaphore::open(dir.join("huge"), (1 << 19) + 1),
        Err(Error::InvalidOption { .. })
    ));
    let big = FairSemaphore::open(dir.join("big"), 1000).expect("1000 permits");
    let st = fairlock::inspect(big.path()).expect("inspect");
    assert_eq!(st.kind, LockKind::Semaphore { permits: 1000 });
}

#[test]
fn leases_work_for_readers_and_writers() {
    let dir = TempDir::new("kinds-leases");
    let path = dir.join("lock");
    let leased = FairRwLock::options()
        .lease(Duration::from_millis(150))
        .open(&path)
        .expect("open");
    let r = leased.read().expect("read");
    assert_eq!(r.lease(), Some(Duration::from_millis(150)));
    let p2 = path.clone();
    let writer = std::thread::spawn(move || {
        let l = FairRwLock::open(&p2).expect("open");
        let started = Instant::now();
        let w = l.write_timeout(Duration::from_secs(20)).expect("write");
        (started.elapsed(), w.owner_died(), w.token())
    });
    let (waited, died, wtoken) = writer.join().expect("writer");
    assert!(
        waited >= Duration::from_millis(100),
        "taken over early: {waited:?}"
    );
    assert!(died, "a taken-over reader is reported");
    assert!(wtoken > r.token());
    assert!(matches!(r.check(), Err(Error::LockLost { .. })));
    assert!(matches!(r.unlock(), Err(Error::LockLost { .. })));
    // A writer's lease too, and extend keeps it.
    let w = leased.write().expect("write");
    w.extend(Duration::from_secs(5)).expect("extend");
    std::thread::sleep(Duration::from_millis(200));
    w.check().expect("extended");
    w.unlock().expect("unlock");
}

#[test]
fn a_thread_asking_again_is_refused_but_a_semaphore_gives_it_more_permits() {
    let dir = TempDir::new("kinds-reentry");
    let l = FairRwLock::open(dir.join("rw")).expect("open");
    let r = l.read().expect("read");
    assert!(matches!(l.write(), Err(Error::WouldDeadlock { .. })));
    assert!(matches!(l.read(), Err(Error::WouldDeadlock { .. })));
    assert!(matches!(l.try_read(), Err(Error::WouldDeadlock { .. })));
    // Another thread reads alongside.
    let p = l.path().to_path_buf();
    std::thread::spawn(move || {
        let l = FairRwLock::open(p).expect("open");
        l.try_read()
            .expect("readers share")
            .unlock()
            .expect("unlock");
    })
    .join()
    .expect("thread");
    drop(r);
    let s = FairSemaphore::open(dir.join("sem"), 3).expect("open");
    let permits: Vec<_> = (0..3).map(|_| s.acquire().expect("acquire")).collect();
    assert!(matches!(s.try_acquire(), Err(Error::WouldBlock { .. })));
    assert!(matches!(
        s.acquire_timeout(Duration::from_millis(20)),
        Err(Error::Timeout { .. })
    ));
    drop(permits);
    drop(s.try_acquire().expect("free again"));
}

#[test]
fn a_permit_outlives_its_thread_and_may_be_released_by_another() {
    let dir = common::TempDir::new("kinds-permit-send");
    let s = FairSemaphore::open(dir.join("sem"), 1).expect("open");
    // Taken by a thread that then ends: the permit is handed over, still held.
    let p = std::thread::scope(|sc| sc.spawn(|| s.acquire().expect("acquire")).join().unwrap());
    assert!(matches!(s.try_acquire(), Err(Error::WouldBlock { .. })));
    // Released by yet another thread.
    std::thread::scope(|sc| {
        sc.spawn(move || p.unlock().expect("release from another thread"));
    });
    drop(s.try_acquire().expect("free again"));
}

// ---------------------------------------------------------------------------------------------
// Many grants beside a long-held share; several leased shares of one process; a dead reader
// ---------------------------------------------------------------------------------------------

/// One long read; 255 short reads by another thread; the 256th short read maps to the long
/// read's slot and is granted beside it at once (readers share): it does not wait for it.
#[test]
fn a_long_read_does_not_block_the_256th_read_after_it() {
    let dir = TempDir::new("kinds-long-read");
    let path = dir.join("rw");
    let lock = FairRwLock::open(&path).expect("open");
    let long = lock.read().expect("read");
    let p = path.clone();
    let r = std::thread::spawn(move || {
        let l = FairRwLock::open(&p).expect("open");
        for i in 0..255 {
            drop(l.read().unwrap_or_else(|e| panic!("read {i}: {e}")));
        }
        l.read_timeout(Duration::from_millis(500))
            .map(|g| g.token())
    })
    .join()
    .expect("reader thread");
    drop(long);
    assert!(r.is_ok(), "the 256th read after a long read: {r:?}");
}

/// The same for a semaphore of 2 permits: one held for long, the other acquired and released by
/// another thread; its 256th acquisition, on the long holder's slot, is granted (a permit is
/// free).
#[test]
fn a_free_permit_is_granted_after_many_uses() {
    let dir = TempDir::new("kinds-permit");
    let path = dir.join("sem");
    let sem = FairSemaphore::open(&path, 2).expect("open");
    let long = sem.acquire().expect("acquire");
    let p = path.clone();
    let r = std::thread::spawn(move || {
        let s = FairSemaphore::open(&p, 2).expect("open");
        for i in 0..255 {
            drop(s.acquire().unwrap_or_else(|e| panic!("acquire {i}: {e}")));
        }
        s.acquire_timeout(Duration::from_millis(500))
            .map(|g| g.token())
    })
    .join()
    .expect("thread");
    drop(long);
    assert!(r.is_ok(), "one permit free, yet: {r:?}");
}

/// Each leased grant has its own deadline, in its slot: a process holds any number of leased
/// reads (two threads of one process share a leased semaphore this way:
/// `fairlock.diskcache.BoundedSemaphore(value=2, expire=...)`), and each one's lease is its
/// own — extending one does not extend the other, and a writer takes over exactly the one
/// whose lease ran out.
#[test]
fn a_process_holds_several_leased_shares_each_with_its_own_lease() {
    let dir = TempDir::new("kinds-leased-shares");
    let path = dir.join("rw");
    let leased = |ms: u64| {
        FairRwLock::options()
            .lease(Duration::from_millis(ms))
            .open(&path)
            .expect("open")
    };
    let a = leased(1000);
    let r1 = a.read().expect("read");
    r1.extend(Duration::from_secs(60)).expect("extend");
    let p2 = path.clone();
    // A second leased read of this process, on another thread, with a short lease.
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let second = std::thread::spawn(move || {
        let b = FairRwLock::options()
            .lease(Duration::from_millis(300))
            .open(&p2)
            .expect("open");
        let r2 = b.read().expect("a second leased read of the process");
        tx.send(()).unwrap();
        done_rx.recv().unwrap();
        // Its lease (300 ms) ran out and a writer took it over: lost.
        assert!(matches!(r2.check(), Err(Error::LockLost { .. })));
    });
    rx.recv().unwrap();
    // (This thread asking again is refused first for re-entry: WouldDeadlock.)
    assert!(matches!(a.try_write(), Err(Error::WouldDeadlock { .. })));
    // A writer waits: the short read is taken over after ~300 ms, the extended one never.
    let p4 = path.clone();
    let writer = std::thread::spawn(move || {
        FairRwLock::open(&p4)
            .expect("open")
            .write_timeout(Duration::from_secs(2))
            .map(|_| ())
    })
    .join()
    .expect("writer");
    assert!(matches!(writer, Err(Error::Timeout { .. })), "{writer:?}");
    done_tx.send(()).unwrap();
    second.join().expect("second reader");
    r1.check().expect("the extended read is still ours");
    r1.unlock().expect("unlock");
}

/// One thread holds two leased permits of one semaphore at once (each with its own lease), as
/// two threads of a process sharing a `BoundedSemaphore(value=2, expire=...)` do.
#[test]
fn one_thread_holds_two_leased_permits() {
    let dir = TempDir::new("kinds-two-permits");
    let path = dir.join("sem");
    let sem = FairSemaphore::options()
        .lease(Duration::from_secs(30))
        .open(&path, 2)
        .expect("open");
    let a = sem.acquire().expect("first leased permit");
    let b = sem
        .acquire()
        .expect("second leased permit of the same thread");
    assert_ne!(a.token(), b.token());
    a.extend(Duration::from_secs(60)).expect("extend one");
    assert!(matches!(sem.try_acquire(), Err(Error::WouldBlock { .. })));
    b.unlock().expect("unlock the second");
    a.check().expect("the first is still ours");
    let c = sem.try_acquire().expect("one permit back");
    drop((a, c));
}

/// Real processes and default options: a reader process is killed while holding; 255 reads
/// follow (each granted at once: nobody waits, so nobody recovers); the 256th read maps to the
/// dead reader's slot. It is granted (a share is free), and the death reaches the later grant
/// that needs the dead reader's share.
#[test]
fn a_dead_reader_does_not_stall_the_reader_on_its_slot() {
    if role().is_some() {
        let l = Box::leak(Box::new(
            FairRwLock::open(common::env("FL_LOCK")).expect("open"),
        ));
        let shm = Shm::open(common::env("FL_SHM").as_ref());
        let g = l.read().expect("read");
        std::mem::forget(g);
        shm.write(0, 1);
        std::thread::sleep(Duration::from_secs(60));
        panic!("not killed");
    }
    let dir = TempDir::new("kinds-dead-reader");
    let lock_path = dir.join("rw");
    let shm_path = dir.join("shm");
    let shm = Shm::create(&shm_path, 1);
    let mut w = Worker::spawn(
        dir.path(),
        "a_dead_reader_does_not_stall_the_reader_on_its_slot",
        "reader",
        "reader",
        &[
            ("FL_LOCK", lock_path.display().to_string()),
            ("FL_SHM", shm_path.display().to_string()),
        ],
    );
    common::wait_until(Duration::from_secs(20), "the read", || {
        assert!(!w.poll(), "worker exited: {}", w.stderr());
        shm.read(0) == 1
    });
    w.child.kill().expect("kill");
    w.child.wait().expect("wait");
    let l = FairRwLock::open(&lock_path).expect("open");
    for i in 0..255 {
        drop(l.read().unwrap_or_else(|e| panic!("read {i}: {e}")));
    }
    // The 256th read's slot is still the dead reader's: it takes another ticket and is
    // granted (a share is free; it needs nothing of the dead reader's, so it need not be told).
    let r = l.read_timeout(Duration::from_secs(2));
    assert!(
        r.is_ok(),
        "the read on the dead reader's slot was not granted: {r:?}"
    );
    drop(r);
    // A write needs the dead reader's share: recovered, and told.
    let next = l
        .write_timeout(Duration::from_secs(2))
        .map(|g| g.owner_died());
    assert!(matches!(next, Ok(true)), "the next write: {next:?}");
}

// ---------------------------------------------------------------------------------------------
// Re-entry behind a retaken read; interrupt hooks that panic; many long holders
// ---------------------------------------------------------------------------------------------

/// A thread of another handle holds a read (ticket 0) of a 4-slot reader/writer lock for long;
/// the main thread reads three times (tickets 1..3), then a fourth time: ticket 4 maps to the
/// long read's slot, so it is retaken as ticket 5 and granted. Holding that read, the thread
/// asks for a write: it would wait behind its own read, so it gets `WouldDeadlock` —
/// `holds_already` finds ticket 5 although it lies more than N tickets from `head` (0); missed,
/// the write would wait behind its own read (here until its timeout; `write()` for ever).
#[test]
fn a_write_behind_its_own_retaken_read_is_refused() {
    let dir = TempDir::new("kinds-reentry");
    let path = dir.join("rw");
    let lock = FairRwLock::options().slots(4).open(&path).expect("open");
    let (hold_tx, hold_rx) = mpsc::channel::<()>();
    let (held_tx, held_rx) = mpsc::channel::<()>();
    let p = path.clone();
    let long = std::thread::spawn(move || {
        let l = FairRwLock::open(&p).expect("open");
        let g = l.read().expect("long read");
        held_tx.send(()).unwrap();
        let _ = hold_rx.recv();
        drop(g);
    });
    held_rx.recv().unwrap();
    for _ in 0..3 {
        drop(lock.read().expect("read"));
    }
    let mine = lock
        .read_timeout(Duration::from_secs(2))
        .expect("retaken read");
    assert_eq!(mine.token(), 6, "ticket 4 was retaken as ticket 5");
    let status = fairlock::inspect(&path).expect("inspect");
    let shown: Vec<u64> = status.holders.iter().map(|h| h.token).collect();
    eprintln!("status holders (tokens): {shown:?}");
    let w = lock.write_timeout(Duration::from_millis(300));
    drop(mine);
    hold_tx.send(()).unwrap();
    long.join().unwrap();
    assert!(
        matches!(w, Err(Error::WouldDeadlock { .. })),
        "a write behind this thread's own read: {w:?}"
    );
    assert_eq!(shown, vec![1, 6], "status shows every holder");
}

/// Holds a write of `path` on another thread until the returned sender is used (or dropped).
fn write_elsewhere(path: &std::path::Path) -> (mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (held_tx, held_rx) = mpsc::channel::<()>();
    let p = path.to_path_buf();
    let h = std::thread::spawn(move || {
        let l = FairRwLock::open(&p).expect("open");
        let g = l.write().expect("write");
        held_tx.send(()).unwrap();
        let _ = go_rx.recv();
        drop(g);
    });
    held_rx.recv().unwrap();
    (go_tx, h)
}

/// A leased read whose interrupt hook panics unwinds out of `acquire_weighted`; the process's
/// count of leased shares is given back on the way (`leased_share_ended`), so later leased
/// reads, writes and permits of the file are granted as before, not refused with
/// `InvalidOption`.
#[test]
fn a_panicking_interrupt_hook_does_not_disable_leased_grants() {
    let dir = TempDir::new("kinds-hook");
    let path = dir.join("rw");
    let leased = FairRwLock::options()
        .lease(Duration::from_millis(200))
        .open(&path)
        .expect("open leased");
    let (release, writer) = write_elsewhere(&path);
    let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
        leased
            .read_interruptible(None, || panic!("hook panics"))
            .map(|g| g.token())
    }));
    assert!(r.is_err(), "the hook panicked: {r:?}");
    release.send(()).unwrap();
    writer.join().unwrap();
    // From another thread (this one looks like the holder of its stranded, granted ticket).
    let again = std::thread::scope(|s| {
        s.spawn(|| {
            leased
                .read_timeout(Duration::from_secs(2))
                .map(|g| g.token())
        })
        .join()
        .unwrap()
    });
    assert!(again.is_ok(), "a leased read after the panic: {again:?}");
}

/// An *unleased* waiter whose interrupt hook panics gives its published ticket up before the
/// panic goes on: left behind, once granted it would never be claimed nor skipped (its process
/// lives, no lease), and a writer would wait for as long as the process lives.
#[test]
fn a_panicking_interrupt_hook_does_not_strand_the_lock() {
    let dir = TempDir::new("kinds-strand");
    let path = dir.join("rw");
    let plain = FairRwLock::open(&path).expect("open");
    let (release, writer) = write_elsewhere(&path);
    let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
        plain
            .read_interruptible(None, || panic!("hook panics"))
            .map(|g| g.token())
    }));
    assert!(r.is_err(), "the hook panicked: {r:?}");
    release.send(()).unwrap();
    writer.join().unwrap();
    let w2 = std::thread::scope(|s| {
        s.spawn(|| {
            plain
                .write_timeout(Duration::from_secs(1))
                .map(|g| g.token())
        })
        .join()
        .unwrap()
    });
    assert!(w2.is_ok(), "nothing is held, yet: {w2:?}");
}

/// Default options (256 slots): a semaphore of 18 permits, 17 taken at start-up and held; the
/// 18th is used over and over by another thread. An acquisition that maps to slot 0 meets 17
/// held slots in a row (slots 0..16): the free permit is still granted every time while the
/// 17 hold.
#[test]
fn a_free_permit_is_granted_next_to_seventeen_long_holders() {
    let dir = TempDir::new("kinds-17");
    let path = dir.join("sem");
    let sem = fairlock::FairSemaphore::open(&path, 18).expect("open");
    let long: Vec<_> = (0..17).map(|_| sem.acquire().expect("acquire")).collect();
    let p = path.clone();
    let r = std::thread::spawn(move || {
        let s = fairlock::FairSemaphore::open(&p, 18).expect("open");
        for i in 0..400 {
            match s.acquire_timeout(Duration::from_millis(500)) {
                Ok(g) => drop(g),
                Err(e) => return Err(format!("acquisition {i}: {e}")),
            }
        }
        Ok(())
    })
    .join()
    .expect("thread");
    drop(long);
    assert!(r.is_ok(), "one permit free, yet: {r:?}");
}

// ---------------------------------------------------------------------------------------------
// Long holds: a share kept while thousands of others come and go. Every lap of the long
// share's slot is retaken by the short ones (they may not wait behind a share they could hold
// beside); nothing stalls however many laps go by, and the lock is whole afterwards.
// ---------------------------------------------------------------------------------------------

/// Short acquisitions beside the long one: more than three side records of 4095 retaken laps
/// each could hold, on a 2-slot file (every other ticket maps to the long share's slot).
const SHORT: u32 = 30_000;

/// One read held while `SHORT` reads by another thread come and go on a 2-slot file; each
/// must be granted at once (within a second), and a writer after the long read gets in.
#[test]
fn a_read_held_across_thousands_of_laps_stalls_nobody() {
    let dir = TempDir::new("long-read");
    let path = dir.join("rw");
    let lock = FairLock::options()
        .slots(2)
        .open_rwlock(&path)
        .expect("open");
    let long = lock.read().expect("read");
    let p = path.clone();
    let worst = std::thread::spawn(move || {
        let l = FairLock::options().slots(2).open_rwlock(&p).expect("open");
        let mut worst = Duration::ZERO;
        for i in 0..SHORT {
            let t = Instant::now();
            let g = l
                .read_timeout(Duration::from_secs(1))
                .unwrap_or_else(|e| panic!("read {i} beside a long read: {e}"));
            worst = worst.max(t.elapsed());
            drop(g);
        }
        worst
    })
    .join()
    .expect("reader thread");
    drop(long);
    let w = lock
        .write_timeout(Duration::from_secs(1))
        .expect("writer after the long read");
    drop(w);
    assert!(
        worst < Duration::from_secs(1),
        "slowest short read {worst:?}"
    );
}

/// The same for a semaphore of 2 permits on 4 slots: one kept, the other taken 10,000 times.
#[test]
fn a_permit_held_across_thousands_of_laps_stalls_nobody() {
    let dir = TempDir::new("long-permit");
    let path = dir.join("sem");
    let sem = FairLock::options()
        .slots(4)
        .open_semaphore(&path, 2)
        .expect("open");
    let long = sem.acquire().expect("acquire");
    let p = path.clone();
    std::thread::spawn(move || {
        let s = FairSemaphore::open(&p, 2).expect("open");
        for i in 0..10_000 {
            drop(
                s.acquire_timeout(Duration::from_secs(1))
                    .unwrap_or_else(|e| panic!("acquisition {i} beside a long one: {e}")),
            );
        }
    })
    .join()
    .expect("thread");
    drop(long);
    let both = (sem.acquire().expect("one"), sem.acquire().expect("two"));
    drop(both);
}
