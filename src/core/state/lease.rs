//! The lease field of a slot and the lease deadline of a participant: how they are encoded.
//! (What is done with them — announcing, committing, extending, taking over — is in
//! [`crate::core::robust::leasing`].)
//!
//! # The lease field (`Slot::lease`, 64 bits)
//!
//! | bits   | field     | meaning                                                          |
//! |--------|-----------|------------------------------------------------------------------|
//! | 0..18  | `data`    | `Pending`: the lease's duration, [`duration_code`]; otherwise 0  |
//! | 18..20 | `kind`    | 0 `None`, 1 `Pending`, 2 `Leased`, 3 `Revoked`                   |
//! | 20..64 | `version` | bumped by every write (modulo 2^44)                              |
//!
//! Every write is a compare-and-swap from the value the writer read, to a value whose
//! `version` is one more. A value therefore comes back only after 2^44 writes to that one slot
//! (with a 2-slot array and millions of leased acquisitions a second, weeks; the slot word's
//! 44-bit lap has the same horizon), so a writer that stalled between its read and its CAS —
//! while the slot moved on by any number of laps short of that — fails its CAS. (An earlier encoding kept 22 lap
//! bits next to a 41-bit deadline; a holder paused for 2^22 laps of a 2-slot array, about
//! 0.1 s of uncontended use, could find the very value it had read and overwrite a later
//! ticket's lease.)
//!
//! The field says nothing about which ticket it belongs to: the slot word does. A word with
//! the `leased` flag tells that its owner announced its lease in this field before publishing
//! the word, so the field belongs to that word's ticket; a word without it means the field is
//! stale and to be ignored.
//!
//! # The deadline (`Slot::deadline`, 64 bits)
//!
//! | bits   | field  | meaning                                                             |
//! |--------|--------|---------------------------------------------------------------------|
//! | 0..44  | `ms`   | the `CLOCK_MONOTONIC` millisecond the lease of the `Leased` holder ends |
//! | 44..64 | `tag`  | the low 20 bits of the lap of the ticket it is the deadline of     |
//!
//! The deadline of a `Leased` holder does not fit next to a 44-bit version, so it lives in a
//! word of its own in the slot, one per grant (a process may hold any number of leased grants
//! of one lock: reads and permits of a weighted kind, from one thread or several). Only the
//! holder of the ticket writes it, always by a compare-and-swap from the value it read before
//! checking (field, then word) that it still holds the ticket, and always before the field CAS
//! that publishes it (`Pending → Leased`, or `Leased → Leased` with a new version). A holder
//! that lost its ticket and stalled before its CAS finds the value changed if the slot's next
//! user wrote its own deadline since (tagged with another lap): it can never overwrite a later
//! grant's deadline. A value read with a tag other than its ticket's lap is not that ticket's.
//! (A deadline per participant entry would let a process hold only one leased grant of a
//! weighted kind.)
//!
//! Deadlines are `CLOCK_MONOTONIC`, so every process sharing a leased lock must be in the same
//! time namespace (documented in DESIGN.md).

const DATA_BITS: u32 = 18;
const DATA_MASK: u64 = (1 << DATA_BITS) - 1;
const KIND_SHIFT: u32 = DATA_BITS;
const KIND_MASK: u64 = 0b11;
const VERSION_SHIFT: u32 = 20;
const VERSION_MASK: u64 = (1 << 44) - 1;

/// What a lease field says about the ticket whose (`leased`) word names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lease {
    /// No lease announced.
    None,
    /// The owner announced a lease of at least this many milliseconds and has not committed a
    /// deadline yet (it is waiting, or claimed a moment ago). An observer times it from when it
    /// first saw it, which is never earlier than the grant.
    Pending(u64),
    /// The lease runs until the deadline in the owner's participant entry.
    Leased,
    /// The lease was revoked: the ticket was taken over.
    Revoked,
}

/// A raw lease field value.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct LeaseField(pub u64);

impl LeaseField {
    /// What it says.
    #[inline]
    pub fn lease(self) -> Lease {
        match (self.0 >> KIND_SHIFT) & KIND_MASK {
            0 => Lease::None,
            1 => Lease::Pending(decode_duration(self.0 & DATA_MASK)),
            2 => Lease::Leased,
            _ => Lease::Revoked,
        }
    }

    /// The version (modulo 2^44).
    #[inline]
    pub fn version(self) -> u64 {
        self.0 >> VERSION_SHIFT
    }

    /// The value that replaces `self` to say `lease`: the next version.
    #[inline]
    pub fn next(self, lease: Lease) -> LeaseField {
        let (kind, data) = match lease {
            Lease::None => (0, 0),
            Lease::Pending(ms) => (1, duration_code(ms)),
            Lease::Leased => (2, 0),
            Lease::Revoked => (3, 0),
        };
        let version = self.version().wrapping_add(1) & VERSION_MASK;
        LeaseField((version << VERSION_SHIFT) | (kind << KIND_SHIFT) | data)
    }
}

impl core::fmt::Debug for LeaseField {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "LeaseField(v{}, {:?})", self.version(), self.lease())
    }
}

const DEADLINE_BITS: u32 = 44;
const DEADLINE_MASK: u64 = (1 << DEADLINE_BITS) - 1;
const TAG_MASK: u64 = (1 << (64 - DEADLINE_BITS)) - 1;

/// A raw deadline word (see the module notes).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Deadline(pub u64);

impl Deadline {
    /// The deadline `ms` of the ticket of lap `lap`.
    #[inline]
    pub fn new(lap: u64, ms: u64) -> Deadline {
        Deadline(((lap & TAG_MASK) << DEADLINE_BITS) | ms.min(DEADLINE_MASK))
    }

    /// The deadline, if this is the one of the ticket of lap `lap`.
    #[inline]
    pub fn of(self, lap: u64) -> Option<u64> {
        (self.0 >> DEADLINE_BITS == lap & TAG_MASK).then_some(self.0 & DEADLINE_MASK)
    }
}

impl core::fmt::Debug for Deadline {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "Deadline({} ms, lap tag {})",
            self.0 & DEADLINE_MASK,
            self.0 >> DEADLINE_BITS
        )
    }
}

const MANTISSA_BITS: u32 = 13;
const MANTISSA_MASK: u64 = (1 << MANTISSA_BITS) - 1;

/// A lease duration in 18 bits: 5 bits of exponent, 13 of mantissa, `ms = m << e`, **rounded
/// up** (an observer must never take a pending lease over early). Exact below 8192 ms; within
/// 0.025 % above; up to 2^44 ms, more than the longest lease the API accepts (2^41 ms).
pub fn duration_code(ms: u64) -> u64 {
    let ms = ms.clamp(1, MANTISSA_MASK << 31);
    let mut e = 0u32;
    while (ms.div_ceil(1 << e)) > MANTISSA_MASK {
        e += 1;
    }
    (u64::from(e) << MANTISSA_BITS) | ms.div_ceil(1 << e)
}

/// The duration a [`duration_code`] stands for (never less than the one encoded).
pub fn decode_duration(code: u64) -> u64 {
    let e = (code >> MANTISSA_BITS) & 0x1F;
    (code & MANTISSA_MASK) << e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_and_versions_rise() {
        let mut f = LeaseField(0);
        assert_eq!(f.lease(), Lease::None);
        for l in [
            Lease::Pending(1500),
            Lease::Leased,
            Lease::Leased,
            Lease::Revoked,
            Lease::None,
        ] {
            let n = f.next(l);
            assert_eq!(n.lease(), l);
            assert_eq!(n.version(), f.version() + 1);
            assert_ne!(n, f);
            f = n;
        }
        // The version wraps after 2^44 writes, never sooner.
        let top = LeaseField(VERSION_MASK << VERSION_SHIFT);
        assert_eq!(top.next(Lease::Leased).version(), 0);
    }

    #[test]
    fn a_deadline_is_its_lap_s_only() {
        let d = Deadline::new(7, 123_456);
        assert_eq!(d.of(7), Some(123_456));
        assert_eq!(d.of(8), None);
        assert_eq!(d.of(7 + (1 << 20)), Some(123_456), "20 bits of the lap");
        assert_eq!(Deadline::new(1, u64::MAX).of(1), Some(DEADLINE_MASK));
        assert_eq!(Deadline(0).of(1), None, "zero: nobody's");
    }

    #[test]
    fn durations_round_up_never_down() {
        for ms in [
            1u64,
            2,
            60,
            8191,
            8192,
            8193,
            60_000,
            3_600_000,
            123_456_789,
            (1 << 41) - 2,
        ] {
            let d = decode_duration(duration_code(ms));
            assert!(d >= ms, "{ms} ms decoded as {d}");
            assert!(
                d - ms <= ms / 4096 + 1,
                "{ms} ms decoded as {d}: too coarse"
            );
            assert!(duration_code(ms) <= DATA_MASK);
        }
        assert_eq!(decode_duration(duration_code(60)), 60);
    }
}
