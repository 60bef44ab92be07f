//! Thread beacons: death notices from the kernel (docs/DESIGN.md, "Waiting without timers").
//!
//! Each process keeps its threads' beacons in one SysV shared memory segment of its own
//! (`shmget(IPC_PRIVATE)`, marked `IPC_RMID` at once, so it vanishes with its last attachment
//! and never leaks, SIGKILL included). A beacon is a robust, process-shared pthread mutex that
//! a thread locks the first time it needs one and keeps locked for the rest of its life: glibc
//! links it into the thread's robust list, and when the thread ends — killed with its process,
//! crashed, or exited — the kernel sets `FUTEX_OWNER_DIED` in the mutex word and wakes a waiter
//! (the owner sets `FUTEX_WAITERS` itself when it locks, so that the kernel always wakes). A
//! waiter sleeps in `futex_waitv` on its own slot word *and* the holder's beacon word: no
//! timer, woken by the grant or by the holder thread's death.
//!
//! Only the owner process writes its segment (waiters attach it read-only, `SHM_RDONLY`), so no
//! other process can reach the pointers glibc's robust list runs through — the reason the
//! beacons are not in the lock file (docs/FORMAT-2.md, "What the first implementation showed").
//! A segment is identified by its id and a random 32-bit nonce written at its start; a waiter
//! checks the nonce after attaching, so a reused id never passes for the old segment.
//!
//! A process that cannot create or attach a segment (limits, another IPC namespace, seccomp)
//! simply has no beacons: its waiters fall back to the timed liveness polls.

use std::sync::atomic::{
    AtomicPtr, AtomicU32, AtomicU64, AtomicUsize,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
};

use super::thread::fork_generation;

/// Beacons per segment: threads beyond this many have none (their waiters poll).
pub const BEACONS: u32 = 1024;
/// Bytes per beacon: one `pthread_mutex_t` (40 bytes) on a cache line of its own.
const ENTRY: usize = 64;
/// The segment's header: magic, nonce.
const HEADER: usize = 64;
const SIZE: usize = HEADER + BEACONS as usize * ENTRY;
/// `b"FLBEACON"`.
const MAGIC: u64 = u64::from_le_bytes(*b"FLBEACON");
const FUTEX_WAITERS: u32 = 0x8000_0000;
/// The bit the kernel sets in a robust futex word when its owner thread dies.
pub const OWNER_DIED: u32 = 0x4000_0000;

/// A segment of this process: its id, nonce and base address.
#[derive(Clone, Copy)]
struct Segment {
    id: i32,
    nonce: u32,
    base: usize,
}

/// This process's segment and the fork generation it was made in (a forked child makes its
/// own: its threads own no beacon of its parent's). A leaked box, replaced by compare-and-swap:
/// no lock, so that a `fork` while another thread makes the segment leaves the child nothing
/// held (a mutex held across the creation would deadlock a forked child).
static MINE: AtomicPtr<(u64, Segment)> = AtomicPtr::new(core::ptr::null_mut());

/// Segments attached for watching, lock-free for the same reason. Entry `i` is free (key 0),
/// being filled or emptied (key `BUSY`), or holds the segment `key` (`id << 32 | nonce`) at
/// `base`, with `users` waits on it under way. Never more than `TABLE` at once: a waiter
/// finding no room polls instead.
const TABLE: usize = 64;
const BUSY: u64 = u64::MAX;
static KEYS: [AtomicU64; TABLE] = [const { AtomicU64::new(0) }; TABLE];
static BASES: [AtomicUsize; TABLE] = [const { AtomicUsize::new(0) }; TABLE];
static USERS: [AtomicU32; TABLE] = [const { AtomicU32::new(0) }; TABLE];

thread_local! {
    /// This thread's beacon: (fork generation, 1 + index), 0 for none yet; `u32::MAX` once
    /// claiming failed (no segment, or all beacons taken).
    static THREAD_BEACON: core::cell::Cell<(u64, u32)> = const { core::cell::Cell::new((u64::MAX, 0)) };
}

/// What a participant entry records of its process's segment: `id << 32 | nonce`, 0 if none.
pub fn identity() -> u64 {
    segment().map_or(0, |s| key_of(s.id, s.nonce))
}

fn key_of(id: i32, nonce: u32) -> u64 {
    (u64::from(id as u32) << 32) | u64::from(nonce)
}

/// The calling thread's beacon index (claimed the first time), if it has one.
#[inline]
pub fn thread_beacon() -> Option<u32> {
    let generation = fork_generation();
    let (g, b) = THREAD_BEACON.with(|c| c.get());
    if g == generation {
        return (b != 0 && b != u32::MAX).then(|| b - 1);
    }
    claim_thread_beacon(generation)
}

#[cold]
fn claim_thread_beacon(generation: u64) -> Option<u32> {
    let found = segment().and_then(|s| {
        let start = super::thread::current_tid() % BEACONS;
        (0..BEACONS)
            .map(|k| (start + k) % BEACONS)
            .find(|&i| try_own(s, i))
    });
    let b = found.map_or(u32::MAX, |i| i + 1);
    THREAD_BEACON.with(|c| c.set((generation, b)));
    found
}

/// Locks beacon `i` of our segment for the calling thread, for good: true if it is ours now.
fn try_own(s: Segment, i: u32) -> bool {
    let m = mutex_at(s.base, i);
    // SAFETY: `m` points to an initialised process-shared robust mutex in our own segment,
    // which stays attached for the life of the process (never detached).
    let r = unsafe { libc::pthread_mutex_trylock(m) };
    let ours = match r {
        0 => true,
        libc::EOWNERDEAD => {
            // A thread of ours that owned it ended: repair and keep it.
            // SAFETY: as above; we own the mutex after EOWNERDEAD.
            unsafe { libc::pthread_mutex_consistent(m) == 0 }
        }
        _ => false,
    };
    if ours {
        // The kernel wakes a waiter at our death only if FUTEX_WAITERS is set; waiters cannot
        // set it (read-only), so we do. Only the owner (we) and the kernel write the word now.
        word_at(s.base, i).fetch_or(FUTEX_WAITERS, Relaxed);
    }
    ours
}

/// This process's segment, made the first time (and again in a forked child).
fn segment() -> Option<Segment> {
    let generation = fork_generation();
    // Acquire: pairs with the Release CAS that installed it (the segment initialised).
    let cur = MINE.load(Acquire);
    // SAFETY: a non-null MINE points to a leaked, never freed box.
    if let Some(&(g, s)) = unsafe { cur.as_ref() }
        && g == generation
    {
        return Some(s);
    }
    let s = create()?;
    let new = Box::into_raw(Box::new((generation, s)));
    // Release: publishes the initialised segment; Acquire on failure: as the load above.
    match MINE.compare_exchange(cur, new, Release, Acquire) {
        Ok(_) => Some(s),
        Err(other) => {
            // Another thread of ours made one first: use it, give ours back.
            // SAFETY: `new` came from Box::into_raw above and was never shared; our segment
            // was never published, so detaching it harms nobody (it is already IPC_RMID).
            unsafe {
                drop(Box::from_raw(new));
                libc::shmdt(s.base as *const libc::c_void);
            }
            // SAFETY: as above.
            match unsafe { other.as_ref() } {
                Some(&(g, theirs)) if g == generation => Some(theirs),
                _ => None, // a fork in between: the next call makes the child's own
            }
        }
    }
}

fn create() -> Option<Segment> {
    // SAFETY: plain system calls on arguments we own; results checked.
    let id = unsafe { libc::shmget(libc::IPC_PRIVATE, SIZE, libc::IPC_CREAT | 0o644) };
    if id < 0 {
        return None;
    }
    // SAFETY: attaching a segment we just created, at an address the kernel chooses.
    let base = unsafe { libc::shmat(id, core::ptr::null(), 0) };
    // SAFETY: marks the segment for removal once its last attachment goes (Linux still lets
    // others attach it by id meanwhile); so it never outlives us and our watchers.
    unsafe { libc::shmctl(id, libc::IPC_RMID, core::ptr::null_mut()) };
    if base as isize == -1 {
        return None;
    }
    let base = base as usize;
    let nonce = random_nonce();
    // SAFETY: the segment is SIZE bytes, zero-filled by the kernel, page-aligned, ours; the
    // mutexes are initialised before anyone can learn the segment's id.
    unsafe {
        let mut attr: libc::pthread_mutexattr_t = core::mem::zeroed();
        libc::pthread_mutexattr_init(&mut attr);
        libc::pthread_mutexattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED);
        libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST);
        for i in 0..BEACONS {
            libc::pthread_mutex_init(mutex_at(base, i), &attr);
        }
        libc::pthread_mutexattr_destroy(&mut attr);
        let head = &*(base as *const AtomicU64);
        let n = &*((base + 8) as *const AtomicU32);
        n.store(nonce, Relaxed);
        head.store(MAGIC, Relaxed);
    }
    Some(Segment { id, nonce, base })
}

fn random_nonce() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: getrandom writes at most 4 bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 4, 0) };
    let v = u32::from_le_bytes(b);
    if n == 4 && v != 0 {
        return v;
    }
    // No getrandom: the time and our pid are unique enough for telling segments apart.
    let t = super::clock::monotonic_ns();
    ((t ^ (t >> 32) ^ u64::from(std::process::id()).rotate_left(17)) as u32).max(1)
}

fn mutex_at(base: usize, i: u32) -> *mut libc::pthread_mutex_t {
    (base + HEADER + i as usize * ENTRY) as *mut libc::pthread_mutex_t
}

fn word_at(base: usize, i: u32) -> &'static AtomicU32 {
    // SAFETY: glibc's pthread_mutex_t begins with its 32-bit futex word (`__lock`); callers
    // keep the segment attached while they use the word (our own: for the life of the
    // process; a watched one: while their `Attachment` lives); any bits are a valid AtomicU32.
    unsafe { &*((base + HEADER + i as usize * ENTRY) as *const AtomicU32) }
}

/// A watched beacon: its segment stays attached while this lives.
pub struct Attachment {
    entry: Option<usize>,
    word: &'static AtomicU32,
}

impl Attachment {
    /// The beacon's futex word.
    pub fn word(&self) -> &AtomicU32 {
        self.word
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        let Some(i) = self.entry else { return };
        // Read while we still count as a user (the segment cannot go before our decrement).
        let died = self.word.load(Relaxed) & OWNER_DIED != 0;
        // SeqCst: one total order with the lookups' increments and the evictions' checks.
        if USERS[i].fetch_sub(1, SeqCst) == 1 && died {
            // The last wait on it saw a thread of its owner die (most often: the owner process
            // died): let the segment go, so that a dead process's segment does not live on in
            // its watchers (and with it the machine's shmmni). If the owner
            // lives, a later wait attaches it again. Not now: detaching unmaps (a TLB
            // shootdown), which would delay the takeover under way; at this thread's next
            // wait or its exit.
            // `try_with`: a wait in a thread-local destructor that runs after `DEFERRED`'s
            // must not panic (that aborts): detach at once there.
            if DEFERRED
                .try_with(|d| {
                    if let Some(older) = d.0.replace(Some(i)) {
                        evict(older);
                    }
                })
                .is_err()
            {
                evict(i);
            }
        }
    }
}

/// Empties entry `i` if nobody uses it (detaching its segment).
fn evict(i: usize) {
    if take_unused(i) {
        KEYS[i].store(0, SeqCst);
    }
}

/// An entry this thread is to detach (see `Attachment`'s `Drop`), at its next wait or exit.
struct Deferred(core::cell::Cell<Option<usize>>);

impl Drop for Deferred {
    fn drop(&mut self) {
        if let Some(i) = self.0.take() {
            evict(i);
        }
    }
}

thread_local! {
    static DEFERRED: Deferred = const { Deferred(core::cell::Cell::new(None)) };
}

/// Detaches what this thread deferred (called before a wait).
fn flush_deferred() {
    let _ = DEFERRED.try_with(|d| {
        if let Some(i) = d.0.take() {
            evict(i);
        }
    });
}

/// Beacon `index` of the segment `identity` names (see [`identity`]), attached (read-only,
/// unless it is ours) for as long as the returned value lives, if it can be: a wrong nonce, an
/// index out of range, a segment that is gone or no room left give `None` (then the caller
/// polls).
pub fn attach(identity: u64, index: u32) -> Option<Attachment> {
    flush_deferred();
    let (id, nonce) = ((identity >> 32) as i32, identity as u32);
    if identity == 0 || identity == BUSY || index >= BEACONS || id < 0 {
        return None;
    }
    if let Some(s) = segment()
        && key_of(s.id, s.nonce) == identity
    {
        return Some(Attachment {
            entry: None,
            word: word_at(s.base, index),
        });
    }
    if let Some(a) = lookup(identity, index) {
        return Some(a);
    }
    // SAFETY: attaching read-only; the result is checked below before anything is read
    // beyond the header.
    let base = unsafe { libc::shmat(id, core::ptr::null(), libc::SHM_RDONLY) };
    if base as isize == -1 {
        return None;
    }
    let base = base as usize;
    // SAFETY: every segment is at least a page; the header's first 12 bytes are readable.
    let (magic, found) = unsafe {
        (
            (*(base as *const AtomicU64)).load(Relaxed),
            (*((base + 8) as *const AtomicU32)).load(Relaxed),
        )
    };
    // SAFETY: the segment's size, checked before indexing into it.
    let size_ok = unsafe {
        let mut ds: libc::shmid_ds = core::mem::zeroed();
        libc::shmctl(id, libc::IPC_STAT, &mut ds) == 0 && ds.shm_segsz >= SIZE
    };
    let detach = || {
        // SAFETY: detaching what we attached above; nothing refers to it.
        unsafe { libc::shmdt(base as *const libc::c_void) };
    };
    if magic != MAGIC || found != nonce || !size_ok {
        detach();
        return None;
    }
    // Another thread may have attached it meanwhile: use theirs.
    if let Some(a) = lookup(identity, index) {
        detach();
        return Some(a);
    }
    let Some(i) = free_entry() else {
        detach();
        return None;
    };
    BASES[i].store(base, Relaxed);
    // Added, not stored: a lookup that read the entry's previous key before it was emptied may
    // have counted itself in and not yet taken itself back out (`lookup`).
    USERS[i].fetch_add(1, SeqCst);
    // SeqCst: publishes the base (Relaxed store before it) to lookups that see the key.
    KEYS[i].store(identity, SeqCst);
    Some(Attachment {
        entry: Some(i),
        word: word_at(base, index),
    })
}

/// An attached entry for `identity`, counted as one more user.
fn lookup(identity: u64, index: u32) -> Option<Attachment> {
    for i in 0..TABLE {
        if KEYS[i].load(SeqCst) != identity {
            continue;
        }
        USERS[i].fetch_add(1, SeqCst);
        // Still it (an eviction decides after making the key BUSY and then seeing no user).
        if KEYS[i].load(SeqCst) == identity {
            return Some(Attachment {
                entry: Some(i),
                word: word_at(BASES[i].load(Relaxed), index),
            });
        }
        USERS[i].fetch_sub(1, SeqCst);
    }
    None
}

/// A free entry, marked `BUSY` for the caller; when the table is full, an unused entry is
/// emptied for it (its segment detached: a later wait attaches it again).
fn free_entry() -> Option<usize> {
    KEYS.iter()
        .position(|k| k.compare_exchange(0, BUSY, SeqCst, SeqCst).is_ok())
        .or_else(|| (0..TABLE).find(|&i| take_unused(i)))
}

/// Empties entry `i` if nobody uses it (detaching its segment), leaving it `BUSY` for the
/// caller: true if done.
fn take_unused(i: usize) -> bool {
    let key = KEYS[i].load(SeqCst);
    if key == 0 || key == BUSY || USERS[i].load(SeqCst) != 0 {
        return false;
    }
    if KEYS[i].compare_exchange(key, BUSY, SeqCst, SeqCst).is_err() {
        return false;
    }
    if USERS[i].load(SeqCst) != 0 {
        KEYS[i].store(key, SeqCst); // a wait began meanwhile: keep it
        return false;
    }
    // SAFETY: nobody uses the entry (no user, and new lookups fail on the BUSY key), so no
    // reference into the segment is left.
    unsafe { libc::shmdt(BASES[i].load(Relaxed) as *const libc::c_void) };
    true
}

thread_local! {
    /// The calling thread's (fork generation, tid, beacon): the beacon as
    /// [`thread_beacon`] claims it, 1 + index, `u32::MAX` for none. One cell,
    /// so that the uncontended lock reads one thread-local for both.
    static TID_BEACON: core::cell::Cell<(u64, u32, u32)> = const { core::cell::Cell::new((u64::MAX, 0, 0)) };
}

/// The calling thread's kernel thread id and its beacon (1 + index, 0 for none), cached:
/// the uncontended lock's one thread-local read.
#[inline]
pub fn current_tid_and_beacon() -> (u32, u32) {
    let gen_now = fork_generation();
    let (g, tid, b) = TID_BEACON.with(|c| c.get());
    if g == gen_now {
        return (tid, if b == u32::MAX { 0 } else { b });
    }
    tid_and_beacon_slow(gen_now)
}

#[cold]
fn tid_and_beacon_slow(gen_now: u64) -> (u32, u32) {
    let tid = super::thread::current_tid();
    let b = thread_beacon().map_or(u32::MAX, |i| i + 1);
    TID_BEACON.with(|c| c.set((gen_now, tid, b)));
    (tid, if b == u32::MAX { 0 } else { b })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lookup that read an entry's key, then lost the entry to an eviction and a new
    /// attachment before it counted itself in, takes itself back out: the new attachment must
    /// still count as a user, or the table could detach its segment under its wait (and a
    /// later look at the beacon word would fault). The lookup's steps are made by hand, in an
    /// order the scheduler allows.
    #[test]
    #[cfg_attr(miri, ignore = "SysV shared memory")]
    fn a_lookup_that_lost_its_entry_does_not_uncount_a_new_attachment() {
        let (Some(sx), Some(sz)) = (create(), create()) else {
            return; // no SysV shared memory here: nothing to attach
        };
        let (x, z) = (key_of(sx.id, sx.nonce), key_of(sz.id, sz.nonce));
        let ax = attach(x, 0).expect("attach x");
        let i = ax.entry.expect("a table entry");
        drop(ax); // no user; the entry keeps x
        assert_eq!(KEYS[i].load(SeqCst), x); // the lookup for x reads x here
        evict(i); // the entry is emptied meanwhile
        USERS[i].fetch_add(1, SeqCst); // the lookup counts itself in
        let az = attach(z, 0).expect("attach z");
        let same_entry = az.entry == Some(i);
        if same_entry {
            assert_ne!(KEYS[i].load(SeqCst), x); // the lookup sees another key: out again
        }
        USERS[i].fetch_sub(1, SeqCst);
        let users = az.entry.map(|e| USERS[e].load(SeqCst));
        if users == Some(0) {
            // (Without the fix: keep the drop below from wrapping the count.)
            USERS[i].store(1, SeqCst);
        }
        drop(az);
        // SAFETY: our own segments, attached by `create`; nothing refers to them any more.
        unsafe {
            libc::shmdt(sx.base as *const libc::c_void);
            libc::shmdt(sz.base as *const libc::c_void);
        }
        // Another test's attachment took entry `i` first (tests run side by side in one
        // process under `cargo test`): the interleaving was not made. Under nextest each test
        // has the table to itself.
        if same_entry {
            assert_eq!(
                users,
                Some(1),
                "a live attachment counted {users:?} users: its segment could be detached under its wait"
            );
        }
    }
}
