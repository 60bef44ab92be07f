//! Giving up: waiters that stop waiting — by a deadline, a zero timeout, a poll in a loop or an
//! interrupt hook — never stall anyone and never break mutual exclusion.
//!
//! * `lock_timeout`: mixed plain and timed waiters keep exclusion; a waiter queued behind a
//!   timed-out one is served as soon as the holder releases; a timeout takes about the time
//!   asked.
//! * Polling: `lock_timeout(0)`, `lock_timeout` of a few milliseconds and `write_timeout(ZERO)`
//!   in a loop are ordinary ways to ask "free yet?", and cost nothing afterwards: behind a
//!   holder and a waiter, pollers (threads of this process, or other processes) ask again and
//!   again, every answer `Timeout`; then the holder and the waiter release, and the idle lock
//!   is taken at once (within 100 ms), for 2, 16 and 256 slots, exclusive and reader/writer.
//!   Each ticket given up while lapped costs no grace (pollers make them far faster than one
//!   50 ms grace each). Each case prints how many polls there were and how long the idle lock
//!   took (`--nocapture`); `FL_POLL_MS` sets how long the pollers poll (300 ms by default).
//! * `lock_interruptible`: a waiter that is told to stop gives its ticket up at once (a signal
//!   delivered to it wakes it), nobody queued behind it waits for it, a grant that races the
//!   interruption is kept, and a hook that panics gives the ticket up before the panic goes on.

mod common;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Gate, Shm, TempDir, Worker, racy_increment, role, wait_all, wait_for_waiters};
use fairlock::{Error, FairLock, FairRLock, FairRwLock};

const PROCS: usize = 2;
const THREADS: usize = 3;
const ITERS: u64 = 1_500;
/// Shared words: the racy counter, successes, timeouts.
const COUNTER: usize = 0;
const OK: usize = 1;
const TIMED_OUT: usize = 2;
const PLAIN_OK: usize = 3;

/// One worker thread: thread 0 of each process waits plainly, the others with timeouts from
/// zero to 20 ms; every 4th holder sleeps 200 µs so that short timeouts do expire.
fn mixed_worker(lock: &FairLock, shm: &Shm, thread: usize) {
    let timeouts = [
        Duration::ZERO,
        Duration::from_micros(50),
        Duration::from_micros(300),
        Duration::from_millis(2),
        Duration::from_millis(20),
    ];
    for i in 0..ITERS {
        let res = if thread == 0 {
            lock.lock()
        } else {
            lock.lock_timeout(timeouts[(i as usize + thread) % timeouts.len()])
        };
        match res {
            Ok(g) => {
                racy_increment(shm, COUNTER, 20);
                if i % 4 == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
                drop(g);
                shm.atomic(OK).fetch_add(1, SeqCst);
                if thread == 0 {
                    shm.atomic(PLAIN_OK).fetch_add(1, SeqCst);
                }
            }
            Err(Error::Timeout { .. }) if thread != 0 => {
                shm.atomic(TIMED_OUT).fetch_add(1, SeqCst);
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
}

#[test]
fn mixed_plain_and_timed_waiters_across_processes() {
    if role().is_some() {
        let lock = Arc::new(FairLock::open(common::env("FL_LOCK")).expect("worker open"));
        let shm = Arc::new(Shm::open(common::env("FL_SHM").as_ref()));
        let gate = Arc::new(Gate::open(common::env("FL_GATE").as_ref()));
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let (lock, shm, gate) = (lock.clone(), shm.clone(), gate.clone());
                std::thread::spawn(move || {
                    gate.arrive_and_wait();
                    mixed_worker(&lock, &shm, t);
                })
            })
            .collect();
        for t in threads {
            t.join().expect("worker thread panicked");
        }
        return;
    }
    let dir = TempDir::new("timeouts-mixed");
    let lock_path = dir.join("lock");
    let shm_path = dir.join("shm");
    let gate_path = dir.join("gate");
    let shm = Shm::create(&shm_path, 4);
    let gate = Gate::create(&gate_path);
    let lock = FairLock::open(&lock_path).expect("open");
    let mut workers: Vec<Worker> = (0..PROCS)
        .map(|i| {
            Worker::spawn(
                dir.path(),
                "mixed_plain_and_timed_waiters_across_processes",
                "worker",
                &format!("w{i}"),
                &[
                    ("FL_LOCK", lock_path.display().to_string()),
                    ("FL_SHM", shm_path.display().to_string()),
                    ("FL_GATE", gate_path.display().to_string()),
                ],
            )
        })
        .collect();
    gate.open_when_arrived((PROCS * THREADS) as u64, &mut workers);
    // Generous wall-clock limit: a waiter stalled behind an abandoned ticket would hang here.
    wait_all(&mut workers, Duration::from_secs(60));
    let ok = shm.atomic(OK).load(SeqCst);
    let timed_out = shm.atomic(TIMED_OUT).load(SeqCst);
    let total = (PROCS * THREADS) as u64 * ITERS;
    assert_eq!(
        ok + timed_out,
        total,
        "every attempt ends in a grant or a timeout"
    );
    assert_eq!(shm.read(COUNTER), ok, "lost update: two holders at once");
    assert_eq!(shm.atomic(PLAIN_OK).load(SeqCst), PROCS as u64 * ITERS);
    assert!(timed_out > 0, "no timeout expired (test too gentle)");
    assert!(
        ok > PROCS as u64 * ITERS,
        "no timed waiter ever got the lock"
    );
    eprintln!("timeouts: {ok} grants, {timed_out} timeouts");
    let st = fairlock::inspect(&lock_path).expect("inspect");
    assert!(st.holder.is_none() && st.waiters.is_empty(), "{st:?}");
    let g = lock.try_lock().expect("free at the end");
    drop(g);
}

#[test]
fn mixed_plain_and_timed_waiters_threads() {
    let dir = TempDir::new("timeouts-mixed-threads");
    let shm = Arc::new(Shm::create(&dir.join("shm"), 4));
    let lock = Arc::new(FairLock::open(dir.join("lock")).expect("open"));
    const N: usize = 4;
    let threads: Vec<_> = (0..N)
        .map(|t| {
            let (lock, shm) = (lock.clone(), shm.clone());
            std::thread::spawn(move || mixed_worker(&lock, &shm, t % 2))
        })
        .collect();
    common::with_time_limit(Duration::from_secs(60), "mixed threads", move || {
        for t in threads {
            t.join().expect("thread panicked");
        }
    });
    let ok = shm.atomic(OK).load(SeqCst);
    let timed_out = shm.atomic(TIMED_OUT).load(SeqCst);
    assert_eq!(ok + timed_out, N as u64 * ITERS);
    assert_eq!(shm.read(COUNTER), ok);
    assert_eq!(shm.atomic(PLAIN_OK).load(SeqCst), (N / 2) as u64 * ITERS);
}

#[test]
fn waiter_behind_timed_out_threads_is_served_promptly() {
    let dir = TempDir::new("timeouts-behind-threads");
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::open(&path).expect("open"));
    let guard = lock.lock().expect("lock");
    let held = guard.token();
    // Two waiters that will time out, then one plain waiter queued behind them.
    let mut timed = Vec::new();
    for (k, ms) in [(0usize, 200u64), (1, 300)] {
        let l = lock.clone();
        timed.push(std::thread::spawn(move || {
            let t0 = Instant::now();
            let r = l.lock_timeout(Duration::from_millis(ms));
            (r.map(|g| g.token()), t0.elapsed())
        }));
        wait_for_waiters(&path, k + 1, Duration::from_secs(20));
    }
    let (tx, rx) = mpsc::channel();
    let l = lock.clone();
    let plain = std::thread::spawn(move || {
        let g = l.lock().expect("plain lock");
        tx.send((Instant::now(), g.token())).unwrap();
    });
    wait_for_waiters(&path, 3, Duration::from_secs(20));
    for (h, ms) in timed.into_iter().zip([200u64, 300]) {
        let (r, elapsed) = h.join().expect("timed waiter panicked");
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
        assert!(
            elapsed >= Duration::from_millis(ms),
            "{elapsed:?} < {ms} ms"
        );
    }
    // Only the plain waiter is left in the queue.
    let st = fairlock::inspect(&path).expect("inspect");
    assert_eq!(st.waiters.len(), 1, "{st:?}");
    assert_eq!(st.waiters[0].token, held + 3, "{st:?}");
    let released = Instant::now();
    drop(guard);
    let (granted, token) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("waiter behind timed-out ones never got the lock");
    plain.join().unwrap();
    assert_eq!(token, held + 3, "the timed-out tickets are skipped");
    let delay = granted.saturating_duration_since(released);
    assert!(
        delay < Duration::from_secs(2),
        "served {delay:?} after release"
    );
}

#[test]
fn waiter_behind_timed_out_process_is_served_promptly() {
    const FLAG: usize = 0;
    const TOKEN: usize = 1;
    if let Some(r) = role() {
        let lock = FairLock::open(common::env("FL_LOCK")).expect("worker open");
        let shm = Shm::open(common::env("FL_SHM").as_ref());
        if r == "timed" {
            let t0 = Instant::now();
            let res = lock.lock_timeout(Duration::from_millis(300));
            assert!(matches!(res, Err(Error::Timeout { .. })), "{res:?}");
            assert!(t0.elapsed() >= Duration::from_millis(300));
        } else {
            let g = lock.lock().expect("lock");
            shm.write(TOKEN, g.token());
            shm.atomic(FLAG).store(1, SeqCst);
        }
        return;
    }
    let dir = TempDir::new("timeouts-behind-procs");
    let path = dir.join("lock");
    let shm_path = dir.join("shm");
    let shm = Shm::create(&shm_path, 2);
    let lock = FairLock::open(&path).expect("open");
    let guard = lock.lock().expect("lock");
    let env = [
        ("FL_LOCK", path.display().to_string()),
        ("FL_SHM", shm_path.display().to_string()),
    ];
    let test = "waiter_behind_timed_out_process_is_served_promptly";
    let mut timed = vec![Worker::spawn(dir.path(), test, "timed", "timed", &env)];
    wait_for_waiters(&path, 1, Duration::from_secs(20));
    let mut plain = vec![Worker::spawn(dir.path(), test, "plain", "plain", &env)];
    wait_for_waiters(&path, 2, Duration::from_secs(20));
    wait_all(&mut timed, Duration::from_secs(20));
    assert_eq!(shm.atomic(FLAG).load(SeqCst), 0, "granted while held");
    let released = Instant::now();
    drop(guard);
    common::wait_until(Duration::from_secs(10), "the plain waiter's grant", || {
        shm.atomic(FLAG).load(SeqCst) == 1
    });
    let delay = released.elapsed();
    assert!(
        delay < Duration::from_secs(2),
        "served {delay:?} after release"
    );
    wait_all(&mut plain, Duration::from_secs(20));
    assert_eq!(shm.read(TOKEN), lock.lock().unwrap().token() - 1);
}

#[test]
fn zero_timeout() {
    let dir = TempDir::new("timeouts-zero");
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::open(&path).expect("open"));
    // Free: granted at once.
    let g = lock
        .lock_timeout(Duration::ZERO)
        .expect("zero timeout on a free lock");
    let token = g.token();
    // Held by this thread: another thread's zero timeout times out.
    let l = lock.clone();
    let r = std::thread::spawn(move || l.lock_timeout(Duration::ZERO).map(|g| g.token()))
        .join()
        .unwrap();
    assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    // Its ticket was given up: nobody is left waiting, and the next grant is not blocked.
    let st = fairlock::inspect(&path).expect("inspect");
    assert!(st.waiters.is_empty(), "{st:?}");
    assert_eq!(st.holder.as_ref().map(|h| h.token), Some(token));
    drop(g);
    let l = lock.clone();
    let t2 = std::thread::spawn(move || l.try_lock().map(|g| g.token()))
        .join()
        .unwrap()
        .expect("try_lock after the abandoned ticket");
    assert!(t2 > token);
}

#[test]
fn expiring_timeout_takes_about_the_time_asked() {
    let dir = TempDir::new("timeouts-expiry");
    let lock = Arc::new(FairLock::open(dir.join("lock")).expect("open"));
    let _g = lock.lock().expect("lock");
    for ms in [1u64, 30, 250] {
        let l = lock.clone();
        let (r, elapsed) = std::thread::spawn(move || {
            let t0 = Instant::now();
            let r = l.lock_timeout(Duration::from_millis(ms)).map(|g| g.token());
            (r, t0.elapsed())
        })
        .join()
        .unwrap();
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
        assert!(
            elapsed >= Duration::from_millis(ms),
            "returned early: {elapsed:?} < {ms} ms"
        );
        assert!(
            elapsed < Duration::from_millis(ms) + Duration::from_secs(3),
            "returned late: {elapsed:?} for {ms} ms"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Polling: asking "free yet?" in a loop never stalls an idle lock
// ---------------------------------------------------------------------------------------------

/// How long the pollers poll: `FL_POLL_MS`, or 300 ms.
fn poll_for() -> Duration {
    let ms = std::env::var("FL_POLL_MS")
        .ok()
        .map_or(300, |v| v.parse().expect("FL_POLL_MS: milliseconds"));
    Duration::from_millis(ms)
}
/// The longest the idle lock may take afterwards.
const IDLE_WITHIN: Duration = Duration::from_millis(100);
/// Pollers per case.
const POLLERS: usize = 3;

#[derive(Clone, Copy, Debug)]
enum Kind {
    Exclusive,
    RwLock,
}

enum Lock {
    Exclusive(FairLock),
    RwLock(FairRwLock),
}

impl Lock {
    fn open(kind: Kind, slots: u32, path: &std::path::Path) -> Lock {
        let mut o = FairLock::options();
        o.slots(slots);
        match kind {
            Kind::Exclusive => Lock::Exclusive(o.open(path).expect("open")),
            Kind::RwLock => Lock::RwLock(o.open_rwlock(path).expect("open")),
        }
    }

    /// Holds the lock (exclusively) for `f`'s duration.
    fn with<R>(&self, timeout: Option<Duration>, f: impl FnOnce() -> R) -> Result<R, Error> {
        match self {
            Lock::Exclusive(l) => {
                let _g = match timeout {
                    Some(d) => l.lock_timeout(d)?,
                    None => l.lock()?,
                };
                Ok(f())
            }
            Lock::RwLock(l) => {
                let _g = match timeout {
                    Some(d) => l.write_timeout(d)?,
                    None => l.write()?,
                };
                Ok(f())
            }
        }
    }

    /// One poll: a zero timeout, one of up to 50 µs or one of up to 2 ms (readers too, on a
    /// reader/writer lock). Every nonzero one takes a ticket and gives it up.
    fn poll(&self, i: u64) -> Result<(), Error> {
        let d = match i % 4 {
            0 => Duration::ZERO,
            1 | 3 => Duration::from_micros(1 + i % 50),
            _ => Duration::from_micros(i % 2_000),
        };
        match self {
            Lock::Exclusive(l) => l.lock_timeout(d).map(drop),
            Lock::RwLock(l) if i % 3 == 1 => l.read_timeout(d).map(drop),
            Lock::RwLock(l) => l.write_timeout(d).map(drop),
        }
    }
}

/// Polls until `stop`, expecting `Timeout` every time; the number of polls.
fn poll_until(lock: &Lock, stop: impl Fn() -> bool) -> u64 {
    let mut n = 0u64;
    while !stop() {
        match lock.poll(n) {
            Err(Error::Timeout { .. }) => {}
            other => panic!("poll {n} behind a holder: {other:?}"),
        }
        n += 1;
    }
    n
}

/// Where the pollers run.
#[derive(Clone, Copy, Debug)]
enum Pollers {
    Threads,
    Processes,
}

/// Holder, waiter, pollers; then the idle probe. Returns (polls, how long the probe took).
fn storm(kind: Kind, slots: u32, pollers: Pollers, test: &str) -> (u64, Duration) {
    let dir = TempDir::new(&format!("polling-{kind:?}-{slots}"));
    let path = dir.join("lock");
    let lock = Arc::new(Lock::open(kind, slots, &path));
    let stop = Arc::new(AtomicBool::new(false));
    let holder = {
        let lock = lock.clone();
        let stop = stop.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            lock.with(None, || {
                tx.send(()).unwrap();
                while !stop.load(SeqCst) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
            .expect("holder")
        });
        rx.recv().unwrap();
        h
    };
    let waiter = {
        let lock = lock.clone();
        std::thread::spawn(move || lock.with(None, || {}).expect("waiter"))
    };
    common::wait_for_waiters(&path, 1, Duration::from_secs(10));
    let polls = match pollers {
        Pollers::Threads => {
            let total = Arc::new(AtomicU64::new(0));
            let until = Instant::now() + poll_for();
            let threads: Vec<_> = (0..POLLERS)
                .map(|_| {
                    let (lock, total) = (lock.clone(), total.clone());
                    std::thread::spawn(move || {
                        let n = poll_until(&lock, || Instant::now() >= until);
                        total.fetch_add(n, SeqCst);
                    })
                })
                .collect();
            for t in threads {
                t.join().expect("poller");
            }
            total.load(SeqCst)
        }
        Pollers::Processes => {
            let gate_path = dir.join("gate");
            let gate = Gate::create(&gate_path);
            let mut workers: Vec<Worker> = (0..POLLERS)
                .map(|i| {
                    Worker::spawn(
                        dir.path(),
                        test,
                        "poller",
                        &format!("p{i}"),
                        &[
                            ("FL_LOCK", path.display().to_string()),
                            ("FL_GATE", gate_path.display().to_string()),
                            ("FL_KIND", format!("{kind:?}")),
                            ("FL_SLOTS", slots.to_string()),
                            (
                                "FL_COUNT",
                                dir.join(&format!("polls-{i}")).display().to_string(),
                            ),
                        ],
                    )
                })
                .collect();
            gate.open_when_arrived(POLLERS as u64, &mut workers);
            wait_all(&mut workers, Duration::from_secs(60));
            (0..POLLERS)
                .map(|i| {
                    let n = std::fs::read_to_string(dir.join(&format!("polls-{i}")));
                    n.expect("a poller's count")
                        .parse::<u64>()
                        .expect("a count")
                })
                .sum()
        }
    };
    stop.store(true, SeqCst);
    holder.join().expect("holder");
    waiter.join().expect("waiter");
    let started = Instant::now();
    lock.with(Some(Duration::from_secs(10)), || {})
        .unwrap_or_else(|e| panic!("{kind:?}, {slots} slots, {pollers:?}: idle lock: {e}"));
    (polls, started.elapsed())
}

/// A poller process: polls for `poll_for()` behind the parent's holder; writes its count.
fn poller_process() {
    let kind = match common::env("FL_KIND").as_str() {
        "Exclusive" => Kind::Exclusive,
        _ => Kind::RwLock,
    };
    let lock = Lock::open(
        kind,
        common::env_parse("FL_SLOTS"),
        common::env("FL_LOCK").as_ref(),
    );
    let gate = Gate::open(common::env("FL_GATE").as_ref());
    gate.arrive_and_wait();
    let until = Instant::now() + poll_for();
    let n = poll_until(&lock, || Instant::now() >= until);
    std::fs::write(common::env("FL_COUNT"), n.to_string()).expect("write the count");
}

fn run(kind: Kind, pollers: Pollers, test: &str) {
    if role().is_some() {
        poller_process();
        return;
    }
    for slots in [2, 16, 256] {
        let (polls, took) = storm(kind, slots, pollers, test);
        eprintln!(
            "[polling] {kind:?}, {slots} slots, {pollers:?}: {polls} polls, idle lock taken in {took:?}"
        );
        assert!(
            took < IDLE_WITHIN,
            "{kind:?}, {slots} slots, {pollers:?}: the idle lock took {took:?} after {polls} polls"
        );
    }
}

#[test]
fn polling_threads_never_stall_an_idle_exclusive_lock() {
    run(
        Kind::Exclusive,
        Pollers::Threads,
        "polling_threads_never_stall_an_idle_exclusive_lock",
    );
}

#[test]
fn polling_processes_never_stall_an_idle_exclusive_lock() {
    run(
        Kind::Exclusive,
        Pollers::Processes,
        "polling_processes_never_stall_an_idle_exclusive_lock",
    );
}

#[test]
fn polling_threads_never_stall_an_idle_rwlock() {
    run(
        Kind::RwLock,
        Pollers::Threads,
        "polling_threads_never_stall_an_idle_rwlock",
    );
}

#[test]
fn polling_processes_never_stall_an_idle_rwlock() {
    run(
        Kind::RwLock,
        Pollers::Processes,
        "polling_processes_never_stall_an_idle_rwlock",
    );
}

/// Twenty threads of `lock_timeout` under 2 ms against two threads that lock and unlock in a
/// loop: some polls win the lock, most time out; afterwards the idle lock is taken at once.
#[test]
fn twenty_short_timeouts_against_two_lockers() {
    for slots in [2, 16] {
        let dir = TempDir::new("polling-twenty");
        let lock = Arc::new(
            FairLock::options()
                .slots(slots)
                .open(dir.join("lock"))
                .expect("open"),
        );
        let until = Instant::now() + poll_for();
        let won = Arc::new(AtomicU64::new(0));
        let mut threads = Vec::new();
        for i in 0..22u64 {
            let (lock, won) = (lock.clone(), won.clone());
            threads.push(std::thread::spawn(move || {
                let mut n = 0u64;
                while Instant::now() < until {
                    if i < 2 {
                        let g = lock.lock().expect("locker");
                        std::thread::sleep(Duration::from_micros(200));
                        drop(g);
                    } else {
                        match lock.lock_timeout(Duration::from_micros((n * 37 + i * 101) % 2_000)) {
                            Ok(g) => {
                                won.fetch_add(1, SeqCst);
                                drop(g);
                            }
                            Err(Error::Timeout { .. }) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                    n += 1;
                }
            }));
        }
        for t in threads {
            t.join().expect("thread");
        }
        let started = Instant::now();
        let g = lock
            .lock_timeout(Duration::from_secs(10))
            .expect("idle lock");
        let took = started.elapsed();
        drop(g);
        eprintln!(
            "[polling] 20 short timeouts against 2 lockers, {slots} slots: {} polls won, idle lock taken in {took:?}",
            won.load(SeqCst)
        );
        assert!(
            took < IDLE_WITHIN,
            "{slots} slots: the idle lock took {took:?} ({} polls won)",
            won.load(SeqCst)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// lock_interruptible
// ---------------------------------------------------------------------------------------------

#[test]
fn a_stopped_waiter_gives_its_place_up_and_the_next_is_served() {
    let dir = TempDir::new("interrupt-flag");
    let path = dir.join("l");
    let lock = Arc::new(FairLock::open(&path).unwrap());
    let holder = lock.lock().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (l2, s2) = (lock.clone(), stop.clone());
    let interrupted = std::thread::spawn(move || {
        let r = l2.lock_interruptible(None, || s2.load(SeqCst));
        (
            r.map(|g| g.token()).map_err(|e| e.to_string()),
            Instant::now(),
        )
    });
    wait_for_waiters(&path, 1, Duration::from_secs(10));
    let l3 = lock.clone();
    let behind = std::thread::spawn(move || l3.lock().map(|g| g.token()).unwrap());
    wait_for_waiters(&path, 2, Duration::from_secs(10));

    std::thread::sleep(Duration::from_millis(20));
    let told = Instant::now();
    stop.store(true, SeqCst);
    let (r, at) = interrupted.join().unwrap();
    let e = r.unwrap_err();
    assert!(e.contains("interrupted"), "{e}");
    // Asked at least every 50 ms; give the scheduler room.
    assert!(at - told < Duration::from_millis(500), "{:?}", at - told);

    // Its ticket was given up: the waiter behind is served as soon as the holder releases.
    let token = holder.token();
    drop(holder);
    let next = behind.join().unwrap();
    assert!(next > token);
    assert!(fairlock::inspect(&path).unwrap().waiters.is_empty());
}

static SIGNALLED: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_usr1(_: libc::c_int) {
    SIGNALLED.fetch_add(1, SeqCst);
}

/// A signal delivered to the waiting thread wakes it at once (`EINTR`): the hook sees the
/// handler's flag long before the 50 ms poll. This is how a language runtime's Ctrl-C reaches
/// a waiter (Python's handler sets a flag and the waiter asks for it).
#[test]
fn a_signal_to_the_waiting_thread_is_seen_at_once() {
    let dir = TempDir::new("interrupt-signal");
    let path = dir.join("l");
    let lock = Arc::new(FairRLock::open(&path).unwrap());
    // SAFETY: installs a handler that only touches an atomic; no SA_RESTART, so the futex wait
    // returns EINTR.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_usr1 as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
    let holder = lock.lock().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let l2 = lock.clone();
    let waiter = std::thread::spawn(move || {
        // SAFETY: pthread_self has no preconditions.
        tx.send(unsafe { libc::pthread_self() }).unwrap();
        let mut asked = 0u32;
        let r = l2.lock_interruptible(None, || {
            asked += 1;
            SIGNALLED.load(SeqCst) > 0
        });
        (r.map(|_| ()), Instant::now(), asked)
    });
    let thread = rx.recv().unwrap();
    wait_for_waiters(&path, 1, Duration::from_secs(10));
    // Let it settle into its long sleep (past the spin of the next in line).
    std::thread::sleep(Duration::from_millis(120));
    let sent = Instant::now();
    // SAFETY: the thread is alive (it is waiting; joined below).
    assert_eq!(unsafe { libc::pthread_kill(thread, libc::SIGUSR1) }, 0);
    let (r, at, asked) = waiter.join().unwrap();
    assert!(matches!(r, Err(Error::Interrupted { .. })), "{r:?}");
    assert!(
        at - sent < Duration::from_millis(40),
        "{:?} after the signal ({asked} looks)",
        at - sent
    );
    drop(holder);
    // Nothing is left queued; the lock is free.
    assert!(lock.try_lock().is_ok());
}

/// With a deadline as well: the deadline still applies, reported as a timeout.
#[test]
fn the_deadline_still_applies() {
    let dir = TempDir::new("interrupt-deadline");
    let path = dir.join("l");
    let lock = FairLock::open(&path).unwrap();
    let other = FairLock::open(&path).unwrap();
    std::thread::scope(|s| {
        let g = lock.lock().unwrap();
        let r = s
            .spawn(|| {
                let start = Instant::now();
                let r = other
                    .lock_interruptible(Some(Instant::now() + Duration::from_millis(100)), || {
                        false
                    });
                (r.map(|_| ()), start.elapsed())
            })
            .join()
            .unwrap();
        assert!(matches!(r.0, Err(Error::Timeout { .. })), "{:?}", r.0);
        assert!(r.1 >= Duration::from_millis(100), "{:?}", r.1);
        drop(g);
    });
    // Uncontended: granted without ever asking the hook.
    let g = lock.lock_interruptible(None, || panic!("asked without waiting"));
    assert!(g.is_ok());
}

/// A waiter whose interrupt hook panics gives its ticket up before the panic goes on (left
/// published, it would be granted later, never claimed, and never passed while the process
/// lives), so the lock is free once its holder releases. (The shared kinds' form is in
/// `kinds.rs`.)
#[test]
fn a_panicking_interrupt_hook_gives_the_ticket_up_on_an_exclusive_lock() {
    let dir = TempDir::new("interrupt-panicking-hook");
    let path = dir.join("lock");
    let lock = FairLock::open(&path).expect("open");
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (held_tx, held_rx) = mpsc::channel::<()>();
    let p = path.clone();
    let holder = std::thread::spawn(move || {
        let l = FairLock::open(&p).expect("open");
        let g = l.lock().expect("lock");
        held_tx.send(()).unwrap();
        let _ = go_rx.recv();
        drop(g);
    });
    held_rx.recv().unwrap();
    let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
        lock.lock_interruptible(None, || panic!("hook panics"))
            .map(|g| g.token())
    }));
    assert!(r.is_err(), "the hook's panic went on: {r:?}");
    go_tx.send(()).unwrap();
    holder.join().unwrap();
    let again = std::thread::scope(|s| {
        s.spawn(|| {
            lock.lock_timeout(Duration::from_secs(2))
                .map(|g| g.owner_died())
        })
        .join()
        .unwrap()
    });
    assert!(
        matches!(again, Ok(false)),
        "the lock after the panic: {again:?}"
    );
}
