//! A lock file mapped read-only, for [`crate::inspect`]: its words are read only through
//! `Relaxed` loads that return plain values. No reference to an atomic in it ever leaves this
//! module — a store or read-modify-write through one would fault, and Rust allows only small
//! `Relaxed` atomic loads on read-only memory (an `Acquire` load there is undefined behaviour).
//!
//! Invariants: the mapping is `geometry.file_size` bytes long and lives as long as `self`;
//! `geometry` was validated against the file's length before mapping.

use std::fs::File;
use std::os::fd::AsFd;

use memmap2::{MmapOptions, MmapRaw};

use crate::core::layout::{HEADER_SIZE, PARTICIPANT_SIZE, SLOT_SIZE};
use crate::core::lease::LeaseField;
use crate::core::{Geometry, Liveness, Word};
use crate::primitive::{AtomicU32, AtomicU64, Ordering::Relaxed};
use crate::sys::ofd;

/// Offsets of the fields `inspect` reads (see `docs/FILE_FORMAT.md`).
const NEXT_TICKET: usize = 64;
const HEAD: usize = 128;
const P_PID: usize = 8;
const P_DEADLINE: usize = 24;
const S_WORD: usize = 0;
const S_LEASE: usize = 8;
const S_STAMP: usize = 16;
const S_SINCE: usize = 24;
const S_TID: usize = 32;
const _: () = assert!(HEAD + 8 <= HEADER_SIZE && P_DEADLINE + 8 <= PARTICIPANT_SIZE);
const _: () = assert!(S_TID + 4 <= SLOT_SIZE);

/// A read-only view of a lock file: plain values, loaded `Relaxed`.
pub struct ReadOnlyView {
    map: MmapRaw,
    geometry: Geometry,
    /// The file, for liveness probes (`F_OFD_GETLK` needs no write access).
    file: File,
}

impl ReadOnlyView {
    /// Maps `geometry.file_size` bytes of `file` read-only.
    pub fn new(file: File, geometry: Geometry) -> std::io::Result<ReadOnlyView> {
        let map = MmapOptions::new()
            .len(geometry.file_size)
            .map_raw_read_only(&file)?;
        Ok(ReadOnlyView {
            map,
            geometry,
            file,
        })
    }

    /// The layout.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn u64_at(&self, offset: usize) -> u64 {
        // Offsets come from the validated geometry and the constants above; never trust them.
        if !offset.is_multiple_of(8) || offset + 8 > self.geometry.file_size {
            return 0;
        }
        // SAFETY: in bounds (checked above; the mapping is `file_size` long), 8-aligned (the
        // mapping is page-aligned), alive for `self`; any bits are a valid AtomicU64; and only a
        // Relaxed load is made, which Rust allows on read-only memory for this size.
        unsafe { (*self.map.as_ptr().add(offset).cast::<AtomicU64>()).load(Relaxed) }
    }

    fn u32_at(&self, offset: usize) -> u32 {
        if !offset.is_multiple_of(4) || offset + 4 > self.geometry.file_size {
            return 0;
        }
        // SAFETY: as in `u64_at`, for a 4-byte, 4-aligned field.
        unsafe { (*self.map.as_ptr().add(offset).cast::<AtomicU32>()).load(Relaxed) }
    }

    fn slot_at(&self, t: u64, field: usize) -> usize {
        let i = (t % u64::from(self.geometry.slots)) as usize;
        self.geometry.slots_offset + i * SLOT_SIZE + field
    }

    fn participant_at(&self, i: u32, field: usize) -> Option<usize> {
        (i < self.geometry.participants)
            .then(|| self.geometry.participants_offset + i as usize * PARTICIPANT_SIZE + field)
    }

    /// The next ticket to be handed out.
    pub fn next_ticket(&self) -> u64 {
        self.u64_at(NEXT_TICKET)
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

    /// Participant `i`'s pid (as recorded by its claimer), if the entry exists.
    pub fn pid(&self, i: u32) -> Option<u32> {
        self.participant_at(i, P_PID).map(|o| self.u32_at(o))
    }

    /// Participant `i`'s lease deadline (`CLOCK_MONOTONIC` ms), if the entry exists.
    pub fn lease_deadline_ms(&self, i: u32) -> Option<u64> {
        self.participant_at(i, P_DEADLINE).map(|o| self.u64_at(o))
    }

    /// Whether participant `i`'s process is alive (its beacon held), if that can be told.
    pub fn liveness(&self, i: u32) -> Option<Liveness> {
        if i >= self.geometry.participants {
            return None;
        }
        match ofd::is_held(self.file.as_fd(), i) {
            Ok(true) => Some(Liveness::Alive),
            Ok(false) => Some(Liveness::Dead),
            Err(_) => None,
        }
    }
}
