//! The shared mapping, seen only through [`LockState`] (or, on the uncontended path, its
//! header alone: [`Mapping::header`]): raw pointers turned into shared references to atomics,
//! never `&mut` and never `&[u8]`.
//!
//! # Invariants (cited by the `SAFETY` comments below)
//!
//! 1. The lock image starts `base` bytes into the mapping, which is at least
//!    `base + geometry.file_size` bytes long, page-aligned, and lives as long as `self` (an
//!    `Arc` shared by the views of a file's named locks); the file was checked to be at least
//!    that long before mapping. `base` is 0 for a file of one lock, a record's image offset in
//!    a file of named locks (a multiple of 64 and of the data's alignment).
//! 2. `geometry` was validated: the participant table and the slot array lie inside the
//!    image, at offsets that are multiples of 8 (participants) and 64 (slots).
//! 3. [`Header`], [`Participant`] and [`Slot`] consist only of atomics (`repr(C)`), so every
//!    bit pattern is a valid value and other processes may write them concurrently through
//!    their own mappings without a data race on our side.
//! 4. The data area of a `FairMutex<T>` file (`geometry.data`), if any, lies inside the
//!    mapping at `geometry.data_offset`, a multiple of its alignment; it is handed out only
//!    as a raw pointer, and only `FairMutex` turns it into a reference, under the lock.
//!
//! The one thing no check can prevent: another process truncating the file while it is
//! mapped makes accesses fault (`SIGBUS`). Every mapping is therefore a [`GuardedMap`],
//! registered with `sys::sigbus`, whose handler replaces a truncated mapping with private zero
//! pages and marks it broken (any bytes are valid, invariant 3); the views over it then fail
//! with a typed error.

use std::fs::File;
use std::io;
use std::sync::Arc;

use memmap2::{MmapOptions, MmapRaw};

use crate::core::state::{Header, Participant, Slot};
use crate::core::{Geometry, LockState};

/// A mapping of a lock file, registered with `sys::sigbus` for as long as it is mapped.
pub struct GuardedMap {
    // Declared before `map`: unregistered before it is unmapped (a `SIGBUS` in a range that
    // was unmapped and reused by another mapping must never be taken for ours).
    registration: crate::sys::sigbus::Registration,
    map: MmapRaw,
}

impl GuardedMap {
    /// Registers `map`, made now: its views belong to the current fork generation.
    pub fn new(map: MmapRaw) -> GuardedMap {
        let generation = crate::sys::thread::fork_generation();
        GuardedMap {
            registration: crate::sys::sigbus::register(map.as_ptr(), map.len(), generation),
            map,
        }
    }

    /// The fork generation this mapping's views belong to; `sys::sigbus::BROKEN` once a
    /// truncation of the file broke it.
    pub fn generation(&self) -> &'static std::sync::atomic::AtomicU64 {
        self.registration.generation()
    }
}

impl std::ops::Deref for GuardedMap {
    type Target = MmapRaw;

    fn deref(&self) -> &MmapRaw {
        &self.map
    }
}

/// A lock file mapped shared.
pub struct Mapping {
    map: Arc<GuardedMap>,
    base: usize,
    geometry: Geometry,
}

impl Mapping {
    /// Maps `geometry.file_size` bytes of `file`, shared and writable. (A read-only view is
    /// another type, [`super::ReadOnlyView`], that hands out no references at all.)
    pub fn new(file: &File, geometry: Geometry) -> io::Result<Mapping> {
        let map = MmapOptions::new().len(geometry.file_size).map_raw(file)?;
        Ok(Mapping {
            map: Arc::new(GuardedMap::new(map)),
            base: 0,
            geometry,
        })
    }

    /// See [`GuardedMap::generation`].
    pub fn generation(&self) -> &'static std::sync::atomic::AtomicU64 {
        self.map.generation()
    }

    /// The lock image of `geometry` at `base` in `map` (a record of a file of named locks),
    /// if it lies inside the mapping and `base` is aligned for it (invariant 1).
    pub fn record(map: Arc<GuardedMap>, base: usize, geometry: Geometry) -> Option<Mapping> {
        let align = (geometry.data.align as usize).max(64);
        let fits = base
            .checked_add(geometry.file_size)
            .is_some_and(|end| end <= map.len());
        (fits && base.is_multiple_of(align)).then_some(Mapping {
            map,
            base,
            geometry,
        })
    }

    /// The layout.
    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    /// The start of the data area, if the file has one (invariants 1 and 4: in bounds and
    /// aligned for the data's alignment).
    pub fn data(&self) -> Option<std::ptr::NonNull<u8>> {
        if self.geometry.data.size == 0 {
            return None;
        }
        // SAFETY: invariants 1 and 4: `base + data_offset + data.size <= base + file_size`,
        // inside the mapping.
        let p = unsafe {
            self.map
                .as_mut_ptr()
                .add(self.base + self.geometry.data_offset)
        };
        std::ptr::NonNull::new(p)
    }

    /// The header alone: all that the uncontended lock and unlock touch (no view built).
    #[inline(always)]
    pub fn header(&self) -> &Header {
        // SAFETY: invariant 1 (`base` in bounds, alive for `'_`, 64-aligned so aligned for
        // Header) and invariant 3 (any bytes are a valid Header; shared mutation is through
        // atomics).
        unsafe { &*self.map.as_ptr().add(self.base).cast::<Header>() }
    }

    /// The shared state.
    #[inline]
    pub fn state(&self) -> LockState<'_> {
        // SAFETY: invariant 1: `base` lies inside the mapping.
        let base = unsafe { self.map.as_ptr().add(self.base) };
        let g = self.geometry;
        // SAFETY: invariant 1 (in bounds, alive for `'_`, 64-aligned so aligned for Header)
        // and invariant 3 (any bytes are a valid Header; shared mutation is through atomics).
        let header = unsafe { &*base.cast::<Header>() };
        // SAFETY: invariants 1–3: `participants` entries of 32 bytes at an 8-aligned offset
        // inside the mapping, valid for any bytes.
        let participants = unsafe {
            std::slice::from_raw_parts(
                base.add(g.participants_offset).cast::<Participant>(),
                g.participants as usize,
            )
        };
        // SAFETY: invariants 1–3: `slots` slots of 64 bytes at a 64-aligned offset inside the
        // mapping, valid for any bytes.
        let slots = unsafe {
            std::slice::from_raw_parts(base.add(g.slots_offset).cast::<Slot>(), g.slots as usize)
        };
        LockState::from_validated(header, participants, slots, g.kind)
    }
}
