//! One open lock file per process: the mapping, our participant entry and beacon, and which of
//! our threads holds the lock. Every handle to the same file (same device and inode) in a
//! process shares it, so re-entrancy and `WouldDeadlock` are per (process, thread), and a
//! process has one beacon per file.
//!
//! How a view is made ([`Shared::open`]), fork-safely: open and validate the file (which may
//! wait for another process's initialisation, so it holds no lock of ours); look for an
//! existing view of the file's current state (under the fork lock, briefly; a view of a state
//! the file was emptied and made anew since is broken: [`Shared::join`]); create the beacon descriptor and register it
//! for the fork handler in one section under the fork lock; claim a participant entry (an OFD
//! lock on the new descriptor); clean up what the entry's dead previous user left; insert the
//! view (under the fork lock) unless another thread of ours inserted one meanwhile — then ours
//! is dropped and theirs used.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed, Ordering::Release};
use std::sync::{Arc, Mutex, Weak};

use crate::core::state::{Header, Participant};
use crate::core::{self, LockState};
use crate::error::{Error, Result};
use crate::file::{CreateOptions, Mapping, Opened, open_lock_file};
use crate::sys::ofd;
use crate::sys::platform::{Owners, SysPlatform};
use crate::sys::thread::{self, ForkGuard};

/// What a view of a named lock needs of the file of names it lives in (the names layer
/// implements it): whose participant entries of the record are live, and giving our entry
/// back when the view goes.
pub(crate) trait NamesOwner: Send + Sync {
    /// The owners of the record's participant entries, as the platform judges liveness.
    fn owners<'a>(&'a self, record: &'a [Participant]) -> Owners<'a>;
    /// Gives our claim on `entry` back.
    fn release_entry(&self, entry: &Participant);
}

/// A process's view of one lock file.
pub(crate) struct Shared {
    pub(crate) path: PathBuf,
    /// A descriptor of its own open file description, used only for beacons (OFD locks).
    /// Never the one we mapped: a mapping keeps its open file description — and with it
    /// every OFD lock on it — alive for as long as the mapping exists, which includes the copy
    /// a forked child inherits. Our beacon must die with our process. Shared by the views of
    /// a file's named locks (one beacon per process and file: the names' entries carry owner
    /// words naming it).
    beacon: Arc<Beacon>,
    mapping: Mapping,
    /// Our participant index.
    pub(crate) participant: u32,
    /// Our participant entry's `generation` right after we claimed it. While our beacon holds
    /// the entry, nobody else claims it, so a lock state whose entry has another generation
    /// (a file emptied and made anew zeroes every entry) is not the one this view was made on
    /// ([`Shared::claimed_in`]).
    claim: u64,
    /// For a named lock: its name, and the file's per-process view (kept alive while a name
    /// of it is open).
    pub(crate) named: Option<(Arc<str>, Arc<dyn NamesOwner>)>,
    /// The fork generation this was opened in (a forked child opens its own), or
    /// `sys::sigbus::BROKEN` once a truncation of the file broke the mapping: its mapping's
    /// word in `sys::sigbus`'s table, which the `SIGBUS` handler can reach.
    generation: &'static std::sync::atomic::AtomicU64,
    /// Which of our threads holds the lock; written on every grant.
    pub(crate) hold: Hold,
    /// This view's number, unique in the process (never reused): what a thread's record of a
    /// leased grant names it by (`thread_leases`), where an address could be a later view's.
    pub(crate) serial: u64,
}

/// Which of our threads holds the lock. On cache lines of its own: every grant to one of our
/// threads writes it, and sharing a line with the read-mostly fields above made each such
/// grant evict them from every other thread's cache (false sharing between our threads).
/// 128 bytes, because AMD and Intel cores fetch adjacent line pairs.
#[repr(align(128))]
pub(crate) struct Hold {
    /// `tid << 32 | (ticket as u32)` of our thread holding the lock, 0 if none.
    pub(crate) owner: AtomicU64,
    /// The held ticket (valid while `owner` names the calling thread).
    pub(crate) ticket: AtomicU64,
    /// The held grant, packed ([`Hold::meta`]: its flags and its lease in ms): one word, so
    /// that taking the lock stores it with one store. A nested guard takes the
    /// lease from here, not from its own handle: two handles on one file may differ in their
    /// lease option.
    pub(crate) grant_meta: AtomicU64,
    /// Re-entrancy depth of the holding thread; its top bit (`guard::POISONED`) marks a grant
    /// that a nested guard was dropped with while panicking: the outermost release then gives
    /// the lock up as if its owner died.
    pub(crate) depth: AtomicU32,
    /// How many records of leased grants through this view our threads keep
    /// (`thread_leases`): while 0, a lock need not look at its thread's (the uncontended lock
    /// reads this line already, for `owner`).
    pub(crate) thread_leases: AtomicU32,
}

/// The thread id of a process's grant (a [`ProcessGuard`](crate::ProcessGuard)): no thread's
/// (Linux thread ids stay below 2^22), so no key of `Hold` and no slot's thread id of a
/// thread's grant is ever made with it, and its `Hold` key is never `Hold`'s "nobody" (0).
pub(crate) const PROCESS_TID: u32 = u32::MAX;

/// The bit of `Hold::grant_meta` marking a grant that its thread's exit must not give up
/// (a `FairMutex` grant: see [`ExitWatch`]).
pub(crate) const KEPT_ON_EXIT: u64 = 1 << 63;

/// The bit of `Hold::depth` a nested guard dropped while panicking sets.
pub(crate) const POISONED: u32 = 1 << 31;
/// Where `Hold::grant_meta` keeps the lease in ms (41 bits, above the packed grant).
const LEASE_SHIFT: u32 = core::Grant::PACKED_BITS;
const LEASE_MASK: u64 = (1 << 41) - 1;

impl Hold {
    /// The `grant_meta` word of a grant: [`core::Grant::pack`]'s bits, the lease in ms above
    /// them, and `kept_on_exit` ([`KEPT_ON_EXIT`] or 0).
    #[inline]
    pub(crate) fn meta(lease_ms: Option<u64>, g: &core::Grant, kept_on_exit: u64) -> u64 {
        u64::from(g.pack()) | ((lease_ms.unwrap_or(0) & LEASE_MASK) << LEASE_SHIFT) | kept_on_exit
    }

    /// The held grant of ticket `ticket` and its lease in ms, from `grant_meta`.
    pub(crate) fn grant_of(meta: u64, ticket: u64) -> (core::Grant, Option<u64>) {
        let lease_ms = Some((meta >> LEASE_SHIFT) & LEASE_MASK).filter(|&ms| ms != 0);
        let bits = (meta & ((1 << LEASE_SHIFT) - 1)) as u32;
        (
            core::Grant::unpack(ticket, bits, lease_ms.is_some()),
            lease_ms,
        )
    }
}

/// The beacon descriptor, registered with the fork handler for as long as it is open.
pub(crate) struct Beacon(Option<File>);

impl Beacon {
    pub(crate) fn file(&self) -> &File {
        self.0.as_ref().expect("open until dropped")
    }
}

impl Drop for Beacon {
    fn drop(&mut self) {
        // Unregistered and closed in one section under the fork lock: a fork in between would
        // leave the child an unregistered copy keeping the beacon alive.
        let fork = ForkGuard::lock();
        if let Some(f) = self.0.take() {
            thread::unregister_beacon_fd(&fork, f.as_raw_fd());
            drop(f);
        }
    }
}

/// One entry of the table of open files: (device, inode, record), fork generation, the view.
/// The record is [`UNNAMED`] for a file of one lock.
type OpenFile = ((u64, u64, u32), u64, Weak<Shared>);

/// The record number of a file of one lock in the table of open files.
pub(crate) const UNNAMED: u32 = u32::MAX;

/// The views of this process, by file. Locked only while holding the fork lock, so that no
/// `fork` ever copies it locked.
static OPEN_FILES: Mutex<Vec<OpenFile>> = Mutex::new(Vec::new());

/// The table of open files, under the fork lock. Keep the section short: no waiting inside,
/// and never drop an `Arc<Shared>` inside (the last one closes a beacon, which takes the
/// fork lock): upgrade only what is returned.
pub(crate) fn with_open_files<R>(f: impl FnOnce(&mut Vec<OpenFile>) -> R) -> R {
    let _fork = ForkGuard::lock();
    let mut open_files = OPEN_FILES.lock().unwrap_or_else(|e| e.into_inner());
    f(&mut open_files)
}

/// This process's view of file `id` (and record) opened in fork generation `generation`.
pub(crate) fn find(
    open_files: &mut Vec<OpenFile>,
    id: (u64, u64, u32),
    generation: u64,
) -> Option<Arc<Shared>> {
    open_files.retain(|(_, _, w)| w.strong_count() > 0);
    open_files
        .iter()
        .filter(|(i, g, _)| *i == id && *g == generation)
        .filter_map(|(_, _, w)| w.upgrade())
        .find(|sh| !sh.is_broken()) // a truncation broke it: the file is opened anew
}

impl Shared {
    /// Opens `path` (or joins this process's existing view of the same file).
    pub(crate) fn open(path: &Path, o: &CreateOptions) -> Result<Arc<Shared>> {
        thread::install_fork_handler();
        Shared::join(open_lock_file(path, o)?, path)
    }

    /// The view of the file `opened` (just opened and validated): this process's existing
    /// one if it is a view of the file's current lock state, else a new one.
    fn join(opened: Opened, path: &Path) -> Result<Arc<Shared>> {
        let fork_generation = thread::fork_generation();
        let id = (opened.id.0, opened.id.1, UNNAMED);
        while let Some(existing) = with_open_files(|o| find(o, id, fork_generation)) {
            if existing.current_in(&opened.mapping) {
                return Ok(existing); // our extra descriptor closes here; it holds no beacon
            }
            // The file was emptied and made anew (by us, or by anyone since `existing` was
            // made) and `existing` is a view of the state from before: that state is gone, as
            // if its mapping had faulted (`sys::sigbus`); its handles fail from now on.
            existing.mark_broken();
        }
        let beacon = Arc::new(open_beacon(&opened.file, opened.id, path)?);
        drop(opened.file); // the mapping keeps what it needs
        let (participant, claim) = register(beacon.file(), &opened.mapping, path)?;
        let shared = Shared::new(path, beacon, opened.mapping, participant, claim, None);
        core::clean_up_participant(&shared.state(), &shared.platform(), participant);
        if let Some(entry) = shared.state().participant(participant) {
            publish_identity(entry);
        }
        Ok(Shared::insert(shared, id))
    }

    /// A new view (its participant entry claimed, with `claim` the entry's generation after
    /// our claim; not yet cleaned up or in the table).
    pub(crate) fn new(
        path: &Path,
        beacon: Arc<Beacon>,
        mapping: Mapping,
        participant: u32,
        claim: u64,
        named: Option<(Arc<str>, Arc<dyn NamesOwner>)>,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            path: path.to_path_buf(),
            beacon,
            generation: mapping.generation(),
            mapping,
            participant,
            claim,
            named,
            hold: Hold {
                owner: AtomicU64::new(0),
                ticket: AtomicU64::new(0),
                grant_meta: AtomicU64::new(0),
                depth: AtomicU32::new(0),
                thread_leases: AtomicU32::new(0),
            },
            serial: {
                static SERIAL: AtomicU64 = AtomicU64::new(1);
                // Relaxed: only uniqueness matters.
                SERIAL.fetch_add(1, Relaxed)
            },
        })
    }

    /// Puts `shared` in the table of open files under `id`, unless another thread of ours
    /// put a view there meanwhile: then that one is returned and `shared` (and its beacon)
    /// dropped.
    pub(crate) fn insert(shared: Arc<Shared>, id: (u64, u64, u32)) -> Arc<Shared> {
        // Relaxed: see `is_current`.
        let generation = shared.generation.load(Relaxed);
        let ours = shared.clone();
        let chosen = with_open_files(|open_files| {
            while let Some(theirs) = find(open_files, id, generation) {
                // A file of one lock: theirs may have been made on a state the file has been
                // made anew since (see `Shared::join`). (A name's view is made anew only
                // through its file of names: `names::open`.)
                if id.2 != UNNAMED || theirs.current_in(&ours.mapping) {
                    return theirs;
                }
                theirs.mark_broken();
            }
            open_files.push((id, generation, Arc::downgrade(&ours)));
            ours
        });
        // If another thread of ours won the race, `shared` goes here (outside the fork lock:
        // dropping a view may close a beacon, which takes it).
        drop(shared);
        chosen
    }

    /// The shared state.
    #[inline]
    pub(crate) fn state(&self) -> LockState<'_> {
        self.mapping.state()
    }

    /// The header alone (see [`Mapping::header`]).
    #[inline(always)]
    pub(crate) fn header(&self) -> &Header {
        self.mapping.header()
    }

    /// The file's layout (its data area included).
    /// The lock's bypass bound (0: strict FIFO; see `Fairness`).
    #[inline]
    pub(crate) fn bypass_bound(&self) -> u32 {
        self.mapping.geometry().kind.bypass_bound()
    }

    pub(crate) fn geometry(&self) -> crate::core::Geometry {
        self.mapping.geometry()
    }

    /// The start of the data area (see [`Mapping::data`]).
    pub(crate) fn data(&self) -> Option<std::ptr::NonNull<u8>> {
        self.mapping.data()
    }

    /// The platform, as seen through our file.
    #[inline]
    pub(crate) fn platform(&self) -> SysPlatform<'_> {
        SysPlatform {
            file: self.beacon.file(),
            me: self.participant,
            owners: self
                .named
                .as_ref()
                .map(|(_, names)| names.owners(self.mapping.state().participants())),
            participants: self.mapping.geometry().participants,
            entries: self.mapping.state().participants(),
            bell: None,
        }
    }

    /// Whether this view is this process's own (not inherited through `fork`) and its lock
    /// state is still the file's (not broken by a truncation: `sys::sigbus`).
    #[inline]
    pub(crate) fn is_current(&self) -> bool {
        // Relaxed: written when the mapping was made (before this view existed) and, once,
        // by this process's own `SIGBUS` handler, on the thread whose access faulted, before
        // that access (or any later one) saw the zero pages.
        self.generation.load(Relaxed) == thread::fork_generation()
    }

    /// Whether this view belongs to the current process (not inherited through `fork`), broken
    /// or not.
    #[inline]
    pub(crate) fn is_same_process(&self) -> bool {
        // Relaxed: as in `is_current`.
        let g = self.generation.load(Relaxed);
        g == thread::fork_generation() || g == crate::sys::sigbus::BROKEN
    }

    /// Marks this view's mapping broken, as the `SIGBUS` handler does (its file was made anew
    /// under it).
    pub(crate) fn mark_broken(&self) {
        // Relaxed: as in `is_current`; the views of other threads see it at their next check.
        self.generation.store(crate::sys::sigbus::BROKEN, Relaxed);
    }

    /// Whether `mapping` (a new mapping of this view's file, validated) shows the lock state
    /// this view was made on: the same geometry, and our participant entry still carrying our
    /// claim (see [`Shared::claim`]). A view whose claim landed in a state made anew after it
    /// validated the file is not current either: its geometry may be the old state's.
    fn current_in(&self, mapping: &Mapping) -> bool {
        self.mapping.geometry() == mapping.geometry() && self.claimed_in(mapping)
    }

    /// Whether our participant entry in `mapping` carries our claim.
    fn claimed_in(&self, mapping: &Mapping) -> bool {
        mapping
            .state()
            .participant(self.participant)
            .is_some_and(|entry| {
                // Relaxed: written by our own claim (or zeroed by the file's initialisation,
                // which the caller's opening of the file follows).
                entry.generation.load(Relaxed) == self.claim
            })
    }

    /// Whether a truncation of the file broke this view's mapping (see `sys::sigbus`).
    #[inline]
    pub(crate) fn is_broken(&self) -> bool {
        // Relaxed: as in `is_current`.
        self.generation.load(Relaxed) == crate::sys::sigbus::BROKEN
    }
}

/// A second open file description of the same file (through `/proc/self/fd`, so it is the
/// same inode even if the path was replaced meanwhile), for the beacon; created and registered
/// with the fork handler in one section under the fork lock.
pub(crate) fn open_beacon(file: &File, id: (u64, u64), path: &Path) -> Result<Beacon> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let open = |p: &Path, flags: libc::c_int| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC | flags)
            .open(p)
    };
    let beacon = {
        let fork = ForkGuard::lock();
        // `/proc/self/fd/N` is a link to the very file we opened (followed: with O_NOFOLLOW it
        // is refused with ELOOP, as every earlier version did, silently falling back to the
        // path). Without /proc, the path itself, not followed (the same inode, checked below).
        let f = open(Path::new(&format!("/proc/self/fd/{}", file.as_raw_fd())), 0)
            .or_else(|_| open(path, libc::O_NOFOLLOW))
            .map_err(|e| Error::io(path, "reopen for the beacon", e))?;
        if !thread::register_beacon_fd(&fork, f.as_raw_fd()) {
            return Err(Error::TooManyOpenFiles {
                path: path.to_path_buf(),
                capacity: thread::MAX_BEACONS,
            });
        }
        Beacon(Some(f))
    };
    let meta = beacon
        .file()
        .metadata()
        .map_err(|e| Error::io(path, "stat", e))?;
    if (meta.dev(), meta.ino()) != id {
        return Err(Error::io(
            path,
            "reopen for the beacon",
            std::io::Error::other("reopened a different file"),
        ));
    }
    Ok(beacon)
}

/// Claims a free participant entry: the first whose beacon we can lock, starting at a spot
/// derived from our pid so that concurrent openers rarely collide. (A file of one lock: no lock
/// of this beacon descriptor's open file description is on the file yet.) The entry's `owner`
/// is reset (a file of one lock uses it only to mark a grant held on behalf of a descriptor:
/// see `fd_form.rs`).
pub(crate) fn register(file: &File, mapping: &Mapping, path: &Path) -> Result<(u32, u64)> {
    let n = mapping.geometry().participants;
    let start = std::process::id() % n;
    for k in 0..n {
        let i = (start + k) % n;
        if ofd::try_claim(file.as_fd(), u64::from(i))
            .map_err(|e| Error::io(path, "claim beacon", e))?
        {
            if let Some(entry) = mapping.state().participant(i) {
                // Relaxed: read only by whoever holds this beacon's description afterwards.
                entry.marker.store(0, Relaxed);
                return Ok((i, note_claim(entry, std::process::id())));
            }
            return Ok((i, 0));
        }
    }
    Err(Error::TooManyParticipants {
        path: path.to_path_buf(),
        capacity: n,
    })
}

/// Writes down our claim of a participant entry of a file of one lock (or of a file of named
/// locks' file-wide table): a new generation, our pid and the time (informational: status).
/// Returns the new generation.
pub(crate) fn note_claim(entry: &Participant, pid: u32) -> u64 {
    // Relaxed: our beacon holds the entry; only we write it until we give it up.
    let generation = entry.generation.fetch_add(1, Relaxed).wrapping_add(1);
    note_time(entry, pid);
    generation
}

/// Writes our pid (informational: status) into an entry we claimed, and clears the
/// thread-beacon segment its previous process left there (see [`publish_identity`]). Not for
/// a name's entry, whose `claim` field is its owner word.
pub(crate) fn note_time(entry: &Participant, pid: u32) {
    // Relaxed: informational.
    entry.pid.store(pid, Relaxed);
    // Release: as in `publish_identity`.
    entry.claim.store(0, Release);
}

/// Writes our thread-beacon segment's identity (see `sys::beacon`) into our entry, so that
/// waiters can watch our threads. In a file of one lock only once what the entry's dead
/// predecessor held has been revoked: a waiter behind that dead holder must not watch *our*
/// segment for it.
pub(crate) fn publish_identity(entry: &Participant) {
    // Release: pairs with a waiter's Acquire load (`SysPlatform::watch_holder`).
    entry.claim.store(crate::sys::beacon::identity(), Release);
}

impl Drop for Shared {
    fn drop(&mut self) {
        // A named lock's participant entry is given back here (a file of one lock gives its
        // entry up with its beacon descriptor). Not in a forked child: the entry is its
        // parent's.
        if let Some((_, names)) = &self.named
            && self.is_current()
            && let Some(entry) = self.mapping.state().participant(self.participant)
        {
            names.release_entry(entry);
        }
    }
}

impl Shared {
    /// The key stored in `owner` for thread `tid` holding ticket `t`.
    #[inline]
    pub(crate) fn owner_key(tid: u32, t: u64) -> u64 {
        (u64::from(tid) << 32) | (t & 0xFFFF_FFFF)
    }

    /// The descriptor of this process's beacon for the file (see `ProcessGuard::share_liveness`).
    pub(crate) fn beacon_fd(&self) -> &File {
        self.beacon.file()
    }

    /// The thread id of our thread holding the lock, 0 if none.
    #[inline]
    pub(crate) fn holder_tid(&self) -> u32 {
        // Relaxed: a thread only ever finds its own id here if it stored it itself.
        (self.hold.owner.load(Relaxed) >> 32) as u32
    }
}

/// A thread-local whose destructor runs when a thread that has locked exits: any lock it
/// still holds (a leaked guard) is given up as if its owner died, so the next waiter takes
/// over and is told through `owner_died`.
///
/// Except a `FairMutex` grant (marked [`KEPT_ON_EXIT`]): the guard may still exist — leaked
/// with a `&'static mut T` handed to another thread, or kept in a thread-local whose
/// destructor runs after this one — and giving the lock to the next holder would make two
/// `&mut T` to one value. Such a grant stays held, as a leaked std `MutexGuard` keeps its
/// `Mutex` locked, until the guard is dropped or the process dies.
///
/// For a plain lock the same two cases release early: a guard kept in a thread-local
/// registered before the thread first locked is released (its holder told nothing until its
/// `check` or `unlock`) before that thread-local's destructor runs (docs/DESIGN.md, limits).
pub(crate) struct ExitWatch;

thread_local! {
    static EXIT_WATCH: ExitWatch = const { ExitWatch };
}

impl ExitWatch {
    /// Makes sure the calling thread's destructor is registered (cheap after the first call).
    /// In a thread-local destructor that runs after ours, nothing (the thread is ending; a
    /// panic there would abort the process: as `sys::beacon`'s `DEFERRED`).
    #[inline]
    pub(crate) fn arm() {
        let _ = EXIT_WATCH.try_with(|_| ());
    }
}

impl Drop for ExitWatch {
    fn drop(&mut self) {
        let tid = thread::current_tid();
        // Collected under the lock, used (and possibly dropped: a view's last owner may go
        // here, and its beacon takes the fork lock) after it.
        let views: Vec<Arc<Shared>> = with_open_files(|open_files| {
            open_files
                .iter()
                .filter_map(|(_, _, w)| w.upgrade())
                .collect()
        });
        for sh in views {
            // Relaxed: written by this very thread when it acquired.
            if !sh.is_current()
                || sh.holder_tid() != tid
                || sh.hold.grant_meta.load(Relaxed) & KEPT_ON_EXIT != 0
            {
                continue;
            }
            // Relaxed: written by this very thread when it acquired.
            let (grant, _) = Hold::grant_of(
                sh.hold.grant_meta.load(Relaxed),
                sh.hold.ticket.load(Relaxed),
            );
            sh.hold.owner.store(0, Relaxed);
            sh.hold.depth.store(0, Relaxed);
            let _ = core::revoke_own(&sh.state(), &sh.platform(), &grant, sh.participant);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Hold, KEPT_ON_EXIT, Shared};
    use crate::core::Grant;
    use crate::file::open_lock_file;
    use std::sync::Arc;

    /// Empties the file, as a truncation by another user does.
    fn empty(path: &std::path::Path) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .unwrap()
            .set_len(0)
            .unwrap();
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("fairlock-view-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        let _ = std::fs::remove_file(&path);
        path
    }

    /// Two threads opening a new file at once, in the order that once broke the second: one
    /// makes the file, the other opens it (valid by then) and puts its view in the table, and
    /// only then does the first look for a view. The view it finds is of the state it made:
    /// it joins it and breaks nothing.
    #[test]
    fn a_view_made_on_the_state_we_just_made_is_joined_not_broken() {
        let path = scratch("new-file-two-threads");
        let o = crate::OpenOptions::default().create_options();
        let made = open_lock_file(&path, &o).unwrap();
        let theirs = Shared::open(&path, &o).unwrap();
        let ours = Shared::join(made, &path).unwrap();
        assert!(!theirs.is_broken());
        assert!(Arc::ptr_eq(&ours, &theirs), "one view per file and process");
        let _ = std::fs::remove_file(&path);
    }

    /// A view of the state from before the file was emptied and made anew (its mapping not
    /// faulted yet) is broken by the opener that made the file anew, which gets a view of its
    /// own.
    #[test]
    fn a_view_of_the_state_before_the_file_was_made_anew_is_broken() {
        let path = scratch("emptied-file");
        let o = crate::OpenOptions::default().create_options();
        let old = Shared::open(&path, &o).unwrap();
        empty(&path);
        let made = open_lock_file(&path, &o).unwrap();
        let new = Shared::join(made, &path).unwrap();
        assert!(old.is_broken());
        assert!(!new.is_broken());
        assert!(!Arc::ptr_eq(&old, &new));
        let _ = std::fs::remove_file(&path);
    }

    /// A thread that opens the file after it was emptied and made anew (by another process)
    /// gets a view of the new state, not this process's view of the old one: its handle works,
    /// and the old view is broken.
    #[test]
    fn an_open_after_the_file_was_made_anew_elsewhere_gets_the_new_state() {
        let path = scratch("made-anew-elsewhere");
        let o = crate::OpenOptions::default().create_options();
        let old = Shared::open(&path, &o).unwrap();
        empty(&path);
        // Made anew as another process would: opened, initialised, not joined by us.
        drop(open_lock_file(&path, &o).unwrap());
        let new = Shared::open(&path, &o).unwrap();
        assert!(
            !Arc::ptr_eq(&old, &new),
            "the view of the old state was joined"
        );
        assert!(old.is_broken());
        assert!(!new.is_broken());
        let _ = std::fs::remove_file(&path);
    }

    /// A view whose opener validated the file before it was made anew with another geometry,
    /// and claimed its entry after, is not joined by the thread that made it anew: that
    /// thread's view has the file's geometry.
    #[test]
    fn a_view_of_another_geometry_is_not_joined() {
        let path = scratch("other-geometry");
        let mut small = crate::OpenOptions::default().create_options();
        small.slots = 8;
        drop(open_lock_file(&path, &small).unwrap());
        let theirs_opened = open_lock_file(&path, &small).unwrap();
        empty(&path);
        let mut large = small;
        large.slots = 64;
        let made = open_lock_file(&path, &large).unwrap();
        let geometry = made.mapping.geometry();
        let theirs = Shared::join(theirs_opened, &path).unwrap();
        let ours = Shared::join(made, &path).unwrap();
        assert_eq!(ours.geometry(), geometry);
        assert!(!Arc::ptr_eq(&ours, &theirs));
        assert!(theirs.is_broken());
        let _ = std::fs::remove_file(&path);
    }

    /// A hold's packed grant keeps its lease up to the longest a handle accepts, its flags,
    /// and the kept-on-exit bit, each apart from the others.
    #[test]
    fn a_held_grant_and_its_lease_come_back_from_the_hold() {
        let max_lease_ms = (1u64 << 41) - 2;
        for lease in [None, Some(1), Some(max_lease_ms)] {
            for kept in [0, KEPT_ON_EXIT] {
                let g = Grant {
                    bypass: 511,
                    count: 1023,
                    ..Grant::of(7, true, lease.is_some(), true)
                };
                let meta = Hold::meta(lease, &g, kept);
                assert_eq!(meta & KEPT_ON_EXIT, kept);
                assert_eq!(Hold::grant_of(meta, 7), (g, lease));
            }
        }
    }
}
