//! The records *lapped* takers leave in their slot. A taker whose slot is still used by an
//! earlier lap (more than `N` tickets outstanding) cannot publish, so nobody could tell its
//! ticket from one whose taker died between taking it and publishing: both were skipped only
//! after the grace (50 ms), one after another. With a 2-slot array most takers are lapped, and
//! every one that timed out or was killed stalled everyone for a grace (the chaos suite with
//! leases, pauses and 2 slots showed stalls of seconds: a grace per such ticket).
//!
//! So a lapped taker of ticket `t` writes `Word(lap(t), its participant, Waiting)` into one of
//! the slot's three `lapped` entries, and turns it into `Abandoned` if it gives up. An entry is
//! free once it is stale: the slot's word has passed its lap, or shows its lap in a state the
//! taker itself (or a skip) produced — anything but the grant in advance (`Ready`) it has yet
//! to claim. With all three entries in use by earlier tickets, a later one keeps polling and
//! registers when one frees; one earlier than some entry takes the latest entry's place (the
//! earliest come up first). When `advance` or `recover` come to ticket `t` unpublished, or
//! granted in advance and unclaimed, and an entry names `t`'s lap, they pass `t` at once if it
//! gave up or its process is dead (the kernel's beacon says so), instead of after a grace.
//!
//! The records are advice: without one (a taker that died before it was ever lapped, or that
//! found every entry taken by earlier tickets), the grace applies as before. They can never
//! pass a live taker that did not give up: "gave up" is written by the taker itself after its
//! last look at the word, and a live process's beacon is held. The lap (44 bits) makes an entry
//! name exactly one ticket of the slot.

use super::layout::Slot;
use super::platform::{Liveness, Platform};
use super::word::{LapRelation, State, Word, relate};
use crate::primitive::Ordering::Relaxed;

/// Whether entry `r` no longer names a ticket that may come up unclaimed, given the slot's word.
fn stale(r: Word, word: Word) -> bool {
    if !matches!(r.state(), Some(State::Waiting | State::Abandoned)) {
        return true;
    }
    match relate(r.lap(), word.lap()) {
        LapRelation::Later => false,
        LapRelation::Same => word.state() != Some(State::Ready),
        _ => true,
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
        // All in use: replace the latest, if it is later than us.
        entries
            .iter()
            .filter(|(_, r)| relate(r.lap(), lap) == LapRelation::Later)
            .max_by(|a, b| {
                let d = a.1.lap().wrapping_sub(b.1.lap()) & ((1 << super::word::LAP_BITS) - 1);
                if d == 0 {
                    core::cmp::Ordering::Equal
                } else if d < 1 << (super::word::LAP_BITS - 1) {
                    core::cmp::Ordering::Greater
                } else {
                    core::cmp::Ordering::Less
                }
            })
    });
    if let Some((e, r)) = free {
        // A lost race just means another taker took it; we try again at our next poll.
        let _ = e.compare_exchange(r.0, ours.0, Relaxed, Relaxed);
    }
}

/// The lapped taker of lap `lap` gives its ticket up (a timeout): after this it never looks at
/// the slot again.
pub(crate) fn give_up(slot: &Slot, lap: u64, participant: u32) {
    let ours = Word::new(lap, participant, State::Waiting, false);
    for e in &slot.lapped {
        let _ = e.compare_exchange(
            ours.0,
            ours.with_state(State::Abandoned).0,
            Relaxed,
            Relaxed,
        );
    }
}

/// Whether an entry says the taker of the ticket of lap `lap` in this slot is gone (gave up, or
/// its process is dead); then that ticket may be passed at once.
pub(crate) fn gone<P: Platform>(slot: &Slot, lap: u64, p: &P) -> bool {
    slot.lapped.iter().any(|e| {
        let r = Word(e.load(Relaxed));
        relate(r.lap(), lap) == LapRelation::Same
            && match r.state() {
                Some(State::Abandoned) => true,
                Some(State::Waiting) => p.liveness(r.participant()) == Liveness::Dead,
                _ => false,
            }
    })
}
