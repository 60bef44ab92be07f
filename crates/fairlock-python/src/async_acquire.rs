//! `acquire_async()` (and `async with`) for asyncio, on the library's asynchronous acquisition
//! (`fairlock::AcquireFuture`): the wait runs on the library's waiter thread, never on the
//! event loop, and the grant is the process's, kept in the lock object as `acquire()`'s is
//! (by its [`Keep`]: a `Lock`'s or `RWLock` side's grants, a `Semaphore`'s permits).
//!
//! How the two meet: `acquire_async()` makes an asyncio future on the running loop and an
//! [`Acquiring`] that owns the library's future. The library future is polled on the loop's
//! thread: once at the start (which takes the place in line, or the lock if it is free), and
//! again each time its waker fires — the waker (called on the waiter thread) asks the loop,
//! through `call_soon_threadsafe`, to poll it. Cancelling the asyncio future (a cancelled task,
//! `asyncio.wait_for`'s timeout) drops the library future, which gives the place up at once.
//!
//! What the caller awaits is a coroutine around the asyncio future (`fairlock._asyncio`), which
//! gives the grant back if the awaiting task is cancelled after the grant arrived but before it
//! resumed (as `asyncio.Lock` does): the future's result is set by then, so cancelling the
//! task cannot cancel it. The asyncio future is held weakly here (the awaiting coroutine holds
//! it): an acquisition nobody awaits any more, or whose loop was closed, gives its place or its
//! grant back when the waiter thread next calls (a loop that cannot schedule the poll makes the
//! waker drop the library future itself).

use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use fairlock::{AcquireFuture, ProcessGuard};
use pyo3::prelude::*;
use pyo3::types::{PyWeakrefMethods, PyWeakrefReference};

use crate::errors;
use crate::grants::Grants;
use crate::handle::Handle;
use crate::lock_object::duration;

/// Where the grant of an asynchronous acquisition goes once it arrived: the lock object's own
/// store, as `acquire()`'s grants.
pub(crate) trait Keep: Send + Sync {
    fn keep(&self, grant: ProcessGuard);
}

impl Keep for Grants {
    fn keep(&self, grant: ProcessGuard) {
        self.push(grant);
    }
}

/// One asynchronous acquisition in progress: the library's future (until it resolved or was
/// cancelled), the asyncio future that reports it, and where a grant goes.
#[pyclass(frozen, module = "fairlock", name = "_Acquiring")]
pub(crate) struct Acquiring {
    acquire: Mutex<Option<AcquireFuture>>,
    future: Py<PyWeakrefReference>,
    event_loop: Py<PyAny>,
    keep: Arc<dyn Keep>,
}

/// The waker of an [`Acquiring`]: schedules its poll on the event loop.
struct LoopWaker(Py<Acquiring>);

impl Wake for LoopWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        Python::attach(|py| {
            let me = self.0.bind(py);
            let scheduled = me.getattr("_poll").and_then(|poll| {
                me.get()
                    .event_loop
                    .call_method1(py, "call_soon_threadsafe", (poll,))
            });
            if scheduled.is_err() {
                // The loop is closed: nobody will poll. The library future is dropped here,
                // which gives its grant (decided before this wake) back.
                me.get().give_up(py);
            }
        });
    }
}

#[pymethods]
impl Acquiring {
    /// Polls the library's future (on the loop's thread) and reports its outcome.
    fn _poll(slf: &Bound<'_, Self>) -> PyResult<()> {
        let py = slf.py();
        let me = slf.get();
        let future = me.future.bind(py).upgrade();
        let mut acquire = me.acquire.lock().unwrap_or_else(|e| e.into_inner());
        let Some(f) = acquire.as_mut() else {
            return Ok(()); // resolved or cancelled already
        };
        let wanted = match &future {
            Some(future) => !future.call_method0("done")?.extract::<bool>()?,
            None => false, // nobody awaits it any more
        };
        let Some(future) = future.filter(|_| wanted) else {
            // Cancelled, or forgotten: give the place up (the drop waits for the waiter
            // thread, which never needs the GIL for it).
            let f = acquire.take();
            drop(acquire);
            py.detach(|| drop(f));
            return Ok(());
        };
        let waker = Waker::from(Arc::new(LoopWaker(slf.clone().unbind())));
        let polled = std::pin::Pin::new(f).poll(&mut Context::from_waker(&waker));
        let Poll::Ready(r) = polled else {
            return Ok(());
        };
        *acquire = None;
        drop(acquire);
        match r {
            Ok(grant) => {
                me.keep.keep(grant);
                future.call_method1("set_result", (true,))?;
            }
            Err(fairlock::Error::Timeout { .. }) => {
                future.call_method1("set_result", (false,))?;
            }
            Err(e) => {
                future.call_method1("set_exception", (errors::to_py(py, e),))?;
            }
        }
        Ok(())
    }

    /// The asyncio future's done callback: a cancelled one gives the place up at once.
    fn _done(slf: &Bound<'_, Self>, _future: &Bound<'_, PyAny>) -> PyResult<()> {
        slf.get().give_up(slf.py());
        Ok(())
    }
}

impl Acquiring {
    /// Drops the library future, if it is still here (its drop gives the place in line, or a
    /// grant it made, back), with the GIL released: the drop may wait for the waiter thread.
    fn give_up(&self, py: Python<'_>) {
        let f = self
            .acquire
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        py.detach(|| drop(f));
    }
}

/// `acquire_async(timeout)` of a lock object whose grants are its process's: `start_acquisition` makes
/// the library's acquisition (with the timeout, if any), `keep` keeps its grant, `release` (the
/// object's `release` method) gives one back. The coroutine returns True once the grant is
/// kept, False at the timeout, and gives the grant back if its task is cancelled once it
/// arrived.
///
/// # Errors
/// `ValueError` for a timeout that is not a positive number of seconds; `RuntimeError`
/// without a running event loop.
pub(crate) fn acquire<'py>(
    py: Python<'py>,
    start_acquisition: impl FnOnce(Option<std::time::Duration>) -> AcquireFuture,
    keep: Arc<dyn Keep>,
    release: Bound<'py, PyAny>,
    timeout: Option<f64>,
) -> PyResult<Bound<'py, PyAny>> {
    let timeout = timeout
        .map(|t| duration("acquire_async: timeout", t))
        .transpose()?;
    let future = start(py, start_acquisition(timeout), keep)?;
    py.import("fairlock._asyncio")?
        .getattr("acquired")?
        .call1((future, release))
}

/// `acquire_async(timeout)` of a lock object (`object`) whose grants are its handle's process
/// grants, kept in `grants` and given back by the object's `release` method.
///
/// # Errors
/// As [`acquire`].
pub(crate) fn acquire_grant<'py>(
    object: &Bound<'py, PyAny>,
    handle: &Handle,
    grants: &Arc<Grants>,
    timeout: Option<f64>,
) -> PyResult<Bound<'py, PyAny>> {
    acquire(
        object.py(),
        |t| handle.process_async(t),
        grants.clone(),
        object.getattr("release")?,
        timeout,
    )
}

/// Starts the asynchronous acquisition `acquire` on the running event loop; returns the
/// asyncio future that resolves to True once `keep` has the grant, to False at a timeout
/// (or raises what the library reports).
///
/// # Errors
/// `RuntimeError` without a running event loop.
fn start<'py>(
    py: Python<'py>,
    acquire: AcquireFuture,
    keep: Arc<dyn Keep>,
) -> PyResult<Bound<'py, PyAny>> {
    let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
    let future = event_loop.call_method0("create_future")?;
    let acquiring = Bound::new(
        py,
        Acquiring {
            acquire: Mutex::new(Some(acquire)),
            future: PyWeakrefReference::new(&future)?.unbind(),
            event_loop: event_loop.unbind(),
            keep,
        },
    )?;
    future.call_method1("add_done_callback", (acquiring.getattr("_done")?,))?;
    Acquiring::_poll(&acquiring)?;
    Ok(future)
}

/// An already completed asyncio future (for `__aexit__`).
///
/// # Errors
/// `RuntimeError` without a running event loop.
pub(crate) fn done<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
    let future = py
        .import("asyncio")?
        .call_method0("get_running_loop")?
        .call_method0("create_future")?;
    future.call_method1("set_result", (py.None(),))?;
    Ok(future)
}
