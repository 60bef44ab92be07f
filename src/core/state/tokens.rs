//! Fencing tokens: a ticket's token in a strict file (`t + 1`) and in a file with a bypass
//! bound (`(t + 1) · 2^9 + bypass`), and the ceilings a re-initialised file keeps them above.

/// The fencing token of ticket `t` (with `bypass` barges ahead of `t + 1`) in a file with
/// bypass bound `bound`: `t + 1` in a strict file, `(t + 1) · 2^9 + bypass` in a bounded one.
#[inline]
pub fn token_of(bound: u32, t: u64, bypass: u16) -> u64 {
    if bound == 0 {
        t.wrapping_add(1)
    } else {
        (t.wrapping_add(1) << TOKEN_SHIFT) | u64::from(bypass)
    }
}

/// A ceiling of the tokens a lock with bypass bound `bound` has granted while its counter
/// was at most `next`: one below the first token ticket `next` could carry — `next` without a
/// bound, `(next + 1) · 2^9 − 1` with one (a ticket `t < next` carries `(t + 1) · 2^9`, a barge
/// ahead of a head `h < next` `h · 2^9 + j`). Saturating.
pub fn token_ceiling(bound: u32, next: u64) -> u64 {
    if bound == 0 {
        next
    } else {
        next.saturating_add(1)
            .saturating_mul(1 << TOKEN_SHIFT)
            .saturating_sub(1)
    }
}

/// The ticket a new lock with bypass bound `bound` starts at so that every token it grants is
/// above `floor` (a token ceiling, [`token_ceiling`]): `floor` without a bound (tokens
/// `ticket + 1`); with one, `floor / 2^9 + 1`, so that even a barge ahead of the first ticket
/// (`first · 2^9 + j`) is above it — not `floor / 2^9`, which relied on the first ticket never
/// being barged.
pub fn first_ticket_above(bound: u32, floor: u64) -> u64 {
    if bound == 0 {
        floor
    } else {
        (floor >> TOKEN_SHIFT).wrapping_add(1)
    }
}

/// The largest bypass bound of an exclusive lock (`Fairness::Bounded(k)`): a barge's token
/// carries its bypass count in the low [`TOKEN_SHIFT`] bits, and the lock word counts barges
/// modulo 2^10 (see [`crate::core::exclusive::barge`]).
pub const MAX_BYPASS: u32 = 511;
/// The low bits of a bounded file's fencing tokens that number the barges between two grants
/// of the queue: tokens are `(ticket + 1) · 2^9 + bypass count` (2^55 tickets before they
/// overflow: 22 years at 50 million grants a second).
pub const TOKEN_SHIFT: u32 = 9;
