//! Claiming a grant: the one CAS that turns a ticket's grant into a hold, and what follows it
//! (the lease deadline, the informational stamps).

use crate::core::exclusive::barge::{AfterClaim, after_claim};
use crate::core::platform::{Platform, Tuning};
use crate::core::queue::watch::Watch;
use crate::core::robust::leasing::commit;
use crate::core::state::format::cas;
use crate::core::state::slot_word::{LapRelation, State, Word, relate};
use crate::core::state::{LockState, Slot};
use crate::core::{Grant, Me, WaitError};
use crate::primitive::Ordering::{Acquire, Relaxed, Release, SeqCst};

/// What a claim attempt came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// We hold the lock.
    Held(Grant),
    /// The ticket is not granted (yet): still waiting (its word is returned).
    NotGranted(Word),
    /// The ticket is gone (skipped; or our lease was revoked before we committed it): take a
    /// new one.
    Lost,
}

/// One look at our published ticket `t` and, if it is `Granted`, the claim: CAS
/// `Granted → Held` (the word keeps its died and leased flags), then the lease commit.
pub fn claim_granted<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    t: u64,
    me: &Me,
) -> Result<Claim, WaitError> {
    claim_granted_with(st, p, t, me, &Tuning::default(), None, None)
}

/// [`claim_granted`] with the waiter's tuning (how long to spin, then poll, for a barger
/// that took the lock ahead of our grant in a file with a bypass bound: [`crate::core::exclusive::barge`]),
/// its deadline and its interrupt hook (a claimed grant is given back if either ends the wait
/// for a barger: then `Err(Timeout)` or `Err(Interrupted)`).
pub fn claim_granted_with<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    t: u64,
    me: &Me,
    tuning: &Tuning,
    deadline: Option<u64>,
    watch: Option<&mut Watch<'_>>,
) -> Result<Claim, WaitError> {
    let mut watch = watch;
    let slot = st.slot(t);
    let bounded = st.bypass_bound() != 0;
    loop {
        // Acquire: pairs with the grant CAS (Release), carrying the previous critical section.
        let w = Word(slot.word.load(Acquire));
        if relate(w.lap(), st.lap(t)) != LapRelation::Same || w.participant() != me.participant {
            return Ok(Claim::Lost);
        }
        match w.state() {
            Some(State::Granted) => {
                crate::crash_point!("acquire.granted_seen");
                let held = w.with_state(State::Held);
                if claim_cas(slot, w, held, bounded) {
                    crate::crash_point!("acquire.claimed");
                    let Some((news, overtaken)) = wait_out_barges(
                        st,
                        p,
                        t,
                        held,
                        me,
                        tuning,
                        deadline,
                        watch.as_deref_mut(),
                    )?
                    else {
                        return Ok(Claim::Lost);
                    };
                    return Ok(match claimed(st, p, slot, t, me) {
                        true => Claim::Held(Grant {
                            overtaken,
                            ..Grant::of(t, w.died() || news, w.leased(), false)
                        }),
                        false => Claim::Lost,
                    });
                }
            }
            Some(State::Waiting | State::Sleeping) => return Ok(Claim::NotGranted(w)),
            Some(State::Skipped) => return Ok(Claim::Lost),
            _ => {
                return Err(WaitError::Corrupt(
                    "our slot changed to an impossible state",
                ));
            }
        }
    }
}

/// After a claim CAS of ticket `t` (our word now `held`): in a file with a bypass bound, waits
/// out a barger ([`after_claim`]). `Some((news, overtaken))`: the grant is ours (a dead
/// barger's news, and how many barges overtook us); `None`: it was lost; `Err(Timeout |
/// Interrupted)`: the deadline or the interrupt hook made us give it back. Nothing to wait for
/// in a strict file.
#[allow(clippy::too_many_arguments)]
pub(crate) fn wait_out_barges<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    t: u64,
    held: Word,
    me: &Me,
    tuning: &Tuning,
    deadline: Option<u64>,
    watch: Option<&mut Watch<'_>>,
) -> Result<Option<(bool, u16)>, WaitError> {
    if st.bypass_bound() == 0 {
        return Ok(Some((false, 0)));
    }
    let mut watch = watch;
    match after_claim(st, p, t, held, me, tuning, deadline, watch.as_deref_mut()) {
        AfterClaim::Held { news, overtaken } => Ok(Some((news, overtaken))),
        AfterClaim::GaveUp => Err(watch.map_or(WaitError::Timeout, |w| w.stopped())),
        AfterClaim::Lost => Ok(None),
    }
}

/// The claim CAS `from → to` of a grant (`Granted` or `Ready` → `Held`): in a bounded file
/// `SeqCst`, the grantee's half of the Dekker pair with a barger's CAS on the lock word (see
/// `barge`); else as every grant CAS.
#[inline]
pub(crate) fn claim_cas(slot: &Slot, from: Word, to: Word, bounded: bool) -> bool {
    if bounded {
        // SeqCst: see above.
        slot.word
            .compare_exchange(from.0, to.0, SeqCst, Acquire)
            .is_ok()
    } else {
        cas(slot, from, to)
    }
}

/// After our claim CAS of ticket `t`: commit the lease deadline, if we asked for a lease, and
/// record the informational fields. False if our lease was revoked before we could commit it
/// (we then hold nothing and queue again).
pub(crate) fn claimed<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    slot: &Slot,
    t: u64,
    me: &Me,
) -> bool {
    if !commit(st, p, t, me) {
        return false;
    }
    stamp_owner(slot, t, me);
    true
}

/// Informational fields for `fairlock status`; Relaxed, never used for decisions.
#[inline]
pub(crate) fn stamp_owner(slot: &Slot, t: u64, me: &Me) {
    slot.tid.store(me.tid, Relaxed);
    // The beacon before the stamp that says whose it is: Release, paired with the Acquire
    // load of `stamp` by a waiter about to watch the beacon (see `wait::holder_beacon`).
    slot.beacon.store(me.beacon, Relaxed);
    slot.stamp.store(t.wrapping_add(1), Release);
}

/// When the ticket was published or claimed after waiting (for status).
pub(crate) fn stamp_since<P: Platform>(p: &P, slot: &Slot) {
    slot.since.store(p.coarse_now_ns(), Relaxed);
}

/// Records the holder's thread and "now" for ticket `t` (for status); what the uncontended
/// path skips. Informational, Relaxed.
pub fn stamp_holder<P: Platform>(st: &LockState<'_>, p: &P, t: u64, tid: u32) {
    let slot = st.slot(t);
    slot.tid.store(tid, Relaxed);
    slot.since.store(p.coarse_now_ns(), Relaxed);
    slot.stamp.store(t.wrapping_add(1), Relaxed);
}

/// Records the fast holder's thread and "now" for fast grant `t` (for status), in the header
/// (one fast holder at a time). Informational, Relaxed.
pub fn stamp_fast<P: Platform>(st: &LockState<'_>, p: &P, t: u64, tid: u32) {
    let h = st.header();
    h.fast_tid.store(tid, Relaxed);
    h.fast_since.store(p.coarse_now_ns(), Relaxed);
    h.fast_stamp.store(t.wrapping_add(1), Relaxed);
}
