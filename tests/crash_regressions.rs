//! Two bugs of issue 11 that need a process stopped at one exact instruction (crash points of
//! the private feature `__test-crash-points`):
//!
//! * bug 3 — a leased waiter paused right after its claim CAS is taken over, its slot reused
//!   by a later ticket; when it resumed, its lease write landed in that later ticket's lease
//!   and `lock()` returned `Ok`: two holders;
//! * bug 4 — a releaser paused between its grant and its store of the `head` hint wrote an old
//!   `head` millions of tickets later; the next dead holder was then never recovered.

#![cfg(feature = "__test-crash-points")]

mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use common::chaos::proc_state;
use common::{Shm, TempDir, Worker, role, wait_until};
use fairlock::FairLock;

/// Shared words of one test.
const W_GRANTED: usize = 0; // the paused waiter reported a grant
const W_TOKEN: usize = 1;
const C_HOLDS: usize = 2; // the cycler holds a ticket in the paused waiter's slot
const C_TOKEN: usize = 3;
const C_CONT: usize = 4; // the cycler may release
const C_ROUNDS: usize = 5;
const HOLDING: usize = 6; // witness: pid of the current holder
const B_DONE: usize = 7;
const T_DIED: usize = 8; // the "told" worker's grant said owner_died (1) or not (2)

fn signal(w: &Worker, sig: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(w.pid() as libc::pid_t, sig) };
}

fn open(lease_ms: u64) -> FairLock {
    let path = common::env("FL_LOCK");
    let mut o = FairLock::options();
    o.slots(2);
    if lease_ms > 0 {
        o.lease(Duration::from_millis(lease_ms));
    }
    o.open(path).expect("worker open")
}

/// Enters the witness: no one else may be inside.
fn enter(shm: &Shm) {
    let me = u64::from(std::process::id());
    let prev = shm.atomic(HOLDING).swap(me, SeqCst);
    assert_eq!(
        prev, 0,
        "two holders: {me} entered while {prev} held the lock"
    );
}

fn leave(shm: &Shm) {
    let me = u64::from(std::process::id());
    let _ = shm.atomic(HOLDING).compare_exchange(me, 0, SeqCst, SeqCst);
}

fn run_worker(r: &str) {
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

fn base_env(dir: &TempDir) -> Vec<(&'static str, String)> {
    vec![
        ("FL_LOCK", dir.join("lock").display().to_string()),
        ("FL_SHM", dir.join("shm").display().to_string()),
    ]
}

/// Bug 3. The paused claimer, resumed after its slot was reused and while the reuser holds,
/// must find its grant lost and queue again: it may not report holding until the reuser
/// releases, and its token then exceeds the reuser's. (It used to overwrite the reuser's lease
/// and return `Ok` at once: two holders, and the reuser's lease no longer its own.)
#[test]
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
        matches!(proc_state(paused.pid()), Some('T' | 't'))
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

/// Bug 4. A releaser stopped between its pre-grant and (in the old code) its `head` store,
/// resumed after more than 2^22 uncontended grants; then a holder dies. The next waiter must
/// recover it however far behind `head` is. (With the lock word the releaser stops inside a
/// fast release that found a waiter — `H` cleared, the walk not made — and the waiter takes
/// the lock itself; the uncontended grants that follow leave `head` where it was.)
#[test]
fn a_dead_holder_is_recovered_however_far_behind_head_is() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    let test = "a_dead_holder_is_recovered_however_far_behind_head_is";
    let dir = TempDir::new("crash-reg-head");
    let shm = Shm::create(&dir.join("shm"), 10);
    let path = dir.join("lock");
    let lock = FairLock::open(&path).expect("open");
    let mut envs = base_env(&dir);
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
        matches!(proc_state(stalled.pid()), Some('T' | 't'))
    });
    drop(waited);
    let mut envs = base_env(&dir);
    envs.push(("FL_N", (4_500_000u64).to_string()));
    let mut burst = Worker::spawn(dir.path(), test, "burst", "burst", &envs);
    common::wait_all(std::slice::from_mut(&mut burst), Duration::from_secs(120));
    signal(&stalled, libc::SIGCONT);
    common::wait_all(std::slice::from_mut(&mut stalled), Duration::from_secs(30));
    let mut holder = Worker::spawn(dir.path(), test, "hold", "holder", &base_env(&dir));
    wait_until(Duration::from_secs(30), "the holder's grant", || {
        shm.atomic(W_GRANTED).load(SeqCst) == 1
    });
    signal(&holder, libc::SIGKILL);
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

/// Issue 15. A fast holder (granted by the lock word) is killed with two waiters queued behind
/// it; the first waiter revokes it — grants the first queued ticket (its own) with the death's
/// news — and is killed right there (`fast.revoke_granted`), before clearing the word's `H`.
/// The second waiter must finish the revocation and be granted, told `owner_died` (the news
/// is neither lost with the revoker nor dropped by the walk that passes its dead grant).
#[test]
fn a_revoker_killed_after_granting_the_news_loses_nothing() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    let test = "a_revoker_killed_after_granting_the_news_loses_nothing";
    let dir = TempDir::new("crash-reg-revoker");
    let shm = Shm::create(&dir.join("shm"), 10);
    let path = dir.join("lock");
    let mut holder = Worker::spawn(dir.path(), test, "hold", "holder", &base_env(&dir));
    wait_until(Duration::from_secs(30), "the holder's grant", || {
        shm.atomic(W_GRANTED).load(SeqCst) == 1
    });
    let st = fairlock::inspect(&path).expect("inspect");
    assert_eq!(
        st.holder.as_ref().and_then(|h| h.pid),
        Some(holder.pid()),
        "a fast holder is shown: {st:?}"
    );
    let mut envs = base_env(&dir);
    envs.push(("FAIRLOCK_CRASH", "fast.revoke_granted".into()));
    let mut revoker = Worker::spawn(dir.path(), test, "told", "revoker", &envs);
    common::wait_for_waiters(&path, 1, Duration::from_secs(30));
    let mut next = Worker::spawn(dir.path(), test, "told", "next", &base_env(&dir));
    common::wait_for_waiters(&path, 2, Duration::from_secs(30));
    signal(&holder, libc::SIGKILL);
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
