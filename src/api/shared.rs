//! One open lock file per process: the mapping, our participant entry and beacon, and which of
//! our threads holds the lock. Every handle to the same file (same device and inode) in a
//! process shares it, so re-entrancy and `WouldDeadlock` are per (process, thread), and a
//! process has one beacon per file.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};

use crate::core::layout::Participant;
use crate::core::{self, LockState, State, Word};
use crate::error::{Error, Result};
use crate::file::{CreateOptions, Mapping, open_lock_file};
use crate::sys::platform::SysPlatform;
use crate::sys::{ofd, thread};

/// A process's view of one lock file.
pub(crate) struct Shared {
    pub(crate) path: PathBuf,
    /// A descriptor of its own open file description, used only for beacons (OFD locks).
    /// Never the one we mapped: a mapping keeps its open file description — and with it
    /// every OFD lock on it — alive for as long as the mapping exists, which includes the copy
    /// a forked child inherits. Our beacon must die with our process.
    file: File,
    mapping: Mapping,
    /// Our participant index.
    pub(crate) participant: u32,
    id: (u64, u64),
    /// The fork generation this was opened in; a forked child opens its own.
    pub(crate) fork_generation: u64,
    /// Which of our threads holds the lock; written on every grant.
    pub(crate) hold: Hold,
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
    /// The held grant's lease in ms (0 if none) `<< 1`, or 1 if it carried the died flag:
    /// one word, so that taking the lock stores no more than before. A nested guard takes the
    /// lease from here, not from its own handle: two handles on one file may differ in their
    /// lease option.
    pub(crate) grant_meta: AtomicU64,
    /// Re-entrancy depth of the holding thread.
    pub(crate) depth: AtomicU32,
}

impl Hold {
    /// The `grant_meta` word of a grant.
    #[inline]
    pub(crate) fn meta(lease_ms: Option<u64>, died: bool) -> u64 {
        (lease_ms.unwrap_or(0) << 1) | u64::from(died)
    }

    /// The held grant's (lease in ms, died flag), from `grant_meta`.
    pub(crate) fn grant_of(meta: u64) -> (Option<u64>, bool) {
        (Some(meta >> 1).filter(|&ms| ms != 0), meta & 1 != 0)
    }
}

static OPEN_FILES: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

impl Shared {
    /// Opens `path` (or joins this process's existing view of the same file).
    pub(crate) fn open(path: &Path, o: &CreateOptions) -> Result<Arc<Shared>> {
        thread::install_fork_handler();
        let opened = open_lock_file(path, o)?;
        let fork_generation = thread::fork_generation();
        let mut open_files = OPEN_FILES.lock().unwrap_or_else(|e| e.into_inner());
        open_files.retain(|w| w.strong_count() > 0);
        if let Some(existing) = open_files
            .iter()
            .filter_map(Weak::upgrade)
            .find(|s| s.id == opened.id && s.fork_generation == fork_generation)
        {
            return Ok(existing); // our extra descriptor closes here; it holds no beacon
        }
        let beacon = reopen(&opened.file, opened.id, path)?;
        drop(opened.file); // the mapping keeps what it needs
        let participant = register(&beacon, &opened.mapping, path)?;
        thread::register_beacon_fd(beacon.as_raw_fd());
        let shared = Arc::new(Shared {
            path: path.to_path_buf(),
            file: beacon,
            mapping: opened.mapping,
            participant,
            id: opened.id,
            fork_generation,
            hold: Hold {
                owner: AtomicU64::new(0),
                ticket: AtomicU64::new(0),
                grant_meta: AtomicU64::new(0),
                depth: AtomicU32::new(0),
            },
        });
        shared.clean_up_predecessor();
        open_files.push(Arc::downgrade(&shared));
        Ok(shared)
    }

    /// The shared state.
    #[inline]
    pub(crate) fn state(&self) -> LockState<'_> {
        self.mapping.state()
    }

    /// The platform, as seen through our file.
    #[inline]
    pub(crate) fn platform(&self) -> SysPlatform<'_> {
        SysPlatform {
            file: &self.file,
            me: self.participant,
            participants: self.mapping.geometry().participants,
        }
    }

    /// Whether this view belongs to the current process (not inherited through `fork`).
    #[inline]
    pub(crate) fn is_current(&self) -> bool {
        self.fork_generation == thread::fork_generation()
    }

    /// Our participant entry was last used by a process that died (the kernel dropped its
    /// beacon, which is how we could claim it). Whatever it still held or waited for is
    /// revoked or skipped now, before we publish anything under the same index.
    fn clean_up_predecessor(&self) {
        let st = self.state();
        let p = self.platform();
        for i in 0..st.slot_count() {
            let slot = st.slot(i);
            // Acquire: see `core::advance`.
            let w = Word(slot.word.load(std::sync::atomic::Ordering::Acquire));
            if w.participant() != self.participant {
                continue;
            }
            let to = match w.state() {
                Some(State::Held) => State::Revoked,
                Some(State::Waiting | State::Sleeping | State::Granted) => State::Skipped,
                _ => continue,
            };
            let _ = slot.word.compare_exchange(
                w.0,
                w.with_state(to).0,
                std::sync::atomic::Ordering::AcqRel,
                std::sync::atomic::Ordering::Relaxed,
            );
        }
        core::advance(&st, &p, st.header().head.load(Relaxed), false);
    }
}

/// A second open file description of the same file (through `/proc/self/fd`, so it is the
/// same inode even if the path was replaced meanwhile), for the beacon.
fn reopen(file: &File, id: (u64, u64), path: &Path) -> Result<File> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let open = |p: &Path| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW)
            .open(p)
    };
    // Without /proc, the path itself (checked to be the same inode below).
    let beacon = open(Path::new(&format!("/proc/self/fd/{}", file.as_raw_fd())))
        .or_else(|_| open(path))
        .map_err(|e| Error::io(path, "reopen for the beacon", e))?;
    let meta = beacon.metadata().map_err(|e| Error::io(path, "stat", e))?;
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
/// derived from our pid so that concurrent openers rarely collide.
fn register(file: &File, mapping: &Mapping, path: &Path) -> Result<u32> {
    let n = mapping.geometry().participants;
    let pid = std::process::id();
    let start = pid % n;
    for k in 0..n {
        let i = (start + k) % n;
        if ofd::try_claim(file.as_fd(), i).map_err(|e| Error::io(path, "claim beacon", e))? {
            let st = mapping.state();
            if let Some(entry) = st.participant(i) {
                note_claim(entry, pid);
            }
            return Ok(i);
        }
    }
    Err(Error::TooManyParticipants {
        path: path.to_path_buf(),
        capacity: n,
    })
}

fn note_claim(entry: &Participant, pid: u32) {
    // Informational (status output); Relaxed.
    entry.generation.fetch_add(1, Relaxed);
    entry.pid.store(pid, Relaxed);
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    entry.claimed_at.store(secs, Relaxed);
}

impl Shared {
    /// The key stored in `owner` for thread `tid` holding ticket `t`.
    #[inline]
    pub(crate) fn owner_key(tid: u32, t: u64) -> u64 {
        (u64::from(tid) << 32) | (t & 0xFFFF_FFFF)
    }

    /// The thread id of our thread holding the lock, 0 if none.
    #[inline]
    pub(crate) fn holder_tid(&self) -> u32 {
        // Relaxed: a thread only ever finds its own id here if it stored it itself.
        (self.hold.owner.load(Relaxed) >> 32) as u32
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Before the descriptor closes (with `file`), so the fork handler never touches a
        // number that may be reused.
        thread::unregister_beacon_fd(self.file.as_raw_fd());
    }
}

/// A thread-local whose destructor runs when a thread that has locked exits: any lock it
/// still holds (a leaked guard) is given up as if its owner died, so the next waiter takes
/// over and is told through `owner_died`.
pub(crate) struct ExitWatch;

thread_local! {
    static EXIT_WATCH: ExitWatch = const { ExitWatch };
}

impl ExitWatch {
    /// Makes sure the calling thread's destructor is registered (cheap after the first call).
    #[inline]
    pub(crate) fn arm() {
        EXIT_WATCH.with(|_| ());
    }
}

impl Drop for ExitWatch {
    fn drop(&mut self) {
        let tid = thread::current_tid();
        let open_files = OPEN_FILES.lock().unwrap_or_else(|e| e.into_inner());
        for sh in open_files.iter().filter_map(Weak::upgrade) {
            if !sh.is_current() || sh.holder_tid() != tid {
                continue;
            }
            // Relaxed: written by this very thread when it acquired.
            let grant = core::Grant {
                ticket: sh.hold.ticket.load(Relaxed),
                died: false,
                leased: false,
            };
            sh.hold.owner.store(0, Relaxed);
            sh.hold.depth.store(0, Relaxed);
            core::revoke_own(&sh.state(), &sh.platform(), &grant, sh.participant);
        }
    }
}
