//! Chaos with leases, pauses and a 2-slot waiting array: leased workers (60 ms) are killed
//! (SIGKILL at random moments and at crash points) and *paused* (SIGSTOP at random moments and
//! at crash points, SIGCONT after up to a few leases), so holders are taken over, grantees
//! frozen before they claim, takers stalled between ticket and claim, and slots reused every
//! other ticket while a paused process still has an old one. Two unleased survivors contend
//! throughout.
//!
//! The witness knows leases (one word: the newest token that entered, and the token inside): a
//! holder that enters while an older one is inside must have been told `owner_died()`; one
//! that arrives after a newer one entered must already get `LockLost` from `check()`; a holder
//! that finds, on leaving, that a newer one entered during its hold must get `LockLost` from
//! `unlock()`; and whenever a holder's `check()` says `Ok`, the witness must still show it
//! inside (read before the check). Among what this is built to catch: a paused claimer's lease
//! write landing in a reused slot (two holders), and a dead taker's pre-grant behind lapped
//! takers that nobody times (stalls of seconds).
//!
//! Reproduce a run with `FL_SEED=<seed printed by the test>`.

#![cfg(feature = "__test-crash-points")]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::sync::atomic::Ordering::SeqCst;
use std::time::{Duration, Instant};

use common::chaos::{Env, Rng, mono_ns, pid_stopped, signal};
use common::witness::{self, Entry, parts};
use common::{Shm, Worker, role};
use fairlock::{Error, FairLock, LockGuard};

const LEASE: Duration = Duration::from_millis(60);
/// No gap between grants while the survivors wait may exceed this: a few leases and graces
/// (a run of stopped holders, frozen grantees and stalled takers each costs about one).
const MAX_GAP: Duration = Duration::from_millis(1000);

/// Shared words: the witness, the stop flag, counters, then the grant log.
const WITNESS: usize = 0;
const STOP: usize = 1;
const LOG_N: usize = 2;
/// Grants made while an earlier holder was still inside (it died or was taken over).
const OVERLAPS: usize = 3;
const CHECKS: usize = 4;
/// `LockLost` seen by holders: leases taken over.
const LOST: usize = 5;
const EXTENDS: usize = 6;
const LOG_BASE: usize = 16;
const LOG_CAP: usize = 200_000;

/// Crash points at which a worker is killed or stopped.
const POINTS: &[&str] = &[
    "acquire.ticket_taken",
    "acquire.lease_announced",
    "acquire.published",
    "acquire.parking",
    "acquire.granted_seen",
    "acquire.claimed",
    "acquire.lease_pending",
    "extend.written",
    "timeout.abandoning",
    "timeout.abandoned",
    "acquire.lapped_gave_up",
    "release.start",
    "release.done",
    "advance.granted",
    "advance.ready",
    "recover.revoked",
    "recover.skipped",
    "takeover.lease_revoked",
    "takeover.revoked",
];

/// The waiting array's size: 2, or `FL_SLOTS` (to explore other geometries by hand).
fn slots() -> u32 {
    std::env::var("FL_SLOTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

/// Appends (token, grant time, pid) to the log; safe with overlapping holders.
fn log_grant(shm: &Shm, token: u64) {
    let n = shm.atomic(LOG_N).fetch_add(1, SeqCst) as usize;
    if n < LOG_CAP {
        let at = LOG_BASE + 3 * n;
        shm.atomic(at + 1).store(mono_ns(), SeqCst);
        shm.atomic(at + 2)
            .store(u64::from(std::process::id()), SeqCst);
        shm.atomic(at).store(token, SeqCst);
    }
}

/// A holder enters (see `common::witness`): false if it was taken over before it got here.
fn enter(shm: &Shm, g: &LockGuard<'_>) -> bool {
    let told = g.owner_died();
    match witness::enter(shm.atomic(WITNESS), g.token(), told, || {
        matches!(g.check(), Err(Error::LockLost { .. }))
    }) {
        Entry::Lost => {
            shm.atomic(LOST).fetch_add(1, SeqCst);
            false
        }
        Entry::Inside { displaced } => {
            if displaced != 0 {
                shm.atomic(OVERLAPS).fetch_add(1, SeqCst);
            }
            true
        }
    }
}

/// Works inside: each step reads the witness, then checks; `Ok` means we are still the one
/// inside.
fn work(shm: &Shm, g: &LockGuard<'_>, rng: &mut Rng, leased: bool) {
    for _ in 0..1 + rng.below(3) {
        let seen = parts(shm.atomic(WITNESS).load(SeqCst)).1;
        match g.check() {
            Ok(()) => {
                shm.atomic(CHECKS).fetch_add(1, SeqCst);
                assert_eq!(
                    seen,
                    g.token(),
                    "two holders: check() is Ok for token {} but token {seen} is inside",
                    g.token()
                );
            }
            Err(Error::LockLost { .. }) => {
                shm.atomic(LOST).fetch_add(1, SeqCst);
                return;
            }
            Err(e) => panic!("check: {e}"),
        }
        if leased && rng.below(4) == 0 {
            match g.extend(LEASE) {
                Ok(()) => {
                    shm.atomic(EXTENDS).fetch_add(1, SeqCst);
                }
                Err(Error::LockLost { .. }) => {
                    shm.atomic(LOST).fetch_add(1, SeqCst);
                    return;
                }
                Err(e) => panic!("extend: {e}"),
            }
        }
        for _ in 0..rng.below(2000) {
            std::hint::spin_loop();
        }
        if rng.below(20) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Leaves: if we are not the one inside any more, `unlock` must say we lost the lock.
fn leave(shm: &Shm, g: LockGuard<'_>, entered: bool) {
    let mine = g.token();
    let alone = witness::leave(shm.atomic(WITNESS), mine, entered);
    let r = g.unlock();
    if !alone {
        assert!(
            matches!(r, Err(Error::LockLost { .. })),
            "two holders: unlock of token {mine} said {r:?} although a newer holder entered during its hold"
        );
    }
}

fn run_worker(r: &str) {
    let shm = Shm::open(common::env("FL_SHM").as_ref());
    let path = common::env("FL_LOCK");
    let leased = r == "leased";
    let mut o = FairLock::options();
    o.slots(slots());
    if leased {
        o.lease(LEASE);
    }
    let lock = o.open(path).expect("worker open");
    let mut rng = Rng::from_seed(common::env_parse("FL_WSEED"));
    let iters: u64 = common::env_parse("FL_ITERS");
    let mut done = 0;
    while done < iters && shm.atomic(STOP).load(SeqCst) == 0 {
        let g = if leased && rng.below(4) == 0 {
            match lock.lock_timeout(Duration::from_micros(100 + rng.below(30_000))) {
                Ok(g) => g,
                Err(Error::Timeout { .. }) => continue,
                Err(e) => panic!("lock_timeout: {e}"),
            }
        } else {
            lock.lock().expect("lock")
        };
        let entered = enter(&shm, &g);
        log_grant(&shm, g.token());
        if entered {
            work(&shm, &g, &mut rng, leased);
        }
        leave(&shm, g, entered);
        if leased {
            done += 1;
        }
    }
}

/// The two slots' words, given-up words, lease deadlines and lapped-taker records, read from
/// the file (for a stall report).
fn raw_slots(path: &std::path::Path) -> String {
    let Ok(b) = std::fs::read(path) else {
        return String::new();
    };
    let u = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let w = |v: u64| {
        format!(
            "(lap {} participant {} state {})",
            v >> 20,
            (v >> 8) & 0xfff,
            v & 0xf
        )
    };
    let so = u32::from_le_bytes(b[36..40].try_into().unwrap()) as usize;
    let slot = |i: usize| {
        let at = so + 64 * i;
        format!(
            "slot {i}: {} given-up {:#x} deadline {:#x} lapped {:#x}",
            w(u(at)),
            u(at + 40),
            u(at + 48),
            u(at + 56)
        )
    };
    format!("next {} head {}; {}; {}", u(64), u(128), slot(0), slot(1))
}

/// The test every worker runs as.
const WORKER_ENTRY: &str = "worker_entry";

#[test]
fn worker_entry() {
    if let Some(r) = role() {
        run_worker(&r);
    }
}

/// A worker and what the parent knows of it.
struct Running {
    w: Worker,
    point: Option<(&'static str, bool)>,
    /// Stopped by the parent (or found stopped at its crash point): when to continue it.
    resume_at: Option<Instant>,
    born: Instant,
}

#[test]
fn chaos_with_leases_pauses_and_two_slots() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    const EVENTS: usize = 400;
    const CONCURRENT: usize = 6;
    const LIMIT: Duration = Duration::from_secs(120);
    let mut rng = Rng::new("chaos-leases");
    let (mut chaos, shm) = Env::new("chaos-leases", WORKER_ENTRY, LOG_BASE + 3 * LOG_CAP);
    // The file is created with 2 slots before anyone else opens it.
    drop(
        FairLock::options()
            .slots(slots())
            .open(chaos.path())
            .expect("create"),
    );
    let started = Instant::now();
    let seed = |rng: &mut Rng| rng.next().to_string();
    let mut survivors: Vec<Worker> = (0..2)
        .map(|_| {
            let s = seed(&mut rng);
            chaos.spawn(
                "survivor",
                &[("FL_WSEED", s), ("FL_ITERS", u64::MAX.to_string())],
            )
        })
        .collect();
    let mut running: Vec<Running> = Vec::new();
    let mut events: BTreeMap<&str, usize> = BTreeMap::new();
    let mut point_hits: BTreeMap<String, usize> = BTreeMap::new();
    let mut total = 0usize;
    let mut progress = (0u64, Instant::now(), false);
    while total < EVENTS {
        assert!(
            started.elapsed() < LIMIT,
            "only {total} events in {LIMIT:?}"
        );
        // A stall in the making: say what the queue looks like (once per stall).
        let granted = shm.read(LOG_N);
        if granted != progress.0 {
            progress = (granted, Instant::now(), false);
        } else if !progress.2 && progress.1.elapsed() > MAX_GAP / 2 {
            progress.2 = true;
            let stopped: Vec<u32> = running
                .iter()
                .filter(|r| pid_stopped(r.w.pid()))
                .map(|r| r.w.pid())
                .collect();
            eprintln!(
                "[chaos-leases] no grant for {:?}; stopped {stopped:?}; {:?}; {}",
                progress.1.elapsed(),
                fairlock::inspect(chaos.path()),
                raw_slots(&chaos.path()),
            );
        }
        for s in survivors.iter_mut() {
            assert!(
                !s.poll(),
                "survivor exited ({:?}):\n{}",
                s.status,
                s.stderr()
            );
        }
        // Reap, count, continue the stopped ones when due.
        let mut i = 0;
        while i < running.len() {
            let r = &mut running[i];
            if r.w.poll() {
                let st = r.w.status.unwrap();
                if !st.success() && st.signal() != Some(libc::SIGKILL) {
                    panic!("worker {} failed ({st}):\n{}", r.w.name, r.w.stderr());
                }
                if st.signal() == Some(libc::SIGKILL)
                    && let Some((p, false)) = r.point
                {
                    *point_hits.entry(format!("{p}:kill")).or_default() += 1;
                    total += 1;
                }
                running.swap_remove(i);
                continue;
            }
            if r.resume_at.is_none() && pid_stopped(r.w.pid()) {
                // Stopped at its crash point: leave it for up to three leases.
                if let Some((p, true)) = r.point {
                    *point_hits.entry(format!("{p}:stop")).or_default() += 1;
                    total += 1;
                }
                r.resume_at = Some(Instant::now() + LEASE * rng.below(4) as u32);
            }
            if r.resume_at.is_some_and(|t| Instant::now() >= t) {
                signal(r.w.pid(), libc::SIGCONT);
                r.resume_at = None;
                if let Some((_, true)) = r.point {
                    r.point = None; // the crash point fires once
                }
            }
            i += 1;
        }
        while running.len() < CONCURRENT {
            let point = (rng.below(10) < 6).then(|| {
                (
                    POINTS[rng.below(POINTS.len() as u64) as usize],
                    rng.below(2) == 0,
                )
            });
            let mut envs = vec![
                ("FL_WSEED", seed(&mut rng)),
                ("FL_ITERS", (1 + rng.below(20)).to_string()),
            ];
            if let Some((p, stop)) = point {
                let how = if stop { "stop" } else { "kill" };
                envs.push(("FAIRLOCK_CRASH", format!("{p}@{}:{how}", 1 + rng.below(3))));
            }
            running.push(Running {
                w: chaos.spawn("leased", &envs),
                point,
                resume_at: None,
                born: Instant::now(),
            });
        }
        // Something at a random moment: a kill, or a pause of up to three leases.
        if rng.below(2) == 0 {
            let k = rng.below(running.len() as u64) as usize;
            let r = &mut running[k];
            if r.resume_at.is_none()
                && r.born.elapsed() > Duration::from_micros(rng.below(20_000))
                && !r.w.poll()
            {
                if rng.below(2) == 0 {
                    signal(r.w.pid(), libc::SIGKILL);
                    r.point = None;
                    *events.entry("kill").or_default() += 1;
                } else {
                    signal(r.w.pid(), libc::SIGSTOP);
                    r.resume_at = Some(Instant::now() + LEASE * (1 + rng.below(3)) as u32);
                    *events.entry("pause").or_default() += 1;
                }
                total += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(10 + rng.below(20)));
    }
    shm.atomic(STOP).store(1, SeqCst);
    for r in running.iter_mut() {
        signal(r.w.pid(), libc::SIGKILL);
        signal(r.w.pid(), libc::SIGCONT);
    }
    for r in running.iter_mut() {
        let _ = r.w.child.wait();
        r.w.status = Some(ExitStatusExt::from_raw(9));
    }
    common::wait_all(&mut survivors, Duration::from_secs(30));
    let elapsed = started.elapsed();

    // The grant log: no token twice, and no gap above MAX_GAP while the survivors waited.
    let n = (shm.read(LOG_N) as usize).min(LOG_CAP);
    let mut log: Vec<(u64, u64, u64)> = (0..n)
        .map(|k| LOG_BASE + 3 * k)
        .map(|at| (shm.read(at + 1), shm.read(at), shm.read(at + 2)))
        .filter(|e| e.1 != 0)
        .collect();
    log.sort();
    let mut tokens = BTreeSet::new();
    for e in &log {
        assert!(tokens.insert(e.1), "token {} granted twice", e.1);
    }
    let gaps: Vec<(Duration, u64, u64)> = log
        .windows(2)
        .map(|w| (Duration::from_nanos(w[1].0 - w[0].0), w[0].1, w[1].1))
        .collect();
    let mut worst = gaps.clone();
    worst.sort();
    let worst = &worst[worst.len().saturating_sub(3)..];
    eprintln!(
        "[chaos-leases] {total} events in {elapsed:.1?}: {events:?}; crash points {point_hits:?}; \
         {} workers, {} grants, {} grants while an earlier holder was still inside, {} checks \
         ok, {} LockLost seen by taken-over holders, {} extends; largest gaps (gap, token \
         before, token after) {worst:?}",
        chaos.spawned,
        log.len(),
        shm.read(OVERLAPS),
        shm.read(CHECKS),
        shm.read(LOST),
        shm.read(EXTENDS),
    );
    let mut by_between: Vec<(u64, Duration)> = gaps
        .iter()
        .map(|(gap, before, after)| (after - before - 1, *gap))
        .collect();
    by_between.sort_by_key(|e| std::cmp::Reverse(e.1));
    eprintln!(
        "[chaos-leases] worst gaps (tickets between, gap): {:?}",
        &by_between[..by_between.len().min(8)]
    );
    for (gap, before, after) in &gaps {
        assert!(
            *gap <= MAX_GAP,
            "stall: {gap:?} between grants {before} and {after} while the survivors waited"
        );
    }
    assert!(log.len() > 1000, "too few grants: {}", log.len());
    assert!(shm.read(LOST) > 0, "no lease was ever taken over");
    let lock = FairLock::open(chaos.path()).expect("open");
    let g = lock.lock_timeout(Duration::from_secs(10)).expect("lock");
    assert!(g.token() > log.iter().map(|e| e.1).max().unwrap_or(0));
}
