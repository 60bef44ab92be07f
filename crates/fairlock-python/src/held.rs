//! The grants the calling thread holds, by Python lock object: an `RLock`'s, which are its
//! threads' (a `Lock`'s and an `RWLock` side's are the process's, kept in the object:
//! `grants.rs`).
//!
//! A re-entrant fairlock grant belongs to the (process, thread) that acquired it and its guard
//! is not `Send`, while a Python lock object is shared by every thread. So the object keeps no
//! guard: each thread keeps its own grants here, in a thread-local table keyed by the object's
//! [`Handle::key`]. Only the owning thread ever touches an entry, so `release()` from another
//! thread finds nothing (and raises `RuntimeError`), as with `threading.RLock`.
//!
//! * **Re-entrancy** through the same object is a count in its entry (`depth`): no call into
//!   the library, no ticket.
//! * **A thread that ends while holding**: the table's destructor drops the guards; the
//!   library's own exit watch, registered after the table (the table is touched before the
//!   first acquire), runs first and gives the grants up as if their owner died, so the next
//!   holder is told `owner_died`.
//! * **`fork`**: the child inherits the forking thread's table. An entry from before the fork
//!   ([`after_fork_in_child`] counts forks) is not a hold of the child: acquiring drops it and
//!   waits in line afresh, releasing it reports `LockLost` (the library refuses to release a
//!   parent's grant), so the parent's hold is never released by its child. The fork count is
//!   also what tells a `Lock`'s and a `Semaphore`'s inherited grants from their own.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::handle::{Handle, OwnedGuard};

/// One grant of the calling thread.
struct Entry {
    /// [`Handle::key`] of the lock object.
    key: usize,
    /// [`FORK_GENERATION`] when it was granted: an older one was inherited through `fork`.
    fork_generation: u64,
    /// Levels held (the `RLock` re-entered through the same object).
    depth: u32,
    guard: OwnedGuard,
}

thread_local! {
    static HELD: RefCell<Vec<Entry>> = const { RefCell::new(Vec::new()) };
}

/// Forks this process has gone through (as seen by the child: bumped in it by
/// [`after_fork_in_child`]). Relaxed: the child runs the hook on its only thread before it
/// runs anything else.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

/// Called in the child after `os.fork()` (registered with `os.register_at_fork`).
pub(crate) fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Relaxed);
}

/// How many forks this process descends through (see [`FORK_GENERATION`]).
pub(crate) fn fork_generation() -> u64 {
    FORK_GENERATION.load(Relaxed)
}

/// What the calling thread holds of one lock object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Holding {
    /// Nothing.
    No,
    /// A grant, `depth` levels deep.
    Yes { depth: u32 },
    /// A grant from before a `fork`: its parent's, not ours.
    Inherited,
}

fn find(table: &[Entry], key: usize) -> Option<usize> {
    table.iter().position(|e| e.key == key)
}

/// What the calling thread holds of `handle`.
pub(crate) fn holding(handle: &Arc<Handle>) -> Holding {
    let key = handle.key();
    HELD.with(|h| {
        let table = h.borrow();
        match find(&table, key).map(|i| &table[i]) {
            None => Holding::No,
            Some(e) if e.fork_generation != fork_generation() => Holding::Inherited,
            Some(e) => Holding::Yes { depth: e.depth },
        }
    })
}

/// Records a new grant of `handle` for the calling thread, `depth` levels deep.
pub(crate) fn insert(handle: &Arc<Handle>, guard: OwnedGuard, depth: u32) {
    let entry = Entry {
        key: handle.key(),
        fork_generation: fork_generation(),
        depth,
        guard,
    };
    HELD.with(|h| h.borrow_mut().push(entry));
}

/// One more level of a grant the calling thread holds (an `RLock` re-entered). False if it
/// holds none (or too many levels to count).
pub(crate) fn reenter(handle: &Arc<Handle>) -> bool {
    let key = handle.key();
    HELD.with(|h| {
        let mut table = h.borrow_mut();
        match find(&table, key) {
            Some(i) => match table[i].depth.checked_add(1) {
                Some(d) => {
                    table[i].depth = d;
                    true
                }
                None => false,
            },
            None => false,
        }
    })
}

/// Drops an entry inherited through `fork` (dropping its guard releases nothing: the library
/// leaves a parent's grant alone in the child).
pub(crate) fn forget_inherited(handle: &Arc<Handle>) {
    let key = handle.key();
    let entry = HELD.with(|h| {
        let mut table = h.borrow_mut();
        find(&table, key).map(|i| table.swap_remove(i))
    });
    drop(entry); // outside the borrow
}

/// The outcome of [`release`].
pub(crate) enum Released {
    /// The calling thread holds nothing of this lock object.
    NotHeld,
    /// One level given back; more are still held.
    Level,
    /// The grant ended: the library's verdict (`LockLost` if it was no longer ours).
    Grant(fairlock::Result<()>),
}

/// Gives back one level of the calling thread's grant of `handle` (`all`: every level), ending
/// the grant with its last level.
pub(crate) fn release(handle: &Arc<Handle>, all: bool) -> Released {
    let key = handle.key();
    let ended = HELD.with(|h| {
        let mut table = h.borrow_mut();
        let Some(i) = find(&table, key) else {
            return Err(Released::NotHeld);
        };
        let e = &mut table[i];
        let ours = e.fork_generation == fork_generation();
        if e.depth > 1 && !all && ours {
            e.depth -= 1;
            return Err(Released::Level);
        }
        Ok(table.swap_remove(i))
    });
    match ended {
        // The library is called outside the table's borrow.
        Ok(entry) => Released::Grant(entry.guard.unlock()),
        Err(r) => r,
    }
}

/// Calls `f` with the calling thread's grant of `handle` and its depth, if it holds one (and
/// did not inherit it).
pub(crate) fn with_grant<R>(
    handle: &Arc<Handle>,
    f: impl FnOnce(&OwnedGuard, u32) -> R,
) -> Option<R> {
    let key = handle.key();
    HELD.with(|h| {
        let table = h.borrow();
        let e = &table[find(&table, key)?];
        (e.fork_generation == fork_generation()).then(|| f(&e.guard, e.depth))
    })
}
