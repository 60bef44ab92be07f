//! The laps of a slot whose takers gave up before they could publish: one word per slot, so
//! that a taker that gives up can always say so where the walk finds it, and a walk passes
//! such a ticket at once, with one load — however many there are.
//!
//! A taker of ticket `t` whose slot is still used by an earlier lap (more than `N` tickets
//! outstanding: it is *lapped*) cannot publish, so when it times out (or, for a share, when it
//! retakes rather than wait behind a long-held share) its ticket is unpublished. Without a word
//! from it, a walk cannot tell it from a taker about to publish, and pre-grants it and waits a
//! grace (50 ms) for a claim that never comes — one grace per such ticket, and a polling loop
//! makes them far faster than that.
//!
//! The word is `base (44-bit lap) | bits (20)`:
//!
//! | bits   | field  | meaning                                                          |
//! |--------|--------|------------------------------------------------------------------|
//! | 0..20  | `bits` | bit `i`: the taker of lap `base + 1 + i` gave up                  |
//! | 20..64 | `base` | every lap after the slot word's and up to `base` was given up     |
//!
//! A taker that gives up lap `ℓ` sets its bit; a run of given-up laps right after `base` is
//! *absorbed* (`base` moves up, the bits shift down), so a slot pinned by a long-held share,
//! whose every later lap is given up in turn, needs no more than the one word however long the
//! share holds. Only laps after the slot word's own lap mean anything: the word (and `head`:
//! every ticket before it is final or given up, in every kind) is the floor, and a `base`
//! below the floor is moved up to it (*rebased*) before a bit is set.
//!
//! **Room.** A ticket whose lap is more than [`WINDOW`] laps after the floor has no bit: so a
//! ticket is taken only if its lap has one ([`has_room`], checked before the compare-and-swap
//! that takes it, and the floor only rises). A taker that finds no room waits for it without a
//! ticket: at most `N · (WINDOW + 1)` tickets are ever outstanding, which bounds every walk.
//!
//! **Giving up and the walk** are a Dekker pair: the taker sets its bit, then (after a `SeqCst`
//! fence) looks at the slot word; a walk that comes to the ticket pre-grants it (`Ready`), then
//! (after a `SeqCst` fence) looks at the bit. One of the two sees the other's write: the taker
//! finds its pre-grant and passes it itself, or the walk finds the bit and passes the ticket.
//! A bit is written by the ticket's own taker, after taking the ticket and after its last look
//! at the word — or, for a taker whose `lapped` entry names a dead process, by a walk on its
//! behalf — so a live taker that did not give up is never passed. `covers` counts every lap up
//! to `base` as given up, and a rebase moves `base` onto the slot word's lap: so a lap reads as
//! given up once its ticket published, too. Whoever passes a ticket on its bit without writing
//! its slot must check that the slot still shows the earlier lap's word it read
//! (`weighted::lapped_gone`); a pre-grant (`Ready`) or a `Skipped` written by CAS checks it by
//! the CAS.

use crate::core::state::slot_word::{LAP_BITS, LapRelation, State, Word, relate};
use crate::core::state::{LockState, Slot};
use crate::primitive::Ordering::{AcqRel, Acquire};

/// How many laps after the floor a ticket may be taken at, and so how many laps of a slot may
/// be outstanding beyond the one its word shows (the word's 20 low bits).
pub const WINDOW: u64 = 20;

const BITS_MASK: u64 = (1 << WINDOW) - 1;
const LAP_MASK: u64 = (1 << LAP_BITS) - 1;

/// A decoded given-up word.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct GivenUp(pub u64);

impl GivenUp {
    /// The word for `base` and `bits`.
    #[inline]
    fn new(base: u64, bits: u64) -> GivenUp {
        GivenUp(((base & LAP_MASK) << WINDOW) | (bits & BITS_MASK))
    }

    /// Every lap after the slot word's and up to this one was given up.
    #[inline]
    pub fn base(self) -> u64 {
        self.0 >> WINDOW
    }

    /// Bit `i`: lap `base + 1 + i` was given up.
    #[inline]
    pub fn bits(self) -> u64 {
        self.0 & BITS_MASK
    }

    /// Whether lap `lap` (one after the slot word's lap, or later) is recorded as given up.
    #[inline]
    pub fn covers(self, lap: u64) -> bool {
        let d = lap.wrapping_sub(self.base()) & LAP_MASK;
        if d == 0 || d >= 1 << (LAP_BITS - 1) {
            return true; // at or before `base`: absorbed
        }
        d <= WINDOW && self.bits() & (1 << (d - 1)) != 0
    }

    /// The same word with its base moved up to `floor`, if `floor` is after it (the bits of
    /// laps up to `floor` dropped: those laps are the slot word's business now), and the run
    /// of given-up laps right after the base absorbed.
    #[inline]
    fn rebased(self, floor: u64) -> GivenUp {
        let k = floor.wrapping_sub(self.base()) & LAP_MASK;
        let (base, bits) = if k == 0 || k >= 1 << (LAP_BITS - 1) {
            (self.base(), self.bits())
        } else if k >= WINDOW {
            (floor, 0)
        } else {
            (floor, self.bits() >> k)
        };
        absorbed(base, bits)
    }

    /// The same word with lap `lap` given up and the run after `base` absorbed; `None` if the
    /// lap has no bit (more than [`WINDOW`] laps after `base`).
    #[inline]
    fn with(self, lap: u64) -> Option<GivenUp> {
        let d = lap.wrapping_sub(self.base()) & LAP_MASK;
        if d == 0 || d >= 1 << (LAP_BITS - 1) {
            return Some(self);
        }
        if d > WINDOW {
            return None;
        }
        Some(absorbed(self.base(), self.bits() | (1 << (d - 1))))
    }
}

/// `base` and `bits` with the run of set bits at the bottom absorbed into `base`.
#[inline]
fn absorbed(base: u64, bits: u64) -> GivenUp {
    let run = bits.trailing_ones();
    GivenUp::new(
        base.wrapping_add(u64::from(run)),
        bits.checked_shr(run).unwrap_or(0),
    )
}

impl core::fmt::Debug for GivenUp {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "GivenUp(base {}, bits {:#07x})",
            self.base(),
            self.bits()
        )
    }
}

/// The floor of ticket `t`'s lap in its slot, whose word is `w`: the latest earlier lap that
/// needs no bit — the word's own lap, or the lap before the first ticket of this slot at or
/// after `head` (every ticket before `head` is final; in an exclusive lock, fast tickets never
/// touch their slots, so the word may be many laps behind).
///
/// A word that pre-grants its lap (`Ready`) is not yet that lap's floor: the lap's bit (set
/// before the pre-grant, if its taker gave up) is what the walk that made it, and recovery,
/// look at next — a later lap's give-up must not rebase it away (it did: a live taker's
/// pre-grant read as given up and was passed).
#[inline]
fn floor(st: &LockState<'_>, t: u64, w: Word) -> u64 {
    let lap = st.lap(t);
    let own = word_floor(w);
    if relate(w.lap(), lap) != LapRelation::Behind {
        return own;
    }
    // Acquire: pairs with the Release raise of `head` (`frontier::raise_head`).
    let head = st.header().head.load(Acquire);
    // The tickets of this slot at or after `head` are `t`, `t - N`, ... : `k + 1` of them.
    let k = t.wrapping_sub(head) >> st.slot_shift();
    if k >= 1 << (LAP_BITS - 2) {
        return own; // `head` beyond `t`, or absurdly far behind: the word alone
    }
    let before_first = lap.wrapping_sub(k).wrapping_sub(1) & LAP_MASK;
    if relate(before_first, own) == LapRelation::Later
        && matches!(
            relate(before_first, lap),
            LapRelation::Previous | LapRelation::Behind
        )
    {
        before_first
    } else {
        own
    }
}

/// The latest lap slot word `w` settles: its own — but for a pre-grant (`Ready`), the one
/// before (see [`floor`]).
#[inline]
fn word_floor(w: Word) -> u64 {
    if w.state() == Some(State::Ready) {
        w.lap().wrapping_sub(1) & LAP_MASK
    } else {
        w.lap()
    }
}

/// Whether ticket `t`, not taken yet, may be taken now: if its taker is lapped and gives up,
/// it has a bit to say so. Read before the compare-and-swap that takes the ticket; the floor
/// and `base` only rise, so the answer stays true until then.
#[inline]
pub fn has_room(st: &LockState<'_>, t: u64) -> bool {
    let slot = st.slot(t);
    let lap = st.lap(t);
    // Acquire: pairs with the CASes that moved the word (a publication, a pass).
    let w = Word(slot.word.load(Acquire));
    if relate(w.lap(), lap) != LapRelation::Behind {
        return true; // free for this lap, or lapped by one: the first bit at most
    }
    has_room_behind(st, t, w)
}

/// [`has_room`] for a slot whose word is laps behind `t`'s: out of line (a long queue).
#[cold]
#[inline(never)]
fn has_room_behind(st: &LockState<'_>, t: u64, w: Word) -> bool {
    let slot = st.slot(t);
    let lap = st.lap(t);
    // Acquire: pairs with the AcqRel CAS of `give_up`.
    let g = GivenUp(slot.given_up.load(Acquire)).rebased(floor(st, t, w));
    let d = lap.wrapping_sub(g.base()) & LAP_MASK;
    d == 0 || d >= 1 << (LAP_BITS - 1) || d <= WINDOW
}

/// What [`give_up`] came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GaveUp {
    /// The bit is set (the caller then looks at the word: see the module notes).
    Recorded,
    /// The slot word already shows our lap (`word`): a walk pre-granted or passed it; the
    /// caller deals with it there.
    InWord(Word),
}

/// The taker of ticket `t` (lapped: it never published) gives it up: sets its lap's bit. Only
/// the ticket's own taker calls this, after its last look at the word.
pub fn give_up(st: &LockState<'_>, t: u64) -> GaveUp {
    let slot = st.slot(t);
    let lap = st.lap(t);
    loop {
        // Acquire: pairs with the AcqRel CAS below (another taker's bit).
        let cur = GivenUp(slot.given_up.load(Acquire));
        // Acquire: as in `has_room`.
        let w = Word(slot.word.load(Acquire));
        if matches!(relate(w.lap(), lap), LapRelation::Same | LapRelation::Later) {
            return GaveUp::InWord(w);
        }
        let Some(new) = cur.rebased(floor(st, t, w)).with(lap) else {
            // No bit: only a corrupt file (the ticket was taken with room, and the floor only
            // rises). The ticket is then passed after the grace, as an unpublished one.
            return GaveUp::Recorded;
        };
        if new == cur {
            return GaveUp::Recorded;
        }
        // AcqRel: one read-modify-write chain with the other takers' bits.
        if slot
            .given_up
            .compare_exchange(cur.0, new.0, AcqRel, Acquire)
            .is_ok()
        {
            return GaveUp::Recorded;
        }
    }
}

/// Whether the taker of the ticket of lap `lap` in `slot` (unpublished: the slot word shows an
/// earlier lap) gave it up.
#[inline]
pub fn given_up(slot: &Slot, lap: u64) -> bool {
    // Acquire: pairs with the AcqRel CAS of `give_up`.
    GivenUp(slot.given_up.load(Acquire)).covers(lap)
}

/// Whether every lap after `word_lap` (the slot word's) and before `lap` was given up: then a
/// taker of `lap` may publish over the word (a weighted kind's retaken laps, which nobody
/// wrote: see `publish::may_reuse`). Constant time, however many laps that is.
pub fn all_given_up_between(slot: &Slot, word_lap: u64, lap: u64) -> bool {
    // Acquire: as in `given_up`.
    let g = GivenUp(slot.given_up.load(Acquire));
    // Laps counted from the word's: the taker's is `d`, the ones to cover `1..d`.
    let rel = |x: u64| {
        let r = x.wrapping_sub(word_lap) & LAP_MASK;
        if r >= 1 << (LAP_BITS - 1) {
            r as i64 - (1i64 << LAP_BITS)
        } else {
            r as i64
        }
    };
    let d = rel(lap);
    let b = rel(g.base());
    // Laps up to `base` (after the word) are absorbed; the rest, `max(1, b + 1)..d`, need bits.
    let from = 1.max(b + 1);
    if from >= d {
        return true;
    }
    let (i0, n) = (from - b - 1, d - from);
    if i0 + n > WINDOW as i64 {
        return false;
    }
    let need = ((1u64 << n) - 1) << i0;
    g.bits() & need == need
}

/// Moves a `base` that fell far behind its slot's word up to the word's lap (bits of laps up to
/// it dropped), so that laps compared modulo 2^44 never read a stale `base` as a later one. By
/// the taker that wraps the counter, for every slot ([`refresh_slots`]).
pub(crate) fn refresh(slot: &Slot) {
    // Acquire: as in `give_up`.
    let cur = GivenUp(slot.given_up.load(Acquire));
    let w = Word(slot.word.load(Acquire));
    // Not past a pre-granted lap (see `floor`).
    let new = cur.rebased(word_floor(w));
    if new != cur {
        // A lost race means someone wrote a fresher value.
        let _ = slot
            .given_up
            .compare_exchange(cur.0, new.0, AcqRel, Acquire);
    }
}

/// After the counter wrapped (every 2^36 tickets), by the taker that wrapped it: brings every
/// slot that shows a final word several laps behind (`Behind`: only fast tickets used it
/// since) up to the lap before its next user's. Fast tickets never touch the slots, and laps
/// are compared modulo 2^44 with a 2^43 window, so a slot left alone for 2^43 laps (2^44
/// uncontended acquisitions with two slots) would read as a *later* lap, and takers of it
/// as skipped. Refreshed at every wrap, a slot is never more than 2^36
/// tickets behind (2^37 if a refresher is killed half-way; the next wrap finishes).
///
/// The next user of slot `s` is the first ticket at or after `base` that maps to it: `head`
/// while somebody queues (tickets before it are final; from it on they are queued ones), the
/// counter while nobody does (every ticket before it is final or fast). Only final words
/// strictly behind that ticket's previous lap are rewritten, by CAS from the value read (a
/// taker or walker that changed the word meanwhile wins); their news, if any, was passed on
/// long ago (`may_reuse`).
#[cold]
#[inline(never)]
pub(crate) fn refresh_slots(st: &LockState<'_>) {
    let n = st.slot_count();
    if st.is_weighted() {
        // Every ticket uses its slot: no word falls behind; a given-up word may.
        for i in 0..n {
            crate::core::queue::given_up::refresh(st.slot(i));
        }
        return;
    }
    // Acquire: as in `take` (and `head` after the word).
    let w = st.lock_word(Acquire);
    let base = if w.queued() {
        st.header().head.load(Acquire)
    } else {
        st.ticket_of(w)
    };
    for i in 0..n {
        let t = base.wrapping_add(i.wrapping_sub(base) & (n - 1));
        let slot = st.slot(t);
        let lap = st.lap(t);
        // Acquire: as in `advance`.
        let cur = Word(slot.word.load(Acquire));
        if relate(cur.lap(), lap) == LapRelation::Behind && cur.state().is_some_and(State::is_final)
        {
            let fresh = Word::new(lap.wrapping_sub(1), 0, State::Done, false);
            let _ = crate::core::state::format::cas(slot, cur, fresh);
        }
        refresh(slot);
    }
    crate::crash_point!("fast.refreshed");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_after_base_is_absorbed() {
        let g = GivenUp::new(10, 0);
        assert!(g.covers(10) && g.covers(9) && !g.covers(11));
        let g = g.with(12).unwrap();
        assert_eq!((g.base(), g.bits()), (10, 0b10));
        assert!(g.covers(12) && !g.covers(11) && !g.covers(13));
        let g = g.with(11).unwrap();
        assert_eq!((g.base(), g.bits()), (12, 0));
        assert!(g.covers(11) && g.covers(12) && !g.covers(13));
        assert_eq!(g.with(12), Some(g), "idempotent");
    }

    #[test]
    fn only_the_window_has_bits() {
        let g = GivenUp::new(100, 0);
        assert!(g.with(100 + WINDOW).is_some());
        assert!(g.with(100 + WINDOW + 1).is_none());
        let g = g.with(100 + WINDOW).unwrap();
        assert!(g.covers(100 + WINDOW) && !g.covers(100 + WINDOW - 1));
    }

    #[test]
    fn rebasing_drops_what_the_word_now_shows() {
        let g = GivenUp::new(5, 0b1100).rebased(6);
        assert_eq!((g.base(), g.bits()), (6, 0b110));
        let g = GivenUp::new(5, 0b1010).rebased(5 + WINDOW + 3);
        assert_eq!((g.base(), g.bits()), (5 + WINDOW + 3, 0));
        let g = GivenUp::new(9, 0b10).rebased(4);
        assert_eq!((g.base(), g.bits()), (9, 0b10), "never lowered");
        let g = GivenUp::new(5, 0b1010).rebased(6);
        assert_eq!(
            (g.base(), g.bits()),
            (7, 0b10),
            "a run right after the new base absorbed"
        );
    }

    #[test]
    fn laps_wrap() {
        let top = LAP_MASK; // the last lap before the wrap
        let g = GivenUp::new(top, 0).with(1).unwrap();
        assert_eq!((g.base(), g.bits()), (top, 0b10));
        assert!(g.covers(1) && !g.covers(0));
        let g = g.with(0).unwrap();
        assert_eq!((g.base(), g.bits()), (1, 0));
        assert!(g.covers(top) && g.covers(0) && g.covers(1) && !g.covers(2));
    }

    #[test]
    fn laps_between_a_word_and_a_taker() {
        let slot = crate::core::state::Slot::zeroed();
        let set = |g: GivenUp| {
            slot.given_up
                .store(g.0, crate::primitive::Ordering::Relaxed)
        };
        // The next lap: nothing between.
        set(GivenUp(0));
        assert!(all_given_up_between(&slot, 5, 6));
        // Laps 6..=9 between word 5 and lap 10.
        set(GivenUp::new(9, 0));
        assert!(all_given_up_between(&slot, 5, 10));
        set(GivenUp::new(8, 0));
        assert!(!all_given_up_between(&slot, 5, 10), "lap 9 not given up");
        set(GivenUp::new(7, 0b11));
        assert!(all_given_up_between(&slot, 5, 10), "bits for 8 and 9");
        set(GivenUp::new(7, 0b10));
        assert!(!all_given_up_between(&slot, 5, 10));
        // A base at or before the word covers nothing.
        set(GivenUp::new(5, 0b1111));
        assert!(all_given_up_between(&slot, 5, 10), "bits for 6..=9");
        set(GivenUp::new(3, 0));
        assert!(!all_given_up_between(&slot, 5, 10));
        set(GivenUp::new(4, 0b1_1110));
        assert!(
            all_given_up_between(&slot, 5, 10),
            "bits for 6..=9 from a base before the word"
        );
        set(GivenUp::new(4, 0b1_1010));
        assert!(!all_given_up_between(&slot, 5, 10), "lap 7 not given up");
    }

    #[test]
    fn zero_is_empty() {
        let g = GivenUp(0);
        assert!(!g.covers(1) && !g.covers(2));
    }
}
