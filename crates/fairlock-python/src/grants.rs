//! The process grants a `fairlock.Lock` object (or a side of a `fairlock.RWLock`) holds: the
//! library's `ProcessGuard`s, kept in the object, as `threading.Lock`'s state is the lock's
//! and not a thread's. Any thread of the process releases them; a thread's exit leaves them
//! held; the process's death gives them up.
//!
//! * **Order.** `release()` ends the oldest grant, and `token`, `owner_died`, `check()` and
//!   `extend()` speak of that one (a `Lock` has at most one current grant; a read side may
//!   have several, one per `acquire`).
//! * **Fork.** A child inherits the object and its grants, which are its parent's: each entry
//!   carries the fork generation it was granted in (`held::fork_generation`), and entries of
//!   an older one are dropped (releasing nothing: the library leaves a parent's grant alone)
//!   before anything else is done with the list. A `release()` that finds only inherited
//!   grants raises `fairlock.LockLost`; the child's own grants are released as anyone's.
//! * **An object dropped while holding** keeps its grants until the process ends, as a
//!   `Semaphore`'s permits (and diskcache's key) stay taken: nothing else can release them,
//!   and another process waiting would rather see the holder die than a lock given away.

use std::sync::Mutex;

use fairlock::ProcessGuard;

use crate::held::fork_generation;

/// What `take_oldest` found.
pub(crate) enum Taken {
    /// The oldest current grant, out of the list.
    Grant(ProcessGuard),
    /// None: the object holds nothing.
    NotHeld,
    /// None of this process's, but grants inherited through `fork` were dropped: the caller
    /// released its parent's lock, which is not its own.
    Inherited,
}

/// The grants of one lock object, oldest first, each with its fork generation.
#[derive(Default)]
pub(crate) struct Grants {
    list: Mutex<Vec<(u64, ProcessGuard)>>,
}

impl Grants {
    /// `f` of the list with the inherited entries taken out; returns `f`'s result and the
    /// inherited entries, for the caller to drop outside the lock.
    fn with<R>(
        &self,
        f: impl FnOnce(&mut Vec<(u64, ProcessGuard)>) -> R,
    ) -> (R, Vec<ProcessGuard>) {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        let now = fork_generation();
        let mut inherited = Vec::new();
        if list.iter().any(|(g, _)| *g != now) {
            let (mine, theirs): (Vec<_>, Vec<_>) = list.drain(..).partition(|(g, _)| *g == now);
            *list = mine;
            inherited = theirs.into_iter().map(|(_, guard)| guard).collect();
        }
        (f(&mut list), inherited)
    }

    /// Keeps a new grant.
    pub(crate) fn push(&self, guard: ProcessGuard) {
        let ((), inherited) = self.with(|list| list.push((fork_generation(), guard)));
        drop(inherited);
    }

    /// Takes the oldest grant of this process out of the list.
    pub(crate) fn take_oldest(&self) -> Taken {
        let (oldest, inherited) = self.with(|list| (!list.is_empty()).then(|| list.remove(0).1));
        match oldest {
            Some(g) => Taken::Grant(g),
            None if inherited.is_empty() => Taken::NotHeld,
            None => Taken::Inherited,
        }
    }

    /// `f` of the oldest grant of this process (the one `release()` ends next), if any.
    pub(crate) fn with_oldest<R>(&self, f: impl FnOnce(&ProcessGuard) -> R) -> Option<R> {
        let (r, inherited) = self.with(|list| list.first().map(|(_, g)| f(g)));
        drop(inherited);
        r
    }

    /// How many grants of this process the object holds.
    pub(crate) fn count(&self) -> usize {
        let (n, inherited) = self.with(|list| list.len());
        drop(inherited);
        n
    }
}

impl Drop for Grants {
    fn drop(&mut self) {
        let list = std::mem::take(self.list.get_mut().unwrap_or_else(|e| e.into_inner()));
        for (generation, guard) in list {
            if generation == fork_generation() {
                // Held until the process ends (see the module's documentation). The guard
                // owns its view of the file, which stays mapped with it.
                std::mem::forget(guard);
            }
        }
    }
}
