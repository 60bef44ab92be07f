//! A lock file mapped read-only, for [`crate::inspect`]: its words are read only through
//! `Relaxed` loads that return plain values. No reference to an atomic in it ever leaves this
//! module — a store or read-modify-write through one would fault, and Rust allows only small
//! `Relaxed` atomic loads on read-only memory (an `Acquire` load there is undefined behaviour).
//!
//! Invariants: the lock image lies `base` bytes into the mapping, which is at least
//! `base + geometry.file_size` bytes long and lives as long as `self` (shared by the views of a
//! file's named locks); `geometry` was validated against the file's length before mapping.

use crate::core::state::lock_word::{LockWord, full_ticket};
use std::fs::File;
use std::os::fd::AsFd;
use std::sync::Arc;

use memmap2::MmapOptions;

use crate::file::mapping::GuardedMap;

use crate::core::state::lease::LeaseField;
use crate::core::state::{HEADER_SIZE, PARTICIPANT_SIZE, RecordKind, SLOT_SIZE};
use crate::core::{Geometry, Liveness, Word};
use crate::names::layout::{MAX_KEY_LEN, NamesGeometry, RecordState};
use crate::names::table::owner_liveness;
use crate::primitive::{AtomicU32, AtomicU64, Ordering::Relaxed};
use crate::sys::ofd;

/// Offsets of the fields `inspect` reads (see `docs/FILE_FORMAT.md`).
const LOCK_WORD: usize = 64;
const EPOCH: usize = 72;
const FAST_STAMP: usize = 80;
const FAST_SINCE: usize = 88;
const FAST_TID: usize = 96;
const HEAD: usize = 128;
const P_PID: usize = 8;
const P_CLAIM: usize = 16;
const S_WORD: usize = 0;
const S_LEASE: usize = 8;
const S_STAMP: usize = 16;
const S_SINCE: usize = 24;
const S_TID: usize = 32;
const S_BEACON: usize = 36;
const S_DEADLINE: usize = 48;
const _: () = assert!(HEAD + 8 <= HEADER_SIZE && P_CLAIM + 8 <= PARTICIPANT_SIZE);
const _: () = assert!(S_DEADLINE + 8 <= SLOT_SIZE);

/// A read-only view of a lock file: plain values, loaded `Relaxed`.
pub struct ReadOnlyView {
    map: Arc<GuardedMap>,
    geometry: Geometry,
    /// The file, for liveness probes (`F_OFD_GETLK` needs no write access).
    file: Arc<File>,
    /// Where the lock image starts in the mapping (0, or a record's image).
    base: usize,
    /// For the view of a name's lock: the file's layout (its participants are told alive by
    /// their owner words and the file-wide entries; see `core::name_layout`).
    owners: Option<NamesGeometry>,
    /// For the view of a whole file of named locks: its layout (the view itself then shows
    /// no lock; [`ReadOnlyView::named`] gives one view per name).
    names: Option<NamesGeometry>,
}

/// Offsets in a name entry (see `core::name_layout::NameEntry`).
const N_STATE: usize = 0;
const N_KEY_LEN: usize = 16;
const N_KEY: usize = 24;
/// Offsets in a lock header: the kind and permits.
const KIND: usize = 40;
const PERMITS: usize = 44;

impl ReadOnlyView {
    /// Maps `geometry.file_size` bytes of `file` read-only.
    pub fn new(file: File, geometry: Geometry) -> std::io::Result<ReadOnlyView> {
        let map = MmapOptions::new()
            .len(geometry.file_size)
            .map_raw_read_only(&file)?;
        Ok(ReadOnlyView {
            map: Arc::new(GuardedMap::new(map)),
            geometry,
            file: Arc::new(file),
            base: 0,
            owners: None,
            names: None,
        })
    }

    /// The view of a whole file of named locks.
    pub fn names(file: File, names: NamesGeometry) -> std::io::Result<ReadOnlyView> {
        let map = MmapOptions::new()
            .len(names.file_size)
            .map_raw_read_only(&file)?;
        Ok(ReadOnlyView {
            map: Arc::new(GuardedMap::new(map)),
            // The header's size only, so that no lock field is read from it.
            geometry: Geometry {
                file_size: HEADER_SIZE,
                ..names.record
            },
            file: Arc::new(file),
            base: 0,
            owners: None,
            names: Some(names),
        })
    }

    /// For the view of a file of named locks: every name in use, with the view of its lock
    /// (a record whose kind is not valid is skipped).
    pub fn named(&self) -> Vec<(String, ReadOnlyView)> {
        let Some(ng) = self.names else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for r in 0..ng.records {
            let e = ng.entry_offset(r);
            let state = self.raw_u64(e + N_STATE);
            if !matches!(
                RecordState::of(state),
                RecordState::Used | RecordState::Reclaiming
            ) {
                continue;
            }
            let len = (self.raw_u32(e + N_KEY_LEN) as usize).min(MAX_KEY_LEN);
            let mut key = Vec::with_capacity(len);
            for i in 0..len.div_ceil(8) {
                let b = self.raw_u64(e + N_KEY + i * 8).to_le_bytes();
                key.extend_from_slice(&b[..(len - i * 8).min(8)]);
            }
            let image = ng.image_at(r);
            let kind =
                RecordKind::decode(self.raw_u32(image + KIND), self.raw_u32(image + PERMITS));
            let Some(geometry) = kind.and_then(|k| ng.record.of_kind(k)) else {
                continue;
            };
            out.push((
                String::from_utf8_lossy(&key).into_owned(),
                ReadOnlyView {
                    map: self.map.clone(),
                    geometry,
                    file: self.file.clone(),
                    base: image,
                    owners: Some(ng),
                    names: None,
                },
            ));
        }
        out
    }

    /// Whether this is the view of a whole file of named locks.
    pub fn is_names(&self) -> bool {
        self.names.is_some()
    }

    /// A word anywhere in the mapping (0 if out of bounds or unaligned).
    fn raw_u64(&self, abs: usize) -> u64 {
        if !abs.is_multiple_of(8) || abs + 8 > self.map.len() {
            return 0;
        }
        // SAFETY: in bounds (checked above), 8-aligned (the mapping is page-aligned), alive for
        // `self`; any bits are a valid AtomicU64; only a Relaxed load, allowed on read-only
        // memory for this size.
        unsafe { (*self.map.as_ptr().add(abs).cast::<AtomicU64>()).load(Relaxed) }
    }

    /// As [`Self::raw_u64`] for a 4-byte field.
    fn raw_u32(&self, abs: usize) -> u32 {
        if !abs.is_multiple_of(4) || abs + 4 > self.map.len() {
            return 0;
        }
        // SAFETY: as in `raw_u64`, for a 4-byte, 4-aligned field.
        unsafe { (*self.map.as_ptr().add(abs).cast::<AtomicU32>()).load(Relaxed) }
    }

    /// The layout.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn u64_at(&self, offset: usize) -> u64 {
        // Offsets come from the validated geometry and the constants above; never trust them.
        if offset + 8 > self.geometry.file_size {
            return 0;
        }
        self.raw_u64(self.base + offset)
    }

    fn u32_at(&self, offset: usize) -> u32 {
        if offset + 4 > self.geometry.file_size {
            return 0;
        }
        self.raw_u32(self.base + offset)
    }

    fn slot_at(&self, t: u64, field: usize) -> usize {
        let i = (t % u64::from(self.geometry.slots)) as usize;
        self.geometry.slots_offset + i * SLOT_SIZE + field
    }

    fn participant_at(&self, i: u32, field: usize) -> Option<usize> {
        (i < self.geometry.participants)
            .then(|| self.geometry.participants_offset + i as usize * PARTICIPANT_SIZE + field)
    }

    /// The lock word.
    pub fn lock_word(&self) -> LockWord {
        LockWord(self.u64_at(LOCK_WORD))
    }

    /// The next ticket to be handed out.
    pub fn next_ticket(&self) -> u64 {
        full_ticket(self.lock_word(), self.u64_at(EPOCH))
    }

    /// The fast holder's informational (stamp, since, tid), written by `stamp_time`.
    pub fn fast_stamps(&self) -> (u64, u64, u32) {
        (
            self.u64_at(FAST_STAMP),
            self.u64_at(FAST_SINCE),
            self.u32_at(FAST_TID),
        )
    }

    /// The `head` hint.
    pub fn head(&self) -> u64 {
        self.u64_at(HEAD)
    }

    /// The slot word of ticket `t`'s slot.
    pub fn word(&self, t: u64) -> Word {
        Word(self.u64_at(self.slot_at(t, S_WORD)))
    }

    /// The lease field of ticket `t`'s slot.
    pub fn lease(&self, t: u64) -> LeaseField {
        LeaseField(self.u64_at(self.slot_at(t, S_LEASE)))
    }

    /// The informational (stamp, since, tid) of ticket `t`'s slot.
    pub fn stamps(&self, t: u64) -> (u64, u64, u32) {
        (
            self.u64_at(self.slot_at(t, S_STAMP)),
            self.u64_at(self.slot_at(t, S_SINCE)),
            self.u32_at(self.slot_at(t, S_TID)),
        )
    }

    /// The `beacon` field of ticket `t`'s slot (thread beacon and, in a bounded file, the
    /// ticket's arrival count: see `core::exclusive::barge`), valid for the ticket its stamp names.
    pub fn beacon_field(&self, t: u64) -> u32 {
        self.u32_at(self.slot_at(t, S_BEACON))
    }

    /// Participant `i`'s pid (as recorded by its claimer), if the entry exists.
    pub fn pid(&self, i: u32) -> Option<u32> {
        self.participant_at(i, P_PID).map(|o| self.u32_at(o))
    }

    /// The lease deadline (`CLOCK_MONOTONIC` ms) of ticket `t`'s `Leased` holder, if the slot's
    /// deadline word is that ticket's (see `core::state::lease`).
    pub fn lease_deadline_ms(&self, t: u64) -> Option<u64> {
        let lap = crate::core::state::slot_word::lap_of(t, self.geometry.slot_shift());
        crate::core::state::lease::Deadline(self.u64_at(self.slot_at(t, S_DEADLINE))).of(lap)
    }

    /// Whether participant `i`'s process is alive (its beacon held), if that can be told.
    pub fn liveness(&self, i: u32) -> Option<Liveness> {
        if i >= self.geometry.participants {
            return None;
        }
        if let Some(ng) = self.owners {
            let word = self.u64_at(
                self.geometry.participants_offset + i as usize * PARTICIPANT_SIZE + P_CLAIM,
            );
            // No entry of ours: `me` names none.
            return Some(owner_liveness(
                word,
                (u32::MAX, 0),
                |j| (j < ng.processes).then(|| self.raw_u64(ng.process_at(j))),
                |j| ofd::is_held(self.file.as_fd(), u64::from(j)).ok(),
            ));
        }
        match ofd::is_held(self.file.as_fd(), u64::from(i)) {
            Ok(true) => Some(Liveness::Alive),
            Ok(false) => Some(Liveness::Dead),
            Err(_) => None,
        }
    }
}
