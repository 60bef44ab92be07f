//! What each acquisition costs the cluster, counted by etcd itself: the members' Prometheus
//! counters (`/metrics` on their client port) read before and after each run. Per gRPC method,
//! the requests the members answered (`grpc_server_handled_total`, summed over the members:
//! a client talks to one member, which forwards writes to the leader inside Raft, not as gRPC);
//! the write-ahead-log fsyncs (`etcd_disk_wal_fsync_duration_seconds_count`, summed: every
//! member syncs each committed write); and the Raft proposals committed
//! (`etcd_server_proposals_committed_total`, the leader's: one per write the cluster applied).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Counters of the whole cluster at one moment.
#[derive(Clone, Default)]
pub struct Counters {
    /// `Service/Method` → requests handled.
    pub methods: BTreeMap<String, f64>,
    /// WAL fsyncs, all members.
    pub fsyncs: f64,
    /// Proposals committed, the most any member reports (the leader's count).
    pub proposals: f64,
}

/// The counters of every member at `endpoints` (`HOST:PORT`).
pub fn read(endpoints: &[String]) -> Counters {
    let mut c = Counters::default();
    for e in endpoints {
        let text = scrape(e);
        let mut proposals: f64 = 0.0;
        for line in text.lines() {
            if line.starts_with('#') {
                continue;
            }
            let Some((name, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(v) = value.parse::<f64>() else {
                continue;
            };
            if let Some(labels) = name.strip_prefix("grpc_server_handled_total{") {
                let label = |k: &str| {
                    labels
                        .split(',')
                        .find_map(|kv| kv.strip_prefix(&format!("{k}=\"")))
                        .map(|x| x.trim_end_matches(['"', '}']).to_owned())
                };
                if let (Some(s), Some(m)) = (label("grpc_service"), label("grpc_method")) {
                    let s = s.rsplit('.').next().unwrap_or(&s).to_owned();
                    *c.methods.entry(format!("{s}/{m}")).or_default() += v;
                }
            } else if name == "etcd_disk_wal_fsync_duration_seconds_count" {
                c.fsyncs += v;
            } else if name == "etcd_server_proposals_committed_total" {
                proposals = proposals.max(v);
            }
        }
        c.proposals = c.proposals.max(proposals);
    }
    c
}

/// What happened between `before` and `after`, per acquisition (`grants`).
pub fn per_grant(before: &Counters, after: &Counters, grants: u64) -> Counters {
    let g = grants.max(1) as f64;
    let mut d = Counters {
        fsyncs: (after.fsyncs - before.fsyncs) / g,
        proposals: (after.proposals - before.proposals) / g,
        ..Counters::default()
    };
    for (m, v) in &after.methods {
        let was = before.methods.get(m).copied().unwrap_or(0.0);
        if v - was > 0.0 {
            d.methods.insert(m.clone(), (v - was) / g);
        }
    }
    d
}

/// Adds `x` (per-grant figures of one run) into `acc`, for the mean over runs.
pub fn add(acc: &mut Counters, x: &Counters) {
    acc.fsyncs += x.fsyncs;
    acc.proposals += x.proposals;
    for (m, v) in &x.methods {
        *acc.methods.entry(m.clone()).or_default() += v;
    }
}

/// `acc` divided by the number of runs added into it.
pub fn mean(acc: &Counters, runs: usize) -> Counters {
    let r = runs.max(1) as f64;
    Counters {
        fsyncs: acc.fsyncs / r,
        proposals: acc.proposals / r,
        methods: acc
            .methods
            .iter()
            .map(|(m, v)| (m.clone(), v / r))
            .collect(),
    }
}

/// `GET /metrics` from one member, over HTTP/1.0 on its client port.
fn scrape(endpoint: &str) -> String {
    let mut s = TcpStream::connect(endpoint)
        .unwrap_or_else(|e| panic!("connect to {endpoint} for /metrics: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {endpoint}\r\n\r\n").expect("send GET /metrics");
    let mut body = String::new();
    s.read_to_string(&mut body).expect("read /metrics");
    body
}
