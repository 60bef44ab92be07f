//! The grant a join makes when it finds the queue empty (`held @ENTRY clean|died`, see
//! `Held`): answers lost at each step, a lease gone between a join that granted and its retry,
//! and what `owner_died` and `status` say afterwards. One cluster; each scenario on a lock name
//! of its own.

use std::time::Duration;

use crate::common::cluster::Cluster;
use crate::common::proxy::{Proxy, Replies};
use crate::common::{connect_async, keys, runtime, show, until_status};
use fairlock_etcd::Error;

const RT: Duration = Duration::from_secs(2);

/// A join whose first copy granted but whose answer was lost: the retry finds its key, looks,
/// keeps the clean verdict and holds; `status` names it as the holder (the record's revision
/// is its token); the next holder is told nothing died.
async fn a_retried_join_whose_first_copy_granted(eps: Vec<String>) {
    let proxy = Proxy::start(&eps[0]);
    let a = connect_async(&[proxy.endpoint()], "retried", 10, RT).await;
    let b = connect_async(&eps, "retried", 10, RT).await;
    proxy.on_request(b"retried/q/", Replies::Drop);
    let heal = async {
        let s = until_status(&b, Duration::from_secs(2), |s| s.holder.is_some()).await;
        assert!(s.is_ok(), "the join's grant is not seen as a holder: {s:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        proxy.heal();
        s.unwrap()
    };
    let (g, s) = tokio::join!(a.lock(), heal);
    let g = g.unwrap_or_else(|e| panic!("{e}"));
    assert!(!g.owner_died(), "a retried join was told a holder died");
    assert_eq!(s.holder.as_ref().map(|h| h.token), Some(g.token()), "{s:?}");
    g.unlock().await.unwrap();
    let g = b.lock_timeout(Duration::from_secs(3)).await.unwrap();
    assert!(!g.owner_died());
    g.unlock().await.unwrap();
}

/// A join that granted, its answer lost, then our lease gone on the server (revoked): the
/// acquisition takes its record back before it joins again under a new lease. Nobody ever
/// held the lock for a caller, and nobody died.
async fn a_lease_gone_after_a_join_that_granted(eps: Vec<String>, cluster: &Cluster) {
    let proxy = Proxy::start(&eps[0]);
    let a = connect_async(&[proxy.endpoint()], "stale", 10, RT).await;
    let b = connect_async(&eps, "stale", 10, RT).await;
    proxy.on_request(b"stale/q/", Replies::Drop);
    let revoke = async {
        let s = until_status(&b, Duration::from_secs(2), |s| keys(s) == 1)
            .await
            .unwrap();
        let lease = s
            .holder
            .clone()
            .or(s.waiters.first().cloned())
            .unwrap()
            .lease;
        tokio::time::sleep(Duration::from_millis(100)).await;
        cluster
            .etcdctl(&["lease", "revoke", &format!("{lease:x}")])
            .unwrap();
        proxy.heal();
    };
    let (g, ()) = tokio::join!(a.lock_timeout(Duration::from_secs(5)), revoke);
    match g {
        Ok(g) => {
            assert!(
                !g.owner_died(),
                "owner_died, though nobody held the lock before"
            );
            g.unlock().await.unwrap();
        }
        Err(_) => {
            let g = b.lock_timeout(Duration::from_secs(3)).await.unwrap();
            assert!(
                !g.owner_died(),
                "owner_died, though nobody held the lock before"
            );
            g.unlock().await.unwrap();
        }
    }
}

/// A waiter behind a holder whose grant step's answer is lost (its record written, its
/// deadline past): its withdraw takes that record back (the second of its take-backs), and
/// the next holder is told nothing died.
async fn a_grant_step_answer_lost_behind_a_holder(eps: Vec<String>) {
    let proxy = Proxy::start(&eps[0]);
    let h = connect_async(&eps, "step", 10, RT).await;
    let w = connect_async(&[proxy.endpoint()], "step", 10, RT).await;
    let other = connect_async(&eps, "step", 10, RT).await;
    let g = h.lock().await.unwrap();
    let drive = async {
        let s = until_status(&other, Duration::from_secs(2), |s| s.waiters.len() == 1)
            .await
            .unwrap();
        let t = s.waiters[0].token;
        proxy.on_request(format!("held {t} clean").as_bytes(), Replies::Drop);
        g.unlock().await.unwrap();
    };
    let (r, ()) = tokio::join!(w.lock_timeout(Duration::from_secs(2)), drive);
    assert!(matches!(r, Err(Error::Timeout { .. })), "{}", show(&r));
    proxy.heal();
    let s = until_status(&other, Duration::from_secs(3), |s| keys(s) == 0).await;
    assert!(s.is_ok(), "{s:?}");
    let g = other.lock_timeout(Duration::from_secs(2)).await.unwrap();
    assert!(!g.owner_died(), "owner_died after a withdrawn grant step");
    g.unlock().await.unwrap();
}

/// A join's record taken back by an acquisition that never learnt its token: `released TOKEN`
/// with the record's revision, so `status` keeps the last token (not 0).
async fn a_record_taken_back_keeps_the_last_token(eps: Vec<String>) {
    let proxy = Proxy::start(&eps[0]);
    let a = connect_async(&[proxy.endpoint()], "last", 10, RT).await;
    let b = connect_async(&eps, "last", 10, RT).await;
    let g = b.lock().await.unwrap();
    let t1 = g.token();
    g.unlock().await.unwrap();
    assert_eq!(b.status().await.unwrap().last_token, t1);
    proxy.on_request(b"last/q/", Replies::Drop);
    let r = tokio::time::timeout(Duration::from_millis(800), a.lock()).await;
    assert!(r.is_err(), "granted though every answer was dropped");
    proxy.heal();
    let s = until_status(&b, Duration::from_secs(3), |s| keys(s) == 0)
        .await
        .unwrap();
    assert!(
        s.last_token > t1,
        "last token {t1}, then {}: {s:?}",
        s.last_token
    );
    let g = b.lock_timeout(Duration::from_secs(2)).await.unwrap();
    assert!(!g.owner_died(), "owner_died after a record taken back");
    g.unlock().await.unwrap();
}

#[test]
fn the_grant_a_join_makes_survives_lost_answers_and_leases() {
    let cluster = Cluster::start("grant");
    let eps = cluster.endpoints();
    runtime().block_on(async {
        a_retried_join_whose_first_copy_granted(eps.clone()).await;
        a_lease_gone_after_a_join_that_granted(eps.clone(), &cluster).await;
        a_grant_step_answer_lost_behind_a_holder(eps.clone()).await;
        a_record_taken_back_keeps_the_last_token(eps.clone()).await;
    });
}
