//! Locks held on behalf of an open file description: what `fairlock lock FD` / `fairlock unlock
//! FD` do for shell scripts (`exec 9>>jobs.lock; fairlock lock 9; …; fairlock unlock 9`).
//!
//! The grant's participant entry is claimed with a beacon taken through the caller's
//! descriptor, so the beacon belongs to *that* open file description: it outlives the process
//! that took the lock, and the kernel drops it when the last descriptor of the description is
//! closed (the shell exits, or closes fd 9). Until then the grant is alive; after, the next
//! waiter takes over and is told `owner_died`, as for any dead holder.
//!
//! **Which entry is the descriptor's.** No system call says "this description holds that
//! lock": `F_OFD_GETLK` reports only *other* descriptions' locks. So each grant picks a random
//! nonce `n`, takes a second OFD lock through the descriptor on byte `2^41 + n`, and writes `n`
//! in the entry's `marker`. The entry is the descriptor's when `F_OFD_GETLK` through the
//! descriptor says no other description holds byte `2^41 + n` and, *after* that, one through a
//! description of our own says someone does: a holder that closes between the two makes the
//! second say "free" (probing the beacon byte instead, which the next process may claim at
//! once, would let `unlock` release another description's grant). Claiming an
//! entry: the nonce byte first, then a beacon no description holds (probed first: an OFD lock
//! never conflicts with its own description, so two lockers of one description — or this
//! process's own beacon descriptor — would otherwise share an entry), then the marker by
//! compare-and-swap from a value whose nonce byte nobody holds.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64 as StdAtomicU64;
use std::time::Instant;

use crate::core::state::slot_word::{State, Word};
use crate::core::state::{LockState, MAX_PERMITS, RecordKind};
use crate::core::{self, Grant};
use crate::error::{Error, Result};
use crate::file::{Opened, open_lock_file, open_read_only};
use crate::primitive::Ordering::{Acquire, Relaxed, SeqCst};
use crate::process::view::{Shared, note_claim, open_beacon};
use crate::raw::handle::RawLock;
use crate::sys::ofd;
use crate::sys::platform::SysPlatform;
use crate::{FairLock, FairRwLock, FairSemaphore, OpenOptions};

/// Beacon index (from `BEACON_BASE`) of nonce 0's byte: nonce `n` is byte `2^41 + n`.
const NONCE_BASE: u64 = 1 << 40;

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

/// `/proc/thread-self/fd/N` (what the file is opened through: this thread's descriptor table,
/// also after an `unshare(CLONE_FILES)`) and, for messages, the file's path.
fn paths(fd: BorrowedFd<'_>) -> (PathBuf, PathBuf) {
    let proc = PathBuf::from(format!("/proc/thread-self/fd/{}", fd.as_raw_fd()));
    let shown = std::fs::read_link(&proc).unwrap_or_else(|_| proc.clone());
    (proc, shown)
}

/// Opens the file `fd` is open on (through `proc`), checking that it is the very file.
fn open_for(
    fd: BorrowedFd<'_>,
    proc: &Path,
    shown: &Path,
    create: &crate::file::CreateOptions,
) -> Result<Opened> {
    let opened = open_lock_file(proc, create).map_err(|e| e.with_path(shown))?;
    let theirs = std::fs::File::from(
        fd.try_clone_to_owned()
            .map_err(|e| Error::io(shown, "duplicate the descriptor", e))?,
    )
    .metadata()
    .map_err(|e| Error::io(shown, "stat", e))?;
    if opened.id != (theirs.dev(), theirs.ino()) {
        return Err(Error::io(
            shown,
            "open the descriptor's file",
            std::io::Error::other("reopened a different file"),
        ));
    }
    Ok(opened)
}

/// The lock file's kind as [`FdMode`] asks for it.
fn kind_of(mode: FdMode) -> RecordKind {
    match mode {
        FdMode::Exclusive => RecordKind::EXCLUSIVE,
        FdMode::Read | FdMode::Write => RecordKind::RWLOCK,
        FdMode::Permit(n) => RecordKind::semaphore(n),
    }
}

/// A random non-zero nonce (no dependency for randomness: the time, the thread, a counter,
/// mixed; nonces only need to differ between the grants of one file).
fn nonce() -> u32 {
    static COUNTER: StdAtomicU64 = StdAtomicU64::new(0);
    let mut x = crate::sys::clock::monotonic_ns()
        ^ (u64::from(std::process::id()) << 32)
        ^ (u64::from(crate::sys::thread::current_tid()) << 16)
        ^ COUNTER.fetch_add(0x9E37_79B9_7F4A_7C15, Relaxed);
    // splitmix64's finaliser.
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    (x as u32).max(1)
}

/// Whether `fd`'s description holds nonce byte `n`: no other description does (asked through
/// `fd`), and then somebody does (asked through `probe`, a description of our own).
fn holds_nonce(fd: BorrowedFd<'_>, probe: &std::fs::File, n: u32) -> std::io::Result<bool> {
    let byte = NONCE_BASE + u64::from(n);
    Ok(!ofd::is_held(fd, byte)? && ofd::is_held(probe.as_fd(), byte)?)
}

/// The participant entry `fd`'s description holds, with its nonce, if any.
fn entry_of(fd: BorrowedFd<'_>, opened: &Opened, shown: &Path) -> Result<Option<(u32, u32)>> {
    let st = opened.mapping.state();
    for i in 0..st.participant_count() {
        // Relaxed: the beacons decide; this only says which nonce byte to ask about.
        let n = st.participant(i).map_or(0, |p| p.marker.load(Relaxed));
        if n != 0
            && holds_nonce(fd, &opened.file, n).map_err(|e| Error::io(shown, "probe beacons", e))?
        {
            return Ok(Some((i, n)));
        }
    }
    Ok(None)
}

/// The unfinished ticket of participant `i` (a waiter's, a grantee's or a holder's), if any.
fn ticket_of(st: &LockState<'_>, i: u32) -> Option<(u64, Word)> {
    // A ticket number only (`ticket_of` places the word's lap below it).
    let next = st.next_ticket();
    (0..st.slot_count()).find_map(|s| {
        // Acquire: the word's writer's (a claim's, a grant's) stores before it.
        let w = Word(st.slot(s).word.load(Acquire));
        let live = matches!(
            w.state(),
            Some(State::Waiting | State::Sleeping | State::Granted | State::Held)
        );
        (live && w.participant() == i).then(|| {
            let t = core::state::slot_word::ticket_of(w.lap(), s, st.slot_shift(), next);
            (t, w)
        })
    })
}

/// Claims a participant entry for `fd`'s description (see the module notes): returns it, its
/// beacon and nonce bytes held through `fd`.
fn claim(fd: BorrowedFd<'_>, opened: &Opened, shown: &Path) -> Result<(u32, u32)> {
    let io = |e| Error::io(shown, "claim beacon", e);
    let st = opened.mapping.state();
    let probe = &opened.file;
    let mut n = nonce();
    while !ofd::try_claim(fd, NONCE_BASE + u64::from(n)).map_err(io)? {
        n = nonce(); // another grant's: draw again
    }
    let count = st.participant_count();
    let start = std::process::id() % count;
    for k in 0..count {
        let i = (start + k) % count;
        let Some(entry) = st.participant(i) else {
            break;
        };
        if ofd::is_held(probe.as_fd(), u64::from(i)).map_err(io)?
            || !ofd::try_claim(fd, u64::from(i)).map_err(io)?
        {
            continue;
        }
        // Relaxed: the nonce bytes decide whose it is.
        let old = entry.marker.load(Relaxed);
        if old != 0 && ofd::is_held(probe.as_fd(), NONCE_BASE + u64::from(old)).map_err(io)? {
            continue; // another locker of this description took it a moment ago: its own
        }
        // SeqCst: one of two lockers of one description wins the entry.
        if entry
            .marker
            .compare_exchange(old, n, SeqCst, Relaxed)
            .is_ok()
        {
            let _ = note_claim(entry, std::process::id());
            // Informational (status): the process that asked — the shell holding `fd` —
            // rather than this one, which may exit at once.
            // SAFETY: getppid has no preconditions.
            entry.pid.store(unsafe { libc::getppid() } as u32, Relaxed);
            return Ok((i, n));
        }
    }
    let _ = ofd::unlock_beacon(fd, NONCE_BASE + u64::from(n));
    Err(Error::TooManyParticipants {
        path: shown.to_path_buf(),
        capacity: count,
    })
}

/// Gives entry `i` (nonce `n`), held through `fd`, back.
fn give_back(fd: BorrowedFd<'_>, st: &LockState<'_>, i: u32, n: u32) {
    if let Some(p) = st.participant(i) {
        // Relaxed: as in `claim`.
        let _ = p.marker.compare_exchange(n, 0, Relaxed, Relaxed);
    }
    let _ = ofd::unlock_beacon(fd, u64::from(i));
    let _ = ofd::unlock_beacon(fd, NONCE_BASE + u64::from(n));
}

/// Gives the entry back when dropped, unless disarmed: on every early return and while
/// unwinding (a caller's `stop` hook that panics).
struct Claimed<'a> {
    fd: BorrowedFd<'a>,
    view: Arc<Shared>,
    entry: Option<(u32, u32)>,
}

impl Drop for Claimed<'_> {
    fn drop(&mut self) {
        if let Some((i, n)) = self.entry {
            give_back(self.fd, &self.view.state(), i, n);
        }
    }
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
    /// [`Error::WouldDeadlock`] if `fd`'s description already holds (or waits for) a grant of
    /// the file, or held one that was taken over and has not been given up with [`unlock_fd`]
    /// (which reports the loss); [`Error::InvalidOption`] for a descriptor open read-only, a name, or a permit
    /// count out of range; as [`OpenOptions::open`] and [`FairLock::lock`] otherwise.
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
        if let FdMode::Permit(n) = mode
            && !(1..=MAX_PERMITS).contains(&n)
        {
            return Err(Error::InvalidOption {
                what: format!("a semaphore of {n} permits: must be 1..={MAX_PERMITS}"),
            });
        }
        let mut create = self.create_options();
        create.kind = kind_of(mode);
        create.slots = create.slots.max(create.kind.min_slots());
        let opened = open_for(fd, &proc, &shown, &create)?;
        // Held, waited for, or lost to a takeover and not unlocked yet (`unlock_fd` reports the
        // loss and frees it). Never freed here: it may be another locker's of this
        // description, between its claim and its ticket.
        if entry_of(fd, &opened, &shown)?.is_some() {
            return Err(Error::WouldDeadlock { path: shown });
        }
        let (i, n) = claim(fd, &opened, &shown)?;
        // The view's "beacon" descriptor is a description of its own, holding nothing: the
        // entry's beacon is `fd`'s. Liveness is probed through it, so that entries `fd`'s
        // description holds besides ours (another locker of it, this process's own beacon if
        // `fd` is one) read as alive: probed through `fd` they would read as dead, and a
        // waiter would revoke them.
        let beacon = match open_beacon(&opened.file, opened.id, &shown) {
            Ok(b) => Arc::new(b),
            Err(e) => {
                give_back(fd, &opened.mapping.state(), i, n);
                return Err(e);
            }
        };
        // Not in the table of open files: the generation of its claim is never compared.
        let shared = Shared::new(&shown, beacon, opened.mapping, i, 0, None);
        core::clean_up_participant(&shared.state(), &shared.platform(), i);
        let mut claimed = Claimed {
            fd,
            view: shared.clone(),
            entry: Some((i, n)),
        };
        let mut raw = RawLock::with_view(shared, self.asks(), create, None);
        // Held for the descriptor, not for this process's thread: no thread beacon, no record
        // of a leased grant for the thread.
        raw.beacon_hints = false;
        raw.per_thread = false;
        let grant = |g: crate::LockGuard<'_>| {
            g.stamp_time(); // so that `fairlock status` can show "held for"
            let r = FdGrant {
                token: g.token(),
                owner_died: g.owner_died(),
            };
            // Held on: for the description, not for this handle.
            std::mem::forget(g);
            r
        };
        let r = match mode {
            FdMode::Exclusive => FairLock { raw }
                .lock_interruptible(deadline, stop)
                .map(grant),
            FdMode::Read | FdMode::Write => {
                let rw = FairRwLock { raw };
                let r = if mode == FdMode::Read {
                    rw.read_interruptible(deadline, stop)
                        .map(|g| g.into_inner())
                } else {
                    rw.write_interruptible(deadline, stop)
                        .map(|g| g.into_inner())
                };
                r.map(grant)
            }
            FdMode::Permit(n) => FairSemaphore::from_raw(raw, n)
                .acquire_interruptible(deadline, stop)
                .map(|g| g.into_inner())
                .map(grant),
        };
        if r.is_ok() {
            claimed.entry = None; // the description keeps it
        }
        r
    }
}

/// Releases the grant `fd`'s open file description holds (taken with
/// [`OpenOptions::lock_for_fd`]): `fairlock unlock FD`. `Ok(None)` if it holds none (never
/// took one, the file was never initialised, or its taker was killed while still waiting: its
/// place in line is given up).
///
/// # Errors
/// [`Error::LockLost`] if its grant is gone (its lease ran out and the lock was taken over);
/// as [`crate::inspect`] for the file.
pub fn unlock_fd(fd: BorrowedFd<'_>) -> Result<Option<FdGrant>> {
    let (proc, shown) = paths(fd);
    let empty = std::fs::metadata(&proc).is_ok_and(|m| m.len() == 0);
    if empty {
        return Ok(None); // never initialised: nobody ever locked it (as `flock -u`)
    }
    let kind = open_read_only(&proc)
        .map_err(|e| e.with_path(&shown))?
        .geometry()
        .kind;
    let mut create = OpenOptions::default().create_options();
    create.create = false;
    create.kind = kind;
    let opened = open_for(fd, &proc, &shown, &create)?;
    let Some((i, n)) = entry_of(fd, &opened, &shown)? else {
        return Ok(None);
    };
    let st = opened.mapping.state();
    let platform = SysPlatform {
        file: &opened.file,
        me: i,
        participants: st.participant_count(),
        entries: st.participants(),
        owners: None,
        bell: None,
    };
    let lost = || Error::LockLost {
        path: shown.clone(),
    };
    let fast = core::exclusive::fast::fast_holder(&st).filter(|&(_, holder)| holder == i);
    let result = match (fast, ticket_of(&st, i)) {
        // Granted by the lock word (nobody was queued when it was taken).
        (Some((ticket, _)), _) => {
            if core::end_fast(&st, &platform, i, ticket, false) {
                Ok(Some(FdGrant {
                    token: st.token(&Grant::of(ticket, false, false, true)),
                    owner_died: false,
                }))
            } else {
                Err(lost())
            }
        }
        (None, Some((ticket, w))) if w.state() == Some(State::Held) => {
            let g = Grant::of(ticket, w.died(), w.leased(), false);
            core::release(&st, &platform, &g, i)
                .map(|()| {
                    Some(FdGrant {
                        token: st.token(&g),
                        owner_died: w.died(),
                    })
                })
                .map_err(|_| lost())
        }
        // A place in line whose taker was killed while waiting: given up below.
        (None, Some(_)) => Ok(None),
        // The grant `lock_for_fd` returned is gone: taken over.
        (None, None) => Err(lost()),
    };
    give_back(fd, &st, i, n);
    result
}
