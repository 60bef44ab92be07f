//! A leased `try_lock` of a free bounded lock takes a ticket that its own walk grants at once
//! (`Ready`, `advance.ready`), then claims it. Stopped in between (SIGSTOP), nobody barges ahead
//! of that ticket — a barge needs a `Granted` head whose waiter published its arrival, and a
//! pre-granted ticket has neither — so a `lock()` meanwhile waits until the grace passes the
//! stalled pre-grant over;
//! continued, the `try_lock` finds its ticket skipped and answers `WouldBlock` (the lock is
//! held), not `Timeout`, and the lock stays whole.
#![cfg(feature = "__test-crash-points")]

mod common;

use std::time::Duration;

use common::chaos::{pid_stopped, signal};
use common::{TempDir, Worker, role, wait_until};
use fairlock::{Error, FairLock, Fairness};

const TEST: &str = "a_stalled_leased_try_lock_is_not_barged_and_would_block";

fn open(path: &std::path::Path, lease: bool) -> FairLock {
    let mut o = FairLock::options();
    o.fairness(Fairness::Bounded(4));
    if lease {
        o.lease(Duration::from_secs(30));
    }
    o.open(path).unwrap()
}

#[test]
fn a_stalled_leased_try_lock_is_not_barged_and_would_block() {
    if role().is_some() {
        // Stopped (SIGSTOP) right after the walk pre-granted our ticket, then continued.
        let lock = open(common::env("FL_LOCK").as_ref(), true);
        let code = match lock.try_lock() {
            Ok(g) => {
                drop(g);
                10
            }
            Err(Error::WouldBlock { .. }) => 11,
            Err(Error::Timeout { .. }) => 12,
            Err(e) => {
                eprintln!("try_lock: {e}");
                13
            }
        };
        std::process::exit(code);
    }
    let dir = TempDir::new("bounded-try-lease");
    let path = dir.join("lock");
    let lock = open(&path, false);
    let mut child = Worker::spawn(
        dir.path(),
        TEST,
        "leased try_lock",
        "taker",
        &[
            ("FL_LOCK", path.display().to_string()),
            ("FAIRLOCK_CRASH", "advance.ready:stop".into()),
        ],
    );
    wait_until(Duration::from_secs(20), "the taker stopped", || {
        pid_stopped(child.pid())
    });
    // Its ticket is granted (`Ready`), not claimed: no barge ahead of it; we wait for the
    // grace to pass it over, then hold ticket 1 (token 2 · 512).
    let t0 = std::time::Instant::now();
    let g = lock.lock().unwrap();
    assert_eq!(g.token(), 1024, "not a barge: the next ticket's grant");
    assert!(
        t0.elapsed() >= Duration::from_millis(40),
        "{:?}",
        t0.elapsed()
    );
    signal(child.pid(), libc::SIGCONT);
    wait_until(Duration::from_secs(20), "the taker's answer", || {
        child.poll()
    });
    drop(g);
    let code = child.status.unwrap().code();
    assert_eq!(
        code,
        Some(11),
        "the continued try_lock: 11 = WouldBlock, 12 = Timeout, 10 = held\n{}",
        child.stderr()
    );
    // And the lock is whole: free for the next.
    drop(lock.try_lock().unwrap());
}
