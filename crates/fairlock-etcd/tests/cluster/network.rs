//! Network faults between one client and etcd (answers lost or late, partitions, a watch that
//! never delivers), put there by a TCP proxy (`common::proxy`): releases are proven, a
//! sibling's trouble does not cost a holder its lock, calls keep their deadlines, a waiter
//! does not depend on its watch alone, a guard is never handed out already lost, and a lost
//! lease is reported a margin before etcd's own TTL ends, saying why.
//!
//! The independent scenarios of each test run side by side on one cluster.

use crate::common;

use std::time::{Duration, Instant};

use crate::common::cluster::Cluster;
use crate::common::proxy::{Proxy, Replies};
use crate::common::{connect_async, keys, runtime, show, until_status};
use fairlock_etcd::Error;

/// A release whose answer is lost (etcd applied it; the next waiter was granted meanwhile and
/// wrote its grant record) and whose connection is then cut: the retry must see that the
/// release went through, not report `LockLost` (which made `fairlock run` exit 69 for a
/// command that ran correctly).
async fn release_answer_lost(eps: Vec<String>) {
    let proxy = Proxy::start(&eps[0]);
    let a = connect_async(&[proxy.endpoint()], "proof", 5, Duration::from_secs(1)).await;
    let b = connect_async(&eps, "proof", 5, Duration::from_secs(1)).await;
    let watcher = connect_async(&eps, "proof", 5, Duration::from_secs(1)).await;
    let g = a.lock().await.unwrap();
    let waiter = tokio::spawn(async move {
        let g = b.lock().await.unwrap();
        let died = g.owner_died();
        g.unlock().await.unwrap();
        died
    });
    until_status(&watcher, Duration::from_secs(5), |s| s.waiters.len() == 1)
        .await
        .unwrap();
    let a_token = g.token();
    proxy.drop_replies();
    let heal_once_granted = async {
        let s = until_status(&watcher, Duration::from_secs(5), |s| {
            s.holder.as_ref().is_some_and(|h| h.token != a_token) || s.last_token > a_token
        })
        .await;
        proxy.heal();
        s
    };
    let (r, s) = tokio::join!(g.unlock(), heal_once_granted);
    assert!(s.is_ok(), "the release never reached etcd: {s:?}");
    assert!(
        r.is_ok(),
        "a release that etcd applied was reported failed: {r:?}"
    );
    assert!(!waiter.await.unwrap(), "owner_died after a clean release");
}

/// Clones of a lock share one lease. A clone's `lock_timeout` whose withdraw cannot reach
/// etcd for a while (shorter than the TTL) used to give the shared session up: its sibling,
/// holding the lock, was told `LockLost` and the lock handed on with `owner_died`.
async fn a_sibling_withdraw_that_fails_for_a_while(eps: Vec<String>) {
    let proxy = Proxy::start(&eps[0]);
    let h = connect_async(&[proxy.endpoint()], "sibling", 10, Duration::from_secs(1)).await;
    let next = connect_async(&eps, "sibling", 10, Duration::from_secs(1)).await;
    let g = h.lock().await.unwrap();
    let sibling = h.clone();
    let partition = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        proxy.blackhole();
        tokio::time::sleep(Duration::from_millis(3200)).await;
        proxy.heal();
    };
    let (r, ()) = tokio::join!(sibling.lock_timeout(Duration::from_secs(1)), partition);
    assert!(matches!(r, Err(Error::Timeout { .. })), "{}", show(&r));
    g.check().unwrap();
    g.extend().await.unwrap();
    let s = until_status(&next, Duration::from_secs(3), |s| keys(s) == 1).await;
    assert!(s.is_ok(), "the sibling's key stayed: {s:?}");
    g.unlock().await.unwrap();
    let g = next.lock_timeout(Duration::from_secs(2)).await.unwrap();
    assert!(!g.owner_died());
}

/// A waiter cut off from etcd mid-wait returns at its deadline: the withdraw goes on in the
/// background (it used to be awaited for up to a request timeout more).
async fn deadline_kept_mid_wait(eps: Vec<String>) {
    let rt = Duration::from_secs(2);
    let proxy = Proxy::start(&eps[0]);
    let holder = connect_async(&eps, "mid-wait", 5, rt).await;
    let waiter = connect_async(&[proxy.endpoint()], "mid-wait", 5, rt).await;
    let g = holder.lock().await.unwrap();
    let start = Instant::now();
    let cut = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        proxy.blackhole();
    };
    let (r, ()) = tokio::join!(waiter.lock_timeout(Duration::from_secs(1)), cut);
    let took = start.elapsed();
    assert!(matches!(r, Err(Error::Timeout { .. })), "{}", show(&r));
    assert!(
        took < Duration::from_millis(1300),
        "lock_timeout(1s) took {took:?}"
    );
    proxy.heal();
    g.unlock().await.unwrap();
}

/// `try_lock` with etcd unreachable takes one request timeout (1 s), not the lease's
/// lifetime (10 s).
async fn try_lock_unreachable(eps: Vec<String>) {
    let proxy = Proxy::start(&eps[0]);
    let t = connect_async(&[proxy.endpoint()], "try", 10, Duration::from_secs(1)).await;
    proxy.blackhole();
    let start = Instant::now();
    let r = t.try_lock().await;
    let took = start.elapsed();
    assert!(matches!(r, Err(Error::Unavailable { .. })), "{}", show(&r));
    assert!(took < Duration::from_millis(1500), "try_lock took {took:?}");
    proxy.heal();
}

/// A new lease to grant with etcd unreachable: the caller's deadline bounds it too.
async fn deadline_kept_granting_a_lease(eps: Vec<String>) {
    let proxy = Proxy::start(&eps[0]);
    let s = connect_async(&[proxy.endpoint()], "lease", 10, Duration::from_secs(2)).await;
    s.close().await;
    proxy.blackhole();
    let start = Instant::now();
    let r = s.lock_timeout(Duration::from_millis(500)).await;
    let took = start.elapsed();
    assert!(matches!(r, Err(Error::Timeout { .. })), "{}", show(&r));
    assert!(
        took < Duration::from_millis(800),
        "lock_timeout(0.5s) took {took:?}"
    );
    proxy.heal();
}

/// The grant record's write unanswered: the deadline bounds it, and the record it may have
/// left is undone (the next holder is told nobody died).
async fn deadline_kept_writing_the_grant(eps: Vec<String>) {
    let rt = Duration::from_secs(2);
    let proxy = Proxy::start(&eps[0]);
    let w = connect_async(&[proxy.endpoint()], "grant", 10, rt).await;
    let other = connect_async(&eps, "grant", 10, rt).await;
    proxy.on_request(b" clean", Replies::Drop);
    let start = Instant::now();
    let r = w.lock_timeout(Duration::from_secs(1)).await;
    let took = start.elapsed();
    assert!(matches!(r, Err(Error::Timeout { .. })), "{}", show(&r));
    assert!(
        took < Duration::from_millis(1300),
        "lock_timeout(1s) took {took:?}"
    );
    proxy.heal();
    let s = until_status(&other, Duration::from_secs(3), |s| keys(s) == 0).await;
    assert!(s.is_ok(), "the timed-out grant's key stayed: {s:?}");
    let g = other.lock_timeout(Duration::from_secs(2)).await.unwrap();
    assert!(!g.owner_died());
}

#[test]
fn releases_siblings_and_deadlines_under_network_faults() {
    let cluster = Cluster::start("net-release");
    let eps = cluster.endpoints();
    runtime().block_on(async {
        common::side_by_side(vec![
            (
                "release_answer_lost",
                Box::pin(release_answer_lost(eps.clone())),
            ),
            (
                "a_sibling_withdraw_that_fails_for_a_while",
                Box::pin(a_sibling_withdraw_that_fails_for_a_while(eps.clone())),
            ),
            (
                "deadline_kept_mid_wait",
                Box::pin(deadline_kept_mid_wait(eps.clone())),
            ),
            (
                "try_lock_unreachable",
                Box::pin(try_lock_unreachable(eps.clone())),
            ),
            (
                "deadline_kept_granting_a_lease",
                Box::pin(deadline_kept_granting_a_lease(eps.clone())),
            ),
            (
                "deadline_kept_writing_the_grant",
                Box::pin(deadline_kept_writing_the_grant(eps.clone())),
            ),
        ])
        .await;
    });
}

/// A waiter whose watch never delivers (it sits on a member that hangs; HTTP/2 keep-alive
/// notices only after seconds, or never if the member still answers pings) must still learn
/// that its predecessor is gone: it looks again every third of its TTL.
async fn a_watch_that_never_delivers(eps: Vec<String>) {
    let proxy = Proxy::start(&eps[0]);
    let holder = connect_async(&eps, "mute", 3, Duration::from_secs(2)).await;
    let waiter = connect_async(&[proxy.endpoint()], "mute", 3, Duration::from_secs(2)).await;
    let g = holder.lock().await.unwrap();
    let lease = holder.status().await.unwrap().holder.unwrap().lease;
    // The predecessor's key appears only in the watch request.
    proxy.mute_streams_of(format!("mute/q/{lease:016x}-").as_bytes());
    let release = async {
        until_status(&holder, Duration::from_secs(5), |s| s.waiters.len() == 1)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        g.unlock().await.unwrap();
        Instant::now()
    };
    let (r, released) = tokio::join!(
        async {
            let r = waiter.lock_timeout(Duration::from_secs(8)).await;
            (r.map(|g| g.owner_died()), Instant::now())
        },
        release
    );
    let (r, granted) = r;
    assert_eq!(r.as_ref().ok(), Some(&false), "{}", show(&r));
    let took = granted.duration_since(released);
    assert!(
        took < Duration::from_millis(2500),
        "granted {took:?} after the release"
    );
}

/// A grant record whose answer comes after our lease's local deadline: the acquisition must
/// fail rather than hand out a guard that is already lost.
async fn a_grant_answered_after_the_lease_ran_out(eps: Vec<String>) {
    let proxy = Proxy::start(&eps[0]);
    let l = connect_async(&[proxy.endpoint()], "late-grant", 2, Duration::from_secs(5)).await;
    proxy.on_request(b" clean", Replies::Delay(Duration::from_secs(3)));
    let r = l.lock().await;
    if let Ok(g) = &r {
        panic!(
            "granted with a lost lease: check() says {:?}",
            g.check().map_err(|e| e.to_string())
        );
    }
    assert!(
        matches!(r, Err(Error::Unavailable { .. } | Error::LockLost { .. })),
        "{}",
        show(&r)
    );
}

/// Cut off right after a renewal, a holder must be told `LockLost` a margin before etcd's own
/// TTL can have ended (clock rates differ a little).
async fn lost_a_margin_early(eps: Vec<String>) {
    let proxy = Proxy::start(&eps[0]);
    let l = connect_async(&[proxy.endpoint()], "margin", 10, Duration::from_secs(2)).await;
    let g = l.lock().await.unwrap();
    let before = Instant::now();
    g.extend().await.unwrap();
    proxy.blackhole();
    // etcd keeps the lease at least until `before` + TTL (the renewal was sent after it).
    let server_end = before + Duration::from_secs(10);
    while g.check().is_ok() {
        assert!(Instant::now() < server_end + Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let lost = Instant::now();
    assert!(
        lost + Duration::from_millis(10) < server_end,
        "told LockLost only {:?} before etcd's TTL could end",
        server_end.saturating_duration_since(lost)
    );
    proxy.heal();
}

/// A holder whose renewals failed says why in its `LockLost` (the keep-alive task's attempt
/// to add the reason came after the first one was set, and was dropped).
async fn lost_says_why(eps: Vec<String>) {
    let proxy = Proxy::start(&eps[0]);
    let l = connect_async(&[proxy.endpoint()], "why", 2, Duration::from_secs(2)).await;
    let g = l.lock().await.unwrap();
    proxy.blackhole();
    let start = Instant::now();
    let why = loop {
        if let Err(e) = g.check() {
            break e.to_string();
        }
        assert!(start.elapsed() < Duration::from_secs(4));
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(why.contains("last attempt"), "{why}");
    proxy.heal();
}

#[test]
fn watches_late_grants_and_lost_leases_under_network_faults() {
    let cluster = Cluster::start("net-wait");
    let eps = cluster.endpoints();
    runtime().block_on(async {
        common::side_by_side(vec![
            (
                "a_watch_that_never_delivers",
                Box::pin(a_watch_that_never_delivers(eps.clone())),
            ),
            (
                "a_grant_answered_after_the_lease_ran_out",
                Box::pin(a_grant_answered_after_the_lease_ran_out(eps.clone())),
            ),
            (
                "lost_a_margin_early",
                Box::pin(lost_a_margin_early(eps.clone())),
            ),
            ("lost_says_why", Box::pin(lost_says_why(eps.clone()))),
        ])
        .await;
    });
}
