//! The threads that wait in a lock's queue for the asynchronous acquisitions
//! (`raw::acquire_async`): a pool of this process's own, so that no thread of the caller's
//! runtime ever sleeps in a queue. A waiter thread runs one wait at a time (the protocol's own
//! blocking wait, unchanged); an idle one waits [`IDLE`] for the next, then ends.
//!
//! Fork-safe as the rest of the process's tables: the pool is locked only under the fork lock,
//! and a forked child (whose copy of the pool names threads it does not have) starts an empty
//! one.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::sys::thread::{self, ForkGuard};

/// A wait to run.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// How long an idle waiter thread waits for another job before it ends.
const IDLE: Duration = Duration::from_secs(10);

/// The stack of a waiter thread: the protocol's wait and a future's waker need little.
const STACK: usize = 256 * 1024;

/// An idle waiter thread, and where a job is handed to it.
struct Idle {
    thread: std::thread::Thread,
    job: Mutex<Option<Job>>,
}

/// The idle waiter threads of the process, and the fork generation they belong to.
struct Pool {
    generation: u64,
    idle: Vec<Arc<Idle>>,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    generation: 0,
    idle: Vec::new(),
});

/// The pool, under the fork lock (short sections only: no waiting inside), emptied first in a
/// forked child.
fn with_pool<R>(f: impl FnOnce(&mut Vec<Arc<Idle>>) -> R) -> R {
    let _fork = ForkGuard::lock();
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let generation = thread::fork_generation();
    if pool.generation != generation {
        // A forked child: its parent's threads are not ours. Forgotten, not dropped: a job
        // may have been handed to one of them half-way, and nothing else of theirs is safe to
        // run here.
        std::mem::forget(std::mem::take(&mut pool.idle));
        pool.generation = generation;
    }
    f(&mut pool.idle)
}

/// Runs `job` on a waiter thread: an idle one, or a new one.
///
/// # Errors
/// The error of starting a thread (`EAGAIN` at the process's or the system's limit); `job` is
/// given back with it.
pub(crate) fn run(job: Job) -> Result<(), (Job, std::io::Error)> {
    match with_pool(|idle| idle.pop()) {
        Some(waiter) => {
            *waiter.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(job);
            waiter.thread.unpark();
            Ok(())
        }
        None => {
            // The job goes to the new thread through a slot it can be taken back from if the
            // thread cannot be started (a closure given to `spawn` would be lost with it).
            let slot = Arc::new(Mutex::new(Some(job)));
            let theirs = slot.clone();
            let started = std::thread::Builder::new()
                .name("fairlock-waiter".into())
                .stack_size(STACK)
                .spawn(move || {
                    let first = theirs.lock().unwrap_or_else(|e| e.into_inner()).take();
                    drop(theirs);
                    if let Some(job) = first {
                        serve(job);
                    }
                });
            match started {
                Ok(_) => Ok(()),
                Err(e) => {
                    let job = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
                    Err((job.expect("a thread that did not start took nothing"), e))
                }
            }
        }
    }
}

/// A waiter thread's life: runs `job`, then each job handed to it while idle, until it has
/// been idle for [`IDLE`].
fn serve(job: Job) {
    let me = Arc::new(Idle {
        thread: std::thread::current(),
        job: Mutex::new(None),
    });
    let mut next = Some(job);
    while let Some(job) = next.take() {
        job();
        with_pool(|idle| idle.push(me.clone()));
        let until = Instant::now() + IDLE;
        loop {
            if let Some(job) = me.job.lock().unwrap_or_else(|e| e.into_inner()).take() {
                next = Some(job);
                break;
            }
            let now = Instant::now();
            if now >= until {
                // Leave the pool, unless a job is being handed to us (we were taken out of
                // it): then wait for that job, however long the hand-over takes.
                if with_pool(|idle| {
                    let at = idle.iter().position(|w| Arc::ptr_eq(w, &me));
                    at.map(|i| idle.swap_remove(i)).is_some()
                }) {
                    return;
                }
                std::thread::park();
            } else {
                std::thread::park_timeout(until - now);
            }
        }
    }
}
