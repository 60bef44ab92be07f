//! Recovery: what any acquirer does — a waiter at a bounded rate, a taker polling for its slot,
//! `try_lock` and a timed-out waiter before they answer — to keep the queue moving when a
//! process ahead died, a lease ran out, or a ticket was never claimed.
//!
//! Every action is one CAS on a slot word (or, for a lease takeover, first on the lease field),
//! followed by [`advance()`]; any number of acquirers may recover at once and exactly one CAS
//! wins each step. A recoverer killed between two steps leaves a state the next one finishes:
//! a revoked lease with a `Held` word is completed by `finish_revocation`'s rule, a revoked
//! or skipped word is passed over by `advance`.

use crate::core::WaitError;
use crate::core::exclusive::advance::{advance, cas};
use crate::core::exclusive::fast::{end_fast, fast_holder};
use crate::core::platform::{Liveness, Platform, Tuning};
use crate::core::queue::frontier::{MAX_STEPS, before, step_over_later};
use crate::core::queue::lapped;
use crate::core::robust::leasing::{expired, take_over};
use crate::core::state::layout::LockState;
use crate::core::state::slot_word::{LapRelation, State, Word, relate};
use crate::primitive::Ordering::Acquire;

/// What a [`Watch`] times: (ticket, word, lease field) as observed.
type Key = (u64, u64, u64);

/// One observation: its key, since when (ns), and the last pass that saw it.
#[derive(Clone, Copy, Debug)]
struct Seen {
    key: Key,
    since: u64,
    pass: u64,
}

/// What one acquirer has been watching, to time graces and pending leases locally (no shared
/// clock is trusted for those), and what may make it stop waiting early: a caller's hook,
/// asked after every wake-up (see [`Watch::interruptible`]).
#[derive(Default)]
pub struct Watch<'a> {
    /// What was observed since when: up to four (ticket, word, lease field) keys at once (a
    /// weighted recovery times several granted or unpublished tickets in one pass; one key
    /// would make each reset the other's timer).
    seen: [Option<Seen>; 4],
    /// Recovery passes made so far (see [`Watch::new_pass`]).
    pass: u64,
    interrupt: Option<&'a mut dyn FnMut() -> bool>,
    interrupted: bool,
    /// Tickets of a weighted kind given up to be retaken (see `publish`).
    retakes: u32,
}

impl core::fmt::Debug for Watch<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Watch")
            .field("seen", &self.seen)
            .field("interruptible", &self.interrupt.is_some())
            .field("interrupted", &self.interrupted)
            .finish()
    }
}

/// The longest a waiter with an interrupt hook sleeps between two looks at the hook (it is
/// also asked after every wake-up, a signal's `EINTR` included).
pub const INTERRUPT_POLL_NS: u64 = 50_000_000;

impl<'a> Watch<'a> {
    /// A watch whose waiter gives its ticket up, as at a deadline, once `interrupt()` returns
    /// true. The hook is asked after every wake-up and at least every [`INTERRUPT_POLL_NS`].
    pub fn interruptible(interrupt: &'a mut dyn FnMut() -> bool) -> Watch<'a> {
        Watch {
            interrupt: Some(interrupt),
            ..Watch::default()
        }
    }

    /// Asks the hook (once it said yes, the answer stays yes). True: stop waiting.
    pub(crate) fn interrupted(&mut self) -> bool {
        if !self.interrupted
            && let Some(f) = self.interrupt.as_mut()
        {
            self.interrupted = f();
        }
        self.interrupted
    }

    /// Whether the acquisition may give up one more ticket of a weighted kind to take a new
    /// one: at most `slots` times (a file of `slots` slots has fewer long-held shares than
    /// that, so as many retakes in a row always reach a free slot unless other takers keep
    /// taking the ones in between); counts it if so.
    pub(crate) fn may_retake(&mut self, slots: u64) -> bool {
        let ok = u64::from(self.retakes) < slots.min(u64::from(u32::MAX));
        self.retakes += u32::from(ok);
        ok
    }

    /// Whether sleeps must be bounded by [`INTERRUPT_POLL_NS`].
    pub(crate) fn has_hook(&self) -> bool {
        self.interrupt.is_some()
    }

    /// The error for a waiter that stopped without the lock: interrupted, or timed out.
    pub(crate) fn stopped(&self) -> WaitError {
        if self.interrupted {
            WaitError::Interrupted
        } else {
            WaitError::Timeout
        }
    }

    /// How long the same (ticket, word, lease field) has been observed.
    pub(crate) fn observe(&mut self, key: (u64, u64, u64), now: u64) -> u64 {
        let pass = self.pass;
        if let Some(e) = self.seen.iter_mut().flatten().find(|e| e.key == key) {
            e.pass = pass;
            return now.saturating_sub(e.since);
        }
        // A new observation takes the place of what was seen of the same ticket (which
        // changed), or a free entry, or one no pass saw since the longest (a ticket that was
        // passed), or else — more tickets timed at once than entries — the *newest* timer, so
        // that the longest-watched ones still come to their end (evicting the oldest reset
        // each timer before it expired: five frozen leased grantees were never passed, second
        // review).
        let i = self
            .seen
            .iter()
            .position(|e| e.is_some_and(|e| e.key.0 == key.0))
            .or_else(|| self.seen.iter().position(Option::is_none))
            .or_else(|| {
                (0..self.seen.len())
                    .filter(|&i| self.seen[i].is_some_and(|e| e.pass != pass))
                    .min_by_key(|&i| self.seen[i].map_or(0, |e| e.pass))
            })
            .unwrap_or_else(|| {
                (0..self.seen.len())
                    .max_by_key(|&i| self.seen[i].map_or(0, |e| e.since))
                    .unwrap_or(0)
            });
        self.seen[i] = Some(Seen {
            key,
            since: now,
            pass,
        });
        0
    }

    /// A recovery pass begins: observations not repeated from now on belong to tickets that
    /// were passed, and may make way for new ones.
    pub(crate) fn new_pass(&mut self) {
        self.pass = self.pass.wrapping_add(1);
    }
}

/// What stands between an acquirer and the lock after a [`recover`] pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ahead {
    /// Every ticket before `me` is final: `me` was granted (or pre-granted) by this pass or
    /// earlier, or is about to be.
    Clear,
    /// A live holder, grantee or waiter is ahead.
    Busy,
    /// The first unfinished ticket ahead is a grant in advance (`Ready`) that its taker has not
    /// claimed; observed for this many ns, less than the grace (it is skipped after that).
    Unclaimed(u64),
}

/// Looks at the tickets before ticket `me` (ours, or for `try_lock` the next one to be taken)
/// and fixes what is stuck:
///
/// * a holder (`Held`) whose process is dead is revoked; one whose lease expired is taken
///   over (lease CAS, then word CAS);
/// * a granted or waiting ticket whose process is dead is skipped; a granted one with a lease
///   that stayed unclaimed for its whole lease (its owner is frozen) is skipped too;
/// * a ticket granted in advance (`Ready`) whose taker has not claimed it within the grace is
///   skipped (the taker presumably died between taking the ticket and publishing it);
/// * a first live ticket that somebody forgot to grant (its advancer died) is granted.
///
/// It goes on walking after each fix — a run of dead tickets is cleared in one pass — and
/// starts from `head` however far behind that is (see [`crate::core::queue::frontier`]).
pub fn recover<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    me: u64,
    watch: &mut Watch<'_>,
    tuning: &Tuning,
) -> Ahead {
    watch.new_pass();
    if st.is_weighted() {
        return crate::core::weighted::walk::recover(st, p, me, watch, tuning);
    }
    // Acquire: pairs with the CAS that set `Q` (see `fast`); `head` is loaded after it.
    let mut lw = st.lock_word(Acquire);
    if lw.held() && lw.barged() {
        // A barge (bounded files): the word is read before its entry is judged, and the
        // revocation is a CAS from exactly that word.
        if p.liveness(lw.holder()) != Liveness::Dead {
            return Ahead::Busy;
        }
        if crate::core::exclusive::barge::revoke_seen(st, p, lw) {
            crate::crash_point!("recover.barge_revoked");
        }
        // Acquire: as above.
        lw = st.lock_word(Acquire);
    }
    if lw.held() {
        // A fast holder is ahead of every queued ticket: it holds, unless it is dead. The grant
        // (its ticket and entry) is read *before* its owner is judged, so that the revocation
        // below acts on that very grant: judged first, a later fast grant of the same entry's
        // next, live owner was revoked (two holders: review finding).
        let Some((t, holder)) = fast_holder(st) else {
            return Ahead::Busy; // changed under us: look again
        };
        if p.liveness(holder) != Liveness::Dead {
            return Ahead::Busy;
        }
        if end_fast(st, p, holder, t, true) {
            crate::crash_point!("recover.fast_revoked");
        }
        // Acquire: as above.
        lw = st.lock_word(Acquire);
        if lw.held() {
            return Ahead::Busy; // another fast holder, or ours not ended yet: look again
        }
    }
    if !lw.queued() {
        return Ahead::Clear; // nobody holds, nobody queues
    }
    // Acquire: after the word.
    let start = st.header().head.load(Acquire);
    if !before(start, me) {
        // Nothing ahead (or a head beyond us: then we are final or granted already).
        advance(st, p, start, false);
        return Ahead::Clear;
    }
    let mut h = start;
    for _ in 0..MAX_STEPS {
        if h == me {
            // Everything ahead of us is final. Either a step above already granted us, or
            // nobody did (whoever should have advanced died first, or the file was just
            // initialised): grant through `advance`, which stops at once if we are granted.
            advance(st, p, start, false);
            return Ahead::Clear;
        }
        let slot = st.slot(h);
        let lap = st.lap(h);
        // Acquire: see `advance`.
        let w = Word(slot.word.load(Acquire));
        let Some(state) = w.state() else {
            return Ahead::Busy;
        };
        match relate(w.lap(), lap) {
            LapRelation::Later => {
                h = step_over_later(st, h, w, Some(me));
                continue;
            }
            LapRelation::Previous | LapRelation::Behind if state.is_final() => {
                // Ticket `h` is taken but unpublished and everything before it is final: it
                // should be granted in advance. Help (from `start`, to carry the died flag),
                // then look at it again.
                advance(st, p, start, false);
                // Acquire: as the load above; only to see whether the help changed anything.
                if Word(slot.word.load(Acquire)) == w {
                    return Ahead::Busy; // could not (a corrupt file); do not spin
                }
                continue;
            }
            LapRelation::Previous | LapRelation::Behind => return Ahead::Busy,
            LapRelation::Same => {}
        }
        let dead = || p.liveness(w.participant()) == Liveness::Dead;
        match state {
            State::Done | State::Abandoned | State::Skipped | State::Revoked => {
                h = h.wrapping_add(1);
            }
            State::Waiting | State::Sleeping => {
                if dead() {
                    if cas(slot, w, w.with_state(State::Skipped)) {
                        h = h.wrapping_add(1);
                    }
                    continue;
                }
                // A live waiter ahead of us: if it is first in line it must be granted.
                advance(st, p, start, false);
                return Ahead::Busy;
            }
            State::Granted => {
                if dead() {
                    if cas(slot, w, w.with_state(State::Skipped)) {
                        crate::crash_point!("recover.skipped");
                        advance(st, p, h, false);
                    }
                    // Look at `h` again (now final, or changed by someone else), then beyond.
                    continue;
                }
                match w.leased().then(|| expired(st, p, h, w, watch)).flatten() {
                    Some(f) => take_over(st, p, h, w, f),
                    None => return Ahead::Busy,
                }
            }
            State::Ready => {
                let next = st.next_ticket();
                if !before(h, next) {
                    return Ahead::Busy; // not taken yet: only a corrupt file shows it here
                }
                // Its taker, once lapped, may have left word that it gave up or died.
                let unclaimed = watch.observe((h, w.0, 0), p.now_ns());
                if unclaimed < tuning.grace_ns && !lapped::gone(slot, lap, p) {
                    return Ahead::Unclaimed(unclaimed);
                }
                if cas(slot, w, w.with_state(State::Skipped)) {
                    advance(st, p, h, false);
                }
            }
            State::Held => {
                if dead() {
                    if cas(slot, w, w.with_state(State::Revoked)) {
                        crate::crash_point!("recover.revoked");
                        advance(st, p, h, false);
                    }
                    continue; // as for a dead grantee
                }
                match w.leased().then(|| expired(st, p, h, w, watch)).flatten() {
                    Some(f) => take_over(st, p, h, w, f),
                    None => return Ahead::Busy,
                }
            }
        }
    }
    Ahead::Busy
}
