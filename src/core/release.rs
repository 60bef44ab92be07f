//! What the holder does with its grant: release it, check it, or give it up as dead. (Lease
//! extension is in [`crate::core::robust::leasing`].)

use super::{Grant, Lost};
use crate::core::advance::advance;
use crate::core::exclusive::fast::{end_fast, is_fast_grant, release_fast_on};
use crate::core::platform::Platform;
use crate::core::robust::leasing::{finish_revocation, lease_of, revoked};
use crate::core::state::format::{Header, cas};
use crate::core::state::lease::Lease;
use crate::core::state::slot_word::{LapRelation, State, Word, relate};
use crate::core::state::{LockState, Slot};
use crate::primitive::Ordering::{Acquire, Release};

/// Our slot word if ticket `t` is still held by participant `participant`.
#[inline]
fn held_word<'a>(st: &LockState<'a>, t: u64, participant: u32) -> Option<(&'a Slot, Word)> {
    let slot = st.slot(t);
    // Acquire: if a takeover changed the word, we also see its lease write.
    let w = Word(slot.word.load(Acquire));
    let ours = relate(w.lap(), st.lap(t)) == LapRelation::Same
        && w.state() == Some(State::Held)
        && w.participant() == participant;
    ours.then_some((slot, w))
}

/// Releases the grant and passes the lock on. `Err(Lost)` if it was no longer ours (taken
/// over); the queue is then moved on anyway.
#[inline]
pub fn release<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    g: &Grant,
    participant: u32,
) -> Result<(), Lost> {
    let t = g.ticket;
    if !g.leased {
        return match release_unleased_fast(st, t, participant, g.fast) {
            Some(true) => Ok(()),
            outcome => finish_unleased_release(st, p, t, participant, g.fast, outcome, barge_of(g)),
        };
    }
    crate::crash_point!("release.start");
    let Some((slot, w, f)) = lease_of(st, t, State::Held, participant) else {
        advance(st, p, t, false);
        return Err(Lost);
    };
    if f.lease() == Lease::Revoked {
        // A takeover revoked the lease and has yet to revoke the word: finish it for them.
        finish_revocation(st, p, t);
        return Err(Lost);
    }
    // Release: as in `release_unleased_fast`. A CAS, not a store: a takeover may race us; if
    // its word CAS came first we lost, if ours did the takeover's fails and it just advances.
    if slot
        .word
        .compare_exchange(w.0, w.with_state(State::Done).0, Release, Acquire)
        .is_err()
    {
        advance(st, p, t, false);
        return Err(Lost);
    }
    crate::crash_point!("release.done");
    advance(st, p, t.wrapping_add(1), false);
    Ok(())
}

/// The release of a grant without a lease, minus its rare endings, for inlining into the
/// caller. A fast grant (`fast`): the one CAS on the lock word ([`release_fast_grant`]),
/// `Some(true)` if it did it all. A grant held through its slot: if ticket `t` is still held
/// by `participant`, stores `Done` and answers `Some(false)` (the walk that passes the lock
/// on is left to [`finish_unleased_release`]); `None`, no longer ours (nothing was written).
#[inline(always)]
pub fn release_unleased_fast(
    st: &LockState<'_>,
    t: u64,
    participant: u32,
    fast: bool,
) -> Option<bool> {
    if fast {
        return Some(release_fast_grant(st.header(), t, participant));
    }
    crate::crash_point!("release.start");
    let (slot, w) = held_word(st, t, participant)?;
    // Without a lease nobody else writes a Held word while its owner lives (revocation needs
    // the owner dead: its beacon free, or its own thread exiting or panicking), so a store
    // suffices. Release: publishes our critical section to the Acquire load of whoever
    // advances next.
    slot.word.store(w.with_state(State::Done).0, Release);
    crate::crash_point!("release.done");
    Some(false)
}

/// [`release_unleased_fast`] of a fast grant, on the header alone (all it touches): true if
/// the one CAS on the lock word did it all.
#[inline(always)]
pub fn release_fast_grant(header: &Header, t: u64, participant: u32) -> bool {
    crate::crash_point!("release.start");
    release_fast_on(header, t, participant)
}

/// The barge count of grant `g` if it is a barge (see [`crate::core::exclusive::barge`]).
#[inline]
pub fn barge_of(g: &Grant) -> Option<u16> {
    g.is_barge().then_some(g.count)
}

/// The rest of an unleased release after [`release_unleased_fast`] returned `outcome`
/// (anything but `Some(true)`): a fast grant whose word changed (someone queued behind it,
/// or it was revoked) is ended by [`end_fast`] — a barge (`barge`: its count) by
/// [`crate::core::exclusive::barge::end_barge`]; a slot's grant is passed on by a walk.
#[cold]
pub fn finish_unleased_release<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    t: u64,
    participant: u32,
    fast: bool,
    outcome: Option<bool>,
    barge: Option<u16>,
) -> Result<(), Lost> {
    if let Some(count) = barge {
        return if crate::core::exclusive::barge::end_barge(st, p, participant, count, false) {
            Ok(())
        } else {
            Err(Lost)
        };
    }
    if fast {
        return if end_fast(st, p, participant, t, false) {
            Ok(())
        } else {
            Err(Lost)
        };
    }
    match outcome {
        Some(_) => {
            advance(st, p, t.wrapping_add(1), false);
            Ok(())
        }
        None => {
            advance(st, p, t, false);
            Err(Lost)
        }
    }
}

/// `Ok` while ticket `g` is still held by us and its lease was not revoked.
pub fn check<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    g: &Grant,
    participant: u32,
) -> Result<(), Lost> {
    if let Some(count) = barge_of(g) {
        return if crate::core::exclusive::barge::holds(st, participant, count) {
            Ok(())
        } else {
            Err(Lost)
        };
    }
    if g.fast {
        return if is_fast_grant(st, g.ticket, participant) {
            Ok(())
        } else {
            Err(Lost)
        };
    }
    if !g.leased {
        return held_word(st, g.ticket, participant).map(|_| ()).ok_or(Lost);
    }
    match revoked(st, g.ticket, participant) {
        Some(false) => Ok(()),
        Some(true) => {
            finish_revocation(st, p, g.ticket);
            Err(Lost)
        }
        None => Err(Lost),
    }
}

/// The holder gives the lock up without having released it normally (its thread exited while
/// holding, or panicked): the word becomes `Revoked`, and the next holder is told the owner
/// died. `Err(Lost)` if it was no longer ours.
pub fn revoke_own<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    g: &Grant,
    participant: u32,
) -> Result<(), Lost> {
    if let Some(count) = barge_of(g) {
        return if crate::core::exclusive::barge::end_barge(st, p, participant, count, true) {
            Ok(())
        } else {
            Err(Lost)
        };
    }
    if g.fast {
        return if end_fast(st, p, participant, g.ticket, true) {
            Ok(())
        } else {
            Err(Lost)
        };
    }
    let r = match held_word(st, g.ticket, participant) {
        Some((slot, w)) if cas(slot, w, w.with_state(State::Revoked)) => Ok(()),
        _ => Err(Lost),
    };
    advance(st, p, g.ticket, false);
    r
}
