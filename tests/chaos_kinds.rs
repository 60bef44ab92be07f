//! Chaos for the shared kinds: worker processes read and write a `FairRwLock` (and take
//! permits of a `FairSemaphore`) in a loop while the parent SIGKILLs a random one every few
//! milliseconds and starts a replacement. A witness in shared memory checks, inside every
//! grant, that no *live* process holds what it must not (a writer alone; no more holders than
//! permits), and the parent checks that the lock keeps being granted (no stall beyond the
//! recovery bound) and ends free.
//!
//! Witness: slot `w` of each worker id holds its pid and what it holds (0 nothing, 1 read or
//! permit, 2 write), set right after the grant and cleared right before the release. A killed
//! worker's slot stays set, but its process is dead (a zombie until reaped), which the check
//! sees in /proc: a correct lock only lets a conflicting holder in after that death.

mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use common::chaos::{Env, Rng, pid_dead};
use common::{Shm, role};
use fairlock::{FairLock, FairRwLock, FairSemaphore};

const WORKERS: usize = 5;
/// Shm words: 0 grants, 1 violations, 2 owner_died seen, then per worker id: pid, holding.
const SLOTS: usize = 3;

fn slot(w: usize) -> (usize, usize) {
    (SLOTS + 2 * w, SLOTS + 2 * w + 1)
}

/// Whether worker id `other` (not us) is inside with `what` and alive.
fn live_inside(shm: &Shm, other: usize) -> Option<u64> {
    let (pid_at, what_at) = slot(other);
    let what = shm.atomic(what_at).load(SeqCst);
    let pid = shm.atomic(pid_at).load(SeqCst) as u32;
    (what != 0 && pid != 0 && !pid_dead(pid)).then_some(what)
}

/// What the live others hold: (writers, readers or permit holders). A process killed by
/// SIGKILL drops its beacon (its files close) while still in the kernel's exit path, where
/// /proc shows it running for a moment before it becomes a zombie; so a count that breaks the
/// rules is taken again for up to 2 s, as `tests/crash.rs`'s witness does, and only a holder
/// that stays alive that long is a violation.
fn others_inside(shm: &Shm, me: usize, breaks: impl Fn(u64, u64) -> bool) -> bool {
    let limit = Instant::now() + Duration::from_secs(2);
    loop {
        let (mut writers, mut shared) = (0, 0);
        for o in (0..WORKERS).filter(|&o| o != me) {
            match live_inside(shm, o) {
                Some(2) => writers += 1,
                Some(_) => shared += 1,
                None => {}
            }
        }
        if !breaks(writers, shared) {
            return false;
        }
        if Instant::now() >= limit {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn worker(kind: &str) {
    let shm = Shm::open(common::env("FL_SHM").as_ref());
    let id: usize = common::env_parse("FL_ID");
    let permits: u64 = common::env_parse("FL_PERMITS");
    let (pid_at, what_at) = slot(id);
    shm.atomic(what_at).store(0, SeqCst);
    shm.atomic(pid_at)
        .store(u64::from(std::process::id()), SeqCst);
    let mut rng = Rng::from_seed(u64::from(std::process::id()));
    let path = common::env("FL_LOCK");
    let check = |mine: u64| {
        let broken = others_inside(&shm, id, |writers, shared| {
            if mine == 2 {
                writers + shared > 0 // a writer holds alone
            } else if kind == "semaphore" {
                shared + 1 > permits // at most `permits` holders
            } else {
                writers > 0 // readers hold with readers only
            }
        });
        if broken {
            shm.atomic(1).fetch_add(1, SeqCst);
        }
    };
    let hold = |mine: u64, died: bool, rng: &mut Rng| {
        shm.atomic(what_at).store(mine, SeqCst);
        shm.atomic(0).fetch_add(1, SeqCst);
        if died {
            shm.atomic(2).fetch_add(1, SeqCst);
        }
        check(mine);
        let until = Instant::now() + Duration::from_micros(rng.below(300));
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        check(mine);
        shm.atomic(what_at).store(0, SeqCst);
    };
    if kind == "rwlock" || kind == "named" {
        let l = open_rwlock(kind, &path);
        loop {
            if kind == "named" && rng.below(4) == 0 {
                // Names come and go around the one under test: creations and sweeps (16
                // records) are killed half-way too.
                let other = FairLock::options()
                    .name(format!("churn-{}", rng.below(40)))
                    .name_capacity(16)
                    .open(&path);
                if let Ok(o) = other {
                    drop(o.try_lock());
                }
            }
            if rng.below(4) == 0 {
                let g = l.write().expect("write");
                hold(2, g.owner_died(), &mut rng);
                drop(g);
            } else {
                let g = l.read().expect("read");
                hold(1, g.owner_died(), &mut rng);
                drop(g);
            }
        }
    } else {
        let s = FairSemaphore::open(&path, permits as u32).expect("open");
        loop {
            let p = s.acquire().expect("acquire");
            hold(1, p.owner_died(), &mut rng);
            drop(p);
        }
    }
}

/// The reader/writer lock under test: the file's own, or the name "chaos" in a file of named
/// locks.
fn open_rwlock(kind: &str, path: impl AsRef<std::path::Path>) -> FairRwLock {
    if kind == "named" {
        FairLock::options()
            .name("chaos")
            .name_capacity(16)
            .open_rwlock(path)
            .expect("open")
    } else {
        FairRwLock::open(path).expect("open")
    }
}

fn chaos(test: &'static str, kind: &str, permits: u64) {
    let (mut env, shm) = Env::new(test, test, SLOTS + 2 * WORKERS);
    match kind {
        "rwlock" | "named" => drop(open_rwlock(kind, env.path())),
        _ => drop(FairSemaphore::open(env.path(), permits as u32).expect("create")),
    }
    let spawn = |env: &mut Env, id: usize| {
        env.spawn(
            kind,
            &[
                ("FL_ID", id.to_string()),
                ("FL_PERMITS", permits.to_string()),
            ],
        )
    };
    let mut workers: Vec<_> = (0..WORKERS).map(|id| spawn(&mut env, id)).collect();
    let mut rng = Rng::new(test);
    let started = Instant::now();
    let mut kills = 0;
    let mut last = (0u64, Instant::now());
    let mut longest = Duration::ZERO;
    while started.elapsed() < Duration::from_secs(4) {
        std::thread::sleep(Duration::from_millis(5 + rng.below(30)));
        let id = rng.below(WORKERS as u64) as usize;
        assert!(
            !workers[id].poll(),
            "worker exited: {}",
            workers[id].stderr()
        );
        workers[id].child.kill().expect("kill");
        workers[id].child.wait().expect("reap");
        kills += 1;
        workers[id] = spawn(&mut env, id);
        let grants = shm.read(0);
        if grants != last.0 {
            longest = longest.max(last.1.elapsed());
            last = (grants, Instant::now());
        }
        assert!(
            last.1.elapsed() < Duration::from_secs(2),
            "no grant for {:?} (after {grants} grants, {kills} kills)",
            last.1.elapsed()
        );
    }
    let grants = shm.read(0);
    eprintln!(
        "[{test}] {kills} kills, {grants} grants, {} told owner_died, longest gap between kills' grant counts {longest:?}",
        shm.read(2)
    );
    assert_eq!(shm.read(1), 0, "a witness saw a holder it must not");
    assert!(grants > 100 && shm.read(2) > 0, "too little happened");
    drop(workers); // killed
    // Everyone is dead: the next acquisitions recover and the lock ends free.
    match kind {
        "rwlock" | "named" => {
            let l = open_rwlock(kind, env.path());
            drop(
                l.write_timeout(Duration::from_secs(10))
                    .expect("write after the chaos"),
            );
        }
        _ => {
            let s = FairSemaphore::open(env.path(), permits as u32).expect("open");
            let all: Vec<_> = (0..permits)
                .map(|_| {
                    s.acquire_timeout(Duration::from_secs(10))
                        .expect("every permit back")
                })
                .collect();
            drop(all);
        }
    }
    let mut st = fairlock::inspect(env.path()).expect("inspect");
    if kind == "named" {
        st = st
            .names
            .into_iter()
            .find(|n| n.name.as_deref() == Some("chaos"))
            .expect("the name under test is listed");
    }
    assert!(st.holders.is_empty() && st.waiters.is_empty(), "{st:?}");
}

#[test]
fn chaos_rwlock_random_kills() {
    if let Some(r) = role() {
        worker(&r);
        return;
    }
    chaos("chaos_rwlock_random_kills", "rwlock", 0);
}

#[test]
fn chaos_semaphore_random_kills() {
    if let Some(r) = role() {
        worker(&r);
        return;
    }
    chaos("chaos_semaphore_random_kills", "semaphore", 2);
}

#[test]
fn chaos_named_rwlock_random_kills() {
    if let Some(r) = role() {
        worker(&r);
        return;
    }
    chaos("chaos_named_rwlock_random_kills", "named", 0);
}

#[test]
fn the_witness_sees_a_live_conflicting_holder() {
    // The witness itself: a slot naming a live process (ours) that writes is seen.
    let (env, shm) = Env::new("chaos-kinds-witness", "x", SLOTS + 2 * WORKERS);
    let (pid_at, what_at) = slot(1);
    shm.atomic(pid_at)
        .store(u64::from(std::process::id()), SeqCst);
    shm.atomic(what_at).store(2, SeqCst);
    assert_eq!(live_inside(&shm, 1), Some(2));
    shm.atomic(pid_at).store(u64::from(u32::MAX - 1), SeqCst); // no such process
    assert_eq!(live_inside(&shm, 1), None);
    drop(env);
}
