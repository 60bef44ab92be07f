//! Locks held on behalf of an open file description (`OpenOptions::lock_for_fd`,
//! `unlock_fd`), from a user's crate: held while the description is open, released by
//! `unlock_fd`, or — the description closed — passed to the next holder with `owner_died`.

mod common;

use std::fs::OpenOptions as FsOpen;
use std::os::fd::AsFd;
use std::time::Duration;

use common::TempDir;
use fairlock::{Error, FairLock, FdMode};

fn never() -> bool {
    false
}

#[test]
fn a_descriptor_holds_until_unlocked_or_closed() {
    let dir = TempDir::new("fd-form");
    let path = dir.join("jobs.lock");
    let f = FsOpen::new().append(true).create(true).open(&path).unwrap();
    let g = FairLock::options()
        .lock_for_fd(f.as_fd(), FdMode::Exclusive, None, never)
        .expect("lock for the descriptor");
    assert!(!g.owner_died);
    let other = FairLock::open(&path).unwrap();
    assert!(matches!(other.try_lock(), Err(Error::WouldBlock { .. })));
    // The same description cannot take it twice.
    assert!(matches!(
        FairLock::options().lock_for_fd(f.as_fd(), FdMode::Exclusive, None, never),
        Err(Error::WouldDeadlock { .. })
    ));
    let released = fairlock::unlock_fd(f.as_fd())
        .unwrap()
        .expect("it held a grant");
    assert_eq!(released.token, g.token);
    assert_eq!(fairlock::unlock_fd(f.as_fd()).unwrap(), None);
    drop(other.try_lock().expect("free after unlock_fd"));
    // Held again, then the only descriptor of the description is closed: the next holder
    // takes over and is told.
    FairLock::options()
        .lock_for_fd(f.as_fd(), FdMode::Exclusive, None, never)
        .unwrap();
    drop(f);
    let next = other
        .lock_timeout(Duration::from_secs(10))
        .expect("taken over");
    assert!(next.owner_died());
}

#[test]
fn a_timed_out_descriptor_lock_leaves_nothing_behind() {
    let dir = TempDir::new("fd-form-timeout");
    let path = dir.join("jobs.lock");
    let holder = FairLock::open(&path).unwrap();
    let g = holder.lock().unwrap();
    let f = FsOpen::new().append(true).open(&path).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_millis(50);
    assert!(matches!(
        FairLock::options().lock_for_fd(f.as_fd(), FdMode::Exclusive, Some(deadline), never),
        Err(Error::Timeout { .. })
    ));
    assert_eq!(fairlock::unlock_fd(f.as_fd()).unwrap(), None);
    drop(g);
    let st = fairlock::inspect(&path).unwrap();
    assert!(st.holder.is_none() && st.waiters.is_empty(), "{st:?}");
    // Read-only descriptors and names are refused.
    let ro = FsOpen::new().read(true).open(&path).unwrap();
    assert!(matches!(
        FairLock::options().lock_for_fd(ro.as_fd(), FdMode::Exclusive, None, never),
        Err(Error::InvalidOption { .. })
    ));
}
