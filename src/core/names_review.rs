//! Review of the table of names (`names.rs`, `name_layout.rs`): unit tests of findings.

use crate::core::Liveness;
use crate::names::layout::{owner_of, owner_word};
use crate::names::table::owner_liveness;

/// A free owner word (0) is "nobody": `owner_of` must say so without computing `0 - 1`
/// (`then_some` evaluates its argument eagerly: an overflow panic in every debug build, on
/// the first liveness check of a free participant entry — that is, on every open of a name).
#[test]
fn a_free_owner_word_names_nobody_without_overflow() {
    assert_eq!(owner_of(0), None);
    assert_eq!(owner_of(0xABC0_0000 & !0xFFF), None);
}

/// The owner word keeps 20 bits of the file-wide entry's generation: the process that claims
/// entry `j` for the 2^20-th time since a dead process wrote its word takes that word for its
/// own, alive, and never recovers what the dead one held (nor do others while it lives).
#[test]
fn a_dead_predecessor_s_owner_word_is_never_taken_for_one_s_own() {
    let (j, dead_generation) = (5, 7);
    let word = owner_word(j, dead_generation);
    // We hold entry j now, 2^20 claims later.
    let me = (j, dead_generation + (1 << 20));
    let judged = owner_liveness(word, me, |_| Some(me.1), |_| Some(true));
    assert_eq!(
        judged,
        Liveness::Dead,
        "a dead process's owner word judged alive"
    );
}
