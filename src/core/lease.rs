//! The lease field of a slot: whether the ticket's holder has a lease, and until when.
//!
//! | bits   | field     | meaning                                                   |
//! |--------|-----------|-----------------------------------------------------------|
//! | 0..41  | `value`   | milliseconds: a duration if `pending`, else a deadline    |
//! | 41     | `pending` | the taker asked for a lease but has not claimed yet       |
//! | 42..64 | `lap`     | low 22 bits of the lap of the ticket the value belongs to |
//!
//! `value == 0` (not pending) means "no lease"; `value == VALUE_MASK` (not pending) means the
//! lease was revoked (taken over). The lap bits make every write conditional on the slot still
//! belonging to the writer's ticket: writers use compare-and-swap with the value they read, so
//! a stalled holder of an earlier lap can never overwrite a later ticket's lease.
//!
//! Deadlines are `CLOCK_MONOTONIC` milliseconds, so every process sharing a leased lock must be
//! in the same time namespace (documented in DESIGN.md). A *pending* lease carries a duration
//! instead: an observer that sees a holder whose lease is still pending times the duration from
//! when it first saw it, which is never earlier than the real grant.

const VALUE_BITS: u32 = 41;
const VALUE_MASK: u64 = (1 << VALUE_BITS) - 1;
const PENDING_BIT: u64 = 1 << VALUE_BITS;
const LAP_SHIFT: u32 = 42;
const LAP_MASK: u64 = (1 << 22) - 1;

/// What a lease field says about the ticket of lap `lap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lease {
    /// The field belongs to another lap: nothing is known for this ticket yet.
    Unwritten,
    /// No lease: the holder keeps the lock until it releases or dies.
    None,
    /// The taker asked for a lease of this many milliseconds; not claimed yet.
    Pending(u64),
    /// The lease ends at this `CLOCK_MONOTONIC` millisecond.
    Until(u64),
    /// The lease was revoked: the holder was taken over.
    Revoked,
}

impl Lease {
    /// Encodes `self` for the ticket of lap `lap`. `Unwritten` encodes as `None`.
    #[inline]
    pub fn encode(self, lap: u64) -> u64 {
        let l = (lap & LAP_MASK) << LAP_SHIFT;
        l | match self {
            Lease::Unwritten | Lease::None => 0,
            Lease::Pending(ms) => PENDING_BIT | ms.clamp(1, VALUE_MASK - 1),
            Lease::Until(ms) => ms.clamp(1, VALUE_MASK - 1),
            Lease::Revoked => VALUE_MASK,
        }
    }

    /// Decodes a lease field for the ticket of lap `lap`.
    #[inline]
    pub fn decode(raw: u64, lap: u64) -> Lease {
        if (raw >> LAP_SHIFT) & LAP_MASK != lap & LAP_MASK {
            return Lease::Unwritten;
        }
        let value = raw & VALUE_MASK;
        if raw & PENDING_BIT != 0 {
            Lease::Pending(value)
        } else if value == 0 {
            Lease::None
        } else if value == VALUE_MASK {
            Lease::Revoked
        } else {
            Lease::Until(value)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for lap in [1u64, 7, (1 << 22) - 1, 1 << 22, 123_456_789] {
            for l in [
                Lease::None,
                Lease::Pending(1500),
                Lease::Until(987_654_321),
                Lease::Revoked,
            ] {
                assert_eq!(Lease::decode(l.encode(lap), lap), l);
                assert_eq!(Lease::decode(l.encode(lap), lap + 1), Lease::Unwritten);
            }
        }
        assert_eq!(Lease::decode(0, 1), Lease::Unwritten);
    }
}
