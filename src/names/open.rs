//! Opening a named lock: find (or create) the name's record in the file's table, take a
//! participant entry of it, and make the view. The table's algorithm is
//! [`crate::names::table`]; this adds the names lock, the beacons and the per-process cache.
//!
//! One [`NamesFile`] per process and file: the mapping (once, however many names are open),
//! the beacon descriptor and the process's file-wide participant entry, whose owner word every
//! name's entry of ours carries. The eight most recently used stay open after their last name
//! is closed.

use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::core::state::{Participant, RecordKind};
use crate::core::{Liveness, LockState};
use crate::error::{Error, Result};
use crate::file::{CreateOptions, NamesMap, open_names_file};
use crate::names::layout::{MAX_KEY_LEN, RecordState, generation_of, owner_word};
use crate::names::table::{self, LockedLookup, Lookup, NameTable};
use crate::primitive::Ordering::{Acquire, Relaxed, Release, SeqCst};
use crate::process::view::{Beacon, Shared, find, note_time, open_beacon, with_open_files};
use crate::sys::ofd;
use crate::sys::platform::Owners;
use crate::sys::thread::{self, ForkGuard};

/// A process's view of one file of named locks.
pub(crate) struct NamesFile {
    path: PathBuf,
    pub(crate) map: NamesMap,
    /// Our beacon: the OFD lock on byte `BEACON_BASE + me`.
    beacon: Arc<Beacon>,
    /// Our file-wide participant entry, and the generation of our claim of it: the owner word
    /// of every record entry we take.
    pub(crate) me: (u32, u64),
    id: (u64, u64),
    /// Our threads' turns at the names lock: an OFD lock never conflicts with another of the
    /// same open file description, so our threads first take turns here.
    creating: Mutex<()>,
}

impl crate::process::view::NamesOwner for NamesFile {
    fn owners<'a>(&'a self, record: &'a [Participant]) -> Owners<'a> {
        NamesFile::owners(self, record)
    }

    fn release_entry(&self, entry: &Participant) {
        NamesFile::release_entry(self, entry)
    }
}

impl NamesFile {
    /// Our owner word (see `core::name_layout::owner_word`).
    fn owner(&self) -> u64 {
        owner_word(self.me.0, self.me.1)
    }

    /// The owners of a record's participant entries, as the platform judges them.
    pub(crate) fn owners<'a>(&'a self, record: &'a [Participant]) -> Owners<'a> {
        Owners {
            record,
            processes: self.map.processes(),
            me: self.me,
        }
    }

    /// Takes a participant entry of the lock `state` (a record's): the first whose owner is
    /// gone, starting at a spot derived from our pid so that concurrent openers rarely collide.
    fn claim_entry(&self, state: &LockState<'_>) -> Result<u32> {
        let owners = self.owners(state.participants());
        let n = state.participant_count();
        let start = std::process::id() % n;
        for k in 0..n {
            let i = (start + k) % n;
            let Some(e) = state.participant(i) else { break };
            // Acquire: pairs with the previous owner's release (or claim).
            let word = e.claim.load(Acquire);
            // The liveness of this very word: the CAS below takes it only if it is unchanged.
            if owners.liveness_of(self.beacon.file(), word) == Liveness::Alive {
                continue;
            }
            // SeqCst: the store half of our side of the Dekker pair with a reclaimer (see
            // `core::names`): the record's state word is checked after this.
            if e.claim
                .compare_exchange(word, self.owner(), SeqCst, Relaxed)
                .is_ok()
            {
                return Ok(i);
            }
        }
        Err(Error::TooManyParticipants {
            path: self.path.clone(),
            capacity: n,
        })
    }

    /// Gives entry `entry` of a record back (if it is still ours).
    pub(crate) fn release_entry(&self, entry: &Participant) {
        // Release: whatever we wrote in the record before happens-before its next owner's
        // claim (Acquire).
        let _ = entry
            .claim
            .compare_exchange(self.owner(), 0, Release, Relaxed);
    }

    /// Whether record `r`'s lock holds news of a death for its next holder (for a reclaimer
    /// that found no live owner: see `table::carries_news`). A record whose kind cannot be
    /// read carries none that anyone could be told.
    fn record_carries_news(&self, r: u32) -> bool {
        let Some(kind) = self.map.record_kind(r) else {
            return false;
        };
        self.map
            .record_mapping(r, kind)
            .is_some_and(|m| table::carries_news(&m.state()))
    }

    /// Whether any participant entry of record `r` has a live owner (for a reclaimer, after
    /// its `SeqCst` fence).
    fn record_in_use(&self, r: u32) -> bool {
        let Some(kind) = self.map.record_kind(r) else {
            return false;
        };
        let Some(mapping) = self.map.record_mapping(r, kind) else {
            return false;
        };
        let st = mapping.state();
        let owners = self.owners(st.participants());
        (0..st.participant_count())
            .any(|i| owners.liveness(self.beacon.file(), i) == Liveness::Alive)
    }
}

/// The files of named locks this process has open: (device, inode), fork generation, view.
type NamesEntry = ((u64, u64), u64, Weak<NamesFile>);
/// Locked only under the fork lock (as the table of open files, for the same reason).
static NAMES_FILES: Mutex<Vec<NamesEntry>> = Mutex::new(Vec::new());

/// Files of named locks kept open after their last name was closed (the most recently used
/// first), with the fork generation they belong to, so that a service opening a name per
/// request does not open, validate and map the file and claim an entry each time (measured:
/// `lockbench names`). Locked only under the fork lock; never dropped inside it (a view's
/// beacon takes the fork lock when it closes).
static RECENT: Mutex<Vec<(u64, Arc<NamesFile>)>> = Mutex::new(Vec::new());
/// How many files of named locks a process keeps open that way.
const RECENT_FILES: usize = 8;

/// Puts `nf` first among the recently used files; returns what falls off (to be dropped by the
/// caller, outside the fork lock).
fn remember(nf: &Arc<NamesFile>, generation: u64) -> Vec<(u64, Arc<NamesFile>)> {
    let _fork = ForkGuard::lock();
    let mut recent = RECENT.lock().unwrap_or_else(|e| e.into_inner());
    // A forked child's inherited entries are its parent's: let them go (moved out, dropped by
    // the caller).
    let (mut keep, mut gone): (Vec<_>, Vec<_>) =
        recent.drain(..).partition(|(g, _)| *g == generation);
    match keep.iter().position(|(_, f)| Arc::ptr_eq(f, nf)) {
        Some(at) => keep[..=at].rotate_right(1),
        None => keep.insert(0, (generation, nf.clone())),
    }
    if keep.len() > RECENT_FILES {
        gone.extend(keep.drain(RECENT_FILES..));
    }
    *recent = keep;
    gone
}

/// This process's view of the file of named locks at `path`, opened (or created) now if no
/// name of it is open.
fn names_file(path: &Path, o: &CreateOptions) -> Result<Arc<NamesFile>> {
    let nf = names_file_uncached(path, o)?;
    drop(remember(&nf, thread::fork_generation()));
    Ok(nf)
}

/// [`names_file`] without the recently-used list: the view this process has of the file at
/// `path` (found by its device and inode, with one `stat`), or a new one.
fn names_file_uncached(path: &Path, o: &CreateOptions) -> Result<Arc<NamesFile>> {
    let generation = thread::fork_generation();
    if let Ok(meta) = std::fs::symlink_metadata(path)
        && meta.file_type().is_file()
    {
        let id = (meta.dev(), meta.ino());
        let found = {
            let _fork = ForkGuard::lock();
            let files = NAMES_FILES.lock().unwrap_or_else(|e| e.into_inner());
            files
                .iter()
                .filter(|(i, g, _)| *i == id && *g == generation)
                .filter_map(|(_, _, w)| w.upgrade())
                .find(|nf| !nf.map.is_broken()) // a truncation broke it: opened anew
        };
        if let Some(nf) = found {
            // Validated when it was opened; a named `FairMutex<T>` still checks its `T`.
            crate::file::check_names_data(path, o, nf.map.geometry())?;
            return Ok(nf);
        }
    }
    let opened = open_names_file(path, o)?;
    let lookup = |files: &mut Vec<NamesEntry>| {
        files.retain(|(_, _, w)| w.strong_count() > 0);
        files
            .iter()
            .filter(|(id, g, _)| *id == opened.id && *g == generation)
            .filter_map(|(_, _, w)| w.upgrade())
            .find(|nf| !nf.map.is_broken())
    };
    let with_files = |f: &mut dyn FnMut(&mut Vec<NamesEntry>) -> Option<Arc<NamesFile>>| {
        let _fork = ForkGuard::lock();
        let mut files = NAMES_FILES.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut files)
    };
    if let Some(existing) = with_files(&mut |files| lookup(files)) {
        return Ok(existing);
    }
    let beacon = Arc::new(open_beacon(&opened.file, opened.id, path)?);
    let me = claim_process_entry(&beacon, &opened.map, path)?;
    let ours = Arc::new(NamesFile {
        path: path.to_path_buf(),
        map: opened.map,
        beacon,
        me,
        id: opened.id,
        creating: Mutex::new(()),
    });
    let chosen = with_files(&mut |files| match lookup(files) {
        Some(theirs) => Some(theirs),
        None => {
            files.push((opened.id, generation, Arc::downgrade(&ours)));
            None
        }
    });
    Ok(chosen.unwrap_or(ours))
}

/// Claims a file-wide participant entry: the first whose beacon we can lock (the descriptor
/// is new, so none of our locks is on it). Its generation is bumped after the beacon is ours
/// (`SeqCst`), so owner words of the entry's earlier processes read as dead from then on.
fn claim_process_entry(beacon: &Beacon, map: &NamesMap, path: &Path) -> Result<(u32, u64)> {
    let processes = map.processes();
    let n = processes.len() as u32;
    let start = std::process::id() % n;
    for k in 0..n {
        let j = (start + k) % n;
        if ofd::try_claim(beacon.file().as_fd(), u64::from(j))
            .map_err(|e| Error::io(path, "claim beacon", e))?
        {
            let entry = &processes[j as usize];
            // SeqCst: ordered after the beacon claim and before any owner word we write.
            let generation = entry.generation.fetch_add(1, SeqCst).wrapping_add(1);
            note_time(entry, std::process::id());
            // At once: a name's waiters use it only while the generation is this claim's.
            crate::process::view::publish_identity(entry);
            return Ok((j, generation));
        }
    }
    Err(Error::TooManyParticipants {
        path: path.to_path_buf(),
        capacity: n,
    })
}

/// The names lock of a file, held: our threads' mutex, then the OFD lock on the file's names
/// byte (which the kernel releases if we die).
struct NamesLock<'a> {
    file: &'a NamesFile,
    _turn: MutexGuard<'a, ()>,
}

impl<'a> NamesLock<'a> {
    fn take(file: &'a NamesFile) -> Result<NamesLock<'a>> {
        let turn = file.creating.lock().unwrap_or_else(|e| e.into_inner());
        ofd::lock_names(file.beacon.file().as_fd())
            .map_err(|e| Error::io(&file.path, "take the names lock", e))?;
        Ok(NamesLock { file, _turn: turn })
    }
}

impl Drop for NamesLock<'_> {
    fn drop(&mut self) {
        let _ = ofd::unlock_names(self.file.beacon.file().as_fd());
    }
}

/// Checks a key: at most [`MAX_KEY_LEN`] bytes.
fn check_key(key: &str) -> Result<()> {
    if key.len() > MAX_KEY_LEN {
        return Err(Error::InvalidOption {
            what: format!(
                "a lock name of {} bytes: names are at most {MAX_KEY_LEN} bytes of UTF-8",
                key.len()
            ),
        });
    }
    Ok(())
}

/// Opens the lock named `key` in the file of named locks at `path` (created, and the name in
/// it, on first use).
pub(crate) fn open_named(path: &Path, o: &CreateOptions, key: &str) -> Result<Arc<Shared>> {
    check_key(key)?;
    thread::install_fork_handler();
    let nf = names_file(path, o)?;
    if nf.map.geometry().record.of_kind(o.kind).is_none() {
        return Err(Error::InvalidOption {
            what: format!(
                "a {} in {}: its names have {} slots, and a semaphore needs twice its permits",
                o.kind.describe(),
                path.display(),
                nf.map.geometry().record.slots
            ),
        });
    }
    let bytes = key.as_bytes();
    let hash = table::hash_key(bytes);
    loop {
        match table::lookup(&nf.map, bytes, hash) {
            Lookup::Found { record, word } => {
                if let Some(sh) = claim(&nf, record, word, key)? {
                    return Ok(sh);
                }
            }
            // Absent, or a reclaimer is looking at the name's record (live: its lock is ours
            // once it is done; dead: the lookup under the lock repairs the record).
            Lookup::Busy | Lookup::Absent => {
                let _lock = NamesLock::take(&nf)?;
                let (record, word) = find_or_create(&nf, bytes, hash, o.kind)?;
                if let Some(sh) = claim(&nf, record, word, key)? {
                    return Ok(sh);
                }
            }
        }
    }
}

/// Under the names lock: the name's record, created if absent (sweeping unused names first
/// when the table fills up).
fn find_or_create(nf: &NamesFile, key: &[u8], hash: u64, kind: RecordKind) -> Result<(u32, u64)> {
    let h = nf.map.header();
    let records = u64::from(nf.map.records());
    let mut swept = false;
    loop {
        match table::lookup_locked(&nf.map, key, hash) {
            LockedLookup::Found { record, word } => return Ok((record, word)),
            LockedLookup::Insert { record, was_empty } => {
                // Relaxed (here and below): the header's counters are only touched under the
                // names lock, which orders them.
                // Saturating: a corrupt header must not panic (or wrap into a sweep storm).
                let occupied = h.occupied.load(Relaxed);
                let filling =
                    was_empty && occupied.saturating_add(1).saturating_mul(4) > records * 3;
                let due = h
                    .swept_at
                    .load(Relaxed)
                    .saturating_add((records / 16).max(1));
                if filling && !swept && occupied >= due {
                    sweep(nf)?;
                    swept = true;
                    continue;
                }
                // Tickets start where every token is above those of reclaimed records.
                let floor = h.token_floor.load(Relaxed);
                let first = crate::core::state::first_ticket_above(kind.bypass_bound(), floor);
                // Only a corrupt floor (or 2^55 tickets) leaves no token above it.
                if crate::core::state::token_of(kind.bypass_bound(), first, 0) <= floor {
                    return Err(Error::Corrupt {
                        path: nf.path.clone(),
                        what: format!("the names header's token floor {floor} leaves no tokens"),
                    });
                }
                let generation = table::begin_create(&nf.map, record, key, hash);
                crate::crash_point!("names.creating");
                nf.map.write_image(record, kind, first, false);
                let word = table::publish(&nf.map, record, generation);
                if was_empty {
                    h.occupied.store(occupied.saturating_add(1), Relaxed);
                }
                return Ok((record, word));
            }
            LockedLookup::Full if !swept => {
                sweep(nf)?;
                swept = true;
            }
            LockedLookup::Full => {
                return Err(Error::TooManyNames {
                    path: nf.path.clone(),
                    capacity: nf.map.records(),
                });
            }
        }
    }
}

/// Under the names lock: frees every name no live process has open, then compacts the table.
/// Not in a file of named `FairMutex<T>`s: a name's value is the user's data, kept for good as
/// a `FairMutex` of a file of its own keeps its value (its name is never reclaimed).
fn sweep(nf: &NamesFile) -> Result<()> {
    let g = nf.map.geometry();
    let h = nf.map.header();
    let reclaimable = g.record.data == crate::core::state::DataShape::NONE;
    for r in (0..g.records).filter(|_| reclaimable) {
        // Acquire: pairs with the Release of `publish` (the record's header is read below).
        let mut word = nf.map.entry(r).state.load(Acquire);
        if RecordState::of(word) == RecordState::Reclaiming {
            // Left by a reclaimer that died holding the names lock: in use as far as anyone
            // knows; checked again now.
            word = RecordState::Used.word(generation_of(word));
        }
        if RecordState::of(word) != RecordState::Used || !table::begin_reclaim(&nf.map, r, word) {
            continue;
        }
        crate::crash_point!("names.reclaiming");
        // Anything but a clear "every owner is gone" keeps the name; so does news of a death
        // its next holder must be told (`table::carries_news`).
        let in_use = nf.record_in_use(r) || nf.record_carries_news(r);
        if !in_use {
            // Relaxed: under the names lock.
            let floor = h.token_floor.load(Relaxed);
            // A record whose kind cannot be read is taken for a bounded one: the higher
            // ceiling, so tokens rise whatever it was.
            let bound = nf.map.record_kind(r).map_or(1, |k| k.bypass_bound());
            let ceiling = crate::core::state::token_ceiling(bound, nf.map.record_next_ticket(r));
            h.token_floor.store(floor.max(ceiling), Relaxed);
        }
        table::finish_reclaim(&nf.map, r, word, in_use);
    }
    let occupied = table::compact(&nf.map);
    // Relaxed: under the names lock.
    h.occupied.store(occupied, Relaxed);
    h.swept_at.store(occupied, Relaxed);
    Ok(())
}

/// Takes a participant entry of `record` (found with state word `word`) and makes the view;
/// `None` if the record changed meanwhile (look again).
fn claim(nf: &Arc<NamesFile>, record: u32, word: u64, key: &str) -> Result<Option<Arc<Shared>>> {
    let id = (nf.id.0, nf.id.1, record);
    let generation = thread::fork_generation();
    if let Some(existing) = with_open_files(|o| find(o, id, generation)) {
        // Our view holds a beacon of the record, so it cannot have been given another name.
        if existing.named.as_ref().is_some_and(|(k, _)| &**k == key) {
            return Ok(Some(existing));
        }
    }
    let Some(mapping) = nf
        .map
        .record_kind(record)
        .and_then(|kind| nf.map.record_mapping(record, kind))
    else {
        // Only a record changed under us (or a corrupt one) has no valid kind: look again, and
        // report it if it stays so.
        return if nf.map.entry(record).state.load(Acquire) != word {
            Ok(None)
        } else {
            Err(Error::corrupt(
                &nf.path,
                format!("the lock named {key:?} has an invalid kind"),
            ))
        };
    };
    let participant = nf.claim_entry(&mapping.state())?;
    // SeqCst: the load half of the Dekker pair with a reclaimer (`names::begin_reclaim`): our
    // owner word is set before we look, its mark before it reads the owner words.
    crate::primitive::fence(SeqCst);
    if nf.map.entry(record).state.load(Acquire) != word {
        if let Some(entry) = mapping.state().participant(participant) {
            nf.release_entry(entry);
        }
        return Ok(None);
    }
    if let Some(entry) = mapping.state().participant(participant) {
        // Informational (status): not the time — this entry's `claim` is our owner word.
        // Relaxed: informational.
        entry.generation.fetch_add(1, Relaxed);
        entry.pid.store(std::process::id(), Relaxed);
    }
    let shared = Shared::new(
        &nf.path,
        nf.beacon.clone(),
        mapping,
        participant,
        0, // a name's view is never made anew by `Shared::join`: its claim is not compared
        Some((Arc::from(key), nf.clone())),
    );
    crate::core::clean_up_participant(&shared.state(), &shared.platform(), participant);
    Ok(Some(Shared::insert(shared, id)))
}
