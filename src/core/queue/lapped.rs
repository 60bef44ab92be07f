//! Who waits for a slot while an earlier lap still uses it: advice for spotting a *dead*
//! lapped taker at once.
//!
//! A lapped taker of ticket `t` (its slot still used by an earlier lap) cannot publish, so its
//! process is named nowhere a walk looks. If it gives up it says so in its slot's given-up word
//! ([`crate::core::queue::given_up`]); if its process is killed it says nothing, and its ticket, once the
//! walk reaches it, would be pre-granted and skipped only after the grace. So it also writes
//! `Word(lap(t), its participant, Waiting)` into the slot's `lapped` entry, if it is free, and
//! clears it when it publishes or gives up; a walk that comes to the ticket
//! unpublished and finds an entry naming its lap whose process is dead (the kernel's beacon
//! says so) passes it at once. An entry is free once stale: its lap is the slot word's or
//! earlier (unless pre-granted and not yet claimed), or recorded as given up.
//!
//! The entry is advice: without it (taken by an earlier ticket) the grace applies. They
//! never pass a live taker: a live process's beacon is held. They are `Relaxed`: the beacon,
//! not the entry, decides.

use crate::core::platform::{Liveness, Platform};
use crate::core::queue::given_up::GivenUp;
use crate::core::state::Slot;
use crate::core::state::slot_word::{LapRelation, State, Word, relate};
use crate::primitive::Ordering::Relaxed;

/// Whether entry `r` no longer names a ticket that may come up unpublished.
fn stale(slot: &Slot, r: Word) -> bool {
    if r.state() != Some(State::Waiting) {
        return true;
    }
    // Relaxed: advice (see the module notes).
    let w = Word(slot.word.load(Relaxed));
    match relate(r.lap(), w.lap()) {
        LapRelation::Later => GivenUp(slot.given_up.load(Relaxed)).covers(r.lap()),
        // Its lap reached the word: published or passed — or pre-granted, still to claim.
        LapRelation::Same => w.state() != Some(State::Ready),
        _ => true,
    }
}

/// The lapped taker of the ticket of lap `lap` records itself, if an entry is free.
pub(crate) fn register(slot: &Slot, lap: u64, participant: u32) {
    let ours = Word::new(lap, participant, State::Waiting, false);
    let entries = slot.lapped.each_ref().map(|e| (e, Word(e.load(Relaxed))));
    if entries.iter().any(|(_, r)| *r == ours) {
        return;
    }
    if let Some((e, r)) = entries.iter().find(|(_, r)| stale(slot, *r)) {
        // A lost race just means another taker took it; we try again at our next poll.
        let _ = e.compare_exchange(r.0, ours.0, Relaxed, Relaxed);
    }
}

/// The lapped taker of lap `lap` is done with its entry (it published, or gave up).
pub(crate) fn clear(slot: &Slot, lap: u64, participant: u32) {
    let ours = Word::new(lap, participant, State::Waiting, false);
    for e in &slot.lapped {
        let _ = e.compare_exchange(ours.0, 0, Relaxed, Relaxed);
    }
}

/// Whether an entry says the taker of the ticket of lap `lap` in this slot is dead.
pub(crate) fn dead<P: Platform>(slot: &Slot, lap: u64, p: &P) -> bool {
    slot.lapped.iter().any(|e| {
        let r = Word(e.load(Relaxed));
        r.state() == Some(State::Waiting)
            && relate(r.lap(), lap) == LapRelation::Same
            && p.liveness(r.participant()) == Liveness::Dead
    })
}

/// The laps of the tickets the entries of this slot say `participant` waits for (for the new
/// owner of a dead process's entry, which must not be mistaken for it).
pub(crate) fn named(slot: &Slot, participant: u32) -> impl Iterator<Item = u64> + '_ {
    slot.lapped.iter().filter_map(move |e| {
        let r = Word(e.load(Relaxed));
        (r.state() == Some(State::Waiting) && r.participant() == participant && !stale(slot, r))
            .then_some(r.lap())
    })
}

/// Whether the taker of the unpublished ticket of lap `lap` in `slot` will never publish: it
/// gave up (its bit), or the entry it left names a dead process. Such a ticket is passed at
/// once.
#[inline]
pub(crate) fn gone<P: Platform>(slot: &Slot, lap: u64, p: &P) -> bool {
    crate::core::queue::given_up::given_up(slot, lap) || dead(slot, lap, p)
}
