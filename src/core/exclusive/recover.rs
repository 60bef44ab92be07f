//! The exclusive lock's recovery (see [`crate::core::robust::recover`] for when it runs): what
//! any acquirer does — a waiter at a bounded rate, a taker polling for its slot,
//! `try_lock` and a timed-out waiter before they answer — to keep the queue moving when a
//! process ahead died, a lease ran out, or a ticket was never claimed.
//!
//! Every action is one CAS on a slot word (or, for a lease takeover, first on the lease field),
//! followed by [`advance()`]; any number of acquirers may recover at once and exactly one CAS
//! wins each step. A recoverer killed between two steps leaves a state the next one finishes:
//! a revoked lease with a `Held` word is completed by `finish_revocation`'s rule, a revoked
//! or skipped word is passed over by `advance`.

use crate::core::advance::advance;
use crate::core::exclusive::fast::{end_fast, fast_holder};
use crate::core::platform::{Liveness, Platform, Tuning};
use crate::core::queue::frontier::{MAX_STEPS, before, step_over_later};
use crate::core::queue::lapped;
use crate::core::queue::watch::{Ahead, Watch};
use crate::core::robust::leasing::{expired, take_over};
use crate::core::state::LockState;
use crate::core::state::format::cas;
use crate::core::state::slot_word::{LapRelation, State, Word, relate};
use crate::primitive::Ordering::Acquire;

/// The exclusive lock's [`recover`](crate::core::robust::recover::recover): looks at the
/// tickets before ticket `me` (ours, or for `try_lock` the next one to be taken) and fixes what
/// is stuck:
///
/// * a holder (`Held`) whose process is dead is revoked; one whose lease expired is taken
///   over (lease CAS, then word CAS);
/// * a granted or waiting ticket whose process is dead is skipped; a granted one with a lease
///   that stayed unclaimed for its whole lease (its owner is frozen) is skipped too;
/// * a ticket granted in advance (`Ready`) whose taker has not claimed it within the grace is
///   skipped (the taker presumably died between taking the ticket and publishing it);
/// * a first live ticket that somebody forgot to grant (its advancer died) is granted.
///
/// It goes on walking after each fix — a run of dead tickets is cleared in one pass — and
/// starts from `head` however far behind that is (see [`crate::core::queue::frontier`]).
pub fn recover<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    me: u64,
    watch: &mut Watch<'_>,
    tuning: &Tuning,
) -> Ahead {
    debug_assert!(
        !st.is_weighted(),
        "a weighted lock recovers in weighted::recover"
    );
    // Acquire: pairs with the CAS that set `Q` (see `fast`); `head` is loaded after it.
    let mut lw = st.lock_word(Acquire);
    if lw.held() && lw.barged() {
        // A barge (bounded files): the word is read before its entry is judged, and the
        // revocation is a CAS from exactly that word.
        if p.liveness(lw.holder()) != Liveness::Dead {
            return Ahead::Busy;
        }
        if crate::core::exclusive::barge::revoke_seen(st, p, lw) {
            crate::crash_point!("recover.barge_revoked");
        }
        // Acquire: as above.
        lw = st.lock_word(Acquire);
    }
    if lw.held() {
        // A fast holder is ahead of every queued ticket: it holds, unless it is dead. The grant
        // (its ticket and entry) is read *before* its owner is judged, so that the revocation
        // below acts on that very grant: judged first, a later fast grant of the same entry's
        // next, live owner could be revoked (two holders).
        let Some((t, holder)) = fast_holder(st) else {
            return Ahead::Busy; // changed under us: look again
        };
        if p.liveness(holder) != Liveness::Dead {
            return Ahead::Busy;
        }
        if end_fast(st, p, holder, t, true) {
            crate::crash_point!("recover.fast_revoked");
        }
        // Acquire: as above.
        lw = st.lock_word(Acquire);
        if lw.held() {
            return Ahead::Busy; // another fast holder, or ours not ended yet: look again
        }
    }
    if !lw.queued() {
        return Ahead::Clear; // nobody holds, nobody queues
    }
    // Acquire: after the word.
    let start = st.header().head.load(Acquire);
    if !before(start, me) {
        // Nothing ahead (or a head beyond us: then we are final or granted already).
        advance(st, p, start, false);
        return Ahead::Clear;
    }
    let mut h = start;
    for _ in 0..MAX_STEPS {
        if h == me {
            // Everything ahead of us is final. Either a step above already granted us, or
            // nobody did (whoever should have advanced died first, or the file was just
            // initialised): grant through `advance`, which stops at once if we are granted.
            advance(st, p, start, false);
            return Ahead::Clear;
        }
        let slot = st.slot(h);
        let lap = st.lap(h);
        // Acquire: see `advance`.
        let w = Word(slot.word.load(Acquire));
        let Some(state) = w.state() else {
            return Ahead::Busy;
        };
        match relate(w.lap(), lap) {
            LapRelation::Later => {
                h = step_over_later(st, h, w, Some(me));
                continue;
            }
            LapRelation::Previous | LapRelation::Behind if state.is_final() => {
                // Ticket `h` is taken but unpublished and everything before it is final: it
                // should be granted in advance. Help (from `start`, to carry the died flag),
                // then look at it again.
                advance(st, p, start, false);
                // Acquire: as the load above; only to see whether the help changed anything.
                if Word(slot.word.load(Acquire)) == w {
                    return Ahead::Busy; // could not (a corrupt file); do not spin
                }
                continue;
            }
            LapRelation::Previous | LapRelation::Behind => return Ahead::Busy,
            LapRelation::Same => {}
        }
        let dead = || p.liveness(w.participant()) == Liveness::Dead;
        match state {
            State::Done | State::Abandoned | State::Skipped | State::Revoked => {
                h = h.wrapping_add(1);
            }
            State::Waiting | State::Sleeping => {
                if dead() {
                    if cas(slot, w, w.with_state(State::Skipped)) {
                        h = h.wrapping_add(1);
                    }
                    continue;
                }
                // A live waiter ahead of us: if it is first in line it must be granted.
                advance(st, p, start, false);
                return Ahead::Busy;
            }
            State::Granted => {
                if dead() {
                    if cas(slot, w, w.with_state(State::Skipped)) {
                        crate::crash_point!("recover.skipped");
                        advance(st, p, h, false);
                    }
                    // Look at `h` again (now final, or changed by someone else), then beyond.
                    continue;
                }
                match w.leased().then(|| expired(st, p, h, w, watch)).flatten() {
                    Some(f) => take_over(st, p, h, w, f),
                    None => return Ahead::Busy,
                }
            }
            State::Ready => {
                let next = st.next_ticket();
                if !before(h, next) {
                    return Ahead::Busy; // not taken yet: only a corrupt file shows it here
                }
                // Its taker, once lapped, may have left word that it gave up or died.
                let unclaimed = watch.observe((h, w.0, 0), p.now_ns());
                if unclaimed < tuning.grace_ns && !lapped::gone(slot, lap, p) {
                    return Ahead::Unclaimed(unclaimed);
                }
                if cas(slot, w, w.with_state(State::Skipped)) {
                    advance(st, p, h, false);
                }
            }
            State::Held => {
                if dead() {
                    if cas(slot, w, w.with_state(State::Revoked)) {
                        crate::crash_point!("recover.revoked");
                        advance(st, p, h, false);
                    }
                    continue; // as for a dead grantee
                }
                match w.leased().then(|| expired(st, p, h, w, watch)).flatten() {
                    Some(f) => take_over(st, p, h, w, f),
                    None => return Ahead::Busy,
                }
            }
        }
    }
    Ahead::Busy
}
