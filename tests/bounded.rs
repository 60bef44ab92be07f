//! `Fairness::Bounded(k)` (issue 15) from the outside: threads and processes oversubscribing
//! two CPUs on a lock with a bypass bound must keep mutual exclusion, tokens that rise in
//! grant order, and never see a waiter overtaken more than `k` times — while barges do happen.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Gate, TempDir, Worker, role, wait_all};
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
            .open_mutex::<Books>(path)
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
