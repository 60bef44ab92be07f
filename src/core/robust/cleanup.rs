//! Taking over a participant entry whose previous process died.

use crate::core::advance::advance;
use crate::core::platform::Platform;
use crate::core::queue::publish::{LappedGiveUp, give_up_lapped};
use crate::core::state::LockState;
use crate::core::state::slot_word::{LapRelation, State, Word, relate};
use crate::primitive::Ordering::{AcqRel, Acquire, Relaxed};

/// Our participant entry `participant` was last used by a process that died (the kernel
/// dropped its beacon, which is how we could claim it). Whatever that process still held or
/// waited for is revoked or skipped, before we publish anything under the same index — else a
/// dead process's ticket would look like ours, alive. Then the queue is moved on.
///
/// Only non-final words naming `participant` are touched (a `Ready` word names nobody), by
/// CAS from the value read, following the word while it still names the same ticket.
///
/// The new owner has claimed the entry's beacon before it gets here (it learns which entry is
/// free by claiming it), so while it runs — or if it is stopped right there — the dead
/// process's leftovers look alive to everyone else; they are cleared once it gets on.
pub fn clean_up_participant<P: Platform>(st: &LockState<'_>, p: &P, participant: u32) {
    // A fast grant (or a barge) the dead process held: revoked (the next holder is told).
    // Acquire: as in `fast::take`.
    let lw = st.lock_word(Acquire);
    if lw.held() && lw.barged() && lw.holder() == participant {
        crate::core::exclusive::barge::end_barge(st, p, participant, lw.barges() as u16, true);
    } else if let Some((t, holder)) = crate::core::exclusive::fast::fast_holder(st)
        && holder == participant
    {
        crate::core::exclusive::fast::end_fast(st, p, participant, t, true);
    }
    for i in 0..st.slot_count() {
        let slot = st.slot(i);
        // A ticket the dead process took while lapped, which no word names: given up for it
        // (its lapped entry says it was the dead process's), so that the walk passes it at
        // once rather than after the grace — and never takes it for ours.
        let laps: Vec<u64> = crate::core::queue::lapped::named(slot, participant).collect();
        for lap in laps {
            let t =
                crate::core::state::slot_word::ticket_of(lap, i, st.slot_shift(), st.next_ticket());
            if give_up_lapped(st, p, t, participant) == LappedGiveUp::InWord {
                // Pre-granted meanwhile (a `Ready` word names nobody): passed on.
                // Acquire: see `advance`.
                let w = Word(slot.word.load(Acquire));
                if relate(w.lap(), lap) == LapRelation::Same
                    && w.state() == Some(State::Ready)
                    && crate::core::state::format::cas(slot, w, w.with_state(State::Skipped))
                {
                    advance(st, p, t, false);
                }
            }
        }
        // Acquire: see `advance`.
        let mut w = Word(slot.word.load(Acquire));
        // The word may move under us — granted (`Waiting → Granted`), nudged
        // (`Sleeping → Waiting`) — while it still names the dead process's ticket: follow it
        // until it is final or names another ticket. (One CAS that lost to a grant left the
        // dead process's ticket granted to the entry's new, live owner, who never claims it:
        // stuck for good.)
        loop {
            if w.participant() != participant {
                break;
            }
            let to = match w.state() {
                Some(State::Held) => State::Revoked,
                Some(State::Waiting | State::Sleeping | State::Granted) => State::Skipped,
                _ => break,
            };
            // AcqRel: as the grant CAS of `advance`.
            match slot
                .word
                .compare_exchange(w.0, w.with_state(to).0, AcqRel, Acquire)
            {
                Ok(_) => break,
                Err(now) if Word(now).lap() == w.lap() => w = Word(now),
                Err(_) => break,
            }
        }
    }
    // Relaxed: any value `head` ever had is a valid place to start a walk (a lower bound).
    advance(st, p, st.header().head.load(Relaxed), false);
}
