//! Recovery: a holder or waiter that dies never blocks the others, and the next holder learns
//! of a holder's death through `owner_died()` — on every acquire path, not only the blocking
//! one: `try_lock`, a zero timeout and a short one pass a dead holder, a dead waiter and a
//! frozen leased grantee with nobody else waiting. A process killed or exiting while it holds,
//! a thread that exits holding, a panic while holding: each is a death. Real processes,
//! killed and stopped for real.
//!
//! With the crash points of the private feature `__test-crash-points`: a dead holder is
//! recovered however far behind `head` is, and a revoker killed half-way loses no news.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Shm, TempDir, Worker, role, wait_all, wait_for_waiters, wait_until};
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

/// `try_lock` passes a dead holder (a blocking waiter is not the only one to recover it) and
/// tells the next holder.
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

/// The same with a zero timeout (`fairlock run -w 0`) and a short one.
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

/// A waiter killed while queued (SIGKILL, SIGTERM, SIGINT) and granted the lock after its
/// death does not stop `try_lock`, which passes the dead grantee at once (untold: the dead
/// waiter never held).
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

/// A leased waiter granted and then frozen before it claims does not block the queue: it is
/// timed like a held lease and skipped; the waiter behind gets the lock; the frozen one,
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
    let requeued = shm.read(TOKEN);
    assert!(
        requeued > token,
        "requeued behind the one that overtook it: token {requeued} after {token} (the frozen \
         ticket {frozen_ticket}, granted {})",
        shm.atomic(GRANTED).load(SeqCst)
    );
}

/// A guard dropped while its thread panics is a death: the next holder is told `owner_died()`,
/// never handed the half-done update as if it were complete (std poisons its `Mutex` here).
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

/// Re-entrant: a panic inside a nested guard poisons the grant; the outer guard, even if
/// dropped after the panic was caught, gives the lock up as dead.
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

// ---------------------------------------------------------------------------------------------
// Dead holders and waiters, as the blocking `lock` meets them
// ---------------------------------------------------------------------------------------------

/// Worker roles of the tests of this section (unleased).
fn run_dying_worker(r: &str) {
    let lock = FairLock::open(common::env("FL_LOCK")).expect("worker open");
    let shm = Shm::open(common::env("FL_SHM").as_ref());
    match r {
        // Take the lock, report, and wait to be killed.
        "hold-forever" => {
            let g = lock.lock().expect("lock");
            shm.write(TOKEN, g.token());
            shm.atomic(GRANTED).store(1, SeqCst);
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

fn env_plain(dir: &TempDir) -> [(&'static str, String); 2] {
    [
        ("FL_LOCK", dir.join("lock").display().to_string()),
        ("FL_SHM", dir.join("shm").display().to_string()),
    ]
}

#[test]
fn killed_holder_process_is_recovered() {
    if let Some(r) = role() {
        return run_dying_worker(&r);
    }
    let dir = TempDir::new("robust-killed-holder");
    let shm = Shm::create(&dir.join("shm"), 2);
    let lock = Arc::new(FairLock::open(dir.join("lock")).expect("open"));
    let test = "killed_holder_process_is_recovered";
    let mut w = Worker::spawn(dir.path(), test, "hold-forever", "holder", &env_plain(&dir));
    common::wait_until(Duration::from_secs(30), "the worker's grant", || {
        shm.atomic(GRANTED).load(SeqCst) == 1
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
        return run_dying_worker(&r);
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
        &env_plain(&dir),
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
        return run_dying_worker(&r);
    }
    let dir = TempDir::new("robust-killed-waiter");
    let path = dir.join("lock");
    let _shm = Shm::create(&dir.join("shm"), 2);
    let lock = Arc::new(FairLock::open(&path).expect("open"));
    let guard = lock.lock().expect("lock");
    let test = "killed_waiter_does_not_stall_the_queue";
    let mut w = Worker::spawn(dir.path(), test, "wait", "waiter", &env_plain(&dir));
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

// ---------------------------------------------------------------------------------------------
// Crash points: a releaser stopped half-way, a revoker killed half-way
// ---------------------------------------------------------------------------------------------

#[cfg(feature = "__test-crash-points")]
const W_GRANTED: usize = 0; // the worker reported a grant
#[cfg(feature = "__test-crash-points")]
const B_DONE: usize = 7;
#[cfg(feature = "__test-crash-points")]
const T_DIED: usize = 8; // the "told" worker's grant said owner_died (1) or not (2)

/// Worker roles of the tests of this section.
#[cfg(feature = "__test-crash-points")]
fn run_stopped_worker(r: &str) {
    let shm = Shm::open(common::env("FL_SHM").as_ref());
    match r {
        // Lock, wait until someone queues behind, unlock (its crash point stops it inside the
        // release, after it gave the lock word up and before it walked the queue).
        "once" => {
            let path = common::env("FL_LOCK");
            let lock = FairLock::open(&path).expect("open");
            let g = lock.lock().expect("lock");
            shm.atomic(W_GRANTED).store(1, SeqCst);
            while fairlock::inspect(&path)
                .expect("inspect")
                .waiters
                .is_empty()
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(g);
        }
        // Many uncontended lock/unlock pairs.
        "burst" => {
            let lock = FairLock::open(common::env("FL_LOCK")).expect("open");
            let n: u64 = common::env_parse("FL_N");
            for _ in 0..n {
                drop(lock.lock().expect("lock"));
            }
            shm.atomic(B_DONE).store(1, SeqCst);
        }
        // Wait in line (up to 20 s), report whether the grant said owner_died, release.
        "told" => {
            let lock = FairLock::open(common::env("FL_LOCK")).expect("open");
            let g = lock.lock_timeout(Duration::from_secs(20)).expect("lock");
            shm.write(T_DIED, if g.owner_died() { 1 } else { 2 });
            drop(g);
        }
        // Take the lock and wait to be killed.
        "hold" => {
            let lock = FairLock::open(common::env("FL_LOCK")).expect("open");
            let g = lock.lock().expect("lock");
            shm.atomic(W_GRANTED).store(1, SeqCst);
            std::thread::sleep(Duration::from_secs(60));
            drop(g);
        }
        other => panic!("unknown role {other}"),
    }
}

/// A releaser stopped inside a fast release that found a waiter (`fast.unheld`: `H` cleared,
/// the walk not made; the waiter takes the lock itself) is resumed after more than 2^22
/// uncontended grants, which leave `head` where it was; then a holder dies. The next waiter
/// recovers it however far behind `head` is.
#[test]
#[cfg(feature = "__test-crash-points")]
fn a_dead_holder_is_recovered_however_far_behind_head_is() {
    if let Some(r) = role() {
        return run_stopped_worker(&r);
    }
    let test = "a_dead_holder_is_recovered_however_far_behind_head_is";
    let dir = TempDir::new("crash-reg-head");
    let shm = Shm::create(&dir.join("shm"), 10);
    let path = dir.join("lock");
    let lock = FairLock::open(&path).expect("open");
    let mut envs = env_plain(&dir).to_vec();
    envs.push(("FAIRLOCK_CRASH", "fast.unheld:stop".into()));
    let mut stalled = Worker::spawn(dir.path(), test, "once", "stalled", &envs);
    wait_until(Duration::from_secs(10), "the releaser's grant", || {
        shm.atomic(W_GRANTED).load(SeqCst) == 1
    });
    shm.atomic(W_GRANTED).store(0, SeqCst);
    let waited = lock
        .lock_timeout(Duration::from_secs(10))
        .expect("the waiter behind a stopped releaser walks itself");
    assert!(!waited.owner_died());
    wait_until(Duration::from_secs(10), "the releaser to stop", || {
        matches!(common::chaos::proc_state(stalled.pid()), Some('T' | 't'))
    });
    drop(waited);
    let mut envs = env_plain(&dir).to_vec();
    envs.push(("FL_N", (4_500_000u64).to_string()));
    let mut burst = Worker::spawn(dir.path(), test, "burst", "burst", &envs);
    common::wait_all(std::slice::from_mut(&mut burst), Duration::from_secs(120));
    kill(&stalled, libc::SIGCONT);
    common::wait_all(std::slice::from_mut(&mut stalled), Duration::from_secs(30));
    let mut holder = Worker::spawn(dir.path(), test, "hold", "holder", &env_plain(&dir));
    wait_until(Duration::from_secs(30), "the holder's grant", || {
        shm.atomic(W_GRANTED).load(SeqCst) == 1
    });
    kill(&holder, libc::SIGKILL);
    let _ = holder.child.wait();
    holder.status = Some(std::os::unix::process::ExitStatusExt::from_raw(9));
    let started = Instant::now();
    let g = lock
        .lock_timeout(Duration::from_secs(5))
        .expect("a dead holder must be recovered, whatever head says");
    assert!(g.owner_died());
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(g.token() > 4_500_000);
}

/// A fast holder (granted by the lock word) is killed with two waiters queued behind
/// it; the first waiter revokes it — grants the first queued ticket (its own) with the death's
/// news — and is killed right there (`fast.revoke_granted`), before clearing the word's `H`.
/// The second waiter must finish the revocation and be granted, told `owner_died` (the news
/// is neither lost with the revoker nor dropped by the walk that passes its dead grant).
#[test]
#[cfg(feature = "__test-crash-points")]
fn a_revoker_killed_after_granting_the_news_loses_nothing() {
    if let Some(r) = role() {
        return run_stopped_worker(&r);
    }
    let test = "a_revoker_killed_after_granting_the_news_loses_nothing";
    let dir = TempDir::new("crash-reg-revoker");
    let shm = Shm::create(&dir.join("shm"), 10);
    let path = dir.join("lock");
    let mut holder = Worker::spawn(dir.path(), test, "hold", "holder", &env_plain(&dir));
    wait_until(Duration::from_secs(30), "the holder's grant", || {
        shm.atomic(W_GRANTED).load(SeqCst) == 1
    });
    let st = fairlock::inspect(&path).expect("inspect");
    assert_eq!(
        st.holder.as_ref().and_then(|h| h.pid),
        Some(holder.pid()),
        "a fast holder is shown: {st:?}"
    );
    let mut envs = env_plain(&dir).to_vec();
    envs.push(("FAIRLOCK_CRASH", "fast.revoke_granted".into()));
    let mut revoker = Worker::spawn(dir.path(), test, "told", "revoker", &envs);
    common::wait_for_waiters(&path, 1, Duration::from_secs(30));
    let mut next = Worker::spawn(dir.path(), test, "told", "next", &env_plain(&dir));
    common::wait_for_waiters(&path, 2, Duration::from_secs(30));
    kill(&holder, libc::SIGKILL);
    let _ = holder.child.wait();
    holder.status = Some(std::os::unix::process::ExitStatusExt::from_raw(9));
    let started = Instant::now();
    wait_until(
        Duration::from_secs(10),
        "the revoker to die at its point",
        || revoker.poll(),
    );
    assert!(
        revoker.status.is_some_and(|s| !s.success()),
        "the revoker was to die at fast.revoke_granted: {:?}\n{}",
        revoker.status,
        revoker.stderr()
    );
    common::wait_all(std::slice::from_mut(&mut next), Duration::from_secs(30));
    assert_eq!(
        shm.read(T_DIED),
        1,
        "the next holder must be told the owner died"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let lock = FairLock::open(&path).expect("open");
    let g = lock
        .lock_timeout(Duration::from_secs(5))
        .expect("free again");
    assert!(!g.owner_died(), "told twice");
}
