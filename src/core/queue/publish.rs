//! Publishing a ticket: the taker's one CAS that puts its participant (and, with a lease, the
//! `leased` flag) into its slot — or claims the ticket at once if it was granted in advance.

use crate::core::advance::advance;
use crate::core::platform::{Platform, Tuning};
use crate::core::queue::claim::{claim_cas, claimed, stamp_owner, stamp_since, wait_out_barges};
use crate::core::queue::given_up::{self, GaveUp};
use crate::core::queue::lapped;
use crate::core::queue::watch::Watch;
use crate::core::robust::leasing::announce;
use crate::core::robust::recover::recover;
use crate::core::state::LockState;
use crate::core::state::format::cas;
use crate::core::state::lease::LeaseField;
use crate::core::state::slot_word::{LapRelation, State, Word, relate};
use crate::core::{Grant, Me, WaitError};
use crate::primitive::Ordering::{Acquire, SeqCst};
use crate::primitive::fence;

/// What publishing a ticket came to.
pub enum Published {
    /// The ticket was pre-granted and we claimed it.
    Held(Grant),
    /// We are a published waiter; the word is our `Waiting` value.
    Waiting(Word),
    /// Our ticket was skipped (we stalled past the grace before publishing, or our pending
    /// lease was revoked before we committed it): take another.
    Skipped,
}

/// Publishes ticket `t` in its slot, or claims it if it was granted in advance. A taker whose
/// slot is still used by an earlier ticket (more than `N` outstanding) polls for it, and
/// recovers what is stuck ahead meanwhile, like any waiter (`watch` times what it sees); if
/// `deadline` passes meanwhile (or `watch`'s hook says stop) it gives the ticket up.
pub fn publish<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    t: u64,
    me: &Me,
    deadline: Option<u64>,
    tuning: &Tuning,
    watch: &mut Watch<'_>,
) -> Result<Published, WaitError> {
    let mut recovered_at_deadline = false;
    let mut deadline = deadline;
    loop {
        if let Look::Done(r) = publish_once(st, p, t, me, deadline, tuning, watch)? {
            return Ok(r);
        }
        // More than N tickets are outstanding and an earlier ticket (t - N, or t - kN with
        // more than kN outstanding) still uses the slot, or is final but no grant has passed
        // it yet (see `may_reuse`). Poll until it is final, and meanwhile do what every waiter
        // does: keep the queue ahead moving (with a 2-slot array most takers are here; if none
        // of them recovered, a dead taker's pre-grant ahead would stall everyone). If we time
        // out here we say so in the slot's given-up word, where the walk finds it
        // (`given_up`); the entry `publish_once` left in the slot meanwhile lets the queue
        // pass our ticket at once if we are killed (`lapped`).
        let expired = deadline.is_some_and(|d| p.now_ns() >= d);
        if expired && recovered_at_deadline {
            if give_up_lapped(st, p, t, me.participant) == LappedGiveUp::InWord {
                continue; // granted or passed meanwhile: the next look decides
            }
            return Err(watch.stopped());
        }
        recover(st, p, t, watch, tuning);
        if expired {
            // One look at what only the dead keep from us, then the slot again.
            recovered_at_deadline = true;
            continue;
        }
        p.pause(deadline);
        if watch.interrupted() {
            deadline = Some(0);
        }
    }
}

/// What one look of [`publish_once`] came to.
pub enum Look {
    /// Published, claimed, or skipped: as [`publish`] answers.
    Done(Published),
    /// Our slot is still used by an earlier lap: we are lapped, recorded in the slot (an entry
    /// of [`lapped`], if one was free); look again later, or give the ticket up with
    /// [`give_up_lapped`].
    Lapped,
}

/// One look at ticket `t`'s slot: publishes it, claims its pre-grant, finds it skipped — or,
/// lapped, records us and says so without waiting. `deadline` bounds only a claim's wait for
/// a barger (bounded files).
pub fn publish_once<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    t: u64,
    me: &Me,
    deadline: Option<u64>,
    tuning: &Tuning,
    watch: &mut Watch<'_>,
) -> Result<Look, WaitError> {
    let slot = st.slot(t);
    let lap = st.lap(t);
    loop {
        // The lease field first, then the word: a field read before a word that shows the
        // previous lap final (or our pre-grant) cannot be a later lap's (see `leasing`), so an
        // announcement CAS from it can only replace a value nobody current owns.
        // Acquire: pairs with the AcqRel CAS that wrote it.
        let lease = LeaseField(slot.lease.load(Acquire));
        // Acquire: pairs with the Release CAS that made the slot Ready (the grant) or final
        // (the previous lap), so we see the previous holder's writes.
        let w = Word(slot.word.load(Acquire));
        let state = w
            .state()
            .ok_or(WaitError::Corrupt("slot word has an unknown state"))?;
        let leased = me.lease_ms.is_some();
        match relate(w.lap(), lap) {
            LapRelation::Same => match state {
                State::Ready => {
                    if let Some(ms) = me.lease_ms
                        && !announce(slot, lease, ms)
                    {
                        continue;
                    }
                    let held =
                        Word::new(lap, me.participant, State::Held, w.died()).with_leased(leased);
                    let bounded = st.bypass_bound() != 0;
                    if claim_cas(slot, w, held, bounded) {
                        crate::crash_point!("acquire.claimed");
                        // A walk that began before a barge may pre-grant us while it holds:
                        // in a bounded file every claim waits for a barger and takes a dead
                        // one's news, as `claim_granted_with` does.
                        let Some((news, overtaken)) = wait_out_barges(
                            st,
                            p,
                            t,
                            held,
                            me,
                            tuning,
                            deadline,
                            Some(&mut *watch),
                        )?
                        else {
                            return Ok(Look::Done(Published::Skipped));
                        };
                        return Ok(Look::Done(match claimed(st, p, slot, t, me) {
                            true => Published::Held(Grant {
                                overtaken,
                                ..Grant::of(t, w.died() || news, leased, false)
                            }),
                            false => Published::Skipped,
                        }));
                    }
                }
                State::Skipped => return Ok(Look::Done(Published::Skipped)),
                _ => return Err(WaitError::Corrupt("another owner published our ticket")),
            },
            LapRelation::Previous | LapRelation::Behind
                if state.is_final() && may_reuse(st, p, t, w) =>
            {
                if let Some(ms) = me.lease_ms
                    && !announce(slot, lease, ms)
                {
                    continue;
                }
                crate::crash_point!("acquire.lease_announced");
                let waiting = Word::new(lap, me.participant, State::Waiting, false)
                    .with_leased(leased)
                    .with_shared(me.shared && st.is_weighted());
                if cas(slot, w, waiting) {
                    crate::crash_point!("acquire.published");
                    stamp_owner(slot, t, me);
                    stamp_since(p, slot);
                    if st.is_weighted() {
                        // Nothing was granted in advance: walk, in case the lock is free for
                        // us (see `weighted`: the walk's fence pairs with a releaser's).
                        advance(st, p, t, false);
                    }
                    return Ok(Look::Done(Published::Waiting(waiting)));
                }
            }
            LapRelation::Previous | LapRelation::Behind
                if st.is_weighted()
                    && me.shared
                    && w.shared()
                    && matches!(state, State::Held | State::Granted)
                    && watch.may_retake(st.slot_count()) =>
            {
                // A share (a read, a permit) taken N tickets before ours still holds our slot.
                // Waiting for it would hold up everyone behind us although we may well fit
                // next to it (one long read would stop all reads N tickets later): give the
                // ticket up — recorded, so walks pass it at once — and take a new one. This
                // costs arrival order by the tickets taken meanwhile, only in this case.
                if give_up_lapped(st, p, t, me.participant) == LappedGiveUp::InWord {
                    continue; // our lap reached the word meanwhile: look again
                }
                crate::crash_point!("weighted.retake");
                return Ok(Look::Done(Published::Skipped));
            }
            LapRelation::Previous | LapRelation::Behind => {
                lapped::register(slot, lap, me.participant);
                return Ok(Look::Lapped);
            }
            LapRelation::Later => return Ok(Look::Done(Published::Skipped)),
        }
    }
}

/// Whether final word `w` is what tells the next holder that an owner died: `Revoked`, or a
/// skipped grant that carried the died flag.
#[inline]
fn carries_death(w: Word) -> bool {
    w.state() == Some(State::Revoked) || (w.state() == Some(State::Skipped) && w.died())
}

/// Whether ticket `t` may reuse its slot, whose previous user `t - N` is final (`prev`).
///
/// A `Revoked` ticket (or a skipped grant that carried the died flag) is what tells the next
/// holder that the owner died; it must not be overwritten before an `advance` walked over it.
/// So such a slot is reused only once a grant has passed `t - N` (`head` beyond it); until
/// then we help: advance from `head` ourselves (which passes it, and may grant us in advance).
///
/// A slot several laps behind (`Behind`) is one whose tickets in between were fast ones that
/// never touched it: reused once `t - N` is before `head` (then it was before the queue
/// began: a fast ticket, or final; the word's news, if any, was passed on when its queue
/// drained). Only an exclusive lock has fast tickets.
#[inline]
fn may_reuse<P: Platform>(st: &LockState<'_>, p: &P, t: u64, prev: Word) -> bool {
    if relate(prev.lap(), st.lap(t)) == LapRelation::Behind {
        return may_reuse_behind(st, t, prev);
    }
    if !carries_death(prev) {
        return true;
    }
    if st.is_weighted() {
        // The weighted kinds keep deaths in the header's counter: count this one, and the
        // word may go (waiting for a grant to pass it could wait for ever: nothing may be
        // grantable before this very ticket publishes).
        crate::core::weighted::news::count_replaced_news(st, prev);
        return true;
    }
    // Acquire: pairs with the Release raise of `head` in `advance`, made after the grant that
    // passed the previous lap's final word.
    let head = st.header().head.load(Acquire);
    if t.wrapping_sub(head) < st.slot_count() {
        return true;
    }
    advance(st, p, head, false);
    false
}

/// [`may_reuse`] of a word laps behind ours (a long queue, or a long-held share): out of line.
#[cold]
#[inline(never)]
fn may_reuse_behind(st: &LockState<'_>, t: u64, prev: Word) -> bool {
    if st.is_weighted() {
        // Every ticket uses its slot: the laps in between were given up while a share held
        // the slot (retaken), and nobody wrote their `Skipped` — walks that start at `front`
        // never come back for them (see `weighted`). Ours may go once all of them are given
        // up; a death the word tells is counted first.
        let all_given_up =
            crate::core::queue::given_up::all_given_up_between(st.slot(t), prev.lap(), st.lap(t));
        if all_given_up {
            crate::core::weighted::news::count_replaced_news(st, prev);
        }
        return all_given_up;
    }
    // Acquire: pairs with the Release raise of `head` by the first taker to queue.
    let head = st.header().head.load(Acquire);
    crate::core::queue::frontier::before(t.wrapping_sub(st.slot_count()), head)
}

/// What [`give_up_lapped`] came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LappedGiveUp {
    /// Recorded (and a pre-grant of it, if a walk made one meanwhile, passed): the ticket is
    /// gone.
    Gone,
    /// The slot word shows the ticket's lap: a walk pre-granted or passed it before the bit
    /// was set. The caller looks at the word (a pre-grant is still ours to claim).
    InWord,
}

/// The lapped taker of ticket `t` gives it up (a timeout, an interrupt, a retake): its bit in
/// the slot's given-up word, then — the other half of the Dekker pair in `advance` (see
/// `given_up`) — a look at the word: a pre-grant made meanwhile is passed on (the died flag it
/// carried kept). Also for the new owner of a dead process's entry, whose lapped tickets that
/// process left.
pub fn give_up_lapped<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    t: u64,
    participant: u32,
) -> LappedGiveUp {
    let slot = st.slot(t);
    let lap = st.lap(t);
    if let GaveUp::InWord(_) = given_up::give_up(st, t) {
        return LappedGiveUp::InWord;
    }
    crate::crash_point!("acquire.lapped_gave_up");
    lapped::clear(slot, lap, participant);
    if st.is_weighted() {
        // A weighted walk stops at an unpublished ticket and grants nothing in advance: walk,
        // so that it passes ours (its fence pairs with the walk's).
        advance(st, p, t, false);
        return LappedGiveUp::Gone;
    }
    fence(SeqCst);
    // Acquire: pairs with the pre-grant CAS.
    let w = Word(slot.word.load(Acquire));
    if relate(w.lap(), lap) == LapRelation::Same
        && w.state() == Some(State::Ready)
        && cas(slot, w, w.with_state(State::Skipped))
    {
        // Every ticket before ours is final (it was pre-granted): walk on from it.
        advance(st, p, t, false);
    }
    LappedGiveUp::Gone
}
