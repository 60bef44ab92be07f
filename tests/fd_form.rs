//! Locks held on behalf of an open file description (`OpenOptions::lock_for_fd`,
//! `unlock_fd`), from a user's crate: held while the description is open, released by
//! `unlock_fd`, or — the description closed — passed to the next holder with `owner_died`.
//!
//! Also: `unlock_fd` after a lease takeover reports the loss and never releases another
//! description's grant; two threads locking for one description never let a third party in;
//! a descriptor of the process's own beacon revokes nothing; a panicking stop hook leaves the
//! descriptor holding nothing; bad permit counts are refused; and `/proc/self/fd/...` paths
//! other than `/proc/self/fd/N` do not follow a planted link.

mod common;

use std::fs::OpenOptions as FsOpen;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::TempDir;
use fairlock::{Error, FairLock, FdMode};

fn never() -> bool {
    false
}

#[test]
fn a_descriptor_holds_until_unlocked_or_closed() {
    let dir = TempDir::new("fd-form");
    let path = dir.join("jobs.lock");
    let f = FsOpen::new().append(true).create(true).open(&path).unwrap();
    let g = FairLock::options()
        .lock_for_fd(f.as_fd(), FdMode::Exclusive, None, never)
        .expect("lock for the descriptor");
    assert!(!g.owner_died);
    let other = FairLock::open(&path).unwrap();
    assert!(matches!(other.try_lock(), Err(Error::WouldBlock { .. })));
    // The same description cannot take it twice.
    assert!(matches!(
        FairLock::options().lock_for_fd(f.as_fd(), FdMode::Exclusive, None, never),
        Err(Error::WouldDeadlock { .. })
    ));
    let released = fairlock::unlock_fd(f.as_fd())
        .unwrap()
        .expect("it held a grant");
    assert_eq!(released.token, g.token);
    assert_eq!(fairlock::unlock_fd(f.as_fd()).unwrap(), None);
    drop(other.try_lock().expect("free after unlock_fd"));
    // Held again, then the only descriptor of the description is closed: the next holder
    // takes over and is told.
    FairLock::options()
        .lock_for_fd(f.as_fd(), FdMode::Exclusive, None, never)
        .unwrap();
    drop(f);
    let next = other
        .lock_timeout(Duration::from_secs(10))
        .expect("taken over");
    assert!(next.owner_died());
}

#[test]
fn a_timed_out_descriptor_lock_leaves_nothing_behind() {
    let dir = TempDir::new("fd-form-timeout");
    let path = dir.join("jobs.lock");
    let holder = FairLock::open(&path).unwrap();
    let g = holder.lock().unwrap();
    let f = FsOpen::new().append(true).open(&path).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_millis(50);
    assert!(matches!(
        FairLock::options().lock_for_fd(f.as_fd(), FdMode::Exclusive, Some(deadline), never),
        Err(Error::Timeout { .. })
    ));
    assert_eq!(fairlock::unlock_fd(f.as_fd()).unwrap(), None);
    drop(g);
    let st = fairlock::inspect(&path).unwrap();
    assert!(st.holder.is_none() && st.waiters.is_empty(), "{st:?}");
    // Read-only descriptors and names are refused.
    let ro = FsOpen::new().read(true).open(&path).unwrap();
    assert!(matches!(
        FairLock::options().lock_for_fd(ro.as_fd(), FdMode::Exclusive, None, never),
        Err(Error::InvalidOption { .. })
    ));
}

// ---------------------------------------------------------------------------------------------
// Takeovers, races between descriptions, hooks, bad input and paths
// ---------------------------------------------------------------------------------------------

/// docs/CLI.md: "`fairlock unlock FD` ... 69 if the lock was lost (its `--lease` ran out and
/// the next waiter took over)"; `unlock_fd`'s doc: "`Error::LockLost` if its lease ran out and
/// the lock was taken over". After a takeover the grant's slot word is `Revoked` (not `Held`),
/// and `unlock_fd` reports `LockLost` — not `Ok(None)` ("held nothing"), which would tell the
/// script its unlock succeeded although someone else was inside meanwhile.
#[test]
fn unlock_fd_after_a_lease_takeover_reports_the_loss() {
    let dir = TempDir::new("fd-form-lease");
    let path = dir.join("jobs.lock");
    let f = FsOpen::new().append(true).create(true).open(&path).unwrap();
    let g = FairLock::options()
        .lease(Duration::from_millis(100))
        .lock_for_fd(f.as_fd(), FdMode::Exclusive, None, never)
        .expect("lock for the descriptor");
    assert!(!g.owner_died);
    // The next waiter takes the lock over once the lease has run out.
    let other = FairLock::open(&path).unwrap();
    let og = other
        .lock_timeout(Duration::from_secs(10))
        .expect("taken over after the lease");
    assert!(og.owner_died(), "a takeover is reported to the next holder");
    drop(og);
    let r = fairlock::unlock_fd(f.as_fd());
    assert!(
        matches!(r, Err(Error::LockLost { .. })),
        "unlock_fd after the descriptor's lease was taken over must report LockLost (CLI exit 69), got {r:?}"
    );
}

/// Two threads of one process take the lock for the *same* descriptor at once. `lock_for_fd`
/// promises `WouldDeadlock` when the description already holds a grant. Both threads may pass
/// that check (`entry_of`) before either claims, and as they have the same pid both `register`
/// scans start at the same entry, whose beacon the shared description could take twice (an
/// OFD lock does not conflict with its own description): so beacons are probed free before
/// they are claimed, and the entry's marker is set by CAS. Run as one participant, the second
/// one's `clean_up_participant` would revoke the first one's live grant, or its `give_back`
/// unlock the beacon that the first one's *held* grant depends on — either way a third party
/// would get the lock while the description was told it holds it.
#[test]
fn two_threads_locking_for_one_description_never_let_a_third_party_in() {
    let dir = TempDir::new("fd-form-threads");
    let mut violations = Vec::new();
    for trial in 0..80 {
        let path = dir.join(&format!("t{trial}.lock"));
        let f = Arc::new(FsOpen::new().append(true).create(true).open(&path).unwrap());
        // Initialised beforehand, so that neither thread waits for the other's initialisation.
        drop(FairLock::open(&path).unwrap());
        // Both threads spin until released together (a `Barrier` wakes one of them late).
        let ready = Arc::new(AtomicU64::new(0));
        let go = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let (f, ready, go) = (f.clone(), ready.clone(), go.clone());
                std::thread::spawn(move || {
                    ready.fetch_add(1, SeqCst);
                    while !go.load(SeqCst) {
                        std::hint::spin_loop();
                    }
                    let deadline = Instant::now() + Duration::from_millis(150);
                    FairLock::options().lock_for_fd(
                        f.as_fd(),
                        FdMode::Exclusive,
                        Some(deadline),
                        never,
                    )
                })
            })
            .collect();
        while ready.load(SeqCst) < 2 {
            std::hint::spin_loop();
        }
        go.store(true, SeqCst);
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let oks = results.iter().filter(|r| r.is_ok()).count();
        if oks == 2 {
            violations.push(format!(
                "trial {trial}: both threads were granted the lock for one description: {results:?}"
            ));
        }
        if oks >= 1 {
            // The description holds the lock: nobody else may take it.
            let third = FairLock::open(&path).unwrap();
            if let Ok(g) = third.try_lock() {
                violations.push(format!(
                    "trial {trial}: a third party took the lock (owner_died {}) while the descriptor was granted it: {results:?}",
                    g.owner_died()
                ));
            }
        }
        if std::env::var_os("FDR_VERBOSE").is_some() {
            eprintln!("trial {trial}: {results:?}");
        }
        let _ = fairlock::unlock_fd(f.as_fd());
        if !violations.is_empty() {
            break;
        }
    }
    assert!(violations.is_empty(), "{violations:#?}");
}

/// `unlock_fd(w)` never releases a grant that does not belong to `w`'s description. Two
/// separate probes of an entry's beacon — held by some description, and not by any other
/// than fd's — would pass an entry as fd's when its holding description closes between them,
/// and `unlock_fd` would release whatever `Held` ticket names that entry: the dead holder's
/// (whose successor is then not told `owner_died`) or, once the entry was claimed again, a
/// live holder's. A per-grant random nonce byte, held through fd, identifies fd's entry
/// instead, probed through fd first.
/// Here `w` never takes the lock; another thread keeps taking it for short-lived descriptions
/// and closing them.
#[test]
fn unlock_fd_of_a_description_that_never_locked_releases_nothing() {
    let dir = TempDir::new("fd-form-probe-race");
    let path = dir.join("jobs.lock");
    let w = FsOpen::new().append(true).create(true).open(&path).unwrap();
    // Initialise the file.
    drop(FairLock::open(&path).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU64::new(0));
    let taker = {
        let (path, stop, rounds) = (path.clone(), stop.clone(), rounds.clone());
        std::thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(3);
            while !stop.load(SeqCst) && Instant::now() < end {
                let x = FsOpen::new().append(true).open(&path).unwrap();
                let deadline = Instant::now() + Duration::from_secs(2);
                let _ = FairLock::options().lock_for_fd(
                    x.as_fd(),
                    FdMode::Exclusive,
                    Some(deadline),
                    never,
                );
                drop(x); // the description closes: its grant is a dead holder's
                rounds.fetch_add(1, SeqCst);
            }
            stop.store(true, SeqCst);
        })
    };
    let mut wrong = None;
    let mut calls = 0u64;
    while !stop.load(SeqCst) {
        calls += 1;
        match fairlock::unlock_fd(w.as_fd()) {
            Ok(None) => {}
            other => {
                wrong = Some(other);
                break;
            }
        }
    }
    stop.store(true, SeqCst);
    taker.join().unwrap();
    assert!(
        wrong.is_none(),
        "unlock_fd of a descriptor that never locked released a grant after {calls} calls ({} takes by others): {wrong:?}",
        rounds.load(SeqCst)
    );
}

/// `open_file` drops `O_NOFOLLOW` only for exactly `/proc/self/fd/N` (and
/// `/proc/thread-self/fd/N`), not for every path that *starts with* those components:
/// `/proc/self/fd/<dirfd>/name` (the usual way to name a file relative to a directory
/// descriptor) and `/proc/self/fd/../../../tmp/x` keep it, so a symbolic link planted as the
/// final component is refused — not followed, and, dangling, its target not created
/// (`O_CREAT` would follow it) — as the same path written plainly is.
#[test]
fn a_path_under_proc_self_fd_does_not_follow_a_planted_link() {
    let dir = TempDir::new("fd-form-nofollow");
    let target = dir.join("victim");
    std::os::unix::fs::symlink(&target, dir.join("jobs.lock")).unwrap();
    // The plain path is refused, untouched.
    assert!(matches!(
        FairLock::open(dir.join("jobs.lock")),
        Err(Error::InvalidPath { .. })
    ));
    assert!(!target.exists());
    let d = std::fs::File::open(dir.path()).unwrap();
    let via_dirfd = format!("/proc/self/fd/{}/jobs.lock", d.as_raw_fd());
    let r = FairLock::open(&via_dirfd);
    let created = target.exists();
    assert!(
        r.is_err() && !created,
        "{via_dirfd} (a link) was followed: open gave {:?}, link target created: {created}",
        r.map(|_| ())
    );
}

/// The library never panics on bad input. `lock_for_fd(.., FdMode::Permit(n), ..)` checks
/// `1..=MAX_PERMITS` first, as `open_semaphore` does, before it computes
/// `RecordKind::semaphore(n).min_slots()`: for `n > 2^30`, `saturating_mul(2)` is above 2^31
/// and `next_power_of_two` would overflow — a panic in a debug build (CI runs this file in a
/// debug build too: `ci/test.sh`), a wrap to 0 in release.
#[test]
fn an_out_of_range_permit_count_is_refused_not_a_panic() {
    let dir = TempDir::new("fd-form-permits");
    let path = dir.join("sem.lock");
    let f = FsOpen::new().append(true).create(true).open(&path).unwrap();
    let r = std::panic::catch_unwind(|| {
        FairLock::options()
            .lock_for_fd(f.as_fd(), FdMode::Permit(u32::MAX), None, never)
            .map(|_| ())
    });
    match r {
        Ok(Err(Error::InvalidOption { .. })) => {}
        Ok(other) => panic!("Permit(u32::MAX): expected InvalidOption, got {other:?}"),
        Err(_) => panic!("Permit(u32::MAX) panicked inside the library"),
    }
}

/// A `stop` hook that panics is caught inside the wait, the ticket is given up, and the panic
/// resumed (`FairLock::lock_interruptible`'s contract) — through `lock_for_fd`, whose drop
/// guard gives the descriptor's entry back while unwinding. A marked entry left with no ticket
/// would make the description "hold this lock already" (`WouldDeadlock`) though it holds
/// nothing, until an `unlock_fd` that reports "held nothing".
#[test]
fn a_panicking_stop_hook_leaves_the_descriptor_holding_nothing() {
    let dir = TempDir::new("fd-form-panic-hook");
    let path = dir.join("jobs.lock");
    let f = FsOpen::new().append(true).create(true).open(&path).unwrap();
    let holder = FairLock::open(&path).unwrap();
    let g = holder.lock().unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        FairLock::options().lock_for_fd(f.as_fd(), FdMode::Exclusive, None, || {
            panic!("the caller's hook panics")
        })
    }));
    assert!(r.is_err(), "the hook's panic is resumed");
    drop(g);
    let again = FairLock::options().lock_for_fd(
        f.as_fd(),
        FdMode::Exclusive,
        Some(Instant::now() + Duration::from_secs(5)),
        never,
    );
    assert!(
        again.is_ok(),
        "after a wait that ended in a panic the descriptor holds nothing and may lock: {again:?}"
    );
}

/// An OFD lock never conflicts with its own description: given a descriptor of this process's
/// *plain* beacon (found in /proc/self/fd: a descriptor the library owns), `lock_for_fd` must
/// not re-claim the plain handle's own entry, mark it, and revoke the plain handle's live grant
/// as a dead process's leftovers (`clean_up_participant`), making the fd-form grant while the
/// plain guard still believes it holds. Beacons are probed free before they are claimed, and
/// liveness is probed through a description of the view's own.
#[test]
fn locking_for_a_descriptor_of_our_own_beacon_does_not_revoke_our_grant() {
    use std::os::fd::BorrowedFd;
    let dir = TempDir::new("fd-form-own-beacon");
    let path = dir.join("jobs.lock");
    let lock = FairLock::open(&path).unwrap();
    let g = lock.lock().unwrap();
    let canon = std::fs::canonicalize(&path).unwrap();
    let beacon_fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let n: i32 = e.file_name().to_str()?.parse().ok()?;
            (std::fs::read_link(e.path()).ok()? == canon).then_some(n)
        })
        .collect();
    assert!(
        !beacon_fds.is_empty(),
        "the plain handle's beacon descriptor"
    );
    for n in beacon_fds {
        // SAFETY: `n` is open (listed above) and stays open while `lock` lives.
        let fd = unsafe { BorrowedFd::borrow_raw(n) };
        let r = FairLock::options().lock_for_fd(
            fd,
            FdMode::Exclusive,
            Some(Instant::now() + Duration::from_millis(200)),
            never,
        );
        assert!(
            r.is_err() && g.check().is_ok(),
            "fd {n}: lock_for_fd gave {r:?} while this process holds the lock through a plain handle (its guard's check: {:?})",
            g.check()
        );
    }
}
