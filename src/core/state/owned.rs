//! [`OwnedState`]: shared state on the heap, for unit tests, loom, Miri and property tests.

use crate::core::state::format::{Header, Participant, Slot};
use crate::core::state::geometry::Geometry;
use crate::core::state::kind::RecordKind;
use crate::core::state::lock_state::LockState;

/// Shared state on the heap, for tests under loom and Miri and for property tests.
pub struct OwnedState {
    header: Header,
    participants: Vec<Participant>,
    slots: Vec<Slot>,
}

impl OwnedState {
    /// A fresh state with `slots` slots (a power of two ≥ 2) and `participants` entries.
    ///
    /// # Panics
    /// If the geometry is out of range (a test-setup error).
    pub fn new(slots: u32, participants: u32) -> OwnedState {
        OwnedState::of_kind(slots, participants, RecordKind::EXCLUSIVE)
    }

    /// A fresh state of kind `kind` (see [`OwnedState::new`]).
    ///
    /// # Panics
    /// If the geometry or the kind is out of range (a test-setup error).
    pub fn of_kind(slots: u32, participants: u32, kind: RecordKind) -> OwnedState {
        assert!(Geometry::new(slots, participants).is_some(), "bad geometry");
        assert!(kind.is_valid(), "bad kind");
        let slots: Vec<Slot> = (0..slots).map(|_| Slot::zeroed()).collect();
        // A fresh lock is free (see `file::initial_image`): an exclusive one for the fast
        // path, a weighted one queued for good.
        let header = Header::zeroed();
        let relaxed = crate::primitive::Ordering::Relaxed;
        let word = crate::core::state::lock_word::LockWord::initial(0, kind.is_weighted());
        header.word.store(word.0, relaxed);
        header.kind.store(kind.code(), relaxed);
        header.permits.store(kind.permits, relaxed);
        OwnedState {
            header,
            participants: (0..participants).map(|_| Participant::zeroed()).collect(),
            slots,
        }
    }

    /// The view the algorithm works on.
    pub fn view(&self) -> LockState<'_> {
        LockState::new(&self.header, &self.participants, &self.slots).expect("checked in new")
    }
}
