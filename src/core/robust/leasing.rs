//! The lease protocol, in one place: a taker announces its lease before it publishes, the
//! holder commits a deadline after it claims and extends it later, and a waiter behind takes a
//! holder (or a granted waiter that never claims) over once its lease ran out.
//!
//! # The lease field, by lap (who writes what; every write a CAS that bumps the version)
//!
//! | from | to | by | when |
//! |---|---|---|---|
//! | anything a final ticket left | `Pending(d)` | taker of `t` | before publishing `t` with the `leased` flag (or claiming its pre-grant) |
//! | `Pending(d)` | `Leased` | holder | after its claim CAS, once its deadline (now + `d`) is in the slot's deadline word |
//! | `Leased` | `Leased` | holder | `extend`: a new deadline written first, then this CAS |
//! | `Pending(d)` | `Revoked` | waiter behind | the holder (or grantee) was seen with the same `Pending` for `d` |
//! | `Leased` | `Revoked` | waiter behind | the deadline in the holder's entry passed |
//!
//! `Revoked` is final for the lap; after it the word follows (`Held → Revoked`, or
//! `Granted → Skipped`), by the taker-over or by whoever sees the revoked lease next (the
//! holder itself included: `finish_revocation`).
//!
//! # Why a stale writer can never touch a later ticket's lease
//!
//! * The field's value never repeats (its version rises with every write), so a CAS from a
//!   value read before a stall fails if anyone wrote since, however many laps passed (short of
//!   2^44 writes to the slot).
//! * A reader loads the **field first, then the word**, and trusts the field only if the word
//!   still shows the ticket it asks about (lap, state, owner, `leased`). The owner of a later
//!   lap writes the field only after it saw this ticket's word final, so a field value of a
//!   later lap can never be read before a word that still shows this lap (the owner's
//!   `Release` CAS of the field, our `Acquire` load of it, and coherence of the word). A value
//!   of an *earlier* lap (from before this ticket's announcement) is excluded differently:
//!   every caller of `lease_of` has already seen this ticket's `leased` word — the owner wrote
//!   the announcement itself, and a waiter behind loaded the word (`Acquire`, through the
//!   release sequence of the publishing CAS) before it looks at the lease — so the
//!   announcement happens-before the field load.
//! * The deadline is written only by the ticket's holder, by a CAS from the value it read
//!   *before* checking (field, then word) that it still holds the ticket, tagged with the
//!   ticket's lap.
//!   If it lost the ticket just after that check and the slot's next user wrote its own
//!   deadline meanwhile, the CAS fails (the value changed: another tag); if nobody wrote, its
//!   value lands tagged with its own lap, which a reader of any other ticket ignores. Two
//!   leased grants of one process (two reads, two permits) have two slots and two deadlines.
//!
//! Ordering: every field CAS is `AcqRel`, loads are `Acquire`; the deadline CAS (`AcqRel`) comes
//! before the field CAS that publishes it, and a taker-over loads it `Acquire` after loading
//! that field value, so it sees that deadline or a later one (a later one means an extension is
//! under way: at worst the takeover waits for it).

use crate::core::advance::advance;
use crate::core::platform::Platform;
use crate::core::queue::watch::Watch;
use crate::core::state::format::cas;
use crate::core::state::lease::{Deadline, Lease, LeaseField};
use crate::core::state::slot_word::{LapRelation, State, Word, relate};
use crate::core::state::{LockState, Slot};
use crate::core::{Lost, Me};
use crate::primitive::Ordering::{AcqRel, Acquire};

/// The lease field and the word of ticket `t`, loaded in that order, if the word still shows
/// `t` in `state` owned by `participant` with the `leased` flag: then the field is `t`'s.
#[inline]
pub(crate) fn lease_of<'a>(
    st: &LockState<'a>,
    t: u64,
    state: State,
    participant: u32,
) -> Option<(&'a Slot, Word, LeaseField)> {
    let slot = st.slot(t);
    // Acquire: pairs with the AcqRel CAS that wrote this value (see the module notes).
    let f = LeaseField(slot.lease.load(Acquire));
    // Acquire: after the field, so a word that still shows `t` vouches for it.
    let w = Word(slot.word.load(Acquire));
    let ours = relate(w.lap(), st.lap(t)) == LapRelation::Same
        && w.state() == Some(state)
        && w.participant() == participant
        && w.leased();
    ours.then_some((slot, w, f))
}

/// Before publishing (or claiming a pre-grant): announce a lease of `ms` by one CAS from the
/// value `read`, loaded before the word the caller is about to CAS. False if the field changed
/// meanwhile (the caller re-reads both).
#[inline]
pub(crate) fn announce(slot: &Slot, read: LeaseField, ms: u64) -> bool {
    // AcqRel: see the module notes.
    slot.lease
        .compare_exchange(read.0, read.next(Lease::Pending(ms)).0, AcqRel, Acquire)
        .is_ok()
}

/// After claiming ticket `t` with a lease: write our deadline (now + the announced duration)
/// and commit it, `Pending → Leased`. False if the lease was revoked first (a waiter behind
/// saw us pending for the whole duration): then we hold nothing, and the word is revoked here
/// so the queue moves on.
pub(crate) fn commit<P: Platform>(st: &LockState<'_>, p: &P, t: u64, me: &Me) -> bool {
    let Some(ms) = me.lease_ms else { return true };
    let committed = (|| loop {
        let old = deadline_before_check(st, t);
        let Some((slot, _, f)) = lease_of(st, t, State::Held, me.participant) else {
            return false;
        };
        if !matches!(f.lease(), Lease::Pending(_)) {
            return false; // Revoked
        }
        if !set_deadline(st, slot, t, old, p.now_ns() / 1_000_000 + ms) {
            continue; // another writer: look again
        }
        crate::crash_point!("acquire.lease_pending");
        // AcqRel: a takeover CASes the same field; one of us wins.
        if slot
            .lease
            .compare_exchange(f.0, f.next(Lease::Leased).0, AcqRel, Acquire)
            .is_ok()
        {
            return true;
        }
    })();
    if !committed {
        finish_revocation(st, p, t);
    }
    committed
}

/// The deadline word of ticket `t`'s slot, loaded *before* the caller checks (field, then
/// word) that it still holds `t`: the value its CAS must find unchanged. Loaded after the check,
/// it could be a later ticket's, written while we stalled between the two, and our CAS would
/// replace that one's deadline.
#[inline]
fn deadline_before_check(st: &LockState<'_>, t: u64) -> u64 {
    // Acquire: pairs with the AcqRel CAS of the last writer.
    st.slot(t).deadline.load(Acquire)
}

/// Writes `ms` as the deadline of ticket `t` into its slot: one CAS from `old`, the value read
/// before the caller's check (see [`deadline_before_check`]). False if it changed since.
fn set_deadline(st: &LockState<'_>, slot: &Slot, t: u64, old: u64, ms: u64) -> bool {
    // AcqRel: published by the field CAS that follows (Release there); one chain of writers.
    slot.deadline
        .compare_exchange(old, Deadline::new(st.lap(t), ms).0, AcqRel, Acquire)
        .is_ok()
}

/// Sets the lease of our held ticket `t` to end `ms` milliseconds from now. Decided against a
/// takeover by one CAS on the lease field: if the takeover's came first we get `Err(Lost)`,
/// else the takeover's fails and it sees the new deadline.
pub fn extend<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    t: u64,
    participant: u32,
    ms: u64,
) -> Result<(), Lost> {
    let r = (|| loop {
        let old = deadline_before_check(st, t);
        let (slot, _, f) = lease_of(st, t, State::Held, participant).ok_or(Lost)?;
        match f.lease() {
            Lease::Leased => {}
            Lease::Revoked => return Err(Lost),
            // Pending: not committed (no guard exists yet); None: not ours to extend.
            Lease::Pending(_) | Lease::None => return Err(Lost),
        }
        if !set_deadline(st, slot, t, old, p.now_ns() / 1_000_000 + ms) {
            continue;
        }
        crate::crash_point!("extend.written");
        // AcqRel: the takeover CASes the same field; exactly one of us wins.
        if slot
            .lease
            .compare_exchange(f.0, f.next(Lease::Leased).0, AcqRel, Acquire)
            .is_ok()
        {
            return Ok(());
        }
    })();
    if r.is_err() {
        finish_revocation(st, p, t);
    }
    r
}

/// Whether our held, leased ticket `t` was revoked (its lease taken over). `None` if the word
/// no longer shows it held by us at all.
#[inline]
pub(crate) fn revoked(st: &LockState<'_>, t: u64, participant: u32) -> Option<bool> {
    let (_, _, f) = lease_of(st, t, State::Held, participant)?;
    Some(f.lease() == Lease::Revoked)
}

/// Whether the lease of ticket `h` (word `w`, `Held` or `Granted`, `leased`, owner alive) has
/// run out, as far as this waiter can tell. `Some(f)`: yes, and `f` is the field value to
/// revoke from; `None`: no (or the field is not `h`'s any more).
pub(crate) fn expired<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    h: u64,
    w: Word,
    watch: &mut Watch<'_>,
) -> Option<LeaseField> {
    let state = w.state()?;
    let (_, now_w, f) = lease_of(st, h, state, w.participant())?;
    if now_w != w {
        return None; // changed under us: look again next time
    }
    let now = p.now_ns();
    let out = match f.lease() {
        // A granted waiter that never claimed is timed with its lease too: it asked to be
        // passed over if it stalls that long (a frozen grantee must not block the queue).
        Lease::Pending(ms) => watch.observe((h, w.0, f.0), now) >= ms.saturating_mul(1_000_000),
        Lease::Leased => {
            // Acquire: after the field (see the module notes). A word of another lap is not
            // this ticket's deadline (only a corrupt file shows one): not expired.
            let d = Deadline(st.slot(h).deadline.load(Acquire)).of(st.lap(h))?;
            now / 1_000_000 >= d
        }
        Lease::Revoked => true,
        Lease::None => false,
    };
    out.then_some(f)
}

/// Takes ticket `h` over (its lease ran out): revoke the lease (the CAS an extension races),
/// then the word (`Held → Revoked`, or a never-claimed `Granted → Skipped`, which keeps the
/// died flag it carried), then grant the next ticket, with the died flag.
pub(crate) fn take_over<P: Platform>(st: &LockState<'_>, p: &P, h: u64, w: Word, f: LeaseField) {
    let slot = st.slot(h);
    // AcqRel: the extension CASes the same field; exactly one of us wins.
    if f.lease() != Lease::Revoked
        && slot
            .lease
            .compare_exchange(f.0, f.next(Lease::Revoked).0, AcqRel, Acquire)
            .is_err()
    {
        return; // extended (or changed) meanwhile: look again next time
    }
    crate::crash_point!("takeover.lease_revoked");
    let to = match w.state() {
        Some(State::Granted) => State::Skipped,
        _ => State::Revoked,
    };
    if cas(slot, w, w.with_state(to)) {
        crate::crash_point!("takeover.revoked");
    }
    advance(st, p, h, false);
}

/// Someone revoked ticket `t`'s lease: make sure its word says so too and move on.
pub(crate) fn finish_revocation<P: Platform>(st: &LockState<'_>, p: &P, t: u64) {
    let slot = st.slot(t);
    // Acquire: as in `lease_of` (field first).
    let f = LeaseField(slot.lease.load(Acquire));
    let w = Word(slot.word.load(Acquire));
    if relate(w.lap(), st.lap(t)) == LapRelation::Same && w.leased() && f.lease() == Lease::Revoked
    {
        match w.state() {
            Some(State::Held) => {
                cas(slot, w, w.with_state(State::Revoked));
            }
            Some(State::Granted) => {
                cas(slot, w, w.with_state(State::Skipped));
            }
            _ => {}
        }
    }
    // If `t` is final now, this passes it on; if someone already granted past it, it stops.
    advance(st, p, t, false);
}
