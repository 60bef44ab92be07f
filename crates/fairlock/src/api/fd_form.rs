//! Locks held on behalf of an open file description: what `fairlock lock FD` / `fairlock unlock
//! FD` do for shell scripts (`exec 9>>jobs.lock; fairlock lock 9; …; fairlock unlock 9`).
//!
//! The grant's participant entry is claimed with a beacon taken through the caller's
//! descriptor, so the beacon belongs to *that* open file description: it outlives the process
//! that took the lock, and the kernel drops it when the last descriptor of the description is
//! closed (the shell exits, or closes fd 9). Until then the grant is alive; after, the next
//! waiter takes over and is told `owner_died`, as for any dead holder. The entry's `marker`
//! field (unused otherwise in a file of one lock) is set to [`FD_FORM`] so that `unlock` can
//! tell the entry of a descriptor from that of a process.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::shared::{Shared, dup_beacon, register};
use crate::core::layout::{Kind, Participant, RecordKind};
use crate::core::word::{State, Word};
use crate::core::{self, Grant};
use crate::error::{Error, Result};
use crate::file::{Opened, open_lock_file, open_read_only};
use crate::primitive::Ordering::{Acquire, Relaxed};
use crate::sys::ofd;
use crate::sys::platform::SysPlatform;
use crate::{FairLock, FairRwLock, FairSemaphore, OpenOptions};

/// The `marker` value of a participant entry whose beacon belongs to a descriptor (`fd` form).
const FD_FORM: u32 = u32::MAX;

/// Which lock [`OpenOptions::lock_for_fd`] takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FdMode {
    /// The exclusive lock of a file of one exclusive lock.
    Exclusive,
    /// A read grant of a reader/writer lock file.
    Read,
    /// A write grant of a reader/writer lock file.
    Write,
    /// A permit of a semaphore file of that many permits.
    Permit(u32),
}

/// A grant held on behalf of an open file description.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FdGrant {
    /// Its fencing token.
    pub token: u64,
    /// Whether the previous holder died (or lost its lease) instead of releasing.
    pub owner_died: bool,
}

/// `/proc/self/fd/N` (what the file is opened through) and, for messages, the file's path.
fn paths(fd: BorrowedFd<'_>) -> (PathBuf, PathBuf) {
    let proc = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    let shown = std::fs::read_link(&proc).unwrap_or_else(|_| proc.clone());
    (proc, shown)
}

/// The lock file's kind as [`FdMode`] asks for it.
fn kind_of(mode: FdMode) -> RecordKind {
    match mode {
        FdMode::Exclusive => RecordKind::EXCLUSIVE,
        FdMode::Read | FdMode::Write => RecordKind::RWLOCK,
        FdMode::Permit(n) => RecordKind::semaphore(n),
    }
}

/// The participant entry whose beacon `fd`'s open file description holds, if any: held by some
/// description other than `probe`'s, by none other than `fd`'s, and marked [`FD_FORM`].
fn entry_of(fd: BorrowedFd<'_>, opened: &Opened, shown: &Path) -> Result<Option<u32>> {
    let st = opened.mapping.state();
    let probe = |r: std::io::Result<bool>| r.map_err(|e| Error::io(shown, "probe beacons", e));
    for i in 0..st.participant_count() {
        let marked = st
            .participant(i)
            // Relaxed: written by the entry's claimer; re-checked against the beacons.
            .is_some_and(|p| p.marker.load(Relaxed) == FD_FORM);
        if marked
            && probe(ofd::is_held(opened.file.as_fd(), u64::from(i)))?
            && !probe(ofd::is_held(fd, u64::from(i)))?
        {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

/// Gives entry `i`'s beacon, taken through `fd`, back.
fn give_back(fd: BorrowedFd<'_>, entry: Option<&Participant>, i: u32) {
    if let Some(p) = entry {
        // Relaxed: as in `entry_of`.
        p.marker.store(0, Relaxed);
    }
    let _ = ofd::unlock_beacon(fd, u64::from(i));
}

impl OpenOptions {
    /// Takes the lock of the file `fd` is open on, **on behalf of `fd`'s open file
    /// description** rather than of this process: the grant stays held after this process
    /// exits, for as long as any descriptor of that description is open (a shell's `exec
    /// 9>>jobs.lock` keeps it for the shell's life), and ends with [`unlock_fd`] or when the
    /// last such descriptor closes (then the next holder is told `owner_died`). This is
    /// `fairlock lock FD`. `fd` must be open for writing on a file of one lock (an empty file is
    /// initialised); `mode` says which lock of it. The wait ends at `deadline` (`Timeout`) or
    /// once `stop()` says so (`Interrupted`; called after every wake-up), giving the place in
    /// line up. A lease (`OpenOptions::lease`) applies; nothing renews it. The entry's pid (as
    /// `inspect` shows it) is this process's parent's: the shell that keeps the descriptor.
    ///
    /// # Errors
    /// [`Error::WouldDeadlock`] if `fd`'s description already holds a grant of the file;
    /// [`Error::InvalidOption`] for a descriptor open read-only or a name; as
    /// [`OpenOptions::open`] and [`FairLock::lock`] otherwise.
    pub fn lock_for_fd(
        &self,
        fd: BorrowedFd<'_>,
        mode: FdMode,
        deadline: Option<Instant>,
        stop: impl FnMut() -> bool,
    ) -> Result<FdGrant> {
        let (proc, shown) = paths(fd);
        // SAFETY: F_GETFL on a descriptor valid for the borrow.
        let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
        if flags >= 0 && flags & libc::O_ACCMODE == libc::O_RDONLY {
            return Err(Error::InvalidOption {
                what: format!(
                    "descriptor {} is open read-only on {}; a lock held for a descriptor needs one open for writing (exec 9>>FILE)",
                    fd.as_raw_fd(),
                    shown.display()
                ),
            });
        }
        if self.name_key().is_some() {
            return Err(Error::InvalidOption {
                what: "a lock held for a descriptor is the lock of a file of one lock, not a named one".into(),
            });
        }
        let mut create = self.create_options();
        create.kind = kind_of(mode);
        if let RecordKind {
            kind: Kind::Semaphore,
            permits,
        } = create.kind
        {
            create.slots = create.slots.max(RecordKind::semaphore(permits).min_slots());
        }
        let opened = open_lock_file(&proc, &create).map_err(|e| e.with_path(&shown))?;
        if entry_of(fd, &opened, &shown)?.is_some() {
            return Err(Error::WouldDeadlock { path: shown });
        }
        let beacon = Arc::new(dup_beacon(fd, &shown)?);
        let i = register(beacon.file(), &opened.mapping, &shown)?;
        if let Some(p) = opened.mapping.state().participant(i) {
            // Relaxed: read by `entry_of`, which checks the beacons too.
            p.marker.store(FD_FORM, Relaxed);
            // Informational (status): the process that asked — the shell holding `fd` — rather
            // than this one, which may exit at once.
            // SAFETY: getppid has no preconditions.
            p.pid.store(unsafe { libc::getppid() } as u32, Relaxed);
        }
        let shared = Shared::new(&shown, beacon, opened.mapping, i, None);
        core::clean_up_participant(&shared.state(), &shared.platform(), i);
        let view = shared.clone();
        let lock = FairLock::with_view(shared, self, create, None);
        let grant = |g: crate::LockGuard<'_>| {
            let r = FdGrant {
                token: g.token(),
                owner_died: g.owner_died(),
            };
            g.stamp_time(); // so that `fairlock status` can show "held for"
            // Held on: for the description, not for this handle.
            std::mem::forget(g);
            r
        };
        let r = match mode {
            FdMode::Exclusive => lock.lock_interruptible(deadline, stop).map(grant),
            FdMode::Read | FdMode::Write => {
                let rw = FairRwLock::from_lock(lock);
                let r = if mode == FdMode::Read {
                    rw.read_interruptible(deadline, stop)
                        .map(|g| g.into_inner())
                } else {
                    rw.write_interruptible(deadline, stop)
                        .map(|g| g.into_inner())
                };
                r.map(grant)
            }
            FdMode::Permit(n) => FairSemaphore::from_lock(lock, n)
                .acquire_interruptible(deadline, stop)
                .map(|g| g.into_inner())
                .map(grant),
        };
        if r.is_err() {
            give_back(fd, view.state().participant(i), i);
        }
        r
    }
}

/// Releases the grant `fd`'s open file description holds (taken with
/// [`OpenOptions::lock_for_fd`]): `fairlock unlock FD`. `Ok(None)` if it holds none (never
/// took one, or its taker was killed while still waiting: its place in line is given up).
///
/// # Errors
/// [`Error::LockLost`] if its lease ran out and the lock was taken over; as
/// [`crate::inspect`] for the file.
pub fn unlock_fd(fd: BorrowedFd<'_>) -> Result<Option<FdGrant>> {
    let (proc, shown) = paths(fd);
    let kind = open_read_only(&proc)
        .map_err(|e| e.with_path(&shown))?
        .geometry()
        .kind;
    let mut create = OpenOptions::default().create_options();
    create.create = false;
    create.kind = kind;
    let opened = open_lock_file(&proc, &create).map_err(|e| e.with_path(&shown))?;
    let Some(i) = entry_of(fd, &opened, &shown)? else {
        return Ok(None);
    };
    let st = opened.mapping.state();
    let held = (0..st.slot_count()).find_map(|s| {
        // Acquire: the holder's claim of its grant.
        let w = Word(st.slot(s).word.load(Acquire));
        let ticket = core::weighted::ticket_of(w.lap(), s, st.slot_shift(), {
            // Relaxed: a ticket number only, bounded below by the word's lap.
            st.header().next_ticket.load(Relaxed)
        });
        (w.state() == Some(State::Held) && w.participant() == i).then_some((ticket, w))
    });
    let result = match held {
        None => Ok(None),
        Some((ticket, w)) => {
            let lease_lock = Mutex::new(());
            let platform = SysPlatform {
                file: &opened.file,
                me: i,
                participants: st.participant_count(),
                owners: None,
                lease_lock: &lease_lock,
            };
            let g = Grant {
                ticket,
                died: w.died(),
                leased: w.leased(),
            };
            core::release(&st, &platform, &g, i)
                .map(|()| {
                    Some(FdGrant {
                        token: ticket.wrapping_add(1),
                        owner_died: w.died(),
                    })
                })
                .map_err(|_| Error::LockLost { path: shown })
        }
    };
    give_back(fd, st.participant(i), i);
    result
}
