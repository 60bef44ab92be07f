//! The lock word's transitions ([`crate::core::state::lock_word`]): the uncontended acquire and release (one
//! compare-and-swap each), taking a ticket to queue, and ending a fast grant when someone
//! queued behind it or its holder died.
//!
//! # Orderings
//!
//! * A fast acquire is an `Acquire` CAS on the word; every CAS that frees the word — a fast
//!   release, the drain of a queue, the revocation of a dead fast holder — is `Release` (or
//!   `AcqRel`), and a drain's walker read the last queued holder's `Done` with `Acquire`
//!   first. So the previous critical section happens-before the next one, whichever way the
//!   lock went.
//! * The first taker to queue raises `head` (a `Release` CAS) *before* its CAS sets `Q`
//!   (`AcqRel`); walkers load the word with `Acquire` and `head` after it, so a walker that
//!   sees `Q` sees `head` at or after the first queued ticket, and never walks the slots of
//!   fast tickets (which never touched their slots).
//! * Taking a queued ticket is an `AcqRel` CAS, part of the word's release sequence; the slot
//!   protocol orders everything after it.

use crate::core::advance::advance;
use crate::core::exclusive::walk::{Walked, walk};
use crate::core::platform::Platform;
use crate::core::queue::frontier::raise_head;
use crate::core::queue::given_up::refresh_slots;
use crate::core::state::LockState;
use crate::core::state::format::Header;
use crate::core::state::lock_state::cas_word;
use crate::core::state::lock_word::{self, LockWord};
use crate::core::{Grant, Me};
use crate::primitive::Ordering::{Acquire, Relaxed, Release};

/// The uncontended acquire: if nobody holds or queues, one CAS takes the next ticket and
/// grants it (the died flag is the word's `D`, which the CAS clears). `None`: held or queued
/// (or the CAS lost a race); the caller queues with [`take`].
#[inline(always)]
pub fn try_fast(st: &LockState<'_>, participant: u32, beacon: u32) -> Option<Grant> {
    try_fast_on(st.header(), participant, beacon, || *st)
}

/// [`try_fast`] on the header alone, which is all it touches unless its ticket wraps the
/// counter: then `state()` gives the view whose slots it refreshes. For the API's inlined
/// uncontended path, which then builds no view.
#[inline(always)]
pub fn try_fast_on<'a>(
    header: &'a Header,
    participant: u32,
    beacon: u32,
    state: impl FnOnce() -> LockState<'a>,
) -> Option<Grant> {
    // Relaxed: only a guess at the value the CAS below expects.
    let w = LockWord(header.word.load(Relaxed));
    if w.held() || w.queued() {
        return None;
    }
    // Acquire: pairs with the Release CAS that freed the word (see the module notes).
    header
        .word
        .compare_exchange(w.0, w.acquired(participant).0, Acquire, Relaxed)
        .ok()?;
    crate::crash_point!("fast.acquired");
    if lock_word::wraps(w) {
        refresh_slots(&state());
    }
    let ticket = header.ticket_of(w);
    publish_hint(header, ticket, beacon);
    Some(Grant::of(ticket, w.died(), false, true))
}

/// The uncontended release of fast grant `t`: one CAS from exactly the word its acquire left
/// to the same word unheld. False if the word changed (someone queued, or the grant was
/// revoked): the caller then runs [`end_fast`].
#[inline(always)]
pub fn release_fast(st: &LockState<'_>, t: u64, participant: u32) -> bool {
    release_fast_on(st.header(), t, participant)
}

/// [`release_fast`] on the header alone (all it touches).
#[inline(always)]
pub fn release_fast_on(header: &Header, t: u64, participant: u32) -> bool {
    let held = LockWord::fast_held(t, participant);
    // Release: publishes our critical section to the next acquirer's Acquire CAS.
    header
        .word
        .compare_exchange(held.0, held.unheld().0, Release, Relaxed)
        .is_ok()
}

/// Whether the word still shows fast grant `t` of `participant` (for `check`): held by it,
/// with the counter at `t + 1` while nobody queues, `head` there while somebody does (see
/// [`end_fast`]).
pub fn is_fast_grant(st: &LockState<'_>, t: u64, participant: u32) -> bool {
    // Acquire: a revocation's news, if any, comes with the change.
    let w = st.lock_word(Acquire);
    if !w.held() || w.holder() != participant || w.barged() {
        return false;
    }
    let after = if w.queued() {
        // Acquire: after the word.
        st.header().head.load(Acquire)
    } else {
        st.ticket_of(w)
    };
    after == t.wrapping_add(1)
}

/// Publishes the fast holder's beacon for fast grant `ticket` (nothing if `beacon` is 0): one
/// store on the lock word's line, which the acquire's CAS left in our cache. A waiter uses it
/// only if its tag is the fast holder's ticket (so a stale one is never watched).
#[inline(always)]
fn publish_hint(header: &Header, ticket: u64, beacon: u32) {
    if beacon != 0 {
        // Relaxed: the tag makes a stale or early value harmless (see `wait::holder_beacon`).
        header.fast_hint.store(fast_hint(ticket, beacon), Relaxed);
    }
}

/// The `fast_hint` value of fast grant `ticket` with beacon `beacon` (1 + index).
#[inline(always)]
pub fn fast_hint(ticket: u64, beacon: u32) -> u64 {
    ((ticket.wrapping_add(1) & ((1 << 40) - 1)) << 24) | u64::from(beacon & 0xF_FFFF)
}

/// How a ticket was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taken {
    /// The lock was free: the word granted it (no lease was asked for).
    Fast(Grant),
    /// A ticket to publish in its slot and wait for, and the barges the lock word counted
    /// when it was taken (its arrival, for a file with a bypass bound: [`crate::core::exclusive::barge`]).
    Queued(u64, u32),
    /// No ticket: the next one (this one) would have no bit in its slot's given-up word to
    /// say it gave up, were it to (more than [`crate::core::queue::given_up::WINDOW`] laps of its slot
    /// outstanding). The caller waits for room without a ticket.
    Full(u64),
}

/// What one attempt to take a ticket behind a holder or a queue came to.
enum Behind {
    /// Ticket taken.
    Taken(u64),
    /// The word moved under us: look again.
    Raced,
    /// No room for this ticket (see [`Taken::Full`]).
    Full(u64),
}

/// Takes a ticket for `me`: granted at once by the word if the lock is free and `me` asks for
/// no lease; otherwise a ticket to queue with, `Q` set by the first taker to queue (after it
/// raised `head` to its ticket). Leased grants always live in slots: a leased taker that
/// finds the lock free sets `Q` with its ticket and walks (which pre-grants it) — unless the
/// word carries a death's news (`D`), which a taker killed between those two steps would lose:
/// then it takes the lock fast (the news in its grant), queues behind itself and passes the
/// fast grant on to that ticket with the news.
pub fn take<P: Platform>(st: &LockState<'_>, p: &P, me: &Me) -> Taken {
    debug_assert!(
        !st.is_weighted(),
        "a weighted lock takes its tickets in weighted::admit"
    );
    loop {
        // Acquire: see the module notes.
        let w = st.lock_word(Acquire);
        if w.held() || w.queued() {
            match take_behind(st, w, true) {
                Behind::Taken(t) => return Taken::Queued(t, w.barges()),
                Behind::Raced => continue,
                Behind::Full(t) => return Taken::Full(t),
            }
        }
        if me.lease_ms.is_some() && !w.died() {
            // A leased taker of a free lock with no news to pass on: queue at once (its
            // ticket is pre-granted by the walk; one killed in between leaves a taken,
            // unpublished ticket, which the next walker pre-grants and skips after the grace).
            let t = st.ticket_of(w);
            raise_head(st, t);
            if cas_word(st, w, w.taken().with_queued()) {
                crate::crash_point!("acquire.ticket_taken");
                if lock_word::wraps(w) {
                    refresh_slots(st);
                }
                advance(st, p, t, false);
                return Taken::Queued(t, w.barges());
            }
            continue;
        }
        // Acquire: as in `try_fast`.
        if st
            .header()
            .word
            .compare_exchange(w.0, w.acquired(me.participant).0, Acquire, Relaxed)
            .is_err()
        {
            continue;
        }
        crate::crash_point!("fast.acquired");
        if lock_word::wraps(w) {
            refresh_slots(st);
        }
        let ticket = st.ticket_of(w);
        if me.lease_ms.is_none() {
            publish_hint(st.header(), ticket, me.beacon);
        }
        let first = Grant::of(ticket, w.died(), false, true);
        if me.lease_ms.is_none() {
            return Taken::Fast(first);
        }
        let (t, arrived) = loop {
            // Acquire: as above. The word is held by us, so it is held or queued.
            let w = st.lock_word(Acquire);
            match take_behind(st, w, true) {
                Behind::Taken(t) => break (t, w.barges()),
                Behind::Raced => {}
                Behind::Full(t) => {
                    // No room behind us: pass the fast grant (and its news) on as a release
                    // would, and wait for room like any taker.
                    end_fast(st, p, me.participant, first.ticket, first.died);
                    return Taken::Full(t);
                }
            }
        };
        crate::crash_point!("fast.requeued");
        end_fast(st, p, me.participant, first.ticket, first.died);
        return Taken::Queued(t, arrived);
    }
}

/// Takes a ticket to queue with, whatever the word shows: behind a holder or a queue as
/// [`take`] does; from a free word by setting `Q` at once and walking, which pre-grants the
/// ticket (with the word's died flag). For tests and tools that need a ticket in a slot: the
/// died flag of a free word is lost if the caller dies between the two steps, which is why
/// [`take`] takes a free lock the fast way instead.
pub fn take_queued<P: Platform>(st: &LockState<'_>, p: &P) -> u64 {
    if st.is_weighted() {
        return st.take_ticket();
    }
    loop {
        // Acquire: as in `take`.
        let w = st.lock_word(Acquire);
        if w.held() || w.queued() {
            if let Behind::Taken(t) = take_behind(st, w, false) {
                return t;
            }
            continue;
        }
        let t = st.ticket_of(w);
        raise_head(st, t);
        if cas_word(st, w, w.taken().with_died(false).with_queued()) {
            if lock_word::wraps(w) {
                refresh_slots(st);
            }
            walk(st, p, t, w.died(), None);
            return t;
        }
    }
}

/// One attempt to take a queued ticket from word `w` (held or queued): the first taker to
/// queue raises `head` to its ticket and sets `Q` in its CAS. With `room`, a ticket is taken
/// only if it has room (behind a queue; the first taker to queue always has).
fn take_behind(st: &LockState<'_>, w: LockWord, room: bool) -> Behind {
    let t = st.ticket_of(w);
    if room && w.queued() && !crate::core::queue::given_up::has_room(st, t) {
        return Behind::Full(t);
    }
    let to = if w.queued() {
        w.taken()
    } else {
        // Every ticket before `t` is final or the fast holder's: `head` may be `t`. Before
        // the CAS, so that whoever sees `Q` sees it (Release, paired with walkers' Acquire).
        raise_head(st, t);
        w.taken().with_queued()
    };
    if cas_word(st, w, to) {
        crate::crash_point!("acquire.ticket_taken");
        if lock_word::wraps(w) {
            refresh_slots(st);
        }
        Behind::Taken(t)
    } else {
        Behind::Raced
    }
}

/// Ends fast grant `ticket`, which the word names as `participant`'s: a release that found
/// someone queued behind it (`died` false), or a revocation (`died`: the holder died, gave the
/// lock up as dead, or carried news it must pass on). True if this call ended it; false if
/// the word no longer shows that grant (ended by someone else; or not this one: a later fast
/// grant of the same entry shows another counter, or another `head`).
///
/// A fast grant is told apart from a later one of the same entry by its ticket: while nobody
/// queues the counter is `ticket + 1`; while someone does, `head` is: nothing is granted
/// while a fast holder holds (walks stop at its `H`), so `head` stays at the first queued
/// ticket, which the first taker to queue raised it to.
///
/// Without a queue it is one CAS (`H → 0`, `D = died`). With one, a release clears `H` first
/// and then walks from `head` (a walker that comes after the clear may grant as well); a
/// revocation first grants the first unfinished queued ticket *with* the news (or drains the
/// queue with it) and only then clears `H`, so that the news survives a revoker killed in
/// between (the next recoverer finds the same dead holder and repeats the walk, which finds
/// the grant made and carries nothing further).
pub fn end_fast<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    participant: u32,
    ticket: u64,
    died: bool,
) -> bool {
    if st.is_weighted() {
        // A weighted word is queued for good and never shows a fast holder; one that does
        // (a corrupt file) has no fast grant to end, and its slots are the weighted walk's.
        return false;
    }
    let after = ticket.wrapping_add(1);
    // Each round is a CAS or a walk that lost a race to a taker (a ticket taken meanwhile);
    // only a corrupt file loses this many.
    for _ in 0..MAX_ROUNDS {
        // Acquire: pairs with the CAS that queued (and so with `head`'s raise).
        let w = st.lock_word(Acquire);
        if !w.held() || w.holder() != participant {
            return false;
        }
        if w.barged() {
            // A barge (bounded files), never a grant of ours: barges end through
            // `barge::end_barge`, by their count (a revocation of an earlier fast grant of the
            // same entry would end a sibling thread's live barge here).
            return false;
        }
        if !w.queued() {
            if st.ticket_of(w) != after {
                return false;
            }
            if cas_word(st, w, w.unheld().with_died(died)) {
                crate::crash_point!("fast.ended");
                return true;
            }
            continue;
        }
        // Acquire: after the word (see the module notes).
        let head = st.header().head.load(Acquire);
        if !died {
            if head != after {
                return false;
            }
            if cas_word(st, w, w.unheld()) {
                crate::crash_point!("fast.unheld");
                advance(st, p, head, false);
                return true;
            }
            continue;
        }
        let stopped_at = match walk(st, p, head, true, Some((participant, after))) {
            Walked::Drained => return true,
            Walked::Stopped(Some(h)) => h,
            // Not ours any more, or a ticket was taken while the walk drained: look again.
            Walked::Stopped(None) => continue,
        };
        crate::crash_point!("fast.revoke_granted");
        // The news is in the grant of `stopped_at`: now clear `H`, while the word still shows
        // this grant (`head` where the walk left it; the counter may move under us).
        loop {
            // Acquire: as above.
            let w = st.lock_word(Acquire);
            let head = st.header().head.load(Acquire);
            if !w.held()
                || w.holder() != participant
                || w.barged()
                || !w.queued()
                || head != stopped_at
            {
                return false; // ended by another revoker (who clears `H`)
            }
            if cas_word(st, w, w.unheld()) {
                return true;
            }
        }
    }
    false
}

/// The most rounds [`end_fast`] makes.
const MAX_ROUNDS: u32 = 1 << 20;

/// The ticket of the fast grant the word shows and its holder's entry, if one holds: the
/// ticket before `head` while someone queues, else the one before the counter. For `status`
/// and the fd form's `unlock` (information: a walk may be raising `head` meanwhile).
pub fn fast_holder(st: &LockState<'_>) -> Option<(u64, u32)> {
    // Acquire: as in `end_fast`.
    let w = st.lock_word(Acquire);
    if !w.held() {
        return None;
    }
    let after = if w.queued() {
        // Acquire: after the word.
        st.header().head.load(Acquire)
    } else {
        st.ticket_of(w)
    };
    Some((after.wrapping_sub(1), w.holder()))
}
