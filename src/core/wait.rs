//! Taking a ticket, publishing it, and waiting for the grant.

use super::advance::{advance, cas};
use super::layout::{LockState, Slot};
use super::lease::Lease;
use super::platform::{Platform, Tuning};
use super::recover::{Watch, recover};
use super::word::{LapRelation, State, Word, relate};
use super::{Grant, Me, WaitError};
use crate::primitive::Ordering::{AcqRel, Acquire, Relaxed};
use crate::primitive::spin_step;

/// How many times in a row a waiter may find its ticket skipped before we call the file
/// corrupt. A live waiter is skipped only when it stalls for longer than the grace between
/// taking its ticket and publishing it, so a handful of retries is already extraordinary.
const MAX_RETAKES: u32 = 1000;

/// Acquires the lock: takes a ticket and waits for its grant, until `deadline` (on
/// [`Platform::now_ns`]'s clock) if given. A waiter that times out gives its ticket up, so
/// nobody behind it waits for it; a grant that races the timeout wins.
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
        && let Some(g) = claim_ready(st, t, me.participant)
    {
        return Ok(g);
    }
    lock_contended(st, p, me, deadline, tuning, t)
}

/// The uncontended path, for a participant that asks for no lease (the caller checks): our
/// ticket was granted in advance with no died flag. One CAS, expecting exactly that `Ready`
/// word, claims it. `None` sends the caller to [`lock_contended`] with the same ticket.
#[inline(always)]
pub fn claim_ready(st: &LockState<'_>, t: u64, participant: u32) -> Option<Grant> {
    let slot = st.slot(t);
    let lap = st.lap(t);
    let ready = Word::new(lap, 0, State::Ready, false);
    let held = Word::new(lap, participant, State::Held, false);
    // AcqRel/Acquire: as the claim in `publish` (pairs with the grant's Release).
    slot.word
        .compare_exchange(ready.0, held.0, AcqRel, Acquire)
        .ok()?;
    crate::crash_point!("acquire.claimed");
    // Not a CAS: see `claimed`.
    slot.lease.store(Lease::None.encode(lap), Relaxed);
    // The informational fields (thread, since when) are left alone here: even the coarse
    // clock would cost a fifth of the uncontended path. `status` shows them only when `stamp`
    // names this ticket; a holder that wants them shown calls `LockGuard::stamp_time`.
    Some(Grant {
        ticket: t,
        died: false,
        leased: false,
    })
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
    let mut t = first;
    for _ in 0..MAX_RETAKES {
        match publish(st, p, t, me, deadline)? {
            Published::Held(g) => return Ok(g),
            // Our ticket is gone (we stalled past the grace, or our pending lease was revoked):
            // queue again with a new ticket, below. (Retrying the old one was a bug.)
            Published::Skipped => {}
            Published::Waiting(w) => {
                if let Some(g) = wait_for_grant(st, p, t, w, me, deadline, tuning)? {
                    return Ok(g);
                }
            }
        }
        // Relaxed: as in `lock`.
        t = st.header().next_ticket.fetch_add(1, Relaxed);
    }
    Err(WaitError::Corrupt("our ticket was skipped over and over"))
}

/// Takes the lock only if it is free and nobody is queued: then the next ticket's slot is
/// `Ready`, and we take that ticket with a CAS on `next_ticket` (never joining the queue).
pub fn try_lock<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    me: &Me,
) -> Result<Option<Grant>, WaitError> {
    let hdr = st.header();
    let t = hdr.next_ticket.load(Relaxed);
    // Relaxed: only a pre-check; `publish` re-reads with Acquire before claiming.
    let w = Word(st.slot(t).word.load(Relaxed));
    if relate(w.lap(), st.lap(t)) != LapRelation::Same || w.state() != Some(State::Ready) {
        return Ok(None);
    }
    if hdr
        .next_ticket
        .compare_exchange(t, t.wrapping_add(1), Relaxed, Relaxed)
        .is_err()
    {
        return Ok(None);
    }
    crate::crash_point!("acquire.ticket_taken");
    if me.lease_ms.is_none()
        && let Some(g) = claim_ready(st, t, me.participant)
    {
        return Ok(Some(g));
    }
    // Ticket `t` is ours and was Ready: only we can claim it (or a grace skip, if we stall).
    match publish(st, p, t, me, Some(0))? {
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

enum Published {
    /// The ticket was pre-granted and we claimed it.
    Held(Grant),
    /// We are a published waiter; the word is our `Waiting` value.
    Waiting(Word),
    /// Our ticket was skipped (we stalled past the grace before publishing): take another.
    Skipped,
}

/// Publishes ticket `t` in its slot, or claims it if it was granted in advance.
fn publish<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    t: u64,
    me: &Me,
    deadline: Option<u64>,
) -> Result<Published, WaitError> {
    let slot = st.slot(t);
    let lap = st.lap(t);
    loop {
        // Acquire: pairs with the Release CAS that made the slot Ready (the grant) or final
        // (the previous lap), so we see the previous holder's writes.
        let w = Word(slot.word.load(Acquire));
        // Read with the word: if the slot moves on while we stall, this value is stale and our
        // one CAS on the lease field below fails instead of overwriting a later ticket's lease.
        let lease_raw = slot.lease.load(Acquire);
        let state = w
            .state()
            .ok_or(WaitError::Corrupt("slot word has an unknown state"))?;
        match relate(w.lap(), lap) {
            LapRelation::Same => match state {
                State::Ready => {
                    if !announce_lease(slot, lap, lease_raw, me) {
                        continue;
                    }
                    let held = Word::new(lap, me.participant, State::Held, w.died());
                    if cas(slot, w, held) {
                        crate::crash_point!("acquire.claimed");
                        return Ok(match claimed(st, p, slot, t, me) {
                            true => Published::Held(Grant {
                                ticket: t,
                                died: w.died(),
                                leased: me.lease_ms.is_some(),
                            }),
                            false => Published::Skipped,
                        });
                    }
                }
                State::Skipped => return Ok(Published::Skipped),
                _ => return Err(WaitError::Corrupt("another owner published our ticket")),
            },
            LapRelation::Previous if state.is_final() && may_reuse(st, p, t, w) => {
                if !announce_lease(slot, lap, lease_raw, me) {
                    continue;
                }
                crate::crash_point!("acquire.lease_announced");
                let waiting = Word::new(lap, me.participant, State::Waiting, false);
                if cas(slot, w, waiting) {
                    crate::crash_point!("acquire.published");
                    stamp_owner(slot, t, me);
                    stamp_since(p, slot);
                    return Ok(Published::Waiting(waiting));
                }
            }
            LapRelation::Previous | LapRelation::Behind => {
                // More than N tickets are outstanding and an earlier ticket (t - N, or t - kN
                // with more than kN outstanding) still uses the slot, or is final but no grant
                // has passed it yet (see `passed`).
                // Poll until it is final. If we time out here the ticket stays unpublished and
                // is skipped after the grace, like the ticket of a taker that died.
                if deadline.is_some_and(|d| p.now_ns() >= d) {
                    return Err(WaitError::Timeout);
                }
                p.pause(deadline);
            }
            LapRelation::Later => return Ok(Published::Skipped),
        }
    }
}

/// Whether ticket `t` may reuse its slot, whose previous user `t - N` is final (`prev`).
///
/// A `Revoked` ticket (or a skipped grant that carried the died flag) is what tells the next
/// holder that the owner died; it must not be overwritten before an `advance` walked over it.
/// So such a slot is reused only once a grant has passed `t - N` (`head` beyond it); until
/// then we help: advance from `head` ourselves (which passes it, and may grant us in advance).
#[inline]
fn may_reuse<P: Platform>(st: &LockState<'_>, p: &P, t: u64, prev: Word) -> bool {
    let carries_death = prev.state() == Some(State::Revoked)
        || (prev.state() == Some(State::Skipped) && prev.died());
    if !carries_death {
        return true;
    }
    // Acquire: pairs with the Release store of `head` in `advance`, which read the previous
    // lap's final word before publishing a head beyond it.
    let head = st.header().head.load(Acquire);
    if t.wrapping_sub(head) < st.slot_count() {
        return true;
    }
    advance(st, p, head, false);
    false
}

/// Waits for the grant of our published ticket `t`. `Ok(None)`: the ticket was skipped.
fn wait_for_grant<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    t: u64,
    mine: Word,
    me: &Me,
    deadline: Option<u64>,
    tuning: &Tuning,
) -> Result<Option<Grant>, WaitError> {
    let slot = st.slot(t);
    let lap = st.lap(t);
    let mut watch = Watch::default();
    // Spin when we first find ourselves next in line, and again whenever an advancer nudges
    // us (`Sleeping → Waiting`); not after every timed wake-up.
    let mut may_spin = true;
    let mut head_poll = tuning.head_poll_min_ns / 2;
    let mut last = mine;
    loop {
        // Acquire: pairs with the grant CAS (Release), carrying the previous critical section.
        let w = Word(slot.word.load(Acquire));
        if relate(w.lap(), lap) != LapRelation::Same || w.participant() != me.participant {
            return Ok(None);
        }
        match w.state() {
            Some(State::Granted) => {
                crate::crash_point!("acquire.granted_seen");
                if cas(slot, w, w.with_state(State::Held)) {
                    crate::crash_point!("acquire.claimed");
                    if claimed(st, p, slot, t, me) {
                        stamp_since(p, slot);
                        return Ok(Some(Grant {
                            ticket: t,
                            died: w.died(),
                            leased: me.lease_ms.is_some(),
                        }));
                    }
                    return Ok(None);
                }
                continue;
            }
            Some(State::Waiting) => {
                if last.state() == Some(State::Sleeping) {
                    may_spin = true;
                }
            }
            Some(State::Sleeping) => {}
            Some(State::Skipped) => return Ok(None),
            _ => {
                return Err(WaitError::Corrupt(
                    "our slot changed to an impossible state",
                ));
            }
        }
        last = w;
        let now = p.now_ns();
        if deadline.is_some_and(|d| now >= d) {
            // Timeout and grant race on this CAS: if the grant won, we own the lock.
            crate::crash_point!("timeout.abandoning");
            if cas(slot, w, w.with_state(State::Abandoned)) {
                crate::crash_point!("timeout.abandoned");
                return Err(WaitError::Timeout);
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
        // Whoever waits behind the holder watches it (and anything dead ahead of us).
        recover(st, p, t, &mut watch, tuning);
        // The next in line polls soon after it got there (a young hold is checked often), then
        // less and less often, up to `head_poll_ns`; others rarely.
        let poll = if head {
            head_poll = head_poll.saturating_mul(2).min(tuning.head_poll_ns);
            head_poll
        } else {
            head_poll = tuning.head_poll_min_ns / 2;
            tuning.idle_poll_ns
        };
        let until = p.now_ns().saturating_add(poll);
        let until = deadline.map_or(until, |d| d.min(until));
        park(p, slot, w, until);
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

/// After our claim CAS: record the lease deadline and the informational fields. False if our
/// lease was revoked between the claim and now (we then hold nothing and re-queue).
fn claimed<P: Platform>(st: &LockState<'_>, p: &P, slot: &Slot, t: u64, me: &Me) -> bool {
    let lap = st.lap(t);
    match me.lease_ms {
        None => {
            // Not a CAS: a holder without a lease is never revoked while alive, so nobody
            // else writes this field for our lap.
            slot.lease.store(Lease::None.encode(lap), Relaxed);
        }
        Some(ms) => {
            crate::crash_point!("acquire.lease_pending");
            let until = p.now_ns() / 1_000_000 + ms;
            if !stamp_lease(slot, lap, Lease::Until(until)) {
                super::holder::finish_revocation(st, p, t);
                return false;
            }
        }
    }
    stamp_owner(slot, t, me);
    true
}

/// Before publishing: a taker that wants a lease announces its duration (`Pending`) with one
/// CAS from the value read together with the slot word. False if that value changed (re-read).
fn announce_lease(slot: &Slot, lap: u64, read: u64, me: &Me) -> bool {
    let Some(ms) = me.lease_ms else { return true };
    // AcqRel: see `stamp_lease`.
    slot.lease
        .compare_exchange(read, Lease::Pending(ms).encode(lap), AcqRel, Acquire)
        .is_ok()
}

/// After claiming: writes `lease` for our ticket (lap `lap`) with a CAS loop, unless a takeover
/// revoked it. Only the takeover races us here; writers from earlier laps fail their CAS because
/// the lap bits in their expected value are stale.
fn stamp_lease(slot: &Slot, lap: u64, lease: Lease) -> bool {
    let new = lease.encode(lap);
    let mut cur = slot.lease.load(Acquire);
    loop {
        if Lease::decode(cur, lap) == Lease::Revoked {
            return false;
        }
        // AcqRel: the takeover CASes the same field; one of us wins.
        match slot.lease.compare_exchange(cur, new, AcqRel, Acquire) {
            Ok(_) => return true,
            Err(now) => cur = now,
        }
    }
}

/// Informational fields for `fairlock status`; Relaxed, never used for decisions.
#[inline]
fn stamp_owner(slot: &Slot, t: u64, me: &Me) {
    slot.tid.store(me.tid, Relaxed);
    slot.stamp.store(t.wrapping_add(1), Relaxed);
}

/// When the ticket was published or claimed after waiting (for status).
fn stamp_since<P: Platform>(p: &P, slot: &Slot) {
    slot.since.store(p.coarse_now_ns(), Relaxed);
}

/// Records the holder's thread and "now" for ticket `t` (for status); what the uncontended
/// path skips. Informational, Relaxed.
pub fn stamp_holder<P: Platform>(st: &LockState<'_>, p: &P, t: u64, tid: u32) {
    let slot = st.slot(t);
    slot.tid.store(tid, Relaxed);
    slot.since.store(p.coarse_now_ns(), Relaxed);
    slot.stamp.store(t.wrapping_add(1), Relaxed);
}
