//! A thread's leased grants of the exclusive kinds (`FairLock`, `FairRLock`, their named
//! locks): which grant of which open file the calling thread holds, how deeply nested, kept in
//! a thread-local rather than in the file's per-process `Hold`.
//!
//! Why apart: a leased grant may be taken over while its holder lives (its lease ran out), and
//! another of our threads may then be granted the lock while the first thread's guard still
//! exists. The per-process `Hold` has room for one holder, read and written without
//! synchronisation by the thread it names: the second grant would overwrite it under the
//! first thread's feet, and the first thread's next `lock` — not finding itself there — would
//! take a *new* grant and go on believing it had held the lock all along. Here each thread sees only its own grants: a thread that
//! locks again while it holds a leased grant of that file nests on it if the grant is still
//! its own, and is told `LockLost` if it was taken over, until it drops that guard.
//!
//! Unleased grants stay in `Hold`: nothing but their own thread (or their process's death) can
//! end them while the guard lives.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use crate::core;
use crate::process::view::{POISONED, Shared, with_open_files};

/// One leased grant the calling thread holds.
#[derive(Clone, Copy)]
struct Entry {
    /// The view it was granted through, by its serial number: never a later view's, even if
    /// this one is freed while the entry stays (a guard forgotten with `mem::forget`; an
    /// address was reused by a later view, whose first lock then nested on — or whose thread's
    /// exit revoked — a grant that was not its).
    shared: u64,
    ticket: u64,
    /// The grant's `Hold::meta` word (lease, died, fast bits).
    meta: u64,
    /// Nesting depth; [`POISONED`] as in `Hold::depth`.
    depth: u32,
}

/// The calling thread's leased grants; what is left when the thread exits is given up as
/// dead (as `ExitWatch` does for unleased grants).
struct Entries(RefCell<Vec<Entry>>);

impl Drop for Entries {
    fn drop(&mut self) {
        let left = std::mem::take(&mut *self.0.borrow_mut());
        if left.is_empty() {
            return;
        }
        // Collected under the table's lock, used after it (as `ExitWatch` does).
        let views: Vec<Arc<Shared>> = with_open_files(|open_files| {
            open_files
                .iter()
                .filter_map(|(_, _, w)| w.upgrade())
                .collect()
        });
        for e in left {
            let Some(sh) = views.iter().find(|v| v.serial == e.shared) else {
                continue;
            };
            // Relaxed: see `held`.
            sh.hold.thread_leases.fetch_sub(1, Relaxed);
            if sh.is_current() {
                let (grant, _) = crate::process::view::Hold::grant_of(e.meta, e.ticket);
                let _ = core::revoke_own(&sh.state(), &sh.platform(), &grant, sh.participant);
            }
        }
    }
}

thread_local! {
    static ENTRIES: Entries = const { Entries(RefCell::new(Vec::new())) };
}

/// Runs `f` on the calling thread's entries; `None` in a thread-local destructor that runs
/// after ours (the thread is ending).
fn with<R>(f: impl FnOnce(&mut Vec<Entry>) -> R) -> Option<R> {
    ENTRIES
        .try_with(|e| e.0.try_borrow_mut().ok().map(|mut v| f(&mut v)))
        .ok()
        .flatten()
}

/// The calling thread's leased grant through `sh`, if any: (ticket, meta, depth).
#[inline]
pub(crate) fn held(sh: &Shared) -> Option<(u64, u64, u32)> {
    // Relaxed: a thread with a record through `sh` counted it itself, before (program
    // order), and only the removal of that record takes it back: while it lasts, this thread
    // reads at least 1. Other threads' records only make it look.
    if sh.hold.thread_leases.load(Relaxed) == 0 {
        return None;
    }
    held_in(sh)
}

#[cold]
#[inline(never)]
fn held_in(sh: &Shared) -> Option<(u64, u64, u32)> {
    let p = sh.serial;
    with(|v| {
        v.iter()
            .find(|e| e.shared == p)
            .map(|e| (e.ticket, e.meta, e.depth))
    })
    .flatten()
}

/// Records a leased grant the calling thread just took through `sh` (depth 1).
pub(crate) fn record(sh: &Shared, ticket: u64, meta: u64) {
    let p = sh.serial;
    with(|v| {
        let had = v.len();
        v.retain(|e| e.shared != p);
        if v.len() == had {
            // Relaxed: see `held`.
            sh.hold.thread_leases.fetch_add(1, Relaxed);
        }
        v.push(Entry {
            shared: p,
            ticket,
            meta,
            depth: 1,
        });
    });
}

/// Sets the depth of the calling thread's grant `ticket` through `sh` (0: forgets it). The
/// previous depth, `None` if the thread has no such grant (a share, which is never recorded).
pub(crate) fn set_depth(sh: &Shared, ticket: u64, depth: impl FnOnce(u32) -> u32) -> Option<u32> {
    let p = sh.serial;
    with(|v| {
        let i = v.iter().position(|e| e.shared == p && e.ticket == ticket)?;
        let before = v[i].depth;
        let after = depth(before);
        if after & !POISONED == 0 {
            v.swap_remove(i);
            // Relaxed: see `held`.
            sh.hold.thread_leases.fetch_sub(1, Relaxed);
        } else {
            v[i].depth = after;
        }
        Some(before)
    })
    .flatten()
}
