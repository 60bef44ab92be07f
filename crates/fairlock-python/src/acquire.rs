//! `acquire(blocking=True, timeout=-1)`: threading's argument rules, an `RLock`'s uncontended attempt
//! (the GIL kept: it never waits), and the wait in line with the GIL released and Ctrl-C
//! honoured.
//!
//! The wait calls `lock_interruptible` with a hook that, on the main thread, briefly takes the
//! GIL back and runs Python's signal handlers (`PyErr_CheckSignals`). A signal interrupts the
//! waiter's futex sleep, so the hook runs at once; if a handler raised (`KeyboardInterrupt`
//! for Ctrl-C), the hook says stop, the ticket is given up and the exception is raised. Other
//! threads never run signal handlers in Python, so their hook says nothing and costs nothing.

use std::cell::Cell;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fairlock::Error;
use pyo3::exceptions::{PyOverflowError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::errors;
use crate::handle::Handle;
use crate::held::{self, Holding};

/// How long `acquire` may wait, from its `(blocking, timeout)` arguments.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wait {
    /// Only if the lock is free and nobody waits (`try_lock`: never jumps the queue).
    Try,
    /// In line, until this instant at most.
    Until(Instant),
    /// In line, as long as it takes.
    Forever,
}

impl Wait {
    /// `threading.Lock.acquire`'s rules: `timeout` only with `blocking`, not negative but
    /// for -1 (the default: none), at most `threading.TIMEOUT_MAX`; 0 means "do not wait".
    ///
    /// # Errors
    /// `ValueError` and `OverflowError` as threading raises them.
    pub(crate) fn from_threading(
        py: Python<'_>,
        blocking: Blocking,
        timeout: Timeout,
    ) -> PyResult<Wait> {
        let Timeout(timeout) = timeout;
        if !blocking.0 {
            if timeout != UNSET {
                return Err(PyValueError::new_err(
                    "can't specify a timeout for a non-blocking call",
                ));
            }
            return Ok(Wait::Try);
        }
        if timeout == UNSET {
            return Ok(Wait::Forever);
        }
        Self::blocking_for(py, timeout)
    }

    /// A blocking wait of `t` seconds (0: do not wait).
    fn blocking_for(py: Python<'_>, t: f64) -> PyResult<Wait> {
        if t < 0.0 {
            return Err(PyValueError::new_err("timeout value must be positive"));
        }
        if t > timeout_max(py)? {
            return Err(PyOverflowError::new_err("timeout value is too large"));
        }
        if t == 0.0 {
            return Ok(Wait::Try);
        }
        // Never fails below TIMEOUT_MAX (2^63 ns); `Forever` if the clock cannot count that far.
        Ok(Duration::try_from_secs_f64(t)
            .ok()
            .and_then(|d| Instant::now().checked_add(d))
            .map_or(Wait::Forever, Wait::Until))
    }
}

/// `acquire`'s `blocking` argument: a C `int` as threading takes it (a bool, an int, anything
/// with `__index__`; `acquire(0)` is an old spelling of `acquire(False)`), true if not zero.
pub(crate) struct Blocking(pub(crate) bool);

impl FromPyObject<'_, '_> for Blocking {
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, '_, PyAny>) -> PyResult<Blocking> {
        Ok(Blocking(obj.extract::<i32>()? != 0))
    }
}

/// `acquire`'s `timeout` argument: seconds, an int or a float (`None` is a `TypeError`, as in
/// threading), NaN refused; [`Timeout::UNSET`] by default.
pub(crate) struct Timeout(f64);

/// threading's "no timeout".
const UNSET: f64 = -1.0;

impl Timeout {
    /// The default: no timeout.
    pub(crate) const UNSET: Timeout = Timeout(UNSET);
}

impl FromPyObject<'_, '_> for Timeout {
    type Error = PyErr;

    fn extract(obj: Borrowed<'_, '_, PyAny>) -> PyResult<Timeout> {
        let s: f64 = obj.extract()?;
        if s.is_nan() {
            return Err(PyValueError::new_err("Invalid value NaN (not a number)"));
        }
        Ok(Timeout(s))
    }
}

/// `threading.TIMEOUT_MAX`, read once.
fn timeout_max(py: Python<'_>) -> PyResult<f64> {
    static MAX: PyOnceLock<f64> = PyOnceLock::new();
    MAX.get_or_try_init(py, || {
        py.import("_thread")?.getattr("TIMEOUT_MAX")?.extract()
    })
    .copied()
}

/// `acquire` of a `fairlock.RLock`: whether the calling thread got the lock (or one more level
/// of it).
///
/// # Errors
/// The exception a signal handler raised while waiting (`KeyboardInterrupt`); the library's
/// errors otherwise (see `errors.rs`).
pub(crate) fn acquire(py: Python<'_>, handle: &Arc<Handle>, wait: Wait) -> PyResult<bool> {
    match held::holding(handle) {
        Holding::Yes { .. } => {
            return if held::reenter(handle) {
                Ok(true)
            } else {
                Err(PyOverflowError::new_err("Internal lock count overflowed"))
            };
        }
        Holding::No => {}
        Holding::Inherited => held::forget_inherited(handle),
    }
    try_then_wait(
        py,
        wait,
        || handle.try_lock(),
        |guard| held::insert(handle, guard, 1),
        |deadline| wait_in_line(py, handle, deadline),
    )
}

/// What every `acquire` does: the uncontended attempt (`try_now`, the GIL kept: it never
/// waits), whose grant goes to `keep`; then, unless `wait` says not to wait, `wait_in_line`
/// until the deadline (`None`: for good). Whether the lock was acquired.
///
/// # Errors
/// The library's errors of the attempt (not `WouldBlock`); `wait_in_line`'s.
pub(crate) fn try_then_wait<G>(
    py: Python<'_>,
    wait: Wait,
    try_now: impl FnOnce() -> fairlock::Result<G>,
    keep: impl FnOnce(G),
    wait_in_line: impl FnOnce(Option<Instant>) -> PyResult<bool>,
) -> PyResult<bool> {
    match try_now() {
        Ok(grant) => {
            keep(grant);
            return Ok(true);
        }
        Err(Error::WouldBlock { .. }) => {}
        Err(e) => return Err(errors::to_py(py, e)),
    }
    match wait {
        Wait::Try => Ok(false),
        Wait::Until(d) => wait_in_line(Some(d)),
        Wait::Forever => wait_in_line(None),
    }
}

/// How the wait in line ended.
enum Waited {
    Granted,
    TimedOut,
    /// A signal handler raised; the ticket was given up (or the grant released at once).
    Interrupted,
    Failed(Error),
}

/// Takes a ticket and waits for it with the GIL released; the grant goes into the calling
/// thread's table (inside the closure, which runs on this thread: the guard is not `Send`).
fn wait_in_line(py: Python<'_>, handle: &Arc<Handle>, deadline: Option<Instant>) -> PyResult<bool> {
    wait_with_signals(
        py,
        |stop| handle.lock_interruptible(deadline, stop),
        |guard| held::insert(handle, guard, 1),
        |guard| {
            let _ = guard.unlock();
        },
    )
}

/// Runs `wait` (a library wait that takes a stop hook) with the GIL released: on the main
/// thread the hook runs Python's signal handlers, and one that raises (`KeyboardInterrupt`)
/// stops the wait, whose exception is then raised. A grant goes to `keep`, on this thread;
/// one that won the race against the interruption goes to `give_back` at once. `Ok(false)`:
/// timed out.
pub(crate) fn wait_with_signals<G>(
    py: Python<'_>,
    wait: impl FnOnce(&mut dyn FnMut() -> bool) -> fairlock::Result<G> + Send,
    keep: impl FnOnce(G) + Send,
    give_back: impl FnOnce(G) + Send,
) -> PyResult<bool> {
    let main = is_main_thread(py)?;
    let mut raised: Option<PyErr> = None;
    let waited = py.detach(|| {
        let mut stop = || {
            main && Python::attach(|py| match py.check_signals() {
                Ok(()) => false,
                Err(e) => {
                    raised = Some(e);
                    true
                }
            })
        };
        match wait(&mut stop) {
            Ok(grant) if raised.is_some() => {
                give_back(grant);
                Waited::Interrupted
            }
            Ok(grant) => {
                keep(grant);
                Waited::Granted
            }
            Err(Error::Timeout { .. }) => Waited::TimedOut,
            Err(Error::Interrupted { .. }) => Waited::Interrupted,
            Err(e) => Waited::Failed(e),
        }
    });
    match waited {
        Waited::Granted => Ok(true),
        Waited::TimedOut => Ok(false),
        Waited::Interrupted => Err(raised.unwrap_or_else(|| {
            PyRuntimeError::new_err("fairlock: waiting was interrupted without an exception")
        })),
        Waited::Failed(e) => Err(errors::to_py(py, e)),
    }
}

/// Whether the calling thread is Python's main thread, the only one that runs signal handlers.
/// Asked of `threading` once per thread (and again after a `fork`, which makes the forking
/// thread the child's main thread), then remembered: it is on the path of every wait.
pub(crate) fn is_main_thread(py: Python<'_>) -> PyResult<bool> {
    thread_local! {
        /// (fork generation, answer) of the last time this thread asked.
        static MAIN: Cell<Option<(u64, bool)>> = const { Cell::new(None) };
    }
    let generation = held::fork_generation();
    if let Some((g, main)) = MAIN.get()
        && g == generation
    {
        return Ok(main);
    }
    let threading = py.import("threading")?;
    let me: u64 = threading.call_method0("get_ident")?.extract()?;
    let main = threading.call_method0("main_thread")?.getattr("ident")?;
    let main = main.extract::<Option<u64>>()? == Some(me);
    MAIN.set(Some((generation, main)));
    Ok(main)
}
