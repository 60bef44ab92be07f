//! What an acquisition costs the cluster, counted by etcd itself (its `/metrics`): requests
//! are the lock's latency on etcd (each write is a Raft round and an fsync on every member),
//! so an extra one is a regression even when every answer is right.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use crate::common::cluster::Cluster;
use crate::common::connect;

/// `Txn` requests the members have answered, all together.
fn txns(cluster: &Cluster) -> f64 {
    let mut total = 0.0;
    for e in cluster.endpoints() {
        let mut s = TcpStream::connect(&e).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(s, "GET /metrics HTTP/1.0\r\nHost: {e}\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        total += body
            .lines()
            .filter(|l| {
                l.starts_with("grpc_server_handled_total{") && l.contains("grpc_method=\"Txn\"")
            })
            .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
            .sum::<f64>();
    }
    total
}

#[test]
fn an_uncontended_acquisition_and_release_cost_two_transactions() {
    let cluster = Cluster::start("requests");
    let lock = connect(&cluster.endpoints(), "requests", 10);
    // The first acquisition after connecting also has a session to set up; count after it.
    lock.lock().unwrap().unlock().unwrap();
    let before = txns(&cluster);
    let n = 20;
    for _ in 0..n {
        lock.lock().unwrap().unlock().unwrap();
    }
    let per = (txns(&cluster) - before) / f64::from(n);
    // The join (which, finding the queue empty, also writes the grant record) and the
    // release, as etcd's own Go mutex; a separate grant record made it three, a separate look
    // before it four. (A slow answer, past 200 ms, sends a second copy of an idempotent
    // request: a margin for a few.)
    assert!(
        per <= 2.25,
        "{per} transactions per acquisition and release"
    );
    // A try_lock on a held lock: the join tells it is not first; its withdraw; no look.
    let held = lock.lock().unwrap();
    let other = connect(&cluster.endpoints(), "requests", 10);
    let before = txns(&cluster);
    for _ in 0..n {
        assert!(other.try_lock().is_err());
    }
    let tried = (txns(&cluster) - before) / f64::from(n);
    assert!(
        tried <= 2.25,
        "{tried} transactions per try_lock that finds the lock held"
    );
    held.unlock().unwrap();
}
