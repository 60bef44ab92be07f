//! The builder behind [`FairLock::options`](crate::FairLock::options).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::core::Tuning;
use crate::core::state::{DataShape, MAX_BYPASS, MAX_PERMITS, RecordKind};
use crate::error::{Error, Result};
use crate::file::CreateOptions;
use crate::raw::handle::{Asks, RawLock};
use crate::{FairLock, FairMutex, FairRLock, FairRwLock, FairSemaphore};

/// Default number of waiting-array slots of a new file: more concurrent waiters than this
/// still work, but the extra ones poll for their slot.
pub const DEFAULT_SLOTS: u32 = 256;
/// Default number of participant entries (processes that can have the file open at once).
pub const DEFAULT_PARTICIPANTS: u32 = 1024;
/// The longest lease (2^41 ms, about 69 years) the file format can express.
const MAX_LEASE_MS: u64 = (1 << 41) - 2;

/// Who may take an exclusive lock ahead of whom ([`OpenOptions::fairness`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fairness {
    /// First come, first served: every grant in arrival order (the default).
    #[default]
    Strict,
    /// A running thread that calls `lock` while the queue's next waiter has been granted the
    /// lock but has not yet taken it (it is being woken, or is not on a CPU) may take the lock
    /// ahead of it — a *barge* — but no waiter is ever overtaken more than `k` times while it
    /// waits (`1 ≤ k ≤ 511`; a hard bound, counted in the lock file, not a timer). Under
    /// oversubscription (more threads than CPUs) this keeps the lock with running threads
    /// instead of paying a wake-up per grant. Barges carry tokens between two queued grants'
    /// ([`LockGuard::token`](crate::LockGuard::token)), and each grant tells how often its
    /// waiter was overtaken ([`LockGuard::overtaken`](crate::LockGuard::overtaken)).
    ///
    /// The bound is a property of the lock, fixed when it is created (its file; for a named
    /// lock, its name's record, until the name is reclaimed): opening it with another fairness
    /// is refused with [`Error::KindMismatch`]. Only
    /// exclusive locks (`FairLock`, `FairRLock`, `FairMutex`) have it; `try_lock` never
    /// barges, nor does a grant with a lease (and nobody barges ahead of a leased grant).
    Bounded(u32),
}

impl Fairness {
    /// The bypass bound: `Some(k)` for [`Fairness::Bounded`]`(k)`, `None` for strict FIFO.
    pub fn bypass_bound(self) -> Option<u32> {
        match self {
            Fairness::Strict => None,
            Fairness::Bounded(k) => Some(k),
        }
    }

    /// The fairness a file's stored bypass bound stands for (0: strict).
    pub(crate) fn of_bound(k: u32) -> Fairness {
        match k {
            0 => Fairness::Strict,
            k => Fairness::Bounded(k),
        }
    }
}

/// Options for opening a lock file. Created by [`FairLock::options`].
///
/// ```no_run
/// use std::time::Duration;
/// let lock = fairlock::FairLock::options()
///     .lease(Duration::from_secs(30))
///     .mode(0o660)
///     .open("/run/myapp/jobs.lock")?;
/// # Ok::<(), fairlock::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct OpenOptions {
    lease: Option<Duration>,
    create: CreateOptions,
    tuning: Tuning,
    /// The lock's name in a file of named locks (`None`: the file holds one lock).
    name: Option<Arc<str>>,
    /// Whether `slots` / `participants` were set (else the defaults of the file's sort).
    slots_set: bool,
    participants_set: bool,
    /// Whether [`OpenOptions::fairness`] asked for a bypass bound.
    bounded: bool,
}

/// Records of a new file of named locks (room for 12,288 names in use before the first sweep
/// for unused ones; 58.7 MiB of sparse file with the defaults below).
pub const DEFAULT_NAME_CAPACITY: u32 = 16384;
/// Slots of each name in a new file of named locks.
pub const DEFAULT_NAMED_SLOTS: u32 = 16;
/// Participant entries of each name in a new file of named locks.
pub const DEFAULT_NAMED_PARTICIPANTS: u32 = 64;

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            lease: None,
            create: CreateOptions {
                create: true,
                mode: 0o600,
                slots: DEFAULT_SLOTS,
                participants: DEFAULT_PARTICIPANTS,
                init_wait: None,
                data: DataShape::NONE,
                data_type: "",
                kind: RecordKind::EXCLUSIVE,
                names: DEFAULT_NAME_CAPACITY,
            },
            tuning: Tuning::default(),
            name: None,
            slots_set: false,
            participants_set: false,
            bounded: false,
        }
    }
}

impl OpenOptions {
    /// The lock's fairness (see [`Fairness`]; default [`Fairness::Strict`]). A new file is
    /// created with it; an existing file must have been created with the same, or opening it
    /// fails with [`Error::KindMismatch`].
    ///
    /// ```no_run
    /// use fairlock::{FairLock, Fairness};
    /// let lock = FairLock::options().fairness(Fairness::Bounded(32)).open("/tmp/hot.lock")?;
    /// let guard = lock.lock()?; // may take the lock ahead of a waiter not yet running
    /// assert!(guard.overtaken() <= 32);
    /// # Ok::<(), fairlock::Error>(())
    /// ```
    pub fn fairness(&mut self, f: Fairness) -> &mut Self {
        self.create.kind = RecordKind::bounded(f.bypass_bound().unwrap_or(0));
        self.bounded = f.bypass_bound().is_some();
        self
    }

    /// Every grant made through this handle carries a lease of `d`: once it runs out, the next
    /// waiter may take the lock over, and the old holder's `check`, `extend` and `unlock`
    /// return [`Error::LockLost`]. Without a lease (the default) a lock is held until it is
    /// released or its holder dies.
    pub fn lease(&mut self, d: Duration) -> &mut Self {
        self.lease = Some(d);
        self
    }

    /// Permission bits of a newly created file (default `0o600`), before the umask.
    pub fn mode(&mut self, mode: u32) -> &mut Self {
        self.create.mode = mode;
        self
    }

    /// Whether to create the file if it does not exist (default `true`).
    pub fn create(&mut self, create: bool) -> &mut Self {
        self.create.create = create;
        self
    }

    /// Waiting-array slots of a newly created file: a power of two in `2..=2^20` (default 256;
    /// for a file of named locks, of each name: default 16). An existing file keeps its own.
    pub fn slots(&mut self, n: u32) -> &mut Self {
        self.create.slots = n;
        self.slots_set = true;
        self
    }

    /// Participant entries of a newly created file, `1..=4096` (default 1024; for a file of
    /// named locks, of each name: default 64). An existing file keeps its own.
    pub fn participants(&mut self, n: u32) -> &mut Self {
        self.create.participants = n;
        self.participants_set = true;
        self
    }

    /// Opens the lock named `key` (any UTF-8 up to 255 bytes) in a *file of named locks*: any
    /// number of independent locks in one file, each created on first use, FIFO and robust
    /// like a lock of its own file. Every kind can be named (`open`, `open_rlock`,
    /// `open_rwlock`, `open_semaphore`, `open_mutex`), each name its own kind. A file holds
    /// either one unnamed lock or named locks: opening one as the other is refused with
    /// [`Error::KindMismatch`]. A name nobody has open any more keeps its record (and its
    /// tokens keep rising) until the table fills up; then its space is reused.
    ///
    /// ```
    /// # let dir = std::env::temp_dir().join(format!("fairlock-doc-names-{}", std::process::id()));
    /// # std::fs::create_dir_all(&dir)?;
    /// let path = dir.join("users.lock");
    /// let alice = fairlock::FairLock::options().name("user-alice").open(&path)?;
    /// let bob = fairlock::FairLock::options().name("user-bob").open(&path)?;
    /// let _a = alice.lock()?;
    /// let _b = bob.try_lock()?; // another name: not excluded by alice's
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn name(&mut self, key: impl Into<String>) -> &mut Self {
        self.name = Some(Arc::from(key.into()));
        self
    }

    /// How many names a newly created file of named locks has room for (rounded up to a power
    /// of two; default 16,384, of which three quarters may be in use before a sweep reclaims
    /// the unused ones). An existing file keeps its own.
    pub fn name_capacity(&mut self, n: u32) -> &mut Self {
        self.create.names = n;
        self
    }

    /// How long [`OpenOptions::open`] may wait when the file still has to be initialised (it is
    /// empty, half-initialised, or from an earlier boot) and another process holds its
    /// `flock`: another fairlock initialising it (milliseconds), or a foreign program such as
    /// `flock(1)` holding the same empty file (as long as it likes). Default: wait as long as
    /// it takes. `Duration::ZERO` does not wait. A valid file is opened without this lock.
    pub fn init_timeout(&mut self, d: Duration) -> &mut Self {
        self.create.init_wait = Some(d);
        self
    }

    /// How long the next-in-line waiter spins before it parks (default 50 µs). It keeps its CPU
    /// for the first 5 µs of that, then yields it now and then (`sched_yield`), so that a
    /// process waiting for a CPU to get to the lock at all is not kept off it by spinners; in a
    /// file with a bypass bound ([`Fairness::Bounded`]) it yields from the start (a would-be
    /// barger's own spin, also at most this long, never yields).
    pub fn spin(&mut self, d: Duration) -> &mut Self {
        self.tuning.spin_ns = d.as_nanos().min(u128::from(u64::MAX)) as u64;
        self
    }

    /// How much of that spin keeps the CPU before it yields it now and then (default 5 µs;
    /// `Duration::MAX`, or anything at least [`spin`](OpenOptions::spin)'s, never yields; in a
    /// file with a bypass bound the spin yields from the start regardless). Yielding lets a
    /// process that is runnable but not yet queued get to the lock instead of waiting for the
    /// scheduler's tick: with more contenders than CPUs and critical sections of 10 µs or more,
    /// more grants per second and a lower p99 wait. Never yielding suits sections of a few
    /// microseconds or less with more threads than CPUs: measured on 2 CPUs, 4 threads with
    /// 100 ns sections made 1.4–1.7 M grants/s without yielding and 0.65–1.0 M/s with the
    /// default, and a reader/writer lock with 90 % writes of 2 µs 82–85 k/s against 51–59 k/s
    /// (`docs/BENCHMARKS.md`).
    pub fn spin_keep_cpu(&mut self, d: Duration) -> &mut Self {
        self.tuning.spin_keep_cpu_ns = d.as_nanos().min(u128::from(u64::MAX)) as u64;
        self
    }

    /// Opens (by default creating) the lock file at `path`.
    ///
    /// # Errors
    /// [`Error::NotALockFile`] for a non-empty file that is not a fairlock file (left
    /// untouched), [`Error::Corrupt`] / [`Error::Incompatible`] for a damaged or newer-format
    /// file, [`Error::InvalidPath`] for a symlink, directory, device or a file on a virtual
    /// filesystem (procfs, sysfs, ...),
    /// [`Error::InvalidOption`] for an out-of-range option, [`Error::InitLocked`] if the file
    /// must be initialised and another process holds its `flock` past
    /// [`OpenOptions::init_timeout`], [`Error::Io`] otherwise.
    pub fn open(&self, path: impl AsRef<Path>) -> Result<FairLock> {
        self.check()?;
        Ok(FairLock {
            raw: RawLock::open(
                path.as_ref(),
                self.create_options(),
                self.name_key().cloned(),
                self.asks(),
            )?,
        })
    }

    /// Like [`OpenOptions::open`], for a re-entrant [`FairRLock`].
    ///
    /// # Errors
    /// As [`OpenOptions::open`].
    pub fn open_rlock(&self, path: impl AsRef<Path>) -> Result<FairRLock> {
        Ok(FairRLock::from(self.open(path)?))
    }

    /// Like [`OpenOptions::open`], for a [`FairMutex<T>`](FairMutex): a lock with a value of
    /// type `T` in the file next to it. A new file starts with `T::zeroed()`.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] if a [`lease`](OpenOptions::lease) was set (a `FairMutex`
    /// takes none: a holder taken over would still hold `&mut T`); [`Error::DataMismatch`] if
    /// the file exists with no data or data of another type; as [`OpenOptions::open`]
    /// otherwise.
    pub fn open_mutex<T: bytemuck::Pod>(&self, path: impl AsRef<Path>) -> Result<FairMutex<T>> {
        FairMutex::with_options(path.as_ref(), self, "")
    }

    /// Like [`OpenOptions::open`], for a [`FairRwLock`]: readers hold together, a writer alone,
    /// all in arrival order.
    ///
    /// # Errors
    /// [`Error::KindMismatch`] if the file holds another kind of lock; as
    /// [`OpenOptions::open`] otherwise.
    pub fn open_rwlock(&self, path: impl AsRef<Path>) -> Result<FairRwLock> {
        let o = self.of_kind(RecordKind::RWLOCK);
        Ok(FairRwLock {
            raw: o.open(path)?.raw,
        })
    }

    /// Like [`OpenOptions::open`], for a [`FairSemaphore`] of `permits` permits (1 to 2^19):
    /// at most `permits` holders at once, granted in arrival order. A new file gets at least
    /// twice as many slots as permits (more than [`slots`](OpenOptions::slots) if need be).
    ///
    /// # Errors
    /// [`Error::KindMismatch`] if the file holds another kind of lock or a semaphore of
    /// another number of permits (the message names both); [`Error::InvalidOption`] for 0 or
    /// more than 2^19 permits; as [`OpenOptions::open`] otherwise.
    pub fn open_semaphore(&self, path: impl AsRef<Path>, permits: u32) -> Result<FairSemaphore> {
        if !(1..=MAX_PERMITS).contains(&permits) {
            return Err(Error::InvalidOption {
                what: format!("a semaphore of {permits} permits: must be 1..={MAX_PERMITS}"),
            });
        }
        let o = self.of_kind(RecordKind::semaphore(permits));
        Ok(FairSemaphore::from_raw(o.open(path)?.raw, permits))
    }

    /// These options for a lock of kind `kind`.
    fn of_kind(&self, kind: RecordKind) -> OpenOptions {
        let mut o = self.clone();
        o.create.kind = kind;
        o
    }

    /// These options for a `FairMutex` of `type_name`, whose data area is `data`.
    pub(crate) fn with_data(&self, data: DataShape, type_name: &'static str) -> OpenOptions {
        let mut o = self.clone();
        o.create.data = data;
        o.create.data_type = type_name;
        o
    }

    /// The lease option, if set.
    pub(crate) fn lease_option(&self) -> Option<Duration> {
        self.lease
    }

    fn check(&self) -> Result<()> {
        let k = self.create.kind.bypass_bound();
        if self.create.kind.kind == crate::core::state::Kind::Exclusive
            && (k > MAX_BYPASS || (self.bounded && k == 0))
        {
            return Err(Error::InvalidOption {
                what: format!("Fairness::Bounded({k}): the bound must be 1..={MAX_BYPASS}"),
            });
        }
        if self.bounded && self.create.kind.kind != crate::core::state::Kind::Exclusive {
            return Err(Error::InvalidOption {
                what: format!(
                    "Fairness::Bounded for a {}: only exclusive locks take a bypass bound",
                    self.create.kind.describe()
                ),
            });
        }
        if let Some(d) = self.lease
            && (d.is_zero() || d.as_millis() > u128::from(MAX_LEASE_MS))
        {
            return Err(Error::InvalidOption {
                what: format!("lease {d:?}: must be at least 1 ms and at most 2^41 ms"),
            });
        }
        Ok(())
    }

    /// What a new file gets: the defaults of its sort (one lock, or named locks) where not
    /// set, and at least the slots its kind needs.
    pub(crate) fn create_options(&self) -> CreateOptions {
        let mut c = self.create;
        if self.name.is_some() {
            if !self.slots_set {
                c.slots = DEFAULT_NAMED_SLOTS;
            }
            if !self.participants_set {
                c.participants = DEFAULT_NAMED_PARTICIPANTS;
            }
        }
        if c.kind.kind == crate::core::state::Kind::Semaphore {
            c.slots = c.slots.max(c.kind.min_slots());
        }
        c
    }

    /// The lock's name, if it is a named lock.
    pub(crate) fn name_key(&self) -> Option<&Arc<str>> {
        self.name.as_ref()
    }

    pub(crate) fn tuning(&self) -> Tuning {
        self.tuning
    }

    /// What a handle opened with these options asks of its grants.
    pub(crate) fn asks(&self) -> Asks {
        Asks {
            lease_ms: self.lease_ms(),
            tuning: self.tuning(),
        }
    }

    pub(crate) fn lease_ms(&self) -> Option<u64> {
        self.lease
            .map(|d| (d.as_nanos().div_ceil(1_000_000)).min(u128::from(MAX_LEASE_MS)) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spin_and_the_part_that_keeps_the_cpu_reach_the_tuning() {
        let t = OpenOptions::default().tuning();
        assert_eq!((t.spin_ns, t.spin_keep_cpu_ns), (50_000, 5_000));
        let t = OpenOptions::default()
            .spin(Duration::from_micros(20))
            .spin_keep_cpu(Duration::MAX)
            .tuning();
        assert_eq!((t.spin_ns, t.spin_keep_cpu_ns), (20_000, u64::MAX));
    }
}
