//! The shared state's fixed layout: `#[repr(C)]` structs made only of atomics, so that any bit
//! pattern another process writes is a valid value and no access is a data race.
//!
//! ```text
//! offset 0                 Header        (192 bytes: constants and the kind, then the lock word and head on
//!                                         cache lines of their own)
//! offset 192               Participant × P   (32 bytes each)
//! offset slots_offset      Slot × N          (64 bytes each, one cache line, 64-aligned)
//! ```
//!
//! `docs/FILE_FORMAT.md` is the contract; the assertions below keep the two in step.

use crate::core::state::lock_word::{self, LockWord};
use crate::core::state::slot_word::Word;
use crate::primitive::Ordering::{AcqRel, Acquire};
use crate::primitive::{AtomicU32, AtomicU64};

/// `b"FAIRLOCK"` read as a little-endian `u64`: the last thing written when a file is created.
pub const MAGIC: u64 = u64::from_le_bytes(*b"FAIRLOCK");
/// Written first while a file is being initialised; a file left with it was abandoned by a
/// creator that died and may be initialised again.
pub const MAGIC_PENDING: u64 = u64::from_le_bytes(*b"FAIRLOC?");
/// Written first while the lock state of a valid file from an earlier boot is rewritten: the
/// header and the data area are intact, so a file left with it is re-initialised again
/// *keeping its data* (a `FairMutex<T>`'s value survives a crash during that rewrite).
pub const MAGIC_REINIT: u64 = u64::from_le_bytes(*b"FAIRLOC!");
/// The file-format version this crate reads and writes. Version 2 adds the lock's kind
/// (exclusive, reader/writer, semaphore) to the header and the `shared` bit to slot words;
/// version 1 files (and files of any other version) are refused with `Incompatible`.
pub const VERSION: u32 = 2;

/// The file header. Fields above `word` (the lock word) are written once, at initialisation.
#[repr(C)]
pub struct Header {
    /// [`MAGIC`] once initialised.
    pub magic: AtomicU64,
    /// [`VERSION`].
    pub version: AtomicU32,
    /// `size_of::<Header>()`.
    pub header_size: AtomicU32,
    /// Total size of the file in bytes.
    pub file_size: AtomicU64,
    /// Number of waiting-array slots `N` (a power of two).
    pub slot_count: AtomicU32,
    /// Number of participant entries `P`.
    pub participant_count: AtomicU32,
    /// Byte offset of the participant table.
    pub participants_offset: AtomicU32,
    /// Byte offset of the slot array (a multiple of 64).
    pub slots_offset: AtomicU32,
    /// The lock's kind: 0 exclusive, 1 reader/writer, 2 semaphore (see [`RecordKind`](crate::core::state::RecordKind)).
    pub kind: AtomicU32,
    /// A semaphore's permits; 0 for the other kinds.
    pub permits: AtomicU32,
    /// The kernel boot id (`/proc/sys/kernel/random/boot_id`) of the boot that initialised the
    /// file; a file from another boot is re-initialised (tickets kept, so tokens keep rising).
    pub boot_id: [AtomicU64; 2],
    /// The lock word ([`crate::core::state::lock_word`]): the low 36 bits of the next ticket, the
    /// fast holder, queued mode.
    pub word: AtomicU64,
    /// The next ticket's epoch: its bits above the lock word's 36 (`ticket = epoch · 2^36 +
    /// counter`; see [`crate::core::state::lock_word::full_ticket`]).
    pub epoch: AtomicU64,
    /// Informational: `ticket + 1` of the fast grant whose holder stamped `fast_since` and
    /// `fast_tid` (see `LockGuard::stamp_time`); never used for a decision.
    pub fast_stamp: AtomicU64,
    /// Informational: when the stamping fast holder's grant began (coarse clock, ns).
    pub fast_since: AtomicU64,
    /// Informational: the stamping fast holder's thread.
    pub fast_tid: AtomicU32,
    /// Reserved, zero.
    pub reserved2: AtomicU32,
    /// The fast holder's beacon: `(ticket + 1) mod 2^40` of its grant `<< 24 | (1 + index)`
    /// (see `Slot::beacon`), written right after the fast acquire; 0 for none.
    pub fast_hint: AtomicU64,
    /// Reserved: pads the lock word's line.
    pub pad1: [AtomicU64; 2],
    /// A hint: every ticket below `head` is final. Written when a ticket is granted.
    pub head: AtomicU64,
    /// Offset of the data area of a `FairMutex<T>` file (a multiple of 64 and of its
    /// alignment), 0 for a lock without data. Read only when the file is opened, so sharing
    /// `head`'s line costs nothing.
    pub data_offset: AtomicU64,
    /// Size of the data area in bytes (`size_of::<T>()`), 0 without data.
    pub data_size: AtomicU64,
    /// Alignment of the data (`align_of::<T>()`), 0 without data.
    pub data_align: AtomicU32,
    /// Reserved, zero.
    pub reserved1: AtomicU32,
    /// Type tag of the data (FNV-1a of `std::any::type_name::<T>()`), 0 without data.
    pub data_tag: AtomicU64,
    /// Weighted kinds only: deaths found so far (a holder revoked, a grant skipped), counted
    /// by whoever passes their word first (see [`crate::core::weighted::walk`]); 0 otherwise.
    pub deaths: AtomicU64,
    /// Weighted kinds only: the value of `deaths` the latest grant that told `owner_died`
    /// saw; a grant is told while `deaths` is ahead of it.
    pub told: AtomicU64,
    /// Weighted kinds only: a hint, every ticket before it is final or granted (never waiting
    /// or unpublished); walks start here rather than at `head` when a share held since far
    /// back keeps `head` more than `N` tickets behind (see [`crate::core::weighted::walk`]). 0 in
    /// other files.
    pub front: AtomicU64,
}

/// One process taking part in the lock. Entry `i` belongs to whichever process holds an OFD
/// write lock on byte `BEACON_BASE + i` of the file; the kernel drops that lock when the process
/// dies, which is how others learn it died.
#[repr(C)]
pub struct Participant {
    /// Bumped each time a process claims the entry.
    pub generation: AtomicU64,
    /// The claiming process's pid, in its own pid namespace (informational).
    pub pid: AtomicU32,
    /// In a file of one lock: while the entry's beacon belongs to a descriptor's open file
    /// description (a grant held for a descriptor: `api/fd_form.rs`), that grant's random
    /// non-zero nonce, whose OFD byte the description also holds; else 0. Unused (zero) in a
    /// record of a file of named locks.
    pub marker: AtomicU32,
    /// In a file of one lock: wall-clock seconds when the entry was claimed (informational).
    /// In a record of a file of named locks: the *owner word*
    /// (`core::name_layout::owner_word`: the owning process's file-wide entry and the
    /// generation of its claim of it), 0 if free.
    pub claim: AtomicU64,
    /// Reserved, zero. (Held a process's one lease deadline until deadlines moved into the
    /// slots, one per grant: see [`crate::core::state::lease`].)
    pub reserved: AtomicU64,
}

/// One waiting-array slot, used by tickets `t ≡ i (mod N)` one lap after another.
#[repr(C)]
pub struct Slot {
    /// The slot word, see [`crate::core::state::slot_word`]. Every decision is a CAS on it.
    pub word: AtomicU64,
    /// Lease of the ticket using the slot, see [`crate::core::state::lease`].
    pub lease: AtomicU64,
    /// `ticket + 1` of the ticket whose `tid` and `since` follow (informational, for status).
    pub stamp: AtomicU64,
    /// `CLOCK_MONOTONIC_COARSE` nanoseconds when the stamp's ticket was published or claimed.
    pub since: AtomicU64,
    /// Kernel thread id of the ticket's owner (informational).
    pub tid: AtomicU32,
    /// The owner thread's beacon (see `sys::beacon`): 1 + its index in its process's beacon
    /// segment, 0 for none. Valid for the ticket `stamp` names (written before it); a waiter
    /// watches it to learn of the holder's death from the kernel.
    pub beacon: AtomicU32,
    /// The laps after the slot word's whose takers gave up before they could publish: see
    /// [`crate::core::queue::given_up`].
    pub given_up: AtomicU64,
    /// The lease deadline of the `Leased` holder of the ticket using the slot, tagged with its
    /// lap: see [`crate::core::state::lease`].
    pub deadline: AtomicU64,
    /// A taker waiting for this slot while an earlier lap still uses it (advice, for spotting
    /// a dead one at once): see [`crate::core::queue::lapped`].
    pub lapped: [AtomicU64; 1],
}

/// Size of the header in bytes.
pub const HEADER_SIZE: usize = 192;
/// Size of a participant entry in bytes.
pub const PARTICIPANT_SIZE: usize = 32;
/// Size of a slot in bytes.
pub const SLOT_SIZE: usize = 64;

#[cfg(not(fairlock_loom))]
const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<Header>() == HEADER_SIZE);
    assert!(offset_of!(Header, magic) == 0);
    assert!(offset_of!(Header, version) == 8);
    assert!(offset_of!(Header, header_size) == 12);
    assert!(offset_of!(Header, file_size) == 16);
    assert!(offset_of!(Header, slot_count) == 24);
    assert!(offset_of!(Header, participant_count) == 28);
    assert!(offset_of!(Header, participants_offset) == 32);
    assert!(offset_of!(Header, slots_offset) == 36);
    assert!(offset_of!(Header, kind) == 40);
    assert!(offset_of!(Header, permits) == 44);
    assert!(offset_of!(Header, boot_id) == 48);
    assert!(offset_of!(Header, word) == 64);
    assert!(offset_of!(Header, epoch) == 72);
    assert!(offset_of!(Header, fast_stamp) == 80);
    assert!(offset_of!(Header, fast_since) == 88);
    assert!(offset_of!(Header, fast_tid) == 96);
    assert!(offset_of!(Header, fast_hint) == 104);
    assert!(offset_of!(Header, head) == 128);
    assert!(offset_of!(Header, data_offset) == 136);
    assert!(offset_of!(Header, data_size) == 144);
    assert!(offset_of!(Header, data_align) == 152);
    assert!(offset_of!(Header, data_tag) == 160);
    assert!(offset_of!(Header, deaths) == 168);
    assert!(offset_of!(Header, told) == 176);
    assert!(offset_of!(Header, front) == 184);
    assert!(size_of::<Participant>() == PARTICIPANT_SIZE);
    assert!(offset_of!(Participant, pid) == 8);
    assert!(offset_of!(Participant, marker) == 12);
    assert!(offset_of!(Participant, claim) == 16);
    assert!(offset_of!(Participant, reserved) == 24);
    assert!(size_of::<Slot>() == SLOT_SIZE);
    assert!(offset_of!(Slot, word) == 0);
    assert!(offset_of!(Slot, lease) == 8);
    assert!(offset_of!(Slot, stamp) == 16);
    assert!(offset_of!(Slot, since) == 24);
    assert!(offset_of!(Slot, tid) == 32);
    assert!(offset_of!(Slot, beacon) == 36);
    assert!(offset_of!(Slot, given_up) == 40);
    assert!(offset_of!(Slot, deadline) == 48);
    assert!(offset_of!(Slot, lapped) == 56);
    assert!(align_of::<Slot>() == 8 && align_of::<Header>() == 8);
};

fn zeroed_u64s<const K: usize>() -> [AtomicU64; K] {
    core::array::from_fn(|_| AtomicU64::new(0))
}

impl Header {
    /// The full ticket `w`'s counter names (see [`lock_word::full_ticket`]); raises `epoch`
    /// if its parity is stale (the counter wrapped and the wrapper has not raised it yet).
    #[inline]
    pub fn ticket_of(&self, w: LockWord) -> u64 {
        // Relaxed: `epoch` only ever goes up by one per 2^36 tickets; a stale value is
        // corrected from the word's parity, and the raise below is a CAS from what we read.
        let e = self.epoch.load(crate::primitive::Ordering::Relaxed);
        if lock_word::epoch_stale(w, e) {
            let _ = self.epoch.compare_exchange(
                e,
                e.wrapping_add(1),
                crate::primitive::Ordering::Relaxed,
                crate::primitive::Ordering::Relaxed,
            );
        }
        lock_word::full_ticket(w, e)
    }

    /// A zeroed header (heap-backed tests).
    pub fn zeroed() -> Header {
        Header {
            magic: AtomicU64::new(0),
            version: AtomicU32::new(0),
            header_size: AtomicU32::new(0),
            file_size: AtomicU64::new(0),
            slot_count: AtomicU32::new(0),
            participant_count: AtomicU32::new(0),
            participants_offset: AtomicU32::new(0),
            slots_offset: AtomicU32::new(0),
            kind: AtomicU32::new(0),
            permits: AtomicU32::new(0),
            boot_id: zeroed_u64s(),
            word: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            fast_stamp: AtomicU64::new(0),
            fast_since: AtomicU64::new(0),
            fast_tid: AtomicU32::new(0),
            reserved2: AtomicU32::new(0),
            fast_hint: AtomicU64::new(0),
            pad1: zeroed_u64s(),
            head: AtomicU64::new(0),
            data_offset: AtomicU64::new(0),
            data_size: AtomicU64::new(0),
            data_align: AtomicU32::new(0),
            reserved1: AtomicU32::new(0),
            data_tag: AtomicU64::new(0),
            deaths: AtomicU64::new(0),
            told: AtomicU64::new(0),
            front: AtomicU64::new(0),
        }
    }
}

impl Participant {
    /// A zeroed entry.
    pub fn zeroed() -> Participant {
        Participant {
            generation: AtomicU64::new(0),
            pid: AtomicU32::new(0),
            marker: AtomicU32::new(0),
            claim: AtomicU64::new(0),
            reserved: AtomicU64::new(0),
        }
    }
}

impl Slot {
    /// A zeroed slot: free for the first lap.
    pub fn zeroed() -> Slot {
        Slot {
            word: AtomicU64::new(0),
            lease: AtomicU64::new(0),
            stamp: AtomicU64::new(0),
            since: AtomicU64::new(0),
            tid: AtomicU32::new(0),
            beacon: AtomicU32::new(0),
            given_up: AtomicU64::new(0),
            deadline: AtomicU64::new(0),
            lapped: zeroed_u64s(),
        }
    }
}

/// A CAS on slot word `slot` (a grant, a claim, a skip, a give-up). `AcqRel`: release publishes
/// the critical section we acquired from the previous word to whoever reads the new word;
/// acquire keeps the chain when a helper grants.
#[inline]
pub(crate) fn cas(slot: &Slot, from: Word, to: Word) -> bool {
    slot.word
        .compare_exchange(from.0, to.0, AcqRel, Acquire)
        .is_ok()
}
