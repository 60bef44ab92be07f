//! A pool of worker processes taking jobs from one queue kept in a `FairMutex`: each worker
//! locks the queue, takes the next job, unlocks, works, and comes back. Because the lock is
//! FIFO, a worker that comes back while others wait queues behind them: jobs spread evenly
//! over the workers instead of going to whichever process re-locks fastest. A worker killed
//! while holding the queue does not stop the pool (the next holder is told `owner_died`).
//!
//! ```sh
//! cargo run --release --example worker_pool          # 4 workers, 400 jobs
//! cargo run --release --example worker_pool -- 8 2000
//! ```

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fairlock::FairMutex;

/// The queue, in the lock file: plain old data, any bytes valid.
#[derive(Clone, Copy, Debug, bytemuck::Zeroable, bytemuck::Pod)]
#[repr(C)]
struct Queue {
    /// Jobs to hand out in all.
    total: u64,
    /// The next job to hand out.
    next: u64,
    /// Jobs finished.
    done: u64,
}

fn work(path: &str) -> Result<u64, fairlock::Error> {
    let queue = FairMutex::<Queue>::open(path)?;
    let mut mine = 0;
    loop {
        let job = {
            let mut q = queue.lock()?;
            if q.next == q.total {
                break;
            }
            q.next += 1;
            q.next - 1
        };
        // The job itself, outside the lock: 200 µs of "work".
        let until = Instant::now() + Duration::from_micros(200);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        std::hint::black_box(job);
        queue.lock()?.done += 1;
        mine += 1;
    }
    Ok(mine)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--worker") {
        println!("{}", work(&args[1])?);
        return Ok(());
    }
    let workers: usize = args.first().map_or(Ok(4), |s| s.parse())?;
    let jobs: u64 = args.get(1).map_or(Ok(400), |s| s.parse())?;
    let path = std::env::temp_dir().join(format!("fairlock-pool-{}.lock", std::process::id()));
    let queue = FairMutex::<Queue>::open(&path)?;
    *queue.lock()? = Queue {
        total: jobs,
        next: 0,
        done: 0,
    };
    let exe = std::env::current_exe()?;
    let children = (0..workers)
        .map(|_| {
            Command::new(&exe)
                .arg("--worker")
                .arg(&path)
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut counts = Vec::new();
    for c in children {
        let out = c.wait_with_output()?;
        if !out.status.success() {
            return Err(format!("a worker failed: {}", out.status).into());
        }
        counts.push(String::from_utf8(out.stdout)?.trim().parse::<u64>()?);
    }
    let q = *queue.lock()?;
    println!(
        "{jobs} jobs over {workers} worker processes: {counts:?} (done: {})",
        q.done
    );
    assert_eq!(q.done, jobs);
    assert_eq!(counts.iter().sum::<u64>(), jobs);
    std::fs::remove_file(&path)?;
    Ok(())
}
