//! `Fairness::Bounded(k)` from the outside: threads and processes oversubscribing two CPUs on a
//! lock with a bypass bound must keep mutual exclusion, tokens that rise in grant order, and
//! never see a waiter overtaken more than `k` times — while barges do happen. The fairness is
//! the file's, checked and shown by `inspect`.
//!
//! Waiting behind a barge: a grantee that claimed its grant while a barge holds the lock still
//! honours its deadline and its interrupt hook (it hands the ticket back), also behind a
//! leaked barge guard. With the crash points of the private feature `__test-crash-points`: a
//! barger killed right after its barge or as it ends is passed (its death told when it still
//! held), and a leased `try_lock` stopped between its pre-grant and its claim is not barged.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Gate, TempDir, Worker, role, wait_all, wait_for_waiters};
use fairlock::{Error, FairLock, FairMutex, Fairness};

const K: u32 = 4;

/// A few hundred nanoseconds of work inside the lock.
fn dawdle() {
    for _ in 0..64 {
        std::hint::spin_loop();
    }
}

#[test]
fn eight_threads_on_a_bounded_lock_keep_exclusion_token_order_and_the_bound() {
    let dir = TempDir::new("bounded-threads");
    let lock = FairLock::options()
        .fairness(Fairness::Bounded(K))
        .open(dir.join("lock"))
        .unwrap();
    eight_threads_keep_exclusion_token_order_and_the_bound(lock);
}

/// A named lock with a bound (each name's record carries its own kind) behaves as a file's,
/// next to a strict name in the same file; `inspect` reports each name's fairness.
#[test]
fn a_named_lock_with_a_bound_keeps_it_next_to_a_strict_name() {
    let dir = TempDir::new("bounded-named");
    let path = dir.join("names");
    let bounded = FairLock::options()
        .name("bounded")
        .fairness(Fairness::Bounded(K))
        .open(&path)
        .unwrap();
    let _strict = FairLock::options().name("strict").open(&path).unwrap();
    assert!(matches!(
        FairLock::options().name("bounded").open(&path),
        Err(Error::KindMismatch { .. })
    ));
    let st = fairlock::inspect(&path).unwrap();
    let fairness = |n: &str| {
        st.names
            .iter()
            .find(|s| s.name.as_deref() == Some(n))
            .map(|s| s.fairness)
    };
    assert_eq!(fairness("bounded"), Some(Fairness::Bounded(K)));
    assert_eq!(fairness("strict"), Some(Fairness::Strict));
    eight_threads_keep_exclusion_token_order_and_the_bound(bounded);
}

/// 8 threads × 4000 short sections on `lock` (bounded to `K`): never two holders, tokens rising
/// in grant order, nobody overtaken more than `K` times, and some barges.
fn eight_threads_keep_exclusion_token_order_and_the_bound(lock: FairLock) {
    let lock = Arc::new(lock);
    let inside = Arc::new(AtomicBool::new(false));
    let log = Arc::new(Mutex::new(Vec::new()));
    let worst = Arc::new(AtomicU32::new(0));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (lock, inside, log, worst) =
                (lock.clone(), inside.clone(), log.clone(), worst.clone());
            std::thread::spawn(move || {
                for _ in 0..4_000 {
                    let g = lock.lock().unwrap();
                    assert!(!inside.swap(true, SeqCst), "two holders");
                    log.lock().unwrap().push(g.token());
                    worst.fetch_max(g.overtaken(), SeqCst);
                    dawdle();
                    inside.store(false, SeqCst);
                    drop(g);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 32_000);
    let out_of_order = log.windows(2).filter(|w| w[0] >= w[1]).count();
    assert_eq!(out_of_order, 0, "tokens must rise in grant order");
    let barges = log.iter().filter(|&&t| t % 512 != 0).count();
    let worst = worst.load(SeqCst);
    eprintln!("{barges} barges of {}, worst overtaken {worst}", log.len());
    assert!(
        worst <= K,
        "a waiter was overtaken {worst} times, bound {K}"
    );
    // Every barge's number is within the bound too.
    assert!(log.iter().all(|&t| t % 512 <= u64::from(K)));
    assert!(
        barges > 0,
        "8 threads on 2 CPUs: running threads should barge"
    );
}

const PROCS: usize = 3;
const THREADS: usize = 2;
const ITERS: u64 = 3_000;

/// The value a `FairMutex` keeps in the lock file: the last token seen, grants counted, the
/// most overtaken waiter.
type Books = [u64; 3];

#[test]
fn processes_on_a_bounded_mutex_keep_token_order_and_the_bound() {
    let open = |path: &str| {
        FairMutex::<Books>::options()
            .fairness(Fairness::Bounded(K))
            .open(path)
    };
    if role().is_some() {
        let path = common::env("FL_LOCK");
        let m = Arc::new(open(&path).expect("worker open"));
        let gate = Arc::new(Gate::open(common::env("FL_GATE").as_ref()));
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let (m, gate) = (m.clone(), gate.clone());
                std::thread::spawn(move || {
                    gate.arrive_and_wait();
                    for _ in 0..ITERS {
                        let mut g = m.lock().expect("lock");
                        let token = g.token();
                        assert!(token > g[0], "token {token} after {}", g[0]);
                        g[0] = token;
                        g[1] += 1;
                        g[2] = g[2].max(u64::from(g.overtaken()));
                        dawdle();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("worker thread panicked");
        }
        return;
    }
    let dir = TempDir::new("bounded-procs");
    let path = dir.join("lock").display().to_string();
    let parent = open(&path).expect("open");
    let gate_path = dir.join("gate");
    let gate = Gate::create(&gate_path);
    let env = [
        ("FL_LOCK", path.clone()),
        ("FL_GATE", gate_path.display().to_string()),
    ];
    let mut workers: Vec<Worker> = (0..PROCS)
        .map(|i| {
            Worker::spawn(
                dir.path(),
                "processes_on_a_bounded_mutex_keep_token_order_and_the_bound",
                "worker",
                &format!("w{i}"),
                &env,
            )
        })
        .collect();
    gate.open_when_arrived((PROCS * THREADS) as u64, &mut workers);
    wait_all(&mut workers, Duration::from_secs(120));
    let g = parent.lock().unwrap();
    assert_eq!(g[1], PROCS as u64 * THREADS as u64 * ITERS, "lost updates");
    assert!(g[2] <= u64::from(K), "overtaken {} times, bound {K}", g[2]);
    assert!(g.token() > g[0]);
}

#[test]
fn fairness_is_the_files_and_checked() {
    let dir = TempDir::new("bounded-options");
    let path = dir.join("lock");
    let lock = FairLock::options()
        .fairness(Fairness::Bounded(7))
        .open(&path)
        .unwrap();
    // Another fairness is another lock: refused, naming both.
    match FairLock::open(&path) {
        Err(Error::KindMismatch { found, wanted, .. }) => {
            assert!(found.contains("bounded to 7"), "{found}");
            assert_eq!(wanted, "exclusive lock");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        FairLock::options()
            .fairness(Fairness::Bounded(8))
            .open(&path),
        Err(Error::KindMismatch { .. })
    ));
    let again = FairLock::options()
        .fairness(Fairness::Bounded(7))
        .open(&path)
        .unwrap();
    // Uncontended: the fast path, token (ticket + 1) · 512.
    let a = lock.lock().unwrap();
    assert_eq!((a.token() % 512, a.overtaken()), (0, 0));
    drop(a);
    let b = again.lock().unwrap();
    assert_eq!(b.token(), 2 * 512);
    drop(b);
    for bad in [0u32, 512, 1000] {
        match FairLock::options()
            .fairness(Fairness::Bounded(bad))
            .open(dir.join("other"))
        {
            Err(Error::InvalidOption { what }) => assert!(what.contains("1..=511"), "{what}"),
            other => panic!("{other:?}"),
        }
    }
    match FairLock::options()
        .fairness(Fairness::Bounded(3))
        .open_rwlock(dir.join("rw"))
    {
        Err(Error::InvalidOption { what }) => assert!(what.contains("exclusive"), "{what}"),
        other => panic!("{other:?}"),
    }
}

/// `inspect` (and `fairlock status`) shows a barge's own token, not the grant's before it.
#[test]
fn inspect_shows_a_barge_s_token() {
    let dir = TempDir::new("bounded-inspect");
    let path = dir.join("lock");
    let lock = Arc::new(
        FairLock::options()
            .fairness(Fairness::Bounded(K))
            .open(&path)
            .unwrap(),
    );
    for _attempt in 0..50 {
        let g = lock.lock().unwrap();
        let l2 = lock.clone();
        let waiter = std::thread::spawn(move || drop(l2.lock().unwrap()));
        common::wait_for_waiters(&path, 1, Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(20)); // it parks
        drop(g); // grants the sleeping waiter...
        let g = lock.lock().unwrap(); // ...and barges ahead of it, unless it claimed first
        let token = g.token();
        let shown = fairlock::inspect(&path).unwrap().holder.map(|h| h.token);
        drop(g);
        waiter.join().unwrap();
        if !token.is_multiple_of(512) {
            assert_eq!(shown, Some(token), "the barge's token as status shows it");
            return;
        }
    }
    panic!("no barge in 50 attempts");
}

#[test]
fn inspect_reports_the_file_s_fairness() {
    let dir = TempDir::new("bounded-fairness");
    let bounded = dir.join("bounded");
    let strict = dir.join("strict");
    let _b = FairLock::options()
        .fairness(Fairness::Bounded(K))
        .open(&bounded)
        .unwrap();
    let _s = FairLock::open(&strict).unwrap();
    assert_eq!(
        fairlock::inspect(&bounded).unwrap().fairness,
        Fairness::Bounded(K)
    );
    assert_eq!(
        fairlock::inspect(&strict).unwrap().fairness,
        Fairness::Strict
    );
    // The other kinds, and the top level of a file of names, are strict.
    let (rw, sem, names) = (dir.join("rw"), dir.join("sem"), dir.join("names"));
    let _rw = fairlock::FairRwLock::open(&rw).unwrap();
    let _sem = fairlock::FairSemaphore::open(&sem, 3).unwrap();
    let _n = FairLock::options().name("a").open(&names).unwrap();
    for p in [&rw, &sem, &names] {
        assert_eq!(
            fairlock::inspect(p).unwrap().fairness,
            Fairness::Strict,
            "{p:?}"
        );
    }
}

/// `Status::token` of a free lock is the smallest token the next grant can carry: in a bounded
/// file `(next ticket + 1) · 512`, not `next ticket + 1` (which every later token exceeds, but
/// by far).
#[test]
fn a_free_bounded_lock_s_status_token_is_the_next_grant_s() {
    let dir = TempDir::new("bounded-next-token");
    for (file, fairness) in [("b", Fairness::Bounded(K)), ("s", Fairness::Strict)] {
        let path = dir.join(file);
        let lock = FairLock::options().fairness(fairness).open(&path).unwrap();
        for _ in 0..3 {
            let next = fairlock::inspect(&path).unwrap().token();
            let g = lock.lock().unwrap();
            assert_eq!(g.token(), next, "{fairness:?}");
            assert_eq!(fairlock::inspect(&path).unwrap().token(), next);
        }
    }
}

/// Opening a bounded file as a strict one says what the file holds, in English.
#[test]
fn a_fairness_mismatch_names_both_bounds() {
    let dir = TempDir::new("bounded-mismatch-message");
    let path = dir.join("lock");
    let _b = FairLock::options()
        .fairness(Fairness::Bounded(K))
        .open(&path)
        .unwrap();
    let e = FairLock::open(&path).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}: holds an exclusive lock bounded to {K} bypasses, not the exclusive lock asked \
             for; left untouched",
            path.display()
        )
    );
}

// ---------------------------------------------------------------------------------------------
// A grantee behind a barge: its deadline and its interrupt hook still apply
// ---------------------------------------------------------------------------------------------

// A grantee that claims its grant while a barge holds the lock waits for the barge to end; its
// deadline and its interrupt hook still apply there: when either says stop, it hands the
// claimed ticket back (`Held → Skipped`) and returns — behind a stopped barger or a leaked
// barge guard too.

/// How long the barge holds the lock.
const BARGE_HOLD: Duration = Duration::from_secs(2);
/// The waiter's timeout (or the delay before its interrupt hook says stop).
const PATIENCE: Duration = Duration::from_millis(200);

/// Runs the scenario until the main thread's re-lock is a barge ahead of the waiter's fresh
/// grant (token not a multiple of 512), holds that barge for `BARGE_HOLD`, and returns how
/// long the waiter's call took. `wait` is the waiter's acquisition (`lock_timeout` or
/// `lock_interruptible`); it returns whether it got the lock.
fn waiter_behind_a_long_barge(
    name: &str,
    wait: impl Fn(&FairLock) -> bool + Send + Sync + Clone + 'static,
) -> Duration {
    waiter_behind_a_barge(name, wait, false).expect("the waiter returned")
}

/// The scenario above; with `leak`, the barge's guard is forgotten (the lock stays held, as
/// a leaked std `MutexGuard` keeps its `Mutex`) and the waiter is given 5 s: `None` if it
/// had not returned by then.
fn waiter_behind_a_barge(
    name: &str,
    wait: impl Fn(&FairLock) -> bool + Send + Sync + Clone + 'static,
    leak: bool,
) -> Option<Duration> {
    let dir = TempDir::new(name);
    let path = dir.join("lock");
    let lock = Arc::new(
        FairLock::options()
            .fairness(Fairness::Bounded(4))
            .open(&path)
            .unwrap(),
    );
    for _attempt in 0..50 {
        let g = lock.lock().unwrap(); // a fast grant
        let (l2, w2) = (lock.clone(), wait.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let t0 = Instant::now();
            let got = w2(&l2);
            let _ = tx.send((got, t0.elapsed()));
        });
        // The waiter queued, then parked (it spins 50 µs at most).
        wait_for_waiters(&path, 1, Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(20));
        // Release (grants the sleeping waiter and wakes it) and re-lock at once: a barge,
        // unless the waiter claimed first.
        drop(g);
        let g = lock.lock().unwrap();
        let barged = !g.token().is_multiple_of(512);
        if barged && leak {
            std::mem::forget(g);
            return rx
                .recv_timeout(Duration::from_secs(5))
                .ok()
                .map(|(_, took)| took);
        }
        if barged {
            std::thread::sleep(BARGE_HOLD);
        }
        drop(g);
        let (_got, took) = rx.recv().unwrap();
        if barged {
            return Some(took);
        }
    }
    panic!("no barge in 50 attempts");
}

/// `lock_timeout(200 ms)` behind a 2 s barge returns by its deadline.
#[test]
fn lock_timeout_behind_a_barge_returns_by_its_deadline() {
    let took = waiter_behind_a_long_barge("bounded-barge-timeout", |l: &FairLock| {
        l.lock_timeout(PATIENCE).is_ok() // the guard (if any) is dropped here
    });
    assert!(
        took < Duration::from_secs(1),
        "lock_timeout({PATIENCE:?}) returned after {took:?}: its grantee waited out a \
         {BARGE_HOLD:?} barge in `after_claim`, ignoring its deadline"
    );
}

/// `lock_interruptible` behind a 2 s barge stops when its hook says so (after 200 ms).
#[test]
fn lock_interruptible_behind_a_barge_honours_its_hook() {
    let took = waiter_behind_a_long_barge("bounded-barge-interrupt", |l: &FairLock| {
        let t0 = Instant::now();
        let stop = AtomicBool::new(false);
        l.lock_interruptible(None, || {
            if t0.elapsed() >= PATIENCE {
                stop.store(true, SeqCst);
            }
            stop.load(SeqCst)
        })
        .is_ok()
    });
    assert!(
        took < Duration::from_secs(1),
        "lock_interruptible (stop after {PATIENCE:?}) returned after {took:?}: its hook is \
         not called while its grantee waits for a {BARGE_HOLD:?} barge"
    );
}

/// `lock_timeout(200 ms)` behind a leaked barge guard times out, as it does behind a leaked
/// guard of a fast grant or in a strict file.
#[test]
fn lock_timeout_behind_a_leaked_barge_guard_times_out() {
    let took = waiter_behind_a_barge(
        "bounded-barge-leaked",
        |l: &FairLock| l.lock_timeout(PATIENCE).is_ok(),
        true,
    );
    assert!(
        took.is_some_and(|t| t < Duration::from_secs(1)),
        "lock_timeout({PATIENCE:?}) behind a leaked barge guard: {took:?} (None: still \
         waiting after 5 s)"
    );
}

// ---------------------------------------------------------------------------------------------
// Crash points: bargers killed, a leased try_lock stopped before its claim
// ---------------------------------------------------------------------------------------------

#[cfg(feature = "__test-crash-points")]
fn open_bounded(path: &std::path::Path) -> FairLock {
    FairLock::options()
        .fairness(Fairness::Bounded(4))
        .open(path)
        .unwrap()
}

/// A barger SIGKILLed right after its barge CAS (`barge.taken`): the grantee it barged ahead
/// of still gets the lock, told `owner_died`.
#[test]
#[cfg(feature = "__test-crash-points")]
fn a_barger_killed_right_after_its_barge_is_passed_and_told() {
    barger_killed_at(
        "a_barger_killed_right_after_its_barge_is_passed_and_told",
        "barge.taken",
        true,
    );
}

/// A barger SIGKILLed as its barge ends (`barge.ended`): the grantee still gets the lock.
#[test]
#[cfg(feature = "__test-crash-points")]
fn a_barger_killed_as_its_barge_ends_is_passed() {
    barger_killed_at(
        "a_barger_killed_as_its_barge_ends_is_passed",
        "barge.ended",
        false,
    );
}

/// A worker barges again and again with crash point `point` armed, while this thread hands the
/// lock to a waiting thread round after round, until the worker dies there; the grant after
/// its death must come within 2 s, told `owner_died` if `told`.
#[cfg(feature = "__test-crash-points")]
fn barger_killed_at(test: &str, point: &str, told: bool) {
    if role().is_some() {
        let lock = open_bounded(common::env("FL_LOCK").as_ref());
        // Keep trying: every call spins in `barge` for up to 50 µs first (a deadline not yet
        // past: one already past makes one try, as `try_lock`, and never barges).
        loop {
            if let Ok(g) = lock.lock_timeout(Duration::from_micros(200)) {
                drop(g);
            }
        }
    }
    let dir = TempDir::new("bounded-crash-barge");
    let path = dir.join("lock");
    let lock = Arc::new(open_bounded(&path));
    let mut child = Worker::spawn(
        dir.path(),
        test,
        "barger",
        "barger",
        &[
            ("FL_LOCK", path.display().to_string()),
            ("FAIRLOCK_CRASH", point.into()),
        ],
    );
    for round in 0..200 {
        let g = lock.lock().unwrap();
        // The barger may also die barging into the lock between two rounds (nobody waiting):
        // then this grant is the first after its death, and is the one told.
        let first_told = g.owner_died();
        let l2 = lock.clone();
        let b = std::thread::spawn(move || {
            let t0 = Instant::now();
            let g = l2.lock().unwrap();
            (g.owner_died(), t0.elapsed())
        });
        // b parks (the child's short-deadline tickets come and go meanwhile).
        std::thread::sleep(Duration::from_millis(5));
        drop(g);
        let (died, took) = b.join().unwrap();
        if child.poll() {
            eprintln!(
                "round {round}: barger dead; holder told={first_told}, waiter died={died} took {took:?}"
            );
            assert!(
                died || first_told || !told,
                "the grantee behind a barger killed at {point} was not told"
            );
            assert!(took < Duration::from_secs(2), "took {took:?}");
            // And the lock still works.
            drop(lock.lock_timeout(Duration::from_secs(2)).unwrap());
            return;
        }
    }
    panic!("the barger never hit {point}");
}

#[cfg(feature = "__test-crash-points")]
fn open_bounded_with_lease(path: &std::path::Path, lease: bool) -> FairLock {
    let mut o = FairLock::options();
    o.fairness(Fairness::Bounded(4));
    if lease {
        o.lease(Duration::from_secs(30));
    }
    o.open(path).unwrap()
}

/// A leased `try_lock` of a free bounded lock takes a ticket that its own walk grants at once
/// (`Ready`, `advance.ready`), then claims it. Stopped in between (SIGSTOP), nobody barges ahead
/// of that ticket — a barge needs a `Granted` head whose waiter published its arrival, and a
/// pre-granted ticket has neither — so a `lock()` meanwhile waits until the grace passes the
/// stalled pre-grant over; continued, the `try_lock` finds its ticket skipped and answers
/// `WouldBlock` (the lock is held), not `Timeout`, and the lock stays whole.
#[test]
#[cfg(feature = "__test-crash-points")]
fn a_stalled_leased_try_lock_is_not_barged_and_would_block() {
    if role().is_some() {
        // Stopped (SIGSTOP) right after the walk pre-granted our ticket, then continued.
        let lock = open_bounded_with_lease(common::env("FL_LOCK").as_ref(), true);
        let code = match lock.try_lock() {
            Ok(g) => {
                drop(g);
                10
            }
            Err(Error::WouldBlock { .. }) => 11,
            Err(Error::Timeout { .. }) => 12,
            Err(e) => {
                eprintln!("try_lock: {e}");
                13
            }
        };
        std::process::exit(code);
    }
    let dir = TempDir::new("bounded-try-lease");
    let path = dir.join("lock");
    let lock = open_bounded_with_lease(&path, false);
    let mut child = Worker::spawn(
        dir.path(),
        "a_stalled_leased_try_lock_is_not_barged_and_would_block",
        "leased try_lock",
        "taker",
        &[
            ("FL_LOCK", path.display().to_string()),
            ("FAIRLOCK_CRASH", "advance.ready:stop".into()),
        ],
    );
    common::wait_until(Duration::from_secs(20), "the taker stopped", || {
        common::chaos::pid_stopped(child.pid())
    });
    // Its ticket is granted (`Ready`), not claimed: no barge ahead of it; we wait for the
    // grace to pass it over, then hold ticket 1 (token 2 · 512).
    let t0 = Instant::now();
    let g = lock.lock().unwrap();
    assert_eq!(g.token(), 1024, "not a barge: the next ticket's grant");
    assert!(
        t0.elapsed() >= Duration::from_millis(40),
        "{:?}",
        t0.elapsed()
    );
    common::chaos::signal(child.pid(), libc::SIGCONT);
    common::wait_until(Duration::from_secs(20), "the taker's answer", || {
        child.poll()
    });
    drop(g);
    let code = child.status.unwrap().code();
    assert_eq!(
        code,
        Some(11),
        "the continued try_lock: 11 = WouldBlock, 12 = Timeout, 10 = held\n{}",
        child.stderr()
    );
    // And the lock is whole: free for the next.
    drop(lock.try_lock().unwrap());
}
