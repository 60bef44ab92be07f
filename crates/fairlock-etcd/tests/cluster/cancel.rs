//! Acquisitions and releases cut short — a deadline passing while a request is in flight, a
//! future dropped, a request applied after the client gave up on it — leave nothing behind:
//! no queue key that blocks the others, no grant record that says a holder died.
//!
//! The faults are put between one client and etcd by a TCP proxy (`common::proxy`); the
//! independent scenarios of each test run side by side on one cluster.

use crate::common;

use std::time::{Duration, Instant};

use crate::common::cluster::Cluster;
use crate::common::proxy::{Proxy, Replies};
use crate::common::{connect_async, keys, runtime, show, until_status};
use fairlock_etcd::Error;

const RT: Duration = Duration::from_secs(2);

/// `lock_timeout` with deadlines shorter than a round trip, on a free lock: each one times out
/// while its join is in flight (or wins), and none may leave its key behind. (The undo of an
/// acquisition used to be armed only once the join had answered: a join applied after the
/// deadline stayed, kept alive by our healthy session, and blocked every later client — ours
/// included — for good.)
async fn tiny_deadlines_on_a_free_lock(eps: Vec<String>) {
    let lock = connect_async(&eps, "tiny", 5, RT).await;
    let other = connect_async(&eps, "tiny", 5, RT).await;
    let mut timeouts = 0;
    for _ in 0..20 {
        match lock.lock_timeout(Duration::from_micros(300)).await {
            Ok(g) => g.unlock().await.unwrap(),
            Err(Error::Timeout { .. }) => timeouts += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(timeouts > 0, "no deadline passed: the test tests nothing");
    let s = until_status(&other, Duration::from_secs(1), |s| keys(s) == 0).await;
    assert!(s.is_ok(), "timed-out acquisitions left keys: {s:?}");
    let g = other.lock_timeout(Duration::from_secs(2)).await;
    assert!(g.is_ok(), "{}", show(&g));
}

/// The same with the deadline passing while the join's answer is delayed (it was applied),
/// and with the `lock()` future dropped at that point.
async fn deadline_or_drop_while_joining(eps: Vec<String>) {
    let holder = connect_async(&eps, "joining", 5, RT).await;
    let next = connect_async(&eps, "joining", 5, RT).await;
    let proxy = Proxy::start(&eps[0]);
    let slow = connect_async(&[proxy.endpoint()], "joining", 5, RT).await;
    let g = holder.lock().await.unwrap();
    proxy.delay_replies(Duration::from_millis(300));
    let r = slow.lock_timeout(Duration::from_millis(100)).await;
    assert!(matches!(r, Err(Error::Timeout { .. })), "{}", show(&r));
    let r = tokio::time::timeout(Duration::from_millis(100), slow.lock()).await;
    assert!(r.is_err(), "granted while held");
    proxy.delay_replies(Duration::ZERO);
    let s = until_status(&holder, Duration::from_secs(2), |s| keys(s) == 1).await;
    assert!(s.is_ok(), "an abandoned join left its key: {s:?}");
    g.unlock().await.unwrap();
    let g = next.lock_timeout(Duration::from_secs(3)).await;
    assert!(g.is_ok(), "{}", show(&g));
    assert!(!g.unwrap().owner_died());
}

/// A `lock_timeout` future dropped while it withdraws after its deadline (the withdraw's
/// request lost in a partition). Withdrawing used to disarm the undo first: the key stayed.
async fn dropped_while_withdrawing(eps: Vec<String>) {
    let holder = connect_async(&eps, "withdrawing", 5, RT).await;
    let next = connect_async(&eps, "withdrawing", 5, RT).await;
    let proxy = Proxy::start(&eps[0]);
    let cut_off = connect_async(&[proxy.endpoint()], "withdrawing", 5, RT).await;
    let g = holder.lock().await.unwrap();
    let waiting = async {
        tokio::time::timeout(
            Duration::from_millis(700),
            cut_off.lock_timeout(Duration::from_millis(300)),
        )
        .await
    };
    let partition = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        proxy.blackhole();
        tokio::time::sleep(Duration::from_millis(600)).await;
        proxy.heal();
    };
    let (r, ()) = tokio::join!(waiting, partition);
    if let Ok(r) = r {
        assert!(matches!(r, Err(Error::Timeout { .. })), "{}", show(&r));
    }
    let s = until_status(&holder, Duration::from_secs(3), |s| keys(s) == 1).await;
    assert!(s.is_ok(), "the withdrawn key stayed: {s:?}");
    g.unlock().await.unwrap();
    let g = next.lock_timeout(Duration::from_secs(3)).await;
    assert!(g.is_ok(), "{}", show(&g));
}

/// A join request that reaches etcd only after the client gave up on it, retried, waited and
/// withdrew (a request stuck in a member that resumes, or in a connection the client dropped):
/// it must not create the key again under our live lease. (It did: the key then blocked the
/// queue for as long as our session lived.)
async fn a_join_applied_after_the_withdraw(eps: Vec<String>) {
    let holder = connect_async(&eps, "late", 5, RT).await;
    let next = connect_async(&eps, "late", 5, RT).await;
    let proxy = Proxy::start(&eps[0]);
    let client = connect_async(&[proxy.endpoint()], "late", 5, RT).await;
    let g = holder.lock().await.unwrap();
    proxy.freeze();
    let waiting = async { client.lock_timeout(Duration::from_secs(2)).await };
    let held_back = async {
        let start = Instant::now();
        while !proxy.held_contains(b"late/q/") {
            assert!(start.elapsed() < Duration::from_secs(2), "no join was sent");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // The client sees its connection reset and retries the join elsewhere.
        proxy.detach();
    };
    let (r, ()) = tokio::join!(waiting, held_back);
    assert!(matches!(r, Err(Error::Timeout { .. })), "{}", show(&r));
    let s = until_status(&holder, Duration::from_secs(2), |s| keys(s) == 1).await;
    assert!(s.is_ok(), "the withdrawn key stayed: {s:?}");
    // Now the first join reaches etcd.
    proxy.flush();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let s = holder.status().await.unwrap();
    assert_eq!(keys(&s), 1, "the late join created our key again: {s:?}");
    g.unlock().await.unwrap();
    let g = next.lock_timeout(Duration::from_secs(2)).await;
    assert!(g.is_ok(), "{}", show(&g));
}

#[test]
fn acquisitions_cut_short_leave_no_key() {
    let cluster = Cluster::start("cancel-acquire");
    let eps = cluster.endpoints();
    runtime().block_on(async {
        common::side_by_side(vec![
            (
                "tiny_deadlines_on_a_free_lock",
                Box::pin(tiny_deadlines_on_a_free_lock(eps.clone())),
            ),
            (
                "deadline_or_drop_while_joining",
                Box::pin(deadline_or_drop_while_joining(eps.clone())),
            ),
            (
                "dropped_while_withdrawing",
                Box::pin(dropped_while_withdrawing(eps.clone())),
            ),
            (
                "a_join_applied_after_the_withdraw",
                Box::pin(a_join_applied_after_the_withdraw(eps.clone())),
            ),
        ])
        .await;
    });
}

/// An `unlock()` future dropped before its release reached etcd (a partition): the lock must
/// still be released, by the guard's fallback. (`unlock` used to take the grant out of the
/// guard before awaiting: the dropped future left the key, kept alive by our session, for
/// good.)
async fn dropped_unlock(eps: Vec<String>) {
    let proxy = Proxy::start(&eps[0]);
    let a = connect_async(&[proxy.endpoint()], "unlock", 5, RT).await;
    let b = connect_async(&eps, "unlock", 5, RT).await;
    let g = a.lock().await.unwrap();
    proxy.blackhole();
    let r = tokio::time::timeout(Duration::from_millis(300), g.unlock()).await;
    assert!(r.is_err(), "unlocked through a partition");
    proxy.heal();
    let start = Instant::now();
    let g = b.lock_timeout(Duration::from_secs(4)).await;
    assert!(g.is_ok(), "{}", show(&g));
    assert!(!g.unwrap().owner_died(), "a release, not an expiry");
    assert!(start.elapsed() < Duration::from_secs(4));
}

/// An acquisition dropped after etcd applied its grant record (`held … clean`) but before the
/// answer came: the next holder must not be told that its predecessor died (no lease
/// expired; the dropped acquisition never held the lock for its caller).
async fn dropped_after_the_grant_record(eps: Vec<String>) {
    let proxy = Proxy::start(&eps[0]);
    let a = connect_async(&[proxy.endpoint()], "granted", 5, RT).await;
    let b = connect_async(&eps, "granted", 5, RT).await;
    proxy.on_request(b" clean", Replies::Drop);
    let r = tokio::time::timeout(Duration::from_secs(1), a.lock()).await;
    assert!(
        r.is_err(),
        "the grant's answer was dropped: {:?}",
        r.map(|r| show(&r))
    );
    proxy.heal();
    let s = until_status(&b, Duration::from_secs(3), |s| keys(s) == 0).await;
    assert!(s.is_ok(), "the dropped acquisition's key stayed: {s:?}");
    let g = b.lock_timeout(Duration::from_secs(2)).await.unwrap();
    assert!(
        !g.owner_died(),
        "owner_died after an acquisition was merely dropped"
    );
    g.unlock().await.unwrap();
}

#[test]
fn dropped_unlocks_and_grants_release_cleanly() {
    let cluster = Cluster::start("cancel-release");
    let eps = cluster.endpoints();
    runtime().block_on(async {
        common::side_by_side(vec![
            ("dropped_unlock", Box::pin(dropped_unlock(eps.clone()))),
            (
                "dropped_after_the_grant_record",
                Box::pin(dropped_after_the_grant_record(eps.clone())),
            ),
        ])
        .await;
    });
}
