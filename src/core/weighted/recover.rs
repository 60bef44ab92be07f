//! The weighted kinds' recovery: looks at every ticket from `head` to the caller's and fixes
//! what is stuck — dead holders revoked, expired leases taken over, dead grantees, waiters and
//! unpublished takers skipped — walking past live holders, since a dead one may hide behind
//! them; then walks.

use crate::core::platform::{Liveness, Platform, Tuning};
use crate::core::queue::frontier::{MAX_STEPS, before};
use crate::core::queue::lapped;
use crate::core::queue::watch::{Ahead, Watch};
use crate::core::robust::leasing::{expired, take_over};
use crate::core::state::LockState;
use crate::core::state::format::cas;
use crate::core::state::slot_word::{LapRelation, State, Word, relate};
use crate::core::weighted::news::count_replaced_news;
use crate::core::weighted::walk::{
    Lapped, Start, advance, free_for, lapped_gone, start, word_ticket,
};
use crate::primitive::Ordering::Acquire;

/// The weighted form of `robust::recover::recover`: looks at every ticket from `head` to `me`
/// and fixes what is stuck — a dead holder revoked, a holder whose lease expired taken over, a
/// dead grantee or waiter skipped, a ticket taken but not published within the grace (its
/// taker died in between) skipped — walking past live holders, since a dead one may hide
/// behind them. Then walks ([`advance`]) so that whatever fits is granted.
pub fn recover<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    me: u64,
    watch: &mut Watch<'_>,
    tuning: &Tuning,
) -> Ahead {
    let Start { at, far, .. } = start(st);
    let mut busy = false;
    if far.is_some() {
        // The grants before `front` are slot words (see `start`): look at each of them.
        for i in 0..st.slot_count() {
            for _ in 0..4 {
                // Acquire: as in `advance`.
                let w = Word(st.slot(i).word.load(Acquire));
                if !matches!(w.state(), Some(State::Granted | State::Held)) {
                    break;
                }
                let t = word_ticket(st, i, w);
                if !before(t, at) || !before(t, me) {
                    break;
                }
                match fix_holder(st, p, t, w, watch) {
                    Holder::Live => {
                        busy = true;
                        break;
                    }
                    Holder::Passed => break,
                    Holder::Changed => {} // look again
                }
            }
        }
    }
    let mut h = at;
    for _ in 0..MAX_STEPS {
        #[cfg(all(test, not(fairlock_loom)))]
        crate::core::weighted::walk::STEPS.with(|c| c.set(c.get() + 1));
        if !before(h, me) {
            break;
        }
        let slot = st.slot(h);
        let lap = st.lap(h);
        // Acquire: as in `advance`.
        let w = Word(slot.word.load(Acquire));
        let Some(state) = w.state() else {
            return Ahead::Busy;
        };
        match relate(w.lap(), lap) {
            LapRelation::Later => {
                h = h.wrapping_add(1);
                continue;
            }
            LapRelation::Previous | LapRelation::Behind if free_for(st, h, w) => {
                // Taken, not published. Its taker publishes within nanoseconds unless it died
                // or stalls; after the grace (or at once, if its lapped record says it gave up
                // or died) the ticket is skipped, and a stalled taker takes another.
                // Relaxed: a ticket is only a number.
                let next = st.next_ticket();
                if !before(h, next) {
                    break;
                }
                let unpublished = watch.observe((h, w.0, 1), p.now_ns());
                if unpublished < tuning.grace_ns && !lapped::gone(slot, lap, p) {
                    advance(st, p);
                    return Ahead::Unclaimed(unpublished);
                }
                count_replaced_news(st, w);
                if cas(slot, w, Word::new(lap, 0, State::Skipped, false)) {
                    crate::crash_point!("weighted.unpublished_skipped");
                }
                continue;
            }
            LapRelation::Previous | LapRelation::Behind => {
                // Its slot is still used by an earlier lap. A taker that gave up (or died)
                // there is passed, as `advance` does; a live one waits for its slot.
                match lapped_gone(st, p, h, w) {
                    Lapped::Gone => h = h.wrapping_add(1),
                    Lapped::Changed => {} // look again
                    Lapped::Live => {
                        advance(st, p);
                        return Ahead::Busy;
                    }
                }
                continue;
            }
            LapRelation::Same => {}
        }
        let dead = || p.liveness(w.participant()) == Liveness::Dead;
        match state {
            State::Done | State::Abandoned | State::Skipped | State::Revoked => {}
            State::Waiting | State::Sleeping => {
                if dead() {
                    if !cas(slot, w, w.with_state(State::Skipped)) {
                        continue;
                    }
                } else {
                    // A live waiter ahead: whether it can go is the walk's business.
                    busy = true;
                    break;
                }
            }
            State::Granted | State::Held => match fix_holder(st, p, h, w, watch) {
                Holder::Live => busy = true,
                Holder::Passed => {}
                Holder::Changed => continue, // look again
            },
            State::Ready => return Ahead::Busy,
        }
        h = h.wrapping_add(1);
    }
    advance(st, p);
    if busy { Ahead::Busy } else { Ahead::Clear }
}

/// What [`fix_holder`] found.
enum Holder {
    /// Alive, and within its lease.
    Live,
    /// Dead (revoked or skipped), or its lease ran out (taken over).
    Passed,
    /// The word changed under us.
    Changed,
}

/// Recovery of granted or held ticket `h` (word `w`): revoked (held) or skipped (granted) if
/// its process is dead, taken over if its lease ran out.
fn fix_holder<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    h: u64,
    w: Word,
    watch: &mut Watch<'_>,
) -> Holder {
    if p.liveness(w.participant()) == Liveness::Dead {
        let to = if w.state() == Some(State::Held) {
            State::Revoked
        } else {
            State::Skipped
        };
        if !cas(st.slot(h), w, w.with_state(to)) {
            return Holder::Changed;
        }
        crate::crash_point!("weighted.dead_holder_passed");
        return Holder::Passed;
    }
    match w.leased().then(|| expired(st, p, h, w, watch)).flatten() {
        Some(f) => {
            take_over(st, p, h, w, f);
            Holder::Changed
        }
        None => Holder::Live,
    }
}
