//! `fairlock demo`: worker processes contend for a fairlock and, in the same run, for a
//! `flock(2)` lock; the parent shows how long waiters wait behind a worker that re-locks at
//! once, how grants and waits spread under contention (as bars a person reads at a glance,
//! and optionally an SVG picture), and how fast the queue moves on when a holder is SIGKILLed.
//!
//! Workers are this executable re-run as `fairlock __demo-worker ...`; each prints one line
//! per grant on its stdout (`REQ_NS GRANT_NS TOKEN DIED`, CLOCK_MONOTONIC) when it is done.

use std::fs::{DirBuilder, File};
use std::io::{self, BufRead, BufReader, IsTerminal, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fairlock::FairLock;

use crate::args::DemoArgs;
use crate::exit::{self, Failure};

mod picture;
mod stats;
mod worker;

use picture::{BUCKETS, Chart, Series, bar, histogram};
use stats::{Grant, fmt_ns, stats};
use worker::now_ns;
pub use worker::{WorkerArgs, worker};

/// Sizes and durations of one demo run.
struct Config {
    workers: usize,
    /// Step 1: how long the busy worker keeps re-locking.
    busy_for: Duration,
    /// Step 1: gap between the waiters' arrivals.
    arrival_gap: Duration,
    /// Step 2: contention time per lock.
    contention: Duration,
    hold_us: u64,
    think_us: u64,
}

/// Terminal-aware progress on stderr, results on stdout.
struct Ui {
    tty: bool,
}

impl Ui {
    /// Progress: an updating line on a terminal, a plain line (only when `plain`) otherwise.
    fn progress(&self, msg: &str, plain: bool) {
        let mut e = io::stderr().lock();
        if self.tty {
            let _ = write!(e, "\r\x1b[K{msg}");
        } else if plain {
            let _ = writeln!(e, "... {msg}");
        }
        let _ = e.flush();
    }

    fn line(&self, msg: &str) {
        if self.tty {
            eprint!("\r\x1b[K");
        }
        let _ = io::stderr().flush();
        crate::stdout::write(&format!("{msg}\n"));
    }
}

/// The demo directory, removed on drop.
struct DemoDir(PathBuf);

impl DemoDir {
    fn create() -> io::Result<DemoDir> {
        let mut bases = Vec::new();
        if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
            bases.push(PathBuf::from(d));
        }
        bases.push(PathBuf::from("/dev/shm"));
        bases.push(std::env::temp_dir());
        let mut last = io::Error::other("no directory to create the demo in");
        for base in bases.into_iter().filter(|b| b.is_dir()) {
            let dir = base.join(format!(
                "fairlock-demo-{}-{}",
                std::process::id(),
                now_ns() % 1_000_000
            ));
            match DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(DemoDir(dir)),
                Err(e) => last = io::Error::new(e.kind(), format!("{}: {e}", dir.display())),
            }
        }
        Err(last)
    }
}

impl Drop for DemoDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Demo {
    exe: PathBuf,
    cfg: Config,
    ui: Ui,
    fair: PathBuf,
    flock: PathBuf,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Fair,
    Flock,
}

impl Kind {
    fn arg(self) -> &'static str {
        match self {
            Kind::Fair => "fair",
            Kind::Flock => "flock",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Kind::Fair => "fairlock",
            Kind::Flock => "flock(2)",
        }
    }
}

fn io_fail(what: &str) -> impl Fn(io::Error) -> Failure + '_ {
    move |e| Failure::new(exit::OS, format!("demo: {what}: {e}"))
}

pub fn main(a: &DemoArgs) -> Result<u8, Failure> {
    let cfg = if a.quick {
        Config {
            workers: 4,
            busy_for: Duration::from_millis(600),
            arrival_gap: Duration::from_millis(20),
            contention: Duration::from_millis(1000),
            hold_us: 20,
            think_us: 0,
        }
    } else {
        Config {
            workers: 6,
            busy_for: Duration::from_millis(1500),
            arrival_gap: Duration::from_millis(20),
            contention: Duration::from_millis(4000),
            hold_us: 20,
            think_us: 0,
        }
    };
    let dir = DemoDir::create().map_err(io_fail("creating the demo directory"))?;
    let exe = std::env::current_exe().map_err(io_fail("finding this program"))?;
    let demo = Demo {
        exe,
        cfg,
        ui: Ui {
            tty: io::stderr().is_terminal(),
        },
        fair: dir.0.join("fair.lock"),
        flock: dir.0.join("flock.lock"),
    };
    File::create(&demo.flock).map_err(io_fail("creating the flock file"))?;
    FairLock::open(&demo.fair).map_err(|e| Failure::open(&demo.fair, &e))?;
    crate::signals::install().map_err(io_fail("sigaction"))?;
    let started = Instant::now();
    demo.ui.line(&format!(
        "fairlock demo: {} worker processes contend for one lock, first a fairlock, then flock(2).\n\
         Lock files in {} (removed at the end).",
        demo.cfg.workers,
        dir.0.display()
    ));
    let (busy_summary, busy_chart) = demo.busy_worker()?;
    let (summaries, charts) = demo.contention()?;
    let crash = demo.crash()?;
    demo.ui.line("\nSummary:");
    for s in [&busy_summary]
        .into_iter()
        .chain(&summaries)
        .chain([&crash])
    {
        demo.ui.line(&format!("   {s}"));
    }
    if let Some(file) = &a.plot {
        let mut all = vec![busy_chart];
        all.extend(charts);
        let doc = picture::svg("fairlock demo: fairlock vs flock(2)", &all);
        std::fs::write(file, doc)
            .map_err(|e| Failure::new(exit::OS, format!("{}: {e}", file.display())))?;
        demo.ui.line(&format!("   picture: {}", file.display()));
    }
    demo.ui.line(&format!(
        "\ndone in {:.1} s.",
        started.elapsed().as_secs_f64()
    ));
    drop(dir);
    Ok(0)
}

impl Demo {
    fn spawn(&self, kind: Kind, mode: &str, extra: &[String]) -> Result<KillOnDrop, Failure> {
        let path = match kind {
            Kind::Fair => &self.fair,
            Kind::Flock => &self.flock,
        };
        Command::new(&self.exe)
            .arg("__demo-worker")
            .args(["--kind", kind.arg(), "--mode", mode])
            .arg("--path")
            .arg(path)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .map(KillOnDrop)
            .map_err(io_fail("starting a worker"))
    }

    /// Step 1: w1 locks, works, unlocks and locks again at once, for a while; w2..wN arrive
    /// meanwhile and each want the lock once. How long do they wait, behind how many of w1's
    /// re-locks?
    fn busy_worker(&self) -> Result<(String, Chart<'static>), Failure> {
        interrupted()?;
        let n = self.cfg.workers;
        let busy_ms = self.cfg.busy_for.as_millis();
        self.ui.line(&format!(
            "\n1. A worker that re-locks at once, as cron jobs and worker loops do: w1 locks, works 2 ms,\n   \
             unlocks and locks again, for {busy_ms} ms; w2..w{n} arrive {} ms apart meanwhile, each wanting\n   \
             the lock once. Each bar is how long a waiter waited, then how often w1 re-locked meanwhile.\n",
            self.cfg.arrival_gap.as_millis()
        ));
        let mut rows = Vec::new();
        for kind in [Kind::Fair, Kind::Flock] {
            self.ui.progress(
                &format!("{}: w1 busy, the others arriving", kind.label()),
                true,
            );
            let busy_start = now_ns() + 50_000_000;
            let busy_end = busy_start + self.cfg.busy_for.as_nanos() as u64;
            let hold = ["--hold-us".to_string(), "2000".to_string()];
            let mut children = vec![self.spawn(
                kind,
                "loop",
                &[
                    "--start-ns".into(),
                    busy_start.to_string(),
                    "--end-ns".into(),
                    busy_end.to_string(),
                    hold[0].clone(),
                    hold[1].clone(),
                ],
            )?];
            let gap = self.cfg.arrival_gap.as_nanos() as u64;
            for k in 0..n - 1 {
                // Off the 2 ms grid of w1's turns, so that waiters arrive mid-turn.
                let at = busy_start + 100_900_000 + (gap + 700_000) * k as u64;
                let mut args = vec!["--start-ns".to_string(), at.to_string()];
                args.extend(hold.iter().cloned());
                children.push(self.spawn(kind, "once", &args)?);
            }
            let grants = collect(children)?;
            let busy: Vec<u64> = grants
                .iter()
                .filter(|g| g.worker == 0)
                .map(|g| g.grant)
                .collect();
            let waits: Vec<(usize, u64, usize)> = grants
                .iter()
                .filter(|g| g.worker != 0)
                .map(|g| {
                    let turns = busy.iter().filter(|&&t| t > g.req && t < g.grant).count();
                    (g.worker, g.grant.saturating_sub(g.req), turns)
                })
                .collect();
            rows.push((kind, waits));
        }
        let max = rows
            .iter()
            .flat_map(|(_, w)| w.iter().map(|&(_, ns, _)| ns))
            .max()
            .unwrap_or(0) as f64;
        let mut summary = Vec::new();
        for (kind, waits) in &rows {
            for (i, &(worker, ns, turns)) in waits.iter().enumerate() {
                self.ui.line(&format!(
                    "   {:<9} w{:<2} {} {:>8}  w1 re-locked {turns}x",
                    if i == 0 { kind.label() } else { "" },
                    worker + 1,
                    bar(ns as f64, max, 40),
                    fmt_ns(ns),
                ));
            }
            let longest = waits.iter().map(|w| w.1).max().unwrap_or(0);
            let most = waits.iter().map(|w| w.2).max().unwrap_or(0);
            summary.push(format!(
                "{}: longest wait {} (behind {most} re-lock{})",
                kind.label(),
                fmt_ns(longest),
                if most == 1 { "" } else { "s" }
            ));
        }
        self.ui.line(
            "\n   fairlock queues w1's re-lock behind everyone already waiting; flock(2) lets the\n   \
             process that just unlocked take the lock again before a woken waiter runs.",
        );
        let chart = Chart {
            title: format!(
                "1. Waits behind a worker that re-locks at once ({busy_ms} ms of 2 ms turns)"
            ),
            categories: rows[0].1.iter().map(|w| format!("w{}", w.0 + 1)).collect(),
            series: rows
                .iter()
                .map(|(kind, waits)| Series {
                    label: kind.label(),
                    values: waits.iter().map(|w| w.1 as f64).collect(),
                })
                .collect(),
            unit: |ns| fmt_ns(ns as u64),
        };
        Ok((format!("busy worker: {}", summary.join("; ")), chart))
    }

    /// How many workers are known to wait for the lock.
    fn queued(&self, kind: Kind) -> usize {
        match kind {
            Kind::Fair => fairlock::inspect(&self.fair).map_or(0, |s| s.waiters.len()),
            Kind::Flock => blocked_flocks(&self.flock),
        }
    }

    /// Step 2: everyone locks, works, unlocks and repeats for a fixed time.
    fn contention(&self) -> Result<(Vec<String>, Vec<Chart<'static>>), Failure> {
        interrupted()?;
        let mut summaries = Vec::new();
        let mut runs = Vec::new();
        let n = self.cfg.workers;
        let secs = self.cfg.contention.as_secs_f64();
        self.ui.line(&format!(
            "\n2. Contention: w1..w{n} arrive 10 ms apart, then each repeats lock, work {} us, unlock{} for {secs:.1} s.\n   \
             overtaken = requests that a later request got ahead of (max: by how many); times are\n   \
             read just before and after the lock call, so a process preempted right there can\n   \
             look overtaken. Waits are request-to-grant;\n   \
             share = grants of the busiest worker / of the least busy one while all were present.\n\n   \
             {:<9} {:>8} {:>20} {:>8} {:>8} {:>8} {:>8}  {}",
            self.cfg.hold_us,
            if self.cfg.think_us == 0 {
                ", lock again".to_string()
            } else {
                format!(", work {} us", self.cfg.think_us)
            },
            "lock",
            "grants",
            "overtaken (max by)",
            "p50",
            "p99",
            "max",
            "mean",
            "share max/min",
        ));
        for kind in [Kind::Fair, Kind::Flock] {
            let gap = 10_000_000u64;
            let start = now_ns() + 50_000_000;
            let end = start + gap * n as u64 + self.cfg.contention.as_nanos() as u64;
            let mut children = Vec::new();
            for k in 0..n {
                children.push(self.spawn(
                    kind,
                    "loop",
                    &[
                        "--start-ns".into(),
                        (start + gap * k as u64).to_string(),
                        "--end-ns".into(),
                        end.to_string(),
                        "--hold-us".into(),
                        self.cfg.hold_us.to_string(),
                        "--think-us".into(),
                        self.cfg.think_us.to_string(),
                    ],
                )?);
            }
            self.ui.progress(
                &format!("{}: contention for {secs:.1} s", kind.label()),
                true,
            );
            while now_ns() < end {
                let done = (now_ns().saturating_sub(start)) as f64 / (end - start) as f64;
                let mut msg = format!(
                    "{}: contention {:>3.0}%",
                    kind.label(),
                    done.min(1.0) * 100.0
                );
                if kind == Kind::Fair
                    && let Ok(st) = fairlock::inspect(&self.fair)
                {
                    msg.push_str(&format!(", {} tickets so far", st.next_ticket));
                }
                self.ui.progress(&msg, false);
                interrupted()?;
                std::thread::sleep(Duration::from_millis(100));
            }
            self.ui
                .progress(&format!("{}: collecting results", kind.label()), false);
            let grants = collect(children)?;
            let all_present = start + gap * (n as u64 - 1);
            let (row, summary) = stats(kind.label(), &grants, n, all_present, end);
            self.ui.line(&format!("   {row}"));
            summaries.push(summary);
            runs.push((kind, grants, all_present, end));
        }
        Ok((summaries, self.contention_pictures(&runs)))
    }

    /// Step 2 as pictures: each worker's share of the grants, and how the waits spread.
    fn contention_pictures(&self, runs: &[(Kind, Vec<Grant>, u64, u64)]) -> Vec<Chart<'static>> {
        let n = self.cfg.workers;
        let shares: Vec<Vec<f64>> = runs
            .iter()
            .map(|(_, grants, from, to)| {
                let mut c = vec![0u64; n];
                for g in grants.iter().filter(|g| g.req >= *from && g.req < *to) {
                    c[g.worker] += 1;
                }
                let total = c.iter().sum::<u64>().max(1) as f64;
                c.iter().map(|&k| 100.0 * k as f64 / total).collect()
            })
            .collect();
        let hists: Vec<Vec<f64>> = runs
            .iter()
            .map(|(_, grants, _, _)| {
                let waits: Vec<u64> = grants
                    .iter()
                    .map(|g| g.grant.saturating_sub(g.req))
                    .collect();
                let total = waits.len().max(1) as f64;
                histogram(&waits)
                    .iter()
                    .map(|&k| 100.0 * k as f64 / total)
                    .collect()
            })
            .collect();
        let labels: Vec<&str> = runs.iter().map(|r| r.0.label()).collect();
        self.ui.line(&format!(
            "\n   share of the grants while all were present (even = {:.1}% each)\n   {:<12}{:<34}{}",
            100.0 / n as f64,
            "",
            labels[0],
            labels.get(1).copied().unwrap_or("")
        ));
        let pct_bar = |v: f64| format!("{} {v:>5.1}%", bar(v, 100.0 / n as f64 * 2.0, 24));
        for w in 0..n {
            self.ui.line(&format!(
                "   {:<12}{:<34}{}",
                format!("w{}", w + 1),
                pct_bar(shares[0][w]),
                shares.get(1).map_or(String::new(), |s| pct_bar(s[w]))
            ));
        }
        self.ui.line(&format!(
            "\n   how long the requests waited (share of all requests)\n   {:<12}{:<34}{}",
            "",
            labels[0],
            labels.get(1).copied().unwrap_or("")
        ));
        let pct = |v: f64| format!("{} {v:>5.1}%", bar(v, 100.0, 24));
        for (b, (_, label)) in BUCKETS.iter().enumerate() {
            self.ui.line(&format!(
                "   {label:<12}{:<34}{}",
                pct(hists[0][b]),
                hists.get(1).map_or(String::new(), |h| pct(h[b]))
            ));
        }
        if let [(_, fair, ..), (_, flock, ..)] = runs {
            self.ui.line(&format!(
                "\n   The trade-off: flock(2) made {:.1}x fairlock's grants here because the process that\n   \
                 unlocks takes the lock again before a woken waiter runs (no context switch per grant),\n   \
                 which is also what gives its waits their long tail; fairlock hands every grant to the\n   \
                 longest waiter, paying a wake-up per grant for waits bounded by the queue ahead.",
                flock.len() as f64 / fair.len().max(1) as f64
            ));
        }
        let pct_unit: fn(f64) -> String = |v| format!("{v:.1}%");
        vec![
            Chart {
                title: "2. Contention: each worker's share of the grants".into(),
                categories: (1..=n).map(|w| format!("w{w}")).collect(),
                series: labels
                    .iter()
                    .zip(&shares)
                    .map(|(l, v)| Series {
                        label: l,
                        values: v.clone(),
                    })
                    .collect(),
                unit: pct_unit,
            },
            Chart {
                title: "2. Contention: how long the requests waited".into(),
                categories: BUCKETS.iter().map(|b| b.1.to_string()).collect(),
                series: labels
                    .iter()
                    .zip(&hists)
                    .map(|(l, v)| Series {
                        label: l,
                        values: v.clone(),
                    })
                    .collect(),
                unit: pct_unit,
            },
        ]
    }

    /// Step 3: SIGKILL a fairlock holder while two workers wait.
    fn crash(&self) -> Result<String, Failure> {
        interrupted()?;
        self.ui.line("\n3. Crash: a fairlock holder is killed with SIGKILL while w1 and w2 wait (each then holds 20 ms).");
        self.ui.progress("fairlock: holder taking the lock", true);
        let mut holder = self.spawn(Kind::Fair, "hold", &[])?;
        let mut line = String::new();
        if let Some(out) = holder.0.stdout.take() {
            let _ = BufReader::new(out).read_line(&mut line);
        }
        let token: u64 = line
            .strip_prefix("held ")
            .and_then(|t| t.trim().parse().ok())
            .ok_or_else(|| Failure::new(exit::SOFTWARE, "demo: the holder did not get the lock"))?;
        let mut waiters = Vec::new();
        for k in 0..2 {
            waiters.push(self.spawn(Kind::Fair, "once", &["--hold-us".into(), "20000".into()])?);
            let deadline = Instant::now() + Duration::from_secs(3);
            while self.queued(Kind::Fair) < k + 1 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
        self.ui.progress("fairlock: killing the holder", true);
        let killed = now_ns();
        holder.0.kill().map_err(io_fail("killing the holder"))?;
        let _ = holder.0.wait();
        let grants = collect(waiters)?;
        let ms = |g: &Grant| (g.grant.saturating_sub(killed)) as f64 / 1e6;
        let (w1, w2) = (grants[0], grants[1]);
        self.ui.line(&format!(
            "   killed the holder (pid {}, token {token}) at t=0\n   \
             w1 got the lock at t={:.2} ms with token {}, owner_died() = {}\n   \
             w2 got the lock at t={:.2} ms with token {}, owner_died() = {} (after w1's 20 ms turn)\n   \
             (flock(2) also frees a dead holder's lock, but the next holder cannot tell it died.)",
            holder.0.id(),
            ms(&w1),
            w1.token,
            w1.died,
            ms(&w2),
            w2.token,
            w2.died,
        ));
        Ok(format!(
            "fairlock after SIGKILL of the holder: next waiter in {:.1} ms, told owner_died() = {}",
            ms(&w1),
            w1.died
        ))
    }
}

/// A worker killed (and reaped) when dropped, for error paths.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Fails once SIGINT, SIGTERM or SIGHUP arrived (the demo directory is then removed).
fn interrupted() -> Result<(), Failure> {
    match crate::signals::seen() {
        Some(sig) => Err(Failure::new(
            (128 + sig) as u8,
            format!("demo: interrupted by {}", crate::signals::name(sig)),
        )),
        None => Ok(()),
    }
}

/// Waits for the workers and parses their grants (worker index = position in `children`).
fn collect(children: Vec<KillOnDrop>) -> Result<Vec<Grant>, Failure> {
    let mut grants = Vec::new();
    for (worker, mut child) in children.into_iter().enumerate() {
        let child = &mut child.0;
        let mut text = String::new();
        if let Some(mut out) = child.stdout.take() {
            out.read_to_string(&mut text)
                .map_err(io_fail("reading a worker"))?;
        }
        let status = child.wait().map_err(io_fail("waiting for a worker"))?;
        interrupted()?;
        if !status.success() {
            return Err(Failure::new(
                exit::SOFTWARE,
                format!("demo: worker w{} failed: {status}", worker + 1),
            ));
        }
        for l in text.lines() {
            let f: Vec<u64> = l.split(' ').filter_map(|x| x.parse().ok()).collect();
            if let [req, grant, token, died] = f[..] {
                grants.push(Grant {
                    worker,
                    req,
                    grant,
                    token,
                    died: died != 0,
                });
            }
        }
    }
    Ok(grants)
}

/// Processes blocked in flock(2) on `path`, from /proc/locks.
fn blocked_flocks(path: &Path) -> usize {
    let Ok(ino) = std::fs::metadata(path).map(|m| m.ino()) else {
        return 0;
    };
    let needle = format!(":{ino} ");
    std::fs::read_to_string("/proc/locks").map_or(0, |s| {
        s.lines()
            .filter(|l| l.contains("->") && l.contains("FLOCK") && l.contains(&needle))
            .count()
    })
}
