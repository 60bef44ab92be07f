//! The options of each subcommand, as clap parses them, and what follows from them alone.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgGroup, Args};

use crate::exit::{self, Failure};
use crate::secs;

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
    /// The command does not keep the lock alive: without -o it inherits what does, so that
    /// the lock stays held until the command ends even if fairlock is killed (as flock(1)'s
    /// child inherits the lock); with -o a killed fairlock frees it at once.
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
    /// Permission bits of a lock file this run creates, in octal (default 600: the user's
    /// own; 660 or 666 to share it with a group or everyone), before the umask. Whoever
    /// uses the lock needs write access to the file: the lock's state lives in it.
    #[arg(long, value_name = "OCTAL", value_parser = parse_mode)]
    pub mode: Option<u32>,
    /// The lock file, created (mode 0600, see --mode) if missing; or a lock on etcd,
    /// etcd://HOST:PORT[,HOST:PORT...]/NAME, or etcds://... through TLS with etcdctl's
    /// ETCDCTL_CACERT, ETCDCTL_CERT, ETCDCTL_KEY and ETCDCTL_USER (a build with the `etcd`
    /// feature).
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
    /// The lock file (never modified), or etcd://HOST:PORT[,HOST:PORT...]/NAME, or
    /// etcds://... (TLS; etcdctl's ETCDCTL_* variables, as for fairlock run).
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

impl RunArgs {
    /// A busy lock or a timeout: silent unless verbose, with the `-E` code.
    pub fn conflict(&self, what: &str) -> Failure {
        if self.verbose {
            Failure::new(
                self.conflict_exit_code,
                format!("{}: {what}", self.lockfile.display()),
            )
        } else {
            Failure::silent(self.conflict_exit_code)
        }
    }
}

/// `--mode`: permission bits in octal (`600`, `0660`, `0o644`), at most `7777`.
fn parse_mode(s: &str) -> Result<u32, String> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    match u32::from_str_radix(digits, 8) {
        Ok(m) if m <= 0o7777 => Ok(m),
        _ => Err(format!(
            "{s:?}: permission bits in octal, such as 600, 660 or 644"
        )),
    }
}
