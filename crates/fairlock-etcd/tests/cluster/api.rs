//! The API on a real cluster: errors for bad input, try_lock and timeouts that leave no
//! trace in the queue, unlock semantics, status, the async API.

use crate::common;

use std::time::{Duration, Instant};

use crate::common::cluster::Cluster;
use crate::common::connect;
use fairlock_etcd::{AsyncEtcdLock, Error, EtcdLock};

#[test]
fn bad_endpoints_refused_connections_and_odd_names_give_clear_errors() {
    for (ep, what) in [
        ("localhost", "not HOST:PORT"),
        ("127.0.0.1:99999", "the port is not in 1..=65535"),
        ("grpc://127.0.0.1:2379", "unknown scheme"),
    ] {
        let e = EtcdLock::connect(&[ep], "x").unwrap_err();
        assert!(matches!(e, Error::InvalidEndpoint { .. }), "{ep}: {e:?}");
        assert!(
            e.to_string().contains(ep) && e.to_string().contains(what),
            "{e}"
        );
    }
    // TLS without the CA to check the cluster's certificate with (see `tls`): refused before
    // any connection, saying what is missing.
    match EtcdLock::connect(&["https://127.0.0.1:2379"], "x") {
        Err(Error::InvalidOption { what }) => {
            assert!(what.contains("need the CA certificate"), "{what}")
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    // Nobody listens on this port: refused, quickly, named.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let ep = format!("127.0.0.1:{port}");
    let start = Instant::now();
    let e = EtcdLock::options()
        .request_timeout(Duration::from_secs(2))
        .connect(&[ep.as_str()], "x")
        .unwrap_err();
    assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
    assert!(e.to_string().contains(&ep), "{e}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert!(std::error::Error::source(&e).is_some());
    let io: std::io::Error = e.into();
    assert_eq!(io.kind(), std::io::ErrorKind::NotConnected);

    let cluster = Cluster::start("api-errors");
    for (name, what) in [
        ("a\nb", "control character"),
        ("a/b", "'/'"),
        ("", "empty"),
        ("tab\there", "control character"),
    ] {
        let e = EtcdLock::connect(&cluster.endpoints(), name).unwrap_err();
        assert!(matches!(e, Error::InvalidName { .. }), "{name:?}: {e:?}");
        assert!(e.to_string().contains(what), "{e}");
        assert!(
            !e.to_string().contains('\n'),
            "the message must not carry the odd byte: {e}"
        );
    }
    let long = "é".repeat(128);
    assert!(matches!(
        EtcdLock::connect(&cluster.endpoints(), &long),
        Err(Error::InvalidName { .. })
    ));
    // Any other UTF-8 is a fine name.
    let l = connect(&cluster.endpoints(), "ünï cødé · 名前 ✓", 3);
    l.lock().unwrap().unlock().unwrap();
    let e = EtcdLock::options()
        .lease_ttl(Duration::from_millis(500))
        .connect(&cluster.endpoints(), "x")
        .unwrap_err();
    assert!(matches!(e, Error::InvalidOption { .. }), "{e:?}");
}

#[test]
fn try_lock_and_timeouts_never_jump_the_queue_nor_leave_a_key() {
    let cluster = Cluster::start("api-try");
    let a = connect(&cluster.endpoints(), "t", 5);
    let b = connect(&cluster.endpoints(), "t", 5);
    let g = a.try_lock().unwrap();
    assert!(!g.owner_died());
    assert!(matches!(b.try_lock(), Err(Error::WouldBlock { .. })));
    let start = Instant::now();
    assert!(matches!(
        b.lock_timeout(Duration::from_millis(300)),
        Err(Error::Timeout { .. })
    ));
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "{took:?}"
    );
    let s = a.status().unwrap();
    assert_eq!(s.holder.as_ref().map(|h| h.token), Some(g.token()));
    assert!(
        s.waiters.is_empty(),
        "a timed-out or refused try left a key: {s:?}"
    );
    assert!(
        s.holder
            .as_ref()
            .unwrap()
            .owner
            .contains(&format!("pid={}", std::process::id()))
    );

    // A waiter is queued: try_lock must not jump ahead of it when the lock is released.
    let waiter = std::thread::scope(|sc| {
        let w = sc.spawn(|| b.lock().map(|g| g.token()));
        common::wait_waiters(&a, 1, Duration::from_secs(10));
        let c = connect(&cluster.endpoints(), "t", 5);
        g.unlock().unwrap();
        // Between the release and the waiter's grant, and after: never granted to c.
        for _ in 0..20 {
            match c.try_lock() {
                Err(Error::WouldBlock { .. }) => {}
                Ok(g) => {
                    // Only once the waiter has had its turn and released.
                    assert!(w.is_finished(), "try_lock jumped the queue");
                    drop(g);
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        w.join().unwrap().unwrap()
    });
    assert!(waiter > 0);
}

#[test]
fn unlock_drop_status_and_extend() {
    let cluster = Cluster::start("api-unlock");
    let a = connect(&cluster.endpoints(), "u", 3);
    let g = a.lock().unwrap();
    assert_eq!(g.lease_ttl(), Duration::from_secs(3));
    let t1 = g.token();
    g.extend().unwrap();
    g.check().unwrap();
    drop(g); // released by Drop
    let s = a.status().unwrap();
    assert!(s.holder.is_none() && s.waiters.is_empty(), "{s:?}");
    assert_eq!(s.last_token, t1);
    let g = a.lock().unwrap();
    assert!(!g.owner_died(), "a guard dropped is a clean release");
    assert!(g.token() > t1);
    // A holder's key deleted behind its back (by hand): extend() says so, and check() from
    // then on.
    let key = format!(
        "fairlock/u/q/{:016x}-1",
        a.status().unwrap().holder.unwrap().lease
    );
    cluster.etcdctl(&["del", &key]).unwrap();
    assert!(matches!(g.extend(), Err(Error::LockLost { .. })));
    assert!(matches!(g.check(), Err(Error::LockLost { .. })));
    assert!(matches!(g.unlock(), Err(Error::LockLost { .. })));
    // The next holder: the key vanished without a release, so owner_died.
    let g = a.lock().unwrap();
    assert!(g.owner_died());
    g.unlock().unwrap();
    // Keys this version did not write are reported, not trusted.
    cluster
        .etcdctl(&["put", "fairlock/u/held", "garbage"])
        .unwrap();
    let e = a.lock().unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e:?}");
    assert!(e.to_string().contains("fairlock/u/held"), "{e}");
    assert!(a.status().unwrap_err().to_string().contains("garbage"));
}

#[test]
fn blocking_api_inside_a_runtime_is_refused() {
    let cluster = Cluster::start("api-rt");
    let l = connect(&cluster.endpoints(), "rt", 3);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let e = l.lock().unwrap_err();
        assert!(matches!(e, Error::InvalidOption { .. }), "{e:?}");
        assert!(e.to_string().contains("AsyncEtcdLock"), "{e}");
    });
}

#[test]
fn async_api_fifo_and_cancellation() {
    let cluster = Cluster::start("api-async");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let eps = cluster.endpoints();
        let a = AsyncEtcdLock::options()
            .lease_ttl(Duration::from_secs(3))
            .connect_async(&eps, "as")
            .await
            .unwrap();
        let g = a.lock().await.unwrap();
        // A lock() future dropped while waiting gives its place up.
        let b = AsyncEtcdLock::connect(&eps, "as").await.unwrap();
        let r = tokio::time::timeout(Duration::from_millis(300), b.lock()).await;
        assert!(r.is_err(), "granted while held");
        let start = Instant::now();
        loop {
            let s = a.status().await.unwrap();
            if s.waiters.is_empty() {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "the cancelled waiter's key stayed: {s:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Waiters in order.
        let mut tasks = Vec::new();
        for i in 0..4 {
            let l = AsyncEtcdLock::connect(&eps, "as").await.unwrap();
            tasks.push(tokio::spawn(async move {
                let g = l.lock().await.unwrap();
                let t = g.token();
                g.unlock().await.unwrap();
                (i, t)
            }));
            loop {
                if a.status().await.unwrap().waiters.len() == i + 1 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        g.unlock().await.unwrap();
        let mut last = 0;
        for (i, t) in tasks.into_iter().enumerate() {
            let (j, token) = t.await.unwrap();
            assert_eq!(i, j);
            assert!(token > last);
            last = token;
        }
        let g = b.try_lock().await.unwrap();
        g.check().unwrap();
        g.extend().await.unwrap();
        drop(g);
        let start = Instant::now();
        while a.status().await.unwrap().holder.is_some() {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "a dropped async guard was not released"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        a.close().await;
    });
}

/// `lock_timeout(ZERO)` and a deadline already past take a free lock (as the local lock's
/// do: one try), and time out on a held one without leaving a key. (The deadline used to be
/// checked before the first request: `fairlock run -w 0` never got a free lock.)
fn zero_deadlines(cluster: &Cluster) {
    let a = connect(&cluster.endpoints(), "zero", 3);
    let b = connect(&cluster.endpoints(), "zero", 3);
    let g = a.lock_timeout(Duration::ZERO).unwrap();
    let past = Instant::now().checked_sub(Duration::from_secs(1)).unwrap();
    assert!(matches!(b.lock_until(past), Err(Error::Timeout { .. })));
    assert!(matches!(
        b.lock_timeout(Duration::ZERO),
        Err(Error::Timeout { .. })
    ));
    let s = a.status().unwrap();
    assert!(s.waiters.is_empty(), "a zero timeout left a key: {s:?}");
    g.unlock().unwrap();
    b.lock_until(past).unwrap().unlock().unwrap();
}

/// Durations too large to add to `Instant::now()` do not panic: a huge `lock_timeout` waits
/// without a deadline, and huge option values are refused up front.
fn huge_durations(cluster: &Cluster) {
    let a = connect(&cluster.endpoints(), "huge", 3);
    a.lock_timeout(Duration::MAX).unwrap().unlock().unwrap();
    let far = Instant::now() + Duration::from_secs(100 * 365 * 86_400);
    a.lock_until(far).unwrap().unlock().unwrap();
    for opts in [
        EtcdLock::options().request_timeout(Duration::MAX).clone(),
        EtcdLock::options().connect_timeout(Duration::MAX).clone(),
    ] {
        let eps = cluster.endpoints();
        let r = std::panic::catch_unwind(|| opts.connect(&eps, "huge"));
        let e = r.expect("connect panicked").unwrap_err();
        assert!(matches!(e, Error::InvalidOption { .. }), "{e:?}");
    }
}

/// An unlock that finds the grant record not ours (written by hand, or garbage) still deletes
/// our key: it used to report the problem and leave the key, kept alive by our session, in
/// everyone's way.
fn a_foreign_record_at_unlock(cluster: &Cluster) {
    let a = connect(&cluster.endpoints(), "foreign", 10);
    let b = connect(&cluster.endpoints(), "foreign", 10);
    for (record, want) in [("held 1 clean", "LockLost"), ("garbage", "Corrupt")] {
        let g = a.lock().unwrap();
        cluster
            .etcdctl(&["put", "fairlock/foreign/held", record])
            .unwrap();
        let r = g.unlock();
        assert_eq!(common::outcome(&r), want, "{r:?}");
        cluster
            .etcdctl(&["put", "fairlock/foreign/held", "released 1"])
            .unwrap();
        let s = b.status().unwrap();
        assert!(
            s.holder.is_none() && s.waiters.is_empty(),
            "our key stayed: {s:?}"
        );
        b.lock_timeout(Duration::from_secs(2))
            .unwrap()
            .unlock()
            .unwrap();
    }
}

/// A lease revoked on the server before our keep-alive noticed: the next acquisition grants a
/// new lease and goes on (it used to fail with `LockLost` though it held nothing).
fn a_revoked_idle_lease(cluster: &Cluster) {
    let a = connect(&cluster.endpoints(), "revoked", 10);
    let g = a.lock().unwrap();
    let lease = a.status().unwrap().holder.unwrap().lease;
    g.unlock().unwrap();
    cluster
        .etcdctl(&["lease", "revoke", &format!("{lease:x}")])
        .unwrap();
    let g = a.lock().unwrap();
    assert_ne!(a.status().unwrap().holder.unwrap().lease, lease);
    assert!(!g.owner_died());
    g.unlock().unwrap();
}

#[test]
fn zero_and_huge_durations_foreign_records_and_revoked_leases() {
    let cluster = Cluster::start("api-edges");
    common::each(&[
        ("zero_deadlines", &|| zero_deadlines(&cluster)),
        ("huge_durations", &|| huge_durations(&cluster)),
        ("a_foreign_record_at_unlock", &|| {
            a_foreign_record_at_unlock(&cluster)
        }),
        ("a_revoked_idle_lease", &|| a_revoked_idle_lease(&cluster)),
    ]);
}
