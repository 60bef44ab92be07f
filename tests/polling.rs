//! Polling: `lock_timeout(0)`, `lock_timeout` of a few milliseconds and `write_timeout(ZERO)`
//! in a loop are ordinary ways to ask "free yet?", and must cost nothing afterwards. A holder
//! holds, a waiter waits behind it, and pollers — threads of this process, or other processes
//! — ask again and again; every answer is `Timeout`. Then the holder and the waiter release,
//! and the idle lock must be taken at once (within 100 ms), for 2, 16 and 256 slots, exclusive
//! and reader/writer. (A lock once stalled here for hours: each ticket given up while lapped
//! beyond a few side records cost a 50 ms grace, and pollers make them far faster than that.)
//!
//! Each case prints how many polls there were and how long the idle lock took (`--nocapture`);
//! `FL_POLL_MS` sets how long the pollers poll (300 ms by default).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::{Gate, TempDir, Worker, role, wait_all};
use fairlock::{Error, FairLock, FairRwLock};

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
