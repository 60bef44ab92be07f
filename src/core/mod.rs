//! The lock algorithm: a ticket lock with a waiting array, over a [`LockState`] of atomics and
//! a [`Platform`] for sleeping, time and liveness. No system calls, no files, no `target_os`
//! here, so the same code runs under loom, under Miri on heap memory, and over the mapping.
//!
//! # The protocol in one paragraph
//!
//! While nobody holds or queues, the lock is one word ([`lock_word`]): a taker takes the next
//! ticket *and* its grant with one CAS on it, and releases with one more ([`fast`]): the
//! uncontended path, no system call and nothing else written. A taker that finds the lock held
//! takes a ticket `t` with a CAS on the same word (the first to queue sets its `Q` flag) and
//! publishes itself in slot `t % N` with one CAS on the slot word (which carries the ticket's
//! lap, its owner's participant index and its [`State`]). Whoever releases or recovers the lock
//! runs [`advance()`]: it walks forward from the freed ticket over final states and grants the
//! first live ticket with one CAS on *its* slot word, waking exactly that waiter if it sleeps
//! (and nudging the one behind it so it starts spinning); a ticket taken but not yet published
//! is granted in advance (`Ready`) and claimed by its taker with one CAS; a walk that reaches
//! the next ticket to be handed out drains the queue (the word free again). Every decision
//! about a ticket — grant vs. timeout, takeover vs. extension, leased release vs. revocation,
//! skip vs. late claim, drain vs. a new taker — is a single CAS on one word; the loser
//! re-reads and follows the winner.
//!
//! # Notes about memory ordering
//!
//! * **Hand-over of the critical section.** The holder's release (`Held → Done`: a store
//!   without a lease, a CAS with one) is `Release`; the advancer reads that word with
//!   `Acquire` and grants the next ticket with an
//!   `AcqRel` CAS; the next holder reads its slot word with `Acquire` before claiming. So the
//!   previous critical section happens-before the next one, whether the advancer is the
//!   releasing thread or a helper in another process (the chain is release → acquire →
//!   release → acquire, which is transitive).
//! * **Publication and grant.** Publishing (`prev-lap final → Waiting`) and granting
//!   (`Waiting|Sleeping → Granted`, `prev-lap final → Ready`) are CASes on the same word, so
//!   they are totally ordered by that word's modification order: whichever comes second sees
//!   the first. There is no separate flag and hence no store-then-load (Dekker) pattern in
//!   the slot protocol. The only ones, each `SeqCst` on both sides: a barge against the
//!   grantee's claim, and the end of a barge against the same ([`barge`]); a waiter going to
//!   sleep on the beacon of the waiter ahead against that waiter's give-up nudge (fences, see
//!   `wait_for_grant` and [`advance::wake_successor`]).
//! * **No lost wake-up.** A waiter parks by CAS `Waiting → Sleeping` and then waits on the
//!   futex expecting the `Sleeping` value; a grantor that sees `Sleeping` (in its CAS) wakes
//!   the word after changing it. Either the change happens before the kernel compares the
//!   word (the wait returns at once) or after the waiter is queued (the wake finds it).
//! * **The lock word**: see [`fast`] for its orderings (a fast acquire is an `Acquire` CAS,
//!   whatever frees the word a `Release` one; the first queuer raises `head` before it sets
//!   `Q`, and walkers load `head` after the word). **`head`** is a hint, only ever a lower bound of the first
//!   non-final ticket, and monotone; readers walk forward from it with `Acquire` loads of the
//!   words. `advance` raises it with a `Release` compare-and-swap ([`frontier::raise_head`]),
//!   and a taker about to reuse a slot whose previous ticket was revoked loads it with
//!   `Acquire`: the grant that passed that ticket (and carried its died flag on) happens-before
//!   the reuse. Other readers load it `Relaxed`.
//! * **Lease field.** Written by CAS only, each write bumping a 44-bit version (so a stale
//!   writer's CAS fails); read with `Acquire` *before* the word that vouches for it, written
//!   `AcqRel`; the deadline in the participant entry is stored `Release` before the CAS that
//!   publishes it and loaded `Acquire` after that field. See [`leasing`].
//! * **Lapped-taker records** ([`lapped`]) are `Relaxed`: advice whose only effect is to pass
//!   a ticket whose taker gave up (it wrote so after its last look) or is dead (the kernel's
//!   beacon says so).
//! * **Informational fields** (`stamp`, `tid`, `since`) are `Relaxed` and never used for a
//!   decision; the slot's `beacon` field (a thread beacon, and in a bounded file the ticket's
//!   arrival count) is written before `stamp`'s `Release` store and read after its `Acquire`
//!   load.

pub mod acquire;
pub mod advance;
pub mod exclusive;
pub mod grant;
pub mod model;
pub mod platform;
pub mod queue;
pub mod release;
pub mod robust;
pub mod state;
pub mod weighted;

#[cfg(all(test, not(fairlock_loom)))]
mod tests;

pub use acquire::{lock, lock_queued, lock_watched, take, try_lock};
pub use advance::advance;
pub use exclusive::fast::{Taken, end_fast, release_fast, try_fast, try_fast_on};
pub use grant::{Grant, Lost, Me, WaitError};
pub use platform::{Liveness, Platform, Tuning};
pub use queue::claim::{Claim, claim_granted};
pub use queue::publish::{LappedGiveUp, Look, Published, give_up_lapped, publish, publish_once};
pub use queue::watch::{Ahead, INTERRUPT_POLL_NS, Watch};
pub use release::{
    check, finish_unleased_release, release, release_fast_grant, release_unleased_fast, revoke_own,
};
pub use robust::cleanup::clean_up_participant;
pub use robust::leasing::extend;
pub use robust::recover::recover;
pub use state::slot_word::{State, Word};
pub use state::{Geometry, LockState, OwnedState};
