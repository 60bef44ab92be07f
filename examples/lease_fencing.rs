//! Leases and fencing tokens: a holder that stalls past its lease is taken over, finds out it
//! lost the lock, and its late write is rejected by the store because its token is smaller.
//!
//! A child process takes the lock with a 300 ms lease and then "pauses" for 1 s (a long GC
//! pause, a stopped VM) before writing. Meanwhile the parent waits in line, takes the lock
//! over when the lease runs out, and writes with its larger token. The store — here a
//! `FairMutex` holding the largest token it has accepted — refuses the child's stale write,
//! and the child's `check()` / `unlock()` say `LockLost`.
//!
//! ```sh
//! cargo run --release --example lease_fencing
//! ```

use std::process::Command;
use std::time::Duration;

use fairlock::{Error, FairLock, FairMutex};

/// A store that accepts a write only with a token at least as large as any it has seen.
#[derive(Clone, Copy, bytemuck::Zeroable, bytemuck::Pod)]
#[repr(C)]
struct Store {
    largest_token: u64,
    value: u64,
}

fn write(store: &FairMutex<Store>, token: u64, value: u64) -> Result<bool, Error> {
    let mut s = store.lock()?;
    if token < s.largest_token {
        return Ok(false); // fenced off: a newer holder has written
    }
    s.largest_token = token;
    s.value = value;
    Ok(true)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let lease = Duration::from_millis(300);
    if args.first().map(String::as_str) == Some("--stalling-holder") {
        let (lock_path, store_path) = (&args[1], &args[2]);
        let lock = FairLock::options().lease(lease).open(lock_path)?;
        let store = FairMutex::<Store>::open(store_path)?;
        let guard = lock.lock()?;
        println!(
            "child: holding with token {}, lease {lease:?}; pausing 1 s",
            guard.token()
        );
        std::thread::sleep(Duration::from_secs(1));
        let accepted = write(&store, guard.token(), 1)?;
        println!("child: store accepted my late write: {accepted}");
        match guard.unlock() {
            Err(e @ Error::LockLost { .. }) => println!("child: unlock says: {e}"),
            other => println!("child: unlock: {other:?}"),
        }
        return Ok(());
    }
    let dir = std::env::temp_dir().join(format!("fairlock-fencing-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (lock_path, store_path) = (dir.join("job.lock"), dir.join("store.lock"));
    let lock = FairLock::options().lease(lease).open(&lock_path)?;
    let store = FairMutex::<Store>::open(&store_path)?;
    let mut child = Command::new(std::env::current_exe()?)
        .arg("--stalling-holder")
        .args([&lock_path, &store_path])
        .spawn()?;
    // Wait until the child holds the lock, then queue behind it.
    while fairlock::inspect(&lock_path)?.holder.is_none() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let guard = lock.lock()?;
    println!(
        "parent: took over with token {} (owner_died: {})",
        guard.token(),
        guard.owner_died()
    );
    let accepted = write(&store, guard.token(), 2)?;
    println!("parent: store accepted my write: {accepted}");
    child.wait()?;
    guard.unlock()?;
    let s = *store.lock()?;
    println!("store: value {} from token {}", s.value, s.largest_token);
    assert_eq!(s.value, 2, "the stale holder's write was fenced off");
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
