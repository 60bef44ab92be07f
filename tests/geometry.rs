//! Geometry options at work: tiny slot arrays (laps wrap constantly; more waiters than slots)
//! and the participant limit (one entry per process).

mod common;

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use common::{Shm, TempDir, Worker, racy_increment, role, wait_all};
use fairlock::{Error, FairLock};

/// `n` threads × `iters` racy increments under a lock with `slots` slots.
fn small_slots_stress(slots: u32, n: usize, iters: u64) {
    let dir = TempDir::new("bad-few-slots");
    let path = dir.join("lock");
    let shm = std::sync::Arc::new(Shm::create(&dir.join("shm"), 1));
    let lock = std::sync::Arc::new(FairLock::options().slots(slots).open(&path).expect("open"));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (lock, shm) = (lock.clone(), shm.clone());
            std::thread::spawn(move || {
                for _ in 0..iters {
                    let _g = lock.lock().expect("lock");
                    racy_increment(&shm, 0, 10);
                }
            })
        })
        .collect();
    common::with_time_limit(Duration::from_secs(60), "small-slot stress", move || {
        for t in threads {
            t.join().expect("thread panicked");
        }
    });
    assert_eq!(shm.read(0), n as u64 * iters);
}

#[test]
fn tiny_slot_array_wraps_many_laps() {
    // As many threads as slots: the slot array wraps thousands of times.
    small_slots_stress(2, 2, 3_000);
    small_slots_stress(4, 4, 1_500);
}

#[test]
fn more_waiters_than_slots() {
    // 6 threads on a 4-slot file: a waiter whose slot is still used one lap earlier polls
    // for it; meanwhile a ticket one more lap ahead finds the slot two laps behind, which is
    // no `Corrupt("slot is laps behind its ticket")`.
    small_slots_stress(4, 6, 300);
    small_slots_stress(2, 5, 300);
}

#[test]
fn more_than_two_laps_of_waiters() {
    // A 2-slot file: the holder plus 3 waiters fill two laps; the 4th waiter's slot is still
    // used by the holder's ticket, two laps behind. The docs (DEFAULT_SLOTS) promise that
    // extra waiters "still work, but poll for their slot".
    let dir = TempDir::new("bad-two-laps");
    let path = dir.join("lock");
    let lock = std::sync::Arc::new(FairLock::options().slots(2).open(&path).expect("open"));
    let guard = lock.lock().expect("lock");
    let first = guard.token();
    let mut threads = Vec::new();
    for k in 1..=4u64 {
        let l = lock.clone();
        threads.push(std::thread::spawn(move || {
            l.lock_timeout(Duration::from_secs(20)).map(|g| g.token())
        }));
        // Wait until this thread took its ticket (it may be unpublished: it polls its slot).
        common::wait_until(Duration::from_secs(20), "ticket taken", || {
            fairlock::inspect(&path).unwrap().next_ticket >= first + k
        });
    }
    std::thread::sleep(Duration::from_millis(100));
    drop(guard);
    let results: Vec<_> =
        common::with_time_limit(Duration::from_secs(60), "4 waiters", move || {
            threads
                .into_iter()
                .map(|t| t.join().unwrap())
                .collect::<Vec<_>>()
        });
    for r in &results {
        assert!(r.is_ok(), "a waiter failed: {results:?}");
    }
}

#[test]
fn too_many_participants() {
    const RESULT: usize = 0;
    if role().is_some() {
        let shm = Shm::open(common::env("FL_SHM").as_ref());
        let code = match FairLock::open(common::env("FL_LOCK")) {
            Ok(_) => 1,
            Err(e @ Error::TooManyParticipants { capacity: 1, .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(&common::env("FL_LOCK")), "{msg}");
                2
            }
            Err(e) => panic!("unexpected: {e:?}"),
        };
        shm.atomic(RESULT).store(code, SeqCst);
        return;
    }
    let dir = TempDir::new("bad-participants");
    let path = dir.join("lock");
    let shm_path = dir.join("shm");
    let shm = Shm::create(&shm_path, 1);
    let lock = FairLock::options()
        .participants(1)
        .open(&path)
        .expect("open");
    // A second handle in this process shares the one entry.
    drop(FairLock::open(&path).expect("second handle in the same process"));
    let env = [
        ("FL_LOCK", path.display().to_string()),
        ("FL_SHM", shm_path.display().to_string()),
    ];
    let mut w = vec![Worker::spawn(
        dir.path(),
        "too_many_participants",
        "open",
        "full",
        &env,
    )];
    wait_all(&mut w, Duration::from_secs(30));
    assert_eq!(
        shm.atomic(RESULT).load(SeqCst),
        2,
        "second process was let in"
    );
    // Once this process closes the file, its entry is free for another process.
    drop(lock);
    let mut w = vec![Worker::spawn(
        dir.path(),
        "too_many_participants",
        "open",
        "free",
        &env,
    )];
    wait_all(&mut w, Duration::from_secs(30));
    assert_eq!(
        shm.atomic(RESULT).load(SeqCst),
        1,
        "entry not freed on close"
    );
}

#[test]
fn participant_entry_of_a_dead_holder_is_reused() {
    // A one-entry file: a process takes the lock and is killed holding it; the next process
    // claims the same entry and must revoke what its predecessor left behind.
    const TOKEN: usize = 0;
    const DIED: usize = 1;
    const FLAG: usize = 2;
    if let Some(r) = role() {
        let shm = Shm::open(common::env("FL_SHM").as_ref());
        let lock = FairLock::open(common::env("FL_LOCK")).expect("worker open");
        let g = lock
            .lock_timeout(Duration::from_secs(10))
            .expect("worker lock");
        shm.write(TOKEN, g.token());
        shm.write(DIED, u64::from(g.owner_died()));
        shm.atomic(FLAG).store(1, SeqCst);
        if r == "hold-until-killed" {
            std::thread::sleep(Duration::from_secs(60));
            panic!("not killed");
        }
        return;
    }
    let dir = TempDir::new("geometry-reuse");
    let path = dir.join("lock");
    let shm_path = dir.join("shm");
    let shm = Shm::create(&shm_path, 3);
    drop(
        FairLock::options()
            .participants(1)
            .open(&path)
            .expect("create"),
    );
    let env = [
        ("FL_LOCK", path.display().to_string()),
        ("FL_SHM", shm_path.display().to_string()),
    ];
    let test = "participant_entry_of_a_dead_holder_is_reused";
    let mut first = Worker::spawn(dir.path(), test, "hold-until-killed", "first", &env);
    common::wait_until(Duration::from_secs(30), "the first worker's grant", || {
        shm.atomic(FLAG).load(SeqCst) == 1
    });
    first.child.kill().expect("kill");
    first.child.wait().expect("wait");
    let held = shm.read(TOKEN);
    // Killed outright: the file still records its hold.
    let st = fairlock::inspect(&path).expect("inspect");
    assert_eq!(st.holder.as_ref().map(|h| h.token), Some(held), "{st:?}");
    shm.atomic(FLAG).store(0, SeqCst);
    let mut w = vec![Worker::spawn(dir.path(), test, "lock", "second", &env)];
    wait_all(&mut w, Duration::from_secs(30));
    assert!(shm.read(TOKEN) > held);
    assert_eq!(
        shm.read(DIED),
        1,
        "the successor was not told the owner died"
    );
    let st = fairlock::inspect(&path).expect("inspect");
    assert!(st.holder.is_none(), "{st:?}");
}

#[test]
fn more_waiters_than_slots_hard() {
    // The same as more_waiters_than_slots, harder: 8 threads on 2 slots, more rounds.
    for _ in 0..5 {
        small_slots_stress(2, 8, 2_000);
    }
}

/// The uncontended `lock` takes a ticket with one CAS on the header and builds the view of the
/// slots only when that ticket wraps the lock word's 36-bit counter, to refresh their laps
/// (`core::exclusive::fast::try_fast_on`). Here every one of the first 384 wraps is taken by
/// that path: with 2 slots, a slot untouched across so many laps would read as a later lap's
/// without the refresh, and the next waiter's ticket would be taken for one given up (it
/// then fails with `Corrupt` instead of timing out behind the holder).
#[test]
fn the_uncontended_lock_refreshes_the_slots_each_time_the_counter_wraps() {
    use fairlock::__internal::core::state::format::Header;
    use fairlock::__internal::core::state::lock_word::LockWord;
    const COUNTER_BITS: u32 = 36;
    let dir = TempDir::new("wrap");
    let path = dir.join("w.lock");
    let l = FairLock::options().slots(2).open(&path).unwrap();
    let shm = Shm::open(&path);
    let word = shm.atomic(std::mem::offset_of!(Header, word) / 8);
    let epoch = shm.atomic(std::mem::offset_of!(Header, epoch) / 8);
    // The next ticket is `t`, with nobody holding or queued.
    let set_next = |t: u64| {
        word.store(LockWord::initial(t, false).0, SeqCst);
        epoch.store(t >> COUNTER_BITS, SeqCst);
    };
    let last = (1u64 << COUNTER_BITS) - 1;
    let laps = 384;
    for e in 0..laps {
        let t = (e << COUNTER_BITS) | last;
        set_next(t);
        let g = l.lock().unwrap();
        assert_eq!(g.token(), t + 1, "the wrap at epoch {e}");
        drop(g);
    }
    let t = laps << COUNTER_BITS;
    set_next(t);
    let g = l.lock().unwrap();
    assert_eq!(g.token(), t + 1);
    std::thread::scope(|s| {
        let r = s
            .spawn(|| l.lock_timeout(Duration::from_millis(50)).map(drop))
            .join()
            .unwrap();
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    });
    drop(g);
}
