//! Second adversarial review of issue 15's beacons (commits 21a1525, 81d1844, 470c342,
//! 5eef81d: predecessor beacons, the nudge, wake-all, the weighted fetch_add, deferred
//! detaching), by a fresh session. Each test failed on the code as reviewed (docs/TESTING.md,
//! "Issue 15").

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::{Shm, TempDir, Worker, role, wait_for_waiters};
use fairlock::FairLock;

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
    let dir = TempDir::new("br2-quitter");
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

/// 21a1525's nudge makes the waiter behind one that gave up "look again at who is ahead": it
/// is next in line now and should sleep on the holder's beacon. But `holder_beacon` finds the
/// holder only at ticket `t − 1` (a slot `Held`) or, for a fast holder, only while `head == t`;
/// with the given-up (`Abandoned`) ticket in between, neither holds, so the next in line polls
/// every `head_poll_ns` (1 ms: an OFD probe and a recovery pass each time) for the rest of the
/// hold — about a thousand wake-ups a second, where DESIGN promises none.
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

/// 21a1525: a waiter further back watches the beacon of the waiter just ahead, and a waiter
/// that gives up nudges the one behind it (`Sleeping → Waiting` and a wake). But the nudge
/// (`advance::wake_successor`) only acts on a `Sleeping` word, and the one behind goes to sleep
/// in two steps — it reads the ticket ahead (`ahead_beacon`: `Waiting`, beacon B), *then* CASes
/// its own word `Waiting → Sleeping` and sleeps on B. A give-up in between (`Abandoned`, then
/// the nudge finds the word still `Waiting` and does nothing) leaves it asleep on the beacon of
/// a live thread that is no longer in the queue: nothing but its own grant or the 10 s
/// backstop wakes it. If the holder then dies, the lock stays stuck for up to 10 s (the same
/// stall the nudge was added for; before 21a1525 that waiter polled every 50 ms).
///
/// Here: a holder (a thread of ours) holds; rounds of a first waiter that gives up almost at
/// once (a 0–2 µs timeout: queue, spin, give up) and a second that queues right behind it
/// (started when the lock word's counter moves) with a 1 ms timeout. After the first has
/// returned, the second must never be found in `futex_waitv` on the first's beacon (read from
/// /proc/self/task/TID/syscall and the robust mutex word's owner TID). Races: failed on the
/// reviewed code within a few seconds (5 hits in 7,106 rounds, ~20 s, in one measured run;
/// 10 s here); none in 30 s with the fix.
#[test]
fn a_waiter_is_never_left_asleep_on_the_beacon_of_one_that_gave_up() {
    let dir = TempDir::new("br2-lost-nudge");
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

const GRANTED: usize = 0;
const WAITING: usize = 1;
const TOLD: usize = 2;
const DONE: usize = 3;

fn envs(dir: &TempDir) -> Vec<(&'static str, String)> {
    vec![
        ("FL_LOCK", dir.join("lock").display().to_string()),
        ("FL_SHM", dir.join("shm").display().to_string()),
        ("FL_LOCK2", dir.join("lock2").display().to_string()),
        ("FL_LOCK3", dir.join("lock3").display().to_string()),
    ]
}

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

fn run_worker(r: &str) {
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
                // another lock it holds (a ticket given up in front of ours would make the wait
                // at exit poll instead: see the first tests).
                assert!(lock3.lock_timeout(Duration::from_millis(50)).is_err());
            });
            t.join().expect("the thread ended cleanly");
            shm.atomic(DONE).store(1, SeqCst);
        }
        other => panic!("unknown role {other}"),
    }
}

/// 5eef81d defers detaching a dead process's segment to the watcher's next wait or its exit:
/// `Attachment::drop` records the entry with `DEFERRED.with(..)`, a thread-local with a
/// destructor. A thread that waits in a thread-local destructor of its own that runs after
/// `DEFERRED`'s (registered before it: the common order for a destructor that locks at thread
/// exit) and sees the holder die panics in `Attachment::drop` ("cannot access a Thread Local
/// Storage value during or after destruction") — and a panic in a thread-local destructor
/// aborts the process. (`flush_deferred` uses `try_with` for this reason; `drop` does not.)
///
/// Expected: the waiter takes over, told the owner died, and its process exits normally.
#[test]
fn a_wait_in_a_thread_local_destructor_survives_the_holder_s_death() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    let test = "a_wait_in_a_thread_local_destructor_survives_the_holder_s_death";
    let dir = TempDir::new("br2-tls");
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
