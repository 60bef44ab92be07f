//! Unit tests of the table of names (`layout.rs`, `table.rs`): the owner word of a participant
//! entry.

use crate::core::Liveness;
use crate::names::layout::{owner_of, owner_word};
use crate::names::table::owner_liveness;

/// A free owner word (0) is "nobody": `owner_of` says so without computing `0 - 1` (with
/// `then_some`, which evaluates its argument eagerly, that is an overflow panic in every debug
/// build at the first liveness check of a free participant entry: at every open of a name).
#[test]
fn a_free_owner_word_names_nobody_without_overflow() {
    assert_eq!(owner_of(0), None);
    assert_eq!(owner_of(0xABC0_0000 & !0xFFF), None);
}

/// The owner word keeps 20 bits of the file-wide entry's generation, so the process that claims
/// entry `j` 2^20 claims after a dead process wrote its word sees its own generation there. It
/// judges that word dead all the same: taken for its own, alive, what the dead one held would
/// never be recovered (by it, nor by others while it lives).
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
