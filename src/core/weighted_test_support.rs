//! Helpers of the weighted kinds' unit tests (`weighted.rs`'s tests and the two reviews'
//! regression tests): who takes a ticket, what a ticket's slot says, a deadline in model time,
//! a taker stopped between its publication and its walk, a claim.

use super::{Claim, Grant, Me, State, Word, claim_granted};
#[allow(unused_imports)]
use crate::core::exclusive::{advance, barge, fast};
use crate::core::model::ModelPlatform;
use crate::core::platform::Platform;
#[allow(unused_imports)]
use crate::core::queue::{claim, frontier, given_up, lapped, publish};
#[allow(unused_imports)]
use crate::core::robust::{cleanup, leasing, recover};
use crate::core::state::LockState;
use crate::core::state::slot_word::{LapRelation, relate};
#[allow(unused_imports)]
use crate::core::state::{self as layout, lease, lock_word, slot_word as word};
#[allow(unused_imports)]
use crate::core::{acquire as wait, release as holder, weighted::walk as weighted};
use crate::primitive::Ordering::Relaxed;

/// Participant `participant` (thread id 100 + it), without a lease.
pub(super) fn me(participant: u32, shared: bool) -> Me {
    Me {
        participant,
        tid: 100 + participant,
        lease_ms: None,
        shared,
        beacon: 0,
    }
}

/// A shared taker with a lease of `ms`.
pub(super) fn leased(participant: u32, tid: u32, ms: u64) -> Me {
    Me {
        participant,
        tid,
        lease_ms: Some(ms),
        shared: true,
        beacon: 0,
    }
}

/// Ticket `t`'s state, if its slot shows its lap.
pub(super) fn state_of(st: &LockState<'_>, t: u64) -> Option<State> {
    let w = Word(st.slot(t).word.load(Relaxed));
    (relate(w.lap(), st.lap(t)) == LapRelation::Same)
        .then(|| w.state())
        .flatten()
}

/// A model clock that advances 1 µs per reading — 1 ms under Miri, where the tens of thousands
/// of readings a wait for the grace (50 ms) takes ran for many minutes (model time only: what
/// a test asserts about it is unchanged).
pub(super) fn ticking() -> ModelPlatform {
    ModelPlatform::new(if cfg!(miri) { 1_000_000 } else { 1_000 })
}

/// A deadline `ms` milliseconds of model time from now.
pub(super) fn in_ms(p: &ModelPlatform, ms: u64) -> Option<u64> {
    Some(p.now_ns() + ms * 1_000_000)
}

/// Takes the next ticket and publishes its `Waiting` word without the walk that `publish`
/// does after it: a taker preempted between its publication CAS and its walk.
pub(super) fn publish_without_walk(st: &LockState<'_>, who: &Me) -> u64 {
    let t = st.take_ticket();
    let slot = st.slot(t);
    let w = Word(slot.word.load(Relaxed));
    assert_eq!(relate(w.lap(), st.lap(t)), LapRelation::Previous);
    let waiting =
        Word::new(st.lap(t), who.participant, State::Waiting, false).with_shared(who.shared);
    slot.word
        .compare_exchange(w.0, waiting.0, Relaxed, Relaxed)
        .unwrap();
    t
}

/// Claims ticket `t`, which must be granted.
pub(super) fn claim(st: &LockState<'_>, p: &ModelPlatform, t: u64, who: &Me) -> Grant {
    match claim_granted(st, p, t, who).unwrap() {
        Claim::Held(g) => g,
        other => panic!("ticket {t} not granted: {other:?}"),
    }
}
