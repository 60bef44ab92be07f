//! The hidden `fairlock __demo-worker` subcommand: one contending process of the demo.

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use fairlock::FairLock;

use crate::exit::{self, Failure};

/// Arguments of the hidden `__demo-worker` subcommand.
#[derive(clap::Args, Debug)]
pub struct WorkerArgs {
    /// `fair` (fairlock) or `flock`.
    #[arg(long)]
    kind: String,
    /// `once` (one grant), `loop` (grants until --end-ns) or `hold` (hold until killed).
    #[arg(long)]
    mode: String,
    /// The lock file.
    #[arg(long)]
    path: PathBuf,
    /// CLOCK_MONOTONIC nanoseconds to start at.
    #[arg(long, default_value_t = 0)]
    start_ns: u64,
    /// CLOCK_MONOTONIC nanoseconds after which `loop` makes no new request.
    #[arg(long, default_value_t = 0)]
    end_ns: u64,
    /// Microseconds to hold each grant.
    #[arg(long, default_value_t = 0)]
    hold_us: u64,
    /// Microseconds to work between grants (`loop`).
    #[arg(long, default_value_t = 0)]
    think_us: u64,
}

/// CLOCK_MONOTONIC in nanoseconds: comparable across processes.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write into.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Waits until `t`: sleeps for long waits, spins for short ones (like real work).
fn until(t: u64) {
    loop {
        let now = now_ns();
        if now >= t {
            return;
        }
        if t - now > 2_000_000 {
            std::thread::sleep(Duration::from_nanos(t - now - 1_000_000));
        } else {
            std::hint::spin_loop();
        }
    }
}

pub fn worker(a: &WorkerArgs) -> Result<u8, Failure> {
    let fail = |e: String| Failure::new(exit::SOFTWARE, format!("demo worker: {e}"));
    until(a.start_ns);
    let mut grants: Vec<(u64, u64, u64, bool)> = Vec::new();
    let hold = a.hold_us * 1000;
    match a.kind.as_str() {
        "fair" => {
            let lock = FairLock::open(&a.path).map_err(|e| fail(e.to_string()))?;
            loop {
                let req = now_ns();
                let g = lock.lock().map_err(|e| fail(e.to_string()))?;
                let got = now_ns();
                grants.push((req, got, g.token(), g.owner_died()));
                if a.mode == "hold" {
                    println!("held {}", g.token());
                    let _ = io::stdout().flush();
                    std::thread::sleep(Duration::from_secs(30));
                    return Ok(0);
                }
                until(got + hold);
                g.unlock().map_err(|e| fail(e.to_string()))?;
                if a.mode != "loop" || now_ns() >= a.end_ns {
                    break;
                }
                until(now_ns() + a.think_us * 1000);
            }
        }
        "flock" => {
            let file = File::open(&a.path).map_err(|e| fail(e.to_string()))?;
            loop {
                let req = now_ns();
                file.lock().map_err(|e| fail(e.to_string()))?;
                let got = now_ns();
                grants.push((req, got, 0, false));
                until(got + hold);
                file.unlock().map_err(|e| fail(e.to_string()))?;
                if a.mode != "loop" || now_ns() >= a.end_ns {
                    break;
                }
                until(now_ns() + a.think_us * 1000);
            }
        }
        k => return Err(fail(format!("unknown kind {k}"))),
    }
    let mut out = String::with_capacity(grants.len() * 48);
    for (req, got, token, died) in grants {
        out.push_str(&format!("{req} {got} {token} {}\n", u8::from(died)));
    }
    let _ = io::stdout().lock().write_all(out.as_bytes());
    Ok(0)
}
