//! Waiting without timers: the next-in-line waiter sleeps on its slot word and the holder
//! thread's beacon (a robust mutex in the holder process's own segment), woken by the grant or
//! by the kernel at the holder thread's death — and never by a clock. Waiters further back
//! watch the one just ahead, and one that gives up nudges the one behind.
//!
//! Also what the beacons must survive: several watchers of one dead thread (every one is
//! woken), a `futex_waitv` refused by a seccomp filter (waiters poll, they do not spin), a fork
//! while another thread makes the beacon segment, dead holders' segments (not kept attached),
//! a waiter behind one that gave up (it sleeps, behind a fast or a slot holder), and a wait in
//! a thread-local destructor.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::{Shm, TempDir, Worker, role, wait_for_waiters};
use fairlock::FairLock;

/// Voluntary context switches of the calling thread so far.
fn voluntary_switches() -> i64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_THREAD is the calling thread.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut u) };
    u.ru_nvcsw
}

/// A waiter blocked for a second behind a live holder sleeps through it: a handful of
/// context switches (its spin, its park, its grant), where a timed liveness poll every
/// millisecond would wake it about a thousand times.
#[test]
fn a_waiter_blocked_for_a_second_wakes_only_for_its_grant() {
    let dir = TempDir::new("beacons-no-timer");
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::open(&path).unwrap());
    let held = lock.lock().unwrap();
    let waiter = {
        let lock = Arc::clone(&lock);
        std::thread::spawn(move || {
            let before = voluntary_switches();
            let g = lock.lock().unwrap();
            let switches = voluntary_switches() - before;
            assert!(!g.owner_died());
            drop(g);
            switches
        })
    };
    wait_for_waiters(&path, 1, Duration::from_secs(10));
    std::thread::sleep(Duration::from_secs(1));
    drop(held);
    let switches = waiter.join().unwrap();
    assert!(
        switches < 20,
        "the waiter woke {switches} times while blocked for a second"
    );
}

const GRANTED: usize = 0;
const TOKEN: usize = 1;

fn run_worker(r: &str) {
    let shm = Shm::open(common::env("FL_SHM").as_ref());
    if r == "hold-named" {
        let lock = FairLock::options()
            .name("jobs")
            .open(common::env("FL_LOCK"))
            .expect("worker open");
        let g = lock.lock().expect("lock");
        shm.write(TOKEN, g.token());
        shm.atomic(GRANTED).store(1, SeqCst);
        std::thread::sleep(Duration::from_secs(60));
        drop(g);
        return;
    }
    let lock = FairLock::open(common::env("FL_LOCK")).expect("worker open");
    match r {
        // Take the lock, report, and wait to be killed.
        "hold" => {
            let g = lock.lock().expect("lock");
            shm.write(TOKEN, g.token());
            shm.atomic(GRANTED).store(1, SeqCst);
            std::thread::sleep(Duration::from_secs(60));
            drop(g);
        }
        // Take the lock; meanwhile a thread of ours that claimed a beacon (it locked and
        // released the lock first) ends; report, and wait to be killed.
        "hold-while-a-sibling-ends" => {
            let lock = Arc::new(lock);
            let sibling_done = Arc::new(AtomicBool::new(false));
            {
                let lock = Arc::clone(&lock);
                let done = Arc::clone(&sibling_done);
                std::thread::spawn(move || {
                    drop(lock.lock().expect("sibling lock"));
                    // Wait until the main thread holds, then end (its beacon dies).
                    while shm_granted() == 0 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    done.store(true, SeqCst);
                });
            }
            // Let the sibling take and release the lock first, so that it owns a beacon.
            std::thread::sleep(Duration::from_millis(100));
            let g = lock.lock().expect("lock");
            shm.write(TOKEN, g.token());
            shm.atomic(GRANTED).store(1, SeqCst);
            std::thread::sleep(Duration::from_secs(60));
            drop(g);
        }
        other => panic!("unknown role {other}"),
    }
}

fn shm_granted() -> u64 {
    Shm::open(common::env("FL_SHM").as_ref()).read(GRANTED)
}

/// SIGKILL, then reap.
fn kill(w: &mut Worker) {
    let _ = w.child.kill();
    w.status = w.child.wait().ok();
}

/// The paths every worker of this file is given.
fn envs(dir: &TempDir) -> Vec<(&'static str, String)> {
    vec![
        ("FL_LOCK", dir.join("lock").display().to_string()),
        ("FL_LOCK2", dir.join("lock2").display().to_string()),
        ("FL_LOCK3", dir.join("lock3").display().to_string()),
        ("FL_SHM", dir.join("shm").display().to_string()),
    ]
}

fn worker(dir: &TempDir, test: &str, role: &str) -> Worker {
    Worker::spawn(dir.path(), test, role, role, &envs(dir))
}

/// A holder process SIGKILLed while a waiter sleeps (untimed) behind it: the kernel's
/// robust-list walk marks the holder thread's beacon and wakes the waiter, which takes over
/// with `owner_died` — and the waiter makes no 1 ms liveness poll meanwhile.
#[test]
fn a_killed_holder_s_waiter_is_woken_by_the_kernel() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    let test = "a_killed_holder_s_waiter_is_woken_by_the_kernel";
    let dir = TempDir::new("beacons-kill");
    let shm = Shm::create(&dir.join("shm"), 4);
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::open(&path).unwrap());
    let mut holder = worker(&dir, test, "hold");
    common::wait_until(Duration::from_secs(30), "the holder's grant", || {
        shm.read(GRANTED) == 1
    });
    let waiter = {
        let lock = Arc::clone(&lock);
        std::thread::spawn(move || {
            let before = voluntary_switches();
            let g = lock.lock().unwrap();
            let at = Instant::now();
            (g.owner_died(), g.token(), voluntary_switches() - before, at)
        })
    };
    wait_for_waiters(&path, 1, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(500));
    let killed = Instant::now();
    kill(&mut holder);
    let (died, token, switches, at) = waiter.join().unwrap();
    assert!(died, "the next holder is told the owner died");
    assert!(token > shm.read(TOKEN));
    assert!(
        switches < 20,
        "the waiter woke {switches} times in half a second behind the holder"
    );
    let took = at.saturating_duration_since(killed);
    assert!(took < Duration::from_secs(1), "recovery took {took:?}");
}

/// A thread of the holder's process that owned a beacon ends while the holder holds: its
/// death is not the holder's. The waiter behind it stays parked (the grant is the holder
/// thread's, whose beacon lives), and is granted only when the holder's process dies.
#[test]
fn a_sibling_thread_s_end_is_not_the_holder_s_death() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    let test = "a_sibling_thread_s_end_is_not_the_holder_s_death";
    let dir = TempDir::new("beacons-sibling");
    let shm = Shm::create(&dir.join("shm"), 4);
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::open(&path).unwrap());
    let mut holder = worker(&dir, test, "hold-while-a-sibling-ends");
    common::wait_until(Duration::from_secs(30), "the holder's grant", || {
        shm.read(GRANTED) == 1
    });
    let got = Arc::new(AtomicBool::new(false));
    let waiter = {
        let lock = Arc::clone(&lock);
        let got = Arc::clone(&got);
        std::thread::spawn(move || {
            let g = lock.lock().unwrap();
            got.store(true, SeqCst);
            g.owner_died()
        })
    };
    wait_for_waiters(&path, 1, Duration::from_secs(10));
    // The sibling has ended by now (it ends as soon as the holder holds); give a wrong
    // revocation every chance to happen.
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !got.load(SeqCst),
        "the waiter took over a live holder: {:?}",
        fairlock::inspect(&path)
    );
    kill(&mut holder);
    assert!(waiter.join().unwrap(), "told the owner died once it did");
}

/// The same for a named lock: the waiter finds the holder's segment through the name's entry,
/// its owner word and the holder process's file-wide entry, and is woken by the kernel.
#[test]
fn a_killed_holder_of_a_name_s_waiter_is_woken_by_the_kernel() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    let test = "a_killed_holder_of_a_name_s_waiter_is_woken_by_the_kernel";
    let dir = TempDir::new("beacons-kill-named");
    let shm = Shm::create(&dir.join("shm"), 4);
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::options().name("jobs").open(&path).unwrap());
    let mut holder = worker(&dir, test, "hold-named");
    common::wait_until(Duration::from_secs(30), "the holder's grant", || {
        shm.read(GRANTED) == 1
    });
    let waiter = {
        let lock = Arc::clone(&lock);
        std::thread::spawn(move || {
            let before = voluntary_switches();
            let g = lock.lock().unwrap();
            (g.owner_died(), voluntary_switches() - before)
        })
    };
    common::wait_until(Duration::from_secs(10), "the waiter queued", || {
        fairlock::inspect(&path)
            .ok()
            .and_then(|st| {
                st.names
                    .into_iter()
                    .find(|n| n.name.as_deref() == Some("jobs"))
            })
            .is_some_and(|n| !n.waiters.is_empty())
    });
    std::thread::sleep(Duration::from_millis(500));
    kill(&mut holder);
    let (died, switches) = waiter.join().unwrap();
    assert!(died, "the next holder is told the owner died");
    assert!(
        switches < 20,
        "the waiter woke {switches} times in half a second behind the holder of the name"
    );
}

/// Waiters further back than the next in line sleep too: each watches the waiter just ahead
/// of it (whose death would be its ticket's), woken by its grant or a nudge.
#[test]
fn waiters_further_back_sleep_through_a_long_hold() {
    let dir = TempDir::new("beacons-queue");
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::open(&path).unwrap());
    let held = lock.lock().unwrap();
    let waiters: Vec<_> = (0..3)
        .map(|k| {
            let lock = Arc::clone(&lock);
            let path = path.clone();
            let w = std::thread::spawn(move || {
                let before = voluntary_switches();
                let g = lock.lock().unwrap();
                let switches = voluntary_switches() - before;
                drop(g);
                switches
            });
            wait_for_waiters(&path, k + 1, Duration::from_secs(10));
            w
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    drop(held);
    for (k, w) in waiters.into_iter().enumerate() {
        let switches = w.join().unwrap();
        assert!(
            switches < 10,
            "waiter {k} woke {switches} times while blocked for a second"
        );
    }
}

/// A waiter that gives up (its timeout) nudges the one behind it, which was asleep on the
/// giver-up's beacon and must now watch the holder: when the holder's process is then killed,
/// it takes over at once (not after the 10 s backstop).
#[test]
fn a_waiter_that_gives_up_nudges_the_one_behind() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    let test = "a_waiter_that_gives_up_nudges_the_one_behind";
    let dir = TempDir::new("beacons-nudge");
    let shm = Shm::create(&dir.join("shm"), 4);
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::open(&path).unwrap());
    let mut holder = worker(&dir, test, "hold");
    common::wait_until(Duration::from_secs(30), "the holder's grant", || {
        shm.read(GRANTED) == 1
    });
    // The quitter's thread lives on after it gave up (its beacon does not die).
    let (gave_up_tx, gave_up) = std::sync::mpsc::channel();
    let done = Arc::new(AtomicBool::new(false));
    let quitter = {
        let (lock, done) = (Arc::clone(&lock), Arc::clone(&done));
        std::thread::spawn(move || {
            gave_up_tx
                .send(lock.lock_timeout(Duration::from_millis(300)).is_err())
                .unwrap();
            while !done.load(SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    wait_for_waiters(&path, 1, Duration::from_secs(10));
    let behind = {
        let lock = Arc::clone(&lock);
        std::thread::spawn(move || lock.lock().unwrap().owner_died())
    };
    wait_for_waiters(&path, 2, Duration::from_secs(10));
    assert!(gave_up.recv().unwrap(), "the first waiter timed out");
    std::thread::sleep(Duration::from_millis(200));
    let killed = Instant::now();
    kill(&mut holder);
    assert!(behind.join().unwrap(), "told the owner died");
    let took = killed.elapsed();
    done.store(true, SeqCst);
    quitter.join().unwrap();
    assert!(took < Duration::from_secs(2), "took over after {took:?}");
}

// ---------------------------------------------------------------------------------------------
// Several watchers of one dead thread, a refused futex_waitv, fork, and dead holders' segments
// ---------------------------------------------------------------------------------------------

const CPU_NS: usize = 1;
const HUNG: usize = 2;

/// CPU time of the calling thread, in ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: fills `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One attempt, in a fresh child: a thread opens the lock (making this process's beacon
/// segment) while this thread forks; the grandchild opens the lock under a 3 s alarm. 42 if
/// the grandchild hung.
fn fork_attempt(path: &str, attempt: u64) -> i32 {
    let go = Arc::new(AtomicBool::new(false));
    let t = {
        let (go, path) = (Arc::clone(&go), path.to_string());
        std::thread::spawn(move || {
            go.store(true, SeqCst);
            let lock = FairLock::open(&path).expect("open");
            drop(lock.lock().expect("lock"));
        })
    };
    while !go.load(SeqCst) {
        std::hint::spin_loop();
    }
    // Vary where the fork lands in the other thread's open.
    let spin = (attempt * 7919) % 300;
    let start = Instant::now();
    while start.elapsed() < Duration::from_micros(spin) {
        std::hint::spin_loop();
    }
    // SAFETY: the grandchild only opens the lock and `_exit`s.
    let g = unsafe { libc::fork() };
    if g == 0 {
        // SAFETY: a plain alarm: SIGALRM's default action ends a grandchild that hangs.
        unsafe { libc::alarm(3) };
        let ok = FairLock::open(path)
            .and_then(|l| l.lock().map(drop))
            .is_ok();
        // SAFETY: as above.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: reaps our child.
    unsafe { libc::waitpid(g, &mut status, 0) };
    t.join().unwrap();
    if libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGALRM {
        42
    } else {
        0
    }
}

/// Installs (for the calling thread and the threads it creates later) a seccomp filter that
/// makes `futex_waitv` fail with EPERM, and allows everything else.
fn deny_futex_waitv() {
    const RET_ERRNO: u32 = 0x0005_0000;
    const RET_ALLOW: u32 = 0x7fff_0000;
    let filter = [
        // A = seccomp_data.nr
        libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: libc::SYS_futex_waitv as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: RET_ERRNO | libc::EPERM as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: RET_ALLOW,
        },
    ];
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: a valid filter program, alive for the calls.
    unsafe {
        assert_eq!(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
        assert_eq!(
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog
            ),
            0,
            "seccomp"
        );
    }
}

/// The workers of the tests of this section.
fn run_watched_worker(r: &str) {
    let shm = Shm::open(common::env("FL_SHM").as_ref());
    match r {
        // One thread takes two locks (nested, as any code holding two locks does), reports,
        // and waits to be killed: both grants name the same thread beacon.
        "hold-two" => {
            let a = FairLock::open(common::env("FL_LOCK")).expect("open a");
            let b = FairLock::open(common::env("FL_LOCK2")).expect("open b");
            let ga = a.lock().expect("lock a");
            let gb = b.lock().expect("lock b");
            shm.atomic(GRANTED).store(1, SeqCst);
            std::thread::sleep(Duration::from_secs(120));
            drop((ga, gb));
        }
        // Behind a seccomp filter that refuses `futex_waitv` with EPERM (as container runtimes
        // whose profile predates it do), wait a second behind a holder of this process; report
        // the waiting thread's CPU time.
        "wait-without-futex-waitv" => {
            deny_futex_waitv();
            let lock = Arc::new(FairLock::open(common::env("FL_LOCK")).expect("open"));
            let held = Arc::new(AtomicBool::new(false));
            let holder = {
                let (lock, held) = (Arc::clone(&lock), Arc::clone(&held));
                std::thread::spawn(move || {
                    let g = lock.lock().expect("hold");
                    held.store(true, SeqCst);
                    std::thread::sleep(Duration::from_secs(1));
                    drop(g);
                })
            };
            while !held.load(SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
            let before = thread_cpu_ns();
            drop(lock.lock().expect("wait"));
            shm.write(CPU_NS, thread_cpu_ns() - before);
            shm.atomic(GRANTED).store(1, SeqCst);
            holder.join().unwrap();
        }
        // Fork repeatedly while another thread of ours opens the lock for the first time in
        // its process (which creates the process's beacon segment, `beacon::MINE`); each
        // grandchild opens the lock too, under an alarm. Report how many grandchildren hung.
        "fork-while-a-thread-makes-the-segment" => {
            let path = common::env("FL_LOCK");
            let until = Instant::now() + Duration::from_secs(8);
            let mut hung = 0;
            let mut attempts = 0;
            while Instant::now() < until && hung == 0 {
                attempts += 1;
                // SAFETY: the child only runs `attempt` and `_exit`s.
                let p = unsafe { libc::fork() };
                if p == 0 {
                    let code = fork_attempt(&path, attempts);
                    // SAFETY: ends the child without running the parent's exit handlers.
                    unsafe { libc::_exit(code) };
                }
                let mut status = 0;
                // SAFETY: reaps our child.
                unsafe { libc::waitpid(p, &mut status, 0) };
                if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 42 {
                    hung += 1;
                }
            }
            shm.write(CPU_NS, attempts);
            shm.write(HUNG, hung);
            shm.atomic(GRANTED).store(1, SeqCst);
        }
        other => panic!("unknown role {other}"),
    }
}

extern "C" fn on_sigusr1(_: libc::c_int) {}

/// Two waiters — the next in line of two different locks that one thread of another process
/// holds (nested locks) — both sleep on that thread's one beacon. The process is SIGKILLed:
/// the kernel's robust-list walk wakes *one* waiter of the beacon word (`futex_wake(.., 1)`).
/// Whichever path the woken waiter then leaves by — its interrupt hook said stop (Python's
/// `KeyboardInterrupt`), its deadline passed, its own `recover` revoked the holder first, its
/// grant arrived — the other waiter must not sleep on behind a dead holder: whoever sees
/// `OWNER_DIED` after a wait wakes every watcher of that beacon (and the untimed sleep has a
/// 10 s backstop besides).
///
/// Made deterministic here: the first waiter has an interrupt hook (re-queued on the beacon
/// every 50 ms); right after one of its polls the other waiter is nudged by a signal so that
/// it re-queues *behind* it; then the hook is told to stop and the holder is SIGKILLed. The
/// kernel wakes the first waiter, which gives up (or takes its lock).
///
/// Expected: the second waiter gets its lock, told the owner died, within seconds.
#[test]
fn every_watcher_of_a_dead_thread_s_beacon_is_woken() {
    if let Some(r) = role() {
        return run_watched_worker(&r);
    }
    let test = "every_watcher_of_a_dead_thread_s_beacon_is_woken";
    let dir = TempDir::new("beacons-two-watchers");
    let shm = Shm::create(&dir.join("shm"), 4);
    let path = dir.join("lock");
    let path2 = dir.join("lock2");
    let a = Arc::new(FairLock::open(&path).unwrap());
    let b = Arc::new(FairLock::open(&path2).unwrap());
    // SAFETY: installs a handler that does nothing (no SA_RESTART: the sleep returns EINTR).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigusr1 as *const () as usize;
        libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut());
    }
    let mut holder = worker(&dir, test, "hold-two");
    common::wait_until(Duration::from_secs(30), "the holder's grants", || {
        shm.read(GRANTED) == 1
    });
    let polls = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let (a, polls, stop, tx) = (
            Arc::clone(&a),
            Arc::clone(&polls),
            Arc::clone(&stop),
            tx.clone(),
        );
        std::thread::spawn(move || {
            let r = a.lock_interruptible(None, || {
                polls.fetch_add(1, SeqCst);
                stop.load(SeqCst)
            });
            let _ = tx.send((
                "a",
                r.map(|g| {
                    let d = g.owner_died();
                    std::mem::forget(g);
                    d
                })
                .map_err(|e| e.to_string()),
            ));
        });
    }
    wait_for_waiters(&path, 1, Duration::from_secs(10));
    let victim_tid = Arc::new(AtomicU64::new(0));
    {
        let (b, tid, tx) = (Arc::clone(&b), Arc::clone(&victim_tid), tx.clone());
        std::thread::spawn(move || {
            tid.store(u64::from(common::gettid()), SeqCst);
            let r = b.lock();
            let _ = tx.send((
                "b",
                r.map(|g| {
                    let d = g.owner_died();
                    std::mem::forget(g);
                    d
                })
                .map_err(|e| e.to_string()),
            ));
        });
    }
    wait_for_waiters(&path2, 1, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(200));
    // Right after a poll of the first waiter (it re-queued on the beacon), re-queue the second
    // behind it, then stop the first and kill the holder: all well within the next poll.
    let seen = polls.load(SeqCst);
    common::wait_until(Duration::from_secs(5), "a poll", || {
        polls.load(SeqCst) != seen
    });
    std::thread::sleep(Duration::from_millis(2));
    // SAFETY: signals one thread of ours, whose handler does nothing.
    unsafe {
        libc::syscall(
            libc::SYS_tgkill,
            libc::getpid(),
            victim_tid.load(SeqCst) as libc::pid_t,
            libc::SIGUSR1,
        );
    }
    std::thread::sleep(Duration::from_millis(5));
    stop.store(true, SeqCst);
    let killed = Instant::now();
    kill(&mut holder);
    let mut got = Vec::new();
    while got.len() < 2 {
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(x) => got.push(x),
            Err(_) => break,
        }
    }
    assert!(
        got.iter().any(|(n, r)| *n == "b" && *r == Ok(true)),
        "{:?} after the holder's death only {got:?} came back: the waiter of lock b sleeps \
         on; lock b: {:?}",
        killed.elapsed(),
        fairlock::inspect(&path2).map(|s| (s.waiters.len(), s.holder.is_some())),
    );
}

/// Where `futex_waitv` is refused with an error other than ENOSYS — EPERM from a container's
/// seccomp profile that predates the call (Docker's default profile before it listed it,
/// among others), which is how such runtimes answer unknown system calls — the untimed sleep
/// returns at once, every time; a waiter that kept calling it would spin through
/// `wait_for_grant`'s loop (recover, holder_beacon, a failing syscall) at 100% CPU for as long
/// as it waits. Any error but EINTR/EAGAIN/ETIMEDOUT marks the call broken for the process,
/// whose waiters then poll with a timed futex wait.
///
/// Expected: a second's wait costs the waiter little CPU.
#[test]
fn a_waiter_where_futex_waitv_is_refused_does_not_spin() {
    if let Some(r) = role() {
        return run_watched_worker(&r);
    }
    let test = "a_waiter_where_futex_waitv_is_refused_does_not_spin";
    let dir = TempDir::new("beacons-eperm");
    let shm = Shm::create(&dir.join("shm"), 4);
    let mut w = worker(&dir, test, "wait-without-futex-waitv");
    common::wait_all(std::slice::from_mut(&mut w), Duration::from_secs(30));
    assert_eq!(shm.read(GRANTED), 1);
    let cpu = Duration::from_nanos(shm.read(CPU_NS));
    assert!(
        cpu < Duration::from_millis(200),
        "the waiter used {cpu:?} of CPU while blocked for a second"
    );
}

/// A process's beacon segment is created (shmget, shmat, 1,024 `pthread_mutex_init`) by the
/// first thread that needs it, and watched segments are attached (`shmat`) as waits need them.
/// A `fork` while another thread is in the middle of either must not copy into the child a
/// lock that no thread of the child will ever unlock: its first `open`, lock or wait would
/// hang forever. (The segment is installed by CAS; the table of attachments is lock-free.)
///
/// Here: a process forks while another of its threads opens a lock for the first time; the
/// grandchild opens the lock under an alarm. Expected: no grandchild ever hangs.
#[test]
fn a_fork_never_copies_the_beacon_locks_locked() {
    if let Some(r) = role() {
        return run_watched_worker(&r);
    }
    let test = "a_fork_never_copies_the_beacon_locks_locked";
    let dir = TempDir::new("beacons-fork");
    let shm = Shm::create(&dir.join("shm"), 4);
    drop(FairLock::open(dir.join("lock")).unwrap());
    let mut w = worker(&dir, test, "fork-while-a-thread-makes-the-segment");
    common::wait_all(std::slice::from_mut(&mut w), Duration::from_secs(60));
    assert_eq!(shm.read(GRANTED), 1);
    let (attempts, hung) = (shm.read(CPU_NS), shm.read(HUNG));
    assert_eq!(
        hung, 0,
        "a forked child hung opening the lock ({hung} in {attempts} attempts)"
    );
}

/// The SysV segments (id, creator pid, attachments) on the machine.
fn segments() -> Vec<(i64, u32, u64)> {
    let text = std::fs::read_to_string("/proc/sysvipc/shm").unwrap();
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((f[1].parse().ok()?, f[4].parse().ok()?, f[6].parse().ok()?))
        })
        .collect()
}

/// A waiter attaches the beacon segment of each process it watches. A dead holder's segment
/// (64 KiB, marked `IPC_RMID`) vanishes with its last attachment, so watchers must not keep
/// it: a long-lived server that kept every dead client's segment would hold up to 256 of them
/// (16 MiB), counted against the machine-wide `kernel.shmmni` (4,096 by default) that every
/// other program's `shmget` shares, and with its table of attachments full it could never
/// watch a beacon again (polling every millisecond instead). Attachments are counted per wait;
/// the last wait that saw the owner's death detaches the segment, and a full table recycles
/// unused entries.
///
/// Expected: once the holder is dead, its grant revoked and every handle here dropped, its
/// segment is gone.
#[test]
fn a_dead_holder_s_segment_is_not_kept_by_its_watcher() {
    if let Some(r) = role() {
        return run_watched_worker(&r);
    }
    let test = "a_dead_holder_s_segment_is_not_kept_by_its_watcher";
    let dir = TempDir::new("beacons-leak");
    let shm = Shm::create(&dir.join("shm"), 4);
    let path = dir.join("lock");
    {
        let a = Arc::new(FairLock::open(&path).unwrap());
        let _b = FairLock::open(dir.join("lock2")).unwrap();
        let mut holder = worker(&dir, test, "hold-two");
        common::wait_until(Duration::from_secs(30), "the holder's grants", || {
            shm.read(GRANTED) == 1
        });
        let pid = holder.pid();
        assert!(
            segments().iter().any(|s| s.1 == pid),
            "the holder made a segment"
        );
        let waiter = {
            let a = Arc::clone(&a);
            std::thread::spawn(move || a.lock().unwrap().owner_died())
        };
        wait_for_waiters(&path, 1, Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(200));
        kill(&mut holder);
        assert!(waiter.join().unwrap());
        drop(a);
        std::thread::sleep(Duration::from_millis(100));
        let kept: Vec<_> = segments().into_iter().filter(|s| s.1 == pid).collect();
        assert!(
            kept.is_empty(),
            "the dead holder's segment (id, creator, attachments) is still alive: {kept:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Behind a waiter that gave up; a wait in a thread-local destructor
// ---------------------------------------------------------------------------------------------

/// Voluntary context switches of thread `tid` of this process so far.
fn switches_of(tid: u64) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// One scenario: `holder` holds (fast, or through a slot when `slot_holder`), a first waiter
/// gives up after its timeout, and the waiter behind it — now the next in line — is watched for
/// a second. Returns its voluntary context switches in that second.
fn switches_behind_a_quitter(slot_holder: bool) -> u64 {
    let dir = TempDir::new("beacons-quitter");
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::open(&path).unwrap());
    let release = Arc::new(AtomicBool::new(false));
    let held = Arc::new(AtomicBool::new(false));
    // The holder: a thread of ours, fast (the lock free) or granted through its slot (queued
    // behind a first, short fast hold).
    let first = if slot_holder {
        Some(lock.lock().unwrap())
    } else {
        None
    };
    let holder = {
        let (lock, release, held) = (Arc::clone(&lock), Arc::clone(&release), Arc::clone(&held));
        std::thread::spawn(move || {
            let g = lock.lock().unwrap();
            held.store(true, SeqCst);
            while !release.load(SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
            drop(g);
        })
    };
    if let Some(g) = first {
        wait_for_waiters(&path, 1, Duration::from_secs(10));
        drop(g);
    }
    common::wait_until(Duration::from_secs(10), "the holder's grant", || {
        held.load(SeqCst)
    });
    let quitter = {
        let lock = Arc::clone(&lock);
        std::thread::spawn(move || lock.lock_timeout(Duration::from_millis(300)).is_err())
    };
    wait_for_waiters(&path, 1, Duration::from_secs(10));
    let tid = Arc::new(AtomicU64::new(0));
    let behind = {
        let (lock, tid) = (Arc::clone(&lock), Arc::clone(&tid));
        std::thread::spawn(move || {
            tid.store(u64::from(common::gettid()), SeqCst);
            drop(lock.lock().unwrap());
        })
    };
    wait_for_waiters(&path, 2, Duration::from_secs(10));
    assert!(quitter.join().unwrap(), "the first waiter timed out");
    // Let the one behind settle (its spin, its park) as next in line.
    std::thread::sleep(Duration::from_millis(100));
    let tid = tid.load(SeqCst);
    let before = switches_of(tid);
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let switches = switches_of(tid) - before;
    let took = started.elapsed();
    release.store(true, SeqCst);
    holder.join().unwrap();
    behind.join().unwrap();
    eprintln!("slot_holder={slot_holder}: {switches} wake-ups in {took:?}");
    switches
}

/// A nudge makes the waiter behind one that gave up look again at who is ahead: it is next in
/// line now, and sleeps on the holder's beacon. The holder is the first unfinished ticket before
/// its own, stepping back over final ones (the given-up, `Abandoned`, ticket in between); for a
/// fast holder, `head − 1` once every ticket from `head` on is final. Polling instead (every
/// `head_poll_ns`, 1 ms: an OFD probe and a recovery pass each time) for the rest of the hold
/// would be about a thousand wake-ups a second, where DESIGN promises none.
#[test]
fn the_waiter_behind_one_that_gave_up_sleeps_behind_a_fast_holder() {
    let switches = switches_behind_a_quitter(false);
    assert!(
        switches < 20,
        "the next in line woke {switches} times in a second behind a live fast holder"
    );
}

/// The same behind a holder granted through its slot (ticket `t − 2`, the given-up `t − 1`
/// between it and the next in line).
#[test]
fn the_waiter_behind_one_that_gave_up_sleeps_behind_a_slot_holder() {
    let switches = switches_behind_a_quitter(true);
    assert!(
        switches < 20,
        "the next in line woke {switches} times in a second behind a live slot holder"
    );
}

/// Which thread's beacon thread `tid` of this process sleeps on, if it is in `futex_waitv`
/// (the owner TID in the robust mutex word its second entry names).
fn watched_tid(tid: u64) -> Option<u32> {
    let read = || std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).ok();
    let line = read()?;
    let mut f = line.split_whitespace();
    if f.next()? != libc::SYS_futex_waitv.to_string() {
        return None;
    }
    let waitv = u64::from_str_radix(f.next()?.trim_start_matches("0x"), 16).ok()?;
    // struct futex_waitv { u64 val; u64 uaddr; u32 flags; u32 reserved; }: entry 1's uaddr.
    // SAFETY: the array is on the stack of a live thread of ours, blocked in the call (checked
    // again below); the beacon word lies in a segment attached while that call lasts.
    let uaddr = unsafe { std::ptr::read_volatile((waitv + 32) as *const u64) };
    // SAFETY: as above: the beacon word of a segment attached while that call lasts.
    let owner = unsafe { std::ptr::read_volatile(uaddr as *const u32) } & 0x3FFF_FFFF;
    (read()? == line).then_some(owner)
}

/// A waiter further back watches the beacon of the waiter just ahead, and a waiter that gives
/// up nudges the one behind it (`Sleeping → Waiting` and a wake). The nudge
/// (`advance::wake_successor`) acts on a `Sleeping` word, and the one behind goes to sleep in
/// two steps — it reads the ticket ahead (`ahead_beacon`: `Waiting`, beacon B), *then* CASes
/// its own word `Waiting → Sleeping` and sleeps on B — so a give-up can come in between and
/// find the word still `Waiting`. A Dekker pair of `SeqCst` fences covers that window: the
/// sleeper re-reads the ticket ahead after making its word `Sleeping`, and the nudger fences
/// before it looks. A waiter left asleep on the beacon of a live thread that is no longer in
/// the queue would be woken by nothing but its own grant or the 10 s backstop: if the holder
/// then died, the lock would stay stuck for up to 10 s.
///
/// Here: a holder (a thread of ours) holds; rounds of a first waiter that gives up almost at
/// once (a 0–2 µs timeout: queue, spin, give up) and a second that queues right behind it
/// (started when the lock word's counter moves) with a 1 ms timeout. After the first has
/// returned, the second must never be found in `futex_waitv` on the first's beacon (read from
/// /proc/self/task/TID/syscall and the robust mutex word's owner TID). A race: 10 s of rounds.
#[test]
fn a_waiter_is_never_left_asleep_on_the_beacon_of_one_that_gave_up() {
    let dir = TempDir::new("beacons-lost-nudge");
    let path = dir.join("lock");
    let lock = Arc::new(FairLock::open(&path).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let held = Arc::new(AtomicBool::new(false));
    let holder = {
        let (lock, stop, held) = (Arc::clone(&lock), Arc::clone(&stop), Arc::clone(&held));
        std::thread::spawn(move || {
            let g = lock.lock().unwrap();
            held.store(true, SeqCst);
            while !stop.load(SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
            drop(g);
        })
    };
    common::wait_until(Duration::from_secs(10), "the holder", || held.load(SeqCst));
    // The lock word (header offset 64; the ticket counter in its top bits), read-only: the
    // second waiter starts right after the first took its ticket.
    let file = std::fs::File::open(&path).unwrap();
    // SAFETY: a read-only shared mapping of the file's first page, kept for the test.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(&file),
            0,
        )
    } as usize;
    assert_ne!(base as isize, -1);
    // SAFETY: the lock word, an aligned 8-byte atomic in the mapping.
    let word: &'static AtomicU64 = unsafe { &*((base + 64) as *const AtomicU64) };
    // Rounds: `go` is the round number both waiters start on; each reports the round it ended.
    let go = Arc::new(AtomicU64::new(0));
    let first_done = Arc::new(AtomicU64::new(0));
    let second_done = Arc::new(AtomicU64::new(0));
    let first_tid = Arc::new(AtomicU64::new(0));
    let second_tid = Arc::new(AtomicU64::new(0));
    let spawn = |done: &Arc<AtomicU64>, tid: &Arc<AtomicU64>, second: bool| {
        let fd = Arc::clone(&first_done);
        let done_first = move |round: u64| fd.load(SeqCst) != round;
        let (lock, go, done, tid, stop) = (
            Arc::clone(&lock),
            Arc::clone(&go),
            Arc::clone(done),
            Arc::clone(tid),
            Arc::clone(&stop),
        );
        std::thread::spawn(move || {
            tid.store(u64::from(common::gettid()), SeqCst);
            let mut round = 0;
            loop {
                let before = word.load(SeqCst) >> 24;
                while go.load(SeqCst) == round {
                    if stop.load(SeqCst) {
                        return;
                    }
                    std::hint::spin_loop();
                }
                round += 1;
                if second {
                    // Right after the first waiter took its ticket, and a little later each
                    // round: vary where ours lands in its short wait.
                    while word.load(SeqCst) >> 24 == before && done_first(round) {
                        std::hint::spin_loop();
                    }
                    let r = lock.lock_timeout(Duration::from_millis(1));
                    assert!(r.is_err(), "the holder holds");
                } else {
                    // Give up a little later each round (0 to 2 µs after queueing: its spin).
                    let r = lock.lock_timeout(Duration::from_nanos((round % 41) * 50));
                    assert!(r.is_err(), "the holder holds");
                }
                done.store(round, SeqCst);
            }
        })
    };
    let first = spawn(&first_done, &first_tid, false);
    let second = spawn(&second_done, &second_tid, true);
    common::wait_until(Duration::from_secs(5), "the waiters' tids", || {
        first_tid.load(SeqCst) != 0 && second_tid.load(SeqCst) != 0
    });
    let (t1, t2) = (first_tid.load(SeqCst), second_tid.load(SeqCst));
    let started = Instant::now();
    let mut rounds = 0u64;
    let mut stranded = 0u64;
    while started.elapsed() < Duration::from_secs(10) && stranded == 0 {
        rounds += 1;
        go.store(rounds, SeqCst);
        while first_done.load(SeqCst) != rounds {
            std::thread::yield_now();
        }
        // The first has given up. Look at the second a few times while it waits.
        let until = Instant::now() + Duration::from_micros(800);
        while Instant::now() < until && second_done.load(SeqCst) != rounds {
            if watched_tid(t2) == Some(t1 as u32) {
                stranded += 1;
                break;
            }
            std::thread::sleep(Duration::from_micros(150));
        }
        while second_done.load(SeqCst) != rounds {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    stop.store(true, SeqCst);
    first.join().unwrap();
    second.join().unwrap();
    holder.join().unwrap();
    eprintln!("{rounds} rounds in {:?}", started.elapsed());
    assert_eq!(
        stranded, 0,
        "after {rounds} rounds: the second waiter slept on the beacon of the first, which had \
         given up (its nudge missed)"
    );
}

const WAITING: usize = 1;
const TOLD: usize = 2;
const DONE: usize = 3;

/// Locks the lock at `FL_LOCK` when the thread's thread-locals are destroyed (code that
/// flushes a thread's buffers to a shared file at thread exit does this).
struct LockAtExit;

impl Drop for LockAtExit {
    fn drop(&mut self) {
        let shm = Shm::open(common::env("FL_SHM").as_ref());
        let lock = FairLock::open(common::env("FL_LOCK")).expect("open at exit");
        shm.atomic(WAITING).store(1, SeqCst);
        let g = lock.lock().expect("lock at exit");
        shm.write(TOLD, u64::from(g.owner_died()) + 1);
    }
}

thread_local! {
    static AT_EXIT: LockAtExit = const { LockAtExit };
}

/// The workers of the thread-local destructor's test.
fn run_exit_worker(r: &str) {
    let shm = Shm::open(common::env("FL_SHM").as_ref());
    match r {
        // Take both locks, report, and wait to be killed.
        "hold" => {
            let lock = FairLock::open(common::env("FL_LOCK")).expect("open");
            let lock3 = FairLock::open(common::env("FL_LOCK3")).expect("open 3");
            let g = lock.lock().expect("lock");
            let g3 = lock3.lock().expect("lock 3");
            shm.atomic(GRANTED).store(1, SeqCst);
            std::thread::sleep(Duration::from_secs(60));
            drop((g, g3));
        }
        // A thread that used locks (a given-up wait behind the holder of lock 3: its beacon
        // watched) and locks `FL_LOCK` in a thread-local's destructor at its exit.
        "lock-at-thread-exit" => {
            let t = std::thread::spawn(|| {
                let lock3 = FairLock::open(common::env("FL_LOCK3")).expect("open 3");
                // The crate's own thread-locals first (as any earlier use of a lock would): an
                // uncontended lock of another file.
                let other = FairLock::open(common::env("FL_LOCK2")).expect("open 2");
                drop(other.lock().expect("lock 2"));
                AT_EXIT.with(|_| ());
                // A wait that watches the holder's beacon (and so touches `DEFERRED`), on
                // another lock it holds (the wait at exit then has no given-up ticket in front
                // of it: see `switches_behind_a_quitter` for that case).
                assert!(lock3.lock_timeout(Duration::from_millis(50)).is_err());
            });
            t.join().expect("the thread ended cleanly");
            shm.atomic(DONE).store(1, SeqCst);
        }
        other => panic!("unknown role {other}"),
    }
}

/// Detaching a dead process's segment is deferred to the watcher's next wait or its exit: the
/// entry is recorded in `DEFERRED`, a thread-local with a destructor. A thread may wait in a
/// thread-local destructor of its own that runs after `DEFERRED`'s (registered before it: the
/// common order for a destructor that locks at thread exit) and see the holder die; the
/// deferral then finds `DEFERRED` gone (`try_with`) and detaches at once — a panic there ("cannot
/// access a Thread Local Storage value during or after destruction") would abort the process,
/// as any panic in a thread-local destructor does.
///
/// Expected: the waiter takes over, told the owner died, and its process exits normally.
#[test]
fn a_wait_in_a_thread_local_destructor_survives_the_holder_s_death() {
    if let Some(r) = role() {
        return run_exit_worker(&r);
    }
    let test = "a_wait_in_a_thread_local_destructor_survives_the_holder_s_death";
    let dir = TempDir::new("beacons-tls");
    let shm = Shm::create(&dir.join("shm"), 4);
    let path = dir.join("lock");
    drop(FairLock::open(&path).unwrap());
    let mut holder = Worker::spawn(dir.path(), test, "hold", "hold", &envs(&dir));
    common::wait_until(Duration::from_secs(30), "the holder's grant", || {
        shm.read(GRANTED) == 1
    });
    let mut waiter = Worker::spawn(
        dir.path(),
        test,
        "lock-at-thread-exit",
        "waiter",
        &envs(&dir),
    );
    common::wait_until(Duration::from_secs(30), "the wait at thread exit", || {
        shm.read(WAITING) == 1
    });
    wait_for_waiters(&path, 1, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(200));
    let _ = holder.child.kill();
    holder.status = holder.child.wait().ok();
    common::wait_until(Duration::from_secs(20), "the waiter's exit", || {
        waiter.poll()
    });
    let status = waiter.status.unwrap();
    assert!(
        status.success() && shm.read(TOLD) == 2 && shm.read(DONE) == 1,
        "the waiter process ended with {status} (told: {}, done: {}):\n{}",
        shm.read(TOLD),
        shm.read(DONE),
        waiter.stderr()
    );
}
