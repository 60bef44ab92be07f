//! `etcdbench --shapes`: where a one-client fairlock-etcd cycle's time goes, as an A/B in one
//! run. On the bench's own cluster, one process, one client, interleaved rounds:
//!
//! * **Go's shape, raw**: the requests of etcd's `concurrency.Mutex` sent with `etcd-client`
//!   directly (a transaction that puts the session's key and reads the queue's first key; a
//!   delete);
//! * **fairlock's shape, raw**: the requests of a fairlock-etcd cycle, the same way (the join
//!   with its reads and the nested grant; the release with the record and the receipt);
//! * **fairlock's shape, session keys** (a design not built): the same requests, with the
//!   queue key and the receipt named once per session (`q/LEASE`, `r/LEASE`) instead of once
//!   per acquisition, so that etcd's index does not grow with every acquisition;
//! * **… and no grant record** (a design not built): session keys, and no `held` record — the
//!   join puts the key, deletes the last receipt and reads the queue's first key (as Go's
//!   does); the release deletes the key and writes the receipt; the token would be the key's
//!   own create revision;
//! * **fairlock-etcd, async**: `AsyncEtcdLock` on a current-thread runtime;
//! * **fairlock-etcd, blocking**: `EtcdLock` (its calls run on the session's runtime thread).
//!
//! The first two differ only in what they ask of etcd; the last two add the library. With
//! `--compact` the store is compacted before each round: etcd keeps deleted keys in its index
//! until then, and every acquisition of fairlock-etcd names a new key, so without compactions
//! its ranges over the queue's prefix slow down round after round.

use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
};

use crate::stats::table;

const SHAPES: [&str; 6] = [
    "Go's shape, raw etcd-client",
    "fairlock's shape, raw etcd-client",
    "fairlock's shape, session keys",
    "… and no grant record",
    "fairlock-etcd, async",
    "fairlock-etcd, blocking",
];

/// Runs the shapes `rounds` times for `seconds` each, interleaved, and prints cycles/s;
/// `compact`: the store compacted at its current revision before each round.
pub fn run(endpoints: &[String], seconds: f64, rounds: usize, compact: bool) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let period = Duration::from_secs_f64(seconds);
    let mut rates = vec![Vec::new(); SHAPES.len()];
    let blocking =
        fairlock_etcd::EtcdLock::connect(endpoints, "shape-blocking").expect("connect (blocking)");
    let (client, lease, lock) = rt.block_on(async {
        let client = Client::connect(endpoints, None).await.expect("connect");
        let lease = client
            .lease_client()
            .grant(600, None)
            .await
            .expect("a lease")
            .id();
        let lock = fairlock_etcd::AsyncEtcdLock::connect(endpoints, "shape-async")
            .await
            .expect("connect (async)");
        (client, lease, lock)
    });
    let mut seq = 0u64;
    // Per shape: the time of each cycle's acquiring request(s) and releasing request(s),
    // summed over every cycle of every round (the cycle traced request by request, from the
    // client).
    let mut halves = vec![[Duration::ZERO; 2]; SHAPES.len()];
    let mut counted = vec![0u32; SHAPES.len()];
    for round in 0..rounds {
        if compact {
            // etcd keeps every deleted key in its index until a compaction, and a range over
            // the queue's prefix walks them all: each fairlock acquisition's key is new.
            rt.block_on(async {
                let mut kv = client.kv_client();
                let now = kv.get("shape", None).await.expect("a read");
                let rev = now.header().map(|h| h.revision()).unwrap_or(0);
                kv.compact(rev, None).await.expect("a compaction");
            });
        }
        let mut order: Vec<usize> = (0..SHAPES.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let start = Instant::now();
            let mut cycles = 0u64;
            while start.elapsed() < period {
                let took = match i {
                    0 => rt.block_on(go_cycle(&client, lease)),
                    1 => {
                        seq += 1;
                        rt.block_on(fairlock_cycle(&client, lease, Naming::PerAcquisition(seq)))
                    }
                    2 => rt.block_on(fairlock_cycle(&client, lease, Naming::PerSession)),
                    3 => rt.block_on(recordless_cycle(&client, lease)),
                    4 => rt.block_on(async {
                        let t = Instant::now();
                        let g = lock.lock().await.expect("lock");
                        let locked = t.elapsed();
                        g.unlock().await.expect("unlock");
                        [locked, t.elapsed() - locked]
                    }),
                    _ => {
                        let t = Instant::now();
                        let g = blocking.lock().expect("lock");
                        let locked = t.elapsed();
                        g.unlock().expect("unlock");
                        [locked, t.elapsed() - locked]
                    }
                };
                halves[i][0] += took[0];
                halves[i][1] += took[1];
                counted[i] += 1;
                cycles += 1;
            }
            let r = cycles as f64 / start.elapsed().as_secs_f64();
            eprintln!("{} (round {}) ... {r:.0} /s", SHAPES[i], round + 1);
            rates[i].push(r);
        }
    }
    let go = rates[0].iter().sum::<f64>() / rates[0].len() as f64;
    let rows: Vec<Vec<String>> = SHAPES
        .iter()
        .zip(&rates)
        .map(|(name, r)| {
            let mean = r.iter().sum::<f64>() / r.len() as f64;
            vec![
                (*name).to_owned(),
                r.iter()
                    .map(|x| format!("{x:.0}"))
                    .collect::<Vec<_>>()
                    .join(" / "),
                format!("{:.2} ms", 1000.0 / mean),
                format!("{:.2}×", mean / go),
            ]
        })
        .collect();
    println!(
        "\n## Request shapes, one client (`--shapes`{})\n",
        if compact { ", `--compact`" } else { "" }
    );
    println!(
        "{}",
        table(
            &["what", "cycles/s by round", "per cycle", "÷ Go's shape"],
            &rows
        )
    );
    let ms = |d: Duration, n: u32| d.as_secs_f64() * 1000.0 / f64::from(n.max(1));
    let go = [ms(halves[0][0], counted[0]), ms(halves[0][1], counted[0])];
    let rows: Vec<Vec<String>> = SHAPES
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let (a, r) = (ms(halves[i][0], counted[i]), ms(halves[i][1], counted[i]));
            vec![
                (*name).to_owned(),
                format!("{a:.3} ms ({:.2}× Go's)", a / go[0]),
                format!("{r:.3} ms ({:.2}× Go's)", r / go[1]),
            ]
        })
        .collect();
    println!("\nEach cycle request by request (mean over every cycle, from the client):\n");
    println!(
        "{}",
        table(&["what", "acquire (the join)", "release"], &rows)
    );
}

/// One cycle of etcd's `concurrency.Mutex`, as its `Lock` and `Unlock` send it.
async fn go_cycle(client: &Client, lease: i64) -> [Duration; 2] {
    let prefix = b"shape-go/".to_vec();
    let mut key = prefix.clone();
    key.extend_from_slice(format!("{lease:x}").as_bytes());
    let first = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1);
    let txn = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([
            TxnOp::put(key.clone(), "", Some(PutOptions::new().with_lease(lease))),
            TxnOp::get(prefix.clone(), Some(first.clone())),
        ])
        .or_else([
            TxnOp::get(key.clone(), None),
            TxnOp::get(prefix.clone(), Some(first)),
        ]);
    let mut kv = client.kv_client();
    let t = Instant::now();
    kv.txn(txn).await.expect("Go's lock transaction");
    let locked = t.elapsed();
    kv.delete(key, None).await.expect("Go's unlock");
    [locked, t.elapsed() - locked]
}

/// One cycle of fairlock-etcd's requests for an uncontended lock (`queue.rs`): the join (put
/// our key, delete the last receipt, the nested grant, whose other branch — taken when the
/// queue is not empty — reads the two newest keys and the record) and the release (delete our
/// key, write the record and our receipt).
async fn fairlock_cycle(client: &Client, lease: i64, naming: Naming) -> [Duration; 2] {
    let base = match naming {
        Naming::PerAcquisition(_) => "fairlock/shape-raw",
        Naming::PerSession => "fairlock/shape-session",
    };
    let queue = format!("{base}/q/").into_bytes();
    let held = format!("{base}/held").into_bytes();
    let (entry, last) = match naming {
        Naming::PerAcquisition(seq) => (
            format!("{lease:016x}-{seq}"),
            format!("{lease:016x}-{}", seq - 1),
        ),
        Naming::PerSession => (format!("{lease:016x}"), format!("{lease:016x}")),
    };
    let key = [queue.as_slice(), entry.as_bytes()].concat();
    let receipt = format!("{base}/r/{entry}").into_bytes();
    let last_receipt = format!("{base}/r/{last}").into_bytes();
    let leased = || Some(PutOptions::new().with_lease(lease));
    let absent = |k: &[u8]| Compare::create_revision(k.to_vec(), CompareOp::Equal, 0);
    let record = format!("held @{entry} clean");
    let starts = |w: &str| {
        [
            Compare::value(held.clone(), CompareOp::Greater, format!("{w} ")),
            Compare::value(held.clone(), CompareOp::Less, format!("{w}!")),
        ]
    };
    let put = |died: bool| {
        let v = format!("held @{entry} {}", if died { "died" } else { "clean" });
        TxnOp::put(held.clone(), v, None)
    };
    let grant = Txn::new()
        .when([Compare::create_revision(queue.clone(), CompareOp::Equal, 0).with_prefix()])
        .and_then([TxnOp::txn(
            Txn::new()
                .when(starts("held"))
                .and_then([put(true)])
                .or_else([TxnOp::txn(
                    Txn::new()
                        .when(starts("released"))
                        .and_then([put(false)])
                        .or_else([TxnOp::txn(
                            Txn::new().when([absent(&held)]).and_then([put(false)]),
                        )]),
                )]),
        )])
        .or_else([
            TxnOp::get(
                queue.clone(),
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_sort(SortTarget::Create, SortOrder::Descend)
                        .with_limit(2)
                        .with_keys_only(),
                ),
            ),
            TxnOp::get(held.clone(), None),
        ]);
    // With session names the receipt is the last acquisition's, deleted by this join: its
    // guard would have to compare the receipt's value (not built); here only the key's.
    let guards = match naming {
        Naming::PerAcquisition(_) => vec![absent(&key), absent(&receipt)],
        Naming::PerSession => vec![absent(&key)],
    };
    let join = Txn::new()
        .when(guards)
        .and_then([
            TxnOp::put(key.clone(), "pid=0", leased()),
            TxnOp::delete(last_receipt, None),
            TxnOp::txn(grant),
        ])
        .or_else([TxnOp::get(key.clone(), None)]);
    let mut kv = client.kv_client();
    let t = Instant::now();
    let joined = kv.txn(join).await.expect("the join");
    let locked = t.elapsed();
    let token = joined.header().map(|h| h.revision()).unwrap_or(0);
    let released = format!("released {token}");
    let release = Txn::new()
        .when([
            Compare::create_revision(key.clone(), CompareOp::Equal, token),
            Compare::value(held.clone(), CompareOp::Equal, record),
        ])
        .and_then([
            TxnOp::delete(key, None),
            TxnOp::put(held, released.clone(), None),
            TxnOp::put(receipt, released, leased()),
        ]);
    let done = kv.txn(release).await.expect("the release");
    assert!(done.succeeded(), "the raw release found the lock not ours");
    [locked, t.elapsed() - locked]
}

/// How a shape names the queue key and the receipt.
#[derive(Clone, Copy)]
enum Naming {
    /// Once per acquisition (`LEASE-SEQ`), as fairlock-etcd does.
    PerAcquisition(u64),
    /// Once per session (`LEASE`): a design not built.
    PerSession,
}

/// A design not built: session keys and no grant record. The join puts the key (with the
/// session's lease), deletes the last receipt and reads the queue's first key (the holder: as
/// Go's mutex reads it); the release deletes the key and writes the receipt.
async fn recordless_cycle(client: &Client, lease: i64) -> [Duration; 2] {
    let queue = b"fairlock/shape-norecord/q/".to_vec();
    let entry = format!("{lease:016x}");
    let key = [queue.as_slice(), entry.as_bytes()].concat();
    let receipt = format!("fairlock/shape-norecord/r/{entry}").into_bytes();
    let first = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1)
        .with_keys_only();
    let join = Txn::new()
        .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
        .and_then([
            TxnOp::put(
                key.clone(),
                "pid=0",
                Some(PutOptions::new().with_lease(lease)),
            ),
            TxnOp::delete(receipt.clone(), None),
            TxnOp::get(queue.clone(), Some(first)),
        ])
        .or_else([TxnOp::get(key.clone(), None)]);
    let mut kv = client.kv_client();
    let t = Instant::now();
    let joined = kv.txn(join).await.expect("the join");
    let locked = t.elapsed();
    let token = joined.header().map(|h| h.revision()).unwrap_or(0);
    let release = Txn::new()
        .when([Compare::create_revision(
            key.clone(),
            CompareOp::Equal,
            token,
        )])
        .and_then([
            TxnOp::delete(key, None),
            TxnOp::put(
                receipt,
                format!("released {token}"),
                Some(PutOptions::new().with_lease(lease)),
            ),
        ]);
    let done = kv.txn(release).await.expect("the release");
    assert!(done.succeeded(), "the raw release found the lock not ours");
    [locked, t.elapsed() - locked]
}
