//! The shared kinds (issue 12): `FairRwLock` against a process-shared `pthread_rwlock_t` (in a
//! `MAP_SHARED` mapping of a file, glibc's default kind) and `flock(2)` with `LOCK_SH` /
//! `LOCK_EX`, in a reader-heavy (90 % reads) and a writer-heavy (90 % writes) mix; and
//! `FairSemaphore` against a POSIX named semaphore (`sem_open`). Threads, each with its own
//! handle (its own open file description for `flock`): every peer here works the same way
//! between processes.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};

use crate::Ctx;
use crate::competitors::FloorLock;
use crate::util::{Shm, busy_until, median, now_ns, ns, quantile, rate, ratio_table, table};

/// Whether the peer named `slug` runs: `LOCKBENCH_KINDS` (see the contended scenario), when
/// set, names the ones that do (`fair`, `pthread`, `flock`, `posix`, `floor`), for a run short
/// enough to trace.
fn runs(slug: &str) -> bool {
    std::env::var("LOCKBENCH_KINDS").map_or(true, |l| l.split(',').any(|x| x.trim() == slug))
}

/// A reader/writer lock under test; one value per thread.
trait RwPeer: Send + Sync + Sized + 'static {
    const NAME: &'static str;
    fn create(path: &Path) -> Self;
    fn handle(&self) -> Self;
    /// Runs `f` holding the lock; the grant's fencing token if the lock has one.
    fn with(&self, write: bool, f: &mut dyn FnMut()) -> Option<u64>;
}

struct FairRw(Arc<fairlock::FairRwLock>);

impl RwPeer for FairRw {
    const NAME: &'static str = "fairlock FairRwLock";
    fn create(path: &Path) -> Self {
        let _ = std::fs::remove_file(path);
        FairRw(Arc::new(fairlock::FairRwLock::open(path).expect("open")))
    }
    fn handle(&self) -> Self {
        FairRw(Arc::clone(&self.0))
    }
    fn with(&self, write: bool, f: &mut dyn FnMut()) -> Option<u64> {
        if write {
            let g = self.0.write().expect("write");
            f();
            Some(g.token())
        } else {
            let g = self.0.read().expect("read");
            f();
            Some(g.token())
        }
    }
}

struct RwMap {
    ptr: *mut libc::pthread_rwlock_t,
    len: usize,
}

// SAFETY: the mapping is only used through pthread_rwlock_* calls, which are thread-safe.
unsafe impl Send for RwMap {}
// SAFETY: as above.
unsafe impl Sync for RwMap {}

impl Drop for RwMap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `create`; no handle uses it any more.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// `pthread_rwlock_t` with `PTHREAD_PROCESS_SHARED` in a `MAP_SHARED` file mapping.
struct PthreadRw(Arc<RwMap>);

impl RwPeer for PthreadRw {
    const NAME: &'static str = "pthread_rwlock (shared)";
    fn create(path: &Path) -> Self {
        let _ = std::fs::remove_file(path);
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .expect("open");
        let len = std::mem::size_of::<libc::pthread_rwlock_t>().max(64);
        file.set_len(len as u64).expect("set_len");
        // SAFETY: maps `len` bytes of a file that long, shared; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        let ptr = ptr.cast::<libc::pthread_rwlock_t>();
        // SAFETY: `attr` is initialised before use and destroyed after; `ptr` is a fresh,
        // page-aligned, writable pthread_rwlock_t nobody uses yet.
        unsafe {
            let mut attr: libc::pthread_rwlockattr_t = std::mem::zeroed();
            assert_eq!(libc::pthread_rwlockattr_init(&mut attr), 0);
            assert_eq!(
                libc::pthread_rwlockattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED),
                0
            );
            assert_eq!(libc::pthread_rwlock_init(ptr, &attr), 0);
            libc::pthread_rwlockattr_destroy(&mut attr);
        }
        PthreadRw(Arc::new(RwMap { ptr, len }))
    }
    fn handle(&self) -> Self {
        PthreadRw(Arc::clone(&self.0))
    }
    fn with(&self, write: bool, f: &mut dyn FnMut()) -> Option<u64> {
        let l = self.0.ptr;
        // SAFETY: `l` is an initialised process-shared rwlock in a live mapping.
        let rc = unsafe {
            if write {
                libc::pthread_rwlock_wrlock(l)
            } else {
                libc::pthread_rwlock_rdlock(l)
            }
        };
        assert_eq!(rc, 0);
        f();
        // SAFETY: we hold `l`.
        unsafe { libc::pthread_rwlock_unlock(l) };
        None
    }
}

/// `flock(2)`: `LOCK_SH` for reads, `LOCK_EX` for writes, one open file description per
/// handle.
struct FlockRw(File, std::path::PathBuf);

impl RwPeer for FlockRw {
    const NAME: &'static str = "flock -s/-x";
    fn create(path: &Path) -> Self {
        let _ = std::fs::remove_file(path);
        let f = File::create(path).expect("create");
        FlockRw(f, path.to_path_buf())
    }
    fn handle(&self) -> Self {
        FlockRw(File::open(&self.1).expect("open"), self.1.clone())
    }
    fn with(&self, write: bool, f: &mut dyn FnMut()) -> Option<u64> {
        let op = if write { libc::LOCK_EX } else { libc::LOCK_SH };
        // SAFETY: flock on our own open descriptor.
        assert_eq!(unsafe { libc::flock(self.0.as_raw_fd(), op) }, 0);
        f();
        // SAFETY: as above.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
        None
    }
}

/// One acquisition: arrival, grant, release stamps and whether it wrote.
#[derive(Clone, Copy)]
struct Op {
    arrive: u64,
    acquire: u64,
    write: bool,
    /// The grant's token (fairlock), `u64::MAX` without one.
    token: u64,
}

/// The figures of one trial.
struct Figures {
    ops: f64,
    read_waits: Vec<u64>,
    write_waits: Vec<u64>,
    /// Acquisitions granted while an earlier arrival they conflict with still waited (a read
    /// past an earlier write, a write past anything earlier). Concurrent readers are not
    /// ordered among themselves (their stamps race after a joint grant), so reads passing
    /// reads are not counted.
    out_of_order: u64,
    /// With tokens (fairlock, whose tokens follow the grant order): acquisitions whose ticket
    /// came after that of a later arrival — the race between taking the arrival stamp and
    /// taking the ticket, the only way an arrival can be served late. `None` without tokens.
    token_order: Option<u64>,
    most_inside: u64,
    acquisitions: u64,
}

fn figures(logs: &[Vec<Op>], start: u64, end: u64, most_inside: u64) -> Figures {
    let mut all: Vec<Op> = logs.iter().flatten().copied().collect();
    all.sort_unstable_by_key(|o| o.acquire);
    // Suffix minima of the arrival stamps of later grants: of writes, and of everyone.
    let n = all.len();
    let (mut later_write, mut later_any) = (vec![u64::MAX; n + 1], vec![u64::MAX; n + 1]);
    for i in (0..n).rev() {
        later_any[i] = later_any[i + 1].min(all[i].arrive);
        later_write[i] = later_write[i + 1].min(if all[i].write {
            all[i].arrive
        } else {
            u64::MAX
        });
    }
    let token_order = all.iter().all(|o| o.token != u64::MAX).then(|| {
        let mut by_token: Vec<&Op> = all
            .iter()
            .filter(|o| o.acquire >= start && o.acquire < end)
            .collect();
        by_token.sort_unstable_by_key(|o| o.token);
        let mut later_min = u64::MAX;
        let mut n = 0u64;
        for o in by_token.iter().rev() {
            n += u64::from(later_min < o.arrive);
            later_min = later_min.min(o.arrive);
        }
        n
    });
    let mut f = Figures {
        ops: 0.0,
        read_waits: Vec::new(),
        write_waits: Vec::new(),
        out_of_order: 0,
        token_order,
        most_inside,
        acquisitions: 0,
    };
    for (i, o) in all.iter().enumerate() {
        if o.acquire < start || o.acquire >= end {
            continue;
        }
        f.acquisitions += 1;
        let wait = o.acquire - o.arrive;
        let passed = if o.write {
            later_any[i + 1] < o.arrive
        } else {
            later_write[i + 1] < o.arrive
        };
        f.out_of_order += u64::from(passed);
        if o.write {
            f.write_waits.push(wait);
        } else {
            f.read_waits.push(wait);
        }
    }
    f.read_waits.sort_unstable();
    f.write_waits.sort_unstable();
    f.ops = f.acquisitions as f64 / ((end - start) as f64 / 1e9);
    f
}

/// `threads` threads, each with its own handle from `handle`, for the plan's contended time:
/// each op a write with probability `write_pct` % (0 for a semaphore), held for `cs` ns
/// through `with(handle, write, section)`, which returns the grant's token if the lock has one.
fn trial<H: Send + 'static>(
    ctx: &Ctx,
    threads: usize,
    write_pct: u64,
    cs: u64,
    mut handle: impl FnMut() -> H,
    with: fn(&H, bool, &mut dyn FnMut()) -> Option<u64>,
) -> Figures {
    let inside = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let gate = Arc::new(Shm::create(&ctx.path("kinds-gate"), 4));
    let handles: Vec<_> = (0..threads as u64)
        .map(|t| {
            let (h, gate, inside, most) = (handle(), gate.clone(), inside.clone(), most.clone());
            std::thread::spawn(move || {
                gate.at(0).fetch_add(1, SeqCst);
                while gate.at(1).load(SeqCst) == 0 {
                    std::hint::spin_loop();
                }
                let (start, end) = (gate.at(1).load(SeqCst), gate.at(2).load(SeqCst));
                while now_ns() < start {
                    std::hint::spin_loop();
                }
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ (t + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                let mut log = Vec::with_capacity(1 << 16);
                loop {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let write = x % 100 < write_pct;
                    let arrive = now_ns();
                    if arrive >= end {
                        break;
                    }
                    let mut acquire = 0;
                    let token = with(&h, write, &mut || {
                        acquire = now_ns();
                        let n = inside.fetch_add(1, SeqCst) + 1;
                        most.fetch_max(n, SeqCst);
                        busy_until(acquire + cs);
                        inside.fetch_sub(1, SeqCst);
                    });
                    log.push(Op {
                        arrive,
                        acquire,
                        write,
                        token: token.unwrap_or(u64::MAX),
                    });
                }
                log
            })
        })
        .collect();
    while gate.at(0).load(SeqCst) < threads as u64 {
        std::thread::yield_now();
    }
    let start = now_ns() + 2_000_000;
    let end = start + ctx.plan.contended_ns;
    gate.at(2).store(end, SeqCst);
    gate.at(1).store(start, SeqCst);
    let logs: Vec<Vec<Op>> = handles
        .into_iter()
        .map(|h| h.join().expect("thread"))
        .collect();
    figures(&logs, start, end, most.load(SeqCst))
}

/// A reader/writer mix on peer `P`.
fn rw_trial<P: RwPeer>(ctx: &Ctx, threads: usize, write_pct: u64, cs: u64) -> Figures {
    let path = ctx.path(&format!("rw-{}", P::NAME.split(' ').next().unwrap_or("x")));
    let lock = P::create(&path);
    trial(
        ctx,
        threads,
        write_pct,
        cs,
        || lock.handle(),
        |h, write, f| h.with(write, f),
    )
}

fn waits(v: &[Vec<u64>]) -> String {
    let p = |q: f64| median(&v.iter().map(|w| quantile(w, q) as f64).collect::<Vec<_>>());
    let max = v
        .iter()
        .filter_map(|w| w.last().copied())
        .max()
        .unwrap_or(0);
    format!("{} / {} / {}", ns(p(0.5)), ns(p(0.99)), ns(max as f64))
}

fn rw_row(name: &str, fs: &[Figures]) -> (f64, f64, Vec<String>) {
    let ops = median(&fs.iter().map(|f| f.ops).collect::<Vec<_>>());
    let reads: Vec<Vec<u64>> = fs.iter().map(|f| f.read_waits.clone()).collect();
    let writes: Vec<Vec<u64>> = fs.iter().map(|f| f.write_waits.clone()).collect();
    let longest = fs
        .iter()
        .flat_map(|f| [f.read_waits.last(), f.write_waits.last()])
        .flatten()
        .copied()
        .max()
        .unwrap_or(0) as f64;
    let acq: u64 = fs.iter().map(|f| f.acquisitions).sum();
    let ooo: u64 = fs.iter().map(|f| f.out_of_order).sum();
    let most = fs.iter().map(|f| f.most_inside).max().unwrap_or(0);
    let by_token = if fs.iter().all(|f| f.token_order.is_some()) {
        fs.iter()
            .filter_map(|f| f.token_order)
            .sum::<u64>()
            .to_string()
    } else {
        "–".into()
    };
    (
        ops,
        longest,
        vec![
            name.into(),
            rate(ops),
            waits(&reads),
            waits(&writes),
            format!("{ooo} ({:.2}%)", 100.0 * ooo as f64 / (acq as f64).max(1.0)),
            by_token,
            most.to_string(),
        ],
    )
}

/// The reader/writer mixes.
pub fn rw(ctx: &Ctx) {
    const THREADS: usize = 4;
    const CS: u64 = 2_000;
    println!(
        "## Reader/writer mixes ({THREADS} threads, {} µs sections)\n",
        CS / 1000
    );
    println!(
        "Each thread loops: pick read or write at random, wait, hold {} µs busy, release. Waits are \
         arrival → grant; *out of order* counts grants made while an earlier arrival they conflict \
         with still waited (a read past an earlier write, a write past anything earlier). \
         glibc's default rwlock prefers readers.\n",
        CS / 1000
    );
    for (label, write_pct) in [
        ("reader-heavy (90 % reads)", 10u64),
        ("writer-heavy (90 % writes)", 90),
    ] {
        let mut results: [Vec<Figures>; 4] = Default::default();
        for r in 0..ctx.plan.rounds {
            let mut order = [0usize, 1, 2, 3];
            if r % 2 == 1 {
                order.reverse();
            }
            for k in order {
                if !runs(["fair", "pthread", "flock", "floor"][k]) {
                    continue;
                }
                let f = match k {
                    0 => rw_trial::<FairRw>(ctx, THREADS, write_pct, CS),
                    1 => rw_trial::<PthreadRw>(ctx, THREADS, write_pct, CS),
                    2 => rw_trial::<FlockRw>(ctx, THREADS, write_pct, CS),
                    _ => rw_trial::<FloorRw>(ctx, THREADS, write_pct, CS),
                };
                results[k].push(f);
            }
        }
        let (names, results): (Vec<&str>, Vec<&Vec<Figures>>) =
            [FairRw::NAME, PthreadRw::NAME, FlockRw::NAME, FloorRw::NAME]
                .into_iter()
                .zip(results.iter())
                .filter(|(_, fs)| !fs.is_empty())
                .unzip();
        let rows: Vec<(f64, f64, Vec<String>)> = names
            .iter()
            .zip(results)
            .map(|(n, fs)| rw_row(n, fs))
            .collect();
        println!("### {label}\n");
        let head: Vec<String> = [
            "lock",
            "ops/s",
            "read wait p50 / p99 / max",
            "write wait p50 / p99 / max",
            "out of order",
            "ticket after a later arrival",
            "most inside at once",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        println!(
            "{}",
            table(&head, &rows.iter().map(|r| r.2.clone()).collect::<Vec<_>>())
        );
        let ops: Vec<f64> = rows.iter().map(|r| r.0).collect();
        let longest: Vec<f64> = rows.iter().map(|r| r.1).collect();
        println!("{}", ratio_table(&names, &ops, "ops/s"));
        println!("{}", ratio_table(&names, &longest, "longest wait"));
    }
}

/// A counting semaphore under test; one value per thread.
trait SemPeer: Send + Sync + Sized + 'static {
    const NAME: &'static str;
    fn create(path: &Path, permits: u32) -> Self;
    fn handle(&self) -> Self;
    fn with(&self, f: &mut dyn FnMut()) -> Option<u64>;
}

struct FairSem(Arc<fairlock::FairSemaphore>);

impl SemPeer for FairSem {
    const NAME: &'static str = "fairlock FairSemaphore";
    fn create(path: &Path, permits: u32) -> Self {
        let _ = std::fs::remove_file(path);
        FairSem(Arc::new(
            fairlock::FairSemaphore::open(path, permits).expect("open"),
        ))
    }
    fn handle(&self) -> Self {
        FairSem(Arc::clone(&self.0))
    }
    fn with(&self, f: &mut dyn FnMut()) -> Option<u64> {
        let p = self.0.acquire().expect("acquire");
        f();
        Some(p.token())
    }
}

struct SemPtr(*mut libc::sem_t);
// SAFETY: sem_wait/sem_post are thread-safe on a named semaphore.
unsafe impl Send for SemPtr {}
// SAFETY: as above.
unsafe impl Sync for SemPtr {}

/// A POSIX named semaphore (`sem_open`, in /dev/shm), unlinked when the last handle goes.
struct PosixSem(Arc<SemPtr>, std::ffi::CString);

impl Drop for PosixSem {
    fn drop(&mut self) {
        if Arc::strong_count(&self.0) == 1 {
            // SAFETY: the last handle: close our reference and remove the name.
            unsafe {
                libc::sem_close(self.0.0);
                libc::sem_unlink(self.1.as_ptr());
            }
        }
    }
}

impl SemPeer for PosixSem {
    const NAME: &'static str = "POSIX sem_open";
    fn create(_path: &Path, permits: u32) -> Self {
        let name = std::ffi::CString::new(format!("/lockbench-{}", std::process::id())).unwrap();
        // SAFETY: a NUL-terminated name; O_CREAT with mode and value as sem_open requires.
        let s = unsafe {
            libc::sem_unlink(name.as_ptr());
            libc::sem_open(name.as_ptr(), libc::O_CREAT | libc::O_EXCL, 0o600, permits)
        };
        assert_ne!(s, libc::SEM_FAILED, "sem_open");
        PosixSem(Arc::new(SemPtr(s)), name)
    }
    fn handle(&self) -> Self {
        PosixSem(Arc::clone(&self.0), self.1.clone())
    }
    fn with(&self, f: &mut dyn FnMut()) -> Option<u64> {
        // SAFETY: a live named semaphore.
        while unsafe { libc::sem_wait(self.0.0) } != 0 {}
        f();
        // SAFETY: as above.
        unsafe { libc::sem_post(self.0.0) };
        None
    }
}

/// The floor of a strictly FIFO semaphore whose waiters sleep (`competitors::FloorLock`: one
/// grant per release, in ticket order, through a futex waiting array; no spin, no
/// robustness), as the contended scenario's `FIFO futex floor`.
struct FloorSem(Arc<FloorLock>);

impl SemPeer for FloorSem {
    const NAME: &'static str = "FIFO futex floor";
    fn create(path: &Path, permits: u32) -> Self {
        FloorSem(Arc::new(FloorLock::create(path, permits)))
    }
    fn handle(&self) -> Self {
        FloorSem(Arc::clone(&self.0))
    }
    fn with(&self, f: &mut dyn FnMut()) -> Option<u64> {
        let t = self.0.acquire();
        f();
        self.0.release();
        Some(u64::from(t))
    }
}

/// The floor of a strictly FIFO lock whose waiters sleep, as a reader/writer lock's peer: the
/// floor semaphore with one permit, reads taken as writes (no batching of readers).
struct FloorRw(FloorSem);

impl RwPeer for FloorRw {
    const NAME: &'static str = "FIFO futex floor (exclusive)";
    fn create(path: &Path) -> Self {
        FloorRw(FloorSem::create(path, 1))
    }
    fn handle(&self) -> Self {
        FloorRw(self.0.handle())
    }
    fn with(&self, _write: bool, f: &mut dyn FnMut()) -> Option<u64> {
        self.0.with(f)
    }
}

/// The semaphore on peer `P`: every acquisition a "write" for the order check (a permit holder
/// granted while an earlier arrival still waits passed it).
fn sem_trial<P: SemPeer>(ctx: &Ctx, threads: usize, permits: u32, cs: u64) -> Figures {
    let lock = P::create(&ctx.path("sem"), permits);
    trial(ctx, threads, 100, cs, || lock.handle(), |h, _, f| h.with(f))
}

/// The semaphore.
pub fn semaphore(ctx: &Ctx) {
    const THREADS: usize = 6;
    const PERMITS: u32 = 2;
    const CS: u64 = 20_000;
    println!(
        "## Semaphore ({THREADS} threads, {PERMITS} permits, {} µs sections)\n",
        CS / 1000
    );
    println!(
        "*Out of order*: acquisitions whose grant stamp comes before that of an earlier arrival. \
         With two holders at a time this also counts two grants made in order whose threads \
         woke in the other order (6 threads on the CPUs), so for fairlock the token column, \
         which follows the grant order itself, is the measure.\n"
    );
    let mut results: [Vec<Figures>; 3] = Default::default();
    for r in 0..ctx.plan.rounds {
        let order = if r % 2 == 0 {
            [0usize, 1, 2]
        } else {
            [2, 1, 0]
        };
        for k in order {
            if !runs(["fair", "posix", "floor"][k]) {
                continue;
            }
            let f = match k {
                0 => sem_trial::<FairSem>(ctx, THREADS, PERMITS, CS),
                1 => sem_trial::<PosixSem>(ctx, THREADS, PERMITS, CS),
                _ => sem_trial::<FloorSem>(ctx, THREADS, PERMITS, CS),
            };
            results[k].push(f);
        }
    }
    let (names, results): (Vec<&str>, Vec<&Vec<Figures>>) =
        [FairSem::NAME, PosixSem::NAME, FloorSem::NAME]
            .into_iter()
            .zip(results.iter())
            .filter(|(_, fs)| !fs.is_empty())
            .unzip();
    let head: Vec<String> = [
        "lock",
        "ops/s",
        "wait p50 / p99 / max",
        "out of order",
        "ticket after a later arrival",
        "most inside at once",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut ops = Vec::new();
    let mut longest = Vec::new();
    let rows: Vec<Vec<String>> = names
        .iter()
        .zip(results.iter())
        .map(|(n, fs)| {
            let (o, l, row) = rw_row(n, fs);
            ops.push(o);
            longest.push(l);
            let mut cells = row;
            cells.remove(2); // the read waits: a semaphore's acquisitions are all "writes"
            cells
        })
        .collect();
    println!("{}", table(&head, &rows));
    println!("{}", ratio_table(&names, &ops, "ops/s"));
    println!("{}", ratio_table(&names, &longest, "longest wait"));
}

/// One thread: `f` (one acquire and release) in a loop for `dur` ns; ns per call.
fn per_call(dur: u64, f: &mut dyn FnMut()) -> f64 {
    for _ in 0..10_000 {
        f();
    }
    let start = now_ns();
    let mut n = 0u64;
    loop {
        for _ in 0..1000 {
            f();
        }
        n += 1000;
        let t = now_ns();
        if t - start >= dur {
            return (t - start) as f64 / n as f64;
        }
    }
}

/// Uncontended shared kinds: one thread reads (or writes, or takes a permit) and releases, on
/// `FairRwLock` and `FairSemaphore` and their peers, interleaved rounds (ABBA).
pub fn uncontended_shared(ctx: &Ctx) {
    eprintln!("uncontended shared kinds ...");
    let rw = FairRw::create(&ctx.path("us-fair-rw"));
    let prw = PthreadRw::create(&ctx.path("us-pthread-rw"));
    let sem = FairSem::create(&ctx.path("us-fair-sem"), 2);
    let psem = PosixSem::create(&ctx.path("us-posix-sem"), 2);
    let names = [
        "fairlock read",
        "fairlock write",
        "pthread_rwlock read",
        "pthread_rwlock write",
        "fairlock FairSemaphore(2)",
        "POSIX sem_open(2)",
    ];
    let mut res: Vec<Vec<f64>> = vec![Vec::new(); names.len()];
    let dur = ctx.plan.uncontended_ns;
    let rounds = ctx.plan.rounds * 2;
    for r in 0..rounds {
        for k in crate::order(&[0usize, 1, 2, 3, 4, 5], r) {
            let mut nothing = || {};
            let v = match k {
                0 => per_call(dur, &mut || {
                    let _ = rw.with(false, &mut nothing);
                }),
                1 => per_call(dur, &mut || {
                    let _ = rw.with(true, &mut nothing);
                }),
                2 => per_call(dur, &mut || {
                    let _ = prw.with(false, &mut nothing);
                }),
                3 => per_call(dur, &mut || {
                    let _ = prw.with(true, &mut nothing);
                }),
                4 => per_call(dur, &mut || {
                    let _ = sem.with(&mut nothing);
                }),
                _ => per_call(dur, &mut || {
                    let _ = psem.with(&mut nothing);
                }),
            };
            res[k].push(v);
        }
    }
    let med: Vec<f64> = res.iter().map(|v| median(v)).collect();
    println!("## Uncontended shared kinds (one thread)\n");
    println!(
        "Median of {rounds} interleaved rounds (ABBA) of {} ms each; min and max of the rounds \
         in brackets.\n",
        dur / 1_000_000
    );
    let rows: Vec<Vec<String>> = names
        .iter()
        .zip(&res)
        .zip(&med)
        .map(|((n, v), m)| {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(0.0, f64::max);
            vec![
                n.to_string(),
                format!("{m:.1} ns"),
                format!("[{lo:.1} – {hi:.1}]"),
            ]
        })
        .collect();
    let head: Vec<String> = ["competitor", "ns / (acquire + release)", "range"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    println!("{}", table(&head, &rows));
    println!("{}", ratio_table(&names, &med, "time"));
}
