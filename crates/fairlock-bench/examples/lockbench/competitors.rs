//! The competitors: one small trait, implemented by every lock the harness measures.
//!
//! Shared with `benches/uncontended.rs` (included there with `#[path]`), so both measure the
//! very same code.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the harness learns about one acquisition.
#[derive(Clone, Copy, Debug, Default)]
pub struct Acq {
    /// The fencing token, for locks that have one (fairlock).
    pub token: Option<u64>,
    /// The previous holder died (robust pthread `EOWNERDEAD`, fairlock `owner_died`).
    pub died: bool,
    /// How often the waiter was overtaken (fairlock with `Fairness::Bounded`; 0 otherwise).
    pub overtaken: u32,
}

/// A lock under test. A value is one *handle*: a worker thread gets its own from
/// [`Competitor::handle`], a worker process from [`Competitor::attach`].
pub trait Competitor: Send + Sync + Sized + 'static {
    /// Name in the tables.
    const NAME: &'static str;
    /// Whether it works between processes.
    const PROCESSES: bool;
    /// Creates a fresh, unlocked lock backed by `path` (which may be ignored) and a handle.
    fn create(path: &Path) -> Self;
    /// A handle to the lock created at `path` by another process.
    fn attach(path: &Path) -> Self {
        assert!(
            Self::PROCESSES,
            "{} does not work across processes",
            Self::NAME
        );
        Self::create(path)
    }
    /// Another handle to the same lock, for another thread of this process.
    fn handle(&self) -> Self;
    /// Runs `f` holding the lock.
    fn with<R>(&self, f: impl FnOnce(Acq) -> R) -> R;
}

fn open_rw(path: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

fn fresh(path: &Path) {
    let _ = std::fs::remove_file(path);
}

// ---------------------------------------------------------------------------------------------
// fairlock

/// `fairlock::FairLock` with its default spin (50 µs).
pub struct Fair(Arc<fairlock::FairLock>);

/// The bypass bound of [`FairBounded`]: 511 (the largest), or `LOCKBENCH_BOUND` if set (to
/// measure how throughput grows with the bound).
pub fn bound() -> u32 {
    std::env::var("LOCKBENCH_BOUND")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(511)
}

/// `fairlock::FairLock` with `Fairness::Bounded(bound())`: running threads may barge ahead of
/// a granted waiter that is not yet running, but no waiter is overtaken more than `bound()`
/// times.
pub struct FairBounded(Arc<fairlock::FairLock>);

impl Competitor for FairBounded {
    const NAME: &'static str = "fairlock bounded";
    const PROCESSES: bool = true;
    fn create(path: &Path) -> Self {
        fresh(path);
        Self::attach(path)
    }
    fn attach(path: &Path) -> Self {
        let l = fairlock::FairLock::options()
            .fairness(fairlock::Fairness::Bounded(bound()))
            .open(path)
            .expect("fairlock open");
        FairBounded(Arc::new(l))
    }
    fn handle(&self) -> Self {
        FairBounded(Arc::clone(&self.0))
    }
    #[inline]
    fn with<R>(&self, f: impl FnOnce(Acq) -> R) -> R {
        let g = self.0.lock().expect("fairlock lock");
        let r = f(Acq {
            token: Some(g.token()),
            died: g.owner_died(),
            overtaken: g.overtaken(),
        });
        drop(g);
        r
    }
}

/// `fairlock::FairLock` opened with `spin(0)`: waiters park at once.
pub struct FairParked(Arc<fairlock::FairLock>);

/// `fairlock::FairRLock` (re-entrant), default options.
pub struct FairR(Arc<fairlock::FairRLock>);

impl Competitor for Fair {
    const NAME: &'static str = "fairlock";
    const PROCESSES: bool = true;
    fn create(path: &Path) -> Self {
        fresh(path);
        Self::attach(path)
    }
    fn attach(path: &Path) -> Self {
        Fair(Arc::new(
            fairlock::FairLock::open(path).expect("fairlock open"),
        ))
    }
    fn handle(&self) -> Self {
        Fair(Arc::clone(&self.0))
    }
    #[inline]
    fn with<R>(&self, f: impl FnOnce(Acq) -> R) -> R {
        let g = self.0.lock().expect("fairlock lock");
        let r = f(Acq {
            token: Some(g.token()),
            died: g.owner_died(),
            overtaken: 0,
        });
        drop(g);
        r
    }
}

impl Competitor for FairParked {
    const NAME: &'static str = "fairlock spin=0";
    const PROCESSES: bool = true;
    fn create(path: &Path) -> Self {
        fresh(path);
        Self::attach(path)
    }
    fn attach(path: &Path) -> Self {
        let l = fairlock::FairLock::options()
            .spin(Duration::ZERO)
            .open(path)
            .expect("fairlock open");
        FairParked(Arc::new(l))
    }
    fn handle(&self) -> Self {
        FairParked(Arc::clone(&self.0))
    }
    #[inline]
    fn with<R>(&self, f: impl FnOnce(Acq) -> R) -> R {
        let g = self.0.lock().expect("fairlock lock");
        let r = f(Acq {
            token: Some(g.token()),
            died: g.owner_died(),
            overtaken: 0,
        });
        drop(g);
        r
    }
}

impl Competitor for FairR {
    const NAME: &'static str = "fairlock RLock";
    const PROCESSES: bool = true;
    fn create(path: &Path) -> Self {
        fresh(path);
        Self::attach(path)
    }
    fn attach(path: &Path) -> Self {
        FairR(Arc::new(
            fairlock::FairRLock::open(path).expect("fairlock open"),
        ))
    }
    fn handle(&self) -> Self {
        FairR(Arc::clone(&self.0))
    }
    #[inline]
    fn with<R>(&self, f: impl FnOnce(Acq) -> R) -> R {
        let g = self.0.lock().expect("fairlock lock");
        let r = f(Acq {
            token: Some(g.token()),
            died: g.owner_died(),
            overtaken: 0,
        });
        drop(g);
        r
    }
}

// ---------------------------------------------------------------------------------------------
// In-process mutexes

/// `std::sync::Mutex<()>` (threads only).
pub struct StdMutex(Arc<Mutex<()>>);

impl Competitor for StdMutex {
    const NAME: &'static str = "std Mutex";
    const PROCESSES: bool = false;
    fn create(_: &Path) -> Self {
        StdMutex(Arc::new(Mutex::new(())))
    }
    fn handle(&self) -> Self {
        StdMutex(Arc::clone(&self.0))
    }
    #[inline]
    fn with<R>(&self, f: impl FnOnce(Acq) -> R) -> R {
        let g = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let r = f(Acq::default());
        drop(g);
        r
    }
}

/// `parking_lot::Mutex<()>` (threads only).
pub struct PlMutex(Arc<parking_lot::Mutex<()>>);

impl Competitor for PlMutex {
    const NAME: &'static str = "parking_lot";
    const PROCESSES: bool = false;
    fn create(_: &Path) -> Self {
        PlMutex(Arc::new(parking_lot::Mutex::new(())))
    }
    fn handle(&self) -> Self {
        PlMutex(Arc::clone(&self.0))
    }
    #[inline]
    fn with<R>(&self, f: impl FnOnce(Acq) -> R) -> R {
        let g = self.0.lock();
        let r = f(Acq::default());
        drop(g);
        r
    }
}

// ---------------------------------------------------------------------------------------------
// Robust, process-shared pthread mutex in a MAP_SHARED mapping of a file

struct PthreadMap {
    ptr: *mut libc::pthread_mutex_t,
    len: usize,
}

// SAFETY: the mapping is only accessed through pthread_mutex_* calls, which are thread-safe.
unsafe impl Send for PthreadMap {}
// SAFETY: as above.
unsafe impl Sync for PthreadMap {}

impl PthreadMap {
    fn map(path: &Path, init: bool) -> PthreadMap {
        let file = open_rw(path);
        let len = std::mem::size_of::<libc::pthread_mutex_t>().max(64);
        if init {
            file.set_len(len as u64).expect("set_len");
        }
        // SAFETY: maps `len` bytes of a file at least that long, shared, at a kernel-chosen
        // address; the result is checked.
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
        assert_ne!(ptr, libc::MAP_FAILED, "mmap {}", path.display());
        let ptr = ptr.cast::<libc::pthread_mutex_t>();
        if init {
            // SAFETY: `attr` is initialised before use and destroyed after; `ptr` points to a
            // writable, suitably aligned (page-aligned) pthread_mutex_t that nobody uses yet.
            unsafe {
                let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
                assert_eq!(libc::pthread_mutexattr_init(&mut attr), 0);
                assert_eq!(
                    libc::pthread_mutexattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED),
                    0
                );
                assert_eq!(
                    libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST),
                    0
                );
                assert_eq!(libc::pthread_mutex_init(ptr, &attr), 0);
                libc::pthread_mutexattr_destroy(&mut attr);
            }
        }
        PthreadMap { ptr, len }
    }
}

impl Drop for PthreadMap {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`; no handle uses it any more.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A robust (`PTHREAD_MUTEX_ROBUST`), process-shared (`PTHREAD_PROCESS_SHARED`) pthread mutex
/// living in a `MAP_SHARED` mapping of a file.
pub struct Pthread(Arc<PthreadMap>);

impl Competitor for Pthread {
    const NAME: &'static str = "robust pthread";
    const PROCESSES: bool = true;
    fn create(path: &Path) -> Self {
        fresh(path);
        Pthread(Arc::new(PthreadMap::map(path, true)))
    }
    fn attach(path: &Path) -> Self {
        Pthread(Arc::new(PthreadMap::map(path, false)))
    }
    fn handle(&self) -> Self {
        Pthread(Arc::clone(&self.0))
    }
    #[inline]
    fn with<R>(&self, f: impl FnOnce(Acq) -> R) -> R {
        let m = self.0.ptr;
        // SAFETY: `m` is an initialised robust process-shared mutex in a live mapping.
        let rc = unsafe { libc::pthread_mutex_lock(m) };
        let died = match rc {
            0 => false,
            libc::EOWNERDEAD => {
                // SAFETY: we own the mutex (EOWNERDEAD); mark it consistent before unlocking.
                assert_eq!(unsafe { libc::pthread_mutex_consistent(m) }, 0);
                true
            }
            e => panic!("pthread_mutex_lock: {e}"),
        };
        let r = f(Acq {
            token: None,
            died,
            overtaken: 0,
        });
        // SAFETY: we hold `m`.
        unsafe { libc::pthread_mutex_unlock(m) };
        r
    }
}

// ---------------------------------------------------------------------------------------------
// File locks: one open file description per handle (both kinds are per-description)

/// `flock(2)` through `std::fs::File::lock` / `unlock`.
pub struct Flock(File, std::path::PathBuf);

impl Competitor for Flock {
    const NAME: &'static str = "flock";
    const PROCESSES: bool = true;
    fn create(path: &Path) -> Self {
        fresh(path);
        Self::attach(path)
    }
    fn attach(path: &Path) -> Self {
        Flock(open_rw(path), path.to_path_buf())
    }
    fn handle(&self) -> Self {
        Self::attach(&self.1)
    }
    #[inline]
    fn with<R>(&self, f: impl FnOnce(Acq) -> R) -> R {
        self.0.lock().expect("flock");
        let r = f(Acq::default());
        self.0.unlock().expect("flock unlock");
        r
    }
}

/// An OFD record lock (`F_OFD_SETLKW` write lock / `F_UNLCK`) on byte 0 of a file.
pub struct Ofd(File, std::path::PathBuf);

fn ofd(fd: &File, cmd: libc::c_int, ty: libc::c_int) {
    // SAFETY: an all-zero flock is a valid value; the fields we need are set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = ty as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = 0;
    fl.l_len = 1;
    loop {
        // SAFETY: `fl` is a valid flock for the duration of the call; l_pid is 0 as OFD
        // commands require.
        let rc = unsafe { libc::fcntl(fd.as_raw_fd(), cmd, &mut fl) };
        if rc == 0 {
            return;
        }
        let e = std::io::Error::last_os_error();
        assert_eq!(e.raw_os_error(), Some(libc::EINTR), "fcntl OFD: {e}");
    }
}

impl Competitor for Ofd {
    const NAME: &'static str = "OFD fcntl";
    const PROCESSES: bool = true;
    fn create(path: &Path) -> Self {
        fresh(path);
        Self::attach(path)
    }
    fn attach(path: &Path) -> Self {
        Ofd(open_rw(path), path.to_path_buf())
    }
    fn handle(&self) -> Self {
        Self::attach(&self.1)
    }
    #[inline]
    fn with<R>(&self, f: impl FnOnce(Acq) -> R) -> R {
        ofd(&self.0, libc::F_OFD_SETLKW, libc::F_WRLCK);
        let r = f(Acq::default());
        ofd(&self.0, libc::F_OFD_SETLK, libc::F_UNLCK);
        r
    }
}

// ---------------------------------------------------------------------------------------------
// The floor of a strict FIFO lock whose waiters sleep

/// A bare FIFO ticket lock (or, with more than one permit, a FIFO semaphore) over a waiting
/// array of futex words in a shared file mapping: a ticket from one `fetch_add`; a release
/// grants the next ticket that fits (one per release, in ticket order) by setting its slot's
/// word; a waiter `FUTEX_WAIT`s at once (no spin), and a release calls `FUTEX_WAKE` only when
/// the waiter set its word's sleep bit. No robustness, no timeouts, no leases: what a strictly
/// fair lock whose waiters sleep cannot do without — every grant wakes one particular thread —
/// and nothing else, for scale (not a lock to use: a holder that dies stops it for good).
pub struct FloorLock {
    map: memmap2::MmapMut,
    permits: u32,
}

const FLOOR_SLOTS: u32 = 64;
const FLOOR_STRIDE: usize = 64;

impl FloorLock {
    /// A fresh floor at `path` with `permits` holders at once.
    pub fn create(path: &Path, permits: u32) -> FloorLock {
        assert!((1..FLOOR_SLOTS).contains(&permits));
        fresh(path);
        let m = Self::attach(path, permits);
        for t in 0..permits {
            // Relaxed: before anyone else maps the file.
            m.slot(t)
                .store(t << 1, std::sync::atomic::Ordering::Relaxed);
        }
        m
    }

    /// The floor at `path`, made by [`FloorLock::create`].
    pub fn attach(path: &Path, permits: u32) -> FloorLock {
        let f = open_rw(path);
        f.set_len((2 + FLOOR_SLOTS as usize) as u64 * FLOOR_STRIDE as u64)
            .expect("floor size");
        // SAFETY: the file is only ever accessed through atomics in this mapping by the
        // harness's own processes; nobody truncates it while mapped (`set_len` above only
        // gives a new file its size).
        let map = unsafe { memmap2::MmapMut::map_mut(&f) }.expect("floor map");
        FloorLock { map, permits }
    }

    /// Word 0: the next ticket; 1: the releases so far; `2 + k`: slot `k`, `ticket << 1 |
    /// sleep bit`.
    fn word(&self, i: u32) -> &std::sync::atomic::AtomicU32 {
        assert!(i < 2 + FLOOR_SLOTS);
        // SAFETY: in bounds (the file has 2 + FLOOR_SLOTS strides), aligned (page-aligned
        // mapping, 64-byte stride), accessed only atomically, and the mapping lives as long as
        // `self`.
        unsafe {
            &*(self.map.as_ptr().add(i as usize * FLOOR_STRIDE)
                as *const std::sync::atomic::AtomicU32)
        }
    }

    fn slot(&self, t: u32) -> &std::sync::atomic::AtomicU32 {
        self.word(2 + t % FLOOR_SLOTS)
    }

    /// Waits for a grant; its ticket.
    pub fn acquire(&self) -> u32 {
        use std::sync::atomic::Ordering::{Acquire, Relaxed};
        // Relaxed: the ticket only orders the waiters; the grant's word carries the holders'
        // writes (below).
        let t = self.word(0).fetch_add(1, Relaxed);
        let slot = self.slot(t);
        loop {
            // Acquire: pairs with the Release swap of the release that granted `t`.
            let v = slot.load(Acquire);
            if v & !1 == t << 1 {
                return t;
            }
            // Relaxed: the sleep bit only tells the releaser to wake; the grant is read above.
            if v & 1 == 0 && slot.compare_exchange(v, v | 1, Relaxed, Relaxed).is_err() {
                continue;
            }
            fairlock_bench::futex::wait(slot, v | 1, None);
        }
    }

    /// Gives a grant back: grants the ticket `permits` after the releases so far.
    pub fn release(&self) {
        use std::sync::atomic::Ordering::{Relaxed, Release};
        let g = self
            .word(1)
            .fetch_add(1, Relaxed)
            .wrapping_add(self.permits);
        let next = self.slot(g);
        // Release: pairs with the Acquire load of ticket `g`'s waiter.
        if next.swap(g << 1, Release) & 1 != 0 {
            fairlock_bench::futex::wake(next, i32::MAX);
        }
    }
}

/// [`FloorLock`] with one permit: the contended scenarios' `FIFO futex floor`.
pub struct FifoFloor(Arc<FloorLock>);

impl Competitor for FifoFloor {
    const NAME: &'static str = "FIFO futex floor";
    const PROCESSES: bool = true;
    fn create(path: &Path) -> Self {
        FifoFloor(Arc::new(FloorLock::create(path, 1)))
    }
    fn attach(path: &Path) -> Self {
        FifoFloor(Arc::new(FloorLock::attach(path, 1)))
    }
    fn handle(&self) -> Self {
        FifoFloor(Arc::clone(&self.0))
    }
    #[inline]
    fn with<R>(&self, f: impl FnOnce(Acq) -> R) -> R {
        let t = self.0.acquire();
        let r = f(Acq {
            token: Some(u64::from(t)),
            ..Acq::default()
        });
        self.0.release();
        r
    }
}
