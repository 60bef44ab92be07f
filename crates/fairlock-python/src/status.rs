//! `fairlock.status(path)`: `fairlock::inspect` as a dict with the keys and values of
//! `fairlock status --json` (crates/fairlock-cli/src/status.rs): durations in whole
//! milliseconds, `None` for what is not known.

use std::time::Duration;

use fairlock::{LockKind, Status, TicketInfo};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors;
use crate::lock_object::LockPath;

/// Who holds the lock file at `path`, who waits, for how long: a snapshot taken without
/// disturbing the lock (read-only; no ticket, no participant entry), as a dict with the keys
/// of `fairlock status --json`:
///
/// For a file of named locks: `path`, `kind` (`names`) and `names`, a list of such dicts, one
/// per name, each with a `name` key first. Otherwise:
///
/// `path`, `kind` (`exclusive`, `rwlock` or `semaphore`), `permits` (a semaphore's, else
/// `None`), `bypass_bound` (an exclusive lock created with a bounded bypass —
/// `fairlock::Fairness::Bounded` in Rust: the most times a waiter may be overtaken; `None` for
/// strict FIFO), `held`, `owner_pid`, `owner_tid`, `token` (the holder's, or the next grant's if
/// free), `next_ticket`, `waiters`, `arriving`, `lease_remaining_ms`, `holder` (a dict: `ticket`,
/// `token`, `state`, `pid`, `tid`, `alive`, `held_ms`, `lease_remaining_ms`, `owner_died`,
/// `shared`; or `None`), `holders` (every holder, as `holder`: readers hold together) and
/// `queue` (a list of dicts: `ticket`, `token`, `state`, `pid`, `tid`, `alive`, `waited_ms`,
/// `shared`).
///
/// Raises `fairlock.Error` if the file is missing or unreadable, `fairlock.NotALockFile` if
/// it is not a lock file.
#[pyfunction]
pub(crate) fn status(py: Python<'_>, path: LockPath) -> PyResult<Bound<'_, PyDict>> {
    let st = py
        .detach(|| fairlock::inspect(&path.0))
        .map_err(|e| errors::to_py(py, e))?;
    to_dict(py, &st)
}

fn ms(d: Option<Duration>) -> Option<u128> {
    d.map(|d| d.as_millis())
}

fn to_dict<'py>(py: Python<'py>, st: &Status) -> PyResult<Bound<'py, PyDict>> {
    if st.kind == LockKind::Names {
        let d = PyDict::new(py);
        d.set_item("path", st.path.as_os_str())?;
        d.set_item("kind", st.kind.name())?;
        let names = PyList::empty(py);
        for n in &st.names {
            names.append(to_dict(py, n)?)?;
        }
        d.set_item("names", names)?;
        return Ok(d);
    }
    let h = st.holder.as_ref();
    let d = PyDict::new(py);
    if let Some(name) = &st.name {
        d.set_item("name", name)?;
    }
    d.set_item("path", st.path.as_os_str())?;
    d.set_item("kind", st.kind.name())?;
    d.set_item(
        "permits",
        match st.kind {
            LockKind::Semaphore { permits } => Some(permits),
            _ => None,
        },
    )?;
    d.set_item("bypass_bound", st.fairness.bypass_bound())?;
    d.set_item("held", h.is_some())?;
    d.set_item("owner_pid", h.and_then(|h| h.pid))?;
    d.set_item("owner_tid", h.and_then(|h| h.tid))?;
    d.set_item("token", st.token())?;
    d.set_item("next_ticket", st.next_ticket)?;
    d.set_item("waiters", st.waiters.len())?;
    d.set_item("arriving", st.arriving)?;
    d.set_item("lease_remaining_ms", ms(h.and_then(|h| h.lease_remaining)))?;
    match h {
        Some(h) => d.set_item("holder", holder(py, h)?)?,
        None => d.set_item("holder", py.None())?,
    }
    let holders = PyList::empty(py);
    for h in &st.holders {
        holders.append(holder(py, h)?)?;
    }
    d.set_item("holders", holders)?;
    let queue = PyList::empty(py);
    for w in &st.waiters {
        queue.append(waiter(py, w)?)?;
    }
    d.set_item("queue", queue)?;
    Ok(d)
}

/// The fields every ticket has.
fn ticket<'py>(py: Python<'py>, t: &TicketInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("ticket", t.ticket)?;
    d.set_item("token", t.token)?;
    d.set_item("state", t.state)?;
    d.set_item("pid", t.pid)?;
    d.set_item("tid", t.tid)?;
    d.set_item("alive", t.alive)?;
    d.set_item("shared", t.shared)?;
    Ok(d)
}

fn holder<'py>(py: Python<'py>, h: &TicketInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = ticket(py, h)?;
    d.set_item("held_ms", ms(h.elapsed))?;
    d.set_item("lease_remaining_ms", ms(h.lease_remaining))?;
    d.set_item("owner_died", h.owner_died)?;
    Ok(d)
}

fn waiter<'py>(py: Python<'py>, w: &TicketInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = ticket(py, w)?;
    d.set_item("waited_ms", ms(w.elapsed))?;
    Ok(d)
}
