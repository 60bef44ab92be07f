//! Regression tests from the second adversarial review of the weighted kinds (8c9d706), through
//! the public API; each failed on that code. Plus the exclusive lock's form of the panicking
//! interrupt hook.

mod common;

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;
use std::time::Duration;

use common::TempDir;
use fairlock::{Error, FairLock, FairRwLock};

/// A thread of another handle holds a read (ticket 0) of a 4-slot reader/writer lock for long;
/// the main thread reads three times (tickets 1..3), then a fourth time: ticket 4 maps to the
/// long read's slot, so it is retaken as ticket 5 and granted. Holding that read, the thread
/// asks for a write: it would wait behind its own read, so it must get `WouldDeadlock`; but
/// `holds_already` scans only N tickets from `head` (0) and misses ticket 5: the write waits
/// (here until its timeout; `write()` would hang for ever).
#[test]
fn review2_a_write_behind_its_own_retaken_read_is_refused() {
    let dir = TempDir::new("review2-reentry");
    let path = dir.join("rw");
    let lock = FairRwLock::options()
        .slots(4)
        .open_rwlock(&path)
        .expect("open");
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

/// A leased read whose interrupt hook panics unwinds out of `acquire_weighted` without
/// `leased_share_ended`: the process's leased-share count stays at 1 and every later leased
/// read, write or permit of the file is refused with `InvalidOption`, for the life of the
/// process (the stranded ticket itself is passed once its pending lease runs out).
#[test]
fn review2_a_panicking_interrupt_hook_does_not_disable_leased_grants() {
    let dir = TempDir::new("review2-hook");
    let path = dir.join("rw");
    let leased = FairRwLock::options()
        .lease(Duration::from_millis(200))
        .open_rwlock(&path)
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

/// Aside (pre-existing, not from 8c9d706): an *unleased* waiter whose interrupt hook panics
/// leaves its published ticket behind; once granted it is never claimed and never skipped (its
/// process lives, no lease), so a writer waits for as long as the process lives.
#[test]
fn review2_a_panicking_interrupt_hook_does_not_strand_the_lock() {
    let dir = TempDir::new("review2-strand");
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

/// The API form of R2-6, default options (256 slots): a semaphore of 18 permits, 17 taken at
/// start-up and held; the 18th is used over and over by another thread. Its acquisition that
/// maps to slot 0 retakes 16 tickets (slots 0..15, all held) and then waits for slot 16's
/// holder: the free permit is never granted again while the 17 hold.
#[test]
fn review2_a_free_permit_is_granted_next_to_seventeen_long_holders() {
    let dir = TempDir::new("review2-17");
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

/// The exclusive lock's form: a waiter whose interrupt hook panics gives its ticket up before
/// the panic goes on (it used to be left published: granted later, never claimed, never
/// passed while the process lived), so the lock is free once its holder releases.
#[test]
fn a_panicking_interrupt_hook_gives_the_ticket_up_on_an_exclusive_lock() {
    let dir = TempDir::new("review2-exclusive-hook");
    let path = dir.join("lock");
    let lock = FairLock::open(&path).expect("open");
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (held_tx, held_rx) = mpsc::channel::<()>();
    let p = path.clone();
    let holder = std::thread::spawn(move || {
        let l = FairLock::open(&p).expect("open");
        let g = l.lock().expect("lock");
        held_tx.send(()).unwrap();
        let _ = go_rx.recv();
        drop(g);
    });
    held_rx.recv().unwrap();
    let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
        lock.lock_interruptible(None, || panic!("hook panics"))
            .map(|g| g.token())
    }));
    assert!(r.is_err(), "the hook's panic went on: {r:?}");
    go_tx.send(()).unwrap();
    holder.join().unwrap();
    let again = std::thread::scope(|s| {
        s.spawn(|| {
            lock.lock_timeout(Duration::from_secs(2))
                .map(|g| g.owner_died())
        })
        .join()
        .unwrap()
    });
    assert!(
        matches!(again, Ok(false)),
        "the lock after the panic: {again:?}"
    );
}
