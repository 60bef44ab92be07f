//! Thread and process identity across `fork`: the kernel thread id (cached per thread), a fork
//! generation so a child never reuses its parent's identity, the process's beacon descriptors
//! (which a forked child must let go of), and the one lock that `fork` waits for.
//!
//! # The fork lock
//!
//! A `pthread_atfork` *prepare* handler takes [`ForkGuard`]'s lock and the parent and child
//! handlers release it, so a `fork` never happens while another thread is inside a section
//! that holds it. Two kinds of section hold it, both short (no file locks, no waiting):
//!
//! * creating a beacon descriptor and registering it in [`BEACON_FDS`] (and unregistering and
//!   closing one): a fork between the two would give the child an unregistered copy of our
//!   beacon, which would keep our beacon alive after our death for as long as the child lives;
//! * the per-process table of open lock files and a handle's list of per-fork views (in
//!   `src/api`): a fork while another thread held one of those locks left it locked forever in
//!   the child, whose next `open` then deadlocked.
//!
//! The child handler bumps the fork generation and points every registered beacon descriptor
//! at `/dev/null` (async-signal-safe calls only), then releases the lock.

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering::Relaxed};

/// Bumped in the child after every `fork` (a `pthread_atfork` child handler).
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);
/// 0: the fork handlers are not installed; 1: installed; `pid << 1` (≥ 2): being installed by
/// a thread of process `pid`. Not a `Once`: a fork while another thread is inside its
/// `call_once` left the child waiting for it for good; a child that finds
/// its parent's installation half-done installs them itself.
static INSTALL: AtomicU64 = AtomicU64::new(0);

struct ForkLock(UnsafeCell<libc::pthread_mutex_t>);

// SAFETY: the mutex is only ever used through `pthread_mutex_lock`/`unlock`, which are safe to
// call from any thread on a statically initialised mutex.
unsafe impl Sync for ForkLock {}

static FORK_LOCK: ForkLock = ForkLock(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER));

fn fork_lock() {
    // SAFETY: a valid, statically initialised mutex; a default mutex locked by the thread
    // that unlocks it (or by the forking thread in `prepare` and unlocked by its copy).
    unsafe { libc::pthread_mutex_lock(FORK_LOCK.0.get()) };
}

fn fork_unlock() {
    // SAFETY: as in `fork_lock`; called only by the thread that locked it.
    unsafe { libc::pthread_mutex_unlock(FORK_LOCK.0.get()) };
}

extern "C" fn before_fork() {
    fork_lock();
}

extern "C" fn after_fork_in_parent() {
    fork_unlock();
}

extern "C" fn after_fork_in_child() {
    // Async-signal-safe: atomics, open, dup3, close, pthread_mutex_unlock. Relaxed: the
    // child is single-threaded.
    FORK_GENERATION.fetch_add(1, Relaxed);
    // Our handlers ran, so they are registered, even if the parent's installing thread had
    // not said so yet when it forked us.
    INSTALL.store(1, Relaxed);
    drop_inherited_beacons();
    fork_unlock();
}

/// Installs the fork handlers (once per process).
pub fn install_fork_handler() {
    use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
    loop {
        // Acquire: pairs with the Release store of 1 (the handlers are registered).
        let state = INSTALL.load(Acquire);
        if state == 1 {
            return;
        }
        let me = u64::from(std::process::id());
        if state != 0 && state >> 1 == me {
            // Another thread of ours is installing them: wait for it (a few system calls).
            std::thread::yield_now();
            continue;
        }
        // Nobody, or our parent process at the moment it forked us: ours to do.
        if INSTALL
            .compare_exchange(state, me << 1, AcqRel, Acquire)
            .is_err()
        {
            continue;
        }
        // SAFETY: registers handlers that only take or release a mutex and do async-signal-safe
        // work (atomics, open, dup3, close), which is allowed around `fork` of a multi-threaded
        // process.
        unsafe {
            libc::pthread_atfork(
                Some(before_fork),
                Some(after_fork_in_parent),
                Some(after_fork_in_child),
            )
        };
        INSTALL.store(1, Release);
        return;
    }
}

/// Holding this, the process cannot fork (the fork waits). Hold it only for short sections.
pub struct ForkGuard(());

impl ForkGuard {
    /// Takes the fork lock (installing the handlers first, so that it means something).
    pub fn lock() -> ForkGuard {
        install_fork_handler();
        fork_lock();
        ForkGuard(())
    }
}

impl Drop for ForkGuard {
    fn drop(&mut self) {
        fork_unlock();
    }
}

/// How many forks separate this process from the one that installed the handler.
#[inline]
pub fn fork_generation() -> u64 {
    FORK_GENERATION.load(Relaxed)
}

thread_local! {
    static TID: Cell<(u64, u32)> = const { Cell::new((u64::MAX, 0)) };
}

/// The calling thread's kernel thread id (`gettid(2)`), cached.
#[inline]
pub fn current_tid() -> u32 {
    let gen_now = fork_generation();
    TID.with(|c| {
        let (g, tid) = c.get();
        if g == gen_now {
            return tid;
        }
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        c.set((gen_now, tid));
        tid
    })
}

/// How many beacon descriptors (lock files open at once in one process) the table holds.
pub const MAX_BEACONS: usize = 1024;

/// Descriptors whose open file description carries a beacon of this process. A fixed
/// lock-free table, because the fork child handler may only do async-signal-safe work.
static BEACON_FDS: [AtomicI32; MAX_BEACONS] = [const { AtomicI32::new(-1) }; MAX_BEACONS];

/// Registers `fd` as holding beacons. The caller holds the [`ForkGuard`] from the creation of
/// `fd` until this returns. False if the table is full (the caller must then not use `fd`).
pub fn register_beacon_fd(_fork: &ForkGuard, fd: i32) -> bool {
    BEACON_FDS
        .iter()
        .any(|slot| slot.compare_exchange(-1, fd, Relaxed, Relaxed).is_ok())
}

/// Forgets `fd`; the caller holds the [`ForkGuard`] until `fd` is closed.
pub fn unregister_beacon_fd(_fork: &ForkGuard, fd: i32) {
    for slot in &BEACON_FDS {
        let _ = slot.compare_exchange(fd, -1, Relaxed, Relaxed);
    }
}

/// In the child after `fork`: replace every beacon descriptor by `/dev/null`. Uses only
/// async-signal-safe calls (`open`, `dup3`, `close`).
fn drop_inherited_beacons() {
    // SAFETY: open with a static NUL-terminated path and plain flags.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    for slot in &BEACON_FDS {
        let fd = slot.load(Relaxed);
        if fd < 0 {
            continue;
        }
        if null >= 0 {
            // SAFETY: `fd` is a descriptor this process registered and has not closed (it
            // unregisters before closing, under the fork lock); dup3 atomically replaces it, so
            // the number stays ours and never refers to the parent's open file description again.
            unsafe { libc::dup3(null, fd, libc::O_CLOEXEC) };
        }
    }
    if null >= 0 {
        // SAFETY: `null` was opened above and is not used afterwards.
        unsafe { libc::close(null) };
    }
}
