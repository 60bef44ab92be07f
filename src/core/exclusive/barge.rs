//! Bounded bypass (`Fairness::Bounded(k)`, files whose exclusive kind carries a bypass bound
//! `k`): a running thread may take the lock ahead of the queue's first ticket while that
//! ticket is granted but not yet claimed (its waiter is being woken, or descheduled) — a
//! *barge* — but no waiter is ever overtaken by more than `k` barges.
//!
//! # The count and the bound
//!
//! The lock word counts barges (`B`, modulo 2^10, [`crate::core::state::lock_word`]). A taker's ticket and
//! the count it was taken at come from one CAS (or `fetch_add`) on that word, so every waiter
//! knows exactly how many barges came before it; it records that *arrival* count in its
//! slot's `beacon` field (high bits, before the `stamp` that names its ticket). A barge
//! against `head` = `h` is allowed only if it would be at most the `k`-th since `h`'s
//! arrival. Every later waiter arrived at the same count or later (tickets and counts come
//! from the same word), so it is overtaken at most as often as `h`: at most `k` times in all
//! while it waits. A barge undone (see below) stays counted, which only makes the bound
//! stricter.
//!
//! # The barge and the claim: a Dekker pair
//!
//! The barger sets `H` (with `G`, its entry and `B + 1`) in one CAS on the word from a word
//! with `Q` set and `H` clear, then reads `h`'s slot: if it still shows the grant, the barge
//! stands; else (the grantee claimed first, or was skipped) it clears `H` again and queues.
//! The grantee claims with its CAS `Granted → Held` and then reads the word: if it shows a
//! barger's `H` it waits until `H` clears. Both CASes and both loads are `SeqCst`, so in the
//! single total order at least one of the two sees the other's write: never both proceed.
//! The barger that ends (release, undo, revocation) clears `H` with a `SeqCst` CAS and then
//! reads `h`'s slot (`SeqCst`): if the grantee claimed meanwhile it may be waiting, and is
//! woken (a futex wake on the word); if it claims after that read, its own load of the word
//! comes after the clear. A second Dekker pair, so no wake-up is lost.
//!
//! # Tokens
//!
//! Tokens must rise in grant order, and a barge comes between the grant of ticket `h − 1`
//! (token `h · 512` in a bounded file) and that of `h` (`(h + 1) · 512`): the `j`-th barge
//! ahead of `h` gets `h · 512 + j`, `1 ≤ j ≤ k ≤ 511`. See [`LockState::token`].
//!
//! # Failures
//!
//! A barge is identified by its entry and the count its CAS set (nobody changes the count
//! while it holds) — never by `head` or a ticket, which can turn into two holders or a lock held
//! for ever (see `docs/DESIGN.md`, "Bounded bypass"). A dead barger is
//! revoked by the grantee's wait ([`end_barge`]) or by a recovery, with a CAS from the very word
//! it judged ([`revoke_seen`]); the news goes into `D`, which the next claim or the next barger
//! consumes. No barge goes ahead of a grant that carries a death's news (the first holder after
//! a death must be told). A grantee that dies while it waits for a barger is a dead `Held`
//! ticket: revoked as usual once the barger is gone (walks grant nothing while `H` is set; the
//! barger's end walks on); one that gives up (deadline, interrupt) hands its ticket back
//! ([`after_claim`]). Barges publish no thread beacon: a waiter behind a barger polls its
//! process's liveness, as behind a `FairMutex` holder.

use crate::core::advance::advance;
use crate::core::platform::{Liveness, Platform, Tuning};
use crate::core::queue::watch::{INTERRUPT_POLL_NS, Watch};
use crate::core::state::LockState;
use crate::core::state::lock_word::{BARGES_MOD, LockWord};
use crate::core::state::slot_word::{LapRelation, State, Word, relate};
use crate::core::{Grant, Me};
use crate::primitive::Ordering::{Acquire, Relaxed, SeqCst};
use crate::primitive::spin_step;

/// The thread beacon's bits in a slot's `beacon` field (1 + index; at most 1,024 beacons).
pub const BEACON_MASK: u32 = 0xFFF;
const ARRIVAL_SHIFT: u32 = 12;
/// Set when the field records its ticket's arrival count (bounded files).
const ARRIVAL_SET: u32 = 1 << 31;

/// The `beacon` field of a waiter with thread beacon `beacon` whose ticket was taken when the
/// lock word counted `barges` barges.
#[inline]
pub fn with_arrival(beacon: u32, barges: u32) -> u32 {
    (beacon & BEACON_MASK) | ((barges % BARGES_MOD) << ARRIVAL_SHIFT) | ARRIVAL_SET
}

/// The arrival count a `beacon` field records, if any.
#[inline]
pub fn arrival(field: u32) -> Option<u32> {
    (field & ARRIVAL_SET != 0).then_some((field >> ARRIVAL_SHIFT) % BARGES_MOD)
}

/// Barges counted between `then` and `now` (both modulo 2^10; the difference never exceeds
/// the bound, at most 511, while a waiter it concerns waits).
#[inline]
pub fn since(now: u32, then: u32) -> u32 {
    now.wrapping_sub(then) % BARGES_MOD
}

/// What one barge attempt came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Barge {
    /// We hold the lock ahead of `head`'s grant.
    Took(Grant),
    /// Someone holds the lock: the head's grant may come (and a barge be possible) soon.
    Busy,
    /// No barge now: nobody queues (take the lock the usual way), the head is not granted or
    /// already claimed, its waiter was overtaken `k` times, or we lost a race.
    No,
}

/// Takes the lock ahead of the queue if the file has a bypass bound and the bound allows it,
/// spinning for at most `tuning.spin_ns` while a holder holds (its release grants the head,
/// and then a barge may be possible). `None`: queue as usual.
pub fn barge<P: Platform>(st: &LockState<'_>, p: &P, me: &Me, tuning: &Tuning) -> Option<Grant> {
    let mut until = None;
    let mut i: u32 = 0;
    loop {
        match try_barge(st, p, me) {
            Barge::Took(g) => return Some(g),
            Barge::No => return None,
            Barge::Busy => {
                if i.is_multiple_of(16) {
                    let now = p.now_ns();
                    if now >= *until.get_or_insert(now.saturating_add(tuning.spin_ns)) {
                        return None;
                    }
                }
                i = i.wrapping_add(1);
                spin_step();
            }
        }
    }
}

/// One barge attempt (see the module notes): [`look`], then [`commit`].
pub fn try_barge<P: Platform>(st: &LockState<'_>, p: &P, me: &Me) -> Barge {
    match look(st) {
        Ok(seen) => commit(st, p, me, seen),
        Err(b) => b,
    }
}

/// What a barger saw that allows a barge: the word, the head's ticket, its `Granted` word,
/// and the number this barge would have against it.
#[derive(Clone, Copy, Debug)]
pub struct Seen {
    w: LockWord,
    h: u64,
    sw: Word,
    j: u32,
}

/// Whether a barge is possible now, and what it is against. `Err`: [`Barge::Busy`] or
/// [`Barge::No`].
pub fn look(st: &LockState<'_>) -> Result<Seen, Barge> {
    let k = st.bypass_bound();
    // Acquire: pairs with the Release (or stronger) CAS that freed the word.
    let w = st.lock_word(Acquire);
    if k == 0 || !w.queued() {
        return Err(Barge::No);
    }
    if w.held() {
        return Err(Barge::Busy);
    }
    // Acquire: after the word; while `Q` is set and no fast holder holds, `head` is the
    // first unfinished ticket or before it.
    let h = st.header().head.load(Acquire);
    let slot = st.slot(h);
    // Acquire: pairs with the grant CAS (in the release sequence of the waiter's publication).
    let sw = Word(slot.word.load(Acquire));
    if relate(sw.lap(), st.lap(h)) != LapRelation::Same {
        return Err(Barge::No);
    }
    match sw.state() {
        // Not ahead of a leased grant: its lease is already running.
        Some(State::Granted) if !sw.leased() && !sw.died() => {}
        Some(State::Held) => return Err(Barge::Busy),
        _ => return Err(Barge::No),
    }
    // Acquire: pairs with `stamp_owner`'s Release store, made after the `beacon` field.
    if slot.stamp.load(Acquire) != h.wrapping_add(1) {
        return Err(Barge::No);
    }
    // Relaxed: ordered by the stamp above (the field of ticket `h`'s owner).
    let Some(arrived) = arrival(slot.beacon.load(Relaxed)) else {
        return Err(Barge::No);
    };
    let j = since(w.barges().wrapping_add(1), arrived);
    if j == 0 || j > k {
        return Err(Barge::No);
    }
    Ok(Seen { w, h, sw, j })
}

/// The barge `seen` allows: one `SeqCst` CAS on the word from exactly what was seen, then the
/// look at the head's slot that decides whether it stands.
pub fn commit<P: Platform>(st: &LockState<'_>, p: &P, me: &Me, seen: Seen) -> Barge {
    let Seen { w, h, sw, j } = seen;
    let ours = w.barged_by(me.participant);
    // SeqCst: the barger's half of the Dekker pair with the grantee's claim (module notes).
    if st
        .header()
        .word
        .compare_exchange(w.0, ours.0, SeqCst, Relaxed)
        .is_err()
    {
        return Barge::Busy; // the word moved: look again
    }
    crate::crash_point!("barge.taken");
    // SeqCst: after our CAS in the total order; see the module notes.
    if Word(st.slot(h).word.load(SeqCst)) == sw {
        // Still granted and unclaimed: its claimer will see our `H` and wait.
        return Barge::Took(Grant {
            ticket: h.wrapping_sub(1),
            died: w.died(),
            leased: false,
            fast: true,
            bypass: j as u16,
            overtaken: 0,
            count: ours.barges() as u16,
        });
    }
    // The grantee claimed first (or was skipped, or even released meanwhile: `head` may have
    // moved on before our CAS, the word unchanged — identifying the barge by `head` would leave it
    // held for ever): give the lock back, with the news we took.
    end_barge(st, p, me.participant, ours.barges() as u16, w.died());
    Barge::No
}

/// Ends the barge of entry `participant` whose CAS set the lock word's barge count to `count`,
/// if the word still shows it: a release (`died` false), an undone barge (`died`: the news it
/// consumed), or a revocation (`died`: its holder died). Clears `H` with `D = died` (one
/// `SeqCst` CAS), wakes a grantee that claimed meanwhile, and walks on from `head` (the
/// grantee may have died while it waited). True if this call ended it.
///
/// A barge is identified by its entry and the count (nobody changes the count while a barge
/// holds) — not by `head`, which a walk that started before the barge may raise past a
/// skipped grantee meanwhile (the live barger's release then failed and left `H` set for
/// ever), and not by the ticket before `head`, which a fast grant of the same entry had
/// (a waiter woken by that grant's dead thread revoked a sibling thread's live barge: two
/// holders).
pub fn end_barge<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    participant: u32,
    count: u16,
    died: bool,
) -> bool {
    loop {
        // Acquire: a revoker's view of the word; the CAS below decides.
        let w = st.lock_word(Acquire);
        if !is_barge(w, participant, count) {
            return false;
        }
        if clear(st, p, w, died) {
            return true;
        }
    }
}

/// Revokes the dead barge that word `seen` shows, only if the word is still exactly `seen`
/// (its counter included), so that the judgement of its entry was of this very word: a
/// (holder, count) pair comes back after a drain. False if the word moved (judge again).
pub fn revoke_seen<P: Platform>(st: &LockState<'_>, p: &P, seen: LockWord) -> bool {
    seen.held() && seen.barged() && clear(st, p, seen, true)
}

/// Ends the barge word `w` shows if the word is still `w`: clears `H` with `D = died` (one
/// `SeqCst` CAS), then [`wake_and_walk`]. False if the word moved.
fn clear<P: Platform>(st: &LockState<'_>, p: &P, w: LockWord, died: bool) -> bool {
    // SeqCst: the first half of the barger's end of the second Dekker pair (module notes);
    // also a release of the barge's critical section.
    if st
        .header()
        .word
        .compare_exchange(w.0, w.unheld().with_died(died).0, SeqCst, Relaxed)
        .is_err()
    {
        return false;
    }
    crate::crash_point!("barge.ended");
    wake_and_walk(st, p);
    true
}

/// Whether word `w` shows the barge of entry `participant` with barge count `count`.
#[inline]
pub fn is_barge(w: LockWord, participant: u32, count: u16) -> bool {
    w.held() && w.barged() && w.holder() == participant && w.barges() == u32::from(count)
}

/// Whether the barge of entry `participant` with barge count `count` still holds (`check`).
pub fn holds(st: &LockState<'_>, participant: u32, count: u16) -> bool {
    // Acquire: a revocation, if any, comes with the change.
    is_barge(st.lock_word(Acquire), participant, count)
}

/// After `H` of a barge was cleared (a `SeqCst` CAS): wakes the grantee if it claimed
/// meanwhile (it may be waiting for `H`), and walks on from `head` (the grantee may have died
/// while it waited). `head` is still the grant the barge was ahead of if its grantee waits:
/// nothing passes a claimed ticket but its release.
fn wake_and_walk<P: Platform>(st: &LockState<'_>, p: &P) {
    // SeqCst: after our CAS; with the slot word below, the barger's half of the second
    // Dekker pair (the grantee's: its SeqCst claim, then its SeqCst load of the word).
    let head = st.header().head.load(SeqCst);
    let slot = st.slot(head);
    // SeqCst: see above.
    let sw = Word(slot.word.load(SeqCst));
    if relate(sw.lap(), st.lap(head)) == LapRelation::Same && sw.state() == Some(State::Held) {
        p.wake(&st.header().word);
    }
    advance(st, p, head, false);
}

/// What waiting out a barge after a claim came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterClaim {
    /// We hold the lock: a dead barger's news (taken from `D`), and how many barges overtook
    /// us.
    Held {
        /// A dead barger's news.
        news: bool,
        /// Barges since our arrival.
        overtaken: u16,
    },
    /// The deadline passed or the interrupt hook said stop while a barge held: our claimed
    /// ticket was given back (`Skipped`, its news kept for the next).
    GaveUp,
    /// Our claimed word changed under us (a takeover of our pending lease): nothing is ours.
    Lost,
}

/// After the claim of ticket `t` in a bounded file (a `SeqCst` CAS to `held`): waits while a
/// barger holds the lock — until `deadline` at most, asking `watch`'s interrupt hook after
/// every wake-up — revoking the barger if its process dies, then takes a dead barger's news
/// from `D`. Our arrival count is in `me.beacon` (see [`with_arrival`]).
///
/// Giving up (a deadline, an interrupt: a barge may last as long as its critical section, or
/// for ever behind a stopped barger or a leaked guard, so the wait honours both) hands the
/// claimed ticket back: a `SeqCst` CAS `Held → Skipped` (the grant's died flag kept,
/// for the next), then a `SeqCst` load of the word, walking on ourselves if `H` is clear. With
/// the barger's end (a `SeqCst` clear of `H`, then a `SeqCst` look at `head`'s slot, and its
/// walk), a third Dekker pair: one of the two sees the other and walks past our ticket.
#[allow(clippy::too_many_arguments)]
pub fn after_claim<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    t: u64,
    held: Word,
    me: &Me,
    tuning: &Tuning,
    deadline: Option<u64>,
    watch: Option<&mut Watch<'_>>,
) -> AfterClaim {
    let mut watch = watch;
    let mut spin_until: Option<u64> = None;
    let mut poll = tuning.head_poll_min_ns;
    let mut waited = false;
    loop {
        // SeqCst: the grantee's half of the Dekker pair (module notes); also an acquire of
        // the barge's critical section once `H` is clear.
        let w = st.lock_word(SeqCst);
        if w.held() && w.barged() {
            let now = p.now_ns();
            let stop = watch.as_mut().is_some_and(|w| w.interrupted());
            if stop || deadline.is_some_and(|d| now >= d) {
                return give_back(st, p, t, held);
            }
            if now < *spin_until.get_or_insert(now.saturating_add(tuning.spin_ns)) {
                // A barge is one critical section: spin first.
                spin_step();
                continue;
            }
            if waited && p.liveness(w.holder()) == Liveness::Dead {
                end_barge(st, p, w.holder(), w.barges() as u16, true);
                continue;
            }
            waited = true;
            poll = poll.saturating_mul(2).min(tuning.head_poll_ns);
            let mut until = now.saturating_add(poll);
            if watch.as_ref().is_some_and(|w| w.has_hook()) {
                until = until.min(now.saturating_add(INTERRUPT_POLL_NS));
            }
            if let Some(d) = deadline {
                until = until.min(d);
            }
            p.wait(&st.header().word, w.0 as u32, Some(until));
            continue;
        }
        if w.died() && w.queued() {
            // A dead barger's news: ours, unless another taker's CAS moved the word.
            if !crate::core::state::lock_state::cas_word(st, w, w.with_died(false)) {
                continue;
            }
        }
        let overtaken = arrival(me.beacon).map_or(0, |a| since(w.barges(), a));
        return AfterClaim::Held {
            news: w.died() && w.queued(),
            overtaken: overtaken as u16,
        };
    }
}

/// Hands claimed ticket `t` (our word `held`) back while a barge holds (see [`after_claim`]).
pub(crate) fn give_back<P: Platform>(st: &LockState<'_>, p: &P, t: u64, held: Word) -> AfterClaim {
    let slot = st.slot(t);
    // SeqCst: our half of the third Dekker pair (see `after_claim`); the died flag stays in
    // the word, for the walk to carry on.
    if slot
        .word
        .compare_exchange(held.0, held.with_state(State::Skipped).0, SeqCst, Relaxed)
        .is_err()
    {
        return AfterClaim::Lost;
    }
    crate::crash_point!("barge.given_back");
    // SeqCst: after our CAS (see above).
    if !st.lock_word(SeqCst).held() {
        advance(st, p, t, false);
    }
    AfterClaim::GaveUp
}
