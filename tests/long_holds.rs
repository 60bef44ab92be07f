//! Long holds: a share kept while thousands of others come and go. Every lap of the long
//! share's slot is retaken by the short ones (they may not wait behind a share they could hold
//! beside); nothing stalls however many laps go by, and the lock is whole afterwards.

mod common;

use std::time::{Duration, Instant};

use common::TempDir;
use fairlock::{FairLock, FairSemaphore};

/// Short acquisitions beside the long one: more than three side records of 4095 retaken laps
/// each could hold, on a 2-slot file (every other ticket maps to the long share's slot).
const SHORT: u32 = 30_000;

/// One read held while `SHORT` reads by another thread come and go on a 2-slot file; each
/// must be granted at once (within a second), and a writer after the long read gets in.
#[test]
fn a_read_held_across_thousands_of_laps_stalls_nobody() {
    let dir = TempDir::new("long-read");
    let path = dir.join("rw");
    let lock = FairLock::options()
        .slots(2)
        .open_rwlock(&path)
        .expect("open");
    let long = lock.read().expect("read");
    let p = path.clone();
    let worst = std::thread::spawn(move || {
        let l = FairLock::options().slots(2).open_rwlock(&p).expect("open");
        let mut worst = Duration::ZERO;
        for i in 0..SHORT {
            let t = Instant::now();
            let g = l
                .read_timeout(Duration::from_secs(1))
                .unwrap_or_else(|e| panic!("read {i} beside a long read: {e}"));
            worst = worst.max(t.elapsed());
            drop(g);
        }
        worst
    })
    .join()
    .expect("reader thread");
    drop(long);
    let w = lock
        .write_timeout(Duration::from_secs(1))
        .expect("writer after the long read");
    drop(w);
    assert!(
        worst < Duration::from_secs(1),
        "slowest short read {worst:?}"
    );
}

/// The same for a semaphore of 2 permits on 4 slots: one kept, the other taken 10,000 times.
#[test]
fn a_permit_held_across_thousands_of_laps_stalls_nobody() {
    let dir = TempDir::new("long-permit");
    let path = dir.join("sem");
    let sem = FairLock::options()
        .slots(4)
        .open_semaphore(&path, 2)
        .expect("open");
    let long = sem.acquire().expect("acquire");
    let p = path.clone();
    std::thread::spawn(move || {
        let s = FairSemaphore::open(&p, 2).expect("open");
        for i in 0..10_000 {
            drop(
                s.acquire_timeout(Duration::from_secs(1))
                    .unwrap_or_else(|e| panic!("acquisition {i} beside a long one: {e}")),
            );
        }
    })
    .join()
    .expect("thread");
    drop(long);
    let both = (sem.acquire().expect("one"), sem.acquire().expect("two"));
    drop(both);
}
