//! Re-entrancy: `FairRLock` nests per (process, thread) without taking tickets; `FairLock`
//! refuses to re-lock with `WouldDeadlock`; handles on the same path in one process are one
//! lock for both purposes.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use common::{TempDir, wait_for_waiters};
use fairlock::{Error, FairLock, FairRLock};

/// `try_lock` from a fresh thread with its own handle: `true` if it got the lock.
fn free_for_others(path: &Path) -> bool {
    let p = path.to_path_buf();
    std::thread::spawn(move || match FairLock::open(&p).expect("open").try_lock() {
        Ok(_) => true,
        Err(Error::WouldBlock { .. }) => false,
        Err(e) => panic!("unexpected: {e}"),
    })
    .join()
    .unwrap()
}

#[test]
fn nested_three_levels() {
    let dir = TempDir::new("reent-nested");
    let path = dir.join("lock");
    let lock = FairRLock::open(&path).expect("open");
    let outer = lock.lock().expect("outer");
    let token = outer.token();
    let next = fairlock::inspect(&path).unwrap().next_ticket;
    let mid = lock.lock().expect("mid");
    let inner = lock.try_lock().expect("inner (try_lock)");
    let innermost = lock
        .lock_timeout(Duration::ZERO)
        .expect("innermost (lock_timeout)");
    assert_eq!(mid.token(), token);
    assert_eq!(inner.token(), token);
    assert_eq!(innermost.token(), token);
    let st = fairlock::inspect(&path).unwrap();
    assert_eq!(st.next_ticket, next, "a nested lock took a ticket: {st:?}");
    assert_eq!(st.holder.as_ref().map(|h| h.token), Some(token));
    assert!(st.waiters.is_empty());
    drop(innermost);
    drop(inner);
    assert!(
        !free_for_others(&path),
        "released after inner guards dropped"
    );
    mid.unlock().expect("unlock mid");
    assert!(
        !free_for_others(&path),
        "released while the outer guard lives"
    );
    outer.check().expect("still ours");
    assert_eq!(fairlock::inspect(&path).unwrap().next_ticket, next);
    outer.unlock().expect("unlock outer");
    assert!(free_for_others(&path), "not released by the last guard");
    // Nesting works again after a full release, with a new token.
    let again = lock.lock().expect("again");
    assert!(again.token() > token);
}

#[test]
fn guards_dropped_out_of_order() {
    let dir = TempDir::new("reent-order");
    let path = dir.join("lock");
    let lock = FairRLock::open(&path).expect("open");
    let a = lock.lock().expect("a");
    let b = lock.lock().expect("b");
    let c = lock.lock().expect("c");
    let token = a.token();
    drop(a); // the outermost first
    assert!(!free_for_others(&path));
    assert_eq!(c.token(), token);
    drop(c);
    assert!(!free_for_others(&path));
    b.check().expect("still ours");
    drop(b);
    assert!(free_for_others(&path), "not released by the last guard");
    let st = fairlock::inspect(&path).unwrap();
    assert!(st.holder.is_none(), "{st:?}");
}

#[test]
fn rlock_from_two_threads_second_waits() {
    let dir = TempDir::new("reent-threads");
    let path = dir.join("lock");
    let lock = Arc::new(FairRLock::open(&path).expect("open"));
    let outer = lock.lock().expect("outer");
    let inner = lock.lock().expect("inner");
    let token = outer.token();
    let (tx, rx) = mpsc::channel();
    let l = lock.clone();
    let other = std::thread::spawn(move || {
        assert!(matches!(l.try_lock(), Err(Error::WouldBlock { .. })));
        let g = l.lock().expect("other lock");
        let g2 = l.lock().expect("other nested");
        assert_eq!(g.token(), g2.token());
        tx.send(g.token()).unwrap();
    });
    wait_for_waiters(&path, 1, Duration::from_secs(20));
    drop(inner);
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        rx.try_recv().is_err(),
        "granted while the outer guard lives"
    );
    drop(outer);
    let t2 = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("second thread never got the lock");
    other.join().unwrap();
    assert_eq!(t2, token + 1);
}

#[test]
fn fair_lock_relock_would_deadlock() {
    let dir = TempDir::new("reent-deadlock");
    let path = dir.join("lock");
    let lock = FairLock::open(&path).expect("open");
    let g = lock.lock().expect("lock");
    let next = fairlock::inspect(&path).unwrap().next_ticket;
    assert!(matches!(lock.lock(), Err(Error::WouldDeadlock { .. })));
    assert!(matches!(lock.try_lock(), Err(Error::WouldDeadlock { .. })));
    assert!(matches!(
        lock.lock_timeout(Duration::from_millis(10)),
        Err(Error::WouldDeadlock { .. })
    ));
    assert!(matches!(
        lock.lock_timeout(Duration::ZERO),
        Err(Error::WouldDeadlock { .. })
    ));
    let st = fairlock::inspect(&path).unwrap();
    assert_eq!(
        st.next_ticket, next,
        "a refused re-lock took a ticket: {st:?}"
    );
    assert!(st.waiters.is_empty());
    g.check().expect("still ours");
    drop(g);
    assert!(free_for_others(&path));
    drop(lock.lock().expect("lock again after release"));
}

#[test]
fn two_handles_same_path_are_one_lock() {
    let dir = TempDir::new("reent-handles");
    let path = dir.join("lock");
    // FairLock: the second handle sees the first's holder as this thread.
    let h1 = FairLock::open(&path).expect("open 1");
    let h2 = FairLock::open(&path).expect("open 2");
    let g = h1.lock().expect("lock");
    assert!(matches!(h2.lock(), Err(Error::WouldDeadlock { .. })));
    assert!(matches!(h2.try_lock(), Err(Error::WouldDeadlock { .. })));
    assert!(matches!(
        h2.lock_timeout(Duration::from_millis(5)),
        Err(Error::WouldDeadlock { .. })
    ));
    drop(g);
    drop(h2.lock().expect("h2 after h1 released"));

    // FairRLock: nesting through another handle takes no ticket and shares the token.
    let rpath = dir.join("rlock");
    let r1 = FairRLock::open(&rpath).expect("open r1");
    let r2 = FairRLock::open(&rpath).expect("open r2");
    let a = r1.lock().expect("r1");
    let next = fairlock::inspect(&rpath).unwrap().next_ticket;
    let b = r2.lock().expect("r2 nested");
    assert_eq!(a.token(), b.token());
    assert_eq!(fairlock::inspect(&rpath).unwrap().next_ticket, next);
    drop(a);
    assert!(!free_for_others(&rpath), "released while r2's guard lives");
    drop(b);
    assert!(free_for_others(&rpath));

    // A handle opened through a different spelling of the same path is the same lock too.
    let alias = dir.path().join(".").join("lock");
    let h3 = FairLock::open(&alias).expect("open alias");
    let g = h1.lock().expect("lock");
    assert!(matches!(h3.try_lock(), Err(Error::WouldDeadlock { .. })));
    drop(g);
}

/// Two `FairRLock` handles on one file that differ in their lease: a guard nested through the
/// handle without a lease belongs to the outer, leased grant, so it reports that lease, can
/// extend it, and releases it the way a leased grant is released (a CAS that a takeover can
/// win). Its own handle's lease (none) does not apply: `lease()` is not `None`, `extend` does
/// not fail with "opened without a lease", and its release is not the unleased plain store,
/// which could report `Ok` for a grant whose lease a takeover had already revoked.
#[test]
fn nested_guard_takes_the_lease_of_the_outer_grant() {
    let dir = TempDir::new("reent-lease");
    let path = dir.join("lock");
    let leased = FairRLock::options()
        .lease(Duration::from_secs(30))
        .open(&path)
        .expect("open leased");
    let plain = FairRLock::open(&path).expect("open plain");
    let outer = leased.lock().expect("outer");
    let inner = plain.lock().expect("inner");
    assert_eq!(inner.token(), outer.token());
    assert_eq!(inner.lease(), Some(Duration::from_secs(30)));
    inner
        .extend(Duration::from_secs(60))
        .expect("extend through the nested guard");
    drop(outer); // out of order: the inner guard now releases the grant
    inner.unlock().expect("unlock");
    assert!(free_for_others(&path));
    // And the other way round: an unleased grant stays unleased in a nested leased guard.
    let outer = plain.lock().expect("outer, plain");
    let inner = leased.lock().expect("inner, leased handle");
    assert_eq!(inner.lease(), None);
    assert!(matches!(
        inner.extend(Duration::from_secs(1)),
        Err(Error::InvalidOption { .. })
    ));
    drop(inner);
    drop(outer);
    assert!(free_for_others(&path));
}

#[test]
fn nesting_is_bounded_and_never_gives_the_outer_grant_away() {
    // A nested lock past the bound (2^24 levels) is refused (`TooDeep`): after 2^31 forgotten
    // nested guards the depth counter would run into the poison bit, and the next nested
    // release would give up the outer grant (of a FairMutex, too, whose `&mut` is alive).
    let dir = common::TempDir::new("reentrancy-depth");
    let path = dir.join("m.lock");
    let m = fairlock::FairMutex::<u64>::open(&path).unwrap();
    let rl = fairlock::FairRLock::open(&path).unwrap();
    let mut g = m.lock().unwrap();
    let mut refused = None;
    for n in 0..(1u64 << 25) {
        match rl.lock() {
            Ok(nested) => std::mem::forget(nested),
            Err(e) => {
                refused = Some((n, e));
                break;
            }
        }
    }
    let (n, e) = refused.expect("nesting never refused");
    assert!(matches!(e, fairlock::Error::TooDeep { .. }), "{e:?}");
    assert_eq!(
        n,
        (1 << 24) - 1,
        "refused after the bound, counting the outer grant"
    );
    let other = std::thread::scope(|s| s.spawn(|| m.try_lock().map(drop)).join().unwrap());
    assert!(
        matches!(other, Err(fairlock::Error::WouldBlock { .. })),
        "{other:?}"
    );
    *g += 1;
    assert!(g.check().is_ok());
}

/// A holder whose leased grant was taken over (it slept past its lease; another thread of the
/// same process took the lock) locks again: `LockLost`, at once, for a re-entrant lock and a
/// plain one alike — not a new grant (the code since the takeover ran without the lock while
/// believing it held it), not a wait. Once it drops the lost guard it locks as anyone does.
/// (A `FairRLock` in the chaos suite with leases and stops got a new grant here: the second
/// thread's grant had replaced the first one's in the process's record of its holder.)
#[test]
fn a_relock_on_a_grant_taken_over_is_lock_lost() {
    for reentrant in [true, false] {
        let dir = TempDir::new("reent-lost");
        let path = dir.join("lock");
        let opts = {
            let mut o = FairLock::options();
            o.lease(Duration::from_millis(100));
            o
        };
        let lock: Arc<dyn Fn() -> fairlock::Result<fairlock::LockGuard<'static>> + Send + Sync> =
            if reentrant {
                let l: &'static FairRLock = Box::leak(Box::new(opts.open_rlock(&path).unwrap()));
                Arc::new(move || l.lock())
            } else {
                let l: &'static FairLock = Box::leak(Box::new(opts.open(&path).unwrap()));
                Arc::new(move || l.lock())
            };
        let outer = lock().expect("outer");
        let (tx, rx) = mpsc::channel();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let other = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                // Waits, then takes the lock over once the outer grant's lease ran out.
                let g = lock().expect("take over");
                tx.send(g.token()).unwrap();
                done_rx.recv().unwrap();
                drop(g);
            })
        };
        let taken_over = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the other thread takes the lock over");
        assert!(taken_over > outer.token());
        // The other thread holds: our re-lock is refused at once, not queued behind it.
        let r = lock();
        assert!(
            matches!(r, Err(Error::LockLost { .. })),
            "reentrant {reentrant}: re-lock while another thread holds: {:?}",
            r.map(|g| g.token())
        );
        done_tx.send(()).unwrap();
        other.join().unwrap();
        // Free now: still refused, while the lost guard lives.
        let r = lock();
        assert!(
            matches!(r, Err(Error::LockLost { .. })),
            "reentrant {reentrant}: re-lock after the other released: {:?}",
            r.map(|g| g.token())
        );
        assert!(matches!(outer.check(), Err(Error::LockLost { .. })));
        assert!(matches!(outer.unlock(), Err(Error::LockLost { .. })));
        let fresh = lock().expect("a fresh lock once the lost guard is gone");
        assert!(fresh.token() > taken_over);
    }
}

/// A leased grant that is still ours nests (a re-entrant lock) or is refused with
/// `WouldDeadlock` (a plain one), whichever handle locks again; its nested guards share its
/// token and lease.
#[test]
fn a_relock_on_a_live_leased_grant_nests() {
    let dir = TempDir::new("reent-leased-live");
    let path = dir.join("lock");
    let rl = FairRLock::options()
        .lease(Duration::from_secs(30))
        .open(&path)
        .expect("open");
    let outer = rl.lock().expect("outer");
    let inner = rl.lock().expect("nested");
    assert_eq!(inner.token(), outer.token());
    assert_eq!(inner.lease(), Some(Duration::from_secs(30)));
    let plain = FairLock::open(&path).expect("open plain");
    assert!(matches!(plain.lock(), Err(Error::WouldDeadlock { .. })));
    drop(inner);
    assert!(!free_for_others(&path), "the outer level still holds");
    drop(outer);
    assert!(free_for_others(&path));
}

fn never() -> bool {
    false
}

/// A leased grant whose guard is forgotten, then its handle dropped (its view is freed).
fn forget_a_leased_grant(path: &std::path::Path) {
    let a = FairLock::options()
        .lease(Duration::from_secs(60))
        .open(path)
        .expect("open");
    if let Ok(g) = a.lock() {
        std::mem::forget(g);
    }
    drop(a);
}

/// A thread forgets leased guards and drops their handles, then opens fresh files: the first
/// lock of each must be granted. (A thread's record of a leased grant must not name the view by
/// its address alone: a later view at the same address would be taken for it, and its first
/// lock would say `LockLost`.)
#[test]
fn forgotten_leased_guards_do_not_poison_later_views() {
    let dir = TempDir::new("reent-forgot-many");
    let d = dir.join("");
    std::thread::spawn(move || {
        for i in 0..200 {
            let a = FairLock::options()
                .lease(Duration::from_secs(60))
                .open(d.join(format!("leased-{i}")))
                .unwrap();
            match a.lock() {
                Ok(g) => std::mem::forget(g),
                Err(e) => panic!("iteration {i}: first lock of a fresh leased file: {e:?}"),
            }
            drop(a);
            let b = FairLock::open(d.join(format!("plain-{i}"))).expect("open b");
            match b.lock_timeout(Duration::from_secs(1)) {
                Ok(g) => drop(g),
                Err(e) => panic!("iteration {i}: first lock of a fresh plain file: {e:?}"),
            }
        }
    })
    .join()
    .unwrap();
}

/// `lock_for_fd` with a lease, repeatedly in one thread, each on a fresh file, each unlocked
/// with `unlock_fd`: nothing is held when the next one starts (a grant held for a descriptor is
/// not its thread's; recorded as the thread's, it would make a later view's lock say
/// `LockLost`).
#[test]
fn leased_descriptor_locks_in_one_thread() {
    use std::fs::OpenOptions as FsOpen;
    use std::os::fd::AsFd;
    let dir = TempDir::new("reent-fd-lease");
    let d = dir.join("");
    std::thread::spawn(move || {
        for i in 0..50 {
            let path = d.join(format!("jobs-{i}.lock"));
            let f = FsOpen::new().append(true).create(true).open(&path).unwrap();
            let r = FairLock::options()
                .lease(Duration::from_secs(60))
                .lock_for_fd(f.as_fd(), fairlock::FdMode::Exclusive, None, never);
            match r {
                Ok(_) => {
                    fairlock::unlock_fd(f.as_fd()).unwrap();
                }
                Err(e) => panic!("descriptor lock {i} of a fresh file: {e:?}"),
            }
        }
    })
    .join()
    .unwrap();
}

/// Thread T forgot leased guards (of files it closed), then opened other files; the main
/// thread holds leased grants of those (60 s leases) through T's handles. T exits: its
/// thread-local's destructor gives up what T still holds — never another thread's grant
/// through a view at an address T once used (revoking the main thread's live grants would let a
/// third thread take those locks while their guards live: two holders).
#[test]
fn a_thread_exit_never_revokes_another_thread_s_grants() {
    let dir = TempDir::new("reent-exit");
    let d = dir.join("");
    let (tx, rx) = std::sync::mpsc::channel::<Vec<Arc<FairLock>>>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let d2 = d.clone();
    let t = std::thread::spawn(move || {
        for i in 0..30 {
            forget_a_leased_grant(&d2.join(format!("a-{i}.lock")));
        }
        let bs: Vec<_> = (0..30)
            .map(|j| {
                Arc::new(
                    FairLock::options()
                        .lease(Duration::from_secs(60))
                        .open(d2.join(format!("b-{j}.lock")))
                        .unwrap(),
                )
            })
            .collect();
        tx.send(bs).unwrap();
        go_rx.recv().unwrap();
    });
    let bs = rx.recv().unwrap();
    let gs: Vec<_> = bs.iter().map(|b| b.lock().expect("lock b")).collect();
    go_tx.send(()).unwrap();
    t.join().unwrap();
    let lost: Vec<usize> = (0..30).filter(|&j| gs[j].check().is_err()).collect();
    let free: Vec<usize> = (0..30)
        .filter(|j| {
            let p = d.join(format!("b-{j}.lock"));
            std::thread::spawn(move || FairLock::open(&p).unwrap().try_lock().is_ok())
                .join()
                .unwrap()
        })
        .collect();
    assert!(
        lost.is_empty() && free.is_empty(),
        "live 60 s leased grants revoked by another thread's exit: {lost:?}; \
         taken by a third thread while their guards live: {free:?}"
    );
}
