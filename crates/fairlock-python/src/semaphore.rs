//! `fairlock.Semaphore`: at most `value` holders at once across threads and processes, granted
//! in arrival order, in the shape of `threading.Semaphore` (`BoundedSemaphore`: a release with
//! no permit held raises). Permits are the object's, not a thread's: any thread may release
//! one (the library's `SemaphorePermit` is `Send`).

use std::ffi::OsString;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fairlock::{Error, FairLock, FairSemaphore, ProcessGuard, SemaphorePermit};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::acquire::{Wait, try_then_wait, wait_with_signals};
use crate::async_acquire::{self as asynchronous, Keep};
use crate::errors;
use crate::held;
use crate::lock_object::{LockPath, duration, name_of};

/// A strictly fair counting semaphore shared by threads and processes through the lock file at
/// ``path``: at most ``value`` holders at once, served in arrival order (a waiter is never
/// overtaken).
///
/// ``Semaphore(path, value=1, *, name=None, lease=None)`` opens the file, creating it (mode
/// 0600) if needed; every user of the file must give the same ``value`` (another raises
/// ``fairlock.IncompatibleLockFile`` naming both). ``acquire(blocking=True, timeout=None)``
/// and ``release(n=1)`` as ``threading.Semaphore``'s, and ``with``:
///
///     gpu = fairlock.Semaphore("/run/myapp/gpu.lock", 2)
///     with gpu:
///         ...            # at most 2 processes here at once
///
/// A permit belongs to this object, not to a thread: any thread may release it. Releasing more
/// than this object acquired raises ``ValueError`` (as ``threading.BoundedSemaphore``: a
/// semaphore shared through a file cannot grow). Dropping the object does not give its permits
/// back (as a ``Lock``'s grant outlives its object): ``release()`` or the process's exit does.
/// A process that dies holding permits gives them back (the next grant is told
/// ``owner_died``, see ``owner_died``). ``name``: the semaphore of that name in a file of named
/// locks. With a ``lease``, each permit has its own lease: a process may hold several leased
/// permits at once, from one thread or many. ``await sem.acquire_async(timeout=None)`` and
/// ``async with sem:`` wait for a permit without blocking the event loop (asyncio).
#[pyclass(frozen, weakref, module = "fairlock", name = "Semaphore")]
pub(crate) struct Semaphore {
    // Declared before `sem`: fields drop in order, so the permits are given back while the
    // semaphore they borrow from is alive.
    /// The permits this object holds, oldest first, each with the fork generation it was
    /// acquired in (a forked child's inherited permits are its parent's).
    permits: Mutex<Vec<(u64, Permit)>>,
    sem: Arc<FairSemaphore>,
    value: u32,
    name: Option<String>,
    lease: Option<Duration>,
    /// Whether the last permit acquired was told its previous holder died.
    last_grant: Mutex<Option<(u64, bool)>>,
}

/// A permit this object holds: taken by `acquire()` (a thread's wait), or by
/// `acquire_async()` (the process's grant, made on the library's waiter thread).
enum Permit {
    Taken(SemaphorePermit<'static>),
    Process(ProcessGuard),
}

impl Permit {
    fn unlock(self) -> fairlock::Result<()> {
        match self {
            Permit::Taken(p) => p.unlock(),
            Permit::Process(g) => g.unlock(),
        }
    }
}

/// Where an `acquire_async()` permit goes: the object's permits.
struct Permits(Py<Semaphore>);

impl Keep for Permits {
    fn keep(&self, grant: ProcessGuard) {
        let sem = self.0.get();
        sem.remember(grant.token(), grant.owner_died());
        sem.permits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((held::fork_generation(), Permit::Process(grant)));
    }
}

impl Semaphore {
    fn remember(&self, token: u64, owner_died: bool) {
        *self.last_grant.lock().unwrap_or_else(|e| e.into_inner()) = Some((token, owner_died));
    }

    /// Keeps `permit`, taken from `self.sem`.
    fn keep(&self, permit: SemaphorePermit<'_>) {
        // SAFETY: `permit` borrows from the `FairSemaphore` in `self.sem`, an `Arc` whose heap
        // allocation never moves and lives as long as `self`; the permits are dropped before
        // `sem` (field order), or taken out and dropped while `self` (and so `sem`) is alive.
        // `'static` is never observable: permits are only dropped or unlocked.
        let permit =
            unsafe { std::mem::transmute::<SemaphorePermit<'_>, SemaphorePermit<'static>>(permit) };
        self.remember(permit.token(), permit.owner_died());
        self.permits
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((held::fork_generation(), Permit::Taken(permit)));
    }

    /// Waits in line with the GIL released; a signal handler that raises (Ctrl-C on the main
    /// thread) stops the wait and gives the place up.
    fn wait(&self, py: Python<'_>, deadline: Option<Instant>) -> PyResult<bool> {
        wait_with_signals(
            py,
            |stop| self.sem.acquire_interruptible(deadline, stop),
            |permit| self.keep(permit),
            |permit| {
                let _ = permit.unlock();
            },
        )
    }
}

#[pymethods]
impl Semaphore {
    #[new]
    #[pyo3(signature = (path, value = 1, *, name = None, lease = None))]
    fn new(
        py: Python<'_>,
        path: LockPath,
        value: i64,
        name: Option<&Bound<'_, PyAny>>,
        lease: Option<f64>,
    ) -> PyResult<Semaphore> {
        let value = u32::try_from(value)
            .ok()
            .filter(|v| *v >= 1)
            .ok_or_else(|| {
                PyValueError::new_err(format!(
                    "semaphore initial value must be at least 1 (a semaphore shared through a file has its permits from the start), not {value}"
                ))
            })?;
        let name = name_of(name)?;
        let lease = lease.map(|s| duration("lease", s)).transpose()?;
        let LockPath(path) = path;
        let sem = py
            .detach(|| {
                let mut o = FairLock::options();
                if let Some(d) = lease {
                    o.lease(d);
                }
                if let Some(n) = &name {
                    o.name(n.as_str());
                }
                o.open_semaphore(&path, value)
            })
            .map_err(|e| errors::to_py(py, e))?;
        Ok(Semaphore {
            permits: Mutex::new(Vec::new()),
            sem: Arc::new(sem),
            value,
            name,
            lease,
            last_grant: Mutex::new(None),
        })
    }

    /// Takes a permit, waiting in line (``threading.Semaphore.acquire``'s arguments): without
    /// ``blocking``, only if one is free and nobody waits; with a ``timeout`` (seconds), at
    /// most that long. True if a permit was taken.
    #[pyo3(signature = (blocking = true, timeout = None))]
    fn acquire(&self, py: Python<'_>, blocking: bool, timeout: Option<f64>) -> PyResult<bool> {
        if !blocking && timeout.is_some() {
            return Err(PyValueError::new_err(
                "can't specify timeout for non-blocking acquire",
            ));
        }
        if let Some(t) = timeout
            && t.is_nan()
        {
            return Err(PyValueError::new_err("Invalid value NaN (not a number)"));
        }
        let wait = match timeout {
            _ if !blocking => Wait::Try,
            None => Wait::Forever,
            Some(t) if t <= 0.0 => Wait::Try,
            // Beyond what the clock counts: no limit.
            Some(t) => Duration::try_from_secs_f64(t)
                .ok()
                .and_then(|d| Instant::now().checked_add(d))
                .map_or(Wait::Forever, Wait::Until),
        };
        try_then_wait(
            py,
            wait,
            || self.sem.try_acquire(),
            |p| self.keep(p),
            |deadline| self.wait(py, deadline),
        )
    }

    /// Gives ``n`` permits back (any thread may). ``ValueError`` if this object holds fewer;
    /// ``fairlock.LockLost`` if a permit's lease had been taken over (or it was inherited
    /// through ``fork``: it is the parent's, and is not released).
    #[pyo3(signature = (n = 1))]
    fn release(&self, py: Python<'_>, n: i64) -> PyResult<()> {
        if n < 1 {
            return Err(PyValueError::new_err("n must be one or more"));
        }
        let taken: Vec<(u64, Permit)> = {
            let mut permits = self.permits.lock().unwrap_or_else(|e| e.into_inner());
            let inherited = forget_inherited(&mut permits);
            if (permits.len() as i64) < n {
                if inherited && permits.is_empty() {
                    // Only the parent's permits: not this process's to give back.
                    return Err(errors::to_py(
                        py,
                        Error::LockLost {
                            path: self.sem.path().to_path_buf(),
                        },
                    ));
                }
                return Err(PyValueError::new_err("Semaphore released too many times"));
            }
            permits.drain(..n as usize).collect()
        };
        let mut lost = None;
        for (_, p) in taken {
            if let Err(e) = py.detach(|| p.unlock()) {
                lost = Some(e);
            }
        }
        match lost {
            Some(e) => Err(errors::to_py(py, e)),
            None => Ok(()),
        }
    }

    /// How many permits this object holds (in a forked child: its own, not its parent's).
    #[getter]
    fn held(&self) -> usize {
        let mut permits = self.permits.lock().unwrap_or_else(|e| e.into_inner());
        forget_inherited(&mut permits);
        permits.len()
    }

    /// The semaphore's number of permits.
    #[getter]
    fn value(&self) -> u32 {
        self.value
    }

    /// The fencing token of the last permit this object acquired (``RuntimeError`` if none
    /// yet).
    #[getter]
    fn token(&self) -> PyResult<u64> {
        self.last()
            .map(|(t, _)| t)
            .ok_or_else(|| PyRuntimeError::new_err("no permit acquired yet"))
    }

    /// Whether the last permit this object acquired was told that a holder before it died
    /// (or lost its lease) instead of giving its permit back.
    #[getter]
    fn owner_died(&self) -> PyResult<bool> {
        self.last()
            .map(|(_, d)| d)
            .ok_or_else(|| PyRuntimeError::new_err("no permit acquired yet"))
    }

    /// Waits in line for a permit without blocking the event loop (asyncio): ``await
    /// sem.acquire_async()`` returns True once this object holds one more permit, as
    /// ``acquire()`` would; ``timeout`` (seconds) gives the place up and returns False when
    /// the time is out. The waiting is done by a thread of the library's own; the place in line
    /// is taken at the call. Cancelling the awaiting task gives the place up at once (or the
    /// permit back, if it had arrived). ``async with sem:`` does the same.
    #[pyo3(signature = (timeout = None))]
    fn acquire_async<'py>(
        slf: &Bound<'py, Self>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let me = slf.get();
        asynchronous::acquire(
            slf.py(),
            |t| match t {
                Some(d) => me.sem.acquire_async_timeout(d),
                None => me.sem.acquire_async(),
            },
            Arc::new(Permits(slf.clone().unbind())),
            slf.getattr("release")?,
            timeout,
        )
    }

    fn __aenter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        Self::acquire_async(slf, None)
    }

    #[pyo3(signature = (*_exc))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _exc: &Bound<'_, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.release(py, 1)?;
        asynchronous::done(py)
    }

    fn __enter__(&self, py: Python<'_>) -> PyResult<bool> {
        self.acquire(py, true, None)
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<()> {
        self.release(py, 1)
    }

    fn __repr__(&self) -> String {
        let name = self
            .name
            .as_ref()
            .map_or_else(String::new, |n| format!(", name={n:?}"));
        format!(
            "<fairlock.Semaphore '{}'{name}, value={}, {} held by this object>",
            self.sem.path().display(),
            self.value,
            self.held()
        )
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let reopen = py
            .import("fairlock._fairlock")?
            .getattr("_reopen_semaphore")?;
        let path: OsString = self.sem.path().as_os_str().to_owned();
        let args = (
            path,
            self.value,
            self.name.clone(),
            self.lease.map(|d| d.as_secs_f64()),
        )
            .into_pyobject(py)?;
        (reopen, args).into_pyobject(py)
    }
}

/// Permits of `Semaphore` objects dropped while holding them: kept (with their semaphore) until
/// the process exits, as a `Lock` object's grant outlives the object (it stays in its thread's
/// table) and as diskcache's semaphore count stays taken.
struct Orphan {
    // Before `_sem`: see `Semaphore`'s fields.
    _permits: Vec<(u64, Permit)>,
    _sem: Arc<FairSemaphore>,
}

static ORPHANS: Mutex<Vec<Orphan>> = Mutex::new(Vec::new());

impl Drop for Semaphore {
    fn drop(&mut self) {
        let permits = std::mem::take(self.permits.get_mut().unwrap_or_else(|e| e.into_inner()));
        if !permits.is_empty() {
            ORPHANS
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Orphan {
                    _permits: permits,
                    _sem: Arc::clone(&self.sem),
                });
        }
    }
}

impl Semaphore {
    fn last(&self) -> Option<(u64, bool)> {
        *self.last_grant.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Takes the permits inherited through `fork` (the parent's: the library releases nothing of
/// them in the child) out of `permits`, so that a child's `release()` gives back its own; true
/// if there were any.
fn forget_inherited(permits: &mut Vec<(u64, Permit)>) -> bool {
    let generation = held::fork_generation();
    let before = permits.len();
    permits.retain_mut(|(g, _)| *g == generation);
    // `retain_mut` drops the others: dropping a permit in the child releases nothing (the
    // library refuses to release a parent's grant), as forgetting it would.
    permits.len() != before
}

/// Unpickles a `Semaphore` (with no permits: permits are not pickled).
#[pyfunction]
#[pyo3(signature = (path, value, name = None, lease = None))]
pub(crate) fn _reopen_semaphore(
    py: Python<'_>,
    path: LockPath,
    value: i64,
    name: Option<&Bound<'_, PyAny>>,
    lease: Option<f64>,
) -> PyResult<Semaphore> {
    Semaphore::new(py, path, value, name, lease)
}
