//! Adversarial review of thread beacons (commit 8932c34, "Waiting without timers"). Each test
//! shows a bug: it fails on the code as reviewed.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::{Shm, TempDir, Worker, role, wait_for_waiters};
use fairlock::FairLock;

const GRANTED: usize = 0;
const CPU_NS: usize = 1;

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

fn envs(dir: &TempDir) -> Vec<(&'static str, String)> {
    vec![
        ("FL_LOCK", dir.join("lock").display().to_string()),
        ("FL_LOCK2", dir.join("lock2").display().to_string()),
        ("FL_SHM", dir.join("shm").display().to_string()),
    ]
}

fn worker(dir: &TempDir, test: &str, role: &str) -> Worker {
    Worker::spawn(dir.path(), test, role, role, &envs(dir))
}

/// SIGKILL, then reap.
fn kill(w: &mut Worker) {
    let _ = w.child.kill();
    w.status = w.child.wait().ok();
}

fn run_worker(r: &str) {
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
        // its process (which creates the process's beacon segment under `beacon::MINE`); each
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
            shm.write(2, hung);
            shm.atomic(GRANTED).store(1, SeqCst);
        }
        other => panic!("unknown role {other}"),
    }
}

extern "C" fn on_sigusr1(_: libc::c_int) {}

/// Two waiters — the next in line of two different locks that one thread of another process
/// holds (nested locks) — both sleep on that thread's one beacon. The process is SIGKILLed:
/// the kernel's robust-list walk wakes *one* waiter of the beacon word (`futex_wake(.., 1)`),
/// and the woken waiter is relied on to wake the others (`wake_watchers`). It does so only on
/// one path of `wait_for_grant` (next in line, holder still found, `OWNER_DIED` read); a
/// woken waiter that leaves by any other path — its interrupt hook said stop (Python's
/// `KeyboardInterrupt`), its deadline passed, its own `recover` revoked the holder first, its
/// grant arrived — swallows the kernel's only wake-up. The other waiter, parked without a
/// timer, then sleeps forever behind a dead holder.
///
/// Made deterministic here: the first waiter has an interrupt hook (re-queued on the beacon
/// every 50 ms); right after one of its polls the other waiter is nudged by a signal so that
/// it re-queues *behind* it; then the hook is told to stop and the holder is SIGKILLed. The
/// kernel wakes the first waiter, which gives up (or takes its lock) without waking anyone.
///
/// Expected: the second waiter gets its lock, told the owner died, within seconds.
/// Root cause: `core::wait::wait_for_grant` calls `wake_watchers` only on the path that
/// revokes; fix: after every `wait_watching`, if the beacon shows `OWNER_DIED`, wake all its
/// watchers before anything else (and/or keep a long backstop timeout on the untimed sleep).
#[test]
fn every_watcher_of_a_dead_thread_s_beacon_is_woken() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    let test = "every_watcher_of_a_dead_thread_s_beacon_is_woken";
    let dir = TempDir::new("beacons-review-two-watchers");
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
/// returns at once, every time: the next-in-line waiter spins through `wait_for_grant`'s
/// loop (recover, holder_beacon, a failing syscall) at 100% CPU for as long as it waits.
/// `sys::futex::wait_watching` falls back to a timed wait only on ENOSYS.
///
/// Expected: a second's wait costs the waiter little CPU (it did before beacons: a timed
/// futex wait per poll). Fix: fall back on any error but EINTR/EAGAIN/ETIMEDOUT (and
/// remember, process-wide, that the call does not work).
#[test]
fn a_waiter_where_futex_waitv_is_refused_does_not_spin() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    let test = "a_waiter_where_futex_waitv_is_refused_does_not_spin";
    let dir = TempDir::new("beacons-review-eperm");
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

/// `sys::beacon`'s process-wide locks `MINE` (held while the segment is created: shmget,
/// shmat, 1,024 `pthread_mutex_init`) and `ATTACHED` (held across `shmat`/`shmctl` of a
/// watched segment) are std mutexes taken outside the fork lock. A `fork` while another
/// thread holds one copies it locked into the child, where no thread will ever unlock it:
/// the child's first `open` (registration writes `beacon::identity()`, which locks `MINE`)
/// or first lock (`thread_beacon`) or wait (`watch`) hangs forever — exactly the bug the fork
/// lock was introduced for (sys/thread.rs: "a fork while another thread held one of those
/// locks left it locked forever in the child, whose next `open` then deadlocked").
///
/// Here: a process forks while another of its threads opens a lock for the first time; the
/// grandchild opens the lock under an alarm. Expected: no grandchild ever hangs. Fix: take
/// `MINE` and `ATTACHED` only under `ForkGuard` (their sections are short; shmat of a new
/// segment is the longest), or make them fork-safe (reset in the child handler).
#[test]
fn a_fork_never_copies_the_beacon_locks_locked() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    let test = "a_fork_never_copies_the_beacon_locks_locked";
    let dir = TempDir::new("beacons-review-fork");
    let shm = Shm::create(&dir.join("shm"), 4);
    drop(FairLock::open(dir.join("lock")).unwrap());
    let mut w = worker(&dir, test, "fork-while-a-thread-makes-the-segment");
    common::wait_all(std::slice::from_mut(&mut w), Duration::from_secs(60));
    assert_eq!(shm.read(GRANTED), 1);
    let (attempts, hung) = (shm.read(CPU_NS), shm.read(2));
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

/// A waiter attaches the beacon segment of every process it ever watched and never detaches
/// it (`sys::beacon::watch`: "Never detached ... so bounded" by `MAX_ATTACHED` = 256). So a
/// dead holder's segment (64 KiB, marked `IPC_RMID`, meant to "vanish with its last
/// attachment and never leak") lives on for as long as any process that once waited behind
/// it: a long-lived server keeps up to 256 dead clients' segments (16 MiB) and, summed over
/// its processes, they count against the machine-wide `kernel.shmmni` (4,096 by default)
/// that every other program's `shmget` shares — 16 such servers exhaust it, after which no
/// new process gets beacons and other software's `shmget` fails with ENOSPC. And once 256
/// distinct holders were watched, that waiter never watches a beacon again (`watch` answers
/// `None`: it polls every millisecond for the rest of its life).
///
/// Expected: once the holder is dead, its grant revoked and every handle here dropped, its
/// segment is gone. Fix: detach a watched segment once nobody in the process sleeps on it
/// (a per-segment count of watchers, taken around `wait_watching`; detach on the last when
/// its owner is dead or the count falls to zero), or re-validate and recycle entries.
#[test]
fn a_dead_holder_s_segment_is_not_kept_by_its_watcher() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    let test = "a_dead_holder_s_segment_is_not_kept_by_its_watcher";
    let dir = TempDir::new("beacons-review-leak");
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
