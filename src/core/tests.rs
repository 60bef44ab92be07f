//! Deterministic tests of the algorithm on heap memory with the scripted platform.

use super::*;
#[allow(unused_imports)]
use crate::core::exclusive::{advance, barge, fast};
use crate::core::model::ModelPlatform;
#[allow(unused_imports)]
use crate::core::queue::{claim, frontier, given_up, lapped, publish};
#[allow(unused_imports)]
use crate::core::robust::{cleanup, leasing, recover};
use crate::core::state::slot_word::{LapRelation, relate};
#[allow(unused_imports)]
use crate::core::state::{self as layout, lease, lock_word, slot_word as word};
#[allow(unused_imports)]
use crate::core::{acquire as wait, release as holder, weighted::walk as weighted};
use crate::primitive::Ordering::Relaxed;

fn me(participant: u32) -> Me {
    Me {
        participant,
        tid: 100 + participant,
        lease_ms: None,
        shared: false,
        beacon: 0,
    }
}

fn word(st: &LockState<'_>, t: u64) -> Word {
    Word(st.slot(t).word.load(Relaxed))
}

fn state_of(st: &LockState<'_>, t: u64) -> Option<State> {
    let w = word(st, t);
    (relate(w.lap(), st.lap(t)) == LapRelation::Same)
        .then(|| w.state())
        .flatten()
}

/// Publishes a waiter for the next ticket without blocking: lock with a deadline already past
/// would abandon, so use the internal pieces: take the ticket and CAS the slot to Waiting.
fn hold_in_slot(st: &LockState<'_>, p: &ModelPlatform, participant: u32) -> Grant {
    let t = fast::take_queued(st, p);
    let g = lock_watched(
        st,
        p,
        &me(participant),
        None,
        &Tuning::default(),
        Some(t),
        Watch::default(),
    )
    .unwrap();
    assert!(!g.fast);
    g
}

/// Takes a ticket and gives it up at once (a deadline already past), as a timed-out waiter
/// does — not `lock` with that deadline, which makes one try without a ticket.
fn time_out<P: Platform>(st: &LockState<'_>, p: &P, participant: u32) -> Result<Grant, WaitError> {
    wait::lock_queued(
        st,
        p,
        &me(participant),
        Some(0),
        &Tuning::default(),
        None,
        Watch::default(),
    )
}

/// A ticket queued behind whoever holds.
fn enqueue(st: &LockState<'_>, participant: u32) -> u64 {
    let t = fast::take_queued(st, &ModelPlatform::new(1));
    let slot = st.slot(t);
    let w = Word(slot.word.load(Relaxed));
    assert_eq!(relate(w.lap(), st.lap(t)), LapRelation::Previous);
    let waiting = Word::new(st.lap(t), participant, State::Waiting, false);
    slot.word
        .compare_exchange(w.0, waiting.0, Relaxed, Relaxed)
        .unwrap();
    t
}

#[test]
fn uncontended_tokens_increase_by_one() {
    let o = OwnedState::new(4, 4);
    let st = o.view();
    let p = ModelPlatform::new(1);
    for i in 0..20u64 {
        let g = lock(&st, &p, &me(1), None, &Tuning::default()).unwrap();
        assert_eq!(g.token(), i + 1);
        assert!(!g.died);
        release(&st, &p, &g, 1).unwrap();
    }
}

#[test]
fn try_lock_never_jumps_a_queue() {
    let o = OwnedState::new(8, 4);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let g = lock(&st, &p, &me(1), None, &Tuning::default()).unwrap();
    assert_eq!(try_lock(&st, &p, &me(2), &Tuning::default()).unwrap(), None);
    let t = enqueue(&st, 3);
    release(&st, &p, &g, 1).unwrap();
    assert_eq!(state_of(&st, t), Some(State::Granted));
    // The lock is granted to the queued waiter, not free: try_lock still fails.
    assert_eq!(try_lock(&st, &p, &me(2), &Tuning::default()).unwrap(), None);
}

#[test]
fn dead_holder_is_revoked_and_next_is_told() {
    let o = OwnedState::new(8, 4);
    let st = o.view();
    let p = ModelPlatform::new(1_000);
    let g = hold_in_slot(&st, &p, 1);
    let t = enqueue(&st, 2);
    p.set_dead(1, true);
    let mut watch = Watch::default();
    recover::recover(&st, &p, t, &mut watch, &Tuning::default());
    assert_eq!(state_of(&st, g.ticket), Some(State::Revoked));
    let w = word(&st, t);
    assert_eq!(w.state(), Some(State::Granted));
    assert!(w.died());
    assert_eq!(release(&st, &p, &g, 1), Err(Lost));
}

#[test]
fn dead_waiter_is_skipped() {
    let o = OwnedState::new(8, 4);
    let st = o.view();
    let p = ModelPlatform::new(1_000);
    let g = lock(&st, &p, &me(1), None, &Tuning::default()).unwrap();
    let dead = enqueue(&st, 2);
    let live = enqueue(&st, 3);
    p.set_dead(2, true);
    release(&st, &p, &g, 1).unwrap();
    // The release granted the dead waiter; the next one's recovery skips it.
    assert_eq!(state_of(&st, dead), Some(State::Granted));
    recover::recover(&st, &p, live, &mut Watch::default(), &Tuning::default());
    assert_eq!(state_of(&st, dead), Some(State::Skipped));
    assert_eq!(state_of(&st, live), Some(State::Granted));
}

#[test]
fn unclaimed_pre_grant_is_skipped_after_the_grace_only() {
    let o = OwnedState::new(8, 4);
    let st = o.view();
    let p = ModelPlatform::new(0);
    let tuning = Tuning::default();
    // Ticket 0 is taken but its taker "dies" before claiming the advance grant.
    let t0 = fast::take_queued(&st, &p);
    let t1 = enqueue(&st, 2);
    let mut watch = Watch::default();
    recover::recover(&st, &p, t1, &mut watch, &tuning);
    assert_eq!(state_of(&st, t0), Some(State::Ready));
    p.advance(tuning.grace_ns - 1);
    recover::recover(&st, &p, t1, &mut watch, &tuning);
    assert_eq!(state_of(&st, t0), Some(State::Ready));
    p.advance(1);
    recover::recover(&st, &p, t1, &mut watch, &tuning);
    assert_eq!(state_of(&st, t0), Some(State::Skipped));
    assert_eq!(state_of(&st, t1), Some(State::Granted));
}

#[test]
fn timeout_abandons_and_the_queue_moves_on() {
    let o = OwnedState::new(8, 4);
    let st = o.view();
    let p = ModelPlatform::new(1_000_000);
    let tuning = Tuning::default();
    let g = lock(&st, &p, &me(1), None, &tuning).unwrap();
    let deadline = p.now_ns() + 5_000_000;
    assert_eq!(
        lock(&st, &p, &me(2), Some(deadline), &tuning),
        Err(WaitError::Timeout)
    );
    let behind = enqueue(&st, 3);
    release(&st, &p, &g, 1).unwrap();
    assert_eq!(state_of(&st, behind), Some(State::Granted));
}

#[test]
fn lease_takeover_beats_a_late_extend_and_tokens_rise() {
    let o = OwnedState::new(8, 4);
    let st = o.view();
    let p = ModelPlatform::new(0);
    let tuning = Tuning::default();
    let leased = Me {
        lease_ms: Some(100),
        ..me(1)
    };
    let g = lock(&st, &p, &leased, None, &tuning).unwrap();
    assert!(g.leased);
    let t = enqueue(&st, 2);
    let mut watch = Watch::default();
    recover::recover(&st, &p, t, &mut watch, &tuning);
    assert_eq!(
        state_of(&st, g.ticket),
        Some(State::Held),
        "not expired yet"
    );
    // Extension in time moves the deadline.
    p.advance(90_000_000);
    extend(&st, &p, g.ticket, 1, 100).unwrap();
    p.advance(90_000_000);
    recover::recover(&st, &p, t, &mut watch, &tuning);
    assert_eq!(state_of(&st, g.ticket), Some(State::Held), "extended");
    p.advance(20_000_000);
    recover::recover(&st, &p, t, &mut watch, &tuning);
    assert_eq!(state_of(&st, g.ticket), Some(State::Revoked));
    let w = word(&st, t);
    assert_eq!(w.state(), Some(State::Granted));
    assert!(w.died());
    assert_eq!(check(&st, &p, &g, 1), Err(Lost));
    assert_eq!(extend(&st, &p, g.ticket, 1, 100), Err(Lost));
    assert_eq!(release(&st, &p, &g, 1), Err(Lost));
    assert!(t + 1 > g.token());
}

#[test]
fn revoke_own_hands_over_with_died_flag() {
    let o = OwnedState::new(8, 4);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let g = lock(&st, &p, &me(1), None, &Tuning::default()).unwrap();
    let t = enqueue(&st, 2);
    revoke_own(&st, &p, &g, 1).unwrap();
    assert!(word(&st, t).died());
    assert_eq!(word(&st, t).state(), Some(State::Granted));
}

#[test]
fn more_waiters_than_slots_in_threads() {
    // Fewer rounds under Miri, which runs this some 1000× slower.
    const ROUNDS: u64 = if cfg!(miri) { 10 } else { 300 };
    let o = OwnedState::new(2, 8);
    let p = ModelPlatform::new(1);
    let counter = std::sync::atomic::AtomicU64::new(0);
    let last = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for i in 0..6u32 {
            let (o, p, counter, last) = (&o, &p, &counter, &last);
            s.spawn(move || {
                let st = o.view();
                for _ in 0..ROUNDS {
                    // A short spin: the scripted clock advances 1 ns per reading.
                    let tuning = Tuning {
                        spin_ns: 100,
                        ..Tuning::default()
                    };
                    let g = lock(&st, p, &me(i), None, &tuning).unwrap();
                    assert!(last.swap(g.token(), Relaxed) < g.token());
                    let v = counter.load(Relaxed);
                    std::thread::yield_now();
                    counter.store(v + 1, Relaxed);
                    release(&st, p, &g, i).unwrap();
                }
            });
        }
    });
    assert_eq!(counter.load(Relaxed), 6 * ROUNDS);
}

#[test]
fn garbage_words_never_panic() {
    let o = OwnedState::new(4, 4);
    let st = o.view();
    let p = ModelPlatform::new(1_000_000);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    // Fewer rounds under Miri, which runs these some 1000× slower.
    let rounds = if cfg!(miri) { 20 } else { 300 };
    for round in 0..rounds {
        for t in 0..4u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            st.slot(t).word.store(x, Relaxed);
            st.slot(t).lease.store(x.rotate_left(17), Relaxed);
        }
        st.header().head.store(x.rotate_left(5), Relaxed);
        if round % 2 == 0 {
            st.header().word.store(x.rotate_left(9), Relaxed);
        }
        let deadline = Some(p.now_ns() + 3_000_000);
        let _ = lock(&st, &p, &me(1), deadline, &Tuning::default());
        let _ = try_lock(&st, &p, &me(1), &Tuning::default());
        advance(&st, &p, x.rotate_left(3), false);
        recover::recover(
            &st,
            &p,
            x.rotate_left(11),
            &mut Watch::default(),
            &Tuning::default(),
        );
    }
}

/// Regression: a taker whose ticket was skipped after the grace (it stalled between taking the
/// ticket and publishing) must queue again with a new ticket, not retry the old one until it
/// reports corruption.
#[test]
fn taker_skipped_after_the_grace_queues_again() {
    let o = OwnedState::new(8, 4);
    let st = o.view();
    let p = ModelPlatform::new(0);
    let tuning = Tuning::default();
    let stalled = fast::take_queued(&st, &p);
    let t1 = enqueue(&st, 2);
    let mut watch = Watch::default();
    recover::recover(&st, &p, t1, &mut watch, &tuning);
    p.advance(tuning.grace_ns);
    recover::recover(&st, &p, t1, &mut watch, &tuning);
    assert_eq!(state_of(&st, stalled), Some(State::Skipped));
    // Waiter 2 claims and releases; then the stalled taker resumes.
    let w = word(&st, t1);
    st.slot(t1)
        .word
        .compare_exchange(w.0, w.with_state(State::Held).0, Relaxed, Relaxed)
        .unwrap();
    let g1 = Grant::of(t1, false, false, false);
    release(&st, &p, &g1, 2).unwrap();
    let deadline = Some(p.now_ns() + 1);
    let g = lock_watched(
        &st,
        &p,
        &me(1),
        deadline,
        &tuning,
        Some(stalled),
        Watch::default(),
    )
    .unwrap();
    assert!(
        g.ticket > t1,
        "queued again behind the ticket that overtook it"
    );
}

/// The uncontended path is one CAS each way on the lock word: no slot, no `head` written.
#[test]
fn uncontended_lock_and_release_touch_only_the_lock_word() {
    let o = OwnedState::new(4, 4);
    let st = o.view();
    let p = ModelPlatform::new(1);
    for i in 0..10u64 {
        let g = lock(&st, &p, &me(1), None, &Tuning::default()).unwrap();
        assert!(g.fast && g.ticket == i && !g.died);
        let w = st.lock_word(Relaxed);
        assert!(w.held() && !w.queued() && w.holder() == 1, "{w:?}");
        assert_eq!(release_unleased_fast(&st, g.ticket, 1, true), Some(true));
        assert_eq!(
            st.lock_word(Relaxed),
            lock_word::LockWord::initial(i + 1, false)
        );
    }
    for t in 0..4 {
        assert_eq!(word(&st, t).0, 0, "slot {t} written");
    }
    assert_eq!(st.header().head.load(Relaxed), 0);
}

/// A fast release that finds someone queued behind it hands the lock over through the slot.
#[test]
fn fast_release_hands_over_to_a_queued_waiter() {
    let o = OwnedState::new(4, 4);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let g = lock(&st, &p, &me(1), None, &Tuning::default()).unwrap();
    let t = enqueue(&st, 2);
    assert_eq!(t, g.ticket + 1);
    assert_eq!(
        st.header().head.load(Relaxed),
        t,
        "the first queuer raised head"
    );
    assert_eq!(release_unleased_fast(&st, g.ticket, 1, true), Some(false));
    finish_unleased_release(&st, &p, g.ticket, 1, true, Some(false), None).unwrap();
    assert_eq!(state_of(&st, t), Some(State::Granted));
    assert!(!word(&st, t).died());
    assert!(!st.lock_word(Relaxed).held());
}

/// A fast grant revoked as dead is left alone by its holder's release: the CAS fails, and the
/// full release reports the loss without writing anything.
#[test]
fn fast_release_changes_nothing_when_the_grant_is_not_ours() {
    let o = OwnedState::new(8, 4);
    let st = o.view();
    let p = ModelPlatform::new(1_000);
    let g = lock(&st, &p, &me(1), None, &Tuning::default()).unwrap();
    let t = enqueue(&st, 2);
    p.set_dead(1, true);
    let mut watch = Watch::default();
    recover::recover(&st, &p, t, &mut watch, &Tuning::default());
    assert!(!st.lock_word(Relaxed).held());
    assert_eq!(state_of(&st, t), Some(State::Granted));
    assert!(word(&st, t).died());
    let before: Vec<u64> = (0..8).map(|i| word(&st, i).0).collect();
    let lw = st.lock_word(Relaxed);
    assert_eq!(release_unleased_fast(&st, g.ticket, 1, true), Some(false));
    assert!(release(&st, &p, &g, 1).is_err());
    let after: Vec<u64> = (0..8).map(|i| word(&st, i).0).collect();
    assert_eq!(before, after);
    assert_eq!(lw, st.lock_word(Relaxed));
}

/// A dead fast holder with nobody queued: the next taker's `try_lock` revokes it and is told.
#[test]
fn dead_fast_holder_is_revoked_by_try_lock_and_told() {
    let o = OwnedState::new(4, 4);
    let st = o.view();
    let p = ModelPlatform::new(1_000);
    let g = lock(&st, &p, &me(1), None, &Tuning::default()).unwrap();
    assert!(g.fast);
    assert_eq!(try_lock(&st, &p, &me(2), &Tuning::default()).unwrap(), None);
    p.set_dead(1, true);
    let g2 = try_lock(&st, &p, &me(2), &Tuning::default())
        .unwrap()
        .expect("only the dead held it");
    assert!(g2.fast && g2.died && g2.ticket == g.ticket + 1);
    release(&st, &p, &g2, 2).unwrap();
    let g3 = lock(&st, &p, &me(2), None, &Tuning::default()).unwrap();
    assert!(!g3.died, "told twice");
}

/// A leased lock is always granted through its slot; one taken from a free word carries the
/// word's died flag into that grant.
#[test]
fn leased_lock_queues_behind_itself_and_keeps_the_news() {
    let o = OwnedState::new(4, 4);
    let st = o.view();
    let p = ModelPlatform::new(1_000);
    let g = lock(&st, &p, &me(1), None, &Tuning::default()).unwrap();
    revoke_own(&st, &p, &g, 1).unwrap();
    assert!(st.lock_word(Relaxed).died());
    let leased = Me {
        lease_ms: Some(1_000),
        ..me(2)
    };
    let g2 = lock(&st, &p, &leased, None, &Tuning::default()).unwrap();
    assert!(!g2.fast && g2.leased && g2.died);
    assert_eq!(state_of(&st, g2.ticket), Some(State::Held));
    release(&st, &p, &g2, 2).unwrap();
    let w = st.lock_word(Relaxed);
    assert!(!w.queued() && !w.held() && !w.died(), "{w:?}");
    let g3 = lock(&st, &p, &me(3), None, &Tuning::default()).unwrap();
    assert!(g3.fast && !g3.died && g3.token() > g2.token());
}

/// A dead holder followed by dead waiters: one `recover` pass by the live waiter behind them
/// revokes the holder, skips every dead grantee in turn and leaves the live waiter granted
/// (with the died flag). It used to stop after the first skip, leaving the next dead grantee
/// to a later poll — up to one idle poll (50 ms) per dead ticket.
#[test]
fn recover_clears_a_run_of_dead_tickets_in_one_pass() {
    let o = OwnedState::new(8, 8);
    let st = o.view();
    let p = ModelPlatform::new(1_000);
    let g = hold_in_slot(&st, &p, 1);
    let dead_waiters: Vec<u64> = (2..=4).map(|i| enqueue(&st, i)).collect();
    let live = enqueue(&st, 5);
    for i in 1..=4 {
        p.set_dead(i, true);
    }
    let mut watch = Watch::default();
    recover::recover(&st, &p, live, &mut watch, &Tuning::default());
    assert_eq!(state_of(&st, g.ticket), Some(State::Revoked));
    for t in dead_waiters {
        assert_eq!(state_of(&st, t), Some(State::Skipped), "ticket {t}");
    }
    let w = word(&st, live);
    assert_eq!(w.state(), Some(State::Granted));
    assert!(w.died(), "the next holder must learn that the owner died");
}

// ---- Found by the adversarial review of issue 11's change (each failed before its fix). ----

/// A dead holder's `Revoked` word is replaced when a walker passes a lapped taker's given-up
/// ticket in the same slot; a walker killed right after that CAS must not take the death's news
/// with it: the next holder is told.
#[test]
fn passing_a_given_up_lapped_ticket_keeps_a_deaths_news() {
    let o = OwnedState::new(2, 4);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    let _g0 = hold_in_slot(&st, &p, 0);
    // Ticket 1 waits and gives up; ticket 2 is lapped (slot 0 still ticket 0's) and gives up.
    assert_eq!(time_out(&st, &p, 1), Err(WaitError::Timeout));
    assert_eq!(time_out(&st, &p, 2), Err(WaitError::Timeout));
    // The holder's thread exits holding: its word is revoked; the walk that follows passes
    // ticket 2 by its record, replacing slot 0's Revoked word — and is killed right there.
    let s0 = st.slot(0);
    let revoked = word(&st, 0).with_state(State::Revoked);
    s0.word.store(revoked.0, Relaxed);
    assert!(crate::core::queue::lapped::gone(s0, st.lap(2), &p));
    let passed = Word::new(st.lap(2), 0, State::Skipped, true);
    s0.word
        .compare_exchange(revoked.0, passed.0, Relaxed, Relaxed)
        .unwrap();
    let g3 = lock(&st, &p, &me(3), None, &t).unwrap();
    assert_eq!(g3.ticket, 3);
    assert!(g3.died, "owner_died lost");
    // And the whole of it through the real code:
    let o = OwnedState::new(2, 4);
    let st = o.view();
    let g0 = hold_in_slot(&st, &p, 0);
    assert_eq!(time_out(&st, &p, 1), Err(WaitError::Timeout));
    assert_eq!(time_out(&st, &p, 2), Err(WaitError::Timeout));
    revoke_own(&st, &p, &g0, 0).unwrap();
    let g3 = lock(&st, &p, &me(3), None, &t).unwrap();
    assert!(g3.ticket == 3 && g3.died);
    let _ = g0;
}

/// A lapped `lock_timeout(0)` recovers once before it gives up: with only the dead ahead it
/// gets the lock (it used to time out forever, the dead holder never revoked).
#[test]
fn a_lapped_zero_timeout_recovers_before_it_gives_up() {
    let o = OwnedState::new(2, 8);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    let _g0 = hold_in_slot(&st, &p, 0);
    let _t1 = enqueue(&st, 1);
    p.set_dead(0, true);
    p.set_dead(1, true);
    let mut got = None;
    for _ in 0..10 {
        if let Ok(g) = time_out(&st, &p, 2) {
            got = Some(g);
            break;
        }
    }
    assert_ne!(
        state_of(&st, 0),
        Some(State::Held),
        "the dead holder was never revoked"
    );
    let g = got.expect("only the dead were ahead");
    assert!(g.died);
    // And `lock` with a deadline already past, which makes one try without a ticket: it
    // recovers first, too.
    let o = OwnedState::new(2, 8);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let _g0 = hold_in_slot(&st, &p, 0);
    let _t1 = enqueue(&st, 1);
    p.set_dead(0, true);
    p.set_dead(1, true);
    let g = lock(&st, &p, &me(2), Some(0), &t).expect("only the dead were ahead");
    assert!(g.died);
}

/// Many lapped takers timing out behind a long hold (a `lock_timeout(0)` storm on a 2-slot
/// array): their runs are recorded, and the waiter that comes after the hold sits out no grace
/// (it sat out one per ticket beyond three per slot).
#[test]
fn a_storm_of_lapped_timeouts_costs_no_grace() {
    let o = OwnedState::new(2, 8);
    let st = o.view();
    let p = ModelPlatform::new(0);
    let t = Tuning::default();
    let g0 = hold_in_slot(&st, &p, 0);
    let _t1 = enqueue(&st, 1);
    for _ in 0..20 {
        assert_eq!(time_out(&st, &p, 2), Err(WaitError::Timeout));
    }
    release(&st, &p, &g0, 0).unwrap();
    let g1 = match claim::claim_granted(&st, &p, 1, &me(1)).unwrap() {
        claim::Claim::Held(g) => g,
        c => panic!("{c:?}"),
    };
    release(&st, &p, &g1, 1).unwrap();
    let next = st.next_ticket();
    let mut watch = Watch::default();
    let mut graces = 0;
    loop {
        match recover::recover(&st, &p, next, &mut watch, &t) {
            Ahead::Unclaimed(_) => {
                p.advance(t.grace_ns);
                graces += 1;
            }
            Ahead::Clear => break,
            Ahead::Busy => panic!("busy"),
        }
        assert!(graces < 100);
    }
    assert_eq!(graces, 0, "{graces} graces sat out");
}

/// Live lapped takers interleaved with takers that time out while lapped (a polling loop next
/// to real waiters behind a long hold, on a 2-slot array): every given-up ticket is passed at
/// once, every live one is pre-granted in turn, and the lock is free at the end — no grace sat
/// out, the clock never moved. (With at most three side records per slot, every given-up ticket
/// past them was pre-granted and cost a grace: hours for a polling loop.)
#[test]
fn given_up_tickets_between_live_lapped_ones_cost_no_grace() {
    let o = OwnedState::new(2, 8);
    let st = o.view();
    let p = ModelPlatform::new(0);
    let t = Tuning::default();
    let g0 = hold_in_slot(&st, &p, 0);
    let t1 = enqueue(&st, 1);
    let mut live = Vec::new();
    for _ in 0..12 {
        // A live taker whose slot an earlier lap still uses: it polls (here: does nothing yet).
        let fast::Taken::Queued(tk, _) = fast::take(&st, &p, &me(2)) else {
            panic!("room for a lapped ticket")
        };
        lapped::register(st.slot(tk), st.lap(tk), 2);
        live.push(tk);
        assert_eq!(time_out(&st, &p, 3), Err(WaitError::Timeout));
    }
    release(&st, &p, &g0, 0).unwrap();
    let mut held = match claim::claim_granted(&st, &p, t1, &me(1)).unwrap() {
        claim::Claim::Held(g) => g,
        c => panic!("{c:?}"),
    };
    let mut holder = 1;
    for tk in live {
        release(&st, &p, &held, holder).unwrap();
        // The given-up ticket before `tk` is passed; `tk` is pre-granted, and its taker claims
        // it at its next poll.
        assert_eq!(state_of(&st, tk), Some(State::Ready), "ticket {tk}");
        let mut watch = Watch::default();
        held = match publish(&st, &p, tk, &me(2), None, &t, &mut watch).unwrap() {
            Published::Held(g) => g,
            _ => panic!("ticket {tk}: not pre-granted"),
        };
        holder = 2;
    }
    release(&st, &p, &held, holder).unwrap();
    let next = st.next_ticket();
    assert_eq!(
        recover::recover(&st, &p, next, &mut Watch::default(), &t),
        Ahead::Clear
    );
    let g = try_lock(&st, &p, &me(4), &t).unwrap().expect("idle");
    assert!(g.fast && !g.died);
}

/// A lapped taker of a later lap gives up while the slot's word pre-grants an earlier one,
/// still unclaimed: the pre-granted taker, alive, keeps its grant (its lap is not read as given
/// up) until it claims it. (The later give-up rebased the slot's given-up word onto the
/// pre-granted lap, which then read as given up: recovery passed a live taker's grant.)
#[test]
fn a_later_give_up_never_passes_a_live_pre_grant() {
    let o = OwnedState::new(2, 8);
    let st = o.view();
    let p = ModelPlatform::new(0);
    let t = Tuning::default();
    let g0 = hold_in_slot(&st, &p, 0);
    let t1 = enqueue(&st, 1);
    // Ticket 2 lapped (slot 0 is ticket 0's), live; ticket 3 lapped behind ticket 1.
    let fast::Taken::Queued(t2, _) = fast::take(&st, &p, &me(2)) else {
        panic!()
    };
    release(&st, &p, &g0, 0).unwrap();
    let g1 = match claim::claim_granted(&st, &p, t1, &me(1)).unwrap() {
        claim::Claim::Held(g) => g,
        c => panic!("{c:?}"),
    };
    release(&st, &p, &g1, 1).unwrap();
    assert_eq!(
        state_of(&st, t2),
        Some(State::Ready),
        "ticket 2 pre-granted"
    );
    // Ticket 3 waits; ticket 4 (slot 0 again, lapped by the pre-grant) is taken and given up.
    let t3 = enqueue(&st, 5);
    let fast::Taken::Queued(t4, _) = fast::take(&st, &p, &me(3)) else {
        panic!()
    };
    assert_eq!((t2, t3, t4), (2, 3, 4));
    assert_eq!(
        publish::give_up_lapped(&st, &p, t4, 3),
        publish::LappedGiveUp::Gone
    );
    assert!(
        !given_up::given_up(st.slot(t2), st.lap(t2)),
        "ticket 2 did not give up"
    );
    // And two laps on (ticket 6: its slot's word two laps behind, a pre-grant).
    let fast::Taken::Queued(t5, _) = fast::take(&st, &p, &me(4)) else {
        panic!()
    };
    let fast::Taken::Queued(t6, _) = fast::take(&st, &p, &me(3)) else {
        panic!()
    };
    assert_eq!((t5, t6), (5, 6));
    assert_eq!(
        publish::give_up_lapped(&st, &p, t6, 3),
        publish::LappedGiveUp::Gone
    );
    assert!(
        !given_up::given_up(st.slot(t2), st.lap(t2)),
        "ticket 2 did not give up"
    );
    let mut watch = Watch::default();
    assert!(matches!(
        recover::recover(&st, &p, st.next_ticket(), &mut watch, &t),
        Ahead::Unclaimed(_)
    ));
    assert_eq!(state_of(&st, t2), Some(State::Ready), "still ticket 2's");
    let g2 = match publish(&st, &p, t2, &me(2), None, &t, &mut watch).unwrap() {
        Published::Held(g) => g,
        _ => panic!("ticket 2 lost its grant"),
    };
    release(&st, &p, &g2, 2).unwrap();
    assert_eq!(state_of(&st, t3), Some(State::Granted));
}

/// A taker finds no room for a ticket once its slot has `WINDOW` laps outstanding beyond the
/// one in its word; it waits without one (a deadline passes: `Timeout`, nothing left behind),
/// and takes one as soon as the queue moves.
#[test]
fn no_ticket_without_room_for_its_giving_up() {
    let o = OwnedState::new(2, 8);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    let g0 = hold_in_slot(&st, &p, 0);
    let t1 = enqueue(&st, 1);
    // Live lapped takers (they never give up) fill both slots' windows.
    let mut taken = 0;
    loop {
        match fast::take(&st, &p, &me(2)) {
            fast::Taken::Queued(..) => taken += 1,
            fast::Taken::Full(next) => {
                assert_eq!(next, st.next_ticket(), "no ticket taken");
                break;
            }
            fast::Taken::Fast(_) => panic!("held"),
        }
        assert!(taken <= 2 * given_up::WINDOW, "{taken} tickets");
    }
    assert_eq!(taken, 2 * given_up::WINDOW, "both windows full");
    let next = st.next_ticket();
    let deadline = p.now_ns() + 1_000;
    assert_eq!(
        lock(&st, &p, &me(3), Some(deadline), &t),
        Err(WaitError::Timeout)
    );
    assert_eq!(st.next_ticket(), next, "the timed-out taker took nothing");
    // The hold ends: slot 0's window moves, and a ticket is taken again.
    release(&st, &p, &g0, 0).unwrap();
    assert_eq!(state_of(&st, t1), Some(State::Granted));
    let _ = t1;
    assert!(
        matches!(fast::take(&st, &p, &me(3)), fast::Taken::Full(_)),
        "slot 0's next lap still waits for ticket 2 to publish"
    );
    // Ticket 2's taker publishes (it was lapped by ticket 0): slot 0's word moves on.
    let mut watch = Watch::default();
    assert!(matches!(
        publish(&st, &p, 2, &me(2), None, &t, &mut watch).unwrap(),
        Published::Waiting(_)
    ));
    assert!(matches!(
        fast::take(&st, &p, &me(3)),
        fast::Taken::Queued(..)
    ));
}

/// `try_lock` waits for unclaimed pre-grants for one grace in all, not one per ticket.
#[test]
fn try_lock_waits_one_grace_at_most() {
    let o = OwnedState::new(2, 8);
    let st = o.view();
    let p = ModelPlatform::new(1_000_000); // each clock read: 1 ms
    let t = Tuning::default();
    let _g0 = hold_in_slot(&st, &p, 0);
    let _t1 = enqueue(&st, 1);
    // Tickets taken and never published, nor recorded (their takers died at once).
    for _ in 0..20 {
        fast::take_queued(&st, &p);
    }
    p.set_dead(0, true);
    p.set_dead(1, true);
    let before = p.now_ns();
    let _ = try_lock(&st, &p, &me(3), &t).unwrap();
    let ms = (p.now_ns() - before) / 1_000_000;
    assert!(
        ms < 2 * t.grace_ns / 1_000_000,
        "try_lock blocked {ms} model ms"
    );
}

// ---- Found by the second review (each failed before its fix). ----

/// A holder that released normally is reported dead to the next holder: the walk that passes
/// a given-up lapped ticket re-reads the previous lap's `Revoked` word, whose news a grant
/// already delivered (to ticket 1), and hands it on again (to ticket 3).
#[test]
fn no_false_owner_died_after_a_normal_release() {
    let o = OwnedState::new(2, 8);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    let g0 = hold_in_slot(&st, &p, 0);
    let t1 = enqueue(&st, 1);
    // Ticket 2 is lapped (slot 0 still ticket 0's, held) and times out: a run of one.
    assert_eq!(time_out(&st, &p, 2), Err(WaitError::Timeout));
    assert!(crate::core::queue::lapped::gone(st.slot(2), st.lap(2), &p));
    // Ticket 0's owner dies holding: revoked, ticket 1 granted and told (rightly).
    revoke_own(&st, &p, &g0, 0).unwrap();
    let g1 = match claim::claim_granted(&st, &p, t1, &me(1)).unwrap() {
        claim::Claim::Held(g) => g,
        c => panic!("{c:?}"),
    };
    assert!(g1.died);
    // Ticket 1 releases normally: its Done store lands, and its thread is preempted before
    // try_pregrant (or that CAS loses); ticket 3's taker arrives and its recover walks on.
    let w1 = word(&st, 1);
    st.slot(1).word.store(w1.with_state(State::Done).0, Relaxed);
    let g3 = lock(&st, &p, &me(3), None, &t).unwrap();
    assert_eq!(g3.ticket, 3);
    // The releaser resumes.
    advance(&st, &p, 2, false);
    assert!(
        !g3.died,
        "owner_died reported although ticket 1 released normally"
    );
}

/// One dead pre-grant ahead (its taker died between taking the ticket and claiming it),
/// nobody holding: try_lock used to wait out the grace, skip it and take the lock.
#[test]
fn try_lock_skips_one_dead_pregrant() {
    for tick in [1_000u64, 1_000_000] {
        let o = OwnedState::new(4, 8);
        let st = o.view();
        let p = ModelPlatform::new(tick);
        let t = Tuning::default();
        fast::take_queued(&st, &p); // ticket 0: Ready, never claimed
        let mut got = None;
        for _ in 0..5 {
            if let Some(g) = try_lock(&st, &p, &me(3), &t).unwrap() {
                got = Some(g);
                break;
            }
        }
        assert_eq!(
            state_of(&st, 0),
            Some(State::Skipped),
            "tick {tick}: never skipped"
        );
        assert!(
            got.is_some(),
            "tick {tick}: five try_locks, each a grace, all busy"
        );
    }
}

/// A weighted kind takes its tickets with a `fetch_add`, whose carry flips the epoch's parity
/// across the counter's wrap: tickets stay consecutive through the wrap.
#[test]
fn weighted_tickets_stay_consecutive_through_the_counter_s_wrap() {
    let o = OwnedState::of_kind(4, 4, layout::RecordKind::semaphore(1));
    let st = o.view();
    let mask = (1u64 << lock_word::COUNTER_BITS) - 1;
    for start in [mask - (1 << 20), mask - 2] {
        let first = (5u64 << lock_word::COUNTER_BITS) | start;
        st.header()
            .word
            .store(lock_word::LockWord::initial(first, true).0, Relaxed);
        st.header().epoch.store(5, Relaxed);
        for k in 0..6 {
            assert_eq!(st.take_ticket(), first + k, "from {start:#x}, ticket {k}");
        }
        assert!(st.lock_word(Relaxed).queued());
    }
}

/// A [`ModelPlatform`] that records the clock at every [`Platform::yield_cpu`].
struct YieldLog {
    inner: ModelPlatform,
    yields: std::sync::Mutex<Vec<u64>>,
}

impl Platform for YieldLog {
    fn now_ns(&self) -> u64 {
        self.inner.now_ns()
    }
    fn wait(&self, word: &crate::primitive::AtomicU64, expected: u32, until: Option<u64>) {
        self.inner.wait(word, expected, until)
    }
    fn wake(&self, word: &crate::primitive::AtomicU64) {
        self.inner.wake(word)
    }
    fn pause(&self, until: Option<u64>) {
        self.inner.pause(until)
    }
    fn liveness(&self, index: u32) -> platform::Liveness {
        self.inner.liveness(index)
    }
    fn yield_cpu(&self) {
        let now = self.inner.now_ns();
        self.yields.lock().unwrap().push(now);
    }
}

/// The next in line waits for a holder that never lets go, until a deadline 40 µs away
/// (the scripted clock moves 100 ns per reading); the clock readings at its yields.
fn yields_while_next_in_line(st: &LockState<'_>, tuning: &Tuning) -> (u64, Vec<u64>) {
    let p = YieldLog {
        inner: ModelPlatform::new(100),
        yields: std::sync::Mutex::new(Vec::new()),
    };
    let held = lock(st, &p, &me(1), None, tuning).unwrap();
    let start = p.now_ns();
    assert!(matches!(
        lock(st, &p, &me(2), Some(start + 40_000), tuning),
        Err(WaitError::Timeout)
    ));
    release(st, &p, &held, 1).unwrap();
    let yields = p.yields.lock().unwrap().clone();
    (start, yields)
}

#[test]
fn a_long_spin_yields_the_cpu_after_keeping_it_a_while() {
    // Regression (Python bench, 4 processes on 2 CPUs): two contenders that alternate never
    // slept, and a process preempted before it took a ticket waited a scheduler tick (4 ms).
    // The spin keeps its CPU for `spin_keep_cpu_ns`, then yields it now and then.
    let o = OwnedState::new(8, 4);
    let st = o.view();
    let tuning = Tuning::default();
    let (start, yields) = yields_while_next_in_line(&st, &tuning);
    assert!(
        yields.len() >= 10,
        "a 40 µs spin yielded {} times",
        yields.len()
    );
    let first = yields[0] - start;
    assert!(
        (tuning.spin_keep_cpu_ns..tuning.spin_keep_cpu_ns + 5_000).contains(&first),
        "first yield {first} ns into the wait"
    );
    assert!(yields.iter().all(|&y| y < start + 45_000));
    // Every 32 steps, not every step: two clock readings (one per 16 steps, 100 ns each) and
    // the one this platform makes at each yield lie between two yields.
    let closest = yields.windows(2).map(|w| w[1] - w[0]).min().unwrap();
    assert!(closest >= 300, "yields {closest} ns apart");
}

#[test]
fn a_short_spin_keeps_the_cpu_and_a_bounded_file_s_spin_yields_at_once() {
    let o = OwnedState::new(8, 4);
    let st = o.view();
    // A spin shorter than the part that keeps the CPU never yields.
    let short = Tuning {
        spin_ns: 4_000,
        ..Tuning::default()
    };
    let (_, yields) = yields_while_next_in_line(&st, &short);
    assert_eq!(yields, Vec::<u64>::new());
    // Nor does one that keeps the CPU for ever (`OpenOptions::spin_keep_cpu(Duration::MAX)`).
    let never = Tuning {
        spin_keep_cpu_ns: u64::MAX,
        ..Tuning::default()
    };
    let (_, yields) = yields_while_next_in_line(&st, &never);
    assert_eq!(yields, Vec::<u64>::new());
    // In a file with a bypass bound the spinner yields from the start.
    let o = OwnedState::of_kind(8, 4, layout::RecordKind::bounded(4));
    let st = o.view();
    let (start, yields) = yields_while_next_in_line(&st, &Tuning::default());
    assert!(!yields.is_empty());
    assert!(
        yields[0] - start < 5_000,
        "first yield {} ns in",
        yields[0] - start
    );
}

#[test]
fn token_ceilings_and_first_tickets_above_them_keep_tokens_rising() {
    use crate::core::state::{first_ticket_above, token_ceiling, token_of};
    for bound in [0u32, 1, 4, 511] {
        for next in [0u64, 1, 2, 3, 511, 512, 513, 1 << 20] {
            let ceiling = token_ceiling(bound, next);
            // Every token granted before `next`: tickets below it, and barges ahead of a head
            // `h < next`, which take `h · 512 + j` = `token_of(bound, h − 1, j)`.
            if let Some(last) = next.checked_sub(1) {
                assert!(token_of(bound, last, 0) <= ceiling);
                if bound != 0 && last > 0 {
                    assert!(token_of(bound, last - 1, bound as u16) <= ceiling);
                }
            }
            for other in [0u32, 1, 511] {
                let first = first_ticket_above(other, ceiling);
                assert!(
                    token_of(other, first, 0) > ceiling,
                    "bound {bound} next {next} -> bound {other}"
                );
                if other == 0 {
                    // The first such ticket: the one before it is not above.
                    if let Some(before) = first.checked_sub(1) {
                        assert!(token_of(other, before, 0) <= ceiling);
                    }
                } else {
                    // A barge ahead of the first ticket, `first · 512 + 1` at least, is above.
                    assert!(token_of(other, first - 1, 1) > ceiling);
                }
            }
        }
    }
}

/// What runs at a [`ClockHook`]'s reading.
type Hook<'a> = Box<dyn FnOnce(&ModelPlatform) + 'a>;

/// A platform whose next clock reading first runs `hook` (once): what other processes do while
/// the caller is stopped at that reading.
struct ClockHook<'a> {
    inner: ModelPlatform,
    hook: core::cell::RefCell<Option<Hook<'a>>>,
}

impl Platform for ClockHook<'_> {
    fn now_ns(&self) -> u64 {
        let hook = self.hook.borrow_mut().take();
        if let Some(h) = hook {
            h(&self.inner);
        }
        self.inner.now_ns()
    }
    fn wait(&self, word: &crate::primitive::AtomicU64, expected: u32, until: Option<u64>) {
        self.inner.wait(word, expected, until)
    }
    fn wake(&self, word: &crate::primitive::AtomicU64) {
        self.inner.wake(word)
    }
    fn pause(&self, until: Option<u64>) {
        self.inner.pause(until)
    }
    fn liveness(&self, index: u32) -> platform::Liveness {
        self.inner.liveness(index)
    }
}

fn leased(participant: u32, ms: u64) -> Me {
    Me {
        lease_ms: Some(ms),
        ..me(participant)
    }
}

/// A leased holder checks that it still holds its ticket and then stalls, before writing its
/// new deadline (`extend`): meanwhile its lease runs out, it is taken over, and a later ticket
/// of the same slot is granted with a lease of its own and commits its deadline. When the
/// stalled holder goes on, its write must fail (it reads `LockLost`) and the later ticket's
/// deadline stay. (Each grant's deadline is in its slot; a writer that loaded the word it
/// replaces *after* its check overwrote the later ticket's deadline with its own lap's, and the
/// later lease could never be judged expired.)
#[test]
fn a_stalled_extend_never_overwrites_a_later_ticket_s_deadline() {
    let o = OwnedState::new(2, 8);
    let st = o.view();
    let t = Tuning::default();
    let p = ModelPlatform::new(0);
    let a = lock(&st, &p, &leased(1, 100), None, &t).unwrap();
    assert_eq!((a.ticket, a.leased), (0, true));
    let later = core::cell::Cell::new(None);
    let hooked = ClockHook {
        inner: ModelPlatform::new(0),
        hook: core::cell::RefCell::new(Some(Box::new(|q: &ModelPlatform| {
            // (The stalled holder's platform: its own clock, moved on with the others'.)
            q.advance(10_000_000_000);
            p.advance(10_000_000_000);
            // Its lease ran out: taken over by the next taker's recovery.
            let mut watch = Watch::default();
            let _ = recover::recover(&st, &p, st.next_ticket(), &mut watch, &t);
            // Leased grants until one uses slot 0 again (a later lap): that one is kept.
            loop {
                let b = lock(&st, &p, &leased(2, 60_000), None, &t).unwrap();
                if b.ticket % 2 == 0 {
                    later.set(Some(b));
                    break;
                }
                release(&st, &p, &b, 2).unwrap();
            }
        }))),
    };
    hooked.inner.advance(p.now_ns() - hooked.inner.now_ns());
    assert_eq!(
        extend(&st, &hooked, a.ticket, 1, 30_000),
        Err(Lost),
        "the stalled holder lost its grant"
    );
    let b = later.get().expect("the later ticket was granted");
    let d = lease::Deadline(st.slot(b.ticket).deadline.load(Relaxed));
    assert_eq!(
        d.of(st.lap(b.ticket)),
        Some(p.now_ns() / 1_000_000 + 60_000),
        "the later ticket's deadline stays its own"
    );
    release(&st, &p, &b, 2).unwrap();
}

/// The new owner of a dead process's participant entry gives up every lapped ticket the
/// slots' `lapped` entries say that process took, so that walks pass them at once (one of
/// them was left pre-granted, to wait out the grace: review finding).
#[test]
fn cleanup_gives_up_every_lapped_ticket_of_the_dead_process() {
    let o = OwnedState::new(2, 8);
    let st = o.view();
    let p = ModelPlatform::new(0);
    let t = Tuning::default();
    let g0 = hold_in_slot(&st, &p, 0);
    // Ticket 1: a live waiter (published).
    let fast::Taken::Queued(t1, _) = fast::take(&st, &p, &me(1)) else {
        panic!()
    };
    let mut w = Watch::default();
    assert!(matches!(
        publish(&st, &p, t1, &me(1), None, &t, &mut w),
        Ok(Published::Waiting(_))
    ));
    // Tickets 2 (slot 0) and 3 (slot 1): lapped takers of participant 5 (killed later) and 6.
    let lapped_ticket = |who: u32| {
        let fast::Taken::Queued(tk, _) = fast::take(&st, &p, &me(who)) else {
            panic!()
        };
        let mut w = Watch::default();
        assert!(matches!(
            publish::publish_once(&st, &p, tk, &me(who), None, &t, &mut w),
            Ok(publish::Look::Lapped)
        ));
        tk
    };
    let t2 = lapped_ticket(5);
    let t3 = lapped_ticket(6);
    assert_eq!((t1, t2, t3), (1, 2, 3));
    // Participant 5's process is killed; a new process claims entry 5 and cleans up.
    clean_up_participant(&st, &p, 5);
    release(&st, &p, &g0, 0).unwrap();
    let claim::Claim::Held(g1) = claim::claim_granted(&st, &p, t1, &me(1)).unwrap() else {
        panic!()
    };
    release(&st, &p, &g1, 1).unwrap();
    assert_eq!(
        state_of(&st, t2),
        Some(State::Skipped),
        "ticket 2 passed at once"
    );
    assert_eq!(
        state_of(&st, t3),
        Some(State::Ready),
        "ticket 3 pre-granted"
    );
}
