//! `etcdbench`: fairlock-etcd against etcd's own lock, driven the same way (issue 13).
//!
//! ```text
//! bash crates/fairlock-bench/peers/etcd-mutex/build.sh      # optional: the Go peer
//! cargo run --release -p fairlock-bench --example etcdbench -- [--seconds 5] [--rounds 2]
//!     [--clients 1,4,16] [--only etcd,go,etcdctl,etcdctl-true,local] [--go PATH]
//!     [--shapes [--compact]]
//! ```
//!
//! `--shapes` runs only where a one-client cycle's time goes (`etcdbench/shapes.rs`): etcd's
//! Go mutex's requests and fairlock-etcd's, each sent raw with `etcd-client`, and the library
//! itself, async and blocking, interleaved.
//!
//! Starts its own 3-member etcd cluster on free 127.0.0.1 ports (data in a temporary
//! directory, removed at the end), then for every client count runs each lock in turn,
//! `--rounds` times (the order reversed every other round), `--seconds` each:
//!
//! * **fairlock-etcd**: `EtcdLock::connect` per client, `lock()` → critical section →
//!   `unlock()` in a loop;
//! * **etcd Mutex (Go)**: etcd 3.4's `clientv3/concurrency.Mutex`, one session per client,
//!   `Lock` → critical section → `Unlock` (`peers/etcd-mutex/main.go`, if built);
//! * **etcdctl lock**: `etcdctl lock NAME -- etcdbench stamp …` in a loop per client: a new
//!   process and a new session (lease) per acquisition; the command it runs stamps the grant
//!   and its own end, so hand-off is measured from that command's end (etcdctl unlocks after
//!   it) to the next command's start;
//! * **etcdctl lock -- true**: the same with `true`, as the issue has it: acquisitions/s and
//!   the whole cycle per acquisition (spawn of etcdctl to its exit) only;
//! * **fairlock (local file)**: `fairlock::FairLock` on a file, the reference point.
//!
//! After its tables it prints what each acquisition cost the cluster, from etcd's own counters
//! (`etcdbench/requests.rs`): requests by gRPC method, writes committed, WAL fsyncs.
//!
//! Every client is a process of its own (the etcdctl loops: a thread per client that spawns
//! etcdctl). The critical section is the bookkeeping only: a few atomics on a page of a file
//! that every client maps, which also carries the hand-off stamp (`CLOCK_MONOTONIC` of the
//! last unlock call) and checks mutual exclusion and token order. Hand-off = next holder's
//! return from lock − previous holder's stamp; wait = return from lock − call of lock.

#[path = "etcdbench/cluster.rs"]
mod cluster;
#[path = "etcdbench/requests.rs"]
mod requests;
#[path = "etcdbench/shapes.rs"]
mod shapes;
#[path = "etcdbench/stats.rs"]
mod stats;
#[path = "etcdbench/worker.rs"]
mod worker;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering::SeqCst;

use cluster::Cluster;
use stats::{Hist, Shm, now_ns, ns, rate, table, word};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Lock {
    Etcd,
    GoMutex,
    Etcdctl,
    EtcdctlTrue,
    Local,
}

const ALL: [Lock; 5] = [
    Lock::Etcd,
    Lock::GoMutex,
    Lock::Etcdctl,
    Lock::EtcdctlTrue,
    Lock::Local,
];

impl Lock {
    fn name(self) -> &'static str {
        match self {
            Lock::Etcd => "fairlock-etcd",
            Lock::GoMutex => "etcd Mutex (Go)",
            Lock::Etcdctl => "etcdctl lock",
            Lock::EtcdctlTrue => "etcdctl lock -- true",
            Lock::Local => "fairlock (local file)",
        }
    }

    fn flag(self) -> &'static str {
        match self {
            Lock::Etcd => "etcd",
            Lock::GoMutex => "go",
            Lock::Etcdctl => "etcdctl",
            Lock::EtcdctlTrue => "etcdctl-true",
            Lock::Local => "local",
        }
    }
}

/// What all rounds of one lock × client count saw.
#[derive(Default)]
struct Agg {
    secs: f64,
    /// acq/s of each round.
    rounds: Vec<f64>,
    wait: Hist,
    handoff: Hist,
    /// Per client: grants and waits.
    clients: Vec<(u64, Hist)>,
    out_of_order: u64,
    overlaps: u64,
    /// etcd's own counters per acquisition, summed over the runs (see `requests`).
    requests: requests::Counters,
    request_runs: usize,
}

impl Agg {
    fn grants(&self) -> u64 {
        self.clients.iter().map(|c| c.0).sum()
    }

    fn rate(&self) -> f64 {
        self.grants() as f64 / self.secs
    }

    fn add_client(&mut self, k: usize, grants: u64, wait: &Hist) {
        if self.clients.len() <= k {
            self.clients.resize_with(k + 1, Default::default);
        }
        self.clients[k].0 += grants;
        self.clients[k].1.merge(wait);
        self.wait.merge(wait);
    }
}

/// One client's samples file: either `S grant wait handoff` lines (the Go peer, the stamp
/// command; filtered by the window here) or the Rust worker's histograms.
fn read_samples(path: &Path, (start, end): (u64, u64)) -> (u64, Hist, Hist) {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let (mut grants, mut wait, mut handoff) = (0, Hist::default(), Hist::default());
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["S", g, wt, h] => {
                let g: u64 = g.parse().expect("grant stamp");
                if (start..end).contains(&g) {
                    grants += 1;
                    wait.add(wt.parse().expect("wait"));
                    if let Ok(h) = h.parse() {
                        handoff.add(h);
                    }
                }
            }
            ["grants", n] => grants = n.parse().expect("grants"),
            ["wait", rest @ ..] => wait = Hist::parse(rest),
            ["handoff", rest @ ..] => handoff = Hist::parse(rest),
            _ => {}
        }
    }
    (grants, wait, handoff)
}

struct Ctx {
    dir: PathBuf,
    endpoints: String,
    /// Every member's `HOST:PORT`, for their counters.
    members: Vec<String>,
    exe: PathBuf,
    go: Option<PathBuf>,
    seq: usize,
}

fn pdeathsig(cmd: &mut Command) -> &mut Command {
    // SAFETY: runs in the child between fork and exec; prctl is async-signal-safe and touches
    // no memory of the parent's.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        })
    }
}

/// One round of `lock` with `n` clients for `secs`, added to `agg`.
fn run(ctx: &mut Ctx, lock: Lock, n: usize, secs: f64, agg: &mut Agg) {
    ctx.seq += 1;
    let id = format!("{}-{n}-{}", lock.flag(), ctx.seq);
    let shm_path = ctx.dir.join(format!("shm-{id}"));
    let shm = Shm::create(&shm_path);
    let out = |k: usize| ctx.dir.join(format!("out-{id}-{k}"));
    let dur = (secs * 1e9) as u64;
    let counted = lock != Lock::Local;
    let before = if counted {
        requests::read(&ctx.members)
    } else {
        requests::Counters::default()
    };
    let count = |agg: &mut Agg, grants: u64| {
        if counted {
            let after = requests::read(&ctx.members);
            requests::add(
                &mut agg.requests,
                &requests::per_grant(&before, &after, grants),
            );
            agg.request_runs += 1;
        }
    };
    let window = match lock {
        Lock::Etcd | Lock::GoMutex | Lock::Local => {
            let mut children = Vec::new();
            for k in 0..n {
                let mut cmd = match lock {
                    Lock::GoMutex => {
                        let mut c = Command::new(ctx.go.as_ref().expect("the Go peer"));
                        c.args(["worker", "-endpoints", &ctx.endpoints, "-name", &id])
                            .args(["-client", &k.to_string()])
                            .arg("-shm")
                            .arg(&shm_path)
                            .arg("-out")
                            .arg(out(k));
                        c
                    }
                    _ => {
                        let mut c = Command::new(&ctx.exe);
                        c.args(["worker", lock.flag(), &k.to_string()])
                            .arg(&shm_path)
                            .arg(out(k));
                        if lock == Lock::Etcd {
                            c.args([&ctx.endpoints, &id]);
                        } else {
                            c.arg(ctx.dir.join(format!("{id}.lock")));
                        }
                        c
                    }
                };
                pdeathsig(&mut cmd)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::inherit());
                children.push(cmd.spawn().expect("start a client process"));
            }
            for c in &mut children {
                let mut line = String::new();
                BufReader::new(c.stdout.take().expect("stdout"))
                    .read_line(&mut line)
                    .expect("read a client's ready line");
                assert_eq!(line.trim(), "ready", "{} client did not start", lock.name());
            }
            let start = now_ns();
            shm.at(word::START).store(start, SeqCst);
            shm.at(word::END).store(start + dur, SeqCst);
            for c in &mut children {
                let mut stdin = c.stdin.take().expect("stdin");
                stdin.write_all(b"go\n").expect("start a client");
            }
            for mut c in children {
                let st = c.wait().expect("wait for a client");
                assert!(st.success(), "{} client failed: {st}", lock.name());
            }
            (start, start + dur)
        }
        Lock::Etcdctl | Lock::EtcdctlTrue => {
            let start = now_ns();
            let end = start + dur;
            let results: Vec<(u64, Hist)> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..n)
                    .map(|k| {
                        let out_k = out(k);
                        let (ctx, shm_path, id) = (&*ctx, &shm_path, &id);
                        s.spawn(move || {
                            let (mut grants, mut cycle) = (0u64, Hist::default());
                            loop {
                                let t0 = now_ns();
                                if t0 >= end {
                                    break;
                                }
                                let mut cmd = Command::new("etcdctl");
                                cmd.env("ETCDCTL_API", "3")
                                    .env("ETCDBENCH_T0", t0.to_string())
                                    .arg(format!("--endpoints={}", ctx.endpoints))
                                    .args(["lock", id, "--"]);
                                if lock == Lock::Etcdctl {
                                    cmd.arg(&ctx.exe).arg("stamp").arg(shm_path).arg(&out_k);
                                } else {
                                    cmd.arg("true");
                                }
                                let o = cmd
                                    .stdin(Stdio::null())
                                    .output()
                                    .expect("run etcdctl (bash ci/deps.sh installs it)");
                                assert!(
                                    o.status.success(),
                                    "etcdctl lock failed: {}",
                                    String::from_utf8_lossy(&o.stderr)
                                );
                                let t2 = now_ns();
                                if t2 < end {
                                    grants += 1;
                                    cycle.add(t2 - t0);
                                }
                            }
                            (grants, cycle)
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().expect("an etcdctl loop panicked"))
                    .collect()
            });
            if lock == Lock::EtcdctlTrue {
                // No grant stamp: an acquisition counts if its etcdctl exited in the window;
                // its "wait" is the whole cycle, spawn of etcdctl to its exit.
                let mut total = 0;
                for (k, (g, cycle)) in results.iter().enumerate() {
                    agg.add_client(k, *g, cycle);
                    total += g;
                }
                agg.secs += secs;
                agg.rounds.push(total as f64 / secs);
                count(agg, total);
                return;
            }
            (start, end)
        }
    };
    let mut total = 0;
    for k in 0..n {
        let (g, wait, handoff) = read_samples(&out(k), window);
        agg.add_client(k, g, &wait);
        agg.handoff.merge(&handoff);
        total += g;
    }
    agg.secs += secs;
    agg.rounds.push(total as f64 / secs);
    count(agg, total);
    if lock != Lock::Etcdctl {
        agg.out_of_order += shm.at(word::OUT_OF_ORDER).load(SeqCst);
    }
    agg.overlaps += shm.at(word::OVERLAPS).load(SeqCst);
}

/// What each acquisition cost the cluster, from etcd's own counters (`requests`): the mean
/// over the rounds of each lock × client count.
fn requests_table(aggs: &[(Lock, usize, Agg)]) {
    let counted: Vec<_> = aggs.iter().filter(|(_, _, a)| a.request_runs > 0).collect();
    if counted.is_empty() {
        return;
    }
    let mut methods: Vec<String> = Vec::new();
    for (_, _, a) in &counted {
        for m in a.requests.methods.keys() {
            if !methods.contains(m) {
                methods.push(m.clone());
            }
        }
    }
    methods.sort();
    let mut head = vec![
        "lock",
        "clients",
        "writes committed",
        "WAL fsyncs (3 members)",
    ];
    head.extend(methods.iter().map(String::as_str));
    let rows: Vec<Vec<String>> = counted
        .iter()
        .map(|(lock, n, a)| {
            let m = requests::mean(&a.requests, a.request_runs);
            let mut r = vec![
                lock.name().to_owned(),
                n.to_string(),
                format!("{:.2}", m.proposals),
                format!("{:.2}", m.fsyncs),
            ];
            r.extend(methods.iter().map(|k| {
                m.methods
                    .get(k)
                    .map_or("–".to_owned(), |v| format!("{v:.2}"))
            }));
            r
        })
        .collect();
    println!(
        "## Requests per acquisition (etcd's own counters)\n\n{}",
        table(&head, &rows)
    );
    println!(
        "* read from every member's `/metrics` before and after each run, divided by the run's \
         acquisitions: gRPC requests the members answered, by method (a streaming method counts \
         its streams, not its messages), Raft proposals committed (the leader's count: the \
         writes the cluster applied) and WAL fsyncs (all three members); the clients' connect \
         and goodbye are spread over the run's acquisitions"
    );
}

/// Removes the bench's directory when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_owned())
        })
        .unwrap_or_else(|| "?".into());
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cpu}; {cpus} CPUs; Linux {}", kernel.trim())
}

/// The filesystem `dir` is on, from `/proc/self/mounts` (the longest mount point above it).
fn filesystem(dir: &Path) -> String {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 3 && dir.starts_with(f[1]))
                .then(|| (f[1].len(), format!("{} ({} on {})", f[2], f[0], f[1])))
        })
        .max_by_key(|m| m.0)
        .map_or_else(|| "?".to_owned(), |m| m.1)
}

fn command_line(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|e| format!("{cmd}: {e}"))
}

struct Opts {
    seconds: f64,
    rounds: usize,
    clients: Vec<usize>,
    locks: Vec<Lock>,
    go: Option<PathBuf>,
    /// `--shapes`: only the one-client A/B of request shapes (`etcdbench/shapes.rs`).
    shapes: bool,
    /// `--compact`: with `--shapes`, compact the store before each round.
    compact: bool,
}

fn parse_args(args: &[String]) -> Opts {
    let default_go = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/peers/etcd-mutex");
    let mut o = Opts {
        seconds: 5.0,
        rounds: 2,
        clients: vec![1, 4, 16],
        locks: ALL.to_vec(),
        go: default_go.exists().then_some(default_go),
        shapes: false,
        compact: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .unwrap_or_else(|| panic!("{a} needs a value"))
                .clone()
        };
        match a.as_str() {
            "--seconds" => o.seconds = val().parse().expect("--seconds S"),
            "--rounds" => o.rounds = val().parse().expect("--rounds R"),
            "--clients" => {
                o.clients = val()
                    .split(',')
                    .map(|c| c.parse().expect("--clients 1,4,16"))
                    .collect()
            }
            "--only" => {
                let v = val();
                o.locks = ALL
                    .into_iter()
                    .filter(|l| v.split(',').any(|f| f == l.flag()))
                    .collect();
            }
            "--go" => o.go = Some(PathBuf::from(val())),
            "--shapes" => o.shapes = true,
            "--compact" => o.compact = true,
            _ => panic!(
                "unknown argument {a}; usage: etcdbench [--seconds S] [--rounds R] \
                 [--clients 1,4,16] [--only etcd,go,etcdctl,etcdctl-true,local] [--go PATH] \
                 [--shapes [--compact]]"
            ),
        }
    }
    o
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("worker") => return worker::worker(&args[1..]),
        Some("stamp") => return worker::stamp(&args[1..]),
        _ => {}
    }
    let mut o = parse_args(&args);
    let mut notes = Vec::new();
    if o.locks.contains(&Lock::GoMutex) && o.go.is_none() {
        o.locks.retain(|&l| l != Lock::GoMutex);
        notes.push(
            "etcd Mutex (Go): not run, the peer is not built \
             (`bash crates/fairlock-bench/peers/etcd-mutex/build.sh`)"
                .to_owned(),
        );
    }

    let load_start = loadavg();
    let dir = TempDir(std::env::temp_dir().join(format!(
        "etcdbench-{}-{}",
        std::process::id(),
        now_ns()
    )));
    std::fs::create_dir_all(&dir.0).expect("create the bench's directory");
    let fs_type = filesystem(&dir.0);
    let cluster = Cluster::start(&dir.0);
    let mut ctx = Ctx {
        dir: dir.0.clone(),
        endpoints: cluster.joined(),
        members: cluster.endpoints(),
        exe: std::env::current_exe().expect("own path"),
        go: o.go.clone(),
        seq: 0,
    };

    println!("# etcdbench\n");
    println!("* command: `etcdbench {}`", args.join(" "));
    println!("* machine: {}", machine());
    println!("* load average at start: {load_start}");
    println!(
        "* etcd: {} (`etcdctl`: {}), 3 members on 127.0.0.1, `--heartbeat-interval 50 \
         --election-timeout 500`, data in {} on {fs_type}",
        Cluster::version(),
        command_line("etcdctl", &["version"]).replace('\n', ", "),
        dir.0.display()
    );
    if let Some(g) = &o.go {
        println!("* Go peer: {}", g.display());
    }
    println!(
        "* {} round(s) of {} s per lock and client count, order reversed every other round; \
         one process per client (etcdctl: one thread per client spawning etcdctl)",
        o.rounds, o.seconds
    );
    for n in &notes {
        println!("* {n}");
    }
    println!();
    if o.shapes {
        shapes::run(&cluster.endpoints(), o.seconds, o.rounds, o.compact);
        println!("* load average at end: {}", loadavg());
        return;
    }

    let mut aggs: Vec<(Lock, usize, Agg)> = Vec::new();
    for &n in &o.clients {
        let mut here: Vec<(Lock, Agg)> = o.locks.iter().map(|&l| (l, Agg::default())).collect();
        for r in 0..o.rounds {
            let order: Vec<usize> = if r % 2 == 0 {
                (0..here.len()).collect()
            } else {
                (0..here.len()).rev().collect()
            };
            for i in order {
                let (lock, agg) = &mut here[i];
                eprint!("{} × {n}, round {} ... ", lock.name(), r + 1);
                run(&mut ctx, *lock, n, o.seconds, agg);
                eprintln!("{}", rate(*agg.rounds.last().expect("a round")));
            }
        }
        aggs.extend(here.into_iter().map(|(l, a)| (l, n, a)));
    }
    let load_end = loadavg();

    let base = |n: usize| {
        aggs.iter()
            .find(|(l, m, _)| *l == Lock::Etcd && *m == n)
            .map(|(_, _, a)| a.rate())
    };
    let mut rows = Vec::new();
    let mut detail = Vec::new();
    let mut spread = Vec::new();
    for (lock, n, a) in &aggs {
        let ratio = base(*n).map_or("–".into(), |b| format!("{:.2}×", a.rate() / b));
        let (h50, h99) = if *lock == Lock::EtcdctlTrue {
            ("–".to_owned(), "–".to_owned())
        } else {
            (ns(a.handoff.quantile(0.5)), ns(a.handoff.quantile(0.99)))
        };
        rows.push(vec![
            lock.name().to_owned(),
            n.to_string(),
            rate(a.rate()),
            h50.clone(),
            h99.clone(),
            ns(a.wait.quantile(0.99)),
            ns(a.wait.quantile(1.0)),
            ratio,
        ]);
        let total = a.grants().max(1) as f64;
        let share = |f: fn(u64, u64) -> u64| {
            let s = a.clients.iter().map(|c| c.0).reduce(f).unwrap_or(0);
            format!("{:.1}%", 100.0 * s as f64 / total)
        };
        let worst_p99 = a.clients.iter().filter_map(|c| c.1.quantile(0.99)).max();
        detail.push(vec![
            lock.name().to_owned(),
            n.to_string(),
            a.grants().to_string(),
            rate(a.rate()),
            if *lock == Lock::EtcdctlTrue {
                "–".to_owned()
            } else {
                format!("{h50} / {h99} / {}", ns(a.handoff.quantile(1.0)))
            },
            format!(
                "{} / {} / {}",
                ns(a.wait.quantile(0.5)),
                ns(a.wait.quantile(0.99)),
                ns(a.wait.quantile(1.0))
            ),
            format!("{} / {}", share(u64::min), share(u64::max)),
            ns(worst_p99),
            match lock {
                Lock::Etcdctl | Lock::EtcdctlTrue => "n/a".to_owned(),
                _ => a.out_of_order.to_string(),
            },
            a.overlaps.to_string(),
        ]);
        let mut r = vec![lock.name().to_owned(), n.to_string()];
        r.extend(a.rounds.iter().map(|&x| rate(x)));
        spread.push(r);
    }

    println!("## Summary\n");
    println!(
        "{}",
        table(
            &[
                "lock",
                "clients",
                "acq/s",
                "hand-off p50",
                "hand-off p99",
                "wait p99",
                "wait max",
                "acq/s ÷ fairlock-etcd",
            ],
            &rows
        )
    );
    println!("## Detail\n");
    println!(
        "{}",
        table(
            &[
                "lock",
                "clients",
                "acquisitions",
                "acq/s",
                "hand-off p50 / p99 / max",
                "wait p50 / p99 / max",
                "client share min / max",
                "worst client's wait p99",
                "out of token order",
                "overlaps",
            ],
            &detail
        )
    );
    let mut head = vec!["lock", "clients"];
    let labels: Vec<String> = (1..=o.rounds).map(|r| format!("round {r} acq/s")).collect();
    head.extend(labels.iter().map(String::as_str));
    println!("## Rounds\n\n{}", table(&head, &spread));
    requests_table(&aggs);
    println!("* load average at end: {load_end}");
    println!(
        "* `etcdctl lock -- true`: hand-off not measurable (nothing runs at the grant); its \
         wait columns are the whole cycle, spawn of etcdctl to its exit"
    );
    println!(
        "* `etcdctl lock`: the grant is the start of the command etcdctl runs, the release its \
         end (etcdctl unlocks after it exits); the wait counts from the spawn of etcdctl; \
         token order is n/a (etcdctl exposes no create revision)"
    );
    drop(cluster);
}
