//! Where each part of a file lives ([`Geometry`]) and what its data area holds ([`DataShape`]).

use crate::core::state::format::{HEADER_SIZE, PARTICIPANT_SIZE, SLOT_SIZE};
use crate::core::state::kind::RecordKind;

/// Where each part of a file with `slots` slots and `participants` participant entries lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// `N`.
    pub slots: u32,
    /// `P`.
    pub participants: u32,
    /// Offset of the participant table.
    pub participants_offset: usize,
    /// Offset of the slot array.
    pub slots_offset: usize,
    /// The data area (all zero for a lock without data).
    pub data: DataShape,
    /// Offset of the data area (0 without data).
    pub data_offset: usize,
    /// Total size.
    pub file_size: usize,
    /// The lock's kind (exclusive unless set by [`Geometry::of_kind`]).
    pub kind: RecordKind,
}

/// What the data area of a `FairMutex<T>` file holds: `T`'s size, alignment and schema tag.
/// A lock without data has all three zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataShape {
    /// `size_of::<T>()`.
    pub size: u64,
    /// `align_of::<T>()`.
    pub align: u32,
    /// A tag naming the schema the opener chose (see [`DataShape::tag_of`]; that of `""` when it
    /// named none).
    pub tag: u64,
}

/// The largest data area a file may have (1 GiB): larger is a mistake, not a lock.
pub const MAX_DATA_SIZE: u64 = 1 << 30;
/// The largest alignment of the data: a page (the mapping is page-aligned).
pub const MAX_DATA_ALIGN: u32 = 4096;

impl DataShape {
    /// No data (a plain lock).
    pub const NONE: DataShape = DataShape {
        size: 0,
        align: 0,
        tag: 0,
    };

    /// The tag of the schema named `name`: FNV-1a (64 bit) of the name's bytes, never 0.
    pub fn tag_of(name: &str) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in name.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h.max(1)
    }

    /// Whether a file may hold this: none at all, or a size of at most [`MAX_DATA_SIZE`] with
    /// a power-of-two alignment of at most [`MAX_DATA_ALIGN`] and a non-zero tag.
    pub fn is_valid(&self) -> bool {
        *self == DataShape::NONE
            || (self.size <= MAX_DATA_SIZE
                && self.align.is_power_of_two()
                && self.align <= MAX_DATA_ALIGN
                && self.tag != 0)
    }
}

impl Geometry {
    /// The layout for `slots` (a power of two) and `participants`; `None` if out of range.
    pub fn new(slots: u32, participants: u32) -> Option<Geometry> {
        Geometry::with_data(slots, participants, DataShape::NONE)
    }

    /// The layout of a file with a data area of shape `data` after the slots.
    pub fn with_data(slots: u32, participants: u32, data: DataShape) -> Option<Geometry> {
        if !slots.is_power_of_two()
            || slots < 2
            || slots.trailing_zeros() > crate::core::state::slot_word::MAX_SLOT_SHIFT
            || participants == 0
            || participants > crate::core::state::slot_word::MAX_PARTICIPANTS
        {
            return None;
        }
        let participants_offset = HEADER_SIZE;
        let end = participants_offset + participants as usize * PARTICIPANT_SIZE;
        let slots_offset = end.div_ceil(SLOT_SIZE) * SLOT_SIZE;
        let slots_end = slots_offset + slots as usize * SLOT_SIZE;
        if !data.is_valid() {
            return None;
        }
        let (data_offset, file_size) = if data == DataShape::NONE {
            (0, slots_end)
        } else {
            let align = (data.align as usize).max(SLOT_SIZE);
            let offset = slots_end.div_ceil(align) * align;
            (offset, (offset + data.size as usize).div_ceil(8) * 8)
        };
        Some(Geometry {
            slots,
            participants,
            participants_offset,
            slots_offset,
            data,
            data_offset,
            file_size,
            kind: RecordKind::EXCLUSIVE,
        })
    }

    /// The same layout for a lock of kind `kind`; `None` if the kind is not valid or needs
    /// more slots ([`RecordKind::min_slots`]).
    pub fn of_kind(self, kind: RecordKind) -> Option<Geometry> {
        (kind.is_valid() && self.slots >= kind.min_slots()).then_some(Geometry { kind, ..self })
    }

    /// Where the lock state ends: the slot array's end (the data area, if any, follows).
    pub fn state_size(&self) -> usize {
        self.slots_offset + self.slots as usize * SLOT_SIZE
    }

    /// `log2(N)`.
    pub fn slot_shift(&self) -> u32 {
        self.slots.trailing_zeros()
    }
}
