//! The news of deaths in a weighted lock: counted into the header's `deaths` by the first walk
//! that passes a news word, or by whoever replaces one, so that no slot has to keep it.

use crate::core::state::LockState;
use crate::core::state::format::cas;
use crate::core::state::slot_word::{State, Word};
use crate::primitive::Ordering::Release;

/// Whether final word `w` holds news of a death: `Revoked`, or `Skipped` with the died flag (a
/// grant that carried the news and was skipped, or a grant skipped for its frozen lease).
#[inline]
pub(crate) fn is_news(w: Word) -> bool {
    match w.state() {
        Some(State::Revoked) => true,
        Some(State::Skipped) => w.died(),
        _ => false,
    }
}

/// Counts the death that news word `w` (of ticket `t`) tells, and rewrites the word as a plain
/// `Skipped`, so that the news lives in the header's `deaths` counter and the slot is free of
/// it. The count comes first: a collector killed in between leaves the word to be counted
/// again (a spurious report later, never a lost one); two collectors of one word count it
/// twice, with the same effect. False if the word changed (the caller looks again).
pub(crate) fn collect_news(st: &LockState<'_>, t: u64, w: Word) -> bool {
    count_replaced_news(st, w);
    crate::crash_point!("weighted.news_counted");
    let clean = Word::new(w.lap(), w.participant(), State::Skipped, false).with_shared(w.shared());
    cas(st.slot(t), w, clean)
}

/// Counts the death that the previous lap's word `prev` tells, if it tells one, before a CAS
/// replaces it (a publication, a skip of an unpublished ticket): the news must not go with it.
#[inline]
pub(crate) fn count_replaced_news(st: &LockState<'_>, prev: Word) {
    if is_news(prev) {
        // Release: pairs with the Acquire load of `deaths` by the walk that grants next (the
        // death happens-before the report of it).
        st.header().deaths.fetch_add(1, Release);
    }
}
