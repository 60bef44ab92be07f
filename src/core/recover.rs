//! Recovery: what a waiter does, at a bounded rate, to keep the queue moving when a process
//! ahead of it died, a lease ran out, or a ticket was never claimed.
//!
//! Every action is one CAS on a slot word (or, for a lease takeover, first on the lease field),
//! followed by [`advance()`]; any number of waiters may recover at once and exactly one CAS
//! wins each step. A recoverer killed between two steps leaves a state the next one finishes:
//! a revoked lease with a `Held` word is completed by `finish_revocation`'s rule, a revoked
//! or skipped word is passed over by `advance`.

use super::advance::{advance, cas};
use super::layout::LockState;
use super::lease::Lease;
use super::platform::{Liveness, Platform, Tuning};
use super::word::{LapRelation, State, Word, relate};
use crate::primitive::Ordering::{AcqRel, Acquire, Relaxed};

/// What one waiter has been watching, to time graces and pending leases locally (no shared
/// clock is trusted for those).
#[derive(Default, Debug)]
pub struct Watch {
    seen: Option<(u64, u64, u64)>,
    since_ns: u64,
}

impl Watch {
    /// How long the same (ticket, word, lease) has been observed.
    fn observe(&mut self, key: (u64, u64, u64), now: u64) -> u64 {
        if self.seen != Some(key) {
            self.seen = Some(key);
            self.since_ns = now;
        }
        now.saturating_sub(self.since_ns)
    }
}

/// Looks at the tickets ahead of our ticket `me` and fixes what is stuck:
///
/// * a holder (`Held`) whose process is dead is revoked; one whose lease expired is taken
///   over (lease CAS, then word CAS);
/// * a granted or waiting ticket whose process is dead is skipped;
/// * a ticket granted in advance (`Ready`) whose taker has not claimed it within the grace is
///   skipped (the taker presumably died between taking the ticket and publishing it);
/// * a first live ticket that somebody forgot to grant (its advancer died) is granted.
///
/// After revoking a dead holder or skipping a dead grantee it goes on walking: the grant that
/// `advance` just made may have gone to another dead waiter, and a run of dead tickets is
/// cleared in one pass instead of one per poll (the waiter nudged behind a dead grantee may be
/// dead too, and the live one after it may be parked on its long idle poll).
pub fn recover<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    me: u64,
    watch: &mut Watch,
    tuning: &Tuning,
) {
    let start = st.header().head.load(Relaxed);
    // A consistent head is behind us by the tickets ahead of us; a wild one is ignored.
    if me.wrapping_sub(start) > super::advance::MAX_WALK {
        return;
    }
    let mut h = start;
    let mut steps: u64 = 0;
    while h != me {
        // Each step passes a ticket or follows a change another process made to it; a
        // consistent file needs at most a few per ticket ahead of us.
        steps += 1;
        if steps > 4 * super::advance::MAX_WALK {
            return;
        }
        let slot = st.slot(h);
        let lap = st.lap(h);
        // Acquire: see `advance`.
        let w = Word(slot.word.load(Acquire));
        let Some(state) = w.state() else { return };
        match relate(w.lap(), lap) {
            LapRelation::Later => {
                h = h.wrapping_add(1);
                continue;
            }
            LapRelation::Previous if state.is_final() => {
                // Ticket `h` is taken but unpublished and everything before it is final: it
                // should be granted in advance. Help (from `start`, to carry the died flag).
                advance(st, p, start, false);
                return;
            }
            LapRelation::Previous | LapRelation::Behind => return,
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
                return;
            }
            State::Granted => {
                if !dead() {
                    return;
                }
                if cas(slot, w, w.with_state(State::Skipped)) {
                    crate::crash_point!("recover.skipped");
                    advance(st, p, h, false);
                }
                // Look at `h` again (now final, or changed by someone else), then beyond.
                continue;
            }
            State::Ready => {
                let next = st.header().next_ticket.load(Relaxed);
                let taken = next.wrapping_sub(h).wrapping_sub(1) < (1 << 40);
                if taken {
                    let unclaimed = watch.observe((h, w.0, 0), p.now_ns());
                    if unclaimed >= tuning.grace_ns && cas(slot, w, w.with_state(State::Skipped)) {
                        advance(st, p, h, false);
                    }
                }
                return;
            }
            State::Held => {
                if dead() {
                    if cas(slot, w, w.with_state(State::Revoked)) {
                        crate::crash_point!("recover.revoked");
                        advance(st, p, h, false);
                    }
                    continue; // as for a dead grantee
                }
                let raw = slot.lease.load(Acquire);
                let now = p.now_ns();
                let expired = match Lease::decode(raw, lap) {
                    Lease::Until(ms) => now / 1_000_000 >= ms,
                    Lease::Pending(ms) => {
                        watch.observe((h, w.0, raw), now) >= ms.saturating_mul(1_000_000)
                    }
                    Lease::Revoked => true,
                    Lease::None | Lease::Unwritten => false,
                };
                if expired {
                    take_over(st, p, h, w, raw);
                }
                return;
            }
        }
    }
    // Everything ahead of us is final. Either a step above already granted us, or nobody did
    // (whoever should have advanced died first, or the file was just initialised): grant
    // ourselves through `advance`, which stops at once if we are granted.
    advance(st, p, start, false);
}

/// Lease takeover of ticket `h`: revoke the lease (the CAS an extension races), then the word,
/// then grant the next ticket with the died flag.
fn take_over<P: Platform>(st: &LockState<'_>, p: &P, h: u64, w: Word, raw: u64) {
    let slot = st.slot(h);
    let lap = st.lap(h);
    let revoked = Lease::Revoked.encode(lap);
    if raw != revoked
        && slot
            .lease
            .compare_exchange(raw, revoked, AcqRel, Acquire)
            .is_err()
    {
        return; // extended or released meanwhile: look again next time
    }
    crate::crash_point!("takeover.lease_revoked");
    if cas(slot, w, w.with_state(State::Revoked)) {
        crate::crash_point!("takeover.revoked");
    }
    advance(st, p, h, false);
}
