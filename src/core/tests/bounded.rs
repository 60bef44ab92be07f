//! Bounded bypass ([`crate::core::exclusive::barge`]): barges ahead of a granted, unclaimed
//! ticket, up to the bound; their tokens between two queued grants; the Dekker pair of a barge
//! and the grantee's claim; dead bargers and the news of deaths; stale walkers and revokers
//! that must not end a live barge.

use super::support::{HookedPlatform, me, state_of};
use crate::core::exclusive::barge::{self, Barge, try_barge, with_arrival};
use crate::core::exclusive::fast::{self, Taken, take};
use crate::core::model::ModelPlatform;
use crate::core::platform::Watched;
use crate::core::queue::claim::claim_granted_with;
use crate::core::queue::lapped;
use crate::core::state::{MAX_BYPASS, OwnedState, RecordKind, lock_word};
use crate::core::{
    Claim, Grant, LockState, Me, Platform, Published, State, Tuning, Watch, Word, advance, check,
    clean_up_participant, lock, publish, recover, release,
};
use crate::primitive::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};

fn quick() -> Tuning {
    Tuning {
        spin_ns: 0,
        ..Tuning::default()
    }
}

fn bounded(k: u32) -> OwnedState {
    OwnedState::of_kind(8, 8, RecordKind::bounded(k))
}

/// [`queue`] on any platform.
fn queue<P: Platform>(st: &LockState<'_>, p: &P, who: u32) -> (u64, Me) {
    let Taken::Queued(t, arrived) = take(st, p, &me(who)) else {
        panic!("the lock is held: must queue");
    };
    let m = Me {
        beacon: with_arrival(0, arrived),
        ..me(who)
    };
    match publish(st, p, t, &m, None, &quick(), &mut Watch::default()).unwrap() {
        Published::Waiting(_) => (t, m),
        _ => panic!("ticket {t} should wait"),
    }
}

fn claim(st: &LockState<'_>, p: &ModelPlatform, t: u64, m: &Me) -> Grant {
    match claim_granted_with(st, p, t, m, &quick(), None, None).unwrap() {
        Claim::Held(g) => g,
        other => panic!("ticket {t}: {other:?}"),
    }
}

#[test]
fn barges_take_the_lock_ahead_of_a_granted_waiter_up_to_the_bound() {
    let owned = bounded(2);
    let st = owned.view();
    let p = ModelPlatform::new(1);
    let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
    assert!(a.fast);
    let (t, b_me) = queue(&st, &p, 2);
    // Nothing to barge ahead of while the waiter is not granted.
    assert_eq!(try_barge(&st, &p, &me(3)), Barge::Busy);
    release(&st, &p, &a, 1).unwrap(); // grants `t`; its waiter is "asleep"
    let mut tokens = vec![st.token(&a)];
    for j in 1..=2u16 {
        let Barge::Took(g) = try_barge(&st, &p, &me(3)) else {
            panic!("barge {j} refused");
        };
        assert_eq!(
            (g.ticket, g.bypass, g.fast, g.died),
            (t - 1, j, true, false)
        );
        tokens.push(st.token(&g));
        // Nobody else gets in while a barge holds.
        assert_eq!(try_barge(&st, &p, &me(4)), Barge::Busy);
        assert!(fast::try_fast(&st, 4, 0).is_none());
        release(&st, &p, &g, 3).unwrap();
    }
    // The third would overtake the waiter a third time.
    assert_eq!(try_barge(&st, &p, &me(3)), Barge::No);
    let b = claim(&st, &p, t, &b_me);
    assert_eq!((b.ticket, b.overtaken, b.died), (t, 2, false));
    tokens.push(st.token(&b));
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert_eq!(
        tokens,
        vec![t << 9, (t << 9) + 1, (t << 9) + 2, (t + 1) << 9]
    );
    release(&st, &p, &b, 2).unwrap();
    assert!(!st.lock_word(Relaxed).queued(), "the queue drained");
}

#[test]
fn a_waiter_that_came_after_some_barges_is_overtaken_at_most_k_times_in_all() {
    let owned = bounded(3);
    let st = owned.view();
    let p = ModelPlatform::new(1);
    let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
    let (t1, m1) = queue(&st, &p, 2);
    release(&st, &p, &a, 1).unwrap();
    // Two barges ahead of t1; then t3 arrives (arrival count 2); one more barge ahead of t1.
    for _ in 0..2 {
        let Barge::Took(g) = try_barge(&st, &p, &me(3)) else {
            panic!("refused");
        };
        release(&st, &p, &g, 3).unwrap();
    }
    let Barge::Took(g) = try_barge(&st, &p, &me(3)) else {
        panic!("refused");
    };
    let (t2, m2) = queue(&st, &p, 4); // taken while a barge holds: arrival 3
    release(&st, &p, &g, 3).unwrap();
    assert_eq!(
        try_barge(&st, &p, &me(3)),
        Barge::No,
        "t1 was overtaken 3 times"
    );
    let b1 = claim(&st, &p, t1, &m1);
    assert_eq!(b1.overtaken, 3);
    release(&st, &p, &b1, 2).unwrap(); // grants t2
    // t2 arrived after all three: three more barges may overtake it, not four.
    for j in 1..=3u16 {
        let Barge::Took(g) = try_barge(&st, &p, &me(3)) else {
            panic!("barge {j} ahead of t2 refused");
        };
        assert_eq!((g.ticket, g.bypass), (t2 - 1, j));
        release(&st, &p, &g, 3).unwrap();
    }
    assert_eq!(try_barge(&st, &p, &me(3)), Barge::No);
    let b2 = claim(&st, &p, t2, &m2);
    assert_eq!(b2.overtaken, 3);
    release(&st, &p, &b2, 4).unwrap();
}

#[test]
fn the_largest_bound_counts_past_the_old_seven_bits() {
    // 511 barges ahead of one waiter, then no more: the count wraps modulo 2^10, never within
    // a waiter's wait.
    let owned = bounded(MAX_BYPASS);
    let st = owned.view();
    let p = ModelPlatform::new(1);
    for round in 0..3 {
        let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
        let (t, m) = queue(&st, &p, 2);
        release(&st, &p, &a, 1).unwrap();
        let mut last = st.token(&a);
        for j in 1..=MAX_BYPASS as u16 {
            let Barge::Took(g) = try_barge(&st, &p, &me(3)) else {
                panic!("round {round}: barge {j} refused");
            };
            assert_eq!(g.bypass, j);
            assert!(st.token(&g) > last);
            last = st.token(&g);
            release(&st, &p, &g, 3).unwrap();
        }
        assert_eq!(try_barge(&st, &p, &me(3)), Barge::No, "round {round}");
        let b = claim(&st, &p, t, &m);
        assert_eq!(u32::from(b.overtaken), MAX_BYPASS);
        assert!(st.token(&b) > last);
        release(&st, &p, &b, 2).unwrap();
    }
}

#[test]
fn no_barge_in_a_strict_file_nor_ahead_of_a_claimed_or_pregranted_ticket() {
    let owned = OwnedState::new(8, 8);
    let st = owned.view();
    let p = ModelPlatform::new(1);
    let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
    let (t, m) = queue(&st, &p, 2);
    release(&st, &p, &a, 1).unwrap();
    assert_eq!(try_barge(&st, &p, &me(3)), Barge::No, "strict");
    let b = claim(&st, &p, t, &m);
    assert_eq!(st.token(&b), t + 1, "strict tokens are ticket + 1");
    release(&st, &p, &b, 2).unwrap();

    let owned = bounded(5);
    let st = owned.view();
    let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
    let (t, m) = queue(&st, &p, 2);
    release(&st, &p, &a, 1).unwrap();
    let b = claim(&st, &p, t, &m);
    // Held by the queue: the barger can only wait for it (then queue).
    assert_eq!(try_barge(&st, &p, &me(3)), Barge::Busy);
    release(&st, &p, &b, 2).unwrap();
    // Free, nobody queued: not a barge, the fast path's.
    assert_eq!(try_barge(&st, &p, &me(3)), Barge::No);
}

/// A lock with a deadline already past makes one try, as `try_lock`, and never barges ahead of
/// a granted, unclaimed ticket.
#[test]
fn a_deadline_already_past_never_barges() {
    let owned = OwnedState::of_kind(8, 8, RecordKind::bounded(2));
    let st = owned.view();
    let p = ModelPlatform::new(1);
    let tuning = Tuning {
        spin_ns: 0,
        ..Tuning::default()
    };
    let a = lock(&st, &p, &me(1), None, &tuning).unwrap();
    let Taken::Queued(t, arrived) = take(&st, &p, &me(2)) else {
        panic!()
    };
    let m2 = Me {
        beacon: with_arrival(0, arrived),
        ..me(2)
    };
    let mut watch = Watch::default();
    assert!(matches!(
        publish(&st, &p, t, &m2, None, &tuning, &mut watch),
        Ok(Published::Waiting(_))
    ));
    release(&st, &p, &a, 1).unwrap(); // grants t; its waiter has not claimed yet
    let past = p.now_ns();
    let r = lock(&st, &p, &me(3), Some(past), &tuning);
    assert!(
        r.is_err(),
        "a lock with a deadline already past barged ahead of granted ticket {t}: {r:?}"
    );
}

/// The one-CAS uncontended release expects `LockWord::fast_held(t, participant)`, whose barge
/// count `B` is 0; a drain clears `B`, so after the queue of a barge has drained, uncontended
/// releases are one CAS again (not `end_fast`'s slow path, a second load and CAS, for the rest
/// of a bounded file's life).
#[test]
fn the_uncontended_release_stays_one_cas_after_a_barge() {
    let owned = bounded(4);
    let st = owned.view();
    let p = ModelPlatform::new(1);
    let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
    let (t, m) = queue(&st, &p, 2);
    release(&st, &p, &a, 1).unwrap();
    let Barge::Took(g) = try_barge(&st, &p, &me(3)) else {
        panic!("refused");
    };
    release(&st, &p, &g, 3).unwrap();
    let b = claim(&st, &p, t, &m);
    release(&st, &p, &b, 2).unwrap();
    assert!(!st.lock_word(Relaxed).queued(), "drained");
    // Uncontended from here on.
    let c = fast::try_fast(&st, 4, 0).unwrap();
    assert!(
        fast::release_fast(&st, c.ticket, 4),
        "the one-CAS release missed: word {:?}, expected {:?}",
        st.lock_word(Relaxed),
        lock_word::LockWord::fast_held(c.ticket, 4)
    );
}

#[test]
fn a_grantee_that_claimed_while_a_barge_held_waits_for_it_and_is_woken() {
    let owned = bounded(4);
    let st = owned.view();
    let p = ModelPlatform::new(1);
    let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
    let (t, m) = queue(&st, &p, 2);
    release(&st, &p, &a, 1).unwrap();
    let Barge::Took(g) = try_barge(&st, &p, &me(3)) else {
        panic!("refused");
    };
    let in_barge = std::sync::atomic::AtomicBool::new(true);
    std::thread::scope(|s| {
        let claimer = s.spawn(|| {
            let b = claim(&st, &p, t, &m);
            assert!(
                !in_barge.load(std::sync::atomic::Ordering::SeqCst),
                "claimed inside the barge"
            );
            b
        });
        // The claimer's CAS to Held is made; it must now wait for the barge.
        while state_of(&st, t) != Some(State::Held) {
            std::thread::yield_now();
        }
        for _ in 0..1000 {
            std::thread::yield_now();
        }
        assert!(
            !claimer.is_finished(),
            "the grantee went in while a barge held"
        );
        in_barge.store(false, std::sync::atomic::Ordering::SeqCst);
        release(&st, &p, &g, 3).unwrap();
        let b = claimer.join().unwrap();
        assert_eq!((b.overtaken, b.died), (1, false));
        release(&st, &p, &b, 2).unwrap();
    });
}

#[test]
fn a_barger_that_finds_the_grant_claimed_after_its_cas_backs_off_and_keeps_the_news() {
    let owned = bounded(4);
    let st = owned.view();
    let p = ModelPlatform::new(1);
    let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
    let (t, m) = queue(&st, &p, 2);
    release(&st, &p, &a, 1).unwrap();
    // The interleaving the Dekker pair resolves: the barger's CAS, the grantee's claim CAS,
    // then the barger's look at the slot. Played by hand: the barger's CAS on the word, with
    // a death's news in it...
    let w = st.lock_word(Relaxed).with_died(true);
    st.header().word.store(w.0, Relaxed);
    st.header().word.store(w.barged_by(3).0, Relaxed);
    // ...the claim (its half of the pair sees `H` and would wait)...
    let slot = st.slot(t);
    let granted = Word(slot.word.load(Relaxed));
    slot.word.store(granted.with_state(State::Held).0, Relaxed);
    // ...and the barger's end, as `try_barge` does it when the slot changed.
    assert!(barge::end_barge(
        &st,
        &p,
        3,
        w.barged_by(3).barges() as u16,
        true
    ));
    let lw = st.lock_word(Relaxed);
    assert!(!lw.held() && lw.queued() && lw.died(), "{lw:?}");
    // The grantee (its CAS already made) finds `H` clear and takes the news.
    slot.word.store(granted.0, Relaxed);
    let b = claim(&st, &p, t, &m);
    assert!(
        b.died,
        "the news the undone barge had consumed is the grantee's"
    );
    assert!(!st.lock_word(Relaxed).died());
    release(&st, &p, &b, 2).unwrap();
}

#[test]
fn a_barger_whose_head_was_granted_claimed_and_released_before_its_cas_gives_the_lock_back() {
    // The word does not change when a grantee claims, releases and the walk grants the next:
    // the barger's CAS from what it saw succeeds, its look at the slot finds `Done`, and it
    // undoes the barge although `head` has moved on (the barge is known by its entry and
    // count, not by `head`: `H` left set for ever would hang every later taker).
    let owned = bounded(4);
    let st = owned.view();
    let p = ModelPlatform::new(1);
    let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
    let (t1, m1) = queue(&st, &p, 2);
    let (t2, m2) = queue(&st, &p, 4);
    release(&st, &p, &a, 1).unwrap();
    let seen = barge::look(&st).expect("a barge is possible");
    let b = claim(&st, &p, t1, &m1);
    release(&st, &p, &b, 2).unwrap(); // grants t2, head moves to t2
    assert_eq!(st.header().head.load(Relaxed), t2);
    assert_eq!(barge::commit(&st, &p, &me(3), seen), Barge::No);
    let lw = st.lock_word(Relaxed);
    assert!(!lw.held() && !lw.barged(), "the undone barge left {lw:?}");
    let c = claim(&st, &p, t2, &m2);
    assert!(!c.died);
    release(&st, &p, &c, 4).unwrap();
    assert!(!st.lock_word(Relaxed).queued());
}

/// A grantee whose deadline passes while a barge holds gives its claimed ticket back
/// (`Skipped`) and answers `Timeout` (rather than wait out the barge, however long);
/// the barge's end then walks past it to the next waiter — or, had the barge already ended,
/// the grantee's own look at the word would (the third Dekker pair).
#[test]
fn a_grantee_past_its_deadline_behind_a_barge_gives_the_ticket_back() {
    for barge_ends_first in [false, true] {
        let owned = bounded(4);
        let st = owned.view();
        let p = ModelPlatform::new(1_000);
        let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
        let (t, m) = queue(&st, &p, 2);
        let (t2, m2) = queue(&st, &p, 4);
        release(&st, &p, &a, 1).unwrap(); // grants t
        let Barge::Took(g) = try_barge(&st, &p, &me(3)) else {
            panic!("refused");
        };
        let slot = st.slot(t);
        let w = Word(slot.word.load(Relaxed));
        let held = w.with_state(State::Held);
        slot.word.store(held.0, Relaxed); // the claim CAS
        if barge_ends_first {
            // The barge ends after the deadline was seen, before the hand-back: its walk
            // stops at our `Held`.
            release(&st, &p, &g, 3).unwrap();
            let r = barge::after_claim(&st, &p, t, held, &m, &quick(), Some(0), None);
            // `H` is clear: nothing to give back, the lock is ours.
            assert!(matches!(r, barge::AfterClaim::Held { .. }), "{r:?}");
            release(&st, &p, &Grant::of(t, false, false, false), 2).unwrap();
        } else {
            let r = barge::after_claim(&st, &p, t, held, &m, &quick(), Some(0), None);
            assert_eq!(r, barge::AfterClaim::GaveUp);
            assert_eq!(state_of(&st, t), Some(State::Skipped));
            assert_eq!(
                state_of(&st, t2),
                Some(State::Waiting),
                "nothing under the barge"
            );
            release(&st, &p, &g, 3).unwrap();
        }
        assert_eq!(
            state_of(&st, t2),
            Some(State::Granted),
            "ends_first {barge_ends_first}"
        );
        let c = claim(&st, &p, t2, &m2);
        assert!(!c.died);
        release(&st, &p, &c, 4).unwrap();
    }
}

/// The hand-back racing the barge's end from the other side: the ticket is given back after
/// the barger's walk stopped at it; the grantee's own look at the word (`H` clear) walks on.
#[test]
fn a_ticket_given_back_after_the_barge_ended_is_walked_past_by_its_grantee() {
    let owned = bounded(4);
    let st = owned.view();
    let p = ModelPlatform::new(1_000);
    let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
    let (t, _m) = queue(&st, &p, 2);
    let (t2, m2) = queue(&st, &p, 4);
    release(&st, &p, &a, 1).unwrap();
    let Barge::Took(g) = try_barge(&st, &p, &me(3)) else {
        panic!("refused");
    };
    let slot = st.slot(t);
    let held = Word(slot.word.load(Relaxed)).with_state(State::Held);
    slot.word.store(held.0, Relaxed);
    release(&st, &p, &g, 3).unwrap(); // the barger's walk stops at our `Held`
    assert_eq!(state_of(&st, t2), Some(State::Waiting));
    // The grantee had decided to give up (its deadline seen while `H` was set): the hand-back.
    assert_eq!(
        barge::give_back(&st, &p, t, held),
        barge::AfterClaim::GaveUp
    );
    assert_eq!(state_of(&st, t2), Some(State::Granted));
    let c = claim(&st, &p, t2, &m2);
    release(&st, &p, &c, 4).unwrap();
}

#[test]
fn a_dead_barger_is_revoked_by_the_grantee_and_by_recovery_with_the_news() {
    for by_recovery in [false, true] {
        let owned = bounded(4);
        let st = owned.view();
        let p = ModelPlatform::new(1);
        let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
        let (t, m) = queue(&st, &p, 2);
        let (t2, m2) = queue(&st, &p, 4);
        release(&st, &p, &a, 1).unwrap();
        let Barge::Took(_) = try_barge(&st, &p, &me(3)) else {
            panic!("refused");
        };
        p.set_dead(3, true);
        if by_recovery {
            let _ = recover(&st, &p, t2, &mut Watch::default(), &quick());
            let lw = st.lock_word(Relaxed);
            assert!(!lw.held() && lw.died(), "{lw:?}");
        }
        // The grantee (or, without recovery, its wait) revokes it and is told.
        let b = claim(&st, &p, t, &m);
        assert!(b.died, "by_recovery {by_recovery}");
        release(&st, &p, &b, 2).unwrap();
        // The news was told once.
        let c = claim(&st, &p, t2, &m2);
        assert!(!c.died);
        release(&st, &p, &c, 4).unwrap();
    }
}

#[test]
fn a_grantee_killed_while_it_waits_for_a_barger_is_passed_when_the_barge_ends() {
    let owned = bounded(4);
    let st = owned.view();
    let p = ModelPlatform::new(1);
    let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
    let (t, _m) = queue(&st, &p, 2);
    let (t2, m2) = queue(&st, &p, 4);
    release(&st, &p, &a, 1).unwrap();
    let Barge::Took(g) = try_barge(&st, &p, &me(3)) else {
        panic!("refused");
    };
    // The grantee claimed (Held) and was killed while it waited for the barge.
    let slot = st.slot(t);
    let w = Word(slot.word.load(Relaxed));
    slot.word.store(w.with_state(State::Held).0, Relaxed);
    p.set_dead(2, true);
    // Nothing is granted while the barge holds (recovery sees a live fast holder).
    let _ = recover(&st, &p, t2, &mut Watch::default(), &quick());
    assert_eq!(state_of(&st, t2), Some(State::Waiting));
    release(&st, &p, &g, 3).unwrap();
    // Then the next waiter's recovery revokes the dead grantee and t2 is granted, told its
    // predecessor died.
    let _ = recover(&st, &p, t2, &mut Watch::default(), &quick());
    assert_eq!(state_of(&st, t), Some(State::Revoked));
    assert_eq!(state_of(&st, t2), Some(State::Granted));
    let c = claim(&st, &p, t2, &m2);
    assert!(c.died);
    release(&st, &p, &c, 4).unwrap();
}

/// A dead barger's news goes into `D` while `Q = 1`, for "the grantee or the next barger".
/// When the grantee it barged ahead of is dead too, the walk that passes it can *pre-grant*
/// the next ticket (`Ready`: taken, not yet published), which its taker claims in `publish`:
/// that first holder after the dead barger is told, and the news does not stay in the word for
/// a later holder whose predecessor released cleanly.
#[test]
fn a_pregranted_ticket_after_a_dead_barger_is_told_the_news() {
    let owned = bounded(4);
    let st = owned.view();
    let p = ModelPlatform::new(1);
    let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
    let (t, _m) = queue(&st, &p, 2); // the grantee-to-be (participant 2)
    release(&st, &p, &a, 1).unwrap(); // grants t
    let Barge::Took(_) = try_barge(&st, &p, &me(3)) else {
        panic!("refused");
    };
    // Participant 5 takes the next ticket while the barge holds and is about to publish it.
    let Taken::Queued(t2, arrived) = take(&st, &p, &me(5)) else {
        panic!("must queue");
    };
    // The barger's process and the grantee's process are killed.
    p.set_dead(3, true);
    p.set_dead(2, true);
    // Any waiter's recovery: revokes the barger (news into `D`), skips the dead grantee, and
    // the walk pre-grants t2.
    let _ = recover(&st, &p, t2, &mut Watch::default(), &quick());
    assert_eq!(state_of(&st, t), Some(State::Skipped));
    assert_eq!(state_of(&st, t2), Some(State::Ready));
    // Participant 5 publishes: claims its pre-grant. Its predecessor (the barger) died.
    let m5 = Me {
        beacon: with_arrival(0, arrived),
        ..me(5)
    };
    let g = match publish(&st, &p, t2, &m5, None, &quick(), &mut Watch::default()).unwrap() {
        Published::Held(g) => g,
        _ => panic!("t2 was pre-granted"),
    };
    let lw = st.lock_word(Relaxed);
    release(&st, &p, &g, 5).unwrap();
    // The next holder's predecessor (t2's holder) released cleanly.
    let n = lock(&st, &p, &me(6), None, &quick()).unwrap();
    assert_eq!(
        (g.died, n.died),
        (true, false),
        "owner_died of (first holder after the dead barger, the next one); word was {lw:?}"
    );
}

/// A holder killed in its critical section: recovery revokes it and grants the head *with the
/// news* (`died` in the granted slot word). No running thread barges ahead of that grant: a
/// barge's `died` is the lock word's `D` only, so the first holder after the dead one — the
/// barger — would work on half-written data untold, and the grantee, behind the barger's clean
/// release, be told instead. The barge is refused, and the grantee is told.
#[test]
fn no_barge_ahead_of_a_grant_that_carries_a_death() {
    let owned = bounded(4);
    let st = owned.view();
    let p = ModelPlatform::new(1);
    let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
    assert!(a.fast);
    let (t, m) = queue(&st, &p, 2);
    let (t2, _m2) = queue(&st, &p, 4);
    // The fast holder's process is killed in its critical section; a waiter's recovery
    // revokes it and grants t with the news.
    p.set_dead(1, true);
    let _ = recover(&st, &p, t2, &mut Watch::default(), &quick());
    let granted = Word(st.slot(t).word.load(Relaxed));
    assert_eq!(state_of(&st, t), Some(State::Granted));
    assert!(granted.died(), "the grant carries the news");
    // A running thread may not barge ahead of that grant (its waiter is not running yet): the
    // grantee, first after the dead holder, must be the one told.
    assert_eq!(
        try_barge(&st, &p, &me(3)),
        Barge::No,
        "a barge ahead of a grant that carries a death (its barger was not told; the grantee, \
         behind the barger's clean release, was)"
    );
    let b = claim(&st, &p, t, &m);
    assert!(b.died);
    release(&st, &p, &b, 2).unwrap();
}

/// While a barge holds, walks stop at its `H` — but a walk checks the word only when it
/// starts: a walker that loaded the word before the barge's CAS and reaches the head's slot
/// after the (dead) grantee was skipped walks on, grants the next ticket and raises `head`.
/// `end_barge` knows a barge by its entry and count, not by `head`, so the live barger's
/// release still ends it and clears `H` (left set, the grantee of the next ticket would wait in
/// `after_claim` for a holder that never clears it, and so would everybody else).
#[test]
fn a_walk_that_started_before_a_barge_does_not_strand_it() {
    let owned = bounded(4);
    let st = owned.view();
    let (entered, open) = (AtomicBool::new(false), AtomicBool::new(false));
    let p = HookedPlatform::new(1);
    let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
    // Ticket t0: taken by participant 5, which was lapped, registered, and was killed before
    // it published (its slot shows the previous lap, its record names it).
    let Taken::Queued(t0, _) = take(&st, &p, &me(5)) else {
        panic!("must queue");
    };
    lapped::register(st.slot(t0), st.lap(t0), 5);
    p.model.set_dead(5, true);
    // The grantee-to-be (2) and a waiter behind it (4).
    let (t, _m) = queue(&st, &p, 2);
    let (t2, _m2) = queue(&st, &p, 4);
    assert_eq!((t, t2), (t0 + 1, t0 + 2));
    // The next look at a participant's liveness stops until the test opens the gate: a
    // walker preempted between loading the lock word (no `H`) and reaching the head's slot.
    p.after_liveness(None, |_| {
        entered.store(true, SeqCst);
        while !open.load(SeqCst) {
            std::thread::yield_now();
        }
    });
    std::thread::scope(|s| {
        // The holder releases: clears `H`, then walks from t0 — and is preempted there (in the
        // look at t0's lapped record).
        let releaser = s.spawn(|| release(&st, &p, &a, 1));
        while !entered.load(SeqCst) {
            std::thread::yield_now();
        }
        // Meanwhile another walker passes t0 and grants t.
        advance(&st, &p, t0, false);
        assert_eq!(state_of(&st, t), Some(State::Granted));
        // A running thread barges ahead of t.
        let Barge::Took(g) = try_barge(&st, &p, &me(3)) else {
            panic!("refused");
        };
        // The grantee's process is killed; the waiter behind it, watching its beacon, skips it
        // (`acquire::revoke_dead`, `Holding::Slot` in `Granted`: CAS to `Skipped`, then a walk,
        // which stops at the barger's `H`).
        p.model.set_dead(2, true);
        let slot = st.slot(t);
        let w = Word(slot.word.load(SeqCst));
        slot.word
            .compare_exchange(w.0, w.with_state(State::Skipped).0, SeqCst, SeqCst)
            .unwrap();
        advance(&st, &p, t, false);
        assert_eq!(
            state_of(&st, t2),
            Some(State::Waiting),
            "nothing granted under H"
        );
        // The preempted walker resumes.
        open.store(true, SeqCst);
        releaser.join().unwrap().unwrap();
        let head_now = st.header().head.load(SeqCst);
        // The barger releases its (live, valid) barge.
        let released = release(&st, &p, &g, 3);
        let lw = st.lock_word(SeqCst);
        assert!(
            released.is_ok() && !lw.held(),
            "barge release {released:?}, word left {lw:?} (head {head_now}, t2 {t2} {:?})",
            state_of(&st, t2)
        );
    });
}

/// The same stale walk can *pre-grant* the next ticket (`Ready`) while a barge holds: the
/// taker's claim of a `Ready` ticket waits for the barger like the claim of a `Granted` one
/// (else two would hold at once).
#[test]
fn a_ticket_pregranted_by_a_stale_walk_while_a_barge_holds_waits_for_it() {
    let owned = bounded(4);
    let st = owned.view();
    let p = ModelPlatform::new(1);
    let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
    let (t, _m) = queue(&st, &p, 2);
    let Taken::Queued(t2, arrived) = take(&st, &p, &me(5)) else {
        panic!("must queue");
    };
    release(&st, &p, &a, 1).unwrap(); // grants t
    let Barge::Took(g) = try_barge(&st, &p, &me(3)) else {
        panic!("refused");
    };
    // The grantee of t is skipped (dead), and a walk that loaded the word before the barge's
    // CAS passes it and pre-grants t2 — as `a_walk_that_started_before_a_barge_does_not_strand_it`
    // plays it with a gated platform; here the two words are written as that walk does.
    let slot = st.slot(t);
    let w = Word(slot.word.load(SeqCst));
    slot.word.store(w.with_state(State::Skipped).0, SeqCst);
    let s2 = st.slot(t2);
    s2.word
        .store(Word::new(st.lap(t2), 0, State::Ready, false).0, SeqCst);
    let inside = std::sync::atomic::AtomicBool::new(true);
    std::thread::scope(|s| {
        let taker = s.spawn(|| {
            let m5 = Me {
                beacon: with_arrival(0, arrived),
                ..me(5)
            };
            let g2 = match publish(&st, &p, t2, &m5, None, &quick(), &mut Watch::default()).unwrap()
            {
                Published::Held(g2) => g2,
                _ => panic!("t2 was pre-granted"),
            };
            assert!(
                !inside.load(SeqCst),
                "claimed a pre-grant while a barge held"
            );
            g2
        });
        for _ in 0..1000 {
            std::thread::yield_now();
        }
        assert!(
            !taker.is_finished(),
            "the pre-granted taker went in during the barge"
        );
        inside.store(false, SeqCst);
        release(&st, &p, &g, 3).unwrap();
        let g2 = taker.join().unwrap();
        release(&st, &p, &g2, 5).unwrap();
    });
}

/// A waiter first in line behind a fast holder sleeps on that holder's thread beacon, naming
/// the grant `Holding::Fast { ticket: h − 1, participant }`. The fast holder releases (granting
/// `h`) and its thread exits; before the waiter runs, *another thread of the same process*
/// barges ahead of `h`: entry `participant` and "ticket" `h − 1` (`head − 1`) again. The
/// waiter, woken by the beacon's death, does not take the live barge for the released fast
/// grant and revoke it (`revoke_dead` → `end_fast` → `end_barge`): it waits while the barger is
/// in its critical section (else two would hold at once).
#[test]
fn a_dead_fast_holder_s_beacon_does_not_revoke_its_process_s_live_barge() {
    let owned = bounded(4);
    let st = owned.view();
    let (entered, open) = (AtomicBool::new(false), AtomicBool::new(false));
    let p = HookedPlatform::new(1);
    // The first wait on a holder's thread beacon stops until the test opens the gate, and then
    // finds the thread ended (after it released); later waits poll (nothing watched).
    p.at_watch_holder(|_| {
        entered.store(true, SeqCst);
        while !open.load(SeqCst) {
            std::thread::yield_now();
        }
        Watched::Died
    });
    // Thread F of process 1 takes the lock fast and publishes its thread beacon (7).
    let f_me = Me { beacon: 7, ..me(1) };
    let a = lock(&st, &p, &f_me, None, &quick()).unwrap();
    assert!(a.fast);
    std::thread::scope(|s| {
        // Process 2's thread W queues behind it and sleeps on F's beacon.
        let w = s.spawn(|| lock(&st, &p, &Me { beacon: 9, ..me(2) }, None, &quick()));
        while !entered.load(SeqCst) {
            std::thread::yield_now();
        }
        // F releases (granting W's ticket) — and its thread exits.
        release(&st, &p, &a, 1).unwrap();
        // Thread G of process 1 barges ahead of W's grant (W is not running yet).
        let Barge::Took(g) = try_barge(&st, &p, &me(1)) else {
            panic!("refused");
        };
        // W wakes: F's beacon reports its thread dead.
        open.store(true, SeqCst);
        // G is in its critical section; W must not get in. Give it a while.
        let mut waited = 0;
        while !w.is_finished() && waited < 200 {
            std::thread::sleep(std::time::Duration::from_millis(5));
            waited += 1;
        }
        let got_in = w.is_finished();
        let g_still_holds = check(&st, &p, &g, 1).is_ok();
        if !got_in {
            release(&st, &p, &g, 1).unwrap();
        }
        let wg = w.join().unwrap().unwrap();
        assert!(
            !got_in,
            "W got the lock (died {}) while G's barge held; G's check now says {}",
            wg.died,
            if g_still_holds { "held" } else { "lost" }
        );
        release(&st, &p, &wg, 2).unwrap();
    });
}

/// Two waiters recover the same dead fast holder (entry 1, ticket `h − 1`, a queue behind it
/// from `h`). The first one's revoking walk grants `h` with the news — and it is preempted
/// (here: in its wake of the sleeping grantee) before its last step, the clear of `H` "while
/// the word still shows this grant": held by entry 1, queued, `head == h`. The second one
/// finishes the revocation. The dead process's entry is claimed by a new process, whose
/// thread tries to barge ahead of `h` (granted, its waiter not yet running), which would show
/// the same: held by entry 1, queued, `head == h`. The first revoker, resuming, never clears a
/// live barge's `H` (the grantee would go in while the barger is in its critical section, and
/// the barger's release fail with `LockLost`).
#[test]
fn a_preempted_revoker_of_a_dead_fast_holder_does_not_end_a_barge_of_its_reused_entry() {
    let owned = bounded(4);
    let st = owned.view();
    let barge = std::sync::Mutex::new(None);
    let p = HookedPlatform::new(1);
    let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
    assert!(a.fast);
    let (h, m) = queue(&st, &p, 2);
    // The waiter of `h` parks.
    let slot = st.slot(h);
    let w = Word(slot.word.load(SeqCst));
    slot.word.store(w.with_state(State::Sleeping).0, SeqCst);
    // The fast holder's process is killed.
    p.model.set_dead(1, true);
    let (stv, slot_g, dead_ticket) = (&st, &barge, a.ticket);
    // The next wake (of the sleeping grantee) stops its caller: what others do meanwhile.
    p.before_wake(move |p| {
        // The first revoker has granted `h` (with the news) and is preempted here. Another
        // waiter's recovery ends the same dead grant.
        assert!(fast::end_fast(stv, p, 1, dead_ticket, true));
        assert!(!stv.lock_word(SeqCst).held());
        // Entry 1 is claimed by a new process (cleaned up: nothing of it holds), whose thread
        // barges ahead of `h`.
        p.model.set_dead(1, false);
        clean_up_participant(stv, p, 1);
        // (A barge ahead of a grant that carries a death is refused: then there is nothing
        // to end.)
        if let Barge::Took(g) = try_barge(stv, p, &me(1)) {
            *slot_g.lock().unwrap() = Some(g);
        }
    });
    // The first revoker (as `recover` calls it, the dead grant read before judging it).
    fast::end_fast(&st, &p, 1, a.ticket, true);
    let Some(g) = barge.lock().unwrap().take() else {
        return; // no barge ahead of a grant that carries a death
    };
    let lw = st.lock_word(SeqCst);
    if check(&st, &p, &g, 1).is_err() {
        // The barger is still in its critical section: the grantee goes in at once.
        let b = claim(&st, &p.model, h, &m);
        let released = release(&st, &p, &g, 1);
        panic!(
            "a stale revoker of the dead fast grant ended a live barge (word {lw:?}): \
             ticket {} claimed during the barge; the barger's release: {released:?}",
            b.ticket
        );
    }
    release(&st, &p, &g, 1).unwrap();
    let b = claim(&st, &p.model, h, &m);
    release(&st, &p, &b, 2).unwrap();
}

/// The ABA of a barge's identity (entry, count): a drain clears the count, so the same
/// (entry, count) comes back after just one drain and as many barges as before. `recover`
/// reads a barge from the word, judges its entry dead, and revokes the barge only if the word
/// is still exactly what it read, counter included: a recoverer preempted between its
/// judgement and its revocation (here: right after `liveness` answered) never ends the live
/// barge of a new process that took the dead one's entry (else two would hold at once).
#[test]
fn a_preempted_recoverer_does_not_end_a_later_barge_with_the_same_entry_and_count() {
    let owned = bounded(4);
    let st = owned.view();
    let later = std::sync::Mutex::new(None);
    let p = HookedPlatform::new(1);
    let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
    let (h, m) = queue(&st, &p, 2);
    release(&st, &p, &a, 1).unwrap(); // grants h
    let Barge::Took(dead) = try_barge(&st, &p, &me(3)) else {
        panic!("barge refused");
    };
    assert_eq!(dead.count, 1);
    // The barger's process is killed in its critical section.
    p.model.set_dead(3, true);
    let (stv, later_g) = (&st, &later);
    // The next look at a participant's liveness stops its caller right after it judged the
    // entry: what others do meanwhile.
    p.after_liveness(None, move |p| {
        // The recoverer judged entry 3 dead and is preempted. Meanwhile: the grantee of `h`
        // revokes the dead barger itself, is told, releases; the queue drains (count back
        // to 0).
        assert!(barge::end_barge(stv, p, 3, 1, true));
        let b = claim(stv, &p.model, h, &m);
        assert!(b.died);
        release(stv, p, &b, 2).unwrap();
        assert!(!stv.lock_word(SeqCst).queued());
        // A new process gets entry 3. A new queue forms; one of its threads barges: the
        // first barge since the drain, count 1 again.
        p.model.set_dead(3, false);
        clean_up_participant(stv, p, 3);
        let x = lock(stv, p, &me(5), None, &quick()).unwrap();
        let (h2, m2) = queue(stv, p, 6);
        release(stv, p, &x, 5).unwrap(); // grants h2
        let Barge::Took(g) = try_barge(stv, p, &me(3)) else {
            panic!("barge refused");
        };
        assert_eq!(g.count, 1, "the same identity as the dead barge");
        *later_g.lock().unwrap() = Some((g, h2, m2));
    });
    // A waiter's (or `try_lock`'s) recovery pass finds the dead barge.
    let _ = recover(&st, &p, st.next_ticket(), &mut Watch::default(), &quick());
    let (g, h2, m2) = later.lock().unwrap().take().expect("the hook ran");
    let lw = st.lock_word(SeqCst);
    if check(&st, &p, &g, 3).is_err() {
        let b2 = claim(&st, &p.model, h2, &m2);
        let released = release(&st, &p, &g, 3);
        panic!(
            "the recoverer ended the new process's live barge (word {lw:?}): ticket {} \
             claimed during it (told died: {}); the barger's release: {released:?}",
            b2.ticket, b2.died
        );
    }
    release(&st, &p, &g, 3).unwrap();
    let b2 = claim(&st, &p.model, h2, &m2);
    release(&st, &p, &b2, 6).unwrap();
}
