//! Where the queue stands: the `head` hint, and how a walk finds the first unfinished ticket
//! from wherever it starts.
//!
//! `head` is **monotone**: it only ever moves forward, by [`raise_head`] (a compare-and-swap
//! loop that never lowers it), called by `advance` whenever it grants, pre-grants or finds a
//! ticket granted. Every ticket below `head` is final (in a weighted file, or given up while
//! lapped and never published: see `weighted`), and whatever their ends said (a death)
//! went into the grant of a ticket at or after `head`. The uncontended release does not raise
//! it (that path does one compare-and-swap and no more), so `head` may lag far behind; a walk
//! from it then catches up at once: a slot that shows a *later* ticket that was granted
//! (`Ready`, `Granted`, `Held`, `Done` or `Revoked` of a later lap) proves that every ticket
//! before that one was final when it was granted, and that its grant carried their news, so
//! the walk jumps there ([`granted_later`]). A walk is therefore about `N` steps from any
//! `head`, however stale, and never gives up for `head`'s sake. (An earlier version stored
//! `head` with a plain store after each grant: a releaser preempted between its grant and that
//! store could later move `head` back by millions of tickets, and `recover`, which refused to
//! walk more than 2^22 tickets, then never granted again.)
//!
//! Only a corrupt file could make a walk long: [`MAX_STEPS`] bounds it.

use crate::core::state::LockState;
use crate::core::state::slot_word::{LapRelation, State, Word, relate};
use crate::primitive::Ordering::{Relaxed, Release};

/// The most steps one walk takes (2^26): in a consistent file a walk needs about `N` steps
/// plus one per ticket between the last grant and the first unfinished ticket (tickets given
/// up or skipped before anyone was granted again); only a corrupt file comes near this.
#[cfg(not(fuzzing))]
pub const MAX_STEPS: u64 = 1 << 26;
/// Under the fuzzer (`cargo fuzz` sets `cfg(fuzzing)`), a smaller cap: a garbage file can make
/// a walk run to the cap, and 2^26 instrumented steps take about 10 s per input, which the
/// fuzzer reports as a timeout and which starves the search. The cap's logic is the same.
#[cfg(fuzzing)]
pub const MAX_STEPS: u64 = 1 << 16;

/// Raises `head` to `h` unless it is already there or beyond (monotone, modulo 2^64 with a
/// 2^63 window). `Release`, and a compare-and-swap so that a later raise continues the release
/// sequence: pairs with the `Acquire` load in `publish::may_reuse`, which must see that a
/// grant passed the ticket whose slot it is about to reuse.
#[inline]
pub fn raise_head(st: &LockState<'_>, h: u64) {
    let head = &st.header().head;
    let mut cur = head.load(Relaxed);
    loop {
        let ahead = h.wrapping_sub(cur);
        if ahead == 0 || ahead >= 1 << 63 {
            return;
        }
        match head.compare_exchange_weak(cur, h, Release, Relaxed) {
            Ok(_) => return,
            Err(now) => cur = now,
        }
    }
}

/// Whether ticket `a` comes before ticket `b` (modulo 2^64, with a 2^63 window).
#[inline]
pub fn before(a: u64, b: u64) -> bool {
    let d = b.wrapping_sub(a);
    d != 0 && d < 1 << 63
}

/// If the slot of ticket `h` (lap `h_lap`, `1 << shift` slots) shows `w`, a word of a later
/// lap in a state only a granted ticket reaches, the ticket `w` belongs to: it was granted
/// when every ticket before it was final, so a walk may jump there.
#[inline]
pub fn granted_later(h: u64, h_lap: u64, w: Word, shift: u32) -> Option<u64> {
    if relate(w.lap(), h_lap) != LapRelation::Later {
        return None;
    }
    match w.state()? {
        State::Ready | State::Granted | State::Held | State::Done | State::Revoked => {
            let laps = w.lap().wrapping_sub(h_lap)
                & ((1u64 << crate::core::state::slot_word::LAP_BITS) - 1);
            Some(h.wrapping_add(laps << shift))
        }
        _ => None,
    }
}

/// The step of a walk over ticket `h` whose slot shows a later lap: the jump target if there
/// is one (and it does not pass `limit`), else the next ticket.
#[inline]
pub fn step_over_later(st: &LockState<'_>, h: u64, w: Word, limit: Option<u64>) -> u64 {
    match granted_later(h, st.lap(h), w, st.slot_shift()) {
        Some(u) if limit.is_none_or(|l| !before(l, u)) => u,
        _ => h.wrapping_add(1),
    }
}

/// The first unfinished ticket, walking from `head` (every ticket before it final) towards
/// `next` (the next ticket to be handed out) over the words `word_of(t)` shows for ticket
/// `t`'s slot, in a waiting array of `1 << shift` slots. Read-only: for `inspect`, which sees
/// the file through plain loads. `next` if every ticket before it is final. `jumps`: whether a
/// later granted ticket proves every earlier one final — true for an exclusive lock, false for
/// the weighted kinds, where tickets are granted while earlier ones still hold.
pub fn first_unfinished(
    head: u64,
    next: u64,
    shift: u32,
    jumps: bool,
    word_of: impl Fn(u64) -> Word,
) -> u64 {
    let mut h = head;
    for _ in 0..MAX_STEPS {
        if !before(h, next) {
            return next;
        }
        let lap = crate::core::state::slot_word::lap_of(h, shift);
        let w = word_of(h);
        match (relate(w.lap(), lap), w.state()) {
            (LapRelation::Same, Some(s)) if s.is_final() => h = h.wrapping_add(1),
            (LapRelation::Later, _) => match granted_later(h, lap, w, shift) {
                Some(u) if jumps && !before(next, u) => h = u,
                _ => h = h.wrapping_add(1),
            },
            _ => return h,
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_only_to_granted_later_tickets() {
        let shift = 2; // 4 slots
        let h = 5; // slot 1, lap 2
        let lap = crate::core::state::slot_word::lap_of(h, shift);
        for (state, jump) in [
            (State::Done, true),
            (State::Held, true),
            (State::Revoked, true),
            (State::Ready, true),
            (State::Granted, true),
            (State::Waiting, false),
            (State::Sleeping, false),
            (State::Abandoned, false),
            (State::Skipped, false),
        ] {
            let w = Word::new(lap + 3, 1, state, false);
            assert_eq!(
                granted_later(h, lap, w, shift),
                jump.then_some(h + 3 * 4),
                "{state:?}"
            );
        }
        assert_eq!(
            granted_later(h, lap, Word::new(lap, 1, State::Done, false), shift),
            None
        );
        assert_eq!(
            granted_later(h, lap, Word::new(lap - 1, 1, State::Done, false), shift),
            None
        );
    }

    #[test]
    fn order_wraps() {
        assert!(before(1, 2) && !before(2, 1) && !before(3, 3));
        assert!(before(u64::MAX, 0));
    }
}
