//! The exclusive lock's walk (its [`crate::core::advance::advance`]): passes the lock on to
//! the next ticket. Run by release, timeout clean-up and recovery; idempotent, and anyone may
//! run it at any time.

use crate::core::platform::Platform;
use crate::core::queue::frontier::{MAX_STEPS, before, raise_head, step_over_later};
use crate::core::queue::given_up::given_up;
use crate::core::queue::lapped;
use crate::core::state::format::cas;
use crate::core::state::lock_state::cas_word;
use crate::core::state::lock_word::LockWord;
use crate::core::state::slot_word::{LapRelation, State, Word, relate};
use crate::core::state::{LockState, Slot};
use crate::primitive::Ordering::{Acquire, Relaxed, SeqCst};
use crate::primitive::fence;

/// How a [`walk`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Walked {
    /// Every ticket before the counter was final: the walk drained the queue (`Q → 0`, the
    /// fast holder it was ending cleared, `D` = the died flag it carried).
    Drained,
    /// It granted, pre-granted or found granted the ticket it names, or had nothing to do
    /// (`None`).
    Stopped(Option<u64>),
}

/// The exclusive lock's [`advance`](crate::core::advance::advance), and the walk that ends a dead fast holder's grant: `ending` names that
/// holder's entry and the first queued ticket behind it (`head` while it holds), and the walk
/// acts only while the word still shows that grant; any other fast holder stops a walk
/// (nothing is granted while one holds).
///
/// The walk acts only while the lock word shows `Q` (the slots are authoritative only then)
/// and goes no further than the counter it read: a ticket before it that nobody published yet
/// is taken and is pre-granted; at the counter itself every ticket is final, and the walk
/// drains the queue with one CAS on the word (which fails, and is looked at again, if a ticket
/// was taken meanwhile). It starts no earlier than `head` as loaded after the word, so it
/// never walks the slots of fast tickets.
pub fn walk<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    from: u64,
    mut died: bool,
    ending: Option<(u32, u64)>,
) -> Walked {
    debug_assert!(!st.is_weighted(), "a weighted lock walks in weighted::walk");
    let may_walk = |w: LockWord, head: u64| match ending {
        None => w.queued() && !w.held(),
        Some((e, first)) => {
            w.queued() && w.held() && !w.barged() && w.holder() == e && head == first
        }
    };
    // Acquire: pairs with the CAS that set `Q` (made after `head` was raised to the queue's
    // first ticket) and with every later CAS on the word.
    let mut lw = st.lock_word(Acquire);
    // Acquire: after the word; every ticket before `head` is final (or the fast holder's).
    let head = st.header().head.load(Acquire);
    if !may_walk(lw, head) {
        return Walked::Stopped(None);
    }
    let mut next = st.ticket_of(lw);
    let mut h = from;
    if before(h, head) {
        // Every ticket before `head` is final and its news passed on: by the grant at `head`,
        // or by a drain's `D` (a queue's first taker raises `head` without granting anything).
        h = head;
        died = false;
    }
    for _ in 0..MAX_STEPS {
        if h == next {
            // Every ticket before the counter is final: nobody waits. Drain the queue.
            if cas_word(st, lw, lw.drained(died)) {
                crate::crash_point!("advance.drained");
                return Walked::Drained;
            }
            // Acquire: as above.
            lw = st.lock_word(Acquire);
            // The queue we walked may have drained and a new one begun: not before its head.
            let head = st.header().head.load(Acquire);
            if ending.is_some() || !may_walk(lw, head) {
                // (An ending walk that reached the counter while tickets were being taken
                // starts again from its caller, which checks the grant is still there.)
                return Walked::Stopped(None);
            }
            next = st.ticket_of(lw);
            if before(h, head) {
                // As at the start: the news we carried went into the drain that beat ours (a
                // jump keeping it told a death twice).
                h = head;
                died = false;
            }
            continue;
        }
        if !before(h, next) {
            return Walked::Stopped(None); // beyond the counter: only a corrupt file
        }
        let slot = st.slot(h);
        let lap = st.lap(h);
        // Acquire: pairs with the Release CAS (or store) that made this word final (a release,
        // abandon, skip or revoke), so the grant we make below carries the previous critical
        // section.
        let w = Word(slot.word.load(Acquire));
        let Some(state) = w.state() else {
            return Walked::Stopped(None);
        };
        match relate(w.lap(), lap) {
            LapRelation::Same => match state {
                State::Done => {
                    died = false;
                    h = h.wrapping_add(1);
                }
                State::Abandoned => h = h.wrapping_add(1),
                State::Skipped | State::Revoked => {
                    died |= state == State::Revoked || w.died();
                    h = h.wrapping_add(1);
                }
                State::Waiting | State::Sleeping => {
                    // The leased flag stays: it binds the lease field to this ticket.
                    let granted = w.with_state(State::Granted).with_died(died);
                    if cas(slot, w, granted) {
                        // Before the wake: the woken holder may release and raise it further.
                        raise_head(st, h);
                        crate::crash_point!("advance.granted");
                        if state == State::Sleeping {
                            p.wake(&slot.word);
                        }
                        wake_successor(st, p, h.wrapping_add(1));
                        return Walked::Stopped(Some(h));
                    }
                }
                State::Ready | State::Granted | State::Held => {
                    raise_head(st, h);
                    return Walked::Stopped(Some(h));
                }
            },
            // Ticket `h` is taken (before the counter) and not yet published: its slot still
            // shows an earlier lap, final — the previous one, or one several laps back when
            // the tickets in between were fast ones that never touched the slot.
            LapRelation::Previous | LapRelation::Behind if state.is_final() => {
                // A lapped taker that gave up or died (its record says so) is passed at once.
                // The word we replace may be the previous lap's `Revoked` (or died-`Skipped`),
                // the only place a death's news lives until a grant passed it: the `Skipped`
                // we write carries our `died` on, for any walker that comes this way after us
                // (one killed right after this CAS must not lose it). Our `died` already holds
                // that news if it is still unreported: a walk starts at `head` or just after a
                // granted ticket, so it reaches `h` with `h − N`'s death unreported only if it
                // passed `h − N` itself. (Adding the replaced word's own flag reported deaths
                // that a grant had already reported to a later, cleanly released holder.)
                if lapped::gone(slot, lap, p) {
                    if cas(slot, w, Word::new(lap, 0, State::Skipped, died)) {
                        h = h.wrapping_add(1);
                    }
                    continue;
                }
                if pregrant(st, slot, w, h, died) {
                    // A Dekker pair with a lapped taker that gives up (`given_up`): our
                    // pre-grant, then its bit; its bit, then our word. If it gave up after
                    // all, its pre-grant is passed (by us, or by it: one CAS wins).
                    fence(SeqCst);
                    if given_up(slot, lap) {
                        let ready = Word::new(lap, 0, State::Ready, died);
                        let _ = cas(slot, ready, ready.with_state(State::Skipped));
                        continue; // look at `h` again: now final
                    }
                    raise_head(st, h);
                    return Walked::Stopped(Some(h));
                }
            }
            // A final ticket whose slot a later lap already reuses: jump if that one was
            // granted, else step.
            LapRelation::Later => h = step_over_later(st, h, w, Some(next)),
            // The previous lap still uses the slot although every ticket before `h` is final:
            // only a corrupt file does that. Leave it.
            LapRelation::Previous | LapRelation::Behind => return Walked::Stopped(None),
        }
    }
    Walked::Stopped(None)
}

/// Grants ticket `h` in advance: its slot still shows `prev`, the previous lap's final word.
/// True if our CAS made it `Ready`; false if someone else changed it.
#[inline(always)]
fn pregrant(st: &LockState<'_>, slot: &Slot, prev: Word, h: u64, died: bool) -> bool {
    if !cas(slot, prev, Word::new(st.lap(h), 0, State::Ready, died)) {
        return false;
    }
    crate::crash_point!("advance.ready");
    true
}

/// Nudges the first waiter behind a fresh grant so it starts spinning before the lock comes
/// free (the early wake of TWA): `Sleeping → Waiting` and a futex wake. Looks past a few final
/// tickets at most.
pub(crate) fn wake_successor<P: Platform>(st: &LockState<'_>, p: &P, from: u64) {
    // The other half of the Dekker pair in `wait_for_grant` (our CAS made the ticket ahead of
    // `from` final or granted; the sleeper made its word `Sleeping`, then re-read that one).
    crate::primitive::fence(crate::primitive::Ordering::SeqCst);
    for k in 0..4u64 {
        let t = from.wrapping_add(k);
        let slot = st.slot(t);
        // Relaxed: this only decides whether to wake; the woken waiter re-reads with Acquire.
        let w = Word(slot.word.load(Relaxed));
        if relate(w.lap(), st.lap(t)) != LapRelation::Same {
            return;
        }
        match w.state() {
            Some(State::Sleeping) => {
                if cas(slot, w, w.with_state(State::Waiting)) {
                    p.wake(&slot.word);
                }
                return;
            }
            Some(s) if s.is_final() => continue,
            _ => return,
        }
    }
}
