//! Fencing tokens and the kinds that number them: a strict file's `ticket + 1`, a bounded
//! file's barges between two tickets, and tokens that keep rising when the bound changes.

use crate::core::state::{RecordKind, first_ticket_above, token_ceiling, token_of};

#[test]
fn token_ceilings_and_first_tickets_above_them_keep_tokens_rising() {
    for bound in [0u32, 1, 4, 511] {
        for next in [0u64, 1, 2, 3, 511, 512, 513, 1 << 20] {
            let ceiling = token_ceiling(bound, next);
            // Every token granted before `next`: tickets below it, and barges ahead of a head
            // `h < next`, which take `h · 512 + j` = `token_of(bound, h − 1, j)`.
            if let Some(last) = next.checked_sub(1) {
                assert!(token_of(bound, last, 0) <= ceiling);
                if bound != 0 && last > 0 {
                    assert!(token_of(bound, last - 1, bound as u16) <= ceiling);
                }
            }
            for other in [0u32, 1, 511] {
                let first = first_ticket_above(other, ceiling);
                assert!(
                    token_of(other, first, 0) > ceiling,
                    "bound {bound} next {next} -> bound {other}"
                );
                if other == 0 {
                    // The first such ticket: the one before it is not above.
                    if let Some(before) = first.checked_sub(1) {
                        assert!(token_of(other, before, 0) <= ceiling);
                    }
                } else {
                    // A barge ahead of the first ticket, `first · 512 + 1` at least, is above.
                    assert!(token_of(other, first - 1, 1) > ceiling);
                }
            }
        }
    }
}

#[test]
fn bounded_kinds_round_trip_and_refuse_out_of_range_bounds() {
    assert_eq!(RecordKind::decode(0, 7), Some(RecordKind::bounded(7)));
    assert_eq!(RecordKind::decode(0, 511), Some(RecordKind::bounded(511)));
    assert_eq!(RecordKind::decode(0, 512), None);
    assert_eq!(RecordKind::decode(1, 7), None);
    assert_eq!(RecordKind::bounded(7).bypass_bound(), 7);
    assert_eq!(RecordKind::semaphore(7).bypass_bound(), 0);
    assert_eq!(token_of(0, 9, 0), 10);
    assert_eq!(token_of(5, 9, 3), (10 << 9) + 3);
}
