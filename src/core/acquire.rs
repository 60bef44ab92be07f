//! Acquiring: take a ticket, publish it, spin or park until the grant, claim it — and the
//! non-waiting forms (`try_lock`, a deadline already past), which recover what is stuck ahead
//! before they answer.

use super::{Grant, Me, WaitError};
use crate::core::exclusive::barge::{BEACON_MASK, barge};
use crate::core::exclusive::fast::{self, Taken, end_fast, try_fast};
use crate::core::platform::{Platform, Tuning, Watched};
use crate::core::queue::claim::{Claim, claim_granted_with, stamp_since};
use crate::core::queue::publish::{Published, publish};
use crate::core::queue::watch::{Ahead, INTERRUPT_POLL_NS, Watch};
use crate::core::robust::recover::recover;
use crate::core::state::format::cas;
use crate::core::state::lock_word::LockWord;
use crate::core::state::slot_word::{LapRelation, State, Word, relate};
use crate::core::state::{LockState, Slot};
use crate::primitive::Ordering::{Acquire, Relaxed};
use crate::primitive::spin_step;

/// How many times in a row a waiter may find its ticket skipped before we call the file
/// corrupt. A live waiter is skipped only when it stalls for longer than the grace between
/// taking its ticket and publishing it (or, with a lease, between its grant and its claim),
/// so a handful of retries is already extraordinary.
const MAX_RETAKES: u32 = 1000;

/// Takes a ticket for `me`: an exclusive lock's from its word ([`fast::take`]: granted at once
/// if the lock is free), a weighted lock's always to queue with
/// ([`crate::core::weighted::admit::take`]).
#[inline]
pub fn take<P: Platform>(st: &LockState<'_>, p: &P, me: &Me) -> Taken {
    if st.is_weighted() {
        crate::core::weighted::admit::take(st)
    } else {
        fast::take(st, p, me)
    }
}

/// Acquires the lock: takes it from the lock word if it is free (one CAS), else takes a
/// ticket and waits for its grant, until `deadline` (on [`Platform::now_ns`]'s clock) if
/// given. A waiter that times out gives its ticket up, so nobody behind it waits for it; a
/// grant that races the timeout wins. Before it gives up, it recovers what is stuck ahead (a
/// dead holder, a dead grantee, a pre-grant nobody claims), so even a deadline already past
/// gets a lock that only the dead were keeping.
#[inline(always)]
pub fn lock<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    me: &Me,
    deadline: Option<u64>,
    tuning: &Tuning,
) -> Result<Grant, WaitError> {
    if me.lease_ms.is_none()
        && !st.is_weighted()
        && let Some(g) = try_fast(st, me.participant, me.beacon)
    {
        return Ok(g);
    }
    lock_watched(st, p, me, deadline, tuning, None, Watch::default())
}

/// The rest of [`lock`] once the fast path failed: in a file with a bypass bound, a barge
/// (see [`crate::core::exclusive::barge`]); else take a ticket (which may still find the lock free), publish,
/// wait, claim. `first`: a ticket the caller already took and the barges the lock word
/// counted when it was taken ([`Taken::Queued`]; 0 for a weighted kind, which has no barges):
/// `try_lock` of a weighted kind, an asynchronous acquisition; else one is taken here. A [`Watch`] made by [`Watch::interruptible`]
/// gives the ticket up (as at the deadline) once its hook says so, with
/// [`WaitError::Interrupted`]. A grant that races the interruption wins: the caller then
/// holds the lock.
#[allow(clippy::too_many_arguments)]
#[cold]
#[inline(never)]
pub fn lock_watched<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    me: &Me,
    deadline: Option<u64>,
    tuning: &Tuning,
    first: Option<(u64, u32)>,
    watch: Watch<'_>,
) -> Result<Grant, WaitError> {
    if first.is_none() && deadline.is_some_and(|d| p.now_ns() >= d) {
        // A deadline already past: one try, as `try_lock` makes it (a dead holder recovered,
        // a free lock taken, never a ticket to give up at once: a polling loop of
        // `lock_timeout(0)` leaves nothing behind; and never a barge).
        return match try_lock(st, p, me, tuning)? {
            Some(g) => Ok(g),
            None => Err(watch.stopped()),
        };
    }
    // A file with a bypass bound: take the lock ahead of a grantee not yet running, if the
    // bound allows (see `barge`); not with a lease.
    if first.is_none()
        && me.lease_ms.is_none()
        && st.bypass_bound() != 0
        && let Some(g) = barge(st, p, me, tuning)
    {
        return Ok(g);
    }
    lock_queued(st, p, me, deadline, tuning, first, watch)
}

/// The queued part of [`lock_watched`]: takes a ticket (unless `first` is one already taken),
/// publishes it, waits for its grant until `deadline` (giving it up then, even if the deadline
/// was past from the start), claims it.
#[allow(clippy::too_many_arguments)]
pub fn lock_queued<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    me: &Me,
    deadline: Option<u64>,
    tuning: &Tuning,
    first: Option<(u64, u32)>,
    mut watch: Watch<'_>,
) -> Result<Grant, WaitError> {
    let mut first = first;
    let mut deadline = deadline;
    let mut recovered_at_deadline = false;
    let mut retakes = 0;
    while retakes < MAX_RETAKES {
        let (t, arrived) = match first.take() {
            Some(taken) => taken,
            // Never a new ticket (a first one, or again after ours was skipped) for a waiter
            // told to stop: it would be granted, or queue, for nobody.
            None if watch.interrupted() => return Err(watch.stopped()),
            None => match take(st, p, me) {
                Taken::Fast(g) => return Ok(g),
                Taken::Queued(t, arrived) => (t, arrived),
                Taken::Full(next) => {
                    // No room for a ticket (see `given_up`): wait for it without one,
                    // keeping the queue ahead moving meanwhile, as a lapped taker does.
                    let expired = deadline.is_some_and(|d| p.now_ns() >= d);
                    if expired && recovered_at_deadline {
                        return Err(watch.stopped());
                    }
                    recover(st, p, next, &mut watch, tuning);
                    if expired {
                        recovered_at_deadline = true;
                    } else {
                        p.pause(deadline);
                        if watch.interrupted() {
                            deadline = Some(0);
                        }
                    }
                    continue;
                }
            },
        };
        retakes += 1;
        // In a file with a bypass bound the ticket's arrival (barges counted when it was
        // taken) goes into its slot with the beacon, for barges to count against.
        let with_arrival;
        let me = if st.bypass_bound() != 0 {
            with_arrival = Me {
                beacon: crate::core::exclusive::barge::with_arrival(me.beacon, arrived),
                ..*me
            };
            &with_arrival
        } else {
            me
        };
        match publish(st, p, t, me, deadline, tuning, &mut watch)? {
            Published::Held(g) => return Ok(g),
            // Our ticket is gone (we stalled past the grace, or our pending lease was revoked):
            // queue again with a new ticket (the old one may already be another's).
            Published::Skipped => {}
            Published::Waiting(w) => {
                if let Some(g) = wait_for_grant(st, p, t, w, me, deadline, tuning, &mut watch)? {
                    return Ok(g);
                }
            }
        }
    }
    Err(WaitError::Corrupt("our ticket was skipped over and over"))
}

/// How many recover-and-look rounds `try_lock` makes when a round found the way clear but the
/// lock not free — someone else's ticket raced ours.
const TRY_ROUNDS: u32 = 8;

/// Takes the lock only if nobody live holds it or waits for it: then the lock word is free,
/// and we take it from the word (never joining the queue; with a lease, a ticket granted at
/// once through its slot).
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
        // Acquire: as in `fast::take`.
        let w = st.lock_word(Acquire);
        if !w.held() && !w.queued() {
            if let Some(g) = take_free(st, p, w, me, tuning, &mut watch)? {
                return Ok(Some(g));
            }
        } else {
            let t = st.ticket_of(w);
            match recover(st, p, t, &mut watch, tuning) {
                Ahead::Busy => return Ok(None),
                Ahead::Clear => {}
                Ahead::Unclaimed(seen) => {
                    let now = p.now_ns();
                    let limit = *give_up_at
                        .get_or_insert(now.saturating_sub(seen).saturating_add(tuning.grace_ns));
                    if started >= limit {
                        return Ok(None);
                    }
                    p.pause(Some(now.saturating_add(100_000).min(limit)));
                    continue;
                }
            }
        }
        rounds += 1;
        if rounds > TRY_ROUNDS {
            return Ok(None);
        }
    }
}

/// `try_lock` found the lock word free (`w`): take the lock from it — the fast way without a
/// lease; with one, a ticket granted at once through its slot ([`take`]), given back if
/// someone queued ahead meanwhile. `None`: someone else took it first.
fn take_free<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    w: LockWord,
    me: &Me,
    tuning: &Tuning,
    watch: &mut Watch<'_>,
) -> Result<Option<Grant>, WaitError> {
    if me.lease_ms.is_none() {
        return Ok(try_fast(st, me.participant, me.beacon));
    }
    // Acquire: as in `fast::take`.
    if st.lock_word(Acquire) != w {
        return Ok(None);
    }
    let t = match take(st, p, me) {
        Taken::Fast(g) => return Ok(Some(g)), // not with a lease; for completeness
        Taken::Queued(t, _) => t,
        Taken::Full(_) => return Ok(None), // someone queued meanwhile, a long queue
    };
    match publish(st, p, t, me, Some(0), tuning, watch)? {
        Published::Held(g) => Ok(Some(g)),
        Published::Skipped => Ok(None),
        Published::Waiting(mine) => {
            // Someone took the lock between our look and our ticket: we wait for nothing
            // (a deadline already past), giving the ticket up unless it is granted at once.
            match wait_for_grant(st, p, t, mine, me, Some(0), tuning, watch) {
                Ok(g) => Ok(g),
                Err(WaitError::Timeout) => Ok(None),
                Err(e) => Err(e),
            }
        }
    }
}

/// `try_lock` for a weighted kind (see [`crate::core::weighted::walk`]): after a recovery pass, takes a
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
        let w = st.lock_word(Relaxed);
        let t = st.ticket_of(w);
        let ahead = recover(st, p, t, &mut watch, tuning);
        if crate::core::weighted::admit::admits(st, p, t, me.shared)
            && crate::core::queue::given_up::has_room(st, t)
        {
            if !st.take_ticket_if(w) {
                continue; // someone took it first: look again
            }
            crate::crash_point!("acquire.ticket_taken");
            return match lock_watched(st, p, me, Some(0), tuning, Some((t, 0)), watch) {
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
    // Whether to watch the holder's beacon (until the platform says it cannot).
    let mut beacons = true;
    loop {
        let w = match claim_granted_with(st, p, t, me, tuning, deadline, Some(&mut *watch))? {
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
                    crate::core::weighted::walk::advance(st, p);
                } else {
                    // The waiter behind us may be asleep on our beacon, which will not die:
                    // nudge it (TWA's early wake) to look again at who is ahead of it now.
                    crate::core::exclusive::walk::wake_successor(st, p, t.wrapping_add(1));
                }
                return Err(watch.stopped());
            }
            continue;
        }
        let head = next_in_line(st, t);
        if head && may_spin {
            may_spin = false;
            // In a file with a bypass bound the spinner yields from the start (see
            // `spin_while`).
            let keep_cpu = if st.bypass_bound() != 0 {
                0
            } else {
                tuning.spin_keep_cpu_ns
            };
            if spin_while(
                p,
                slot,
                w,
                now.saturating_add(tuning.spin_ns),
                deadline,
                now.saturating_add(keep_cpu),
            ) {
                continue;
            }
        }
        if watch.interrupted() {
            deadline = Some(0);
            continue;
        }
        // Whoever waits behind the holder watches it (and anything dead ahead of us).
        recover(st, p, t, watch, tuning);
        // Behind a ticket whose thread published its beacon — the holder, for the next in
        // line; the waiter or grantee just ahead, for the others: no timer. Sleep on our word
        // and that beacon; we are woken by our grant, a nudge (the one ahead gave up, or was
        // granted), or the kernel at that thread's death (a waiter with an interrupt hook still
        // asks it every 50 ms at least; a signal interrupts the sleep at once; a backstop of
        // `BACKSTOP_NS` covers a watcher killed before it passed a death's wake-up on).
        if beacons && let Some(ahead) = ahead_beacon(st, t, head) {
            let sleeping = w.with_state(State::Sleeping);
            if w.state() == Some(State::Waiting) && !cas(slot, w, sleeping) {
                continue; // changed: re-read
            }
            if !head && let Holding::Slot { ticket, word } = ahead.what {
                // A Dekker pair with the nudge of the waiter ahead when it gives up (its word
                // final, then ours looked at): our word `Sleeping`, then its word looked at
                // again. One of us sees the other's write (else the nudge could find us still
                // `Waiting`, and we would sleep on the beacon of a thread no longer in the queue).
                crate::primitive::fence(crate::primitive::Ordering::SeqCst);
                // Relaxed: only decides whether to look again.
                if st.slot(ticket).word.load(Relaxed) != word.0 {
                    continue;
                }
            }
            crate::crash_point!("acquire.parking");
            let now = p.now_ns();
            let cap = now.saturating_add(if watch.has_hook() {
                INTERRUPT_POLL_NS
            } else {
                BACKSTOP_NS
            });
            let until = Some(deadline.map_or(cap, |d| d.min(cap)));
            match p.watch_holder(
                &slot.word,
                sleeping.futex_value(),
                ahead.participant,
                ahead.beacon,
                until,
            ) {
                Watched::Died => revoke_dead(st, p, &ahead.what),
                Watched::Waited => {}
                // Poll instead, for the rest of this wait.
                Watched::Unavailable => beacons = false,
            }
            if watch.interrupted() {
                deadline = Some(0);
            }
            continue;
        }
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

/// The holder just ahead of a waiter and where its thread's death notice is: the fast holder
/// (while the waiter's ticket is the queue's first) or the ticket before the waiter's, held
/// without a lease, whose thread published its beacon (see `sys::beacon`).
struct HolderBeacon {
    participant: u32,
    beacon: u32,
    what: Holding,
}

/// Which grant a [`HolderBeacon`] names, as read before its beacon was.
enum Holding {
    /// Fast grant `ticket` of entry `participant`.
    Fast { ticket: u64, participant: u32 },
    /// Ticket `ticket`, whose slot word was `word` (`Held`, unleased).
    Slot { ticket: u64, word: Word },
}

/// The beacon of the holder just ahead of ticket `t`, if it published one. Read in this order
/// — the grant, then the hint, whose tag must name that very grant — so that the beacon is the
/// holder's own: it was locked by the holder's thread before the thread took the grant, and its
/// word shows `OWNER_DIED` only after that thread ended. A leased holder is not watched (its
/// lease must be timed), nor a grant kept past its thread (a `FairMutex`'s, the fd form's: they
/// publish no beacon).
fn holder_beacon(st: &LockState<'_>, t: u64) -> Option<HolderBeacon> {
    if st.is_weighted() {
        return None;
    }
    // Acquire: as in `fast::take`.
    let lw = st.lock_word(Acquire);
    if lw.barged() {
        return None; // a barge publishes no beacon (see `barge`)
    }
    // Acquire: after the word.
    let head = st.header().head.load(Acquire);
    // The holder is the first ticket before ours that is not final: tickets given up or
    // skipped between it and us do not count (else the one behind a waiter that gave up would
    // poll every millisecond for the rest of the hold).
    let mut u = t.wrapping_sub(1);
    for _ in 0..st.slot_count() {
        if lw.held() && lw.queued() && u.wrapping_add(1) == head {
            return fast_holder_beacon(st, lw, u);
        }
        if lw.held() && crate::core::queue::frontier::before(u, head) {
            return None; // before the fast holder's ticket: not a queue we can read
        }
        // Relaxed: only decides where to look; `slot_beacon` re-reads with Acquire.
        let w = Word(st.slot(u).word.load(Relaxed));
        if relate(w.lap(), st.lap(u)) != LapRelation::Same
            || !w.state().is_some_and(State::is_final)
        {
            break;
        }
        u = u.wrapping_sub(1);
    }
    if lw.held() {
        return None;
    }
    slot_beacon(st, u, |s| s == State::Held)
}

/// The beacon of fast grant `ticket` (the one before `head`), held as word `lw` shows: its
/// hint, if the hint's tag is that grant's (then it is the holder's own).
fn fast_holder_beacon(st: &LockState<'_>, lw: LockWord, ticket: u64) -> Option<HolderBeacon> {
    // Relaxed: the tag decides (a hint with this grant's ticket is this grant's holder's).
    let hint = st.header().fast_hint.load(Relaxed);
    if hint >> 24 != ticket.wrapping_add(1) & ((1 << 40) - 1) || hint & 0xF_FFFF == 0 {
        return None;
    }
    let participant = lw.holder();
    Some(HolderBeacon {
        participant,
        beacon: (hint & 0xF_FFFF) as u32,
        what: Holding::Fast {
            ticket,
            participant,
        },
    })
}

/// The beacon ticket `ticket`'s owner thread published, if the ticket is in a state `wanted`
/// accepts, without a lease. Read in this order — the word, then the stamp naming the ticket,
/// then the beacon written before that stamp — so that it is that ticket's owner's.
fn slot_beacon(
    st: &LockState<'_>,
    ticket: u64,
    wanted: impl Fn(State) -> bool,
) -> Option<HolderBeacon> {
    let slot = st.slot(ticket);
    // Acquire: the owner's claim (or publication) and stamps before it.
    let word = Word(slot.word.load(Acquire));
    if relate(word.lap(), st.lap(ticket)) != LapRelation::Same
        || !word.state().is_some_and(&wanted)
        || word.leased()
    {
        return None;
    }
    // Acquire: pairs with `stamp_owner`'s Release store, made after the beacon.
    if slot.stamp.load(Acquire) != ticket.wrapping_add(1) {
        return None;
    }
    // Relaxed: ordered by the stamp above. (A later ticket of this slot may have written its
    // own beacon since, but only after this ticket ended: then the revocation, a CAS from
    // `word`, finds nothing to revoke.)
    // (The field's high bits record the ticket's arrival in a bounded file: see `barge`.)
    let beacon = slot.beacon.load(Relaxed) & BEACON_MASK;
    (beacon != 0).then_some(HolderBeacon {
        participant: word.participant(),
        beacon,
        what: Holding::Slot { ticket, word },
    })
}

/// The beacon of the ticket just ahead of ticket `t`: the holder's, for the next in line
/// (`head`, see [`holder_beacon`]); else that of the waiter or grantee of ticket `t − 1`, if it
/// published one without a lease (its thread is blocked in `lock` until granted, so its death
/// is its ticket's).
fn ahead_beacon(st: &LockState<'_>, t: u64, head: bool) -> Option<HolderBeacon> {
    if head {
        return holder_beacon(st, t);
    }
    if st.is_weighted() {
        return None;
    }
    slot_beacon(st, t.wrapping_sub(1), |s| {
        matches!(s, State::Waiting | State::Sleeping | State::Granted)
    })
}

/// The thread of the ticket `what` names ended: revoke that grant (the next holder is told the
/// owner died), or skip that waiter or grantee. A ticket that moved on meanwhile is left alone
/// (the CAS from the word read, or `end_fast`'s ticket check, fails).
fn revoke_dead<P: Platform>(st: &LockState<'_>, p: &P, what: &Holding) {
    match *what {
        Holding::Fast {
            ticket,
            participant,
        } => {
            end_fast(st, p, participant, ticket, true);
        }
        Holding::Slot { ticket, word } => {
            let (to, walk) = match word.state() {
                Some(State::Held) => (State::Revoked, true),
                // A grant implies everything before it final: walk on from it.
                Some(State::Granted) => (State::Skipped, true),
                // A waiter: skipped; whoever is first in line walks (our own `recover` next).
                _ => (State::Skipped, false),
            };
            if cas(st.slot(ticket), word, word.with_state(to)) {
                crate::crash_point!("recover.revoked");
                if walk {
                    crate::core::advance::advance(st, p, ticket, false);
                }
            }
        }
    }
}

/// The longest a next-in-line waiter sleeps on a holder's beacon without looking again: a
/// backstop only (the kernel wakes one watcher of a dead thread's beacon, which wakes the
/// others; one killed in between would leave them to this).
pub const BACKSTOP_NS: u64 = 10_000_000_000;

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

/// Spins while our word stays `w`, until `until`. True if it changed. From `yield_from` on,
/// the spinner gives the CPU up every 32 steps ([`Platform::yield_cpu`]).
///
/// Why not keep the CPU for the whole spin: with more runnable processes than CPUs, two
/// contenders that alternate (each re-queues behind the other at once, finds itself next in
/// line and spins) never sleep, and a process preempted before it could take a ticket stays off
/// the CPU until the scheduler's tick takes one of them off (4 ms here): a wait of that length,
/// first come or not. Measured with 4 Python processes and 20 µs sections (`python/bench`,
/// traced with `perf`): the longest waits (a 4 ms tick traced; 9.6 ms in a bench run) were
/// that; yielding after 5 µs removed them, raised the grants per second by about 30 % and
/// halved the 99th percentile wait. Why not yield from the start: 4 threads with 100 ns
/// sections, whose hand-offs take well under 5 µs, lost an order of magnitude of throughput (a
/// context switch per grant); even after 5 µs they lose some, and a spinner that yielded sees
/// its grant only when it runs again (`OpenOptions::spin_keep_cpu` turns the yield off;
/// `docs/BENCHMARKS.md` has the figures). In a file with a bypass bound, where
/// running threads barge ahead of a waiter, a spinning waiter mostly keeps a barger or the
/// holder off its CPU: it yields from the start (2.2x the throughput of 8 threads on 2 CPUs).
fn spin_while<P: Platform>(
    p: &P,
    slot: &Slot,
    w: Word,
    until: u64,
    deadline: Option<u64>,
    yield_from: u64,
) -> bool {
    let until = deadline.map_or(until, |d| d.min(until));
    let mut yielding = false;
    let mut i: u32 = 0;
    loop {
        // Relaxed: we only look for a change; the caller re-reads with Acquire.
        if slot.word.load(Relaxed) != w.0 {
            return true;
        }
        // The clock first (so a zero budget parks at once), then every 16 pauses.
        if i.is_multiple_of(16) {
            let now = p.now_ns();
            if now >= until {
                return false;
            }
            yielding = now >= yield_from;
        }
        i = i.wrapping_add(1);
        if yielding && i.is_multiple_of(32) {
            p.yield_cpu();
        } else {
            spin_step();
        }
    }
}

/// Whether the ticket just before ours (looking past a few final ones) holds or is granted:
/// then we are next and worth spinning for.
fn next_in_line(st: &LockState<'_>, t: u64) -> bool {
    // Relaxed: a heuristic. At or before `head`, every ticket ahead is final or the fast
    // holder's: we are first in line.
    let head = st.header().head.load(Relaxed);
    if !crate::core::queue::frontier::before(head, t) {
        return true;
    }
    let limit = 4u64.min(st.slot_count() - 1);
    for k in 1..=limit {
        let u = t.wrapping_sub(k);
        if crate::core::queue::frontier::before(u, head) {
            return true;
        }
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
