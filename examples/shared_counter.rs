//! A `FairMutex<u64>` counter shared by processes: 4 processes increment one value in a lock
//! file 10,000 times each and the total is exactly 40,000, because every increment is made
//! under the lock (a plain shared counter would lose updates).
//!
//! ```sh
//! cargo run --release --example shared_counter            # uses a file in the temp dir
//! cargo run --release --example shared_counter -- /tmp/counter.lock
//! ```

use std::process::Command;

use fairlock::FairMutex;

const PROCESSES: u64 = 4;
const INCREMENTS: u64 = 10_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let first = args.next();
    if first.as_deref() == Some("--worker") {
        let path = args.next().ok_or("--worker needs a path")?;
        let counter = FairMutex::<u64>::open(&path)?;
        for _ in 0..INCREMENTS {
            let mut n = counter.lock()?;
            if n.owner_died() {
                eprintln!(
                    "a previous holder died holding the counter; its value is {}",
                    *n
                );
            }
            *n += 1;
        }
        return Ok(());
    }
    let temporary = first.is_none();
    let path = first.map_or_else(
        || std::env::temp_dir().join(format!("fairlock-counter-{}.lock", std::process::id())),
        Into::into,
    );
    let counter = FairMutex::<u64>::open(&path)?;
    let start = *counter.lock()?;
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for _ in 0..PROCESSES {
        children.push(Command::new(&exe).arg("--worker").arg(&path).spawn()?);
    }
    for mut c in children {
        let status = c.wait()?;
        if !status.success() {
            return Err(format!("a worker failed: {status}").into());
        }
    }
    let end = *counter.lock()?;
    println!(
        "{}: {start} -> {end} ({} processes x {INCREMENTS} increments = {} added)",
        path.display(),
        PROCESSES,
        end - start
    );
    assert_eq!(end - start, PROCESSES * INCREMENTS);
    if temporary {
        std::fs::remove_file(&path)?;
    }
    Ok(())
}
