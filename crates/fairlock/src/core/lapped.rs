//! The records *lapped* takers leave in their slot. A taker whose slot is still used by an
//! earlier lap (more than `N` tickets outstanding) cannot publish, so nobody could tell its
//! ticket from one whose taker died between taking it and publishing: both were skipped only
//! after the grace (50 ms), one after another. With a 2-slot array most takers are lapped, and
//! every one that timed out or was killed stalled everyone for a grace (the chaos suite with
//! leases, pauses and 2 slots showed stalls of seconds: a grace per such ticket).
//!
//! So a lapped taker of ticket `t` writes `Word(lap(t), its participant, Waiting)` into one of
//! the slot's three `lapped` entries. If it gives up (a timeout), it records that in an
//! `Abandoned` entry that stands for a *run* of consecutive laps of the slot whose takers all
//! gave up — `Word(first lap, run length, Abandoned)`: the participant bits hold the length,
//! since nobody needs to probe a taker that gave up — extending the run that ends just before
//! its lap if there is one, else turning its own entry (or a free one) into a run of one. A
//! storm of timed-out takers (`lock_timeout(0)` polling behind a long hold) is so recorded in
//! one entry per slot, however many there are. An entry is free once it is stale: the slot's
//! word has passed the last lap it names, or shows that lap in a state the taker itself (or a
//! skip) produced — anything but the grant in advance (`Ready`) it has yet to claim. With all
//! three entries in use by earlier tickets, a later waiting one keeps polling and registers
//! when one frees; one earlier than some entry takes the latest entry's place (the earliest
//! come up first). When `advance` or `recover` come to ticket `t` unpublished, or granted in
//! advance and unclaimed, and an entry names `t`'s lap, they pass `t` at once if it gave up or
//! its process is dead (the kernel's beacon says so), instead of after a grace.
//!
//! The records are advice: without one (a taker that died before it was ever lapped, or that
//! found every entry taken by earlier tickets), the grace applies as before. They can never
//! pass a live taker that did not give up: "gave up" is written by the taker itself after its
//! last look at the word, and a live process's beacon is held. The lap (44 bits) makes an entry
//! name exactly one ticket of the slot.

use super::layout::Slot;
use super::platform::{Liveness, Platform};
use super::word::{LAP_BITS, LapRelation, State, Word, relate};
use crate::primitive::Ordering::Relaxed;

const LAP_MASK: u64 = (1 << LAP_BITS) - 1;
/// The longest run one `Abandoned` entry records (the participant bits: 12).
const MAX_RUN: u32 = (1 << 12) - 1;

/// The last lap entry `r` names: its own for `Waiting`, the end of its run for `Abandoned`.
fn last_lap(r: Word) -> u64 {
    match r.state() {
        Some(State::Abandoned) => (r.lap() + u64::from(r.participant())) & LAP_MASK,
        _ => r.lap(),
    }
}

/// Whether entry `r` names lap `lap`.
fn names(r: Word, lap: u64) -> bool {
    match r.state() {
        Some(State::Waiting) => relate(r.lap(), lap) == LapRelation::Same,
        Some(State::Abandoned) => {
            (lap.wrapping_sub(r.lap()) & LAP_MASK) <= u64::from(r.participant())
        }
        _ => false,
    }
}

/// Whether entry `r` no longer names a ticket that may come up unclaimed, given the slot's word.
fn stale(r: Word, word: Word) -> bool {
    if !matches!(r.state(), Some(State::Waiting | State::Abandoned)) {
        return true;
    }
    match relate(last_lap(r), word.lap()) {
        LapRelation::Later => false,
        LapRelation::Same => word.state() != Some(State::Ready),
        _ => true,
    }
}

/// Orders laps modulo 2^44 (for picking the latest entry).
fn lap_order(a: u64, b: u64) -> core::cmp::Ordering {
    let d = a.wrapping_sub(b) & LAP_MASK;
    if d == 0 {
        core::cmp::Ordering::Equal
    } else if d < 1 << (LAP_BITS - 1) {
        core::cmp::Ordering::Greater
    } else {
        core::cmp::Ordering::Less
    }
}

/// A lapped taker of the ticket of lap `lap` records itself, if an entry is free (or held by a
/// later ticket than ours).
pub(crate) fn register(slot: &Slot, lap: u64, participant: u32) {
    let ours = Word::new(lap, participant, State::Waiting, false);
    // Relaxed throughout: advice (see the module notes); the word decides.
    let word = Word(slot.word.load(Relaxed));
    let entries = slot.lapped.each_ref().map(|e| (e, Word(e.load(Relaxed))));
    if entries.iter().any(|(_, r)| *r == ours) {
        return;
    }
    let free = entries.iter().find(|(_, r)| stale(*r, word)).or_else(|| {
        // All in use: replace the latest waiting one, if it is later than us.
        entries
            .iter()
            .filter(|(_, r)| r.state() == Some(State::Waiting))
            .filter(|(_, r)| relate(r.lap(), lap) == LapRelation::Later)
            .max_by(|a, b| lap_order(a.1.lap(), b.1.lap()))
    });
    if let Some((e, r)) = free {
        // A lost race just means another taker took it; we try again at our next poll.
        let _ = e.compare_exchange(r.0, ours.0, Relaxed, Relaxed);
    }
}

/// The lapped taker of lap `lap` gives its ticket up (a timeout): after this it never looks at
/// the slot again. Extends the run of given-up laps that ends just before ours, or starts one
/// in our own entry or a free one; a few tries, then none (its ticket costs a grace). True if
/// the giving up is recorded.
pub(crate) fn give_up(slot: &Slot, lap: u64, participant: u32) -> bool {
    let ours = Word::new(lap, participant, State::Waiting, false);
    let run_of_one = Word::new(lap, 0, State::Abandoned, false);
    for _ in 0..4 {
        let word = Word(slot.word.load(Relaxed));
        let entries = slot.lapped.each_ref().map(|e| (e, Word(e.load(Relaxed))));
        let before_us = (lap.wrapping_sub(1)) & LAP_MASK;
        if let Some((e, r)) = entries.iter().find(|(_, r)| {
            r.state() == Some(State::Abandoned)
                && r.participant() < MAX_RUN
                && last_lap(*r) == before_us
        }) {
            let longer = r.with_participant(r.participant() + 1);
            if e.compare_exchange(r.0, longer.0, Relaxed, Relaxed).is_ok() {
                // Our own waiting entry is not needed any more.
                for (e, r) in &entries {
                    if *r == ours {
                        let _ = e.compare_exchange(r.0, 0, Relaxed, Relaxed);
                    }
                }
                return true;
            }
            continue;
        }
        let mine = entries
            .iter()
            .find(|(_, r)| *r == ours)
            .or_else(|| entries.iter().find(|(_, r)| stale(*r, word)));
        match mine {
            Some((e, r)) => {
                if e.compare_exchange(r.0, run_of_one.0, Relaxed, Relaxed)
                    .is_ok()
                {
                    return true;
                }
            }
            None => return false,
        }
    }
    false
}

/// Whether an entry says the taker of the ticket of lap `lap` in this slot is gone (gave up, or
/// its process is dead); then that ticket may be passed at once.
pub(crate) fn gone<P: Platform>(slot: &Slot, lap: u64, p: &P) -> bool {
    slot.lapped.iter().any(|e| {
        let r = Word(e.load(Relaxed));
        names(r, lap)
            && match r.state() {
                Some(State::Abandoned) => true,
                Some(State::Waiting) => p.liveness(r.participant()) == Liveness::Dead,
                _ => false,
            }
    })
}
