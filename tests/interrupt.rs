//! `lock_interruptible`: a waiter that is told to stop gives its ticket up at once (a signal
//! delivered to it wakes it), nobody queued behind it waits for it, and a grant that races the
//! interruption is kept.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::{TempDir, wait_for_waiters};
use fairlock::{Error, FairLock, FairRLock};

#[test]
fn a_stopped_waiter_gives_its_place_up_and_the_next_is_served() {
    let dir = TempDir::new("interrupt-flag");
    let path = dir.join("l");
    let lock = Arc::new(FairLock::open(&path).unwrap());
    let holder = lock.lock().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (l2, s2) = (lock.clone(), stop.clone());
    let interrupted = std::thread::spawn(move || {
        let r = l2.lock_interruptible(None, || s2.load(SeqCst));
        (
            r.map(|g| g.token()).map_err(|e| e.to_string()),
            Instant::now(),
        )
    });
    wait_for_waiters(&path, 1, Duration::from_secs(10));
    let l3 = lock.clone();
    let behind = std::thread::spawn(move || l3.lock().map(|g| g.token()).unwrap());
    wait_for_waiters(&path, 2, Duration::from_secs(10));

    std::thread::sleep(Duration::from_millis(20));
    let told = Instant::now();
    stop.store(true, SeqCst);
    let (r, at) = interrupted.join().unwrap();
    let e = r.unwrap_err();
    assert!(e.contains("interrupted"), "{e}");
    // Asked at least every 50 ms; give the scheduler room.
    assert!(at - told < Duration::from_millis(500), "{:?}", at - told);

    // Its ticket was given up: the waiter behind is served as soon as the holder releases.
    let token = holder.token();
    drop(holder);
    let next = behind.join().unwrap();
    assert!(next > token);
    assert!(fairlock::inspect(&path).unwrap().waiters.is_empty());
}

static SIGNALLED: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_usr1(_: libc::c_int) {
    SIGNALLED.fetch_add(1, SeqCst);
}

/// A signal delivered to the waiting thread wakes it at once (`EINTR`): the hook sees the
/// handler's flag long before the 50 ms poll. This is how a language runtime's Ctrl-C reaches
/// a waiter (Python's handler sets a flag and the waiter asks for it).
#[test]
fn a_signal_to_the_waiting_thread_is_seen_at_once() {
    let dir = TempDir::new("interrupt-signal");
    let path = dir.join("l");
    let lock = Arc::new(FairRLock::open(&path).unwrap());
    // SAFETY: installs a handler that only touches an atomic; no SA_RESTART, so the futex wait
    // returns EINTR.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_usr1 as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
    let holder = lock.lock().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let l2 = lock.clone();
    let waiter = std::thread::spawn(move || {
        // SAFETY: pthread_self has no preconditions.
        tx.send(unsafe { libc::pthread_self() }).unwrap();
        let mut asked = 0u32;
        let r = l2.lock_interruptible(None, || {
            asked += 1;
            SIGNALLED.load(SeqCst) > 0
        });
        (r.map(|_| ()), Instant::now(), asked)
    });
    let thread = rx.recv().unwrap();
    wait_for_waiters(&path, 1, Duration::from_secs(10));
    // Let it settle into its long sleep (past the spin of the next in line).
    std::thread::sleep(Duration::from_millis(120));
    let sent = Instant::now();
    // SAFETY: the thread is alive (it is waiting; joined below).
    assert_eq!(unsafe { libc::pthread_kill(thread, libc::SIGUSR1) }, 0);
    let (r, at, asked) = waiter.join().unwrap();
    assert!(matches!(r, Err(Error::Interrupted { .. })), "{r:?}");
    assert!(
        at - sent < Duration::from_millis(40),
        "{:?} after the signal ({asked} looks)",
        at - sent
    );
    drop(holder);
    // Nothing is left queued; the lock is free.
    assert!(lock.try_lock().is_ok());
}

/// With a deadline as well: the deadline still applies, reported as a timeout.
#[test]
fn the_deadline_still_applies() {
    let dir = TempDir::new("interrupt-deadline");
    let path = dir.join("l");
    let lock = FairLock::open(&path).unwrap();
    let other = FairLock::open(&path).unwrap();
    std::thread::scope(|s| {
        let g = lock.lock().unwrap();
        let r = s
            .spawn(|| {
                let start = Instant::now();
                let r = other
                    .lock_interruptible(Some(Instant::now() + Duration::from_millis(100)), || {
                        false
                    });
                (r.map(|_| ()), start.elapsed())
            })
            .join()
            .unwrap();
        assert!(matches!(r.0, Err(Error::Timeout { .. })), "{:?}", r.0);
        assert!(r.1 >= Duration::from_millis(100), "{:?}", r.1);
        drop(g);
    });
    // Uncontended: granted without ever asking the hook.
    let g = lock.lock_interruptible(None, || panic!("asked without waiting"));
    assert!(g.is_ok());
}
