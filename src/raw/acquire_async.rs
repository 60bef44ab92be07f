//! Acquiring without blocking the caller's thread: [`AcquireFuture`], the future of every
//! handle's `*_async` methods, which resolves to a process grant (a
//! [`ProcessGuard`](crate::ProcessGuard): `Send`, so a task may move between threads while it
//! holds it).
//!
//! How it waits: its first poll takes an exclusive lock at once if it is free (one CAS, as the
//! blocking lock; a deadline already past makes one try, as `lock_timeout(0)`), else takes a
//! **ticket** there and then (a shared kind's always: its grant comes through its slot) — so that tasks are served in the
//! order their acquisitions were first polled, like threads in the order they called `lock` —
//! and hands the ticket to a waiter thread of the process (`raw::waiters`), which publishes it
//! and waits for its grant exactly as a blocking acquisition does (the protocol's own wait,
//! with its liveness watching and recovery). The grant wakes the task.
//!
//! Dropping the future gives the ticket up at once: the drop rings the wait's **bell** (a word
//! of its own that every sleep of the wait also waits on: `futex::wait_ringing`), the waiter
//! thread gives the ticket up as at a deadline — the same O(1) path — and the drop returns
//! once it has (microseconds: the waiter thread's wake-up and one look ahead), so that the
//! next `try_lock` finds nobody in line. A grant that raced the drop is given back. The drop
//! waits for the waiter thread at most [`DROP_WAIT`]: past it (a machine too loaded to run
//! the waiter thread), it returns and the waiter thread gives the ticket up when it runs.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering::Acquire, Ordering::Release};
use std::sync::{Arc, Condvar, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::api::guard::LockGuard;
use crate::api::process_guard::ProcessGuard;
use crate::core::{self, Me, Taken, Tuning};
use crate::error::{Error, Result};
use crate::process::view::{PROCESS_TID, Shared};
use crate::raw::acquire::{Mode, settle};
use crate::raw::handle::RawLock;
use crate::raw::waiters;
use crate::sys::thread;

/// The future of an asynchronous acquisition (`lock_async`, `read_async`, `write_async`,
/// `acquire_async` and their `_timeout` forms): resolves to a [`ProcessGuard`] once granted.
///
/// It owns what it needs (it may outlive the handle, and be spawned); it is `Send` and
/// `Unpin`. Poll it from any runtime: it needs none (its waiting is done by a thread of the
/// library's own, which wakes the task). Dropped before it resolves, it gives its place in
/// line up at once, so `tokio::time::timeout` and `select!` are safe; a grant made meanwhile
/// is given back.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let path = std::env::temp_dir().join(format!("fairlock-async-{}.lock", std::process::id()));
/// let lock = fairlock::FairLock::open(&path)?;
/// let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
/// runtime.block_on(async {
///     let grant = lock.lock_async().await?;
///     let token = grant.token();
///     // Moved into another task (on any worker thread) and released there.
///     tokio::spawn(async move { grant.unlock() }).await.expect("the task ran")?;
///     // A waiter dropped by a timeout leaves nothing behind.
///     let held = lock.lock_async().await?;
///     let late = tokio::time::timeout(std::time::Duration::from_millis(10), lock.lock_async());
///     assert!(late.await.is_err());
///     assert!(held.token() > token);
///     held.unlock()
/// })?;
/// assert!(lock.try_lock().is_ok());
/// # std::fs::remove_file(&path)?;
/// # Ok(())
/// # }
/// ```
#[must_use = "futures do nothing unless polled; the place in line is taken at the first poll"]
pub struct AcquireFuture {
    state: State,
}

enum State {
    /// Not polled yet.
    Start(Box<Start>),
    /// Waiting, on a waiter thread.
    Waiting(Arc<Pending>),
    /// Resolved (or failed before it started): taken by the next poll.
    Ready(Option<Result<ProcessGuard>>),
}

/// What the first poll needs.
struct Start {
    view: Arc<Shared>,
    mode: Mode,
    lease_ms: Option<u64>,
    tuning: Tuning,
    deadline: Option<u64>,
}

/// The longest a dropped future waits for its waiter thread to give its ticket up.
const DROP_WAIT: Duration = Duration::from_millis(200);

/// A wait handed to a waiter thread, as the future and that thread share it.
struct Pending {
    /// The fork generation it was started in: a forked child's copy has no waiter thread, and
    /// its outcome's lock may have been copied locked.
    generation: u64,
    /// The lock file (for the error of a forked child's copy).
    path: std::path::PathBuf,
    /// 0 while the future wants the grant; 1 once it was dropped (see `futex::wait_ringing`).
    bell: AtomicU32,
    outcome: Mutex<Outcome>,
    /// Notified when the waiter thread is done with the wait (the outcome decided, or given
    /// back after the bell rang).
    finished: Condvar,
}

enum Outcome {
    /// Not decided; the waker of the task that polled last.
    Waiting(Option<Waker>),
    /// Decided, not yet taken by a poll.
    Done(Result<ProcessGuard>),
    /// Taken by a poll, or the future dropped: the waiter thread gives back what it decides.
    Taken,
    /// The waiter thread is done with a wait whose future was dropped.
    Finished,
}

impl RawLock {
    /// The asynchronous process acquisition of `mode` (not the re-entrant one), until
    /// `deadline` if any.
    pub(crate) fn acquire_async(&self, mode: Mode, deadline: Option<u64>) -> AcquireFuture {
        let state = match self.shared() {
            Ok(sh) => State::Start(Box::new(Start {
                view: self.view_arc(sh),
                mode,
                lease_ms: self.lease_ms,
                tuning: self.tuning,
                deadline,
            })),
            Err(e) => State::Ready(Some(Err(e))),
        };
        AcquireFuture { state }
    }
}

impl Future for AcquireFuture {
    type Output = Result<ProcessGuard>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<ProcessGuard>> {
        let this = &mut *self;
        loop {
            match &mut this.state {
                State::Start(_) => {
                    let State::Start(start) =
                        std::mem::replace(&mut this.state, State::Ready(None))
                    else {
                        unreachable!()
                    };
                    this.state = begin(*start);
                }
                State::Waiting(pending) => {
                    if pending.generation != thread::fork_generation() {
                        let e = before_fork(&pending.path);
                        this.state = State::Ready(None);
                        return Poll::Ready(Err(e));
                    }
                    let mut outcome = pending.outcome.lock().unwrap_or_else(|e| e.into_inner());
                    match &mut *outcome {
                        Outcome::Waiting(waker) => {
                            if !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                                *waker = Some(cx.waker().clone());
                            }
                            return Poll::Pending;
                        }
                        Outcome::Done(_) => {
                            let Outcome::Done(r) = std::mem::replace(&mut *outcome, Outcome::Taken)
                            else {
                                unreachable!()
                            };
                            drop(outcome);
                            this.state = State::Ready(None);
                            return Poll::Ready(r);
                        }
                        Outcome::Taken | Outcome::Finished => {
                            panic!("AcquireFuture polled after it resolved")
                        }
                    }
                }
                State::Ready(r) => {
                    return Poll::Ready(r.take().expect("AcquireFuture polled after it resolved"));
                }
            }
        }
    }
}

impl Drop for AcquireFuture {
    fn drop(&mut self) {
        let State::Waiting(pending) = &self.state else {
            return; // never started, or resolved: nothing in line
        };
        if pending.generation != thread::fork_generation() {
            return; // a forked child's copy: the wait is the parent's
        }
        // Release: pairs with the waiter thread's Acquire load after it decided (below): a
        // grant it made after this is released by it.
        pending.bell.store(1, Release);
        wake_bell(&pending.bell);
        let mut outcome = pending.outcome.lock().unwrap_or_else(|e| e.into_inner());
        let decided = std::mem::replace(&mut *outcome, Outcome::Taken);
        if matches!(decided, Outcome::Waiting(_)) {
            // Wait for the waiter thread to give the ticket up (or back, if it was granted).
            let until = Instant::now() + DROP_WAIT;
            while !matches!(*outcome, Outcome::Finished) {
                let now = Instant::now();
                if now >= until {
                    break;
                }
                outcome = pending
                    .finished
                    .wait_timeout(outcome, until - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
        drop(outcome);
        // A grant decided before the bell rang is ours to give back (outside the lock).
        if let Outcome::Done(r) = decided {
            give_back(r);
        }
    }
}

impl std::fmt::Debug for AcquireFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Start(_) => "not polled",
            State::Waiting(_) => "waiting",
            State::Ready(_) => "resolved",
        };
        f.debug_struct("AcquireFuture")
            .field("state", &state)
            .finish()
    }
}

/// Wakes the waiter thread sleeping on `bell`, if any.
fn wake_bell(bell: &AtomicU32) {
    crate::sys::futex::wake_all_u32(bell);
}

/// The first poll: the lock taken at once if it is free, else a ticket taken and handed to a
/// waiter thread.
fn begin(start: Start) -> State {
    let Start {
        view,
        mode,
        lease_ms,
        tuning,
        deadline,
    } = start;
    let sh = &*view;
    if !sh.is_current() {
        let e = if sh.is_broken() {
            crate::raw::handle::truncated(&sh.path)
        } else {
            before_fork(&sh.path)
        };
        return State::Ready(Some(Err(e)));
    }
    let me = Me {
        participant: sh.participant,
        tid: PROCESS_TID,
        lease_ms,
        shared: mode == Mode::Shared,
        beacon: 0,
    };
    let st = sh.state();
    if deadline.is_some_and(|d| crate::sys::clock::monotonic_ns() >= d) {
        // A deadline already past: one try, as the blocking `lock_timeout(0)` makes it (never
        // a ticket to give up at once).
        let r = core::try_lock(&st, &sh.platform(), &me, &tuning);
        let r = settle(sh, r).and_then(|g| {
            g.map(|g| granted(&view, g, lease_ms))
                .ok_or_else(|| Error::Timeout {
                    path: sh.path.clone(),
                })
        });
        return State::Ready(Some(r));
    }
    // The ticket is taken here, in the order of first polls (one atomic operation on the
    // lock word, as every acquisition's first step).
    let first = match core::take(&st, &sh.platform(), &me) {
        Taken::Fast(g) => {
            let r = settle(sh, Ok(g)).map(|g| granted(&view, g, lease_ms));
            return State::Ready(Some(r));
        }
        Taken::Queued(t, arrived) => Some((t, arrived)),
        // No room for a ticket (a long queue): the waiter thread waits for room.
        Taken::Full(_) => None,
    };
    let pending = Arc::new(Pending {
        generation: thread::fork_generation(),
        path: sh.path.clone(),
        bell: AtomicU32::new(0),
        outcome: Mutex::new(Outcome::Waiting(None)),
        finished: Condvar::new(),
    });
    let theirs = pending.clone();
    let job = Box::new(move || wait(theirs, view, me, tuning, deadline, first));
    match waiters::run(job) {
        Ok(()) => State::Waiting(pending),
        Err((job, e)) => {
            // No thread to wait on: the ticket is given up at once (the job run here with the
            // bell rung: a grant made at once is given back), and the error reported.
            pending.bell.store(1, Release);
            job();
            State::Ready(Some(Err(Error::io(
                &pending.path,
                "start a waiter thread",
                e,
            ))))
        }
    }
}

/// Gives back the grant of a dropped future, if it was made (passing on the news of a dead
/// owner it carries: nobody else will see it).
fn give_back(r: Result<ProcessGuard>) {
    if let Ok(g) = r {
        g.give_back_unused();
    }
}

/// The error of a future polled in a forked child of the process that started it.
fn before_fork(path: &std::path::Path) -> Error {
    Error::io(
        path,
        "acquire",
        std::io::Error::other(
            "the acquisition was started before a fork: await it in the process that started it",
        ),
    )
}

/// The process grant `g`, made in `view`.
fn granted(view: &Arc<Shared>, g: core::Grant, lease_ms: Option<u64>) -> ProcessGuard {
    ProcessGuard::of_view(view.clone(), LockGuard::new(view, g, PROCESS_TID, lease_ms))
}

/// A waiter thread's job: waits for the grant of ticket `first` (or of a ticket taken here,
/// if `first` is `None`) as a blocking acquisition does, giving it up once the bell rings (or
/// a truncation destroys the lock state), and hands the outcome to the future.
fn wait(
    pending: Arc<Pending>,
    view: Arc<Shared>,
    me: Me,
    tuning: Tuning,
    deadline: Option<u64>,
    first: Option<(u64, u32)>,
) {
    let sh = &*view;
    let st = sh.state();
    let mut platform = sh.platform();
    platform.bell = Some(&pending.bell);
    // Acquire: pairs with the drop's Release store of the bell.
    let stop = || sh.is_broken() || pending.bell.load(Acquire) != 0;
    let watch = core::Watch::default().abandoning(&stop);
    let tuning = Tuning {
        spin_ns: 0,
        ..tuning
    };
    let r = core::lock_watched(&st, &platform, &me, deadline, &tuning, first, watch);
    let r = settle(sh, r).map(|g| granted(&view, g, me.lease_ms));
    let mut outcome = pending.outcome.lock().unwrap_or_else(|e| e.into_inner());
    // Acquire: as above. The bell rang before the future's drop took the outcome: if it has
    // rung, nobody will take this one, and a grant is given back here, before the drop
    // (which waits for it) is told.
    if pending.bell.load(Acquire) != 0 {
        drop(outcome);
        give_back(r);
        *pending.outcome.lock().unwrap_or_else(|e| e.into_inner()) = Outcome::Finished;
        pending.finished.notify_all();
        return;
    }
    let waker = match std::mem::replace(&mut *outcome, Outcome::Done(r)) {
        Outcome::Waiting(w) => w,
        _ => None,
    };
    drop(outcome);
    if let Some(w) = waker {
        w.wake();
    }
}
