//! `lockbench names`: a lock per key (issue 12, named locks). One thread takes the lock of a
//! random key among 10,000, as a service locking "user-N" per request does, three ways:
//! fairlock's named locks in one file, fairlock with one file per key, and `flock(2)` with one
//! file per key (the lock-file sprawl named locks replace). Two patterns: the handle opened for
//! each operation (open, lock, unlock, close) and kept open (lock, unlock). Interleaved rounds;
//! the files' disk use at the end.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use fairlock::FairLock;

use crate::Ctx;
use crate::util::{median, now_ns, ns, ratio_table, table};

const KEYS: usize = 10_000;
/// Keys kept open in the kept-open pattern: a process can have at most 1,024 lock *files* open
/// (`TooManyOpenFiles`: the fork handler's table of beacon descriptors), so a file per key
/// cannot keep 10,000 open at all; named locks can (one file).
const KEPT: usize = 900;

/// A deterministic stream of keys (xorshift).
struct Keys(u64);

impl Keys {
    fn next(&mut self) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % KEYS as u64) as usize
    }
}

/// One way of locking key `k`.
trait PerKey {
    const NAME: &'static str;
    type Handle;
    fn open(&self, k: usize) -> Self::Handle;
    fn lock_unlock(&self, h: &Self::Handle);
}

struct Named(PathBuf);
struct FilePerKey(PathBuf);
struct FlockPerKey(PathBuf);

impl PerKey for Named {
    const NAME: &'static str = "fairlock, named locks in one file";
    type Handle = FairLock;
    fn open(&self, k: usize) -> FairLock {
        FairLock::options()
            .name(format!("user-{k}"))
            .open(&self.0)
            .expect("open a name")
    }
    fn lock_unlock(&self, h: &FairLock) {
        drop(h.lock().expect("lock"));
    }
}

impl PerKey for FilePerKey {
    const NAME: &'static str = "fairlock, a file per key";
    type Handle = FairLock;
    fn open(&self, k: usize) -> FairLock {
        FairLock::open(self.0.join(format!("user-{k}.lock"))).expect("open a file")
    }
    fn lock_unlock(&self, h: &FairLock) {
        drop(h.lock().expect("lock"));
    }
}

impl PerKey for FlockPerKey {
    const NAME: &'static str = "flock(2), a file per key";
    type Handle = File;
    fn open(&self, k: usize) -> File {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.0.join(format!("user-{k}.flock")))
            .expect("open a file")
    }
    fn lock_unlock(&self, h: &File) {
        // SAFETY: flock on a descriptor open for the call.
        unsafe {
            assert_eq!(libc::flock(h.as_raw_fd(), libc::LOCK_EX), 0);
            assert_eq!(libc::flock(h.as_raw_fd(), libc::LOCK_UN), 0);
        }
    }
}

/// ns per operation over `budget_ns`: the handle opened for each (`reopen`, any of the
/// `KEYS`) or kept open (one of the first `KEPT`).
fn measure<P: PerKey>(p: &P, kept: &[P::Handle], reopen: bool, budget_ns: u64) -> f64 {
    let mut keys = Keys(0x9E37_79B9_7F4A_7C15);
    let start = now_ns();
    let mut ops = 0u64;
    while now_ns() - start < budget_ns {
        for _ in 0..64 {
            let k = keys.next();
            if reopen {
                let h = p.open(k);
                p.lock_unlock(&h);
            } else {
                p.lock_unlock(&kept[k % kept.len()]);
            }
            ops += 1;
        }
    }
    (now_ns() - start) as f64 / ops as f64
}

/// Bytes the files under `dir` take on disk (allocated blocks), and their apparent size.
fn disk_use(dir: &Path) -> (u64, u64) {
    let mut used = (0, 0);
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if let Ok(m) = e.metadata() {
            used.0 += m.blocks() * 512;
            used.1 += m.len();
        }
    }
    used
}

pub fn names(ctx: &Ctx) {
    let base = ctx.dir.join("names");
    let dirs = [base.join("named"), base.join("files"), base.join("flock")];
    for d in &dirs {
        std::fs::create_dir_all(d).expect("scratch dir");
    }
    let named = Named(dirs[0].join("users.lock"));
    let files = FilePerKey(dirs[1].clone());
    let flocks = FlockPerKey(dirs[2].clone());
    // Every key's lock exists before the rounds (created on first use, as in a service that
    // has been running), and stays open for the kept-open pattern.
    let t0 = now_ns();
    for k in 0..KEYS {
        drop(named.open(k));
    }
    let create_named = now_ns() - t0;
    let t0 = now_ns();
    for k in 0..KEYS {
        drop(files.open(k));
    }
    let create_files = now_ns() - t0;
    for k in 0..KEYS {
        drop(flocks.open(k));
    }
    let kept_named: Vec<FairLock> = (0..KEPT).map(|k| named.open(k)).collect();
    let kept_files: Vec<FairLock> = (0..KEPT).map(|k| files.open(k)).collect();
    let kept_flock: Vec<File> = (0..KEPT).map(|k| flocks.open(k)).collect();
    let budget = ctx.plan.uncontended_ns;
    let (mut reopen, mut kept) = (vec![vec![]; 3], vec![vec![]; 3]);
    for _ in 0..ctx.plan.rounds {
        reopen[0].push(measure(&named, &kept_named, true, budget));
        reopen[1].push(measure(&files, &kept_files, true, budget));
        reopen[2].push(measure(&flocks, &kept_flock, true, budget));
        kept[0].push(measure(&named, &kept_named, false, budget));
        kept[1].push(measure(&files, &kept_files, false, budget));
        kept[2].push(measure(&flocks, &kept_flock, false, budget));
    }
    let names = [Named::NAME, FilePerKey::NAME, FlockPerKey::NAME];
    println!("## A lock per key: {KEYS} keys, one thread, random keys\n");
    println!(
        "Each operation locks and unlocks the lock of a random key; *reopened*: among {KEYS} keys, the handle opened for the operation and closed after it (open, lock, unlock, close); *kept open*: among {KEPT} keys whose handles stay open (a process can have at most 1,024 lock files open, so a file per key cannot keep {KEYS}; named locks can). Median of {} rounds of {:.1} s each.\n",
        ctx.plan.rounds,
        budget as f64 / 1e9
    );
    let med = |v: &Vec<f64>| median(v);
    let rows: Vec<Vec<String>> = (0..3)
        .map(|i| {
            let (d_used, d_len) = disk_use(&dirs[i]);
            vec![
                names[i].to_string(),
                ns(med(&reopen[i])),
                ns(med(&kept[i])),
                format!(
                    "{:.1} MB ({:.1} MB apparent)",
                    d_used as f64 / 1e6,
                    d_len as f64 / 1e6
                ),
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &[
                "lock".into(),
                "reopened: ns per op".into(),
                "kept open: ns per op".into(),
                "files on disk".into(),
            ],
            &rows
        )
    );
    let reopened: Vec<f64> = reopen.iter().map(med).collect();
    let kept_open: Vec<f64> = kept.iter().map(med).collect();
    println!("{}", ratio_table(&names, &reopened, "reopened"));
    println!("{}", ratio_table(&names, &kept_open, "kept open"));
    println!(
        "Creating the {KEYS} locks: named {:.2} s, a file per key {:.2} s.\n",
        create_named as f64 / 1e9,
        create_files as f64 / 1e9
    );
    drop((kept_named, kept_files, kept_flock));
    let _ = std::fs::remove_dir_all(&base);
}
