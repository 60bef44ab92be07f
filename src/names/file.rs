//! Files of named locks: creating and validating one, re-initialising it after a reboot,
//! mapping it once per process, and writing a record's lock image in place. The table's
//! algorithm is [`crate::names::table`]; the names lock and the beacons are the API layer's.

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::Arc;

use memmap2::MmapOptions;

use crate::core::Geometry;
use crate::core::state::{
    HEADER_SIZE, Header, MAGIC, MAGIC_PENDING, MAGIC_REINIT, Participant, RecordKind, VERSION,
};
use crate::error::{Error, Result};
use crate::file::image::initial_image;
use crate::file::mapping::{GuardedMap, Mapping};
use crate::file::open::{
    CreateOptions, judge_refusal, lock_for_initialisation, open_file, read_verdict,
};
use crate::file::validate::Verdict;
use crate::names::layout::{
    KIND_NAMES, NameEntry, NamesGeometry, NamesHeader, RecordState, generation_of,
};
use crate::names::table::NameTable;
use crate::primitive::AtomicU64;
use crate::primitive::Ordering::{Relaxed, Release};
use crate::sys::{boot_id, ofd};

/// A file of named locks mapped shared and writable.
///
/// Invariants: `map` is `geometry.file_size` bytes long, page-aligned, shared by every view
/// of the file's names in this process; `geometry` was validated against the file's length;
/// [`NamesHeader`], [`NameEntry`] and lock images consist only of atomics, so any bytes are
/// valid values and other processes may write them concurrently.
pub struct NamesMap {
    map: Arc<GuardedMap>,
    geometry: NamesGeometry,
}

impl NamesMap {
    /// Whether a truncation of the file broke this mapping (`sys::sigbus`).
    pub fn is_broken(&self) -> bool {
        // Relaxed: see `Shared::is_current`.
        self.map
            .generation()
            .load(std::sync::atomic::Ordering::Relaxed)
            == crate::sys::sigbus::BROKEN
    }

    /// The layout.
    pub fn geometry(&self) -> NamesGeometry {
        self.geometry
    }

    /// The header.
    pub fn header(&self) -> &NamesHeader {
        // SAFETY: the invariants: in bounds (the file is longer than a header), page-aligned,
        // alive for `&self`, and any bytes are a valid `NamesHeader` of atomics.
        unsafe { &*self.map.as_ptr().cast::<NamesHeader>() }
    }

    /// The file-wide participant entries (one per process using the file).
    pub fn processes(&self) -> &[Participant] {
        // SAFETY: `process_at(processes) <= records_offset <= file_size` (the geometry was
        // validated), 8-aligned (offset HEADER_SIZE of a page-aligned mapping); atomics only.
        unsafe {
            std::slice::from_raw_parts(
                self.map
                    .as_ptr()
                    .add(self.geometry.process_at(0))
                    .cast::<Participant>(),
                self.geometry.processes as usize,
            )
        }
    }

    /// Record `r`'s lock header (`r < records`).
    fn image_header(&self, r: u32) -> &Header {
        debug_assert!(r < self.geometry.records);
        let r = r.min(self.geometry.records - 1);
        // SAFETY: `image_at(r) + HEADER_SIZE <= file_size` for every record (the geometry was
        // validated), 64-aligned; atomics only.
        unsafe {
            &*self
                .map
                .as_ptr()
                .add(self.geometry.image_at(r))
                .cast::<Header>()
        }
    }

    /// The kind record `r`'s header stores, if it is valid for the file's geometry.
    pub fn record_kind(&self, r: u32) -> Option<RecordKind> {
        let h = self.image_header(r);
        // Relaxed: written before the record's `Used` word, which the caller loaded with
        // Acquire (or under the names lock).
        RecordKind::decode(h.kind.load(Relaxed), h.permits.load(Relaxed))
            .filter(|k| self.geometry.record.of_kind(*k).is_some())
    }

    /// Record `r`'s next ticket (under the names lock, while nobody uses the record).
    pub fn record_next_ticket(&self, r: u32) -> u64 {
        // Relaxed: under the names lock; nobody takes tickets of an unused record.
        let h = self.image_header(r);
        crate::core::state::lock_word::full_ticket(
            crate::core::state::lock_word::LockWord(h.word.load(Relaxed)),
            h.epoch.load(Relaxed),
        )
    }

    /// The mapping of record `r`'s lock image, of kind `kind`.
    pub fn record_mapping(&self, r: u32, kind: RecordKind) -> Option<Mapping> {
        let g = self.geometry.record.of_kind(kind)?;
        (r < self.geometry.records)
            .then(|| Mapping::record(self.map.clone(), self.geometry.image_at(r), g))
            .flatten()
    }

    /// Writes record `r`'s lock image afresh: kind `kind`, tickets from `next_ticket`, every
    /// participant and slot reset; the data area zeroed unless `keep_data`. Only while nobody
    /// uses the record (under the names lock, `Creating`; or re-initialising the whole file).
    pub fn write_image(&self, r: u32, kind: RecordKind, next_ticket: u64, keep_data: bool) {
        let Some(g) = self.geometry.record.of_kind(kind) else {
            return;
        };
        let img = initial_image(g, boot_id::UNKNOWN, next_ticket, MAGIC);
        let words = self.words(self.geometry.image_at(r), img.len() / 8);
        for (w, bytes) in words.iter().zip(img.chunks_exact(8)) {
            let mut b = [0u8; 8];
            b.copy_from_slice(bytes);
            // Relaxed: published by the record's `Used` word (Release).
            w.store(u64::from_le_bytes(b), Relaxed);
        }
        if !keep_data && g.data.size > 0 {
            let data = self.geometry.image_at(r) + g.data_offset;
            for w in self.words(data, (g.data.size as usize).div_ceil(8)) {
                // Relaxed: as above.
                w.store(0, Relaxed);
            }
        }
    }

    /// `count` words at `offset` (a multiple of 8, inside a record: the callers' offsets come
    /// from the validated geometry).
    fn words(&self, offset: usize, count: usize) -> &[AtomicU64] {
        assert!(offset.is_multiple_of(8) && offset + count * 8 <= self.geometry.file_size);
        // SAFETY: checked in bounds and 8-aligned just above (the mapping is page-aligned and
        // `file_size` long); the range lies in a lock image or data area, whose bytes are only
        // ever accessed as atomics, and any bits are a valid `AtomicU64`.
        unsafe {
            std::slice::from_raw_parts(self.map.as_ptr().add(offset).cast::<AtomicU64>(), count)
        }
    }
}

impl NameTable for NamesMap {
    fn records(&self) -> u32 {
        self.geometry.records
    }

    fn entry(&self, r: u32) -> &NameEntry {
        let r = r.min(self.geometry.records - 1);
        // SAFETY: `entry_offset(r) + NAME_ENTRY_SIZE <= file_size` (validated geometry),
        // 64-aligned, atomics only.
        unsafe {
            &*self
                .map
                .as_ptr()
                .add(self.geometry.entry_offset(r))
                .cast::<NameEntry>()
        }
    }
}

/// An open, validated, mapped file of named locks.
pub struct OpenedNames {
    /// The file.
    pub file: File,
    /// Its mapping.
    pub map: NamesMap,
    /// Device and inode.
    pub id: (u64, u64),
}

/// The header of a new file of named locks.
fn names_header(g: NamesGeometry, boot: [u64; 2], magic: u64) -> Vec<u8> {
    let mut h = vec![0u8; HEADER_SIZE];
    let mut put = |off: usize, v: &[u8]| h[off..off + v.len()].copy_from_slice(v);
    put(0, &magic.to_le_bytes());
    put(8, &VERSION.to_le_bytes());
    put(12, &(HEADER_SIZE as u32).to_le_bytes());
    put(16, &(g.file_size as u64).to_le_bytes());
    put(24, &g.record.slots.to_le_bytes());
    put(28, &g.record.participants.to_le_bytes());
    put(32, &(g.record_size as u32).to_le_bytes());
    put(36, &g.records.to_le_bytes());
    put(40, &KIND_NAMES.to_le_bytes());
    put(44, &g.processes.to_le_bytes());
    put(48, &boot[0].to_le_bytes());
    put(56, &boot[1].to_le_bytes());
    put(88, &(g.records_offset as u64).to_le_bytes());
    put(96, &(g.image_offset as u64).to_le_bytes());
    put(144, &g.record.data.size.to_le_bytes());
    put(152, &g.record.data.align.to_le_bytes());
    put(160, &g.record.data.tag.to_le_bytes());
    h
}

/// File-wide participant entries of a new file of named locks: processes that may have names
/// of it open at once.
const PROCESSES: u32 = 1024;

/// The geometry a new file of named locks gets from `o`.
fn new_geometry(o: &CreateOptions) -> Result<NamesGeometry> {
    Geometry::with_data(o.slots, o.participants, o.data)
        .and_then(|g| {
            // `checked`: a capacity above 2^31 must be refused, not wrap to 0.
            let records = o.names.checked_next_power_of_two()?.max(2);
            NamesGeometry::new(g, records, PROCESSES)
        })
        .ok_or_else(|| Error::InvalidOption {
            what: format!(
                "a file of {} named locks of {} slots / {} participants: slots must be a power of two in 2..=2^20, participants in 1..=4096, names 1..=2^20",
                o.names, o.slots, o.participants
            ),
        })
}

fn map(file: &File, path: &Path, geometry: NamesGeometry) -> Result<NamesMap> {
    let map = MmapOptions::new()
        .len(geometry.file_size)
        .map_raw(file)
        .map_err(|e| Error::io(path, "mmap", e))?;
    Ok(NamesMap {
        map: Arc::new(GuardedMap::new(map)),
        geometry,
    })
}

/// Opens (creating if asked) and maps the file of named locks at `path`.
pub fn open_names_file(path: &Path, o: &CreateOptions) -> Result<OpenedNames> {
    let file = open_file(path, o, false)?;
    let boot = boot_id::read();
    let geometry = match read_verdict(&file, path)? {
        Verdict::Names { geometry, boot_id } if !boot_id::is_stale(boot_id, boot) => geometry,
        v @ (Verdict::Foreign | Verdict::Incompatible(_) | Verdict::Valid { .. }) => {
            return Err(refusal(path, v));
        }
        _ => initialise_locked(&file, path, o, boot)?,
    };
    check_data(path, o, geometry)?;
    let map = map(&file, path, geometry)?;
    let meta = file.metadata().map_err(|e| Error::io(path, "stat", e))?;
    Ok(OpenedNames {
        file,
        map,
        id: (meta.dev(), meta.ino()),
    })
}

/// The refusal of a file that is not one of named locks.
fn refusal(path: &Path, v: Verdict) -> Error {
    match v {
        Verdict::Valid { geometry, .. } => Error::KindMismatch {
            path: path.to_path_buf(),
            found: format!("{} without names", geometry.kind.describe()),
            wanted: "file of named locks".into(),
        },
        v => judge_refusal(path, v),
    }
}

/// A named `FairMutex<T>` needs the file's records to have exactly its data area; other
/// kinds ignore it.
pub fn check_data(path: &Path, o: &CreateOptions, g: NamesGeometry) -> Result<()> {
    if o.data_type.is_empty() || g.record.data == o.data {
        Ok(())
    } else {
        Err(crate::file::open::data_mismatch(path, o, g.record.data))
    }
}

/// Under the file's `flock`: create the file if it is empty or its creator died, or
/// re-initialise it after a reboot.
fn initialise_locked(
    file: &File,
    path: &Path,
    o: &CreateOptions,
    boot: Option<[u64; 2]>,
) -> Result<NamesGeometry> {
    lock_for_initialisation(file, path, o.init_wait)?;
    let result = (|| match read_verdict(file, path)? {
        crate::file::validate::Verdict::Empty | crate::file::validate::Verdict::Pending => {
            let g = new_geometry(o)?;
            let w = |e| Error::io(path, "initialise", e);
            file.write_all_at(
                &names_header(g, boot.unwrap_or(boot_id::UNKNOWN), MAGIC_PENDING),
                0,
            )
            .map_err(w)?;
            // Every record zero (`Empty`), sparse: whatever a dead creator left goes.
            file.set_len(HEADER_SIZE as u64).map_err(w)?;
            file.set_len(g.file_size as u64).map_err(w)?;
            file.write_all_at(&MAGIC.to_le_bytes(), 0).map_err(w)?;
            Ok(g)
        }
        Verdict::Names { geometry, boot_id } => {
            // Before anything is written: a file of another `T` is refused untouched.
            check_data(path, o, geometry)?;
            let alive = ofd::any_held(file.as_fd(), 0, u64::from(geometry.processes))
                .map_err(|e| Error::io(path, "probe beacons", e))?;
            if boot_id::is_stale(boot_id, boot) && !alive {
                reinitialise(file, path, geometry, boot)?;
            }
            Ok(geometry)
        }
        Verdict::NamesReinit { geometry } => {
            check_data(path, o, geometry)?;
            reinitialise(file, path, geometry, boot)?;
            Ok(geometry)
        }
        v => Err(refusal(path, v)),
    })();
    let _ = file.unlock();
    result
}

/// After a reboot (nobody alive uses the file): every name's lock state written afresh,
/// keeping its key, its tickets (tokens keep rising) and its data; records left half-created
/// or half-reclaimed are freed. Restartable: the magic says "re-initialising" until done.
fn reinitialise(file: &File, path: &Path, g: NamesGeometry, boot: Option<[u64; 2]>) -> Result<()> {
    let w = |e| Error::io(path, "re-initialise", e);
    file.write_all_at(&MAGIC_REINIT.to_le_bytes(), 0)
        .map_err(w)?;
    let m = map(file, path, g)?;
    for r in 0..g.records {
        let e = m.entry(r);
        // Relaxed: nobody else uses the file (no beacon held, under the flock).
        let word = e.state.load(Relaxed);
        match RecordState::of(word) {
            RecordState::Empty | RecordState::Free => {}
            RecordState::Used | RecordState::Reclaiming => match m.record_kind(r) {
                Some(kind) => {
                    m.write_image(r, kind, m.record_next_ticket(r), true);
                    e.state
                        .store(RecordState::Used.word(generation_of(word)), Release);
                }
                None => {
                    // Freed as a sweep frees a record, raising the floor as a sweep does (to
                    // the higher, bounded ceiling: its kind is unknown), so that the name,
                    // created again, keeps its tokens rising.
                    // Relaxed: nobody else uses the file.
                    let h = m.header();
                    let ceiling = crate::core::state::token_ceiling(1, m.record_next_ticket(r));
                    let floor = h.token_floor.load(Relaxed);
                    h.token_floor.store(floor.max(ceiling), Relaxed);
                    e.state.store(
                        RecordState::Free
                            .word(generation_of(word).wrapping_add(1) & (u64::MAX >> 8)),
                        Release,
                    );
                }
            },
            RecordState::Creating => {
                e.state
                    .store(RecordState::Free.word(generation_of(word)), Release);
            }
        }
    }
    let boot = boot.unwrap_or(boot_id::UNKNOWN);
    let mut ids = [0u8; 16];
    ids[..8].copy_from_slice(&boot[0].to_le_bytes());
    ids[8..].copy_from_slice(&boot[1].to_le_bytes());
    // The stores above reach the page cache through the shared mapping before the magic is
    // written (one page cache: every later mapper and reader sees them); the magic goes last.
    file.write_all_at(&ids, 48).map_err(w)?;
    file.write_all_at(&MAGIC.to_le_bytes(), 0).map_err(w)?;
    Ok(())
}
