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
//! `docs/FILE_FORMAT.md` is the contract; the assertions at the bottom keep the two in step.

use crate::core::state::lock_word::{self, LockWord};
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

/// What kind of lock a file holds: every kind is a FIFO of tickets over the same slots (see
/// [`crate::core::weighted::walk`]); they differ in how many tickets may hold at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One holder at a time (`FairLock`, `FairRLock`, `FairMutex`). File code 0.
    Exclusive,
    /// Readers hold together, a writer alone (`FairRwLock`). File code 1.
    RwLock,
    /// At most `permits` holders (`FairSemaphore`). File code 2.
    Semaphore,
}

/// The largest number of permits of a semaphore (2^19): its file needs at least twice as many
/// slots, and 2^20 slots (64 MiB) is the most a file offers.
pub const MAX_PERMITS: u32 = 1 << 19;

/// The fencing token of ticket `t` (with `bypass` barges ahead of `t + 1`) in a file with
/// bypass bound `bound`: `t + 1` in a strict file, `(t + 1) · 2^9 + bypass` in a bounded one.
#[inline]
pub fn token_of(bound: u32, t: u64, bypass: u16) -> u64 {
    if bound == 0 {
        t.wrapping_add(1)
    } else {
        (t.wrapping_add(1) << TOKEN_SHIFT) | u64::from(bypass)
    }
}

/// A ceiling of the tokens a lock with bypass bound `bound` has granted while its counter
/// was at most `next`: one below the first token ticket `next` could carry — `next` without a
/// bound, `(next + 1) · 2^9 − 1` with one (a ticket `t < next` carries `(t + 1) · 2^9`, a barge
/// ahead of a head `h < next` `h · 2^9 + j`). Saturating.
pub fn token_ceiling(bound: u32, next: u64) -> u64 {
    if bound == 0 {
        next
    } else {
        next.saturating_add(1)
            .saturating_mul(1 << TOKEN_SHIFT)
            .saturating_sub(1)
    }
}

/// The ticket a new lock with bypass bound `bound` starts at so that every token it grants is
/// above `floor` (a token ceiling, [`token_ceiling`]): `floor` without a bound (tokens
/// `ticket + 1`); with one, `floor / 2^9 + 1`, so that even a barge ahead of the first ticket
/// (`first · 2^9 + j`) is above it — not `floor / 2^9`, which relied on the first ticket never
/// being barged (review).
pub fn first_ticket_above(bound: u32, floor: u64) -> u64 {
    if bound == 0 {
        floor
    } else {
        (floor >> TOKEN_SHIFT).wrapping_add(1)
    }
}

/// The largest bypass bound of an exclusive lock (`Fairness::Bounded(k)`): a barge's token
/// carries its bypass count in the low [`TOKEN_SHIFT`] bits, and the lock word counts barges
/// modulo 2^10 (see [`crate::core::exclusive::barge`]).
pub const MAX_BYPASS: u32 = 511;
/// The low bits of a bounded file's fencing tokens that number the barges between two grants
/// of the queue: tokens are `(ticket + 1) · 2^9 + bypass count` (2^55 tickets before they
/// overflow: 22 years at 50 million grants a second).
pub const TOKEN_SHIFT: u32 = 9;

/// A file's kind as its header stores it: the kind and, for a semaphore, its permits — or,
/// for an exclusive lock, its bypass bound (0: strict FIFO).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordKind {
    /// The kind.
    pub kind: Kind,
    /// A semaphore's permits; an exclusive lock's bypass bound (0 for strict FIFO); 0 for a
    /// reader/writer lock.
    pub permits: u32,
}

impl RecordKind {
    /// An exclusive lock.
    pub const EXCLUSIVE: RecordKind = RecordKind {
        kind: Kind::Exclusive,
        permits: 0,
    };
    /// A reader/writer lock.
    pub const RWLOCK: RecordKind = RecordKind {
        kind: Kind::RwLock,
        permits: 0,
    };

    /// A semaphore with `permits` permits.
    pub const fn semaphore(permits: u32) -> RecordKind {
        RecordKind {
            kind: Kind::Semaphore,
            permits,
        }
    }

    /// An exclusive lock with bypass bound `k` (`Fairness::Bounded(k)`; 0: strict FIFO).
    pub const fn bounded(k: u32) -> RecordKind {
        RecordKind {
            kind: Kind::Exclusive,
            permits: k,
        }
    }

    /// The bypass bound of an exclusive lock (0: strict FIFO, and for the other kinds).
    pub fn bypass_bound(self) -> u32 {
        match self.kind {
            Kind::Exclusive => self.permits,
            _ => 0,
        }
    }

    /// The kind stored as (`code`, `permits`), if it is one this crate knows and consistent.
    pub fn decode(code: u32, permits: u32) -> Option<RecordKind> {
        let k = match code {
            0 => RecordKind::bounded(permits),
            1 => RecordKind::RWLOCK,
            2 => RecordKind::semaphore(permits),
            _ => return None,
        };
        (k.is_valid() && k.permits == permits).then_some(k)
    }

    /// The header's code for the kind.
    pub fn code(self) -> u32 {
        match self.kind {
            Kind::Exclusive => 0,
            Kind::RwLock => 1,
            Kind::Semaphore => 2,
        }
    }

    /// Whether a file may hold it: a semaphore needs 1 to [`MAX_PERMITS`] permits, the other
    /// kinds none.
    pub fn is_valid(self) -> bool {
        match self.kind {
            Kind::Semaphore => (1..=MAX_PERMITS).contains(&self.permits),
            Kind::Exclusive => self.permits <= MAX_BYPASS,
            Kind::RwLock => self.permits == 0,
        }
    }

    /// Whether tickets are granted by weight (readers together, several permit holders) rather
    /// than one at a time with the exclusive lock's grants in advance.
    pub fn is_weighted(self) -> bool {
        self.kind != Kind::Exclusive
    }

    /// The fewest slots a file of this kind may have: a semaphore twice its permits (so that
    /// holders never fill the array), the others the general minimum of 2.
    pub fn min_slots(self) -> u32 {
        match self.kind {
            Kind::Semaphore => (self.permits.saturating_mul(2)).next_power_of_two().max(2),
            _ => 2,
        }
    }

    /// How the kind reads in messages and status: "exclusive", "rwlock", "semaphore of 3".
    pub fn describe(self) -> String {
        match self.kind {
            Kind::Exclusive if self.permits == 0 => "exclusive lock".to_string(),
            Kind::Exclusive => format!("exclusive lock bounded to {} bypasses", self.permits),
            Kind::RwLock => "reader/writer lock".to_string(),
            Kind::Semaphore => format!("semaphore of {} permits", self.permits),
        }
    }
}

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
    /// The lock's kind: 0 exclusive, 1 reader/writer, 2 semaphore (see [`RecordKind`]).
    pub kind: AtomicU32,
    /// A semaphore's permits; 0 for the other kinds.
    pub permits: AtomicU32,
    /// The kernel boot id (`/proc/sys/kernel/random/boot_id`) of the boot that initialised the
    /// file; a file from another boot is re-initialised (tickets kept, so tokens keep rising).
    pub boot_id: [AtomicU64; 2],
    /// The lock word ([`crate::core::state::lock_word`]): the low 40 bits of the next ticket, the
    /// fast holder, queued mode.
    pub word: AtomicU64,
    /// The high 25 bits of the next ticket (see [`crate::core::state::lock_word::full_ticket`]).
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

#[cfg(not(loom))]
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

/// What the data area of a `FairMutex<T>` file holds: `T`'s size, alignment and type tag.
/// A lock without data has all three zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataShape {
    /// `size_of::<T>()`.
    pub size: u64,
    /// `align_of::<T>()`.
    pub align: u32,
    /// A tag naming the type (see [`DataShape::tag_of`]).
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

    /// The tag of a type named `name`: FNV-1a (64 bit) of the name's bytes, never 0.
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

/// A view of the shared state: the header, the participant table and the slots.
///
/// The lock algorithm works on this alone. Production code builds it over the mapping
/// (the file layer); tests build it over heap memory ([`OwnedState`]). The slot count is fixed
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

    /// The full ticket `w`'s counter names (see [`lock_word::full_ticket`]); raises `epoch`
    /// if its parity is stale (the counter wrapped and the wrapper has not raised it yet).
    #[inline]
    pub fn ticket_of(&self, w: LockWord) -> u64 {
        // Relaxed: `epoch` only ever goes up by one per 2^36 tickets; a stale value is
        // corrected from the word's parity, and the raise below is a CAS from what we read.
        let e = self.header.epoch.load(crate::primitive::Ordering::Relaxed);
        if lock_word::epoch_stale(w, e) {
            let _ = self.header.epoch.compare_exchange(
                e,
                e.wrapping_add(1),
                crate::primitive::Ordering::Relaxed,
                crate::primitive::Ordering::Relaxed,
            );
        }
        lock_word::full_ticket(w, e)
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
    /// bit right above it, so no taker has to look first (review: with the parity elsewhere, a
    /// taker that stalled between that look and its `fetch_add` wrapped the counter without
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

fn zeroed_u64s<const K: usize>() -> [AtomicU64; K] {
    core::array::from_fn(|_| AtomicU64::new(0))
}

impl Header {
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
