//! Named locks in one file, across real processes: 10,000 names in one file of at most
//! 64 MiB with independent exclusion; FIFO per name; a dead holder of a name recovered; unused
//! names' space reused (and their tokens still rising); a file full of live names refused with
//! a typed error; every kind by name; creators and reclaimers killed half-way.
//!
//! Also, on the raw file: a dead holder recovered whatever its entry's generation; a named
//! `FairMutex` keeps its value as a file of its own does; a forked child never uses a name as
//! another kind; a mismatched `FairMutex` refuses a stale file of names without writing it;
//! garbage in the names header and impossible capacities never panic.

mod common;

use std::fs::OpenOptions as FsOpen;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{Shm, TempDir, Worker, log_append, log_entries, role, wait_all};
use fairlock::{Error, FairLock, LockKind, Status};
use proptest::prelude::*;

fn named(path: &std::path::Path, key: &str) -> FairLock {
    FairLock::options()
        .name(key)
        .open(path)
        .unwrap_or_else(|e| panic!("open {key:?}: {e}"))
}

/// The status of `key` in the file of named locks at `path`.
fn status_of(path: &std::path::Path, key: &str) -> Option<Status> {
    let st = fairlock::inspect(path).expect("inspect");
    assert_eq!(st.kind, LockKind::Names);
    st.names
        .into_iter()
        .find(|s| s.name.as_deref() == Some(key))
}

/// Waits until `key` shows `n` published waiters.
fn wait_for_name_waiters(path: &std::path::Path, key: &str, n: usize) {
    common::wait_until(
        Duration::from_secs(30),
        &format!("{n} waiters on {key}"),
        || status_of(path, key).is_some_and(|s| s.waiters.len() == n),
    );
}

const MANY: usize = 10_000;

#[test]
fn ten_thousand_names_in_one_file_exclude_independently() {
    if role().is_some() {
        // Every even name is held by the parent: busy here; every odd one is free.
        let path = common::env("FL_LOCK");
        let t0 = Instant::now();
        let locks: Vec<FairLock> = (0..MANY)
            .map(|i| named(path.as_ref(), &format!("user-{i}")))
            .collect();
        let opened = t0.elapsed();
        for (i, l) in locks.iter().enumerate() {
            match l.try_lock() {
                Ok(_g) => assert!(i % 2 == 1, "name {i} held by the parent, yet granted here"),
                Err(Error::WouldBlock { .. }) => {
                    assert!(i % 2 == 0, "name {i} is free, yet refused")
                }
                Err(e) => panic!("name {i}: {e}"),
            }
        }
        eprintln!("child: opened {MANY} existing names in {opened:?}");
        return;
    }
    let dir = TempDir::new("names-ten-thousand");
    let path = dir.join("names.lock");
    let t0 = Instant::now();
    let locks: Vec<FairLock> = (0..MANY)
        .map(|i| named(&path, &format!("user-{i}")))
        .collect();
    let created = t0.elapsed();
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(size <= 64 << 20, "file of {size} bytes for {MANY} names");
    let guards: Vec<_> = locks
        .iter()
        .step_by(2)
        .map(|l| l.lock().expect("lock"))
        .collect();
    let mut w = vec![Worker::spawn(
        dir.path(),
        "ten_thousand_names_in_one_file_exclude_independently",
        "child",
        "child",
        &[("FL_LOCK", path.display().to_string())],
    )];
    wait_all(&mut w, Duration::from_secs(120));
    let st = fairlock::inspect(&path).expect("inspect");
    assert_eq!(st.names.len(), MANY);
    let held = st.names.iter().filter(|s| s.holder.is_some()).count();
    assert_eq!(held, MANY / 2);
    drop(guards);
    eprintln!(
        "created {MANY} names in {created:?}; file {size} bytes; {}",
        w[0].stderr().trim()
    );
}

#[test]
fn fifo_per_name_across_processes() {
    const PER_NAME: usize = 4;
    if role().is_some() {
        let path = common::env("FL_LOCK");
        let key = common::env("FL_NAME");
        let id: u64 = common::env_parse("FL_ID");
        let shm = Shm::open(common::env("FL_SHM").as_ref());
        let l = named(path.as_ref(), &key);
        let g = l.lock().expect("lock");
        log_append(&shm, id);
        drop(g);
        return;
    }
    let dir = TempDir::new("names-fifo");
    let path = dir.join("names.lock");
    // In a file of 10,000 names (opened and closed: kept, not in use).
    for i in 0..MANY {
        drop(named(&path, &format!("user-{i}")));
    }
    let (a, b) = (named(&path, "queue-a"), named(&path, "queue-b"));
    let (ga, gb) = (a.lock().unwrap(), b.lock().unwrap());
    let mut workers = Vec::new();
    let mut shms = Vec::new();
    for (n, key) in ["queue-a", "queue-b"].iter().enumerate() {
        let shm_path = dir.join(&format!("shm-{key}"));
        shms.push(Shm::create(&shm_path, 1 + PER_NAME));
        for k in 0..PER_NAME {
            // Arrivals interleave between the names; each waits until the one before it on
            // its name is queued.
            let id = (n * 100 + k) as u64 + 1;
            workers.push(Worker::spawn(
                dir.path(),
                "fifo_per_name_across_processes",
                "waiter",
                &format!("{key}-{k}"),
                &[
                    ("FL_LOCK", path.display().to_string()),
                    ("FL_NAME", key.to_string()),
                    ("FL_ID", id.to_string()),
                    ("FL_SHM", shm_path.display().to_string()),
                ],
            ));
            wait_for_name_waiters(&path, key, k + 1);
        }
    }
    // A third name is free all along.
    assert!(named(&path, "queue-c").try_lock().is_ok());
    drop(ga);
    drop(gb);
    wait_all(&mut workers, Duration::from_secs(60));
    for (n, shm) in shms.iter().enumerate() {
        let want: Vec<u64> = (0..PER_NAME).map(|k| (n * 100 + k) as u64 + 1).collect();
        assert_eq!(log_entries(shm), want, "name {n} out of arrival order");
    }
}

#[test]
fn a_dead_holder_of_a_name_is_recovered_and_other_names_are_untouched() {
    if role().is_some() {
        let path = common::env("FL_LOCK");
        let l = named(path.as_ref(), "job-7");
        let g = l.lock().expect("lock");
        std::mem::forget(g);
        std::thread::sleep(Duration::from_secs(600));
        return;
    }
    let dir = TempDir::new("names-dead-holder");
    let path = dir.join("names.lock");
    let other = named(&path, "job-8");
    let mut w = Worker::spawn(
        dir.path(),
        "a_dead_holder_of_a_name_is_recovered_and_other_names_are_untouched",
        "holder",
        "holder",
        &[("FL_LOCK", path.display().to_string())],
    );
    common::wait_until(Duration::from_secs(30), "the child to hold job-7", || {
        status_of(&path, "job-7").is_some_and(|s| s.holder.is_some())
    });
    let seven = named(&path, "job-7");
    assert!(matches!(seven.try_lock(), Err(Error::WouldBlock { .. })));
    let g8 = other.try_lock().expect("job-8 is free");
    assert!(!g8.owner_died());
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(w.pid() as i32, libc::SIGKILL) };
    let status = w.child.wait().unwrap();
    w.status = Some(status);
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let g7 = seven
        .lock_timeout(Duration::from_secs(10))
        .expect("job-7 after the kill");
    assert!(g7.owner_died(), "the next holder of job-7 is told");
    assert!(!g8.owner_died());
}

#[test]
fn unused_names_space_is_reused_and_tokens_keep_rising() {
    let dir = TempDir::new("names-reuse");
    let path = dir.join("names.lock");
    let open = |key: &str| {
        FairLock::options()
            .name(key)
            .name_capacity(32)
            .open(&path)
            .unwrap_or_else(|e| panic!("{key}: {e}"))
    };
    // One name used a few times: its tokens.
    let first = open("keeper");
    let mut last_token = 0;
    for _ in 0..5 {
        last_token = first.lock().unwrap().token();
    }
    drop(first);
    let size = std::fs::metadata(&path).unwrap().len();
    // 1,000 names, one at a time, in a file of 32 records: only reuse makes room.
    for i in 0..1000 {
        let l = open(&format!("passing-{i}"));
        drop(l.lock().unwrap());
    }
    assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
    let again = open("keeper");
    let t = again.lock().unwrap().token();
    assert!(t > last_token, "token {t} after reuse, {last_token} before");
    let st = fairlock::inspect(&path).unwrap();
    assert!(st.names.len() <= 32);
}

/// A name's tokens keep rising across reuse when it comes back with another fairness: a
/// bounded name's tokens are `(ticket + 1) · 512`, so a floor kept in tickets let the name,
/// re-created strict, start at tokens far below its last (1536, then 4): the floor is kept in
/// tokens. Both ways round, several times.
#[test]
fn a_name_back_with_another_fairness_keeps_its_tokens_rising() {
    let dir = TempDir::new("names-reuse-fairness");
    let path = dir.join("names.lock");
    let mut last_token = 0;
    for round in 0..6 {
        let fairness = if round % 2 == 0 {
            fairlock::Fairness::Bounded(4)
        } else {
            fairlock::Fairness::Strict
        };
        let x = FairLock::options()
            .name("x")
            .name_capacity(8)
            .fairness(fairness)
            .open(&path)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        for _ in 0..3 {
            let t = x.lock().unwrap().token();
            assert!(
                t > last_token,
                "round {round} ({fairness:?}): token {t} after {last_token}"
            );
            last_token = t;
        }
        drop(x);
        // Other names, each opened and dropped, until "x" is reclaimed.
        for i in 0.. {
            assert!(i < 100, "x never reclaimed");
            drop(
                FairLock::options()
                    .name(format!("other-{round}-{i}"))
                    .open(&path)
                    .unwrap(),
            );
            let st = fairlock::inspect(&path).unwrap();
            if !st.names.iter().any(|n| n.name.as_deref() == Some("x")) {
                break;
            }
        }
    }
}

/// The little-endian integer of `N` bytes at `at` in `b`.
fn le(b: &[u8], at: usize, n: usize) -> u64 {
    b[at..at + n]
        .iter()
        .rev()
        .fold(0, |v, &x| (v << 8) | u64::from(x))
}

/// A record whose kind cannot be read after a reboot is freed; the name created again keeps
/// its tokens rising: the floor is raised as by a sweep (else "x" would come back at token 1
/// after 1536).
#[test]
fn a_record_freed_at_a_reboot_raises_the_token_floor() {
    let dir = TempDir::new("names-reboot-floor");
    let path = dir.join("names.lock");
    let mut last = 0;
    {
        let x = FairLock::options()
            .name("x")
            .name_capacity(8)
            .fairness(fairlock::Fairness::Bounded(4))
            .open(&path)
            .unwrap();
        for _ in 0..3 {
            last = x.lock().unwrap().token();
        }
    }
    // Another boot's file (boot id changed), with x's record's kind unreadable.
    let mut b = std::fs::read(&path).unwrap();
    let (record_size, records) = (le(&b, 32, 4) as usize, le(&b, 36, 4) as usize);
    let (records_offset, image_offset) = (le(&b, 88, 8) as usize, le(&b, 96, 8) as usize);
    let bounded: Vec<usize> = (0..records)
        .map(|r| records_offset + r * record_size + image_offset)
        .filter(|&h| le(&b, h + 40, 4) == 0 && le(&b, h + 44, 4) == 4)
        .collect();
    assert_eq!(bounded.len(), 1, "x's record (exclusive, bound 4)");
    b[bounded[0] + 40..bounded[0] + 44].copy_from_slice(&0xdead_u32.to_le_bytes());
    for x in &mut b[48..64] {
        *x ^= 0x5a;
    }
    // A file of its own (this process keeps the first one open, and its beacon with it).
    let stale = dir.join("stale.lock");
    std::fs::write(&stale, &b).unwrap();
    let x = FairLock::options().name("x").open(&stale).unwrap();
    let t = x.lock().unwrap().token();
    assert!(t > last, "token {t} after {last}");
}

/// A names header whose token floor leaves no token above it (corrupt) refuses to create a
/// name, rather than start one whose tokens wrap to 0.
#[test]
fn a_token_floor_with_no_token_above_it_is_refused() {
    let dir = TempDir::new("names-floor-max");
    let path = dir.join("names.lock");
    drop(FairLock::options().name("a").open(&path).unwrap());
    let mut b = std::fs::read(&path).unwrap();
    b[64..72].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(&path, &b).unwrap();
    match FairLock::options().name("b").open(&path) {
        Err(Error::Corrupt { .. }) => {}
        Ok(l) => panic!("created, first token {}", l.lock().unwrap().token()),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn names_in_use_are_never_reclaimed_and_a_full_file_says_so() {
    if role().is_some() {
        // Holds 6 names open (one of them locked) until told to go.
        let path = common::env("FL_LOCK");
        let shm = Shm::open(common::env("FL_SHM").as_ref());
        let locks: Vec<FairLock> = (0..6)
            .map(|i| {
                FairLock::options()
                    .name(format!("kept-{i}"))
                    .name_capacity(8)
                    .open(&path)
                    .unwrap()
            })
            .collect();
        let _g = locks[0].lock().unwrap();
        shm.write(0, 1);
        while shm.read(0) != 2 {
            std::thread::sleep(Duration::from_millis(1));
        }
        return;
    }
    let dir = TempDir::new("names-full");
    let path = dir.join("names.lock");
    let shm_path = dir.join("shm");
    let shm = Shm::create(&shm_path, 1);
    let mut w = vec![Worker::spawn(
        dir.path(),
        "names_in_use_are_never_reclaimed_and_a_full_file_says_so",
        "keeper",
        "keeper",
        &[
            ("FL_LOCK", path.display().to_string()),
            ("FL_SHM", shm_path.display().to_string()),
        ],
    )];
    common::wait_until(Duration::from_secs(30), "the keeper", || shm.read(0) == 1);
    let open = |key: &str| FairLock::options().name(key).name_capacity(8).open(&path);
    // Churn through many names: each sweep must keep the keeper's six.
    for i in 0..200 {
        let l = open(&format!("churn-{i}")).unwrap();
        drop(l.try_lock().unwrap());
    }
    let kept = open("kept-0").unwrap();
    assert!(
        matches!(kept.try_lock(), Err(Error::WouldBlock { .. })),
        "the keeper's locked name was reclaimed under it"
    );
    // Two more names of our own fill the 8 records; a ninth has no room.
    let mine: Vec<FairLock> = (0..2)
        .map(|i| open(&format!("mine-{i}")).unwrap())
        .collect();
    match open("one-too-many") {
        Err(e @ Error::TooManyNames { capacity: 8, .. }) => {
            assert!(e.to_string().contains("names.lock"), "{e}")
        }
        other => panic!("expected TooManyNames, got {other:?}"),
    }
    // Once a name of ours is closed, its record is reused.
    drop(mine);
    open("one-too-many").expect("room after closing names");
    shm.write(0, 2);
    wait_all(&mut w, Duration::from_secs(30));
}

#[test]
fn every_kind_by_name_and_mismatches_refused() {
    let dir = TempDir::new("names-kinds");
    let path = dir.join("names.lock");
    let rw = FairLock::options().name("rw").open_rwlock(&path).unwrap();
    let r1 = rw.read().unwrap();
    // Readers hold together (another thread: a thread's second read is refused as re-entry).
    std::thread::scope(|s| {
        s.spawn(|| {
            let r2 = rw.try_read().expect("a second reader");
            drop(r2);
        });
        s.spawn(|| assert!(matches!(rw.try_write(), Err(Error::WouldBlock { .. }))));
    });
    drop(r1);
    let sem = FairLock::options()
        .name("gpu")
        .open_semaphore(&path, 2)
        .unwrap();
    let (p1, p2) = (sem.acquire().unwrap(), sem.acquire().unwrap());
    assert!(sem.try_acquire().is_err());
    drop((p1, p2));
    let rl = FairLock::options().name("re").open_rlock(&path).unwrap();
    let (g1, g2) = (rl.lock().unwrap(), rl.lock().unwrap());
    drop((g2, g1));
    // A name keeps its kind; a file of names is not a file of one lock, and back.
    match FairLock::options().name("rw").open(&path) {
        Err(Error::KindMismatch { found, .. }) => assert!(found.contains("\"rw\""), "{found}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        FairLock::open(&path),
        Err(Error::KindMismatch { .. })
    ));
    let single = dir.join("single.lock");
    drop(FairLock::open(&single).unwrap());
    assert!(matches!(
        FairLock::options().name("x").open(&single),
        Err(Error::KindMismatch { .. })
    ));
    // Keys: any UTF-8 up to 255 bytes.
    let long = "é".repeat(127) + "x";
    assert_eq!(long.len(), 255);
    named(&path, &long);
    named(&path, "");
    assert!(matches!(
        FairLock::options().name("x".repeat(256)).open(&path),
        Err(Error::InvalidOption { .. })
    ));
    let st = fairlock::inspect(&path).unwrap();
    let kinds: Vec<(String, LockKind)> = st
        .names
        .iter()
        .map(|s| (s.name.clone().unwrap(), s.kind))
        .collect();
    assert!(kinds.contains(&("rw".into(), LockKind::RwLock)));
    assert!(kinds.contains(&("gpu".into(), LockKind::Semaphore { permits: 2 })));
    assert!(kinds.contains(&(long.clone(), LockKind::Exclusive)));
    // A named FairMutex keeps its value per name.
    let m1 = FairLock::options()
        .name("counter-1")
        .open_mutex::<u64>(&dir.join("mutexes.lock"))
        .unwrap();
    let m2 = FairLock::options()
        .name("counter-2")
        .open_mutex::<u64>(&dir.join("mutexes.lock"))
        .unwrap();
    *m1.lock().unwrap() += 5;
    *m2.lock().unwrap() += 7;
    let again = FairLock::options()
        .name("counter-1")
        .open_mutex::<u64>(&dir.join("mutexes.lock"))
        .unwrap();
    assert_eq!(*again.lock().unwrap(), 5);
    assert_eq!(*m2.lock().unwrap(), 7);
}

#[test]
fn threads_opening_one_new_name_at_once_share_one_record() {
    let dir = TempDir::new("names-threads");
    let path = std::sync::Arc::new(dir.join("names.lock"));
    let counter = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (path, counter) = (path.clone(), counter.clone());
            std::thread::spawn(move || {
                for i in 0..200 {
                    let l = named(&path, &format!("shared-{}", i % 5));
                    let g = l.lock().unwrap();
                    // Exclusion per name within the process: one holder of each.
                    counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    drop(g);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let st = fairlock::inspect(&*path).unwrap();
    assert_eq!(st.names.len(), 5, "{:?}", st.names);
    assert_eq!(counter.load(std::sync::atomic::Ordering::SeqCst), 1600);
}

/// Runs this test binary's `test` as a worker with `FAIRLOCK_CRASH=point`, expecting it to be
/// killed there.
#[cfg(feature = "__test-crash-points")]
fn killed_at(dir: &TempDir, test: &str, point: &str, path: &std::path::Path) {
    let mut w = Worker::spawn(
        dir.path(),
        test,
        "victim",
        point,
        &[
            ("FL_LOCK", path.display().to_string()),
            ("FAIRLOCK_CRASH", point.to_string()),
        ],
    );
    let status = w.child.wait().unwrap();
    w.status = Some(status);
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "the worker was to die at {point}: {}",
        w.stderr()
    );
}

#[cfg(feature = "__test-crash-points")]
#[test]
fn a_creator_killed_half_way_leaves_the_name_to_the_next() {
    if role().is_some() {
        // Killed inside the creation of "fresh" (names.creating), holding the names lock.
        let _ = named(common::env("FL_LOCK").as_ref(), "fresh");
        return;
    }
    let dir = TempDir::new("names-creator-killed");
    let path = dir.join("names.lock");
    drop(named(&path, "other"));
    killed_at(
        &dir,
        "a_creator_killed_half_way_leaves_the_name_to_the_next",
        "names.creating",
        &path,
    );
    // The names lock died with it; the half-created record is passed by lookups and reused.
    assert!(status_of(&path, "fresh").is_none());
    let l = named(&path, "fresh");
    let g = l.try_lock().expect("the name works");
    assert!(!g.owner_died());
    drop(g);
    let st = fairlock::inspect(&path).unwrap();
    assert_eq!(st.names.len(), 2, "{:?}", st.names);
}

#[cfg(feature = "__test-crash-points")]
#[test]
fn a_reclaimer_killed_half_way_leaves_the_name_in_use() {
    if role().is_some() {
        // Opens new names until a sweep starts, and is killed at its first reclaim check.
        let path = common::env("FL_LOCK");
        for i in 0.. {
            let _ = FairLock::options()
                .name(format!("victim-{i}"))
                .name_capacity(8)
                .open(&path);
        }
        return;
    }
    let dir = TempDir::new("names-reclaimer-killed");
    let path = dir.join("names.lock");
    let open = |key: &str| {
        FairLock::options()
            .name(key)
            .name_capacity(8)
            .open(&path)
            .unwrap()
    };
    let kept = open("kept");
    let guard = kept.lock().unwrap();
    killed_at(
        &dir,
        "a_reclaimer_killed_half_way_leaves_the_name_in_use",
        "names.reclaiming",
        &path,
    );
    // Whatever record it was checking, the name in use is still the same lock: held.
    let again = open("kept");
    std::thread::scope(|s| {
        s.spawn(|| {
            let r = again.try_lock();
            assert!(matches!(r, Err(Error::WouldBlock { .. })), "{r:?}");
        });
    });
    drop(guard);
    assert!(again.try_lock().is_ok());
    // Every name, the one whose record it left marked included, opens (an opener does not wait
    // for the names lock again and again while the mark stays).
    let names: Vec<String> = fairlock::inspect(&path)
        .unwrap()
        .names
        .into_iter()
        .filter_map(|s| s.name)
        .collect();
    let p2 = path.clone();
    common::with_time_limit(Duration::from_secs(20), "opening every name", move || {
        for n in names {
            FairLock::options()
                .name(n.as_str())
                .name_capacity(8)
                .open(&p2)
                .unwrap();
        }
    });
    // And the table works on: new names, reclaiming what the dead process had open.
    for i in 0..50 {
        drop(open(&format!("after-{i}")).try_lock().unwrap());
    }
}

#[test]
fn a_killed_process_s_names_are_reclaimed() {
    if role().is_some() {
        let path = common::env("FL_LOCK");
        let locks: Vec<FairLock> = (0..7)
            .map(|i| {
                FairLock::options()
                    .name(format!("dead-{i}"))
                    .name_capacity(8)
                    .open(&path)
                    .unwrap()
            })
            .collect();
        let _g = locks[0].lock().unwrap();
        std::fs::write(common::env("FL_MARK"), b"").unwrap();
        std::thread::sleep(Duration::from_secs(600));
        return;
    }
    let dir = TempDir::new("names-killed-owner");
    let path = dir.join("names.lock");
    let mark = dir.join("mark");
    let mut w = Worker::spawn(
        dir.path(),
        "a_killed_process_s_names_are_reclaimed",
        "owner",
        "owner",
        &[
            ("FL_LOCK", path.display().to_string()),
            ("FL_MARK", mark.display().to_string()),
        ],
    );
    common::wait_until(Duration::from_secs(30), "the owner", || mark.exists());
    let open = |key: &str| FairLock::options().name(key).name_capacity(8).open(&path);
    // 7 of 8 records are the owner's: one more name fits, the next does not.
    let one = open("one").unwrap();
    assert!(matches!(open("two"), Err(Error::TooManyNames { .. })));
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(w.pid() as i32, libc::SIGKILL) };
    w.status = Some(w.child.wait().unwrap());
    // Its names are reclaimed by the next creator's sweep; the one it held, if reopened
    // before that, tells its next holder.
    let held = open("dead-0").unwrap();
    assert!(held.lock().unwrap().owner_died());
    let more: Vec<FairLock> = (0..6).map(|i| open(&format!("new-{i}")).unwrap()).collect();
    drop((one, held, more));
}

/// A process holding name `victim` is killed; no one opens `victim` for a while, and 40 other
/// names come and go in a file of 16 records, so that sweeps run again and again. The next
/// holder of `victim` is still told its owner died, and its tokens did not fall: a record that
/// holds news of a death is not reclaimed (it was: the name came back in a fresh record,
/// `owner_died()` false). Once told, the record is reclaimed like any other.
#[test]
fn a_dead_holder_s_news_survives_sweeps() {
    if role().is_some() {
        let path = common::env("FL_LOCK");
        let l = FairLock::options()
            .name("victim")
            .name_capacity(16)
            .open(&path)
            .unwrap();
        let g = l.lock().unwrap();
        std::fs::write(common::env("FL_MARK"), g.token().to_string()).unwrap();
        std::mem::forget(g);
        std::thread::sleep(Duration::from_secs(600));
        return;
    }
    let dir = TempDir::new("names-news-swept");
    let path = dir.join("names.lock");
    let mark = dir.join("mark");
    let mut w = Worker::spawn(
        dir.path(),
        "a_dead_holder_s_news_survives_sweeps",
        "victim",
        "victim",
        &[
            ("FL_LOCK", path.display().to_string()),
            ("FL_MARK", mark.display().to_string()),
        ],
    );
    common::wait_until(Duration::from_secs(30), "the victim's holder", || {
        std::fs::read_to_string(&mark).is_ok_and(|s| !s.is_empty())
    });
    let victim_token: u64 = std::fs::read_to_string(&mark).unwrap().parse().unwrap();
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(w.pid() as i32, libc::SIGKILL) };
    w.status = Some(w.child.wait().unwrap());
    let open = |key: &str| {
        FairLock::options()
            .name(key)
            .name_capacity(16)
            .open(&path)
            .unwrap_or_else(|e| panic!("{key}: {e}"))
    };
    for i in 0..40 {
        let l = open(&format!("passer-{i}"));
        drop(l.lock().unwrap());
    }
    let victim = open("victim");
    let g = victim
        .lock_timeout(Duration::from_secs(10))
        .expect("victim");
    assert!(
        g.owner_died(),
        "the next holder of victim is told its owner died"
    );
    assert!(
        g.token() > victim_token,
        "tokens rise: {} after {victim_token}",
        g.token()
    );
    drop(g);
    drop(victim);
    // Told: the record is an ordinary unused one now, reclaimed by the next sweeps.
    for i in 40..80 {
        let l = open(&format!("passer-{i}"));
        drop(l.lock().unwrap());
    }
    let again = open("victim");
    let g = again.lock().unwrap();
    assert!(!g.owner_died(), "told once");
}

#[test]
fn a_file_of_names_from_another_boot_keeps_its_names_tokens_and_values() {
    let dir = TempDir::new("names-other-boot");
    let live = dir.join("live");
    // Snapshot the file while "job" is held with grants behind it and a value is stored.
    let (bytes, held) = {
        let job = named(&live, "job");
        for _ in 0..20 {
            drop(job.lock().unwrap());
        }
        let mutexes = dir.join("live-mutexes");
        let m = FairLock::options()
            .name("count")
            .open_mutex::<u64>(&mutexes)
            .unwrap();
        *m.lock().unwrap() = 41;
        let g = job.lock().unwrap();
        (
            (
                std::fs::read(&live).unwrap(),
                std::fs::read(&mutexes).unwrap(),
            ),
            g.token(),
        )
    };
    // The same files, as if left over from an earlier boot (another boot id).
    let stale = |name: &str, b: &[u8]| {
        let mut b = b.to_vec();
        for x in &mut b[48..64] {
            *x ^= 0x5a;
        }
        let p = dir.join(name);
        std::fs::write(&p, &b).unwrap();
        p
    };
    let path = stale("stale", &bytes.0);
    let job = named(&path, "job");
    let g = job
        .lock_timeout(Duration::from_secs(5))
        .expect("the previous boot's holder does not block");
    assert!(g.token() > held, "token {} repeats {held}", g.token());
    assert!(!g.owner_died(), "a new boot starts afresh");
    let after = std::fs::read(&path).unwrap();
    assert_eq!(&after[48..64], &bytes.0[48..64], "this boot's id written");
    let mutexes = stale("stale-mutexes", &bytes.1);
    let m = FairLock::options()
        .name("count")
        .open_mutex::<u64>(&mutexes)
        .unwrap();
    assert_eq!(*m.lock().unwrap(), 41, "a named FairMutex keeps its value");
}

#[test]
fn a_recently_used_file_of_names_still_checks_what_it_is_opened_as() {
    // The process keeps the file open after its last name is closed (found again by one
    // `stat`): a FairMutex of another type, and a lock without a name, are still refused.
    let dir = TempDir::new("names-recent");
    let path = dir.join("mutexes.lock");
    let m = FairLock::options()
        .name("a")
        .open_mutex::<u64>(&path)
        .unwrap();
    *m.lock().unwrap() = 9;
    drop(m);
    assert!(matches!(
        FairLock::options().name("a").open_mutex::<u32>(&path),
        Err(Error::DataMismatch { .. })
    ));
    assert!(matches!(
        FairLock::open(&path),
        Err(Error::KindMismatch { .. })
    ));
    let again = FairLock::options()
        .name("a")
        .open_mutex::<u64>(&path)
        .unwrap();
    assert_eq!(*again.lock().unwrap(), 9);
    // A file replaced at the same path is a new file, not the one kept open.
    drop(again);
    std::fs::remove_file(&path).unwrap();
    let fresh = FairLock::options()
        .name("a")
        .open_mutex::<u64>(&path)
        .unwrap();
    assert_eq!(*fresh.lock().unwrap(), 0);
}

/// What a property test of named locks does to a file of 8 or 16 records.
#[derive(Clone, Debug)]
enum NameOp {
    /// A process locks name `k` and dies holding it.
    HoldAndDie(u8),
    /// `n` fresh names are created, locked once and closed (sweeps run when the file fills).
    Churn(u8),
    /// Name `k` is opened, locked, told or not that its owner died, unlocked and closed.
    Use(u8),
}

/// A worker for `names_keep_their_death_news`: locks `FL_NAME` and dies holding it.
fn hold_and_die() {
    let l = FairLock::options()
        .name(common::env("FL_NAME"))
        .name_capacity(common::env_parse("FL_CAP"))
        .open(common::env("FL_LOCK"))
        .unwrap();
    let g = l.lock().unwrap();
    std::mem::forget(g);
    // SAFETY: `_exit` ends the process at once (no destructors): a holder killed holding.
    unsafe { libc::_exit(0) }
}

fn names_keep_their_death_news(capacity: u32, ops: &[NameOp], case: usize) {
    let dir = TempDir::new(&format!("names-news-prop-{case}"));
    let path = dir.join("names.lock");
    let open = |key: &str| {
        FairLock::options()
            .name(key)
            .name_capacity(capacity)
            .open(&path)
    };
    let mut news = [false; 4];
    let mut tokens = [0u64; 4];
    let mut fresh = 0u32;
    for op in ops {
        match *op {
            NameOp::HoldAndDie(k) => {
                if news[k as usize] {
                    continue; // its last holder is dead already: locking would wait
                }
                let mut w = Worker::spawn(
                    dir.path(),
                    "names_keep_their_death_news_across_sweeps",
                    "holder",
                    &format!("h{case}-{k}"),
                    &[
                        ("FL_LOCK", path.display().to_string()),
                        ("FL_NAME", format!("n{k}")),
                        ("FL_CAP", capacity.to_string()),
                    ],
                );
                wait_all(std::slice::from_mut(&mut w), Duration::from_secs(30));
                news[k as usize] = true;
            }
            NameOp::Churn(n) => {
                for _ in 0..n {
                    fresh += 1;
                    match open(&format!("churn-{fresh}")) {
                        Ok(l) => drop(l.lock().unwrap()),
                        // Every record holds a name in use or one whose news is untold.
                        Err(Error::TooManyNames { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            NameOp::Use(k) => {
                let l = match open(&format!("n{k}")) {
                    Ok(l) => l,
                    Err(Error::TooManyNames { .. }) if !news[k as usize] => continue,
                    Err(e) => panic!("n{k}: {e}"),
                };
                let g = l.lock_timeout(Duration::from_secs(10)).expect("lock");
                assert_eq!(
                    g.owner_died(),
                    news[k as usize],
                    "n{k}: told {} after {ops:?}",
                    g.owner_died()
                );
                assert!(g.token() > tokens[k as usize], "n{k}: tokens rise");
                tokens[k as usize] = g.token();
                news[k as usize] = false;
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Names whose holders die, churned by other names in a small file (so that sweeps reclaim
    /// what they can), and used again: each use is told exactly when its last holder died, and
    /// its tokens keep rising.
    #[test]
    fn names_keep_their_death_news_across_sweeps(
        capacity in prop_oneof![Just(8u32), Just(16u32)],
        ops in prop::collection::vec(
            prop_oneof![
                2 => (0..4u8).prop_map(NameOp::HoldAndDie),
                2 => (1..40u8).prop_map(NameOp::Churn),
                3 => (0..4u8).prop_map(NameOp::Use),
            ],
            1..12,
        ),
    ) {
        if role().is_some() {
            hold_and_die();
            return Ok(());
        }
        static CASE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let case = CASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        names_keep_their_death_news(capacity, &ops, case);
    }
}

// ---------------------------------------------------------------------------------------------
// The raw file: generations, values, kinds and headers
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// Raw access to a file of named locks (docs/FILE_FORMAT.md, "Files of named locks").

const BEACON_BASE: u64 = 1 << 40;

fn u32_at(f: &std::fs::File, off: u64) -> u32 {
    let mut b = [0u8; 4];
    f.read_exact_at(&mut b, off).unwrap();
    u32::from_le_bytes(b)
}

fn u64_at(f: &std::fs::File, off: u64) -> u64 {
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, off).unwrap();
    u64::from_le_bytes(b)
}

struct Layout {
    record_size: u64,
    records: u32,
    processes: u32,
    records_offset: u64,
    image_offset: u64,
    participants: u32,
}

fn layout(f: &std::fs::File) -> Layout {
    Layout {
        participants: u32_at(f, 28),
        record_size: u64::from(u32_at(f, 32)),
        records: u32_at(f, 36),
        processes: u32_at(f, 44),
        records_offset: u64_at(f, 88),
        image_offset: u64_at(f, 96),
    }
}

/// The record holding `key` (state `Used`), if any.
fn record_of(f: &std::fs::File, l: &Layout, key: &str) -> Option<u64> {
    (0..u64::from(l.records)).find(|&r| {
        let e = l.records_offset + r * l.record_size;
        let state = u64_at(f, e);
        let len = u32_at(f, e + 16) as usize;
        if state & 0xFF != 2 || len != key.len() {
            return false;
        }
        let mut k = vec![0u8; len];
        f.read_exact_at(&mut k, e + 24).unwrap();
        k == key.as_bytes()
    })
}

/// The non-zero owner words of record `r`'s participant entries (their `claim` field, a u64 at
/// offset 16): (entry, word).
fn owner_words(f: &std::fs::File, l: &Layout, r: u64) -> Vec<(u32, u64)> {
    let image = l.records_offset + r * l.record_size + l.image_offset;
    (0..l.participants)
        .map(|i| (i, u64_at(f, image + 192 + u64::from(i) * 32 + 16)))
        .filter(|&(_, w)| w != 0)
        .collect()
}

/// Takes OFD write locks on `[start, start + len)` through `f` (its own open file
/// description).
fn ofd_lock(f: &std::fs::File, start: u64, len: u64) {
    if len == 0 {
        return;
    }
    // SAFETY: all-zero is a valid flock.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start as libc::off_t;
    fl.l_len = len as libc::off_t;
    // SAFETY: valid descriptor and flock.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_SETLK, &mut fl) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
}

fn wait_for(path: &Path) {
    common::wait_until(Duration::from_secs(30), &path.display().to_string(), || {
        path.exists()
    });
}

/// A dead process's owner word is never taken for one's own, however many times its file-wide
/// entry was claimed since: the owner word keeps 52 bits of the entry's generation, so after
/// 2^20 claims (a wrap of a 20-bit generation) the name's dead holder is still recovered.
#[test]
fn a_dead_holder_is_recovered_whatever_its_entry_s_generation() {
    if role().is_some() {
        // The victim: holds "job" and is killed.
        let path = common::env("FL_LOCK");
        let l = FairLock::options().name("job").open(&path).unwrap();
        let g = l.lock().unwrap();
        std::fs::write(common::env("FL_MARK"), b"").unwrap();
        std::thread::sleep(Duration::from_secs(600));
        drop(g);
        return;
    }
    let dir = TempDir::new("names-generation-wrap");
    let path = dir.join("names.lock");
    let mark = dir.join("mark");
    let mut w = Worker::spawn(
        dir.path(),
        "a_dead_holder_is_recovered_whatever_its_entry_s_generation",
        "victim",
        "victim",
        &[
            ("FL_LOCK", path.display().to_string()),
            ("FL_MARK", mark.display().to_string()),
        ],
    );
    wait_for(&mark);
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(w.pid() as i32, libc::SIGKILL) };
    w.status = Some(w.child.wait().unwrap());

    let f = FsOpen::new().read(true).write(true).open(&path).unwrap();
    let l = layout(&f);
    let r = record_of(&f, &l, "job").expect("the record of job");
    let owners = owner_words(&f, &l, r);
    assert_eq!(owners.len(), 1, "{owners:?}");
    let word = owners[0].1;
    let j = ((word & 0xFFF) - 1) as u32;
    // Entry j is claimed 2^20 - 1 more times by processes that never open "job" (short-lived
    // `fairlock run --name other` jobs whose pid maps to j, say): fast-forwarded here.
    let at = 192 + u64::from(j) * 32;
    let g = u64_at(&f, at);
    assert_eq!(g & 0xF_FFFF, (word >> 12) & 0xF_FFFF);
    f.write_all_at(&(g + (1 << 20) - 1).to_le_bytes(), at)
        .unwrap();
    // The next process to claim entry j (here: us, every other entry being busy) ...
    let busy = FsOpen::new().read(true).write(true).open(&path).unwrap();
    ofd_lock(&busy, BEACON_BASE, u64::from(j));
    ofd_lock(
        &busy,
        BEACON_BASE + u64::from(j) + 1,
        u64::from(l.processes - j - 1),
    );
    // ... opens "job", whose holder is dead: it must be recovered.
    let job = FairLock::options().name("job").open(&path).unwrap();
    match job.lock_timeout(Duration::from_secs(3)) {
        Ok(g) => assert!(g.owner_died()),
        Err(e) => panic!("the dead holder of job was never recovered: {e}"),
    }
    drop(busy);
}

/// A named `FairMutex<T>` keeps its value as a `FairMutex` of a file of its own does (for good,
/// even across a reboot): names of a file with data are never reclaimed, so no later creation
/// zeroes it.
#[test]
fn a_named_mutex_keeps_its_value_like_a_file_of_its_own() {
    let dir = TempDir::new("names-mutex-value");
    let path = dir.join("mutexes.lock");
    let open = |key: &str| {
        FairLock::options()
            .name(key)
            .name_capacity(2)
            .open_mutex::<u64>(&path)
    };
    let m = open("balance").unwrap();
    *m.lock().unwrap() = 42;
    drop(m);
    // Other names come and go: every name of a file of named FairMutexes is kept (its value is
    // the user's data), so the two records fill up and the third name is refused.
    let other = open("other-0").unwrap();
    *other.lock().unwrap() += 1;
    drop(other);
    assert!(matches!(
        open("other-1"),
        Err(Error::TooManyNames { capacity: 2, .. })
    ));
    let m = open("balance").unwrap();
    assert_eq!(*m.lock().unwrap(), 42, "the value of \"balance\" was lost");
}

fn fork() -> libc::pid_t {
    // SAFETY: the worker is single-threaded (--test-threads=1); the child only uses the lock,
    // allocates and leaves with `_exit`.
    unsafe { libc::fork() }
}

fn child_exit(code: i32) -> ! {
    // SAFETY: `_exit` never returns.
    unsafe { libc::_exit(code) }
}

fn wait_child(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a valid out-pointer.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    }
}

/// A forked child's handle re-opens its name with the kind check of every open: if the name was
/// reclaimed meanwhile and created again as another kind (here: a semaphore of 2 permits
/// instead of 1), the child is refused (`KindMismatch`), never uses it as that kind.
#[test]
fn a_forked_child_never_uses_a_name_as_another_kind() {
    if role().is_some() {
        let dir = common::env("FL_DIR");
        let path = format!("{dir}/names.lock");
        let go = format!("{dir}/go");
        let open = |key: &str, permits: u32| {
            FairLock::options()
                .name(key)
                .name_capacity(2)
                .open_semaphore(&path, permits)
                .unwrap()
        };
        // A semaphore of one permit: at most one holder.
        let sem = open("job", 1);
        let pid = fork();
        if pid == 0 {
            while !Path::new(&go).exists() {
                std::thread::sleep(Duration::from_millis(1));
            }
            child_exit(match sem.try_acquire() {
                Err(Error::KindMismatch { .. }) => 0,
                Ok(_) => 1,
                Err(Error::WouldBlock { .. }) => 2,
                Err(_) => 3,
            });
        }
        // The parent closes the name; it is reclaimed and created again, with 2 permits, one
        // of which the parent takes.
        drop(sem);
        drop(open("other", 1));
        let two = open("job", 2);
        let _p = two.try_acquire().unwrap();
        std::fs::write(&go, b"").unwrap();
        let code = wait_child(pid);
        assert_eq!(
            code, 0,
            "the child's semaphore of 1 permit (exit 1: it got a permit while another process \
             holds one; 2: refused as busy; 3: another error) — it should be KindMismatch"
        );
        return;
    }
    let dir = TempDir::new("names-fork-kind");
    let mut w = vec![Worker::spawn(
        dir.path(),
        "a_forked_child_never_uses_a_name_as_another_kind",
        "forker",
        "forker",
        &[("FL_DIR", dir.path().display().to_string())],
    )];
    wait_all(&mut w, Duration::from_secs(60));
}

/// A `FairMutex<U>` opener of a stale file of named `FairMutex<T>`s refuses it without writing
/// it: "every check of the data area happens before anything is written, also for a file that
/// is to be re-initialised" (docs/FILE_FORMAT.md) holds for files of names too.
#[test]
fn a_mismatched_mutex_refuses_a_stale_file_of_names_without_writing_it() {
    let dir = TempDir::new("names-stale-data");
    let live = dir.join("live");
    let bytes = {
        let m = FairLock::options()
            .name("count")
            .open_mutex::<u64>(&live)
            .unwrap();
        *m.lock().unwrap() = 41;
        std::fs::read(&live).unwrap()
    };
    let mut stale = bytes.clone();
    for x in &mut stale[48..64] {
        *x ^= 0x5a;
    }
    let path = dir.join("stale");
    std::fs::write(&path, &stale).unwrap();
    let r = FairLock::options().name("count").open_mutex::<u32>(&path);
    assert!(matches!(r, Err(Error::DataMismatch { .. })), "{r:?}");
    assert!(
        std::fs::read(&path).unwrap() == stale,
        "the refused file was written (re-initialised) before the data check"
    );
}

/// Garbage in the names header's `occupied` never makes a creation panic (saturating
/// arithmetic in `find_or_create`, as everything else reading the file uses wrapping
/// arithmetic). An overflow here panics only with overflow checks on: `ci/test.sh` runs this
/// file in a debug build too.
#[test]
fn garbage_in_the_names_header_never_panics() {
    let dir = TempDir::new("names-garbage-occupied");
    let path = dir.join("names.lock");
    drop(
        FairLock::options()
            .name("first")
            .name_capacity(4)
            .open(&path)
            .unwrap(),
    );
    let f = FsOpen::new().read(true).write(true).open(&path).unwrap();
    f.write_all_at(&u64::MAX.to_le_bytes(), 72).unwrap(); // occupied
    drop(f);
    let p = path.clone();
    let r = std::thread::spawn(move || {
        FairLock::options()
            .name("second")
            .name_capacity(4)
            .open(&p)
            .map(drop)
    })
    .join();
    assert!(r.is_ok(), "opening a name panicked on a garbage header");
}

/// `name_capacity(n)` above 2^31 is refused (`InvalidOption`) like any other out-of-range
/// capacity: `u32::next_power_of_two` of it would wrap to 0 in release builds (a file of 2
/// records) and panic in debug builds.
#[test]
fn an_impossible_name_capacity_is_refused() {
    let dir = TempDir::new("names-capacity");
    let path = dir.join("names.lock");
    let r = FairLock::options()
        .name("a")
        .name_capacity(u32::MAX)
        .open(&path);
    assert!(
        matches!(r, Err(Error::InvalidOption { .. })),
        "name_capacity(u32::MAX): {:?}, file of {:?} bytes",
        r.map(|_| ()),
        std::fs::metadata(&path).map(|m| m.len())
    );
}
