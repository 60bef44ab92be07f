//! Thread identity: the kernel thread id, cached per thread, and a fork generation so that a
//! child process never reuses its parent's cached ids.

use std::cell::Cell;
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Bumped in the child after every `fork` (a `pthread_atfork` child handler).
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);
static INSTALL: Once = Once::new();

extern "C" fn after_fork_in_child() {
    // Async-signal-safe: one atomic add. Relaxed: the child is single-threaded here.
    FORK_GENERATION.fetch_add(1, Relaxed);
}

/// Installs the fork handler (once per process).
pub fn install_fork_handler() {
    INSTALL.call_once(|| {
        // SAFETY: registers a handler that only performs an atomic add, which is safe to run in
        // the child of a multi-threaded process.
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
