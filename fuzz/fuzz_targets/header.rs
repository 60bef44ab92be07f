//! Any bytes as a lock file: `validate_header` gives a verdict without panicking, and
//! `FairLock::open` (and a named open, and `inspect`) on a file holding those bytes returns
//! (Ok or Err) without a panic or a SIGBUS; a non-empty file that is not a fairlock file
//! (neither magic) is never modified. The corpus holds a small file of named locks as a seed.
#![no_main]

use std::sync::atomic::{AtomicU64, Ordering};

use fairlock::FairLock;
use fairlock::__internal::validate_header;
use libfuzzer_sys::fuzz_target;

static N: AtomicU64 = AtomicU64::new(0);

fuzz_target!(|data: &[u8]| {
    let _ = validate_header(data, data.len() as u64);
    // A header claiming a larger file than the bytes given (short read / truncated file).
    let _ = validate_header(data, (data.len() as u64).saturating_mul(3) + 1);

    let dir = std::env::temp_dir().join(format!("fairlock-fuzz-header-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.lock", N.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&path, data).unwrap();
    let foreign = !data.is_empty()
        && !(data.len() >= 8 && (&data[..8] == b"FAIRLOCK" || &data[..8] == b"FAIRLOC?" || &data[..8] == b"FAIRLOC!"));
    if let Ok(lock) = FairLock::open(&path) {
        // A file it accepted must be usable.
        if let Ok(g) = lock.try_lock() {
            drop(g);
        }
    }
    // As a file of named locks: garbage in its header, table or records never panics.
    if let Ok(lock) = FairLock::options().name("key").open(&path) {
        if let Ok(g) = lock.try_lock() {
            drop(g);
        }
    }
    let _ = fairlock::inspect(&path);
    if foreign {
        let after = std::fs::read(&path).unwrap();
        assert!(after == data, "a foreign file was modified");
    }
    let _ = std::fs::remove_file(&path);
});
