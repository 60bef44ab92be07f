//! `fairlock`: run commands under a strictly fair (FIFO) lock shared by processes, inspect a
//! lock file, or watch a demonstration against `flock(2)`.

mod demo;
mod etcd;
mod exit;
mod fdform;
mod inherited;
mod kind;
mod run;
mod secs;
mod sentinel;
mod signals;
mod status;

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Args, Parser, Subcommand};

const MAIN_AFTER: &str = "\
Examples:
  fairlock run /run/lock/backup.lock -- rsync -a /data /backup
  fairlock run -w 10 jobs.lock -c 'make deploy >> deploy.log'
  fairlock status jobs.lock
  fairlock demo --quick

Every `fairlock run` on the same LOCKFILE waits its turn in arrival order (first come,
first served); a waiter or holder that dies never blocks the others.
See docs/CLI.md for details.";

/// Run commands one at a time, in arrival order, under a fair lock shared by processes.
#[derive(Parser, Debug)]
#[command(
    name = "fairlock",
    version,
    about = "Run commands one at a time, in arrival order, under a lock shared by processes",
    long_about = None,
    after_help = format!("{MAIN_AFTER}\n\n{}", exit::TABLE),
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Wait for the lock in FIFO order, then run a command while holding it.
    #[command(after_help = run::AFTER_HELP, override_usage = run::USAGE)]
    Run(RunArgs),
    /// Take the lock for the shell's descriptor FD (exec 9>>FILE; fairlock lock 9): held until
    /// fairlock unlock FD, or until FD is closed everywhere (the shell exits).
    #[command(after_help = fdform::LOCK_AFTER_HELP)]
    Lock(LockArgs),
    /// Release the lock that descriptor FD holds (taken with fairlock lock FD).
    #[command(after_help = fdform::UNLOCK_AFTER_HELP)]
    Unlock(UnlockArgs),
    /// Show who holds a lock file and who waits for it (read-only).
    #[command(after_help = status::AFTER_HELP)]
    Status(StatusArgs),
    /// Show fairness and crash recovery against flock(2), with no setup (about 10 s).
    #[command(after_help = demo::AFTER_HELP)]
    Demo(DemoArgs),
    /// Internal: one worker process of `fairlock demo`.
    #[command(name = "__demo-worker", hide = true)]
    DemoWorker(demo::WorkerArgs),
}

#[derive(Args, Debug)]
#[command(group(ArgGroup::new("what").required(true).args(["shell", "command"])))]
pub struct RunArgs {
    /// Fail at once (exit 1, see -E) if the lock is held or anyone is waiting for it (a dead
    /// holder or waiter is passed over first).
    #[arg(short = 'n', long = "nonblock", visible_aliases = ["nb", "nonblocking"],
          conflicts_with = "wait", overrides_with = "nonblock")]
    pub nonblock: bool,
    /// A writer of a reader/writer lock: alone, in arrival order with the readers (-s). A
    /// new LOCKFILE is made a reader/writer lock; without -s or -x the lock is exclusive
    /// (or, for a reader/writer lock file, a writer).
    #[arg(
        short = 'x',
        long = "exclusive",
        short_alias = 'e',
        overrides_with_all = ["exclusive", "shared"]
    )]
    pub exclusive: bool,
    /// A reader of a reader/writer lock: readers run together, writers (-x, or no flag) alone,
    /// everybody in arrival order. A new LOCKFILE is made a reader/writer lock.
    #[arg(short = 's', long = "shared", overrides_with_all = ["exclusive", "shared"])]
    pub shared: bool,
    /// A semaphore: at most N commands at once, started in arrival order. Every user of
    /// LOCKFILE must give the same N (a different one is refused, exit 65).
    #[arg(long, value_name = "N", conflicts_with_all = ["exclusive", "shared"],
          value_parser = clap::value_parser!(u32).range(1..=524_288))]
    pub permits: Option<u32>,
    /// The lock named KEY inside LOCKFILE, a file of named locks (created with the name on
    /// first use): any number of independent locks in one file, each FIFO and robust. KEY is
    /// any UTF-8 of at most 255 bytes. Combines with -s, -x and --permits (each name has its
    /// own kind).
    #[arg(long, value_name = "KEY")]
    pub name: Option<String>,
    /// Accepted for flock(1)'s habits and always in effect: the command never inherits the
    /// lock (fairlock holds it, and releases it when the command ends).
    #[arg(short = 'o', long = "close", overrides_with = "close")]
    pub close: bool,
    /// Give up (exit 1, see -E) after waiting SECS seconds (fractions allowed: 0.5).
    #[arg(short = 'w', long = "wait", visible_alias = "timeout", value_name = "SECS",
          value_parser = secs::parse_wait)]
    pub wait: Option<Duration>,
    /// Exit code for a busy lock (-n) or a timeout (-w).
    #[arg(short = 'E', long = "conflict-exit-code", value_name = "N", default_value_t = exit::CONFLICT)]
    pub conflict_exit_code: u8,
    /// Hold the lock for at most SECS seconds: after that the next waiter may take it over,
    /// and fairlock then exits 69 when the command ends. For etcd://, the lease's TTL (whole
    /// seconds, default 10), renewed while fairlock lives.
    #[arg(long, value_name = "SECS", value_parser = secs::parse_lease)]
    pub lease: Option<Duration>,
    /// Send SIGTERM to the command as soon as its lease is lost.
    #[arg(long, requires = "lease")]
    pub kill_on_lost: bool,
    /// Report waiting, getting and releasing the lock on stderr.
    #[arg(short, long)]
    pub verbose: bool,
    /// Run SHELL_COMMAND with `/bin/sh -c` instead of COMMAND.
    #[arg(short = 'c', long = "command", value_name = "SHELL_COMMAND")]
    pub shell: Option<OsString>,
    /// The lock file, created (mode 0600) if missing; or a lock on etcd,
    /// etcd://HOST:PORT[,HOST:PORT...]/NAME (a build with the `etcd` feature).
    #[arg(value_name = "LOCKFILE")]
    pub lockfile: PathBuf,
    /// The command to run, and its arguments.
    #[arg(
        value_name = "COMMAND",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        conflicts_with = "shell"
    )]
    pub command: Vec<OsString>,
}

#[derive(Args, Debug)]
pub struct LockArgs {
    /// Fail at once (exit 1, see -E) if the lock is held or anyone is waiting for it.
    #[arg(short = 'n', long = "nonblock", visible_aliases = ["nb", "nonblocking"],
          conflicts_with = "wait")]
    pub nonblock: bool,
    /// Give up (exit 1, see -E) after waiting SECS seconds (fractions allowed: 0.5).
    #[arg(short = 'w', long = "wait", visible_alias = "timeout", value_name = "SECS",
          value_parser = secs::parse_wait)]
    pub wait: Option<Duration>,
    /// Exit code for a busy lock (-n) or a timeout (-w).
    #[arg(short = 'E', long = "conflict-exit-code", value_name = "N", default_value_t = exit::CONFLICT)]
    pub conflict_exit_code: u8,
    /// A writer of a reader/writer lock (as fairlock run -x).
    #[arg(short = 'x', long = "exclusive", short_alias = 'e', overrides_with_all = ["exclusive", "shared"])]
    pub exclusive: bool,
    /// A reader of a reader/writer lock (as fairlock run -s).
    #[arg(short = 's', long = "shared", overrides_with_all = ["exclusive", "shared"])]
    pub shared: bool,
    /// A permit of a semaphore of N permits (as fairlock run --permits).
    #[arg(long, value_name = "N", conflicts_with_all = ["exclusive", "shared"],
          value_parser = clap::value_parser!(u32).range(1..=524_288))]
    pub permits: Option<u32>,
    /// The lock is held for at most SECS seconds; after that the next waiter may take it over
    /// (nothing renews it: fairlock lock has exited).
    #[arg(long, value_name = "SECS", value_parser = secs::parse_lease)]
    pub lease: Option<Duration>,
    /// Report the wait and the grant on stderr.
    #[arg(short, long)]
    pub verbose: bool,
    /// The descriptor, open for writing on the lock file (exec 9>>FILE).
    #[arg(value_name = "FD")]
    pub fd: i32,
}

#[derive(Args, Debug)]
pub struct UnlockArgs {
    /// Report the release on stderr.
    #[arg(short, long)]
    pub verbose: bool,
    /// The descriptor that holds the lock.
    #[arg(value_name = "FD")]
    pub fd: i32,
}

#[derive(Args, Debug)]
pub struct StatusArgs {
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Only the lock named KEY of a file of named locks.
    #[arg(long, value_name = "KEY")]
    pub name: Option<String>,
    /// The lock file (never modified), or etcd://HOST:PORT[,HOST:PORT...]/NAME.
    #[arg(value_name = "LOCKFILE")]
    pub lockfile: PathBuf,
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// A shorter run (about 4 s) with fewer workers.
    #[arg(long)]
    pub quick: bool,
    /// Also draw the waits as an SVG picture into FILE (replaced if it exists).
    #[arg(long, value_name = "FILE")]
    pub plot: Option<std::path::PathBuf>,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    let result = match cli.command {
        Command::Run(args) => run::main(&args),
        Command::Lock(args) => fdform::lock(&args),
        Command::Unlock(args) => fdform::unlock(&args),
        Command::Status(args) => status::main(&args),
        Command::Demo(args) => demo::main(&args),
        Command::DemoWorker(args) => demo::worker(&args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            if !f.message.is_empty() {
                eprintln!("fairlock: {}", f.message);
            }
            ExitCode::from(f.code)
        }
    }
}

/// Help and version go to stdout with status 0; every other parse error becomes one line
/// on stderr and status 64.
fn usage_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand => {
            let _ = writeln!(
                std::io::stderr(),
                "fairlock: missing subcommand: run, status or demo (see 'fairlock --help')"
            );
            ExitCode::from(exit::USAGE)
        }
        _ => {
            let _ = writeln!(
                std::io::stderr(),
                "fairlock: {}",
                one_line(&e.render().to_string())
            );
            ExitCode::from(exit::USAGE)
        }
    }
}

/// clap's message without the usage block, folded into one line.
fn one_line(rendered: &str) -> String {
    let body = rendered.split("\nUsage:").next().unwrap_or(rendered);
    let body = body.trim().strip_prefix("error: ").unwrap_or(body.trim());
    let mut out = String::new();
    for para in body.split("\n\n") {
        let para = para.split_whitespace().collect::<Vec<_>>().join(" ");
        if para.is_empty() || para.starts_with("For more information") {
            continue;
        }
        if !out.is_empty() {
            out.push_str("; ");
        }
        out.push_str(&para);
    }
    let sub = std::env::args()
        .nth(1)
        .filter(|a| ["run", "status", "demo"].contains(&a.as_str()));
    match sub {
        Some(sub) => out.push_str(&format!(" (see 'fairlock {sub} --help')")),
        None => out.push_str(" (see 'fairlock --help')"),
    }
    out
}

/// Writes to stdout, ignoring a closed pipe.
pub fn out(text: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes());
    let _ = o.flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn folds_clap_errors() {
        assert_eq!(
            one_line(
                "error: a\n  b\n\n  tip: c\n\nUsage: x\n\nFor more information, try '--help'.\n"
            ),
            "a b; tip: c (see 'fairlock --help')"
        );
    }
}
