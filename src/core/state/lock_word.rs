//! The lock word: one 64-bit atomic in the header (offset 64, alone with the `epoch` on its
//! cache line) that holds the next ticket and, when nobody queues, the whole lock.
//!
//! | bits    | field     | meaning                                                         |
//! |---------|-----------|-----------------------------------------------------------------|
//! | 0       | `H`       | held by a *fast* holder (granted by the word itself, no slot)    |
//! | 1       | `Q`       | queued mode: tickets at or after `head` go through the slots     |
//! | 2       | `D`       | the next fast grant carries "owner died" (only while `Q = 0`)    |
//! | 3       | —         | zero                                                            |
//! | 4..16   | `holder`  | the fast holder's participant entry (meaningful while `H = 1`)  |
//! | 16      | `G`       | the fast holder *barged*: took the lock ahead of `head`'s grant (bounded files only) |
//! | 17..27  | `B`       | barges so far, modulo 2^10 (bounded files only; zero otherwise)  |
//! | 27..63  | `counter` | the low 36 bits of the next ticket to be handed out             |
//! | 63      | `P`       | the parity of the epoch of the ticket `counter` names            |
//!
//! A ticket is 64 bits: `epoch · 2^36 + counter`, with `epoch` in the header word after this
//! one. `P` sits right above the counter, so the carry of the ticket that wraps the counter
//! flips it — in a CAS or in a `fetch_add` alike (with `P` elsewhere, a `fetch_add` taker that
//! stalled between choosing `fetch_add` and making it could wrap the counter without flipping
//! `P`) — and whoever then finds `epoch`'s parity stale raises it by one
//! ([`full_ticket`]), so every ticket is known in full from the word it was taken from and the
//! epoch read afterwards — as long as nobody stalls for 2^35 tickets between the two (the
//! documented horizon).
//!
//! The states of the word (see `docs/DESIGN.md`, "The lock word"):
//!
//! * `Q = 0, H = 0`: free. One CAS to `{counter + 1, H = 1, holder = me, D = 0}` takes ticket
//!   `counter` *and* grants it (its died flag is the `D` it cleared): the uncontended acquire.
//! * `Q = 0, H = 1`: held by the fast holder of ticket `counter − 1`; nobody waits. Its
//!   release is one CAS back to `{counter, H = 0}`.
//! * `Q = 1`: somebody queued. Tickets are taken by CAS keeping the flags and go through the
//!   slots as in the slot protocol; `head` is at most the first unfinished queued ticket. A
//!   fast holder may still hold (`H = 1`: the first queuer came while it held); walks grant
//!   nothing until it has cleared `H`. The walk that finds every ticket before `counter` final
//!   drains the queue (`Q → 0`, `D` = the died flag it carries) with one CAS on the word.
//!
//! * `Q = 1, H = 1, G = 1` (files with a bypass bound only, see [`crate::core::exclusive::barge`]): `head`'s
//!   ticket is granted but not yet claimed, and a running thread took the lock ahead of it
//!   with one CAS (`B + 1`). The grantee's claim and the barger's CAS are a Dekker pair; the
//!   grantee waits for `H` to clear. `D` may then be set while `Q = 1`: a dead barger's news,
//!   for whoever takes the lock next (the grantee or another barger).
//!
//! Files of a weighted kind keep `Q = 1` for ever: every acquisition queues.

/// Held by a fast holder.
pub const H: u64 = 1 << 0;
/// Queued mode.
pub const Q: u64 = 1 << 1;
/// The next fast grant carries "owner died".
pub const D: u64 = 1 << 2;
/// Parity of the epoch of the ticket `counter` names: the bit above the counter.
pub const P: u64 = 1 << 63;
/// The fast holder barged ahead of `head`'s grant (files with a bypass bound).
pub const G: u64 = 1 << 16;
const HOLDER_SHIFT: u32 = 4;
const HOLDER_MASK: u64 = (1 << 12) - 1;
const BARGES_SHIFT: u32 = 17;
/// Barges are counted modulo this (10 bits).
pub const BARGES_MOD: u32 = 1 << 10;
const BARGES_MASK: u64 = (BARGES_MOD as u64) - 1;
const COUNTER_SHIFT: u32 = 27;
/// Bits of the ticket kept in the word.
pub const COUNTER_BITS: u32 = 36;
const COUNTER_MASK: u64 = (1 << COUNTER_BITS) - 1;
/// One ticket, as an addend to the word (the counter's lowest bit).
pub const TICKET: u64 = 1 << COUNTER_SHIFT;

/// A decoded lock word.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct LockWord(pub u64);

impl LockWord {
    /// The word of a lock whose next ticket is `next`: free (`Q = 0`) for an exclusive lock,
    /// queued for good (`Q = 1`) for a weighted kind.
    pub fn initial(next: u64, weighted: bool) -> LockWord {
        let w = ((next & COUNTER_MASK) << COUNTER_SHIFT) | (((next >> COUNTER_BITS) & 1) << 63);
        LockWord(if weighted { w | Q } else { w })
    }

    /// Held by a fast holder.
    #[inline]
    pub fn held(self) -> bool {
        self.0 & H != 0
    }

    /// Queued mode.
    #[inline]
    pub fn queued(self) -> bool {
        self.0 & Q != 0
    }

    /// The next fast grant carries "owner died".
    #[inline]
    pub fn died(self) -> bool {
        self.0 & D != 0
    }

    /// The fast holder barged ahead of `head`'s grant.
    #[inline]
    pub fn barged(self) -> bool {
        self.0 & G != 0
    }

    /// Barges so far, modulo [`BARGES_MOD`].
    #[inline]
    pub fn barges(self) -> u32 {
        ((self.0 >> BARGES_SHIFT) & BARGES_MASK) as u32
    }

    /// The word after a barge by `participant`: held, `G` set, one more barge counted, `D`
    /// consumed (the barger is told the news).
    #[inline]
    pub fn barged_by(self, participant: u32) -> LockWord {
        let b = (u64::from(self.barges()) + 1) & BARGES_MASK;
        LockWord(
            (self.with_died(false).with_holder(participant).0 & !(BARGES_MASK << BARGES_SHIFT))
                | G
                | (b << BARGES_SHIFT),
        )
    }

    /// The fast holder's participant entry.
    #[inline]
    pub fn holder(self) -> u32 {
        ((self.0 >> HOLDER_SHIFT) & HOLDER_MASK) as u32
    }

    /// The low 36 bits of the next ticket.
    #[inline]
    pub fn counter(self) -> u64 {
        (self.0 >> COUNTER_SHIFT) & COUNTER_MASK
    }

    /// The parity of the next ticket's epoch.
    #[inline]
    pub fn parity(self) -> u64 {
        self.0 >> 63
    }

    /// The word after one more ticket was taken from it: flags kept, and when the counter
    /// wraps its carry flips `P` — exactly what a `fetch_add` of [`TICKET`] makes of it.
    #[inline]
    pub fn taken(self) -> LockWord {
        LockWord(self.0.wrapping_add(TICKET))
    }

    /// The word after a fast acquire by `participant`: one more ticket, held, `D` consumed.
    #[inline]
    pub fn acquired(self, participant: u32) -> LockWord {
        self.taken().with_died(false).with_holder(participant)
    }

    /// The word a fast holder of ticket `t` left, if nothing happened since its acquire:
    /// what its one-CAS release expects.
    #[inline]
    pub fn fast_held(t: u64, participant: u32) -> LockWord {
        LockWord::initial(t.wrapping_add(1), false).with_holder(participant)
    }

    /// The same word held by `participant`.
    #[inline]
    pub fn with_holder(self, participant: u32) -> LockWord {
        LockWord(
            (self.0 & !(HOLDER_MASK << HOLDER_SHIFT))
                | H
                | ((u64::from(participant) & HOLDER_MASK) << HOLDER_SHIFT),
        )
    }

    /// The same word with no fast holder (holder field and `G` cleared too).
    #[inline]
    pub fn unheld(self) -> LockWord {
        LockWord(self.0 & !(H | G | (HOLDER_MASK << HOLDER_SHIFT)))
    }

    /// The same word in queued mode.
    #[inline]
    pub fn with_queued(self) -> LockWord {
        LockWord(self.0 | Q)
    }

    /// The queue drained: not queued, not held, `D = died` for the next fast grant (a dead
    /// barger's news, which only a bounded file's queued word carries, is kept), the barge
    /// count back to 0 (nobody waits, so no arrival refers to it; left as it was, every later
    /// one-CAS release, which expects 0, missed).
    #[inline]
    pub fn drained(self, died: bool) -> LockWord {
        LockWord(
            self.unheld().0 & !(Q | D | (BARGES_MASK << BARGES_SHIFT))
                | if died || self.died() { D } else { 0 },
        )
    }

    /// The same word with `D = died`.
    #[inline]
    pub fn with_died(self, died: bool) -> LockWord {
        LockWord((self.0 & !D) | if died { D } else { 0 })
    }
}

impl core::fmt::Debug for LockWord {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "LockWord(counter {}, P{}{}{}{}, {} barges)",
            self.counter(),
            self.parity(),
            if self.queued() { ", queued" } else { "" },
            if self.held() {
                format!(
                    ", held by {}{}",
                    self.holder(),
                    if self.barged() { " (barged)" } else { "" }
                )
            } else {
                String::new()
            },
            if self.died() { ", died" } else { "" },
            self.barges(),
        )
    }
}

/// Half the counter's range: how far a reader may lag and still name a word's ticket.
const HALF: u64 = 1 << (COUNTER_BITS - 1);

/// The full 64-bit ticket `counter` of word `w` names, given `epoch` as read after `w`. If
/// `epoch`'s parity is the word's, it is the word's epoch. If not, either the counter wrapped
/// after `epoch` was read... no: `epoch` is read *after* the word, so either the word is newer
/// than the last raise (its counter wrapped and nobody has raised `epoch` yet: the counter is
/// small, and the epoch is `epoch + 1`) or older (read just before a wrap, `epoch` raised since:
/// the counter is large, and the epoch is `epoch − 1`). The counter's half tells them apart, so
/// this is right for any reader that lags fewer than 2^35 tickets (the documented horizon).
/// (Taking every mismatch for "not raised yet" would name a word read one ticket before the
/// wrap 2^36 tickets too far, and raise `epoch` twice.)
#[inline]
pub fn full_ticket(w: LockWord, epoch: u64) -> u64 {
    let e = if epoch & 1 == w.parity() {
        epoch
    } else if w.counter() < HALF {
        epoch.wrapping_add(1)
    } else {
        epoch.wrapping_sub(1)
    };
    (e << COUNTER_BITS) | w.counter()
}

/// Whether `epoch` must be raised for word `w`: its parity is stale and the word is newer than
/// the last raise (its counter wrapped; see [`full_ticket`]).
#[inline]
pub fn epoch_stale(w: LockWord, epoch: u64) -> bool {
    epoch & 1 != w.parity() && w.counter() < HALF
}

/// Whether taking a ticket from `w` wraps the counter (the taker then refreshes the slots:
/// [`crate::core::exclusive::fast`]).
#[inline]
pub fn wraps(w: LockWord) -> bool {
    w.counter() == COUNTER_MASK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip() {
        let w = LockWord::initial(5, false);
        assert_eq!(
            (w.counter(), w.parity(), w.held(), w.queued()),
            (5, 0, false, false)
        );
        let a = w.acquired(4095);
        assert!(a.held() && !a.queued() && !a.died());
        assert_eq!((a.counter(), a.holder()), (6, 4095));
        assert_eq!(a, LockWord::fast_held(5, 4095));
        assert_eq!(a.unheld(), LockWord::initial(6, false));
        let q = a.with_queued().taken();
        assert!(q.held() && q.queued());
        assert_eq!((q.counter(), q.holder()), (7, 4095));
        assert_eq!(q.drained(true), LockWord::initial(7, false).with_died(true));
        assert!(LockWord::initial(0, true).queued());
        assert!(
            !LockWord::initial(0, false)
                .with_died(true)
                .acquired(1)
                .died()
        );
    }

    #[test]
    fn barges_count_and_undo() {
        let q = LockWord::initial(9, false).with_queued().with_died(true);
        let b = q.barged_by(7);
        assert!(b.held() && b.barged() && b.queued() && !b.died());
        assert_eq!((b.holder(), b.barges(), b.counter()), (7, 1, 9));
        let t = b.taken();
        assert!(t.barged() && t.held());
        assert_eq!((t.barges(), t.counter()), (1, 10));
        assert_eq!(
            b.unheld().with_died(true).barges(),
            1,
            "an undone barge stays counted"
        );
        let r = b.unheld();
        assert!(!r.held() && !r.barged() && r.queued());
        assert_eq!(r.barges(), 1);
        let mut w = q;
        for _ in 0..BARGES_MOD {
            w = w.barged_by(1).unheld();
        }
        assert_eq!(w.barges(), 0, "counted modulo 2^10");
    }

    #[test]
    fn counter_wraps_into_the_epoch() {
        let last = (1u64 << COUNTER_BITS) - 1;
        for e in [0u64, 1, 2, 7] {
            let t = (e << COUNTER_BITS) | last;
            let w = LockWord::initial(t, false);
            assert_eq!(full_ticket(w, e), t);
            let n = w.taken();
            assert_eq!(n.counter(), 0);
            assert_eq!(full_ticket(n, e), t + 1, "epoch not raised yet");
            assert!(epoch_stale(n, e));
            assert_eq!(full_ticket(n, e + 1), t + 1, "epoch raised");
            assert_eq!(n, LockWord::initial(t + 1, false));
            assert_eq!(w.acquired(3), LockWord::fast_held(t, 3));
            // A word read before the wrap, named after the epoch was raised.
            assert_eq!(full_ticket(w, e + 1), t);
            assert!(!epoch_stale(w, e + 1));
            assert!(wraps(w) && !wraps(n));
            // The same as a `fetch_add` of one ticket, flags and all.
            let q = w.with_holder(9).with_queued().barged_by(9);
            assert_eq!(q.taken().0, q.0.wrapping_add(TICKET));
            assert_eq!(full_ticket(q.taken(), e + 1), t + 1);
            assert!(q.taken().held() && q.taken().barged() && q.taken().queued());
        }
    }
}
