//! The acquire surface is the same on every handle: each way of holding each kind has the
//! waiting, trying, timed, deadline, interruptible and owned (`Arc`) forms, and they behave
//! alike. Called as a user calls them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fairlock::{
    ArcLockGuard, ArcMutexGuard, ArcRLockGuard, ArcRwLockReadGuard, ArcRwLockWriteGuard,
    ArcSemaphorePermit, Error, FairLock, FairMutex, FairRLock, FairRwLock, FairSemaphore,
};

const fn assert_static<T: 'static>() {}
const fn assert_send<T: Send>() {}

// Owned guards have no lifetime; a permit, which any thread may give back, stays `Send`.
const _: () = {
    assert_static::<ArcLockGuard>();
    assert_static::<ArcRLockGuard>();
    assert_static::<ArcMutexGuard<u64>>();
    assert_static::<ArcRwLockReadGuard>();
    assert_static::<ArcRwLockWriteGuard>();
    assert_static::<ArcSemaphorePermit>();
    assert_send::<ArcSemaphorePermit>();
};

fn path(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("fairlock-surface-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn is_timeout<T: std::fmt::Debug>(r: fairlock::Result<T>) -> bool {
    matches!(r, Err(Error::Timeout { .. }))
}

fn is_interrupted<T: std::fmt::Debug>(r: fairlock::Result<T>) -> bool {
    matches!(r, Err(Error::Interrupted { .. }))
}

fn is_would_block<T: std::fmt::Debug>(r: fairlock::Result<T>) -> bool {
    matches!(r, Err(Error::WouldBlock { .. }))
}

/// A stop hook that says "stop" on its third call: the wait asks it after wake-ups and at
/// least every 50 ms, so it ends the wait within about 150 ms.
fn stop_on_third_call() -> impl FnMut() -> bool {
    let calls = AtomicUsize::new(0);
    move || calls.fetch_add(1, Ordering::Relaxed) >= 2
}

#[test]
fn a_mutex_has_the_interruptible_and_owned_forms() {
    let p = path("mutex.lock");
    let m = Arc::new(FairMutex::<u64>::open(&p).unwrap());
    {
        let mut owned: ArcMutexGuard<u64> = m.lock_arc().unwrap();
        *owned += 41;
        // The owned guard holds the lock: every other form waits or fails.
        std::thread::scope(|s| {
            s.spawn(|| {
                assert!(is_would_block(m.try_lock()));
                assert!(is_would_block(m.try_lock_arc()));
                assert!(is_timeout(m.lock_timeout(Duration::from_millis(20))));
                assert!(is_timeout(m.lock_arc_timeout(Duration::from_millis(20))));
                let soon = Instant::now() + Duration::from_millis(20);
                assert!(is_timeout(m.lock_until(soon)));
                let t = Instant::now();
                assert!(is_interrupted(
                    m.lock_interruptible(None, stop_on_third_call())
                ));
                assert!(t.elapsed() < Duration::from_secs(5));
            });
        });
        // The holding thread asking again would wait for itself: refused.
        assert!(matches!(
            owned.handle().lock_timeout(Duration::ZERO),
            Err(Error::WouldDeadlock { .. })
        ));
        owned.unlock().unwrap();
    }
    let g = m.lock_interruptible(None, || false).unwrap();
    assert_eq!(*g, 41);
    drop(g);
    let mut g = m.lock_arc().unwrap();
    *g += 1;
    assert!(!g.guard().owner_died());
    drop(g);
    assert_eq!(*m.lock().unwrap(), 42);
}

/// Two owned guards of two mutexes exchange their values, never their grants: each guard still
/// gives back its own handle's lock, and each file keeps the value it was given.
#[test]
fn swapping_through_two_owned_mutex_guards_swaps_the_values() {
    let a = Arc::new(FairMutex::<u64>::open(path("swap-a.lock")).unwrap());
    let b = Arc::new(FairMutex::<u64>::open(path("swap-b.lock")).unwrap());
    let mut ga = a.lock_arc().unwrap();
    let mut gb = b.lock_arc().unwrap();
    *ga = 1;
    *gb = 2;
    std::mem::swap(&mut *ga, &mut *gb);
    let b_path = b.path().to_path_buf();
    drop(a);
    drop(ga); // gives back a's lock; its handle goes with it
    assert_eq!(*gb, 1);
    drop(gb);
    assert_eq!(*b.try_lock().unwrap(), 1);
    assert_eq!(b.path(), b_path);
    assert_eq!(
        *FairMutex::<u64>::open(path("swap-a.lock"))
            .unwrap()
            .try_lock()
            .unwrap(),
        2
    );
}

#[test]
fn a_reentrant_lock_has_the_owned_forms_and_nests_them() {
    let p = path("rlock.lock");
    let l = Arc::new(FairRLock::open(&p).unwrap());
    let outer: ArcRLockGuard = l.lock_arc().unwrap();
    let inner = l.try_lock_arc().unwrap();
    let timed = l.lock_arc_timeout(Duration::ZERO).unwrap();
    assert_eq!(outer.token(), inner.token());
    assert_eq!(outer.token(), timed.token());
    std::thread::scope(|s| {
        s.spawn(|| assert!(is_would_block(l.try_lock())));
    });
    drop(timed);
    drop(inner);
    outer.unlock().unwrap();
    std::thread::scope(|s| {
        s.spawn(|| drop(l.try_lock().unwrap()));
    });
}

#[test]
fn a_rwlock_has_every_form_for_reads_and_writes() {
    let p = path("rw.lock");
    let l = Arc::new(FairRwLock::open(&p).unwrap());
    let w: ArcRwLockWriteGuard = l.write_arc().unwrap();
    assert_eq!(w.overtaken(), 0);
    std::thread::scope(|s| {
        s.spawn(|| {
            assert!(is_would_block(l.try_read()));
            assert!(is_would_block(l.try_read_arc()));
            assert!(is_would_block(l.try_write_arc()));
            assert!(is_timeout(l.read_arc_timeout(Duration::from_millis(20))));
            assert!(is_timeout(l.write_arc_timeout(Duration::from_millis(20))));
            assert!(is_interrupted(
                l.read_interruptible(None, stop_on_third_call())
            ));
        });
    });
    w.unlock().unwrap();
    // Two owned reads hold together, from two threads.
    let r1: ArcRwLockReadGuard = l.read_arc().unwrap();
    let t1 = r1.token();
    std::thread::scope(|s| {
        s.spawn(|| {
            let r2 = l.try_read_arc().unwrap();
            assert_ne!(r2.token(), t1);
            assert_eq!(r2.overtaken(), 0);
            // A thread that holds a read and asks for the write would wait for itself.
            assert!(matches!(l.try_write(), Err(Error::WouldDeadlock { .. })));
        });
        s.spawn(|| assert!(is_would_block(l.try_write_arc())));
    });
    drop(r1);
    drop(l.try_write_arc().unwrap());
}

#[test]
fn a_semaphore_has_every_form_and_its_owned_permit_moves_between_threads() {
    let p = path("sem.lock");
    let sem = Arc::new(FairSemaphore::open(&p, 2).unwrap());
    let a: ArcSemaphorePermit = sem.acquire_arc().unwrap();
    let b = sem.try_acquire_arc().unwrap();
    assert_eq!(a.overtaken(), 0);
    assert!(is_would_block(sem.try_acquire()));
    assert!(is_timeout(
        sem.acquire_arc_timeout(Duration::from_millis(20))
    ));
    let soon = Instant::now() + Duration::from_millis(20);
    assert!(is_timeout(sem.acquire_until(soon)));
    assert!(is_interrupted(
        sem.acquire_interruptible(None, stop_on_third_call())
    ));
    // An owned permit is given back by another thread.
    std::thread::spawn(move || a.unlock().unwrap())
        .join()
        .unwrap();
    let c = sem.acquire_timeout(Duration::from_secs(5)).unwrap();
    drop((b, c));
}

#[test]
fn a_lock_keeps_its_owned_forms_and_its_owned_guard_names_its_handle() {
    let p = path("lock.lock");
    let l = Arc::new(FairLock::open(&p).unwrap());
    let g = l.lock_arc().unwrap();
    assert!(Arc::ptr_eq(g.handle(), &l));
    assert!(Arc::ptr_eq(g.fair_lock(), &l));
    assert!(format!("{g:?}").contains("ArcLockGuard"));
    std::thread::scope(|s| {
        s.spawn(|| {
            assert!(is_interrupted(
                l.lock_interruptible(None, stop_on_third_call())
            ))
        });
    });
    drop(g);
    drop(l.try_lock_arc().unwrap());
}
