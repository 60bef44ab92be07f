//! `fairlock`: run commands under a strictly fair (FIFO) lock shared by processes, inspect a
//! lock, or watch a demonstration against `flock(2)`. This file holds the command line and
//! sends each subcommand to its backend: a lock file, or a lock on etcd (`etcd://…`).

mod args;
mod child;
mod demo;
#[cfg(feature = "etcd")]
mod etcd;
mod exit;
mod fdform;
mod generate;
mod help;
mod inherited;
mod kind;
mod run;
mod secs;
mod sentinel;
mod signals;
mod status;
mod status_print;
mod stdout;

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use args::{DemoArgs, LockArgs, RunArgs, StatusArgs, UnlockArgs};
use exit::Failure;

/// Run commands one at a time, in arrival order, under a fair lock shared by processes.
#[derive(Parser, Debug)]
#[command(
    name = "fairlock",
    version,
    about = "Run commands one at a time, in arrival order, under a lock shared by processes",
    long_about = help::ABOUT,
    after_help = format!("{}\n\n{}", help::MAIN, exit::TABLE),
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Wait for the lock in FIFO order, then run a command while holding it.
    #[command(after_help = help::RUN, override_usage = help::RUN_USAGE)]
    Run(RunArgs),
    /// Take the lock for the shell's descriptor FD (exec 9>>FILE; fairlock lock 9): held until
    /// fairlock unlock FD, or until FD is closed everywhere (the shell exits).
    #[command(after_help = help::LOCK)]
    Lock(LockArgs),
    /// Release the lock that descriptor FD holds (taken with fairlock lock FD).
    #[command(after_help = help::UNLOCK)]
    Unlock(UnlockArgs),
    /// Show who holds a lock file and who waits for it (read-only).
    #[command(after_help = help::STATUS)]
    Status(StatusArgs),
    /// Show fairness and crash recovery against flock(2), with no setup (about 10 s).
    #[command(after_help = help::DEMO)]
    Demo(DemoArgs),
    /// Print or install the manual pages (man fairlock) and the bash, zsh and fish completions.
    #[command(after_help = help::GENERATE)]
    Generate(generate::GenerateArgs),
    /// Internal: one worker process of `fairlock demo`.
    #[command(name = "__demo-worker", hide = true)]
    DemoWorker(demo::WorkerArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e),
    };
    let result = match cli.command {
        Command::Run(args) => match remote_address(&args.lockfile) {
            Ok(None) => run::main(&args),
            Ok(Some(address)) => run_on_etcd(&args, address),
            Err(f) => Err(f),
        },
        Command::Lock(args) => fdform::lock(&args),
        Command::Unlock(args) => fdform::unlock(&args),
        Command::Status(args) => match remote_address(&args.lockfile) {
            Ok(None) => status::main(&args),
            Ok(Some(address)) => status_on_etcd(&args, address),
            Err(f) => Err(f),
        },
        Command::Demo(args) => demo::main(&args),
        Command::Generate(args) => generate::main(&args, <Cli as clap::CommandFactory>::command()),
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

/// LOCKFILE's address if it names a lock on etcd (`etcd://…`, `etcds://…` for TLS), `None`
/// for a lock file; a usage error for any other `scheme://` (a file of such a name is
/// `./scheme://…`), so that a mistyped address is never opened as a file.
fn remote_address(lockfile: &Path) -> Result<Option<&str>, Failure> {
    let Some(s) = lockfile.to_str() else {
        return Ok(None);
    };
    if s.starts_with("etcd://") || s.starts_with("etcds://") {
        return Ok(Some(s));
    }
    let scheme = s.split_once("://").map(|(scheme, _)| scheme);
    let is_scheme = |x: &str| {
        x.starts_with(|c: char| c.is_ascii_alphabetic())
            && x.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    };
    match scheme {
        Some(x) if is_scheme(x) => Err(Failure::new(
            exit::USAGE,
            format!(
                "{s}: unknown scheme {x}://: a lock on etcd is etcd://HOST:PORT[,HOST:PORT...]/NAME, \
                 or etcds://... through TLS; a lock file is a path (./{s} for a file of that name)"
            ),
        )),
        _ => Ok(None),
    }
}

#[cfg(feature = "etcd")]
fn run_on_etcd(a: &RunArgs, address: &str) -> Result<u8, Failure> {
    etcd::run(a, address)
}

#[cfg(feature = "etcd")]
fn status_on_etcd(a: &StatusArgs, address: &str) -> Result<u8, Failure> {
    etcd::status(a, address)
}

#[cfg(not(feature = "etcd"))]
fn run_on_etcd(_: &RunArgs, address: &str) -> Result<u8, Failure> {
    Err(etcd_not_built(address))
}

#[cfg(not(feature = "etcd"))]
fn status_on_etcd(_: &StatusArgs, address: &str) -> Result<u8, Failure> {
    Err(etcd_not_built(address))
}

#[cfg(not(feature = "etcd"))]
fn etcd_not_built(address: &str) -> Failure {
    Failure::new(
        exit::USAGE,
        format!(
            "{address}: this fairlock was built without etcd support (build it with \
             `cargo build --release -p fairlock-cli --features etcd`)"
        ),
    )
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
                "fairlock: missing subcommand: run, lock, unlock, status, demo or generate (see 'fairlock --help')"
            );
            ExitCode::from(exit::USAGE)
        }
        _ => {
            let args: Vec<String> = std::env::args().skip(1).collect();
            let hint = flock_habit_hint(e.kind(), &args)
                .map(|h| format!("; {h}"))
                .unwrap_or_default();
            let _ = writeln!(
                std::io::stderr(),
                "fairlock: {}{hint}",
                one_line(&e.render().to_string())
            );
            ExitCode::from(exit::USAGE)
        }
    }
}

/// What to type instead, for a command line written as for flock(1): `flock FILE CMD...`
/// (fairlock takes a subcommand first), `flock -u FD` (fairlock unlocks with a subcommand).
fn flock_habit_hint(kind: clap::error::ErrorKind, args: &[String]) -> Option<String> {
    use clap::error::ErrorKind;
    let first = args.first()?;
    match kind {
        ErrorKind::InvalidSubcommand | ErrorKind::UnknownArgument
            if first == "-u" || first == "--unlock" =>
        {
            let fd = args.get(1).map_or("FD", String::as_str);
            Some(format!("did you mean `fairlock unlock {fd}`?"))
        }
        ErrorKind::InvalidSubcommand if !first.starts_with('-') => {
            let rest = args[1..].join(" ");
            let cmd = if rest.is_empty() {
                "CMD..."
            } else {
                rest.as_str()
            };
            Some(format!(
                "did you mean `fairlock run {first} -- {cmd}`? (flock(1) takes the file first; \
                 fairlock takes a subcommand: run, lock, unlock, status, demo, generate)"
            ))
        }
        _ => None,
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
        .filter(|a| ["run", "lock", "unlock", "status", "demo", "generate"].contains(&a.as_str()));
    match sub {
        Some(sub) => out.push_str(&format!(" (see 'fairlock {sub} --help')")),
        None => out.push_str(" (see 'fairlock --help')"),
    }
    out
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
