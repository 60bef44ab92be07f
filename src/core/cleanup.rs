//! Taking over a participant entry whose previous process died.

use super::advance::advance;
use super::layout::LockState;
use super::platform::Platform;
use super::word::{State, Word};
use crate::primitive::Ordering::{AcqRel, Acquire, Relaxed};

/// Our participant entry `participant` was last used by a process that died (the kernel
/// dropped its beacon, which is how we could claim it). Whatever that process still held or
/// waited for is revoked or skipped, before we publish anything under the same index — else a
/// dead process's ticket would look like ours, alive. Then the queue is moved on.
///
/// Only non-final words naming `participant` are touched (a `Ready` word names nobody), each
/// by one CAS from the value read, so a word that changed meanwhile is left alone.
pub fn clean_up_participant<P: Platform>(st: &LockState<'_>, p: &P, participant: u32) {
    for i in 0..st.slot_count() {
        let slot = st.slot(i);
        // Acquire: see `advance`.
        let w = Word(slot.word.load(Acquire));
        if w.participant() != participant {
            continue;
        }
        let to = match w.state() {
            Some(State::Held) => State::Revoked,
            Some(State::Waiting | State::Sleeping | State::Granted) => State::Skipped,
            _ => continue,
        };
        // AcqRel: as the grant CAS of `advance`.
        let _ = slot
            .word
            .compare_exchange(w.0, w.with_state(to).0, AcqRel, Relaxed);
    }
    advance(st, p, st.header().head.load(Relaxed), false);
}
