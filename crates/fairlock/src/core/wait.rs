//! Acquiring: take a ticket, publish it, spin or park until the grant, claim it — and the
//! non-waiting forms (`try_lock`, a deadline already past), which recover what is stuck ahead
//! before they answer.

use super::advance::cas;
use super::claim::{Claim, claim_granted, claim_ready, stamp_since};
use super::layout::{LockState, Slot};
use super::platform::{Platform, Tuning};
use super::publish::{Published, publish};
use super::recover::{Ahead, INTERRUPT_POLL_NS, Watch, recover};
use super::word::{LapRelation, State, Word, relate};
use super::{Grant, Me, WaitError};
use crate::primitive::Ordering::Relaxed;
use crate::primitive::spin_step;

/// How many times in a row a waiter may find its ticket skipped before we call the file
/// corrupt. A live waiter is skipped only when it stalls for longer than the grace between
/// taking its ticket and publishing it (or, with a lease, between its grant and its claim),
/// so a handful of retries is already extraordinary.
const MAX_RETAKES: u32 = 1000;

/// Acquires the lock: takes a ticket and waits for its grant, until `deadline` (on
/// [`Platform::now_ns`]'s clock) if given. A waiter that times out gives its ticket up, so
/// nobody behind it waits for it; a grant that races the timeout wins. Before it gives up,
/// it recovers what is stuck ahead (a dead holder, a dead grantee, a pre-grant nobody claims),
/// so even a deadline already past gets a lock that only the dead were keeping.
#[inline(always)]
pub fn lock<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    me: &Me,
    deadline: Option<u64>,
    tuning: &Tuning,
) -> Result<Grant, WaitError> {
    // Relaxed: a ticket is only a number; synchronisation is on the slot words.
    let t = st.header().next_ticket.fetch_add(1, Relaxed);
    crate::crash_point!("acquire.ticket_taken");
    if me.lease_ms.is_none()
        && !st.is_weighted()
        && let Some(g) = claim_ready(st, t, me.participant)
    {
        return Ok(g);
    }
    lock_contended(st, p, me, deadline, tuning, t)
}

/// The rest of [`lock`] once the fast claim of ticket `first` failed: publish, wait, claim.
#[cold]
#[inline(never)]
pub fn lock_contended<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    me: &Me,
    deadline: Option<u64>,
    tuning: &Tuning,
    first: u64,
) -> Result<Grant, WaitError> {
    lock_watched(st, p, me, deadline, tuning, first, Watch::default())
}

/// [`lock_contended`] with a [`Watch`] of the caller's: one made by
/// [`Watch::interruptible`] gives the ticket up (as at the deadline) once its hook says so,
/// with [`WaitError::Interrupted`]. A grant that races the interruption wins: the caller then
/// holds the lock.
#[allow(clippy::too_many_arguments)]
pub fn lock_watched<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    me: &Me,
    deadline: Option<u64>,
    tuning: &Tuning,
    first: u64,
    mut watch: Watch<'_>,
) -> Result<Grant, WaitError> {
    let mut t = first;
    for _ in 0..MAX_RETAKES {
        match publish(st, p, t, me, deadline, tuning, &mut watch)? {
            Published::Held(g) => return Ok(g),
            // Our ticket is gone (we stalled past the grace, or our pending lease was revoked):
            // queue again with a new ticket, below. (Retrying the old one was a bug.)
            Published::Skipped => {}
            Published::Waiting(w) => {
                if let Some(g) = wait_for_grant(st, p, t, w, me, deadline, tuning, &mut watch)? {
                    return Ok(g);
                }
            }
        }
        // Relaxed: as in `lock`.
        t = st.header().next_ticket.fetch_add(1, Relaxed);
    }
    Err(WaitError::Corrupt("our ticket was skipped over and over"))
}

/// How many recover-and-look rounds `try_lock` makes when a round found the way clear but the
/// next ticket not (yet) granted in advance — someone else's ticket raced ours.
const TRY_ROUNDS: u32 = 8;

/// Takes the lock only if nobody live holds it or waits for it: then the next ticket's slot is
/// `Ready`, and we take that ticket with a CAS on `next_ticket` (never joining the queue).
///
/// Before it answers "busy" it recovers what only the dead are keeping: a dead holder is
/// revoked, a dead waiter or grantee skipped, an expired lease taken over. A pre-grant that its
/// taker has not claimed yet is waited for — the taker claims within nanoseconds, or it died
/// between taking its ticket and claiming it — for at most one grace in all, after which it is
/// skipped (and `try_lock` answers with whatever that leaves).
pub fn try_lock<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    me: &Me,
    tuning: &Tuning,
) -> Result<Option<Grant>, WaitError> {
    if st.is_weighted() {
        return try_weighted(st, p, me, tuning);
    }
    let hdr = st.header();
    let mut watch = Watch::default();
    let mut rounds = 0;
    // Waiting for unclaimed pre-grants is bounded by one grace in all, not one per ticket: a
    // run of tickets whose takers gave up or died unrecorded would otherwise hold `try_lock`
    // for a grace each.
    // Counted from the first unclaimed pre-grant's first sighting, and checked against the
    // time a pass *started*, so that the pass that decides has seen that one's grace out.
    let mut give_up_at: Option<u64> = None;
    loop {
        let started = p.now_ns();
        let t = hdr.next_ticket.load(Relaxed);
        // Relaxed: only a pre-check; the claim re-reads with Acquire.
        let w = Word(st.slot(t).word.load(Relaxed));
        if relate(w.lap(), st.lap(t)) == LapRelation::Same && w.state() == Some(State::Ready) {
            return take_free_ticket(st, p, t, me, tuning, &mut watch);
        }
        match recover(st, p, t, &mut watch, tuning) {
            Ahead::Busy => return Ok(None),
            Ahead::Clear => {
                rounds += 1;
                if rounds > TRY_ROUNDS {
                    return Ok(None);
                }
            }
            Ahead::Unclaimed(seen) => {
                let now = p.now_ns();
                let limit = *give_up_at
                    .get_or_insert(now.saturating_sub(seen).saturating_add(tuning.grace_ns));
                if started >= limit {
                    return Ok(None);
                }
                p.pause(Some(now.saturating_add(100_000).min(limit)));
            }
        }
    }
}

/// `try_lock` for a weighted kind (see [`super::weighted`]): after a recovery pass, takes a
/// ticket only if it would be granted at once — everything unfinished ahead is granted and it
/// fits next to them — and then waits with a deadline already past, so that a taker that raced
/// in ahead makes it give the ticket up rather than wait. Never jumps the queue.
fn try_weighted<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    me: &Me,
    tuning: &Tuning,
) -> Result<Option<Grant>, WaitError> {
    let mut watch = Watch::default();
    let mut give_up_at: Option<u64> = None;
    for _ in 0..TRY_ROUNDS {
        let started = p.now_ns();
        // Relaxed: a ticket is only a number.
        let t = st.header().next_ticket.load(Relaxed);
        let ahead = recover(st, p, t, &mut watch, tuning);
        if super::weighted::admits(st, p, t, me.shared) {
            if st
                .header()
                .next_ticket
                .compare_exchange(t, t.wrapping_add(1), Relaxed, Relaxed)
                .is_err()
            {
                continue; // someone took it first: look again
            }
            crate::crash_point!("acquire.ticket_taken");
            return match lock_watched(st, p, me, Some(0), tuning, t, watch) {
                Ok(g) => Ok(Some(g)),
                Err(WaitError::Timeout) => Ok(None),
                Err(e) => Err(e),
            };
        }
        match ahead {
            // A ticket ahead is taken but not yet published: its taker publishes within
            // nanoseconds, or died (then it is passed after the grace, as in `try_lock`).
            Ahead::Unclaimed(seen) => {
                let now = p.now_ns();
                let limit = *give_up_at
                    .get_or_insert(now.saturating_sub(seen).saturating_add(tuning.grace_ns));
                if started >= limit {
                    return Ok(None);
                }
                p.pause(Some(now.saturating_add(100_000).min(limit)));
            }
            _ => return Ok(None),
        }
    }
    Ok(None)
}

/// `try_lock` found ticket `t` pre-granted: take it (CAS on `next_ticket`) and claim it.
fn take_free_ticket<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    t: u64,
    me: &Me,
    tuning: &Tuning,
    watch: &mut Watch<'_>,
) -> Result<Option<Grant>, WaitError> {
    if st
        .header()
        .next_ticket
        .compare_exchange(t, t.wrapping_add(1), Relaxed, Relaxed)
        .is_err()
    {
        return Ok(None); // someone took it first: they are ahead of us
    }
    crate::crash_point!("acquire.ticket_taken");
    if me.lease_ms.is_none()
        && let Some(g) = claim_ready(st, t, me.participant)
    {
        return Ok(Some(g));
    }
    // Ticket `t` is ours and was Ready: only we can claim it (or a grace skip, if we stall).
    match publish(st, p, t, me, Some(0), tuning, watch)? {
        Published::Held(g) => Ok(Some(g)),
        Published::Skipped => Ok(None),
        Published::Waiting(w) => {
            // Not reachable in a consistent file (the slot was Ready for our lap); give the
            // ticket back so nobody waits for it.
            if !cas(st.slot(t), w, w.with_state(State::Abandoned)) {
                return Err(WaitError::Corrupt("try_lock ticket changed under us"));
            }
            Ok(None)
        }
    }
}

/// Waits for the grant of our published ticket `t`. `Ok(None)`: the ticket was skipped.
#[allow(clippy::too_many_arguments)]
fn wait_for_grant<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    t: u64,
    mine: Word,
    me: &Me,
    deadline: Option<u64>,
    tuning: &Tuning,
    watch: &mut Watch<'_>,
) -> Result<Option<Grant>, WaitError> {
    let slot = st.slot(t);
    // Spin when we first find ourselves next in line, and again whenever an advancer nudges
    // us (`Sleeping → Waiting`); not after every timed wake-up.
    let mut may_spin = true;
    let mut head_poll = tuning.head_poll_min_ns / 2;
    let mut last = mine;
    // The deadline may be pushed back once, by at most the grace, to tell a pre-grant whose
    // taker is about to claim it from one whose taker died (see `try_lock`).
    let mut deadline = deadline;
    let mut recovered_at_deadline = false;
    loop {
        let w = match claim_granted(st, p, t, me)? {
            Claim::Held(g) => {
                stamp_since(p, slot);
                return Ok(Some(g));
            }
            Claim::Lost => return Ok(None),
            Claim::NotGranted(w) => w,
        };
        if w.state() == Some(State::Waiting) && last.state() == Some(State::Sleeping) {
            may_spin = true;
        }
        last = w;
        let now = p.now_ns();
        if deadline.is_some_and(|d| now >= d) {
            if !recovered_at_deadline {
                // One last look before giving up: what only the dead keep from us is ours.
                recovered_at_deadline = true;
                if let Ahead::Unclaimed(seen) = recover(st, p, t, watch, tuning) {
                    deadline = Some(now.saturating_add(tuning.grace_ns.saturating_sub(seen)));
                }
                continue;
            }
            // Timeout and grant race on this CAS: if the grant won, we own the lock.
            crate::crash_point!("timeout.abandoning");
            if cas(slot, w, w.with_state(State::Abandoned)) {
                crate::crash_point!("timeout.abandoned");
                if st.is_weighted() {
                    // Ours may have been the ticket that held back those behind it (a writer
                    // behind readers): walk, so that whatever fits now is granted.
                    super::weighted::advance(st, p);
                }
                return Err(watch.stopped());
            }
            continue;
        }
        let head = next_in_line(st, t);
        if head && may_spin {
            may_spin = false;
            if spin_while(p, slot, w, now.saturating_add(tuning.spin_ns), deadline) {
                continue;
            }
        }
        if watch.interrupted() {
            deadline = Some(0);
            continue;
        }
        // Whoever waits behind the holder watches it (and anything dead ahead of us).
        recover(st, p, t, watch, tuning);
        // The next in line polls soon after it got there (a young hold is checked often), then
        // less and less often, up to `head_poll_ns`; others rarely.
        let poll = if head {
            head_poll = head_poll.saturating_mul(2).min(tuning.head_poll_ns);
            head_poll
        } else {
            head_poll = tuning.head_poll_min_ns / 2;
            tuning.idle_poll_ns
        };
        let poll = if watch.has_hook() {
            poll.min(INTERRUPT_POLL_NS)
        } else {
            poll
        };
        let until = p.now_ns().saturating_add(poll);
        let until = deadline.map_or(until, |d| d.min(until));
        park(p, slot, w, until);
        if watch.interrupted() {
            deadline = Some(0);
        }
    }
}

/// Parks on our slot word: `Waiting → Sleeping` (so a grantor knows to wake us), then a futex
/// wait expecting the `Sleeping` value.
fn park<P: Platform>(p: &P, slot: &Slot, w: Word, until: u64) {
    let sleeping = w.with_state(State::Sleeping);
    if w.state() == Some(State::Waiting) && !cas(slot, w, sleeping) {
        return; // changed: re-read
    }
    crate::crash_point!("acquire.parking");
    p.wait(&slot.word, sleeping.futex_value(), Some(until));
}

/// Spins while our word stays `w`, until `until`. True if it changed.
fn spin_while<P: Platform>(p: &P, slot: &Slot, w: Word, until: u64, deadline: Option<u64>) -> bool {
    let until = deadline.map_or(until, |d| d.min(until));
    let mut i: u32 = 0;
    loop {
        // Relaxed: we only look for a change; the caller re-reads with Acquire.
        if slot.word.load(Relaxed) != w.0 {
            return true;
        }
        // The clock first (so a zero budget parks at once), then every 16 pauses.
        if i.is_multiple_of(16) && p.now_ns() >= until {
            return false;
        }
        i = i.wrapping_add(1);
        spin_step();
    }
}

/// Whether the ticket just before ours (looking past a few final ones) holds or is granted:
/// then we are next and worth spinning for.
fn next_in_line(st: &LockState<'_>, t: u64) -> bool {
    let limit = 4u64.min(st.slot_count() - 1);
    for k in 1..=limit {
        let u = t.wrapping_sub(k);
        // Relaxed: a heuristic (spin or park); correctness does not depend on it.
        let w = Word(st.slot(u).word.load(Relaxed));
        match (relate(w.lap(), st.lap(u)), w.state()) {
            (LapRelation::Same, Some(s)) if s.is_granted() => return true,
            (LapRelation::Same, Some(s)) if s.is_final() => continue,
            (LapRelation::Later, _) => continue,
            _ => return false,
        }
    }
    true
}
