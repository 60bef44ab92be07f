//! Adversarial review of the fd form (`OpenOptions::lock_for_fd`, `unlock_fd`) and of the
//! `/proc/self/fd` change to `open_file`. Each test states the contract it checks; every one
//! of them failed on the code it was written against (see the review report).

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

/// Finding 1. docs/CLI.md: "`fairlock unlock FD` ... 69 if the lock was lost (its `--lease` ran
/// out and the next waiter took over)"; `unlock_fd`'s doc: "`Error::LockLost` if its lease ran
/// out and the lock was taken over". After a takeover the grant's slot word is `Revoked` (not
/// `Held`), so `unlock_fd` finds no held ticket and answers `Ok(None)` ("held nothing"): the
/// script is told its unlock succeeded although someone else was inside meanwhile.
#[test]
fn unlock_fd_after_a_lease_takeover_reports_the_loss() {
    let dir = TempDir::new("fdr-lease");
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

/// Finding 2. Two threads of one process take the lock for the *same* descriptor at once.
/// `lock_for_fd` promises `WouldDeadlock` when the description already holds a grant, but the
/// check (`entry_of`) and the claim are not atomic: both threads pass the check, and as they
/// have the same pid both `register` scans start at the same entry, whose beacon the shared
/// description can take twice (an OFD lock does not conflict with its own description). Both
/// then run as the same participant: the second one's `clean_up_participant` revokes the first
/// one's live grant, or the second one times out and `give_back` unlocks the beacon that the
/// first one's *held* grant depends on. Either way a third party gets the lock while the
/// description was told it holds it.
#[test]
fn two_threads_locking_for_one_description_never_let_a_third_party_in() {
    let dir = TempDir::new("fdr-threads");
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

/// Finding 3. `unlock_fd(w)` must never release a grant that does not belong to `w`'s
/// description. `entry_of` decides "fd's entry" from two separate probes: held by some
/// description (probe 1), not held by any description other than fd's (probe 2). If the
/// holding description closes between the two, the entry passes as fd's; `unlock_fd` then
/// releases whatever `Held` ticket names that entry — the dead holder's (whose successor is not
/// told `owner_died`) or, once the entry was claimed again, a live holder's.
/// Here `w` never takes the lock; another thread keeps taking it for short-lived descriptions
/// and closing them.
#[test]
fn unlock_fd_of_a_description_that_never_locked_releases_nothing() {
    let dir = TempDir::new("fdr-probe-race");
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

/// Finding 4. `open_file` drops `O_NOFOLLOW` for every path that *starts with* the components
/// `/proc/self/fd/` — not only for `/proc/self/fd/N`. `/proc/self/fd/<dirfd>/name` (the usual
/// way to name a file relative to a directory descriptor) and `/proc/self/fd/../../../tmp/x`
/// pass, so a symbolic link planted as the final component is followed (and, dangling, its
/// target is created: `O_CREAT` follows it), which the same path written plainly refuses.
#[test]
fn a_path_under_proc_self_fd_does_not_follow_a_planted_link() {
    let dir = TempDir::new("fdr-nofollow");
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

/// Finding 5. The library never panics on bad input. `lock_for_fd(.., FdMode::Permit(n), ..)`
/// computes `RecordKind::semaphore(n).min_slots()` before any validation (`open_semaphore`
/// checks `1..=MAX_PERMITS` first): for `n > 2^30`, `saturating_mul(2)` is above 2^31 and
/// `next_power_of_two` overflows — a panic in a debug build (CI runs `--test fd_form` in debug;
/// run this one with `cargo test -p fairlock --all-features --test fd_form_review`), a wrap to 0
/// in release.
#[test]
fn an_out_of_range_permit_count_is_refused_not_a_panic() {
    let dir = TempDir::new("fdr-permits");
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

/// Finding 6. `lock_for_fd` gives the descriptor's entry back (`give_back`) only when the
/// wait *returns* an error. A `stop` hook that panics is caught inside the wait, the ticket is
/// given up, and the panic resumed (`FairLock::lock_interruptible`'s contract) — straight
/// through `lock_for_fd`, past `give_back`: the description keeps a marked entry with no
/// ticket, so it "holds this lock already" (`WouldDeadlock`) though it holds nothing, until an
/// `unlock_fd` that reports "held nothing".
#[test]
fn a_panicking_stop_hook_leaves_the_descriptor_holding_nothing() {
    let dir = TempDir::new("fdr-panic-hook");
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

/// Finding 7 (low: needs a descriptor the library owns). `lock_for_fd` trusts `register` to
/// find an entry no lock of `fd`'s description is on (its comment says so), but an OFD lock
/// never conflicts with its own description: given a descriptor of this process's *plain*
/// beacon (found in /proc/self/fd), `register` re-claims the plain handle's own entry, marks
/// it, and `clean_up_participant` revokes the plain handle's live grant as a dead process's
/// leftovers; the fd-form grant is then made while the plain guard still believes it holds.
#[test]
fn locking_for_a_descriptor_of_our_own_beacon_does_not_revoke_our_grant() {
    use std::os::fd::BorrowedFd;
    let dir = TempDir::new("fdr-own-beacon");
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
