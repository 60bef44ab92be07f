//! The walk that passes the lock on — after a release, an abandonment, a recovery or a
//! publication — for the lock's kind: the one place where a walk chooses between the exclusive
//! lock's ([`crate::core::exclusive::walk`]) and the weighted kinds'
//! ([`crate::core::weighted::walk`]).

use crate::core::exclusive::walk::walk;
use crate::core::platform::Platform;
use crate::core::state::LockState;

/// Walks forward from ticket `from` over final tickets and grants the first one that is not:
///
/// * a published waiter (`Waiting`/`Sleeping`) becomes `Granted`, and is woken if it sleeps;
/// * a ticket nobody has published yet (its slot still shows the previous lap, final) becomes
///   `Ready`: its taker will claim it without waiting (this is what makes the uncontended path
///   free of system calls);
/// * a ticket already `Ready`, `Granted` or `Held` means someone else advanced: stop.
///
/// In each case `head` is raised to that ticket. A slot reused by a later granted ticket is a
/// jump ([`crate::core::queue::frontier`]), so a stale `from` costs about `N` steps.
///
/// Tickets before `from` must all be final. `died` says the ticket before `from` was not
/// released normally; it is carried over `Revoked` tickets (and skipped grants that carried
/// it) and cleared by `Done`, and ends up in the granted word so the next holder learns it.
///
/// A weighted lock grants by weight from `head` instead, nothing in advance
/// ([`crate::core::weighted::walk::advance`]; `from` and `died` mean nothing to it).
#[inline(never)]
pub fn advance<P: Platform>(st: &LockState<'_>, p: &P, from: u64, died: bool) {
    if st.is_weighted() {
        crate::core::weighted::walk::advance(st, p);
    } else {
        walk(st, p, from, died, None);
    }
}
