//! Thread identity: the kernel thread id, cached per thread, and a fork generation so that a
//! child process never reuses its parent's cached ids.

use std::cell::Cell;
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Bumped in the child after every `fork` (a `pthread_atfork` child handler).
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);
static INSTALL: Once = Once::new();

extern "C" fn after_fork_in_child() {
    // Async-signal-safe: atomics, open, dup3, close. Relaxed: the child is single-threaded.
    FORK_GENERATION.fetch_add(1, Relaxed);
    drop_inherited_beacons();
}

/// Installs the fork handler (once per process).
pub fn install_fork_handler() {
    INSTALL.call_once(|| {
        // SAFETY: registers a handler that only performs async-signal-safe work (atomics,
        // open, dup3, close), which is allowed in the child of a multi-threaded process.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    });
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

/// Descriptors whose open file description carries a beacon of this process. A forked child
/// must not keep its parent's beacons alive (the parent's death would go unnoticed while the
/// child lives), so the fork handler points each of them at `/dev/null` in the child. A fixed
/// lock-free table, because the handler may only do async-signal-safe work.
static BEACON_FDS: [std::sync::atomic::AtomicI32; 64] =
    [const { std::sync::atomic::AtomicI32::new(-1) }; 64];

/// Registers `fd` as holding beacons. False if the table is full (then a forked child keeps
/// the parent's beacon alive until it execs or exits; documented).
pub fn register_beacon_fd(fd: i32) -> bool {
    BEACON_FDS
        .iter()
        .any(|slot| slot.compare_exchange(-1, fd, Relaxed, Relaxed).is_ok())
}

/// Forgets `fd` (before it is closed).
pub fn unregister_beacon_fd(fd: i32) {
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
            // unregisters before closing); dup3 atomically replaces it, so the number stays
            // ours and never refers to the parent's open file description again.
            unsafe { libc::dup3(null, fd, libc::O_CLOEXEC) };
        }
    }
    if null >= 0 {
        // SAFETY: `null` was opened above and is not used afterwards.
        unsafe { libc::close(null) };
    }
}
