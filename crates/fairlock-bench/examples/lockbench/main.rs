//! `lockbench`: fairlock against a robust process-shared pthread mutex, `flock`, OFD locks,
//! `std::sync::Mutex` and `parking_lot::Mutex`, run interleaved (ABBA rounds), printed as
//! markdown tables with absolute figures and ratios to each peer; and the shared kinds
//! (`rw`, `semaphore`: see `shared_kinds.rs`) against `pthread_rwlock_t`, `flock -s` and
//! `sem_open`. Scenario names on the command line run only those.
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-bench cargo run --release -p fairlock-bench --example lockbench -- [--quick]
//! ```
//!
//! See `docs/BENCHMARKS.md` for what every figure means. The harness re-executes itself
//! (`--worker ...`) for the multi-process scenarios and the crash-recovery trials.

mod competitors;
mod names;
mod shared_kinds;
mod util;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Acquire, Ordering::Release};
use std::time::Duration;

use fairlock_bench::futex;

use competitors::{
    Competitor, Fair, FairBounded, FairParked, FairR, FifoFloor, Flock, Ofd, PlMutex, Pthread,
    StdMutex,
};
use util::{Shm, busy_until, median, now_ns, ns, quantile, rate, ratio_table, table, wait_for};

/// The competitors, by name (worker processes get the name on their command line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Fair,
    FairBounded,
    FairParked,
    FairR,
    Pthread,
    Std,
    Pl,
    Flock,
    Ofd,
    Floor,
}

const ALL: [Kind; 10] = [
    Kind::Fair,
    Kind::FairBounded,
    Kind::FairParked,
    Kind::FairR,
    Kind::Pthread,
    Kind::Std,
    Kind::Pl,
    Kind::Flock,
    Kind::Ofd,
    Kind::Floor,
];

/// Runs `$body` with `$C` bound to the competitor type of `$k`.
macro_rules! with_kind {
    ($k:expr, $C:ident => $body:expr) => {
        match $k {
            Kind::Fair => {
                type $C = Fair;
                $body
            }
            Kind::FairBounded => {
                type $C = FairBounded;
                $body
            }
            Kind::FairParked => {
                type $C = FairParked;
                $body
            }
            Kind::FairR => {
                type $C = FairR;
                $body
            }
            Kind::Pthread => {
                type $C = Pthread;
                $body
            }
            Kind::Std => {
                type $C = StdMutex;
                $body
            }
            Kind::Pl => {
                type $C = PlMutex;
                $body
            }
            Kind::Flock => {
                type $C = Flock;
                $body
            }
            Kind::Ofd => {
                type $C = Ofd;
                $body
            }
            Kind::Floor => {
                type $C = FifoFloor;
                $body
            }
        }
    };
}

impl Kind {
    fn name(self) -> &'static str {
        with_kind!(self, C => C::NAME)
    }
    fn slug(self) -> &'static str {
        match self {
            Kind::Fair => "fair",
            Kind::FairBounded => "fairb",
            Kind::FairParked => "fair0",
            Kind::FairR => "fairr",
            Kind::Pthread => "pthread",
            Kind::Std => "std",
            Kind::Pl => "pl",
            Kind::Flock => "flock",
            Kind::Ofd => "ofd",
            Kind::Floor => "floor",
        }
    }
    fn parse(s: &str) -> Kind {
        *ALL.iter()
            .find(|k| k.slug() == s)
            .unwrap_or_else(|| panic!("unknown competitor {s}"))
    }
}

/// Run sizes.
#[derive(Clone, Copy)]
struct Plan {
    /// Interleaved rounds (an even number: ABBA).
    rounds: usize,
    /// Duration of one uncontended measurement.
    uncontended_ns: u64,
    /// Duration of one contended trial.
    contended_ns: u64,
    /// Hand-offs per competitor and round.
    handoffs: usize,
    /// Crash-recovery trials per competitor.
    crashes: usize,
}

struct Ctx {
    plan: Plan,
    dir: PathBuf,
    exe: PathBuf,
}

impl Ctx {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// ABBA order of round `r`.
fn order<T: Copy>(items: &[T], r: usize) -> Vec<T> {
    let mut v = items.to_vec();
    if r % 4 == 1 || r % 4 == 2 {
        v.reverse();
    }
    v
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--worker") {
        worker(&args[2..]);
        return;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let plan = if quick {
        Plan {
            rounds: 2,
            uncontended_ns: 30_000_000,
            contended_ns: 100_000_000,
            handoffs: 100,
            crashes: 20,
        }
    } else {
        Plan {
            rounds: 4,
            uncontended_ns: 200_000_000,
            contended_ns: 750_000_000,
            handoffs: 500,
            crashes: 200,
        }
    };
    let dir = std::env::temp_dir().join(format!("lockbench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let ctx = Ctx {
        plan,
        dir,
        exe: std::env::current_exe().expect("current_exe"),
    };
    let t0 = now_ns();
    println!(
        "# lockbench ({} mode)\n",
        if quick { "quick" } else { "full" }
    );
    println!("{}\n", environment());
    let only: Vec<String> = args
        .iter()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .cloned()
        .collect();
    let run = |s: &str| only.is_empty() || only.iter().any(|o| o == s);
    if run("uncontended") {
        uncontended(&ctx);
    }
    if run("contended") {
        contended(&ctx);
    }
    if run("handoff") {
        handoff(&ctx);
    }
    if run("crash") {
        crash(&ctx);
    }
    if run("rw") {
        shared_kinds::rw(&ctx);
    }
    if run("semaphore") {
        shared_kinds::semaphore(&ctx);
    }
    if run("uncontended-shared") {
        shared_kinds::uncontended_shared(&ctx);
    }
    if run("names") {
        names::names(&ctx);
    }
    println!("_Total run time: {:.1} s._", (now_ns() - t0) as f64 / 1e9);
    let _ = std::fs::remove_dir_all(&ctx.dir);
}

fn environment() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!(
        "CPU: {cpu}; {cpus} CPUs; Linux {}; load average at start: {}",
        kernel.trim(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    )
}

// =============================================================================================
// Uncontended

fn uncontended_one<C: Competitor>(path: &Path, dur: u64) -> f64 {
    let lock = C::create(path);
    // Warm up.
    for _ in 0..10_000 {
        lock.with(std::hint::black_box);
    }
    let start = now_ns();
    let mut n = 0u64;
    loop {
        for _ in 0..1000 {
            lock.with(std::hint::black_box);
        }
        n += 1000;
        let t = now_ns();
        if t - start >= dur {
            return (t - start) as f64 / n as f64;
        }
    }
}

fn uncontended(ctx: &Ctx) {
    eprintln!("uncontended ...");
    let kinds = [
        Kind::Fair,
        Kind::FairR,
        Kind::Pthread,
        Kind::Std,
        Kind::Pl,
        Kind::Flock,
        Kind::Ofd,
    ];
    let rounds = ctx.plan.rounds * 2;
    let mut res: Vec<Vec<f64>> = vec![Vec::new(); kinds.len()];
    for r in 0..rounds {
        for k in order(&kinds, r) {
            let i = kinds.iter().position(|x| *x == k).unwrap_or(0);
            let path = ctx.path(&format!("u-{}", k.slug()));
            let v = with_kind!(k, C => uncontended_one::<C>(&path, ctx.plan.uncontended_ns));
            res[i].push(v);
        }
    }
    let med: Vec<f64> = res.iter().map(|v| median(v)).collect();
    println!("## Uncontended lock + unlock (one thread)\n");
    println!(
        "Median of {rounds} interleaved rounds (ABBA) of {} ms each; min and max of the rounds \
         in brackets.\n",
        ctx.plan.uncontended_ns / 1_000_000
    );
    let rows: Vec<Vec<String>> = kinds
        .iter()
        .zip(&res)
        .zip(&med)
        .map(|((k, v), m)| {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(0.0, f64::max);
            vec![
                k.name().into(),
                format!("{m:.1} ns"),
                format!("[{lo:.1} – {hi:.1}]"),
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &[
                "competitor".into(),
                "ns / (lock + unlock)".into(),
                "range".into()
            ],
            &rows
        )
    );
    let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
    println!("{}", ratio_table(&names, &med, "time"));
}

// =============================================================================================
// Contended throughput and fairness

/// One acquisition.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
struct Rec {
    /// When the worker called `lock`.
    arrive: u64,
    /// When it returned (first thing inside the critical section).
    acquire: u64,
    /// The fencing token, `u64::MAX` if the lock has none.
    token: u64,
    /// How often the waiter was overtaken (a bounded fairlock; 0 otherwise).
    overtaken: u64,
}

/// Gate words in a [`Shm`]: ready count, start time, end time.
const READY: usize = 0;
const START: usize = 1;
const END: usize = 2;

/// The worker loop: wait for the gate, then lock, busy-spin `cs` ns, unlock, until `end`.
fn contend<C: Competitor>(lock: &C, gate: &Shm, cs: u64) -> Vec<Rec> {
    let mut log = Vec::with_capacity(1 << 16);
    gate.at(READY).fetch_add(1, Release);
    wait_for(60_000_000_000, || gate.at(START).load(Acquire) != 0);
    let start = gate.at(START).load(Acquire);
    let end = gate.at(END).load(Acquire);
    while now_ns() < start {
        std::hint::spin_loop();
    }
    loop {
        let arrive = now_ns();
        if arrive >= end {
            break;
        }
        let rec = lock.with(|a| {
            let acquire = now_ns();
            busy_until(acquire + cs);
            Rec {
                arrive,
                acquire,
                token: a.token.unwrap_or(u64::MAX),
                overtaken: u64::from(a.overtaken),
            }
        });
        log.push(rec);
    }
    log
}

/// Opens the gate once `n` workers are ready.
fn open_gate(gate: &Shm, n: u64, dur: u64) -> (u64, u64) {
    let ok = wait_for(60_000_000_000, || gate.at(READY).load(Acquire) >= n);
    assert!(ok, "workers did not get ready");
    let start = now_ns() + 2_000_000;
    gate.at(END).store(start + dur, Release);
    gate.at(START).store(start, Release);
    (start, start + dur)
}

fn trial_threads<C: Competitor>(ctx: &Ctx, n: usize, cs: u64) -> Metrics {
    let path = ctx.path(&format!("c-{}", C::NAME.replace(' ', "_")));
    let gate_path = ctx.path("gate");
    let gate = Arc::new(Shm::create(&gate_path, 8));
    let lock = C::create(&path);
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let h = lock.handle();
            let g = Arc::clone(&gate);
            std::thread::spawn(move || contend(&h, &g, cs))
        })
        .collect();
    let (start, end) = open_gate(&gate, n as u64, ctx.plan.contended_ns);
    let logs: Vec<Vec<Rec>> = handles
        .into_iter()
        .map(|h| h.join().expect("worker thread"))
        .collect();
    Metrics::of(&logs, start, end)
}

fn spawn_worker(ctx: &Ctx, args: &[String]) -> Child {
    Command::new(&ctx.exe)
        .arg("--worker")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn worker")
}

fn trial_processes<C: Competitor>(ctx: &Ctx, kind: Kind, n: usize, cs: u64) -> Metrics {
    let path = ctx.path(&format!("p-{}", kind.slug()));
    let gate_path = ctx.path("pgate");
    let gate = Shm::create(&gate_path, 8);
    drop(C::create(&path));
    let outs: Vec<PathBuf> = (0..n).map(|i| ctx.path(&format!("log-{i}"))).collect();
    let children: Vec<Child> = outs
        .iter()
        .map(|o| {
            spawn_worker(
                ctx,
                &[
                    "contend".into(),
                    kind.slug().into(),
                    path.display().to_string(),
                    gate_path.display().to_string(),
                    cs.to_string(),
                    o.display().to_string(),
                ],
            )
        })
        .collect();
    let (start, end) = open_gate(&gate, n as u64, ctx.plan.contended_ns);
    for mut c in children {
        let st = c.wait().expect("wait worker");
        assert!(st.success(), "worker failed: {st}");
    }
    let logs: Vec<Vec<Rec>> = outs.iter().map(|o| read_log(o)).collect();
    Metrics::of(&logs, start, end)
}

fn write_log(path: &Path, log: &[Rec]) {
    let mut bytes = Vec::with_capacity(log.len() * 32);
    for r in log {
        bytes.extend_from_slice(&r.arrive.to_le_bytes());
        bytes.extend_from_slice(&r.acquire.to_le_bytes());
        bytes.extend_from_slice(&r.token.to_le_bytes());
        bytes.extend_from_slice(&r.overtaken.to_le_bytes());
    }
    std::fs::write(path, bytes).expect("write log");
}

fn read_log(path: &Path) -> Vec<Rec> {
    let bytes = std::fs::read(path).expect("read log");
    let _ = std::fs::remove_file(path);
    let word = |c: &[u8]| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
    bytes
        .chunks_exact(32)
        .map(|c| Rec {
            arrive: word(&c[0..8]),
            acquire: word(&c[8..16]),
            token: word(&c[16..24]),
            overtaken: word(&c[24..32]),
        })
        .collect()
}

/// The figures of one contended trial.
#[derive(Clone, Debug, Default)]
struct Metrics {
    ops: f64,
    jain: f64,
    min_share: f64,
    max_share: f64,
    /// Sorted waits (acquire − arrive) of acquisitions inside the window.
    waits: Vec<u64>,
    acquisitions: u64,
    out_of_order: u64,
    token_violations: Option<u64>,
    streak: u64,
    /// Grants whose token is a barge's (a bounded fairlock: not a multiple of 512).
    barges: u64,
    /// The most any grant's waiter was overtaken.
    worst_overtaken: u64,
}

impl Metrics {
    fn of(logs: &[Vec<Rec>], start: u64, end: u64) -> Metrics {
        // Every acquisition, in grant order (acquire stamps are taken inside the critical
        // section, so they are totally ordered by the lock).
        let mut all: Vec<(u64, u64, u64, usize)> = logs
            .iter()
            .enumerate()
            .flat_map(|(w, l)| l.iter().map(move |r| (r.acquire, r.arrive, r.token, w)))
            .collect();
        let worst_overtaken = logs
            .iter()
            .flatten()
            .map(|r| r.overtaken)
            .max()
            .unwrap_or(0);
        all.sort_unstable();
        // Out of arrival order: granted while a waiter that arrived earlier was still waiting
        // (it is granted later). Suffix minimum of the arrival stamps of later grants.
        let mut later_min = vec![u64::MAX; all.len() + 1];
        for i in (0..all.len()).rev() {
            later_min[i] = later_min[i + 1].min(all[i].1);
        }
        let inside = |a: u64| a >= start && a < end;
        let mut m = Metrics::default();
        let mut counts = vec![0u64; logs.len()];
        let mut streak = 0u64;
        let mut prev_worker = usize::MAX;
        let mut prev_token = None::<u64>;
        let mut violations = 0u64;
        let has_tokens = all.iter().all(|x| x.2 != u64::MAX) && !all.is_empty();
        for (i, &(acq, arr, tok, w)) in all.iter().enumerate() {
            if has_tokens {
                if prev_token.is_some_and(|p| tok <= p) {
                    violations += 1;
                }
                prev_token = Some(tok);
            }
            if !inside(acq) {
                continue;
            }
            counts[w] += 1;
            if has_tokens && tok % 512 != 0 {
                m.barges += 1;
            }
            m.waits.push(acq - arr);
            if later_min[i + 1] < arr {
                m.out_of_order += 1;
            }
            if w == prev_worker {
                streak += 1;
            } else {
                streak = 1;
                prev_worker = w;
            }
            m.streak = m.streak.max(streak);
        }
        m.waits.sort_unstable();
        let total: u64 = counts.iter().sum();
        m.acquisitions = total;
        m.ops = total as f64 / ((end - start) as f64 / 1e9);
        let sum = total as f64;
        let sq: f64 = counts.iter().map(|&c| (c as f64) * (c as f64)).sum();
        m.jain = if sq > 0.0 {
            sum * sum / (counts.len() as f64 * sq)
        } else {
            f64::NAN
        };
        m.min_share = counts.iter().copied().min().unwrap_or(0) as f64 / sum.max(1.0);
        m.max_share = counts.iter().copied().max().unwrap_or(0) as f64 / sum.max(1.0);
        m.token_violations = has_tokens.then_some(violations);
        m.worst_overtaken = worst_overtaken;
        m
    }
}

/// Summary of one competitor over the rounds of one scenario.
struct Summary {
    ops: f64,
    p99: f64,
    row: Vec<String>,
}

fn summarize(name: &str, ms: &[Metrics]) -> Summary {
    let ops = median(&ms.iter().map(|m| m.ops).collect::<Vec<_>>());
    let jain = median(&ms.iter().map(|m| m.jain).collect::<Vec<_>>());
    let min_share = median(&ms.iter().map(|m| m.min_share).collect::<Vec<_>>());
    let max_share = median(&ms.iter().map(|m| m.max_share).collect::<Vec<_>>());
    let p50 = median(
        &ms.iter()
            .map(|m| quantile(&m.waits, 0.5) as f64)
            .collect::<Vec<_>>(),
    );
    let p99 = median(
        &ms.iter()
            .map(|m| quantile(&m.waits, 0.99) as f64)
            .collect::<Vec<_>>(),
    );
    let max = ms
        .iter()
        .map(|m| m.waits.last().copied().unwrap_or(0))
        .max()
        .unwrap_or(0) as f64;
    let acq: u64 = ms.iter().map(|m| m.acquisitions).sum();
    let ooo: u64 = ms.iter().map(|m| m.out_of_order).sum();
    let streak = ms.iter().map(|m| m.streak).max().unwrap_or(0);
    let tokens = if ms.iter().all(|m| m.token_violations.is_some()) {
        ms.iter()
            .filter_map(|m| m.token_violations)
            .sum::<u64>()
            .to_string()
    } else {
        "–".into()
    };
    Summary {
        ops,
        p99,
        row: vec![
            name.into(),
            rate(ops),
            format!("{jain:.3}"),
            format!("{:.1}% / {:.1}%", min_share * 100.0, max_share * 100.0),
            format!("{} / {} / {}", ns(p50), ns(p99), ns(max)),
            format!("{ooo} ({:.2}%)", 100.0 * ooo as f64 / (acq as f64).max(1.0)),
            tokens,
            streak.to_string(),
        ],
    }
}

fn contended(ctx: &Ctx) {
    let thread_kinds = [
        Kind::Fair,
        Kind::FairBounded,
        Kind::Pthread,
        Kind::Std,
        Kind::Pl,
        Kind::Flock,
        Kind::Ofd,
        Kind::Floor,
    ];
    let process_kinds = [
        Kind::Fair,
        Kind::FairBounded,
        Kind::Pthread,
        Kind::Flock,
        Kind::Ofd,
        Kind::Floor,
    ];
    let mut scenarios: Vec<(bool, usize, u64)> = Vec::new();
    for cs in [100u64, 10_000] {
        for n in [2usize, 4, 8] {
            scenarios.push((false, n, cs));
        }
        for n in [2usize, 4] {
            scenarios.push((true, n, cs));
        }
    }
    println!("## Contended throughput and fairness\n");
    println!(
        "Each worker loops: stamp `arrive`, lock, stamp `acquire`, busy-spin the critical \
         section on the clock, unlock (no work outside the lock). {} interleaved rounds (ABBA) \
         of {} ms per competitor and scenario; ops/s, Jain, shares and wait p50/p99 are medians \
         over the rounds, max wait the maximum, out-of-order counts and token-order violations \
         sums, streak the maximum.\n",
        ctx.plan.rounds,
        ctx.plan.contended_ns / 1_000_000
    );
    // `LOCKBENCH_KINDS=fair,floor` keeps only those competitors (by slug), and
    // `LOCKBENCH_SCENARIOS=8t100,6p20000` runs those scenarios instead (n, `t`hreads or
    // `p`rocesses, the section in ns): a run short enough to trace with `perf stat`, or the
    // shape of another bench (`fairlock demo`'s contention is 6p20000).
    let keep_kinds = std::env::var("LOCKBENCH_KINDS").ok();
    if let Ok(list) = std::env::var("LOCKBENCH_SCENARIOS") {
        scenarios = list
            .split(',')
            .map(|x| {
                let x = x.trim();
                let at = x
                    .find(['t', 'p'])
                    .unwrap_or_else(|| panic!("LOCKBENCH_SCENARIOS: {x} is not like 8t100"));
                let n = x[..at].parse().expect("LOCKBENCH_SCENARIOS: a count");
                let cs = x[at + 1..]
                    .parse()
                    .expect("LOCKBENCH_SCENARIOS: a section in ns");
                (&x[at..=at] == "p", n, cs)
            })
            .collect();
    }
    let listed = |list: &Option<String>, item: &str| {
        list.as_deref()
            .is_none_or(|l| l.split(',').any(|x| x.trim() == item))
    };
    for (procs, n, cs) in scenarios {
        let kinds: Vec<Kind> = (if procs {
            &process_kinds[..]
        } else {
            &thread_kinds[..]
        })
        .iter()
        .copied()
        .filter(|k| listed(&keep_kinds, k.slug()))
        .collect();
        let kinds: &[Kind] = &kinds;
        let label = format!(
            "{n} {}, {} critical section",
            if procs { "processes" } else { "threads" },
            ns(cs as f64)
        );
        eprintln!("contended: {label} ...");
        let mut res: Vec<Vec<Metrics>> = vec![Vec::new(); kinds.len()];
        for r in 0..ctx.plan.rounds {
            for k in order(kinds, r) {
                let i = kinds.iter().position(|x| *x == k).unwrap_or(0);
                let m = if procs {
                    with_kind!(k, C => trial_processes::<C>(ctx, k, n, cs))
                } else {
                    with_kind!(k, C => trial_threads::<C>(ctx, n, cs))
                };
                res[i].push(m);
            }
        }
        let sums: Vec<Summary> = kinds
            .iter()
            .zip(&res)
            .map(|(k, ms)| summarize(k.name(), ms))
            .collect();
        println!("### {label}\n");
        let head: Vec<String> = [
            "competitor",
            "ops/s",
            "Jain",
            "min / max share",
            "wait p50 / p99 / max",
            "out of arrival order",
            "out of token order",
            "longest streak",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let rows: Vec<Vec<String>> = sums.iter().map(|s| s.row.clone()).collect();
        println!("{}", table(&head, &rows));
        if let Some(i) = kinds.iter().position(|k| *k == Kind::FairBounded) {
            let ms = &res[i];
            let grants: u64 = ms.iter().map(|m| m.acquisitions).sum();
            let barges: u64 = ms.iter().map(|m| m.barges).sum();
            let worst = ms.iter().map(|m| m.worst_overtaken).max().unwrap_or(0);
            println!(
                "{}: {barges} of {grants} grants were barges ({:.1} %); the most any waiter \
                 was overtaken: **{worst}** (bound {}).\n",
                Kind::FairBounded.name(),
                100.0 * barges as f64 / (grants as f64).max(1.0),
                competitors::bound()
            );
        }
        let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
        println!(
            "{}",
            ratio_table(
                &names,
                &sums.iter().map(|s| s.ops).collect::<Vec<_>>(),
                "ops/s"
            )
        );
        println!(
            "{}",
            ratio_table(
                &names,
                &sums.iter().map(|s| s.p99).collect::<Vec<_>>(),
                "wait p99"
            )
        );
    }
}

// =============================================================================================
// Hand-off latency

/// A one-way hand-off between two threads, measured as `t1 − t0` where the releasing side
/// stamps `t0` just before it lets go and the waiting side stamps `t1` as soon as it has it.
trait Handoff: Send + Sync + 'static {
    /// Waiting side, round `i`: block until the releaser lets go; return the stamp `t1`.
    fn wait(&self, i: u64) -> u64;
    /// Releasing side, round `i`: called once the waiter is (about to be) waiting; `delay`
    /// waits until the waiter is spinning or parked; stamps and returns `t0` and lets go.
    fn release(&self, i: u64, delay: &dyn Fn()) -> u64;
}

/// Cache-line ping-pong: the waiter spins on a shared word.
#[derive(Default)]
struct LineHandoff {
    word: AtomicU64,
}

impl Handoff for LineHandoff {
    fn wait(&self, i: u64) -> u64 {
        while self.word.load(Acquire) != i + 1 {
            std::hint::spin_loop();
        }
        now_ns()
    }
    fn release(&self, i: u64, delay: &dyn Fn()) -> u64 {
        delay();
        let t0 = now_ns();
        self.word.store(i + 1, Release);
        t0
    }
}

/// Raw shared (not private) futex: the waiter sleeps in `FUTEX_WAIT` on a word of a
/// `MAP_SHARED` mapping; the releaser stores and `FUTEX_WAKE`s.
struct FutexHandoff {
    shm: Shm,
    /// A relative timeout for each `FUTEX_WAIT` (0: none). fairlock's next-in-line waiter
    /// always parks with one (its liveness poll, 100 µs doubling to 1 ms), and on this VM a
    /// wait with a timer ~1 ms away wakes ~2 µs later than one with none or a far one; the
    /// timed floor shows that cost apart from the lock's.
    timeout_us: u64,
    /// Wait with `futex_waitv` on this word and a second one that never changes, with a
    /// timeout 10 s away, as fairlock's parked next-in-line waiter sleeps on its slot and the
    /// holder's beacon (its backstop is 10 s).
    waitv: bool,
}

/// The low half of `a` (little-endian), the 32-bit word its futex calls name.
fn futex_word(a: &AtomicU64) -> &AtomicU32 {
    // SAFETY: the low 4 bytes of a live, 8-aligned AtomicU64, borrowed as long as `a`; the
    // harness reads that half only through the kernel's futex calls.
    unsafe { &*a.as_ptr().cast::<AtomicU32>() }
}

impl Handoff for FutexHandoff {
    fn wait(&self, i: u64) -> u64 {
        let w = self.shm.at(0);
        loop {
            let v = w.load(Acquire);
            if v == i + 1 {
                return now_ns();
            }
            if self.waitv {
                futex::waitv(
                    &[(futex_word(w), v as u32), (futex_word(self.shm.at(1)), 0)],
                    Some(Duration::from_secs(10)),
                );
            } else {
                let timeout =
                    (self.timeout_us != 0).then(|| Duration::from_micros(self.timeout_us));
                futex::wait(futex_word(w), v as u32, timeout);
            }
        }
    }
    fn release(&self, i: u64, delay: &dyn Fn()) -> u64 {
        delay();
        let w = self.shm.at(0);
        let t0 = now_ns();
        w.store(i + 1, Release);
        futex::wake(futex_word(w), 1);
        t0
    }
}

/// The bookkeeping of a hand-off run. The two threads announce rounds to each other through
/// these counters and *block* (`thread::park`) while they wait for each other, so that
/// neither burns a CPU the other may need: only the lock (or floor) under test spins.
#[derive(Default)]
struct Rounds {
    go: AtomicU64,
    queued: AtomicU64,
    done: AtomicU64,
    t1: AtomicU64,
}

fn await_count(c: &AtomicU64, v: u64) {
    while c.load(Acquire) != v {
        std::thread::park();
    }
}

fn announce(c: &AtomicU64, v: u64, to: &std::thread::Thread) {
    c.store(v, Release);
    to.unpark();
}

/// Runs `n` rounds of a hand-off: the waiter announces itself and starts waiting (`wait`);
/// the releaser `delay`s, stamps `t0` and lets go (`release`); the waiter stamps `t1`.
fn run_rounds(
    n: u64,
    wait: impl Fn(u64) -> u64 + Send + 'static,
    release: impl Fn(u64, &dyn Fn() -> u64) -> u64,
) -> Vec<u64> {
    let r = Arc::new(Rounds::default());
    let r2 = Arc::clone(&r);
    let me = std::thread::current();
    let waiter = std::thread::spawn(move || {
        for i in 0..n {
            await_count(&r2.go, i + 1);
            announce(&r2.queued, i + 1, &me);
            let t1 = wait(i);
            r2.t1.store(t1, Release);
            announce(&r2.done, i + 1, &me);
        }
    });
    let wt = waiter.thread().clone();
    let mut lat = Vec::with_capacity(n as usize);
    for i in 0..n {
        let t0 = release(i, &|| {
            announce(&r.go, i + 1, &wt);
            await_count(&r.queued, i + 1);
            0
        });
        await_count(&r.done, i + 1);
        lat.push(r.t1.load(Acquire).saturating_sub(t0));
    }
    waiter.join().expect("waiter");
    lat
}

/// Runs `n` rounds of a non-lock hand-off (a floor).
fn run_handoff<H: Handoff>(h: Arc<H>, n: u64, delay: &(dyn Fn() + Sync)) -> Vec<u64> {
    let h2 = Arc::clone(&h);
    run_rounds(
        n,
        move |i| h2.wait(i),
        |i, start| {
            start();
            h.release(i, &|| delay())
        },
    )
}

/// Runs `n` rounds of a lock hand-off: the releaser takes the lock, lets the waiter queue,
/// waits `delay`, stamps `t0` and unlocks; the waiter stamps `t1` once it holds the lock.
fn run_lock_handoff<C: Competitor>(path: &Path, n: u64, delay: &(dyn Fn() + Sync)) -> Vec<u64> {
    let releaser = C::create(path);
    let waiter = releaser.handle();
    run_rounds(
        n,
        move |_| waiter.with(|_| now_ns()),
        |_, start| {
            releaser.with(|_| {
                start();
                delay();
                now_ns()
            })
        },
    )
}

fn futex_wait_for(s: &Shm, want: u64) {
    loop {
        let v = s.at(0).load(Acquire);
        if v == want {
            return;
        }
        futex::wait(futex_word(s.at(0)), v as u32, None);
    }
}

fn futex_set(s: &Shm, v: u64) {
    s.at(0).store(v, Release);
    futex::wake(futex_word(s.at(0)), 1);
}

/// Tight futex ping-pong between two threads: round-trip time / 2.
fn futex_pingpong(shm: &Arc<Shm>, n: u64) -> Vec<u64> {
    shm.at(0).store(0, Release);
    let s2 = Arc::clone(shm);
    let t = std::thread::spawn(move || {
        for i in 0..n {
            futex_wait_for(&s2, 2 * i + 1);
            futex_set(&s2, 2 * i + 2);
        }
    });
    let mut lat = Vec::with_capacity(n as usize);
    for i in 0..n {
        let t0 = now_ns();
        futex_set(shm, 2 * i + 1);
        futex_wait_for(shm, 2 * i + 2);
        lat.push((now_ns() - t0) / 2);
    }
    t.join().expect("ping-pong thread");
    lat
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Entry {
    Lock(Kind),
    Line,
    Futex,
    FutexTimed,
    FutexWaitv,
    PingPong,
}

impl Entry {
    /// The entry's name in `LOCKBENCH_KINDS`.
    fn slug(self) -> &'static str {
        match self {
            Entry::Lock(k) => k.slug(),
            Entry::Line => "line",
            Entry::Futex => "futex",
            Entry::FutexTimed => "futex-timed",
            Entry::FutexWaitv => "futex-waitv",
            Entry::PingPong => "ping-pong",
        }
    }

    fn name(self) -> String {
        match self {
            Entry::Lock(k) => k.name().into(),
            Entry::Line => "floor: cache-line hand-off".into(),
            Entry::Futex => "floor: shared-futex wake".into(),
            Entry::FutexTimed => "floor: shared-futex wake, 1 ms timeout".into(),
            Entry::FutexWaitv => "floor: futex_waitv wake, 2 words, 10 s timeout".into(),
            Entry::PingPong => "floor: futex ping-pong RTT/2".into(),
        }
    }
}

fn handoff(ctx: &Ctx) {
    println!("## Hand-off latency (two threads)\n");
    println!(
        "The holder lets the other thread queue, waits (busy 10 µs for the spinning case, \
         sleeps 300 µs for the parked case), stamps `t0` and unlocks; the waiter stamps `t1` as \
         soon as it holds the lock; latency = t1 − t0. Floors, measured the same way in the same \
         rounds: a store to a shared cache line the waiter spins on; a store + `FUTEX_WAKE` of \
         a waiter in `FUTEX_WAIT` on a shared (non-private) futex word of a `MAP_SHARED` \
         mapping, once with no timeout and once with a 1 ms timeout on each wait (fairlock's \
         parked next-in-line waiter always waits with one: its liveness poll); a store + \
         `FUTEX_WAKE` of a waiter in `futex_waitv` on that word and a second one, with a \
         timeout 10 s away (as fairlock's parked waiter sleeps on its slot and the holder's \
         beacon, with its 10 s backstop); and tight futex \
         ping-pong (round trip / 2, no delay). {} rounds (ABBA) of {} hand-offs each.\n",
        ctx.plan.rounds, ctx.plan.handoffs
    );
    let spin_delay = || busy_until(now_ns() + 10_000);
    let park_delay = || std::thread::sleep(Duration::from_micros(300));
    for parked in [false, true] {
        let fair = if parked { Kind::FairParked } else { Kind::Fair };
        let entries = [
            Entry::Lock(fair),
            Entry::Lock(Kind::Pthread),
            Entry::Lock(Kind::Std),
            Entry::Lock(Kind::Pl),
            Entry::Lock(Kind::Flock),
            Entry::Lock(Kind::Ofd),
            Entry::Line,
            Entry::Futex,
            Entry::FutexTimed,
            Entry::FutexWaitv,
            Entry::PingPong,
        ];
        // `LOCKBENCH_KINDS` (see `contended`) keeps only the entries it names.
        let entries: Vec<Entry> = entries
            .into_iter()
            .filter(|e| {
                std::env::var("LOCKBENCH_KINDS")
                    .map_or(true, |l| l.split(',').any(|x| x.trim() == e.slug()))
            })
            .collect();
        if entries.is_empty() {
            continue;
        }
        let label = if parked {
            "to a parked waiter (fairlock with spin = 0; 300 µs hold)"
        } else {
            "to a spinning waiter (fairlock default 50 µs spin; 10 µs hold)"
        };
        eprintln!("hand-off {label} ...");
        let delay: &(dyn Fn() + Sync) = if parked { &park_delay } else { &spin_delay };
        let mut res: Vec<Vec<u64>> = vec![Vec::new(); entries.len()];
        let n = ctx.plan.handoffs as u64;
        for r in 0..ctx.plan.rounds {
            for e in order(&entries, r) {
                let i = entries.iter().position(|x| *x == e).unwrap_or(0);
                let lat = match e {
                    Entry::Lock(k) => {
                        let path = ctx.path(&format!("h-{}", k.slug()));
                        with_kind!(k, C => run_lock_handoff::<C>(&path, n, delay))
                    }
                    Entry::Line => run_handoff(Arc::new(LineHandoff::default()), n, delay),
                    Entry::Futex | Entry::FutexTimed | Entry::FutexWaitv => run_handoff(
                        Arc::new(FutexHandoff {
                            shm: Shm::create(&ctx.path("futex"), 8),
                            timeout_us: if e == Entry::FutexTimed { 1000 } else { 0 },
                            waitv: e == Entry::FutexWaitv,
                        }),
                        n,
                        delay,
                    ),
                    Entry::PingPong => {
                        futex_pingpong(&Arc::new(Shm::create(&ctx.path("pp"), 8)), n * 4)
                    }
                };
                res[i].extend(lat);
            }
        }
        for v in &mut res {
            v.sort_unstable();
        }
        println!("### Hand-off {label}\n");
        let rows: Vec<Vec<String>> = entries
            .iter()
            .zip(&res)
            .map(|(e, v)| {
                vec![
                    e.name(),
                    ns(quantile(v, 0.5) as f64),
                    ns(quantile(v, 0.99) as f64),
                    ns(v.last().copied().unwrap_or(0) as f64),
                    v.len().to_string(),
                ]
            })
            .collect();
        println!(
            "{}",
            table(
                &["competitor", "p50", "p99", "max", "samples"].map(String::from),
                &rows
            )
        );
        let names: Vec<String> = entries.iter().map(|e| e.name()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let p50: Vec<f64> = res.iter().map(|v| quantile(v, 0.5) as f64).collect();
        println!("{}", ratio_table(&names, &p50, "p50"));
    }
}

// =============================================================================================
// Crash recovery

/// Words per trial record in the crash [`Shm`]: waiting flag, acquired flag, acquire time,
/// died flag.
const REC: usize = 4;

/// One competitor's chain of holder processes: the waiter of trial k becomes the holder that
/// trial k + 1 kills.
struct Chain {
    kind: Kind,
    path: PathBuf,
    shm_path: PathBuf,
    shm: Shm,
    holder: Option<Child>,
    lat: Vec<u64>,
    died_seen: u64,
    failures: u64,
    next_rec: usize,
}

impl Chain {
    fn new(ctx: &Ctx, kind: Kind, trials: usize) -> Chain {
        let path = ctx.path(&format!("k-{}", kind.slug()));
        let shm_path = ctx.path(&format!("k-{}.shm", kind.slug()));
        let shm = Shm::create(&shm_path, (trials * 2 + 4) * REC);
        let mut c = Chain {
            kind,
            path,
            shm_path,
            shm,
            holder: None,
            lat: Vec::new(),
            died_seen: 0,
            failures: 0,
            next_rec: 0,
        };
        c.restart(ctx);
        c
    }

    fn spawn(&mut self, ctx: &Ctx) -> (Child, usize) {
        let rec = self.next_rec;
        self.next_rec += 1;
        let child = spawn_worker(
            ctx,
            &[
                "hold".into(),
                self.kind.slug().into(),
                self.path.display().to_string(),
                self.shm_path.display().to_string(),
                rec.to_string(),
            ],
        );
        (child, rec)
    }

    /// A fresh lock and a first holder.
    fn restart(&mut self, ctx: &Ctx) {
        if let Some(mut h) = self.holder.take() {
            let _ = h.kill();
            let _ = h.wait();
        }
        with_kind!(self.kind, C => drop(C::create(&self.path)));
        let (child, rec) = self.spawn(ctx);
        let ok = wait_for(30_000_000_000, || {
            self.shm.at(rec * REC + 1).load(Acquire) != 0
        });
        assert!(ok, "{}: first holder never got the lock", self.kind.name());
        self.holder = Some(child);
    }

    /// One trial: a new waiter queues, the holder is SIGKILLed, the waiter records when it
    /// got the lock.
    fn trial(&mut self, ctx: &Ctx) {
        let (mut waiter, rec) = self.spawn(ctx);
        let base = rec * REC;
        let ok = wait_for(30_000_000_000, || self.shm.at(base).load(Acquire) != 0);
        assert!(ok, "{}: waiter never started", self.kind.name());
        // Let it get into `lock` and block (fairlock: spin 50 µs, then park).
        std::thread::sleep(Duration::from_millis(3));
        let mut holder = self.holder.take().expect("holder");
        let t_kill = now_ns();
        // SAFETY: kill(2) on our own child's pid; it has not been reaped yet.
        unsafe { libc::kill(holder.id() as libc::pid_t, libc::SIGKILL) };
        let _ = holder.wait();
        let got = wait_for(10_000_000_000, || self.shm.at(base + 1).load(Acquire) != 0);
        if got {
            let t_acq = self.shm.at(base + 2).load(Acquire);
            self.lat.push(t_acq.saturating_sub(t_kill));
            self.died_seen += self.shm.at(base + 3).load(Acquire);
            self.holder = Some(waiter);
        } else {
            self.failures += 1;
            let _ = waiter.kill();
            let _ = waiter.wait();
            self.restart(ctx);
        }
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        if let Some(mut h) = self.holder.take() {
            let _ = h.kill();
            let _ = h.wait();
        }
    }
}

fn crash(ctx: &Ctx) {
    let kinds = [Kind::Fair, Kind::Pthread, Kind::Flock, Kind::Ofd];
    let trials = ctx.plan.crashes;
    eprintln!("crash recovery: {trials} trials per competitor ...");
    let mut chains: Vec<Chain> = kinds.iter().map(|&k| Chain::new(ctx, k, trials)).collect();
    for t in 0..trials {
        let idx: Vec<usize> = (0..chains.len()).collect();
        for i in order(&idx, t) {
            chains[i].trial(ctx);
        }
    }
    println!("## Crash recovery (SIGKILL of the holder process)\n");
    println!(
        "A holder process holds the lock; a second process queues in `lock` (3 ms head start); \
         the harness stamps `t_kill` and SIGKILLs the holder; the waiter stamps when `lock` \
         returns; latency = acquire − kill. The recovered waiter then becomes the holder the \
         next trial kills. {trials} trials per competitor, interleaved (ABBA).\n"
    );
    let rows: Vec<Vec<String>> = chains
        .iter_mut()
        .map(|c| {
            c.lat.sort_unstable();
            vec![
                c.kind.name().into(),
                format!("{}/{}", c.lat.len(), c.lat.len() as u64 + c.failures),
                ns(quantile(&c.lat, 0.5) as f64),
                ns(quantile(&c.lat, 0.99) as f64),
                ns(c.lat.last().copied().unwrap_or(0) as f64),
                match c.kind {
                    Kind::Flock | Kind::Ofd => "n/a".into(),
                    _ => format!("{}/{}", c.died_seen, c.lat.len()),
                },
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &[
                "competitor",
                "recovered",
                "p50",
                "p99",
                "max",
                "owner-died reported"
            ]
            .map(String::from),
            &rows
        )
    );
    let names: Vec<&str> = kinds.iter().map(|k| k.name()).collect();
    let p50: Vec<f64> = chains
        .iter()
        .map(|c| quantile(&c.lat, 0.5) as f64)
        .collect();
    let p99: Vec<f64> = chains
        .iter()
        .map(|c| quantile(&c.lat, 0.99) as f64)
        .collect();
    println!("{}", ratio_table(&names, &p50, "p50"));
    println!("{}", ratio_table(&names, &p99, "p99"));
}

// =============================================================================================
// Worker processes

fn worker(args: &[String]) {
    match args.first().map(String::as_str) {
        Some("contend") => {
            let kind = Kind::parse(&args[1]);
            let path = PathBuf::from(&args[2]);
            let gate = Shm::open(Path::new(&args[3]));
            let cs: u64 = args[4].parse().expect("cs");
            let out = PathBuf::from(&args[5]);
            let log = with_kind!(kind, C => contend(&C::attach(&path), &gate, cs));
            write_log(&out, &log);
        }
        Some("one") => {
            // Profiling aid: `--worker one <competitor> <threads> <cs-ns> <ms>` runs one
            // thread scenario (or, with 0 threads, the uncontended loop) and prints its figures.
            let kind = Kind::parse(&args[1]);
            let n: usize = args[2].parse().expect("threads");
            let cs: u64 = args[3].parse().expect("cs");
            let ms: u64 = args[4].parse().expect("ms");
            let dir = std::env::temp_dir().join(format!("lockbench-{}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("scratch dir");
            let ctx = Ctx {
                plan: Plan {
                    rounds: 1,
                    uncontended_ns: ms * 1_000_000,
                    contended_ns: ms * 1_000_000,
                    handoffs: 0,
                    crashes: 0,
                },
                dir,
                exe: std::env::current_exe().expect("current_exe"),
            };
            if n == 0 {
                let path = ctx.path("one");
                let v = with_kind!(kind, C => uncontended_one::<C>(&path, ms * 1_000_000));
                println!("{}: {v:.1} ns per lock + unlock", kind.name());
            } else {
                let m = with_kind!(kind, C => trial_threads::<C>(&ctx, n, cs));
                let s = summarize(kind.name(), &[m]);
                println!("{}", s.row.join(" | "));
            }
            let _ = std::fs::remove_dir_all(&ctx.dir);
        }
        Some("handoff") => {
            // Profiling aid: `--worker handoff <competitor> <parked: 0|1> <rounds>`.
            let kind = Kind::parse(&args[1]);
            let parked = args[2] == "1";
            let n: u64 = args[3].parse().expect("rounds");
            let path = std::env::temp_dir().join(format!("lockbench-h-{}", std::process::id()));
            let spin_delay = || busy_until(now_ns() + 10_000);
            let park_delay = || std::thread::sleep(Duration::from_micros(300));
            let delay: &(dyn Fn() + Sync) = if parked { &park_delay } else { &spin_delay };
            let mut lat = with_kind!(kind, C => run_lock_handoff::<C>(&path, n, delay));
            let _ = std::fs::remove_file(&path);
            lat.sort_unstable();
            println!(
                "{}: p50 {} p99 {}",
                kind.name(),
                ns(quantile(&lat, 0.5) as f64),
                ns(quantile(&lat, 0.99) as f64)
            );
        }
        Some("hold") => {
            let kind = Kind::parse(&args[1]);
            let path = PathBuf::from(&args[2]);
            let shm = Shm::open(Path::new(&args[3]));
            let base: usize = args[4].parse::<usize>().expect("rec") * REC;
            with_kind!(kind, C => hold(&C::attach(&path), &shm, base));
        }
        _ => panic!("unknown worker mode {args:?}"),
    }
}

/// Queues for the lock, records when it got it, and holds it until killed.
fn hold<C: Competitor>(lock: &C, shm: &Shm, base: usize) {
    shm.at(base).store(1, Release);
    lock.with(|a| {
        let t = now_ns();
        shm.at(base + 2).store(t, Release);
        shm.at(base + 3).store(u64::from(a.died), Release);
        shm.at(base + 1).store(1, Release);
        let stop = AtomicU32::new(0);
        loop {
            std::thread::sleep(Duration::from_secs(1));
            if stop.load(Acquire) != 0 {
                break;
            }
        }
    });
}
