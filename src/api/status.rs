//! A read-only snapshot of a lock file: who holds it, who waits, for how long.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::time::Duration;

use crate::core::lease::Lease;
use crate::core::word::{LapRelation, relate};
use crate::core::{LockState, State, Word};
use crate::error::Result;
use crate::file::open_read_only;
use crate::sys::clock;

/// One ticket in the queue, as seen by [`inspect`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TicketInfo {
    /// The ticket number.
    pub ticket: u64,
    /// The fencing token a grant of this ticket carries (`ticket + 1`).
    pub token: u64,
    /// Its state: `held`, `granted`, `ready`, `waiting` or `sleeping`.
    pub state: &'static str,
    /// The owning process's pid (in its pid namespace), when known.
    pub pid: Option<u32>,
    /// The owning thread's id, when known.
    pub tid: Option<u32>,
    /// How long it has been in this state (held for / waiting for), when known; coarse.
    pub elapsed: Option<Duration>,
    /// For a holder with a lease: how long until it may be taken over (zero if overdue).
    pub lease_remaining: Option<Duration>,
    /// The previous holder did not release (died or was taken over).
    pub owner_died: bool,
}

/// A snapshot of a lock file. Taking it never writes to the file or takes any lock.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Status {
    /// The lock file.
    pub path: PathBuf,
    /// Tickets handed out so far.
    pub next_ticket: u64,
    /// The holder (or the ticket granted and about to claim), if any.
    pub holder: Option<TicketInfo>,
    /// Published waiters, in ticket (= grant) order.
    pub waiters: Vec<TicketInfo>,
    /// Tickets taken whose owner has not published itself yet (arriving, or died arriving).
    pub arriving: u64,
}

impl Status {
    /// The holder's fencing token, or if the lock is free, the smallest token the next grant
    /// can carry.
    pub fn token(&self) -> u64 {
        self.holder
            .as_ref()
            .map_or(self.next_ticket.wrapping_add(1), |h| h.token)
    }
}

/// Reads the state of the lock file at `path` without disturbing it (read-only open and
/// mapping; no beacon, no ticket).
///
/// # Errors
/// As [`crate::OpenOptions::open`], except that a missing or uninitialised file is an error.
pub fn inspect(path: impl AsRef<Path>) -> Result<Status> {
    let path = path.as_ref();
    let mapping = open_read_only(path)?;
    Ok(snapshot(path, &mapping.state()))
}

/// Builds the snapshot by walking from the head hint to the last ticket (at most `N`).
pub(crate) fn snapshot(path: &Path, st: &LockState<'_>) -> Status {
    let hdr = st.header();
    let next = hdr.next_ticket.load(Relaxed);
    let head = hdr.head.load(Relaxed);
    let now = clock::coarse_ns();
    let now_ms = clock::monotonic_ns() / 1_000_000;
    let span = next.wrapping_sub(head).min(st.slot_count());
    let mut status = Status {
        path: path.to_path_buf(),
        next_ticket: next,
        holder: None,
        waiters: Vec::new(),
        arriving: 0,
    };
    for k in 0..=span {
        let t = head.wrapping_add(k);
        let slot = st.slot(t);
        let lap = st.lap(t);
        let w = Word(slot.word.load(Acquire));
        let Some(state) = w.state() else { continue };
        match relate(w.lap(), lap) {
            LapRelation::Same => {}
            LapRelation::Previous if state.is_final() && t != next => {
                status.arriving += 1;
                continue;
            }
            _ => continue,
        }
        if state.is_final() || (state == State::Ready && t == next) {
            continue;
        }
        let stamped = slot.stamp.load(Relaxed) == t.wrapping_add(1);
        let pid = if state == State::Ready {
            None
        } else {
            st.participant(w.participant())
                .map(|p| p.pid.load(Relaxed))
                .filter(|pid| *pid != 0)
        };
        let lease_remaining = match Lease::decode(slot.lease.load(Relaxed), lap) {
            Lease::Until(ms) => Some(Duration::from_millis(ms.saturating_sub(now_ms))),
            Lease::Pending(ms) => Some(Duration::from_millis(ms)),
            Lease::Revoked => Some(Duration::ZERO),
            _ => None,
        };
        let info = TicketInfo {
            ticket: t,
            token: t.wrapping_add(1),
            state: state.name(),
            pid,
            tid: stamped.then(|| slot.tid.load(Relaxed)),
            elapsed: stamped
                .then(|| Duration::from_nanos(now.saturating_sub(slot.since.load(Relaxed)))),
            lease_remaining: if state.is_granted() {
                lease_remaining
            } else {
                None
            },
            owner_died: w.died(),
        };
        if state.is_granted() {
            status.holder.get_or_insert(info);
        } else {
            status.waiters.push(info);
        }
    }
    status
}
