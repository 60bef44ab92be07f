//! Regression tests from the adversarial review of the weighted FIFO (614ce19), through the
//! public API with default options (256 slots); each failed on that code.

mod common;

use std::time::Duration;

use common::{Shm, TempDir, Worker, role};
use fairlock::{Error, FairRwLock, FairSemaphore};

/// Finding 2. One long read; 255 short reads by another thread; the 256th short read maps to
/// the long read's slot and waits for it (here: times out), although readers share.
#[test]
fn a_long_read_does_not_block_the_256th_read_after_it() {
    let dir = TempDir::new("review-long-read");
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

/// Finding 2, semaphore: 2 permits, one held for long, the other acquired and released by
/// another thread; its 256th acquisition waits for the long holder with a permit free.
#[test]
fn a_free_permit_is_granted_after_many_uses() {
    let dir = TempDir::new("review-permit");
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

/// Finding 3 of that review, and of issue 28. The lease deadline lived in the participant entry,
/// one per process, so a second leased read of the same process rewrote the first one's
/// deadline (a read extended to 60 s was taken over after ~1 s); a second leased grant was then
/// refused (`InvalidOption`), which broke two threads of one process sharing a leased
/// semaphore (`fairlock.diskcache.BoundedSemaphore(value=2, expire=...)`). Now each grant has
/// its own deadline, in its slot: a process holds any number of leased reads, and each one's
/// lease is its own — extending one does not extend the other, and a writer takes over exactly
/// the one whose lease ran out.
#[test]
fn a_process_holds_several_leased_shares_each_with_its_own_lease() {
    let dir = TempDir::new("review-lease");
    let path = dir.join("rw");
    let leased = |ms: u64| {
        FairRwLock::options()
            .lease(Duration::from_millis(ms))
            .open_rwlock(&path)
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
            .open_rwlock(&p2)
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
    let dir = TempDir::new("review-two-permits");
    let path = dir.join("sem");
    let sem = FairSemaphore::options()
        .lease(Duration::from_secs(30))
        .open_semaphore(&path, 2)
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

/// Finding 1, real processes and default options: a reader process is killed while holding;
/// 255 reads follow (each granted at once: nobody waits, so nobody recovers); the 256th read
/// maps to the dead reader's slot. It must be granted (a share is free), and the death must
/// reach a later grant (it stalled, and the news was erased).
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
    let dir = TempDir::new("review-dead-reader");
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
