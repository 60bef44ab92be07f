//! A read-only snapshot of a lock file: who holds it, who waits, for how long.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::api::options::Fairness;
use crate::core::queue::frontier::{before, first_unfinished};
use crate::core::state::lease::Lease;
use crate::core::state::slot_word::ticket_of;
use crate::core::state::slot_word::{LapRelation, lap_of, relate};
use crate::core::state::{Kind, RecordKind};
use crate::core::{Liveness, State};
use crate::error::Result;
use crate::file::{ReadOnlyView, open_read_only};
use crate::process::view::PROCESS_TID;
use crate::sys::clock;

/// One ticket in the queue, as seen by [`inspect`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TicketInfo {
    /// The ticket number.
    pub ticket: u64,
    /// The fencing token a grant of this ticket carries: `ticket + 1`, or in a file with a
    /// bypass bound ([`Fairness::Bounded`]) `(ticket + 1) · 512`, plus a barge's number among
    /// the barges since the queue's head arrived.
    pub token: u64,
    /// Its state: `held`, `granted`, `ready`, `waiting` or `sleeping`.
    pub state: &'static str,
    /// The owning process's pid (in its pid namespace), when known.
    pub pid: Option<u32>,
    /// The owning thread's id, when known; `None` for a grant of a process rather than a
    /// thread (a [`ProcessGuard`](crate::ProcessGuard)).
    pub tid: Option<u32>,
    /// Whether the owning process is alive (its beacon is held); `None` when the owner is not
    /// known (a ticket granted in advance) or cannot be probed. A dead holder or waiter is
    /// passed over by the next acquire of any kind (`lock`, `try_lock`, `fairlock run -n`),
    /// and the next holder is told `owner_died`.
    pub alive: Option<bool>,
    /// How long it has been in this state (held for / waiting for), when known; coarse.
    pub elapsed: Option<Duration>,
    /// For a holder with a lease: how long until it may be taken over (zero if overdue).
    pub lease_remaining: Option<Duration>,
    /// The previous holder did not release (died or was taken over).
    pub owner_died: bool,
    /// A shared ticket: a reader of a [`FairRwLock`](crate::FairRwLock) or a permit of a
    /// [`FairSemaphore`](crate::FairSemaphore) (false for a writer and for exclusive locks).
    pub shared: bool,
}

/// The kind of lock a file holds, as [`inspect`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockKind {
    /// `FairLock`, `FairRLock`, `FairMutex`, `fairlock run`: one holder at a time.
    Exclusive,
    /// `FairRwLock`: readers together, a writer alone.
    RwLock,
    /// `FairSemaphore`: at most `permits` holders.
    Semaphore {
        /// The number of permits.
        permits: u32,
    },
    /// A file of named locks: each name's lock is in [`Status::names`].
    Names,
}

impl LockKind {
    fn of(k: RecordKind) -> LockKind {
        match k.kind {
            Kind::Exclusive => LockKind::Exclusive,
            Kind::RwLock => LockKind::RwLock,
            Kind::Semaphore => LockKind::Semaphore { permits: k.permits },
        }
    }

    /// A short name: `exclusive`, `rwlock` or `semaphore`.
    pub fn name(&self) -> &'static str {
        match self {
            LockKind::Exclusive => "exclusive",
            LockKind::RwLock => "rwlock",
            LockKind::Semaphore { .. } => "semaphore",
            LockKind::Names => "names",
        }
    }
}

/// A snapshot of a lock file. Taking it never writes to the file or takes any lock.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Status {
    /// The lock file.
    pub path: PathBuf,
    /// The lock's name, for a lock in a file of named locks.
    pub name: Option<String>,
    /// The kind of lock ([`LockKind::Names`] for a file of named locks).
    pub kind: LockKind,
    /// The exclusive lock's fairness, fixed when the lock was created — its file, or for a
    /// named lock its name's record ([`OpenOptions::fairness`](crate::OpenOptions::fairness)):
    /// [`Fairness::Bounded`] with its bound, or [`Fairness::Strict`] (also for the other kinds
    /// and for the top level of a file of names).
    pub fairness: Fairness,
    /// Tickets handed out so far.
    pub next_ticket: u64,
    /// The holder (or the ticket granted and about to claim), if any; for a reader/writer lock
    /// or a semaphore, the first of [`holders`](Status::holders).
    pub holder: Option<TicketInfo>,
    /// Every holder (and ticket granted and about to claim), in ticket order: at most one for
    /// an exclusive lock, every reader holding together, every permit holder.
    pub holders: Vec<TicketInfo>,
    /// Published waiters, in ticket (= grant) order.
    pub waiters: Vec<TicketInfo>,
    /// Tickets taken whose owner has not published itself yet (arriving, or died arriving).
    pub arriving: u64,
    /// For a file of named locks: every name in use (or not yet reclaimed), each with its own
    /// status, in the file's order; empty otherwise.
    pub names: Vec<Status>,
}

impl Status {
    /// The holder's fencing token, or if the lock is free, the smallest token the next grant
    /// can carry. With a bypass bound, while the holder shown is a ticket granted but not yet
    /// claimed, a barge may still take the lock ahead of it with a smaller token (between the
    /// previous grant's and this one's). Meaningless (1) for the top level of a file of names:
    /// see each of [`names`](Status::names).
    pub fn token(&self) -> u64 {
        let bound = self.fairness.bypass_bound().unwrap_or(0);
        self.holder.as_ref().map_or(
            crate::core::state::token_of(bound, self.next_ticket, 0),
            |h| h.token,
        )
    }
}

/// Reads the state of the lock file at `path` without disturbing it (read-only open and
/// mapping; no beacon, no ticket; liveness probed with `F_OFD_GETLK`, which takes nothing).
///
/// # Errors
/// As [`crate::OpenOptions::open`], except that a missing or uninitialised file is an error.
pub fn inspect(path: impl AsRef<Path>) -> Result<Status> {
    let path = path.as_ref();
    let view = open_read_only(path)?;
    if view.is_names() {
        return Ok(Status {
            path: path.to_path_buf(),
            name: None,
            kind: LockKind::Names,
            fairness: Fairness::Strict,
            next_ticket: 0,
            holder: None,
            holders: Vec::new(),
            waiters: Vec::new(),
            arriving: 0,
            names: view
                .named()
                .into_iter()
                .map(|(name, v)| Status {
                    name: Some(name),
                    ..snapshot(path, &v)
                })
                .collect(),
        });
    }
    Ok(snapshot(path, &view))
}

/// Builds the snapshot by walking from the first unfinished ticket to the last (at most `N`).
fn snapshot(path: &Path, v: &ReadOnlyView) -> Status {
    let g = v.geometry();
    let shift = g.slot_shift();
    let next = v.next_ticket();
    let weighted = g.kind.is_weighted();
    let lw = v.lock_word();
    // Nobody queued: no slot is in use (those of fast tickets show older laps).
    let front = if lw.queued() {
        first_unfinished(v.head(), next, shift, !weighted, |t| v.word(t))
    } else {
        next
    };
    let now = clock::coarse_ns();
    let now_ms = clock::monotonic_ns() / 1_000_000;
    let span = next.wrapping_sub(front).min(u64::from(g.slots));
    let mut status = Status {
        path: path.to_path_buf(),
        name: None,
        kind: LockKind::of(g.kind),
        fairness: Fairness::of_bound(g.kind.bypass_bound()),
        next_ticket: next,
        holder: None,
        holders: Vec::new(),
        waiters: Vec::new(),
        arriving: 0,
        names: Vec::new(),
    };
    // The tickets to look at: from the front, at most `N` of them; for the weighted kinds also
    // every ticket some slot shows unfinished, wherever it is (a shared taker that retook a
    // ticket may be granted more than `N` tickets after a long-held share at the front).
    let mut tickets: Vec<u64> = (0..=span).map(|k| front.wrapping_add(k)).collect();
    if weighted {
        for i in 0..u64::from(g.slots) {
            let w = v.word(i);
            if w.state().is_some_and(|st| !st.is_final()) {
                let t = ticket_of(w.lap(), i, shift, next);
                if before(t, next) && !before(t, front) && !tickets.contains(&t) {
                    tickets.push(t);
                }
            }
        }
        tickets.sort_by_key(|&t| t.wrapping_sub(front));
    }
    if lw.held() {
        // The fast holder: the ticket before the first queued one (`head`) while someone
        // queues, else the one before the counter.
        let t = if lw.queued() { v.head() } else { next }.wrapping_sub(1);
        let (stamp, since, tid) = v.fast_stamps();
        let stamped = stamp == t.wrapping_add(1);
        // A barge's token carries its number among the barges ahead of `head`: the word's count
        // since the head's arrival (if the head's slot still names it).
        let h = t.wrapping_add(1);
        let bypass = if lw.barged() && v.stamps(h).0 == h.wrapping_add(1) {
            crate::core::exclusive::barge::arrival(v.beacon_field(h)).map_or(0, |a| {
                crate::core::exclusive::barge::since(lw.barges(), a) as u16
            })
        } else {
            0
        };
        let info = TicketInfo {
            ticket: t,
            token: crate::core::state::token_of(g.kind.bypass_bound(), t, bypass),
            state: State::Held.name(),
            pid: v.pid(lw.holder()).filter(|pid| *pid != 0),
            tid: (stamped && tid != PROCESS_TID).then_some(tid),
            alive: v.liveness(lw.holder()).map(|l| l == Liveness::Alive),
            elapsed: stamped.then(|| Duration::from_nanos(now.saturating_sub(since))),
            lease_remaining: None,
            owner_died: false,
            shared: false,
        };
        status.holder = Some(info.clone());
        status.holders.push(info);
    }
    for t in tickets {
        let lap = lap_of(t, shift);
        let w = v.word(t);
        let Some(state) = w.state() else { continue };
        match relate(w.lap(), lap) {
            LapRelation::Same => {}
            LapRelation::Previous | LapRelation::Behind if state.is_final() && t != next => {
                status.arriving += 1;
                continue;
            }
            _ => continue,
        }
        if state.is_final() || (state == State::Ready && t == next) {
            continue;
        }
        let (stamp, since, tid) = v.stamps(t);
        let stamped = stamp == t.wrapping_add(1);
        let owner_known = state != State::Ready;
        let pid = owner_known
            .then(|| v.pid(w.participant()))
            .flatten()
            .filter(|pid| *pid != 0);
        let alive = owner_known
            .then(|| v.liveness(w.participant()))
            .flatten()
            .map(|l| l == Liveness::Alive);
        // The lease field is this ticket's only if the word says it is leased (read after the
        // field, as everywhere; a torn snapshot only mislabels a line of output).
        let lease_remaining = if w.leased() && state.is_granted() {
            match v.lease(t).lease() {
                Lease::Leased => v
                    .lease_deadline_ms(t)
                    .map(|d| Duration::from_millis(d.saturating_sub(now_ms))),
                Lease::Pending(ms) => Some(Duration::from_millis(ms)),
                Lease::Revoked => Some(Duration::ZERO),
                Lease::None => None,
            }
        } else {
            None
        };
        let info = TicketInfo {
            ticket: t,
            token: crate::core::state::token_of(g.kind.bypass_bound(), t, 0),
            state: state.name(),
            pid,
            tid: (stamped && tid != PROCESS_TID).then_some(tid),
            alive,
            elapsed: stamped.then(|| Duration::from_nanos(now.saturating_sub(since))),
            lease_remaining,
            owner_died: w.died(),
            shared: w.shared(),
        };
        if state.is_granted() {
            status.holder.get_or_insert_with(|| info.clone());
            status.holders.push(info);
        } else {
            status.waiters.push(info);
        }
    }
    status
}
