//! Cluster faults: one member of three killed (locking goes on), one hung (a holder keeps its
//! lease), two killed (clear errors and no grant without a quorum, recovery when they return).

use crate::common;

use std::time::{Duration, Instant};

use crate::common::cluster::Cluster;
use crate::common::{connect, kind};
use fairlock_etcd::Error;

#[test]
fn one_member_killed_locking_goes_on() {
    let mut cluster = Cluster::start("one-down");
    let lock = connect(&cluster.endpoints(), "one", 3);
    let other = connect(&cluster.endpoints(), "one", 3);
    let mut last = 0;
    for round in 0..30 {
        if round == 10 {
            cluster.kill(0);
        }
        if round == 20 {
            // Member 0 back *in the quorum* before member 1 goes: killing 1 while 0 was still
            // starting (or catching up) left one member of three for a moment, and the
            // holders' 3 s leases could not be renewed (CI on a loaded machine, 2026-12-06).
            cluster.restart(0);
            cluster.wait_member_ready(0, Duration::from_secs(30));
            cluster.kill(1);
        }
        let g = lock.lock().unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert!(g.token() > last);
        last = g.token();
        assert!(matches!(other.try_lock(), Err(Error::WouldBlock { .. })));
        g.unlock().unwrap_or_else(|e| panic!("round {round}: {e}"));
        let g = other
            .lock()
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert!(!g.owner_died());
        assert!(g.token() > last);
        last = g.token();
        g.unlock().unwrap();
    }
    // Leases lived through the failover: nothing was lost.
    let g = lock.lock().unwrap();
    g.extend().unwrap();
    g.check().unwrap();
    g.unlock().unwrap();
}

/// A member that hangs (SIGSTOP: connections open, no answers) must not cost a holder its
/// lease: a keep-alive stuck on it is abandoned and retried on another member while the lease
/// still lives. (Each attempt used to wait for the whole request timeout, 5 s by default,
/// capped only by the lease's remaining time: one attempt routed to the hung member outlived
/// a 3 s TTL, and the holder lost a lock the cluster still served.)
///
/// Followers only: Debian's etcd 3.4.23 lets a leader that hung and resumed revoke leases
/// it thinks expired (etcd#15247, fixed later by etcd PR #16822), a server bug no client can
/// mask (the holder is told `LockLost`, truthfully).
#[test]
fn a_hung_follower_does_not_cost_a_holder_its_lease() {
    let mut cluster = Cluster::start("one-hung");
    let lock = fairlock_etcd::EtcdLock::options()
        .lease_ttl(Duration::from_secs(3))
        .request_timeout(Duration::from_secs(5))
        .connect(&cluster.endpoints(), "hung")
        .unwrap();
    let g = lock.lock().unwrap();
    let leader = cluster.leader();
    for member in (0..3).filter(|&m| m != leader) {
        cluster.stop(member);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if let Err(e) = g.check() {
                panic!("member {member} hung for {:?}: {e}", start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster.cont(member);
        cluster.wait_ready(Duration::from_secs(30));
    }
    g.unlock().unwrap();
}

#[test]
fn two_members_killed_no_grant_without_quorum_then_recovery() {
    let mut cluster = Cluster::start("no-quorum");
    let holder = connect(&cluster.endpoints(), "nq", 2);
    let waiter = connect(&cluster.endpoints(), "nq", 2);
    let g = holder.lock().unwrap();
    let waiting = std::thread::spawn(move || {
        let r = waiter.lock().map(|g| g.token());
        (r.map_err(|e| (kind(&e), format!("{e:?}"))), waiter)
    });
    common::wait_waiters(&holder, 1, Duration::from_secs(10));
    cluster.kill(1);
    cluster.kill(2);
    let cut = Instant::now();

    // A new client cannot connect (no lease can be granted without a quorum).
    let e = fairlock_etcd::EtcdLock::options()
        .request_timeout(Duration::from_secs(1))
        .connect(&cluster.endpoints(), "nq")
        .unwrap_err();
    assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
    assert!(e.to_string().contains("cannot reach a quorum"), "{e}");

    // The waiter is not granted: it stops with an error once its lease cannot be renewed.
    let (r, waiter) = waiting.join().unwrap();
    let (k, msg) = r.expect_err("no grant without a quorum");
    assert_eq!(k, "Unavailable", "{msg}");
    assert!(
        cut.elapsed() < Duration::from_secs(10),
        "{:?}",
        cut.elapsed()
    );

    // The holder is told, locally, once its TTL has passed without a renewal.
    let start = Instant::now();
    while g.check().is_ok() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "check() still Ok"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(matches!(g.check(), Err(Error::LockLost { .. })));
    assert!(matches!(g.unlock(), Err(Error::LockLost { .. })));

    // The members return: everything works again, with the same lock objects.
    cluster.restart(1);
    cluster.restart(2);
    cluster.wait_ready(Duration::from_secs(30));
    let g = holder.lock_timeout(Duration::from_secs(20)).unwrap();
    assert!(
        g.owner_died(),
        "the last holder's lease expired, no release was written"
    );
    g.unlock().unwrap();
    let g = waiter.lock().unwrap();
    assert!(!g.owner_died());
    g.unlock().unwrap();
}
