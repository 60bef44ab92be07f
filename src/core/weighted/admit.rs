//! What a taker of a weighted lock asks: a ticket (one CAS on a word queued for good), whether
//! its ticket could be granted now, and whether its participant or thread already holds a share.

use crate::core::exclusive::fast::Taken;
use crate::core::platform::Platform;
use crate::core::queue::frontier::{MAX_STEPS, before};
use crate::core::queue::given_up::{has_room, refresh_slots};
use crate::core::state::LockState;
use crate::core::state::lock_word;
use crate::core::state::slot_word::{LapRelation, relate};
use crate::core::state::slot_word::{State, Word};
use crate::core::weighted::walk::{Lapped, Start, lapped_gone, start};
use crate::primitive::Ordering::{Acquire, Relaxed};

/// A ticket of a weighted kind, whose word is queued for good: one CAS taking the next
/// ticket if it has room (see [`Taken::Full`]).
pub fn take(st: &LockState<'_>) -> Taken {
    loop {
        // Acquire: pairs with the CAS of the taker before us (as in `exclusive::fast`), so
        // the slot words its ticket's taker wrote are seen from the ticket on.
        let w = st.lock_word(Acquire);
        let t = st.ticket_of(w);
        if !has_room(st, t) {
            return Taken::Full(t);
        }
        if st.take_ticket_if(w) {
            crate::crash_point!("acquire.ticket_taken");
            if lock_word::wraps(w) {
                refresh_slots(st);
            }
            return Taken::Queued(t, 0);
        }
    }
}

/// Whether ticket `me` (a shared one if `shared`) could be granted now: every unfinished
/// ticket before it is granted or held, and it fits next to them. For `try_*`, after a
/// recovery pass (`recover`); a race with other takers may still leave it waiting (then it
/// gives up).
pub fn admits<P: Platform>(st: &LockState<'_>, p: &P, me: u64, shared: bool) -> bool {
    let Start {
        at, front: counted, ..
    } = start(st);
    let mut front = counted;
    let mut h = at;
    for _ in 0..MAX_STEPS {
        if !before(h, me) {
            return front.admits(shared, st.capacity());
        }
        let slot = st.slot(h);
        // Acquire: as in `advance`.
        let w = Word(slot.word.load(Acquire));
        match (relate(w.lap(), st.lap(h)), w.state()) {
            (LapRelation::Later, _) => {}
            (LapRelation::Same, Some(s)) if s.is_final() => {}
            (LapRelation::Same, Some(State::Granted | State::Held)) => front.count(w),
            // Given up (or dead) and passed by every walk, as `advance` does.
            (LapRelation::Previous | LapRelation::Behind, Some(_)) => {
                match lapped_gone(st, p, h, w) {
                    Lapped::Gone => {}
                    Lapped::Changed => continue, // look again
                    Lapped::Live => return false,
                }
            }
            _ => return false,
        }
        h = h.wrapping_add(1);
    }
    false
}

/// Whether this thread's acquiring ticket `me` of a reader/writer lock would wait for itself:
/// a ticket of participant `participant` and thread `tid` held before it in a way that blocks
/// it (a writer behind its own read, or anything behind its own write). Threads are told apart
/// by the informational `tid` stamp, which the holder wrote when it claimed.
pub fn holds_already(st: &LockState<'_>, participant: u32, tid: u32) -> bool {
    let n = st.slot_count();
    let held_by_us = |i: u64| {
        let slot = st.slot(i);
        // Acquire: as in `advance`.
        let w = Word(slot.word.load(Acquire));
        // Relaxed: informational stamps; for a ticket of ours, written by this very thread.
        let stamp = slot.stamp.load(Relaxed);
        matches!(w.state(), Some(State::Held | State::Granted))
            && w.participant() == participant
            && slot.tid.load(Relaxed) == tid
            && stamp != 0
            && stamp.wrapping_sub(1) & (n - 1) == i & (n - 1)
            && st.lap(stamp.wrapping_sub(1)) == w.lap()
    };
    // Relaxed: a bound for the look below; `head` is a lower bound of every unfinished ticket.
    let head = st.header().head.load(Relaxed);
    let next = st.next_ticket();
    let span = next.wrapping_sub(head);
    if span <= n {
        // Every unfinished ticket lies in [head, next): look at those tickets' slots only (the
        // common case, a few of them).
        (0..span).any(|k| held_by_us(head.wrapping_add(k)))
    } else {
        // More than `N` tickets since `head` (a long-held share, retakes past it): a grant of
        // ours may lie anywhere, so every slot (else a write behind its own retaken read
        // would not be refused).
        (0..n).any(held_by_us)
    }
}
