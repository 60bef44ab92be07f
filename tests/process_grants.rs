//! Process grants (`ProcessGuard`, from `lock_process` and the read and write sides'
//! `*_process`): the grant belongs to the process, as a `threading.Lock`'s does. Any thread
//! releases it; its thread's exit leaves it held; the process's death gives it up; a thread
//! that holds it and asks again waits behind itself; a forked child does not hold it.

mod common;

use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{TempDir, Worker, role};
use fairlock::{Error, FairLock, FairRwLock, ProcessGuard};

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn a_process_grant_is_released_by_another_thread() {
    assert_send_sync::<ProcessGuard>();
    let dir = TempDir::new("process-other-thread");
    let lock = FairLock::open(dir.join("l")).unwrap();
    let grant = lock.lock_process().unwrap();
    let token = grant.token();
    assert!(matches!(lock.try_lock(), Err(Error::WouldBlock { .. })));
    std::thread::spawn(move || grant.unlock())
        .join()
        .unwrap()
        .unwrap();
    let next = lock
        .try_lock()
        .expect("free once another thread released it");
    assert!(next.token() > token);
    assert!(!next.owner_died());
}

#[test]
fn the_holding_thread_asking_again_waits_behind_its_own_grant() {
    let dir = TempDir::new("process-reacquire");
    let lock = Arc::new(FairLock::open(dir.join("l")).unwrap());
    let first = lock.lock_process().unwrap();
    // As threading.Lock: no WouldDeadlock; a timed wait times out.
    let t0 = Instant::now();
    assert!(matches!(
        lock.lock_process_timeout(Duration::from_millis(100)),
        Err(Error::Timeout { .. })
    ));
    assert!(t0.elapsed() >= Duration::from_millis(100));
    assert!(matches!(
        lock.try_lock_process(),
        Err(Error::WouldBlock { .. })
    ));
    // A blocking second acquire is granted when another thread releases the first.
    let (tx, rx) = mpsc::channel();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        tx.send(first.unlock()).unwrap();
    });
    let second = lock
        .lock_process()
        .expect("granted after the other thread released");
    rx.recv().unwrap().expect("the first grant was still ours");
    releaser.join().unwrap();
    second.unlock().unwrap();
    // The lock is free and idle: nobody left a ticket behind.
    drop(lock.try_lock().expect("free"));
}

#[test]
fn a_thread_holding_a_thread_grant_waits_for_a_process_grant() {
    let dir = TempDir::new("process-after-thread-grant");
    let lock = FairLock::open(dir.join("l")).unwrap();
    let mine = lock.lock().unwrap();
    assert!(matches!(
        lock.lock_process_timeout(Duration::from_millis(30)),
        Err(Error::Timeout { .. })
    ));
    drop(mine);
    lock.try_lock_process().expect("free").unlock().unwrap();
}

#[test]
fn a_process_grant_outlives_the_thread_that_took_it_and_its_handle() {
    let dir = TempDir::new("process-thread-exit");
    let path = dir.join("l");
    let lock = FairLock::open(&path).unwrap();
    let grant = std::thread::spawn(move || lock.lock_process().unwrap())
        .join()
        .unwrap(); // the thread ended and its handle is gone
    let other = FairLock::open(&path).unwrap();
    assert!(
        matches!(other.try_lock(), Err(Error::WouldBlock { .. })),
        "a process grant is kept when its thread exits"
    );
    grant.check().unwrap();
    grant.unlock().unwrap();
    let g = other.try_lock().expect("released");
    assert!(!g.owner_died());
}

#[test]
fn a_leased_process_grant_is_taken_over_and_learns_it() {
    let dir = TempDir::new("process-lease");
    let lock = FairLock::options()
        .lease(Duration::from_millis(50))
        .open(dir.join("l"))
        .unwrap();
    let grant = lock.lock_process().unwrap();
    assert_eq!(grant.lease(), Some(Duration::from_millis(50)));
    let next = std::thread::scope(|s| {
        s.spawn(|| {
            lock.lock_timeout(Duration::from_secs(10))
                .map(|g| g.owner_died())
        })
        .join()
        .unwrap()
    });
    assert!(next.unwrap(), "the next holder is told it was taken over");
    assert!(matches!(grant.check(), Err(Error::LockLost { .. })));
    assert!(matches!(grant.unlock(), Err(Error::LockLost { .. })));
}

#[test]
fn read_and_write_process_grants_of_a_rwlock() {
    let dir = TempDir::new("process-rw");
    let rw = FairRwLock::open(dir.join("l")).unwrap();
    let r1 = rw.read_process().unwrap();
    // The same thread reads again (a process grant is not refused as a re-entry).
    let r2 = rw.try_read_process().unwrap();
    assert!(matches!(
        rw.try_write_process(),
        Err(Error::WouldBlock { .. })
    ));
    let released = std::thread::spawn(move || (r1.unlock(), r2.unlock()))
        .join()
        .unwrap();
    released.0.unwrap();
    released.1.unwrap();
    let w = rw.write_process().unwrap();
    assert!(matches!(
        rw.read_process_timeout(Duration::from_millis(30)),
        Err(Error::Timeout { .. })
    ));
    std::thread::spawn(move || w.unlock())
        .join()
        .unwrap()
        .unwrap();
    drop(rw.try_write().expect("free"));
}

#[test]
fn a_process_grant_is_interruptible() {
    let dir = TempDir::new("process-interrupt");
    let lock = FairLock::open(dir.join("l")).unwrap();
    let held = lock.lock_process().unwrap();
    let mut calls = 0;
    let r = lock.lock_process_interruptible(None, || {
        calls += 1;
        calls > 2
    });
    assert!(matches!(r, Err(Error::Interrupted { .. })));
    held.unlock().unwrap();
    drop(
        lock.try_lock()
            .expect("the interrupted waiter left nothing behind"),
    );
}

/// A process that dies holding a process grant (taken by a thread that ended long before)
/// gives it up: the next holder is told `owner_died`.
#[test]
fn the_death_of_its_process_gives_a_process_grant_up() {
    if let Some(r) = role() {
        assert_eq!(r, "holder");
        let lock = FairLock::open(common::env("FL_PATH")).unwrap();
        let grant = std::thread::spawn(move || lock.lock_process().unwrap())
            .join()
            .unwrap();
        std::fs::write(common::env("FL_READY"), b"").unwrap();
        std::mem::forget(grant);
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let dir = TempDir::new("process-death");
    let path = dir.join("l");
    let ready = dir.join("ready");
    let mut holder = Worker::spawn(
        dir.path(),
        "the_death_of_its_process_gives_a_process_grant_up",
        "holder",
        "holder",
        &[
            ("FL_PATH", path.display().to_string()),
            ("FL_READY", ready.display().to_string()),
        ],
    );
    let t0 = Instant::now();
    while !ready.exists() {
        assert!(t0.elapsed() < Duration::from_secs(30), "holder never ready");
        std::thread::sleep(Duration::from_millis(5));
    }
    let lock = FairLock::open(&path).unwrap();
    assert!(matches!(lock.try_lock(), Err(Error::WouldBlock { .. })));
    common::chaos::signal(holder.pid(), libc::SIGKILL);
    let g = lock
        .lock_timeout(Duration::from_secs(10))
        .expect("taken over");
    assert!(g.owner_died());
    drop(g);
    let _ = holder.child.wait();
}

/// A forked child does not hold its parent's process grant: `check` says `LockLost`, and
/// dropping its copy releases nothing.
#[test]
fn a_forked_child_does_not_hold_its_parents_process_grant() {
    let dir = TempDir::new("process-fork");
    let lock = FairLock::open(dir.join("l")).unwrap();
    let grant = lock.lock_process().unwrap();
    // SAFETY: the child only uses the lock (whose fork handlers make that safe) and leaves
    // with `_exit`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let code = if !matches!(grant.check(), Err(Error::LockLost { .. })) {
            10
        } else {
            drop(grant);
            match lock.try_lock() {
                Err(Error::WouldBlock { .. }) => 0,
                _ => 11,
            }
        };
        // SAFETY: `_exit` never returns and skips the test harness.
        unsafe { libc::_exit(code) }
    }
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a valid out-pointer.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status), "child died: {status}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "child step failed");
    grant.check().expect("still the parent's");
    grant.unlock().unwrap();
}

/// A thread that took a read process grant and handed it to another thread holds nothing: its
/// own thread reads are granted beside that read and its writes wait, never refused as
/// re-entries (the slot of a process grant names no thread).
#[test]
fn a_handed_off_process_read_leaves_its_taker_free_to_ask() {
    let dir = TempDir::new("process-handoff");
    let rw = FairRwLock::open(dir.join("rw")).unwrap();
    let grant = rw.read_process().unwrap();
    let (tx, rx) = mpsc::channel::<()>();
    let keeper = std::thread::spawn(move || {
        rx.recv().unwrap();
        grant.unlock()
    });
    let r = rw.try_read().map(drop);
    let w = rw.write_timeout(Duration::from_millis(50));
    tx.send(()).unwrap();
    keeper.join().unwrap().unwrap();
    assert!(r.is_ok(), "try_read beside another thread's read: {r:?}");
    assert!(matches!(w, Err(Error::Timeout { .. })), "write: {w:?}");
}

/// The thread that holds a process read and asks for a thread write waits behind it (a
/// timeout here), as the docs say: it is not refused as a re-entry.
#[test]
fn a_thread_grant_asked_by_the_holder_of_a_process_grant_waits() {
    let dir = TempDir::new("process-then-thread");
    let rw = FairRwLock::open(dir.join("rw")).unwrap();
    let grant = rw.read_process().unwrap();
    let w = rw.write_timeout(Duration::from_millis(30));
    grant.unlock().unwrap();
    assert!(matches!(w, Err(Error::Timeout { .. })), "waits: {w:?}");
}
