//! Asynchronous acquisitions (`lock_async`, `read_async`, `write_async`, `acquire_async`), as
//! services call them: under tokio's multi-thread runtime, tasks of several processes in line
//! together, futures dropped by `timeout` and `select!`, a holder process SIGKILLed.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use common::{Shm, TempDir, Worker, env, log_append, log_entries, role};
use fairlock::{AcquireFuture, Error, FairLock, FairRwLock, FairSemaphore, ProcessGuard};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Polls `f` once, as a runtime's first poll does.
fn poll_once(f: &mut AcquireFuture) -> Poll<fairlock::Result<ProcessGuard>> {
    Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
}

/// Waits (blocking) until `f` resolves, polling it as a runtime would after each wake-up
/// (here: every millisecond).
fn resolve(f: &mut AcquireFuture, within: Duration) -> fairlock::Result<ProcessGuard> {
    let until = Instant::now() + within;
    loop {
        if let Poll::Ready(r) = poll_once(f) {
            return r;
        }
        assert!(Instant::now() < until, "not resolved within {within:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// While the lock is held, nobody waits in line for it: every dropped future gave its ticket
/// up before its drop returned.
fn assert_nobody_waits(lock: &FairLock) {
    let st = fairlock::inspect(lock.path()).unwrap();
    assert!(
        st.waiters.is_empty() && st.arriving == 0,
        "{} tickets still wait, {} arriving",
        st.waiters.len(),
        st.arriving
    );
}

/// After a holder let go, the lock is idle at once: nothing anyone dropped left a ticket
/// behind (a `try_lock` that found one would say `WouldBlock`).
fn assert_idle(lock: &FairLock) {
    let t0 = Instant::now();
    let g = lock
        .lock_timeout(Duration::from_secs(5))
        .expect("the lock is free");
    let waited = t0.elapsed();
    drop(g);
    drop(lock.try_lock().expect("idle: nobody in line"));
    assert!(
        waited < Duration::from_secs(1),
        "a free lock took {waited:?} to grant"
    );
}

#[test]
fn the_future_is_send_and_an_uncontended_lock_is_granted_at_the_first_poll() {
    fn send_static_unpin<T: Send + Unpin + 'static>(_: &T) {}
    let dir = TempDir::new("async-uncontended");
    let lock = FairLock::open(dir.join("l")).unwrap();
    let mut f = lock.lock_async();
    send_static_unpin(&f);
    let Poll::Ready(Ok(g)) = poll_once(&mut f) else {
        panic!("a free lock is granted at the first poll");
    };
    assert!(!g.owner_died());
    assert!(matches!(lock.try_lock(), Err(Error::WouldBlock { .. })));
    drop(g);
    // Held across `.await`s on a multi-thread runtime, released by another task.
    let lock = Arc::new(lock);
    let l = lock.clone();
    let token = runtime().block_on(async move {
        let g = l.lock_async().await.unwrap();
        let token = g.token();
        tokio::task::yield_now().await;
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            g.unlock().unwrap();
        })
        .await
        .unwrap();
        token
    });
    assert!(lock.try_lock().unwrap().token() > token);
}

/// Tasks are served in the order of their first polls: each took its ticket there.
#[test]
fn tasks_are_served_in_the_order_of_their_first_poll() {
    let dir = TempDir::new("async-order");
    let lock = FairLock::open(dir.join("l")).unwrap();
    let holder = lock.lock_process().unwrap();
    let mut waiting: Vec<AcquireFuture> = (0..8).map(|_| lock.lock_async()).collect();
    for f in &mut waiting {
        assert!(poll_once(f).is_pending());
    }
    // A blocking waiter arriving after them is served after them.
    let late = {
        let path = lock.path().to_path_buf();
        std::thread::spawn(move || {
            let l = FairLock::open(path).unwrap();
            l.lock().map(|g| g.token())
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    let first = holder.token();
    holder.unlock().unwrap();
    let mut last = first;
    for f in &mut waiting {
        let g = resolve(f, Duration::from_secs(10)).unwrap();
        assert!(g.token() > last, "served out of the order of first polls");
        last = g.token();
        g.unlock().unwrap();
    }
    assert!(late.join().unwrap().unwrap() > last);
    assert_idle(&lock);
}

/// The ticket is taken by the first poll itself: the lock's next ticket has moved on when the
/// poll returns (not later, by the waiter thread).
#[test]
fn the_first_poll_takes_the_ticket() {
    let dir = TempDir::new("async-first-poll");
    let lock = FairLock::open(dir.join("l")).unwrap();
    let holder = lock.lock_process().unwrap();
    let mut waiting = Vec::new();
    for _ in 0..32 {
        let before = fairlock::inspect(lock.path()).unwrap().next_ticket;
        let mut f = lock.lock_async();
        assert!(poll_once(&mut f).is_pending());
        let after = fairlock::inspect(lock.path()).unwrap().next_ticket;
        assert_eq!(after, before + 1, "the first poll took no ticket");
        waiting.push(f);
    }
    drop(waiting);
    holder.unlock().unwrap();
    assert_idle(&lock);
}

/// A grant that carries the news of a dead holder, made to a future that is then dropped
/// unpolled (a `timeout` firing just then): the news reaches the next holder.
#[test]
fn a_dropped_future_passes_the_news_of_a_death_on() {
    let dir = TempDir::new("async-news");
    let lock = Arc::new(FairLock::open(dir.join("l")).unwrap());
    let holder = lock.lock_process().unwrap();
    let mut f = lock.lock_async();
    assert!(poll_once(&mut f).is_pending());
    // The holder dies holding (a grant dropped while its thread panics is given up as dead).
    let _ = std::thread::spawn(move || {
        let _held = holder;
        panic!("dies holding");
    })
    .join();
    // The waiter thread is granted, with the news, before the future is dropped.
    let until = Instant::now() + Duration::from_secs(5);
    while fairlock::inspect(lock.path()).unwrap().holder.is_none() {
        assert!(
            Instant::now() < until,
            "the waiter thread was never granted"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(f);
    let g = lock.try_lock().expect("given back when the drop returned");
    assert!(
        g.owner_died(),
        "the news of the death was lost with the dropped future"
    );
}

/// A future already waiting when the process forks, polled in the child, resolves to an error
/// (the wait is the parent's, and so is the waiter thread): never pending for ever.
#[test]
fn a_waiting_future_polled_in_a_forked_child_fails() {
    let dir = TempDir::new("async-fork");
    let lock = FairLock::open(dir.join("l")).unwrap();
    let holder = lock.lock_process().unwrap();
    let mut waiting = lock.lock_async();
    assert!(poll_once(&mut waiting).is_pending());
    let mut unpolled = lock.lock_async();
    // SAFETY: the child only polls the two futures (no locks of the parent's threads taken:
    // a child's copy never locks the wait's outcome), then `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let code = match (poll_once(&mut unpolled), poll_once(&mut waiting)) {
            (Poll::Ready(Err(_)), Poll::Ready(Err(_))) => 0,
            (_, Poll::Pending) => 1,
            _ => 2,
        };
        drop(waiting); // a child's copy: nothing to give up, nothing waited for
        std::mem::forget(unpolled);
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(code) }
    }
    let mut status = 0;
    // SAFETY: waits for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status), "the child did not exit");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "1: the child's copy of a waiting future stayed pending; 2: it was granted"
    );
    holder.unlock().unwrap();
    let g = resolve(&mut waiting, Duration::from_secs(5)).expect("the parent's wait goes on");
    g.unlock().unwrap();
    drop(unpolled);
    assert_idle(&lock);
}

const PROCESSES: usize = 4;
const TASKS: usize = 8;
const ROUNDS: usize = 20;

/// 4 processes × 8 tasks, each holding the lock across `.await`s: mutual exclusion (a racy
/// counter stays exact), grants in ticket order (tokens rise in the order of the critical
/// sections), and an idle lock afterwards.
#[test]
fn tasks_of_several_processes_exclude_each_other_in_ticket_order() {
    if role().is_some() {
        let lock = Arc::new(FairLock::open(env("LOCK")).unwrap());
        let count = Arc::new(Shm::open(env("COUNT").as_ref()));
        let log = Arc::new(Shm::open(env("LOG").as_ref()));
        runtime().block_on(async move {
            let tasks: Vec<_> = (0..TASKS)
                .map(|_| {
                    let (lock, count, log) = (lock.clone(), count.clone(), log.clone());
                    tokio::spawn(async move {
                        for _ in 0..ROUNDS {
                            let g = lock.lock_async().await.unwrap();
                            let v = count.read(0);
                            tokio::task::yield_now().await;
                            count.write(0, v + 1);
                            log_append(&log, g.token());
                            g.unlock().unwrap();
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        return;
    }
    let dir = TempDir::new("async-processes");
    let lock_path = dir.join("l");
    let lock = FairLock::open(&lock_path).unwrap();
    let total = PROCESSES * TASKS * ROUNDS;
    let count = Shm::create(&dir.join("count"), 1);
    let log = Shm::create(&dir.join("log"), 1 + total + 8);
    let mut workers: Vec<Worker> = (0..PROCESSES)
        .map(|i| {
            Worker::spawn(
                dir.path(),
                "tasks_of_several_processes_exclude_each_other_in_ticket_order",
                "tasks",
                &format!("p{i}"),
                &[
                    ("LOCK", lock_path.display().to_string()),
                    ("COUNT", dir.join("count").display().to_string()),
                    ("LOG", dir.join("log").display().to_string()),
                ],
            )
        })
        .collect();
    common::wait_all(&mut workers, Duration::from_secs(120));
    assert_eq!(
        count.read(0) as usize,
        total,
        "two tasks held the lock at once"
    );
    let tokens = log_entries(&log);
    assert_eq!(tokens.len(), total);
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "grants out of ticket order"
    );
    assert_idle(&lock);
}

/// Futures dropped while they wait — `timeout`, `select!`, a plain drop, by the dozen — give
/// their places up at once: the holder's release then reaches the next live waiter, and the
/// lock is idle once that one is done.
#[test]
fn dropped_acquisitions_leave_nothing_behind() {
    let dir = TempDir::new("async-cancel");
    let lock = Arc::new(FairLock::open(dir.join("l")).unwrap());
    let holder = lock.lock_process().unwrap();
    let rt = runtime();
    // A storm of plain drops after the first poll (each took a ticket).
    let t0 = Instant::now();
    for _ in 0..64 {
        let mut f = lock.lock_async();
        assert!(poll_once(&mut f).is_pending());
        drop(f);
    }
    let dropping = t0.elapsed();
    assert_nobody_waits(&lock);
    // `timeout` and `select!` on a multi-thread runtime.
    let l = lock.clone();
    rt.block_on(async move {
        for i in 0..64 {
            if i % 2 == 0 {
                let r = tokio::time::timeout(Duration::from_millis(1), l.lock_async()).await;
                assert!(r.is_err(), "granted while held");
            } else {
                tokio::select! {
                    _ = l.lock_async() => panic!("granted while held"),
                    _ = tokio::time::sleep(Duration::from_millis(1)) => {}
                }
            }
        }
    });
    assert_nobody_waits(&lock);
    // A live waiter behind them all is the next holder.
    let mut live = lock.lock_async();
    assert!(poll_once(&mut live).is_pending());
    holder.unlock().unwrap();
    let g = resolve(&mut live, Duration::from_secs(5)).expect("the live waiter is served");
    g.unlock().unwrap();
    assert_idle(&lock);
    assert!(
        dropping < Duration::from_secs(2),
        "64 drops took {dropping:?}"
    );
}

/// A future dropped just as its grant is made: the grant is given back, whichever won.
#[test]
fn a_grant_that_races_the_drop_is_given_back() {
    let dir = TempDir::new("async-race-drop");
    let lock = FairLock::open(dir.join("l")).unwrap();
    for i in 0..200u32 {
        let holder = lock.lock_process().unwrap();
        let mut f = lock.lock_async();
        assert!(poll_once(&mut f).is_pending());
        holder.unlock().unwrap();
        if i % 3 == 1 {
            std::thread::yield_now();
        } else if i % 3 == 2 {
            std::thread::sleep(Duration::from_micros(u64::from(i)));
        }
        drop(f);
        // The drop returned once the grant (if it won) was given back.
        drop(
            lock.try_lock()
                .expect("free and idle as soon as the drop returned"),
        );
    }
}

#[test]
fn an_async_timeout_gives_the_place_up_and_says_so() {
    let dir = TempDir::new("async-timeout");
    let lock = FairLock::open(dir.join("l")).unwrap();
    let holder = lock.lock_process().unwrap();
    let t0 = Instant::now();
    let r = runtime().block_on(lock.lock_async_timeout(Duration::from_millis(50)));
    assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    assert!(t0.elapsed() >= Duration::from_millis(50));
    holder.unlock().unwrap();
    assert_idle(&lock);
}

#[test]
fn reads_share_writes_exclude_and_permits_count_asynchronously() {
    let dir = TempDir::new("async-kinds");
    let rw = FairRwLock::open(dir.join("rw")).unwrap();
    let rt = runtime();
    let (r1, r2) = rt.block_on(async { (rw.read_async().await, rw.read_async().await) });
    let (r1, r2) = (r1.unwrap(), r2.unwrap());
    let mut w = rw.write_async();
    assert!(
        poll_once(&mut w).is_pending(),
        "a write waits for the reads"
    );
    let mut r3 = rw.read_async();
    assert!(
        poll_once(&mut r3).is_pending(),
        "a read waits behind the writer"
    );
    r1.unlock().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert!(poll_once(&mut w).is_pending(), "one read still held");
    r2.unlock().unwrap();
    let wg = resolve(&mut w, Duration::from_secs(5)).unwrap();
    assert!(poll_once(&mut r3).is_pending());
    wg.unlock().unwrap();
    resolve(&mut r3, Duration::from_secs(5))
        .unwrap()
        .unlock()
        .unwrap();

    let sem = FairSemaphore::open(dir.join("sem"), 2).unwrap();
    let (a, b) = rt.block_on(async { (sem.acquire_async().await, sem.acquire_async().await) });
    let (a, b) = (a.unwrap(), b.unwrap());
    let mut c = sem.acquire_async();
    assert!(poll_once(&mut c).is_pending(), "two permits of two are out");
    a.unlock().unwrap();
    let c = resolve(&mut c, Duration::from_secs(5)).unwrap();
    drop((b, c));
    drop(sem.try_acquire().unwrap());
}

/// A lease is kept as in the blocking form: a holder past its lease is taken over by an async
/// waiter, and finds out.
#[test]
fn an_async_waiter_takes_over_an_expired_lease() {
    let dir = TempDir::new("async-lease");
    let lock = FairLock::options()
        .lease(Duration::from_millis(100))
        .open(dir.join("l"))
        .unwrap();
    let holder = lock.lock_process().unwrap();
    let t0 = Instant::now();
    let g = runtime()
        .block_on(lock.lock_async_timeout(Duration::from_secs(10)))
        .unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(90));
    assert!(g.owner_died(), "the previous holder did not release");
    assert!(matches!(holder.check(), Err(Error::LockLost { .. })));
    assert!(g.token() > holder.token());
    g.unlock().unwrap();
}

/// A holder process SIGKILLed while an async waiter of another process waits: the waiter is
/// granted, told `owner_died`.
#[test]
fn a_killed_holder_process_hands_the_lock_to_an_async_waiter() {
    if role().is_some() {
        let lock = FairLock::open(env("LOCK")).unwrap();
        let shm = Shm::open(env("SHM").as_ref());
        let g = runtime().block_on(lock.lock_async()).unwrap();
        shm.write(0, g.token() + 1);
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    let dir = TempDir::new("async-killed-holder");
    let path = dir.join("l");
    let lock = FairLock::open(&path).unwrap();
    let shm = Shm::create(&dir.join("shm"), 1);
    let mut holder = Worker::spawn(
        dir.path(),
        "a_killed_holder_process_hands_the_lock_to_an_async_waiter",
        "holder",
        "holder",
        &[
            ("LOCK", path.display().to_string()),
            ("SHM", dir.join("shm").display().to_string()),
        ],
    );
    let until = Instant::now() + Duration::from_secs(30);
    while shm.read(0) == 0 {
        assert!(Instant::now() < until, "the holder never held");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut f = lock.lock_async();
    assert!(poll_once(&mut f).is_pending());
    std::thread::sleep(Duration::from_millis(20));
    common::chaos::signal(holder.pid(), libc::SIGKILL);
    let g = resolve(&mut f, Duration::from_secs(10)).expect("granted after the kill");
    assert!(g.owner_died());
    assert!(g.token() >= shm.read(0));
    let _ = holder.child.wait();
    g.unlock().unwrap();
    assert_idle(&lock);
}

/// A `FairMutex`'s value, held across `.await`s by tasks on several worker threads: no
/// increment is lost, and the guard moves between threads.
#[test]
fn a_fair_mutex_is_locked_asynchronously_and_its_guard_moves_between_threads() {
    fn send<T: Send>(_: &T) {}
    let dir = TempDir::new("async-mutex");
    let counter = Arc::new(fairlock::FairMutex::<u64>::open(dir.join("m")).unwrap());
    let rt = runtime();
    let c = counter.clone();
    rt.block_on(async move {
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let c = c.clone();
                tokio::spawn(async move {
                    for _ in 0..25 {
                        let mut n = c.lock_async().await.unwrap();
                        send(&n);
                        let v = *n;
                        tokio::task::yield_now().await;
                        *n = v + 1;
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    assert_eq!(*counter.lock().unwrap(), 200);
    // A timeout, and a file that holds other data, as the blocking forms.
    let held = counter.lock().unwrap();
    let r = rt.block_on(counter.lock_async_timeout(Duration::from_millis(20)));
    assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    drop(held);
}

/// A named lock (one of many in one file) is locked asynchronously like a file of one lock.
#[test]
fn a_named_lock_is_locked_asynchronously() {
    let dir = TempDir::new("async-named");
    let open = |name: &str| {
        FairLock::options()
            .name(name)
            .open(dir.join("names"))
            .unwrap()
    };
    let (a, b) = (open("a"), open("b"));
    let rt = runtime();
    let ga = rt.block_on(a.lock_async()).unwrap();
    // Another name is independent; the same name waits.
    let gb = rt.block_on(b.lock_async()).unwrap();
    let mut again = open("a").lock_async();
    assert!(poll_once(&mut again).is_pending());
    ga.unlock().unwrap();
    resolve(&mut again, Duration::from_secs(5))
        .unwrap()
        .unlock()
        .unwrap();
    gb.unlock().unwrap();
}
