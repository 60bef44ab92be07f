//! [`LockState`]: the view of the shared state that the algorithm works on.

use crate::core::state::format::{Header, Participant, Slot};
use crate::core::state::geometry::Geometry;
use crate::core::state::kind::{Kind, RecordKind};
use crate::core::state::lock_word::{self, LockWord};
use crate::core::state::tokens::{MAX_BYPASS, token_of};
use crate::primitive::Ordering::{AcqRel, Acquire};

/// A view of the shared state: the header, the participant table and the slots.
///
/// The lock algorithm works on this alone. Production code builds it over the mapping
/// (the file layer); tests build it over heap memory (`OwnedState`). The slot count is fixed
/// when the view is built, so nothing another process writes later can move an index out of
/// bounds.
#[derive(Clone, Copy)]
pub struct LockState<'a> {
    header: &'a Header,
    participants: &'a [Participant],
    slots: &'a [Slot],
    shift: u32,
    /// How many tickets may hold at once (1 for an exclusive lock); see [`LockState::capacity`].
    capacity: u64,
    weighted: bool,
    rwlock: bool,
    /// The bypass bound of an exclusive lock (0: strict FIFO).
    bound: u32,
}

/// `(weighted, rwlock, capacity, bypass bound)` of a view of kind `kind` with `1 << shift`
/// slots. `None` (garbage in a header) reads as a strict exclusive lock, whose protocol never
/// trusts more than one holder; the file layer refuses such files before building a view.
/// Inlined: every lock and unlock builds a view.
#[inline(always)]
fn weights(kind: Option<RecordKind>, shift: u32) -> (bool, bool, u64, u32) {
    let n = 1u64 << shift;
    match kind {
        Some(RecordKind {
            kind: Kind::RwLock, ..
        }) => (true, true, n, 0),
        Some(RecordKind {
            kind: Kind::Semaphore,
            permits,
        }) => (true, false, u64::from(permits).clamp(1, n), 0),
        Some(RecordKind {
            kind: Kind::Exclusive,
            permits,
        }) => (false, false, 1, permits.min(MAX_BYPASS)),
        None => (false, false, 1, 0),
    }
}

/// The view's kind as the header states it, for views over parts the caller has not validated
/// (tests, loom).
fn kind_of(header: &Header, shift: u32) -> (bool, bool, u64, u32) {
    // Relaxed: written once when the file is initialised, before the magic that the opener
    // read with Acquire.
    let code = header.kind.load(crate::primitive::Ordering::Relaxed);
    let permits = header.permits.load(crate::primitive::Ordering::Relaxed);
    weights(RecordKind::decode(code, permits), shift)
}

impl<'a> LockState<'a> {
    /// A view over the given parts. `None` unless `slots.len()` is a power of two ≥ 2 within
    /// range.
    pub fn new(
        header: &'a Header,
        participants: &'a [Participant],
        slots: &'a [Slot],
    ) -> Option<LockState<'a>> {
        let n = u32::try_from(slots.len()).ok()?;
        let p = u32::try_from(participants.len()).ok()?;
        Geometry::new(n, p)?;
        let shift = n.trailing_zeros();
        let (weighted, rwlock, capacity, bound) = kind_of(header, shift);
        Some(LockState {
            header,
            participants,
            slots,
            shift,
            capacity,
            weighted,
            rwlock,
            bound,
        })
    }

    /// A view over parts whose geometry the caller has validated (`slots.len()` a power of
    /// two ≥ 2 with `log2` ≤ `MAX_SLOT_SHIFT`), of the validated `kind` (taken from the
    /// geometry, not read from the header again: this runs on every lock and unlock). Safe
    /// either way: a wrong length can only make an index panic, never read out of bounds;
    /// checked in debug builds.
    #[inline]
    pub(crate) fn from_validated(
        header: &'a Header,
        participants: &'a [Participant],
        slots: &'a [Slot],
        kind: RecordKind,
    ) -> LockState<'a> {
        debug_assert!(LockState::new(header, participants, slots).is_some());
        let shift = slots.len().trailing_zeros();
        let (weighted, rwlock, capacity, bound) = weights(Some(kind), shift);
        LockState {
            header,
            participants,
            slots,
            shift,
            capacity,
            weighted,
            rwlock,
            bound,
        }
    }

    /// The header.
    #[inline]
    pub fn header(&self) -> &'a Header {
        self.header
    }

    /// The slot of ticket `t`.
    #[inline]
    pub fn slot(&self, t: u64) -> &'a Slot {
        // `slots.len() == 1 << shift`, so the masked index is in bounds.
        &self.slots[(t & ((1u64 << self.shift) - 1)) as usize]
    }

    /// The lap of ticket `t`.
    #[inline]
    pub fn lap(&self, t: u64) -> u64 {
        crate::core::state::slot_word::lap_of(t, self.shift)
    }

    /// `log2(N)`.
    #[inline]
    pub fn slot_shift(&self) -> u32 {
        self.shift
    }

    /// `N`.
    #[inline]
    pub fn slot_count(&self) -> u64 {
        1u64 << self.shift
    }

    /// Whether tickets are granted by weight ([`crate::core::weighted::walk`]): a reader/writer lock
    /// or a semaphore. Then nothing is granted in advance and every acquisition queues.
    #[inline]
    pub fn is_weighted(&self) -> bool {
        self.weighted
    }

    /// The bypass bound of an exclusive lock: how many barges may overtake a waiter
    /// (`Fairness::Bounded(k)`, see [`crate::core::exclusive::barge`]); 0 for strict FIFO.
    #[inline]
    pub fn bypass_bound(&self) -> u32 {
        self.bound
    }

    /// The fencing token of `g` in this file: `ticket + 1`, or in a file with a bypass bound
    /// `(ticket + 1) · 2^9 + bypass` (barges between two queued grants: see
    /// [`crate::core::exclusive::barge`]).
    #[inline]
    pub fn token(&self, g: &crate::core::Grant) -> u64 {
        token_of(self.bound, g.ticket, g.bypass)
    }

    /// Whether the lock is a reader/writer lock.
    #[inline]
    pub fn is_rwlock(&self) -> bool {
        self.rwlock
    }

    /// How many shared tickets may hold at once: 1 for an exclusive lock, the permits (at most
    /// `N`) for a semaphore, `N` for a reader/writer lock (every slot's ticket a reader). An
    /// exclusive ticket (a writer) holds alone whatever the capacity.
    #[inline]
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The lock word, loaded with `order`.
    #[inline]
    pub fn lock_word(&self, order: crate::primitive::Ordering) -> LockWord {
        LockWord(self.header.word.load(order))
    }

    /// The full ticket `w`'s counter names (see [`Header::ticket_of`]).
    #[inline]
    pub fn ticket_of(&self, w: LockWord) -> u64 {
        self.header.ticket_of(w)
    }

    /// The next ticket to be handed out.
    #[inline]
    pub fn next_ticket(&self) -> u64 {
        // Relaxed: a ticket is only a number.
        self.ticket_of(self.lock_word(crate::primitive::Ordering::Relaxed))
    }

    /// Takes a ticket keeping the word's flags, whether its slot has room or not: for tests and
    /// tools that need a ticket (a taker uses [`crate::core::exclusive::fast::take`], which takes one only
    /// with room for its giving up: see [`crate::core::queue::given_up`]).
    ///
    /// One `fetch_add`. The carry of the ticket that wraps the counter flips the epoch's parity
    /// bit right above it, so no taker has to look first (with the parity elsewhere, a taker
    /// that stalled between that look and its `fetch_add` could wrap the counter without
    /// flipping it).
    pub fn take_ticket(&self) -> u64 {
        // AcqRel: part of the word's release sequence (see `core::exclusive::fast`).
        let old = LockWord(
            self.header
                .word
                .fetch_add(lock_word::TICKET, crate::primitive::Ordering::AcqRel),
        );
        self.ticket_of(old)
    }

    /// Takes ticket `t` if it is the next one to be handed out (and the word is `w`, as read):
    /// true if taken.
    pub fn take_ticket_if(&self, w: LockWord) -> bool {
        use crate::primitive::Ordering::{AcqRel, Acquire};
        self.header
            .word
            .compare_exchange(w.0, w.taken().0, AcqRel, Acquire)
            .is_ok()
    }

    /// The participant entry `i`, if it exists.
    #[inline]
    pub fn participant(&self, i: u32) -> Option<&'a Participant> {
        self.participants.get(i as usize)
    }

    /// Every participant entry.
    #[inline]
    pub fn participants(&self) -> &'a [Participant] {
        self.participants
    }

    /// Number of participant entries.
    #[inline]
    pub fn participant_count(&self) -> u32 {
        self.participants.len() as u32
    }
}

/// CAS on the lock word. `AcqRel`: a release for whoever reads the new value (the next fast
/// acquirer, a walker), an acquire of whatever the replaced value published.
#[inline]
pub(crate) fn cas_word(st: &LockState<'_>, from: LockWord, to: LockWord) -> bool {
    st.header()
        .word
        .compare_exchange(from.0, to.0, AcqRel, Acquire)
        .is_ok()
}
