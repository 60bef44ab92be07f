//! The layout of a file of named locks: a header, then a table of records, each one name
//! entry followed by a complete lock image (header, participants, slots, data) of the
//! geometry every record of the file shares.
//!
//! ```text
//! offset 0                       NamesHeader   (192 bytes; kind code 3 at offset 40)
//! offset 192                     Participant × Q   (the processes using the file, 32 bytes
//!                                                   each; entry j is the holder of OFD beacon
//!                                                   byte BEACON_BASE + j)
//! offset records_offset          record 0      (NameEntry 320 bytes, then, at image_offset,
//!                                               a lock image as in a file of one lock)
//! records_offset + r·record_size record r
//! ```
//!
//! The records are the hash table (open addressing, linear probing): a name lives in the
//! first record of its probe sequence that holds it (see [`crate::names::table`]).
//!
//! **Beacons.** A process has one beacon per file, not one per name: the kernel keeps a
//! file's OFD locks in one list, which every lock operation walks, so 10,000 names each with
//! its own beacon byte made every open and every liveness probe cost up to 200 µs (measured).
//! Instead a record's participant entry `i` names its owner in [`Participant::claim`]: the
//! file-wide entry `j` of the owning process and the generation of `j`'s claim
//! ([`owner_word`]). The owner is alive while beacon `j` is held *and* entry `j`'s generation
//! is still the one recorded (a later process claiming `j` bumps it).
//!
//! [`Participant::claim`]: crate::core::state::Participant::claim
//!
//! `docs/FILE_FORMAT.md` is the contract; the assertions at the bottom keep the two in step.

use crate::core::state::{Geometry, HEADER_SIZE, PARTICIPANT_SIZE};
use crate::primitive::{AtomicU32, AtomicU64};

/// The header's `kind` code of a file of named locks (a file of one lock has 0, 1 or 2).
pub const KIND_NAMES: u32 = 3;
/// The longest key, in bytes of UTF-8.
pub const MAX_KEY_LEN: usize = 255;
/// The most records a file may have (2^20).
pub const MAX_RECORDS: u32 = 1 << 20;

/// The header of a file of named locks. The fields up to `boot_id` have the offsets of
/// [`crate::core::state::Header`]'s, so that one validator reads both.
#[repr(C)]
pub struct NamesHeader {
    /// `MAGIC` once initialised (the same magics as a file of one lock).
    pub magic: AtomicU64,
    /// `VERSION`.
    pub version: AtomicU32,
    /// `size_of::<NamesHeader>()` (= `HEADER_SIZE`).
    pub header_size: AtomicU32,
    /// Total size of the file in bytes.
    pub file_size: AtomicU64,
    /// Slots of every record.
    pub slot_count: AtomicU32,
    /// Participant entries of every record.
    pub participant_count: AtomicU32,
    /// Bytes from one record to the next.
    pub record_size: AtomicU32,
    /// Number of records `R` (a power of two).
    pub record_count: AtomicU32,
    /// [`KIND_NAMES`].
    pub kind: AtomicU32,
    /// Number of file-wide participant entries `Q` (one per process using the file).
    pub process_count: AtomicU32,
    /// The boot id of the boot that initialised the file (as in a file of one lock).
    pub boot_id: [AtomicU64; 2],
    /// Under the names lock: no token that any record reclaimed so far could have granted is
    /// above this ([`layout::token_ceiling`](crate::core::state::token_ceiling)); a record is
    /// (re)created with its tickets starting at the first whose tokens are all above it
    /// ([`layout::first_ticket_above`](crate::core::state::first_ticket_above)), so a name's
    /// fencing tokens keep rising even when its record was reclaimed and the name created
    /// again elsewhere, with another fairness or not. (Kept in tokens, not tickets: a bounded
    /// record's tokens are `(ticket + 1) · 512`. For records without a bound the two are the
    /// same number, the highest `next_ticket`.)
    pub token_floor: AtomicU64,
    /// Under the names lock: records not `EMPTY` (used, free, being created or reclaimed).
    pub occupied: AtomicU64,
    /// Under the names lock: `occupied` right after the last sweep (reclaiming unused names).
    pub swept_at: AtomicU64,
    /// Byte offset of record 0 (a multiple of 4096).
    pub records_offset: AtomicU64,
    /// Byte offset of the lock image inside each record.
    pub image_offset: AtomicU64,
    /// Reserved, zero.
    pub reserved1: [AtomicU64; 4],
    /// Reserved, zero (a file of one lock keeps its data offset here).
    pub reserved2: AtomicU64,
    /// Size of each record's data area (a named `FairMutex<T>`'s `size_of::<T>()`), 0 without.
    pub data_size: AtomicU64,
    /// Alignment of the data, 0 without data.
    pub data_align: AtomicU32,
    /// Reserved, zero.
    pub reserved3: AtomicU32,
    /// Type tag of the data, 0 without data.
    pub data_tag: AtomicU64,
    /// Reserved, zero.
    pub reserved4: [AtomicU64; 3],
}

/// The state of a record, in the low 8 bits of [`NameEntry::state`]; the bits above count
/// the record's generations (bumped each time it is given to a name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordState {
    /// Never used, or freed where no probe sequence passes: ends a lookup. Code 0 (a new,
    /// zero-filled file is all `Empty`).
    Empty,
    /// Being given to a name by the holder of the names lock. Lookups pass it; a holder of the
    /// names lock that finds one knows its creator died (the kernel released its lock), and
    /// reuses it. Code 1.
    Creating,
    /// Holds a name. Code 2.
    Used,
    /// Being checked for reuse by the holder of the names lock (no live participant?). An
    /// opener that finds it waits for the names lock; a holder of the names lock that finds
    /// one knows the checker died, and makes it `Used` again. Code 3.
    Reclaiming,
    /// Held a name that nobody used any more; lookups pass it, creators reuse it. Code 4 (and
    /// any code this crate does not know, which the next creator overwrites).
    Free,
}

impl RecordState {
    /// The state of a [`NameEntry::state`] word.
    pub fn of(word: u64) -> RecordState {
        match word & 0xFF {
            0 => RecordState::Empty,
            1 => RecordState::Creating,
            2 => RecordState::Used,
            3 => RecordState::Reclaiming,
            _ => RecordState::Free,
        }
    }

    /// The code stored for the state.
    pub fn code(self) -> u64 {
        match self {
            RecordState::Empty => 0,
            RecordState::Creating => 1,
            RecordState::Used => 2,
            RecordState::Reclaiming => 3,
            RecordState::Free => 4,
        }
    }

    /// The state word of this state in generation `generation`.
    pub fn word(self, generation: u64) -> u64 {
        (generation << 8) | self.code()
    }
}

/// The generation in a [`NameEntry::state`] word.
pub fn generation_of(word: u64) -> u64 {
    word >> 8
}

/// The name part of a record: its state and key.
#[repr(C)]
pub struct NameEntry {
    /// `generation << 8 | state` (see [`RecordState`]).
    pub state: AtomicU64,
    /// The key's hash ([`crate::names::table::hash_key`]).
    pub hash: AtomicU64,
    /// The key's length in bytes (at most [`MAX_KEY_LEN`]).
    pub key_len: AtomicU32,
    /// Reserved, zero.
    pub reserved0: AtomicU32,
    /// The key's bytes, little-endian, eight to a word, zero-padded.
    pub key: [AtomicU64; 32],
    /// Reserved, zero.
    pub reserved1: [AtomicU64; 5],
}

/// Size of [`NameEntry`].
pub const NAME_ENTRY_SIZE: usize = 320;

/// Where everything is in a file of named locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamesGeometry {
    /// The lock image of every record (offsets relative to the image's start; its kind is
    /// the record's own, read from the record's header).
    pub record: Geometry,
    /// Number of records `R` (a power of two, 2..=[`MAX_RECORDS`]).
    pub records: u32,
    /// Number of file-wide participant entries `Q` (1..=4095), at offset `HEADER_SIZE`.
    pub processes: u32,
    /// Offset of the lock image inside a record (a multiple of 64 and of the data alignment).
    pub image_offset: usize,
    /// Bytes from one record to the next (a multiple of the image's alignment).
    pub record_size: usize,
    /// Offset of record 0 (a multiple of 4096).
    pub records_offset: usize,
    /// Total size of the file.
    pub file_size: usize,
}

/// Bits of a file-wide entry's generation an owner word keeps: 52, so that a process taking
/// entry `j` never finds a dead predecessor's word with its own generation (2^52 claims of
/// one entry). (20 bits would be reachable: 2^20 short-lived openers on one entry.)
const GENERATION_BITS: u32 = 52;
const GENERATION_MASK: u64 = (1 << GENERATION_BITS) - 1;

/// The owner word (in a record's [`Participant::claim`]) of file-wide entry `j` claimed in
/// generation `generation`: `j + 1` in the low 12 bits, the generation's low 52 bits above; 0
/// is "free".
///
/// [`Participant::claim`]: crate::core::state::Participant::claim
pub fn owner_word(j: u32, generation: u64) -> u64 {
    u64::from((j + 1) & 0xFFF) | ((generation & GENERATION_MASK) << 12)
}

/// The file-wide entry an owner word names (`None` for 0, free).
pub fn owner_of(word: u64) -> Option<u32> {
    let j = (word & 0xFFF) as u32;
    (j != 0).then(|| j - 1)
}

/// Whether an owner word's generation bits are those of `generation`.
pub fn same_generation(word: u64, generation: u64) -> bool {
    word >> 12 == generation & GENERATION_MASK
}

/// The largest file of named locks (1 TiB), so that every offset fits comfortably.
const MAX_NAMES_FILE: usize = 1 << 40;

impl NamesGeometry {
    /// The layout for `records` records of `record`'s geometry, if valid.
    pub fn new(record: Geometry, records: u32, processes: u32) -> Option<NamesGeometry> {
        if !records.is_power_of_two()
            || !(2..=MAX_RECORDS).contains(&records)
            || !(1..0xFFF).contains(&processes)
        {
            return None;
        }
        let align = (record.data.align as usize).max(64);
        let image_offset = NAME_ENTRY_SIZE.div_ceil(align) * align;
        let record_size = (image_offset + record.file_size).div_ceil(align) * align;
        let table_end = HEADER_SIZE + processes as usize * PARTICIPANT_SIZE;
        let records_offset = table_end.div_ceil(align.max(4096)) * align.max(4096);
        let file_size = (records as usize)
            .checked_mul(record_size)?
            .checked_add(records_offset)?;
        (file_size <= MAX_NAMES_FILE && record_size <= u32::MAX as usize).then_some(NamesGeometry {
            record,
            records,
            processes,
            image_offset,
            record_size,
            records_offset,
            file_size,
        })
    }

    /// Offset of record `r`'s name entry.
    pub fn entry_offset(&self, r: u32) -> usize {
        self.records_offset + r as usize * self.record_size
    }

    /// Offset of record `r`'s lock image.
    pub fn image_at(&self, r: u32) -> usize {
        self.entry_offset(r) + self.image_offset
    }

    /// Offset of file-wide participant entry `j`.
    pub fn process_at(&self, j: u32) -> usize {
        HEADER_SIZE + j as usize * PARTICIPANT_SIZE
    }
}

#[cfg(not(fairlock_loom))]
const _: () = {
    use core::mem::{offset_of, size_of};
    assert!(size_of::<NamesHeader>() == HEADER_SIZE);
    assert!(offset_of!(NamesHeader, version) == 8);
    assert!(offset_of!(NamesHeader, file_size) == 16);
    assert!(offset_of!(NamesHeader, slot_count) == 24);
    assert!(offset_of!(NamesHeader, participant_count) == 28);
    assert!(offset_of!(NamesHeader, record_size) == 32);
    assert!(offset_of!(NamesHeader, record_count) == 36);
    assert!(offset_of!(NamesHeader, kind) == 40);
    assert!(offset_of!(NamesHeader, process_count) == 44);
    assert!(offset_of!(NamesHeader, boot_id) == 48);
    assert!(offset_of!(NamesHeader, token_floor) == 64);
    assert!(offset_of!(NamesHeader, occupied) == 72);
    assert!(offset_of!(NamesHeader, swept_at) == 80);
    assert!(offset_of!(NamesHeader, records_offset) == 88);
    assert!(offset_of!(NamesHeader, image_offset) == 96);
    assert!(offset_of!(NamesHeader, data_size) == 144);
    assert!(offset_of!(NamesHeader, data_align) == 152);
    assert!(offset_of!(NamesHeader, data_tag) == 160);
    assert!(size_of::<NameEntry>() == NAME_ENTRY_SIZE);
    assert!(offset_of!(NameEntry, hash) == 8);
    assert!(offset_of!(NameEntry, key_len) == 16);
    assert!(offset_of!(NameEntry, key) == 24);
};

#[cfg(all(test, not(fairlock_loom)))]
mod tests {
    use super::*;

    #[test]
    fn ten_thousand_names_fit_in_64_mib_with_the_defaults() {
        let g = NamesGeometry::new(Geometry::new(16, 64).unwrap(), 16384, 1024).unwrap();
        assert!(g.file_size <= 64 << 20, "{}", g.file_size);
        assert_eq!(g.records_offset % 4096, 0);
        assert_eq!(g.image_at(1) % 64, 0);
    }

    #[test]
    fn over_aligned_data_is_aligned_in_every_record() {
        let data = crate::core::state::DataShape {
            size: 10,
            align: 256,
            tag: 7,
        };
        let g = NamesGeometry::new(Geometry::with_data(8, 4, data).unwrap(), 8, 4).unwrap();
        for r in 0..8 {
            assert_eq!((g.image_at(r) + g.record.data_offset) % 256, 0);
        }
    }

    #[test]
    fn states_round_trip() {
        for s in [
            RecordState::Empty,
            RecordState::Creating,
            RecordState::Used,
            RecordState::Reclaiming,
            RecordState::Free,
        ] {
            let w = s.word(12345);
            assert_eq!(RecordState::of(w), s);
            assert_eq!(generation_of(w), 12345);
        }
        assert_eq!(RecordState::of(0xFF), RecordState::Free);
    }

    #[test]
    fn owner_words_round_trip() {
        for (j, g) in [(0u32, 0u64), (4094, 1), (17, 0xF_FFFF), (3, 0x10_0001)] {
            let w = owner_word(j, g);
            assert_ne!(w, 0);
            assert_eq!(owner_of(w), Some(j));
            assert!(same_generation(w, g));
            assert!(!same_generation(w, g + 1));
            assert!(!same_generation(w, g + (1 << 20)), "20 bits are not enough");
        }
        assert_eq!(owner_of(0), None);
    }
}
