//! Leases: a holder that overstays its lease is taken over (the next holder is told
//! `owner_died()`), and its `check`, `extend` and `unlock` then say `LockLost`; nested
//! `FairRLock` guards all report the loss; a lease extended in time is not taken over;
//! `extend`'s arguments are checked. With the crash points of the private feature
//! `__test-crash-points`: a leased claimer stopped right after its claim never holds beside
//! its slot's next user.
//!
//! Leases meet crashes and stopped processes at every crash point in `crash.rs` and
//! `chaos_leases.rs`; the shared kinds' leases are in `kinds.rs`, a frozen leased grantee in
//! `recovery.rs`.

mod common;

use std::sync::Arc;
#[cfg(feature = "__test-crash-points")]
use std::sync::atomic::Ordering::SeqCst;
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[cfg(feature = "__test-crash-points")]
use common::{Shm, Worker, role, wait_until};
use common::{TempDir, wait_for_waiters};
use fairlock::{Error, FairLock};

#[test]
fn expired_lease_is_taken_over() {
    let dir = TempDir::new("robust-lease");
    let path = dir.join("lock");
    let leased = Arc::new(
        FairLock::options()
            .lease(Duration::from_millis(200))
            .open(&path)
            .expect("open leased"),
    );
    let t0 = Instant::now();
    let g = leased.lock().expect("lock");
    assert_eq!(g.lease(), Some(Duration::from_millis(200)));
    g.check().expect("ours");
    let st = fairlock::inspect(&path).unwrap();
    let remaining = st.holder.as_ref().and_then(|h| h.lease_remaining);
    assert!(
        remaining.is_some_and(|r| r <= Duration::from_millis(200)),
        "{st:?}"
    );
    let plain = Arc::new(FairLock::open(&path).expect("open"));
    let l = plain.clone();
    let (tx, rx) = mpsc::channel();
    let taker = std::thread::spawn(move || {
        let g = l.lock_timeout(Duration::from_secs(30)).expect("takeover");
        tx.send((t0.elapsed(), g.token(), g.owner_died())).unwrap();
        // Hold until told, so the old holder's calls see a live successor.
        std::thread::sleep(Duration::from_millis(300));
    });
    let (after, token, died) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("lease never taken over");
    assert!(
        after >= Duration::from_millis(190),
        "taken over after only {after:?} of a 200 ms lease"
    );
    assert!(died, "a takeover must report owner_died");
    assert!(token > g.token());
    assert!(matches!(g.check(), Err(Error::LockLost { .. })));
    assert!(matches!(
        g.extend(Duration::from_secs(1)),
        Err(Error::LockLost { .. })
    ));
    assert!(matches!(g.unlock(), Err(Error::LockLost { .. })));
    // The stale guard's unlock did not release the taker's lock.
    let p = path.clone();
    let r = std::thread::spawn(move || {
        FairLock::open(&p)
            .expect("open")
            .try_lock()
            .map(|g| g.token())
    })
    .join()
    .unwrap();
    assert!(matches!(r, Err(Error::WouldBlock { .. })), "{r:?}");
    taker.join().unwrap();
}

#[test]
fn nested_rlock_guards_all_report_a_lost_lease() {
    let dir = TempDir::new("robust-rlease");
    let path = dir.join("lock");
    let r = fairlock::FairRLock::options()
        .lease(Duration::from_millis(100))
        .open(&path)
        .expect("open");
    let outer = r.lock().expect("outer");
    let inner = r.lock().expect("inner");
    let (tx, rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let p = path.clone();
    let taker = std::thread::spawn(move || {
        let l = FairLock::open(&p).expect("open");
        let g = l.lock_timeout(Duration::from_secs(30)).expect("takeover");
        tx.send((g.token(), g.owner_died())).unwrap();
        release_rx.recv().unwrap();
        g.check()
            .expect("the taker still holds after the old guards dropped");
        g.unlock().expect("taker unlock");
    });
    let (token, died) = rx.recv_timeout(Duration::from_secs(30)).expect("takeover");
    assert!(died);
    assert!(token > outer.token());
    assert!(matches!(inner.check(), Err(Error::LockLost { .. })));
    assert!(matches!(outer.check(), Err(Error::LockLost { .. })));
    assert!(matches!(inner.unlock(), Err(Error::LockLost { .. })));
    assert!(matches!(outer.unlock(), Err(Error::LockLost { .. })));
    let st = fairlock::inspect(&path).unwrap();
    assert_eq!(st.holder.as_ref().map(|h| h.token), Some(token), "{st:?}");
    release_tx.send(()).unwrap();
    taker.join().unwrap();
    // Usable again by the old holder.
    let g = r.lock().expect("relock");
    assert!(g.token() > token);
}

#[test]
fn extended_lease_is_not_taken_over() {
    let dir = TempDir::new("robust-extend");
    let path = dir.join("lock");
    let leased = FairLock::options()
        .lease(Duration::from_millis(150))
        .open(&path)
        .expect("open leased");
    let g = leased.lock().expect("lock");
    let plain = Arc::new(FairLock::open(&path).expect("open"));
    let l = plain.clone();
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let g = l.lock_timeout(Duration::from_secs(30)).expect("lock");
        tx.send(g.owner_died()).unwrap();
    });
    wait_for_waiters(&path, 1, Duration::from_secs(20));
    // Hold for 6 leases, extending well before each runs out.
    for _ in 0..12 {
        g.extend(Duration::from_millis(150)).expect("extend");
        std::thread::sleep(Duration::from_millis(40));
        g.check().expect("still ours");
        assert!(rx.try_recv().is_err(), "taken over despite extensions");
    }
    g.unlock().expect("unlock after extending");
    let died = rx.recv_timeout(Duration::from_secs(10)).expect("waiter");
    waiter.join().unwrap();
    assert!(!died, "a released lease is not a death");
}

#[test]
fn extend_argument_errors() {
    let dir = TempDir::new("robust-extend-errors");
    let path = dir.join("lock");
    let plain = FairLock::open(&path).expect("open");
    let g = plain.lock().expect("lock");
    assert_eq!(g.lease(), None);
    assert!(matches!(
        g.extend(Duration::from_secs(1)),
        Err(Error::InvalidOption { .. })
    ));
    g.check().expect("ours");
    drop(g);
    let leased = FairLock::options()
        .lease(Duration::from_secs(10))
        .open(dir.join("leased"))
        .expect("open");
    let g = leased.lock().expect("lock");
    assert!(matches!(
        g.extend(Duration::ZERO),
        Err(Error::InvalidOption { .. })
    ));
    g.extend(Duration::from_secs(5)).expect("extend");
    g.unlock().expect("unlock");
}

// ---------------------------------------------------------------------------------------------
// Crash points: a leased claimer stopped right after its claim
// ---------------------------------------------------------------------------------------------

/// The shared words, the witness and the workers of the paused claimer's test.
#[cfg(feature = "__test-crash-points")]
mod paused_claimer {
    use super::*;

    pub(super) const W_GRANTED: usize = 0; // the paused claimer reported a grant
    pub(super) const W_TOKEN: usize = 1;
    pub(super) const C_HOLDS: usize = 2; // the cycler holds a ticket in the paused waiter's slot
    pub(super) const C_TOKEN: usize = 3;
    pub(super) const C_CONT: usize = 4; // the cycler may release
    pub(super) const C_ROUNDS: usize = 5;
    pub(super) const HOLDING: usize = 6; // witness: pid of the current holder

    pub(super) fn signal(w: &Worker, sig: libc::c_int) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(w.pid() as libc::pid_t, sig) };
    }

    pub(super) fn open(lease_ms: u64) -> FairLock {
        let path = common::env("FL_LOCK");
        let mut o = FairLock::options();
        o.slots(2);
        if lease_ms > 0 {
            o.lease(Duration::from_millis(lease_ms));
        }
        o.open(path).expect("worker open")
    }

    /// Enters the witness: no one else may be inside.
    pub(super) fn enter(shm: &Shm) {
        let me = u64::from(std::process::id());
        let prev = shm.atomic(HOLDING).swap(me, SeqCst);
        assert_eq!(
            prev, 0,
            "two holders: {me} entered while {prev} held the lock"
        );
    }

    pub(super) fn leave(shm: &Shm) {
        let me = u64::from(std::process::id());
        let _ = shm.atomic(HOLDING).compare_exchange(me, 0, SeqCst, SeqCst);
    }

    /// The workers of the paused claimer's test.
    pub(super) fn run_worker(r: &str) {
        let shm = Shm::open(common::env("FL_SHM").as_ref());
        match r {
            // Leased (100 ms); stopped by its crash point right after its claim CAS. Reports its
            // grant, holds it briefly inside the witness, releases.
            "paused-claimer" => {
                let lock = open(100);
                let g = lock.lock().expect("lock");
                enter(&shm);
                shm.write(W_TOKEN, g.token());
                shm.atomic(W_GRANTED).store(1, SeqCst);
                std::thread::sleep(Duration::from_millis(50));
                leave(&shm);
                let _ = g.unlock();
            }
            // Leased (10 s): takes the lock over and over until it holds a ticket in the slot of
            // ticket FL_SLOT_OF (of a 2-slot array) at least two laps on; then holds it, inside
            // the witness, until told.
            "cycler" => {
                let lock = open(10_000);
                let paused: u64 = common::env_parse("FL_SLOT_OF");
                loop {
                    let g = lock.lock().expect("cycler lock");
                    enter(&shm);
                    shm.atomic(C_ROUNDS).fetch_add(1, SeqCst);
                    let t = g.token() - 1;
                    if t % 2 == paused % 2 && t >= paused + 4 {
                        shm.write(C_TOKEN, g.token());
                        shm.atomic(C_HOLDS).store(1, SeqCst);
                        while shm.atomic(C_CONT).load(SeqCst) == 0 {
                            std::thread::sleep(Duration::from_millis(1));
                        }
                        leave(&shm);
                        g.unlock().expect("the cycler's lease must be intact");
                        return;
                    }
                    leave(&shm);
                    g.unlock().expect("cycler unlock");
                }
            }
            other => panic!("unknown role {other}"),
        }
    }

    pub(super) fn base_env(dir: &TempDir) -> Vec<(&'static str, String)> {
        vec![
            ("FL_LOCK", dir.join("lock").display().to_string()),
            ("FL_SHM", dir.join("shm").display().to_string()),
        ]
    }
}

#[cfg(feature = "__test-crash-points")]
use paused_claimer::*;

/// A leased waiter (100 ms) stopped right after its claim CAS (`acquire.claimed:stop`) is
/// taken over, and a later ticket reuses its slot of a 2-slot array. Resumed while that reuser
/// holds, it finds its grant lost and queues again: it does not report holding until the
/// reuser releases (its lease write never lands in the reuser's lease: two holders, and the
/// reuser's lease no longer its own), and its token then exceeds the reuser's.
#[test]
#[cfg(feature = "__test-crash-points")]
fn a_paused_leased_claimer_never_holds_with_its_slots_next_user() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    let test = "a_paused_leased_claimer_never_holds_with_its_slots_next_user";
    let dir = TempDir::new("crash-reg-paused-claimer");
    let shm = Shm::create(&dir.join("shm"), 10);
    let path = dir.join("lock");
    let lock = FairLock::options().slots(2).open(&path).expect("open");
    let first = lock.lock().expect("lock");
    let mut envs = base_env(&dir);
    envs.push(("FAIRLOCK_CRASH", "acquire.claimed:stop".into()));
    let paused = Worker::spawn(dir.path(), test, "paused-claimer", "paused", &envs);
    let st = common::wait_for_waiters(&path, 1, Duration::from_secs(30));
    let t = st.waiters[0].ticket;
    drop(first); // grants it; it claims and stops right after its claim CAS
    wait_until(Duration::from_secs(10), "the claimer to stop", || {
        matches!(common::chaos::proc_state(paused.pid()), Some('T' | 't'))
    });
    let mut envs = base_env(&dir);
    envs.push(("FL_SLOT_OF", t.to_string()));
    let mut cycler = Worker::spawn(dir.path(), test, "cycler", "cycler", &envs);
    // The cycler takes the stopped claimer over after its 100 ms lease, then goes round.
    wait_until(
        Duration::from_secs(30),
        "the cycler to hold the slot",
        || shm.atomic(C_HOLDS).load(SeqCst) == 1 || cycler.poll(),
    );
    assert!(!cycler.poll(), "cycler failed:\n{}", cycler.stderr());
    let reuser = shm.read(C_TOKEN);
    signal(&paused, libc::SIGCONT);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        shm.atomic(W_GRANTED).load(SeqCst),
        0,
        "the resumed claimer reported holding while ticket {} (its slot's next user) holds",
        reuser - 1
    );
    shm.atomic(C_CONT).store(1, SeqCst);
    common::wait_all(&mut [cycler, paused], Duration::from_secs(30));
    let w = shm.read(W_TOKEN);
    assert!(
        w > reuser,
        "requeued behind the reuser: token {w} vs {reuser}"
    );
}
