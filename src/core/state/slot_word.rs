//! The slot word: one 64-bit atomic per waiting-array slot that decides everything about the
//! ticket using the slot.
//!
//! | bits   | field         | meaning                                                        |
//! |--------|---------------|----------------------------------------------------------------|
//! | 0..4   | `state`       | a [`State`]                                                    |
//! | 4      | `died`        | the previous holder did not release (died, or lease taken over) |
//! | 5      | `leased`      | the ticket's owner asked for a lease: the slot's lease field is its own |
//! | 6      | `shared`      | the ticket asks for a share (a reader, a permit), not the whole lock; only in files of a weighted kind |
//! | 7      | —             | zero                                                           |
//! | 8..20  | `participant` | index of the process (participant entry) that owns the ticket  |
//! | 20..64 | `lap`         | `(ticket >> slot_shift) + 1`, modulo 2^44                      |
//!
//! Ticket `t` uses slot `t % N`; its lap tells the ticket from earlier and later users of the
//! same slot. Because the owner's participant index is part of the word, who owns a ticket is
//! published in the same compare-and-swap as its state: no field is written before the slot is
//! ours, so a stalled process can never overwrite a later ticket's identity.
//!
//! The `leased` bit binds the slot's lease field to the ticket: the owner announces its lease in
//! that field *before* it publishes the word with `leased` set, so whoever reads a `leased`
//! word of lap `L` knows the lease field holds lap `L`'s lease (see [`crate::core::state::lease`]).
//! A word without it says the lease field belongs to nobody current and is to be ignored.
//!
//! Futex waits use the low 32 bits of the word (little-endian: the first four bytes), which
//! hold the state, so every state change is visible to `FUTEX_WAIT`.

/// Where a ticket stands. `Done`, `Abandoned`, `Skipped` and `Revoked` are final: the ticket
/// will never hold the lock again and its slot is free for the next lap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// Released by its holder (final). Zero, so a zeroed slot is "free for lap 1".
    Done = 0,
    /// A published waiter; it may be spinning.
    Waiting = 1,
    /// A published waiter parked on the futex; a grant must wake it.
    Sleeping = 2,
    /// Granted before the ticket's taker published (pre-grant); the taker claims it.
    Ready = 3,
    /// Granted to a published waiter that has not claimed it yet.
    Granted = 4,
    /// Held.
    Held = 5,
    /// The waiter gave up (timeout) before it was granted (final).
    Abandoned = 6,
    /// Passed over by `advance` because its owner is dead or never claimed it (final).
    Skipped = 7,
    /// Its holder was taken over: dead, or its lease expired (final).
    Revoked = 8,
}

impl State {
    /// Decodes the low four bits; `None` for a value no version of fairlock writes.
    #[inline]
    pub fn from_bits(bits: u8) -> Option<State> {
        Some(match bits {
            0 => State::Done,
            1 => State::Waiting,
            2 => State::Sleeping,
            3 => State::Ready,
            4 => State::Granted,
            5 => State::Held,
            6 => State::Abandoned,
            7 => State::Skipped,
            8 => State::Revoked,
            _ => return None,
        })
    }

    /// Final states free the slot for the next lap.
    #[inline]
    pub fn is_final(self) -> bool {
        matches!(
            self,
            State::Done | State::Abandoned | State::Skipped | State::Revoked
        )
    }

    /// States in which the ticket is at the head of the queue: granted or held.
    #[inline]
    pub fn is_granted(self) -> bool {
        matches!(self, State::Ready | State::Granted | State::Held)
    }

    /// A lower-case name, for status output.
    pub fn name(self) -> &'static str {
        match self {
            State::Done => "done",
            State::Waiting => "waiting",
            State::Sleeping => "sleeping",
            State::Ready => "ready",
            State::Granted => "granted",
            State::Held => "held",
            State::Abandoned => "abandoned",
            State::Skipped => "skipped",
            State::Revoked => "revoked",
        }
    }
}

const STATE_MASK: u64 = 0xF;
const DIED_BIT: u64 = 1 << 4;
const LEASED_BIT: u64 = 1 << 5;
const SHARED_BIT: u64 = 1 << 6;
const PARTICIPANT_SHIFT: u32 = 8;
const PARTICIPANT_BITS: u32 = 12;
const PARTICIPANT_MASK: u64 = (1 << PARTICIPANT_BITS) - 1;
const LAP_SHIFT: u32 = 20;
/// Number of bits of the lap kept in the word.
pub const LAP_BITS: u32 = 44;
const LAP_MASK: u64 = (1 << LAP_BITS) - 1;

/// The largest number of participant entries a file can have (12 bits of the word).
pub const MAX_PARTICIPANTS: u32 = 1 << PARTICIPANT_BITS;
/// The largest `slot_shift`: tickets must keep at least `LAP_BITS` bits after the shift so that
/// laps wrap consistently with tickets (2^44 divides 2^(64 - shift)).
pub const MAX_SLOT_SHIFT: u32 = 64 - LAP_BITS;

/// A decoded slot word.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Word(pub u64);

impl Word {
    /// Builds a word.
    #[inline]
    pub fn new(lap: u64, participant: u32, state: State, died: bool) -> Word {
        Word(
            ((lap & LAP_MASK) << LAP_SHIFT)
                | ((u64::from(participant) & PARTICIPANT_MASK) << PARTICIPANT_SHIFT)
                | if died { DIED_BIT } else { 0 }
                | state as u64,
        )
    }

    /// The state, or `None` for garbage.
    #[inline]
    pub fn state(self) -> Option<State> {
        State::from_bits((self.0 & STATE_MASK) as u8)
    }

    /// The lap (modulo 2^44).
    #[inline]
    pub fn lap(self) -> u64 {
        self.0 >> LAP_SHIFT
    }

    /// The participant index of the ticket's owner.
    #[inline]
    pub fn participant(self) -> u32 {
        ((self.0 >> PARTICIPANT_SHIFT) & PARTICIPANT_MASK) as u32
    }

    /// Whether the previous holder did not release.
    #[inline]
    pub fn died(self) -> bool {
        self.0 & DIED_BIT != 0
    }

    /// Whether the ticket's owner asked for a lease (its lease field is this lap's).
    #[inline]
    pub fn leased(self) -> bool {
        self.0 & LEASED_BIT != 0
    }

    /// Whether the ticket asks for a share (a reader of a reader/writer lock, a semaphore's
    /// permit) rather than the whole lock.
    #[inline]
    pub fn shared(self) -> bool {
        self.0 & SHARED_BIT != 0
    }

    /// The same word with the shared flag set to `shared`.
    #[inline]
    pub fn with_shared(self, shared: bool) -> Word {
        Word((self.0 & !SHARED_BIT) | if shared { SHARED_BIT } else { 0 })
    }

    /// The same word with another state (lap, participant, died, leased and shared flags kept).
    #[inline]
    pub fn with_state(self, state: State) -> Word {
        Word((self.0 & !STATE_MASK) | state as u64)
    }

    /// The same word with the died flag set to `died`.
    #[inline]
    pub fn with_died(self, died: bool) -> Word {
        Word((self.0 & !DIED_BIT) | if died { DIED_BIT } else { 0 })
    }

    /// The same word with the leased flag set to `leased`.
    #[inline]
    pub fn with_leased(self, leased: bool) -> Word {
        Word((self.0 & !LEASED_BIT) | if leased { LEASED_BIT } else { 0 })
    }

    /// The same word owned by `participant` (a leased claim of a `Ready` word names its taker).
    #[inline]
    pub fn with_participant(self, participant: u32) -> Word {
        Word(
            (self.0 & !(PARTICIPANT_MASK << PARTICIPANT_SHIFT))
                | ((u64::from(participant) & PARTICIPANT_MASK) << PARTICIPANT_SHIFT),
        )
    }

    /// The low 32 bits, the value the futex compares.
    #[inline]
    pub fn futex_value(self) -> u32 {
        self.0 as u32
    }
}

impl core::fmt::Debug for Word {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.state() {
            Some(s) => write!(
                f,
                "Word(lap {}, participant {}, {}{}{}{})",
                self.lap(),
                self.participant(),
                s.name(),
                if self.died() { ", died" } else { "" },
                if self.leased() { ", leased" } else { "" },
                if self.shared() { ", shared" } else { "" }
            ),
            None => write!(f, "Word({:#x}: bad state)", self.0),
        }
    }
}

/// The lap of ticket `t` in a waiting array of `1 << shift` slots.
#[inline]
pub fn lap_of(ticket: u64, shift: u32) -> u64 {
    ((ticket >> shift).wrapping_add(1)) & LAP_MASK
}

/// How a slot's lap relates to the lap of the ticket we are asking about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LapRelation {
    /// The slot is still (or was last) used by the ticket one lap earlier.
    Previous,
    /// The slot belongs to this ticket.
    Same,
    /// The slot has moved on to a later ticket: ours is long final.
    Later,
    /// The slot is two or more laps behind: impossible in a consistent file.
    Behind,
}

/// Compares lap `slot_lap` (from a word) with `ticket_lap`, modulo 2^44.
#[inline]
pub fn relate(slot_lap: u64, ticket_lap: u64) -> LapRelation {
    let d = slot_lap.wrapping_sub(ticket_lap) & LAP_MASK;
    if d == 0 {
        LapRelation::Same
    } else if d == LAP_MASK {
        LapRelation::Previous
    } else if d < (1 << (LAP_BITS - 1)) {
        LapRelation::Later
    } else {
        LapRelation::Behind
    }
}

/// The ticket at or below `next` whose slot is `i` (of `1 << shift`) and whose lap is `lap`
/// (modulo 2^44, as words keep it): the most recent such ticket.
pub fn ticket_of(lap: u64, i: u64, shift: u32, next: u64) -> u64 {
    let lap_mask = (1u64 << LAP_BITS) - 1;
    // Laps are `(t >> shift) + 1`; how many laps `lap` is behind the lap of `next`.
    let next_lap = lap_of(next, shift);
    let behind = next_lap.wrapping_sub(lap) & lap_mask;
    ((next >> shift).wrapping_sub(behind) << shift) | (i & ((1u64 << shift) - 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        let w = Word::new(0x0ABC_DEF0_1234, 4095, State::Granted, true);
        assert_eq!(w.lap(), 0x0ABC_DEF0_1234);
        assert_eq!(w.participant(), 4095);
        assert_eq!(w.state(), Some(State::Granted));
        assert!(w.died());
        let h = w.with_state(State::Held).with_leased(true);
        assert_eq!(h.state(), Some(State::Held));
        assert_eq!((h.lap(), h.participant(), h.died()), (w.lap(), 4095, true));
        assert!(h.leased() && !w.leased());
        assert!(!h.with_died(false).died() && h.with_died(false).leased());
        assert_eq!(h.with_participant(7).participant(), 7);
        assert_eq!(h.with_participant(7).with_participant(4095), h);
        assert_ne!(w.futex_value(), h.futex_value());
        let s = h.with_shared(true);
        assert!(s.shared() && !h.shared());
        assert!(s.with_state(State::Done).with_died(false).shared());
        assert_eq!(
            (s.lap(), s.participant(), s.leased(), s.died()),
            (h.lap(), 4095, true, true)
        );
        assert_eq!(s.with_shared(false), h);
    }

    #[test]
    fn zero_word_is_previous_lap_done_for_first_tickets() {
        let w = Word(0);
        assert_eq!(w.state(), Some(State::Done));
        for shift in [1, 8, 10, MAX_SLOT_SHIFT] {
            assert_eq!(relate(w.lap(), lap_of(0, shift)), LapRelation::Previous);
        }
    }

    #[test]
    fn laps_wrap_with_tickets() {
        for shift in [1u32, 8, 20] {
            let n = 1u64 << shift;
            // The last ticket before 2^64 wraps and the first after it share slot 0's sequence.
            let before = u64::MAX - n + 1; // slot 0, last lap before the wrap
            let after = 0u64;
            assert_eq!(before % n, after % n);
            assert_eq!(
                relate(lap_of(before, shift), lap_of(after, shift)),
                LapRelation::Previous
            );
        }
    }

    #[test]
    fn relations() {
        assert_eq!(relate(5, 5), LapRelation::Same);
        assert_eq!(relate(4, 5), LapRelation::Previous);
        assert_eq!(relate(6, 5), LapRelation::Later);
        assert_eq!(relate(3, 5), LapRelation::Behind);
        assert_eq!(relate(LAP_MASK, 0), LapRelation::Previous);
        assert_eq!(relate(0, LAP_MASK), LapRelation::Later);
    }

    #[test]
    fn garbage_state_decodes_to_none() {
        for bits in 9..16u64 {
            assert_eq!(Word(bits).state(), None);
        }
    }
}
