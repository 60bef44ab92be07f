//! Deterministic tests of bounded bypass ([`super::barge`]) on heap memory with the scripted
//! platform: the count against the bound, tokens between two queued grants, the Dekker pair
//! with the claim, and dead bargers.

use super::barge::{Barge, try_barge, with_arrival};
use super::claim::{Claim, claim_granted_with};
use super::fast::{Taken, take};
use super::layout::{OwnedState, RecordKind};
use super::model::ModelPlatform;
use super::publish::{Published, publish};
use super::recover::{Watch, recover};
use super::*;
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

fn quick() -> Tuning {
    Tuning {
        spin_ns: 0,
        ..Tuning::default()
    }
}

/// Takes a ticket for `who` and publishes it as a waiter, the way `lock_watched` does in a
/// bounded file (its arrival count in the slot). Returns the ticket and the `Me` it published
/// with.
fn queue(st: &LockState<'_>, p: &ModelPlatform, who: u32) -> (u64, Me) {
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
    match claim_granted_with(st, p, t, m, &quick()).unwrap() {
        Claim::Held(g) => g,
        other => panic!("ticket {t}: {other:?}"),
    }
}

fn bounded(k: u32) -> OwnedState {
    OwnedState::of_kind(8, 8, RecordKind::bounded(k))
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
    holder::release(&st, &p, &a, 1).unwrap(); // grants `t`; its waiter is "asleep"
    let mut tokens = vec![st.token(&a)];
    for j in 1..=2u8 {
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
        holder::release(&st, &p, &g, 3).unwrap();
    }
    // The third would overtake the waiter a third time.
    assert_eq!(try_barge(&st, &p, &me(3)), Barge::No);
    let b = claim(&st, &p, t, &b_me);
    assert_eq!((b.ticket, b.overtaken, b.died), (t, 2, false));
    tokens.push(st.token(&b));
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert_eq!(
        tokens,
        vec![t << 6, (t << 6) + 1, (t << 6) + 2, (t + 1) << 6]
    );
    holder::release(&st, &p, &b, 2).unwrap();
    assert!(!st.lock_word(Relaxed).queued(), "the queue drained");
}

#[test]
fn a_waiter_that_came_after_some_barges_is_overtaken_at_most_k_times_in_all() {
    let owned = bounded(3);
    let st = owned.view();
    let p = ModelPlatform::new(1);
    let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
    let (t1, m1) = queue(&st, &p, 2);
    holder::release(&st, &p, &a, 1).unwrap();
    // Two barges ahead of t1; then t3 arrives (arrival count 2); one more barge ahead of t1.
    for _ in 0..2 {
        let Barge::Took(g) = try_barge(&st, &p, &me(3)) else {
            panic!("refused");
        };
        holder::release(&st, &p, &g, 3).unwrap();
    }
    let Barge::Took(g) = try_barge(&st, &p, &me(3)) else {
        panic!("refused");
    };
    let (t2, m2) = queue(&st, &p, 4); // taken while a barge holds: arrival 3
    holder::release(&st, &p, &g, 3).unwrap();
    assert_eq!(
        try_barge(&st, &p, &me(3)),
        Barge::No,
        "t1 was overtaken 3 times"
    );
    let b1 = claim(&st, &p, t1, &m1);
    assert_eq!(b1.overtaken, 3);
    holder::release(&st, &p, &b1, 2).unwrap(); // grants t2
    // t2 arrived after all three: three more barges may overtake it, not four.
    for j in 1..=3u8 {
        let Barge::Took(g) = try_barge(&st, &p, &me(3)) else {
            panic!("barge {j} ahead of t2 refused");
        };
        assert_eq!((g.ticket, g.bypass), (t2 - 1, j));
        holder::release(&st, &p, &g, 3).unwrap();
    }
    assert_eq!(try_barge(&st, &p, &me(3)), Barge::No);
    let b2 = claim(&st, &p, t2, &m2);
    assert_eq!(b2.overtaken, 3);
    holder::release(&st, &p, &b2, 4).unwrap();
}

#[test]
fn no_barge_in_a_strict_file_nor_ahead_of_a_claimed_or_pregranted_ticket() {
    let owned = OwnedState::new(8, 8);
    let st = owned.view();
    let p = ModelPlatform::new(1);
    let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
    let (t, m) = queue(&st, &p, 2);
    holder::release(&st, &p, &a, 1).unwrap();
    assert_eq!(try_barge(&st, &p, &me(3)), Barge::No, "strict");
    let b = claim(&st, &p, t, &m);
    assert_eq!(st.token(&b), t + 1, "strict tokens are ticket + 1");
    holder::release(&st, &p, &b, 2).unwrap();

    let owned = bounded(5);
    let st = owned.view();
    let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
    let (t, m) = queue(&st, &p, 2);
    holder::release(&st, &p, &a, 1).unwrap();
    let b = claim(&st, &p, t, &m);
    // Held by the queue: the barger can only wait for it (then queue).
    assert_eq!(try_barge(&st, &p, &me(3)), Barge::Busy);
    holder::release(&st, &p, &b, 2).unwrap();
    // Free, nobody queued: not a barge, the fast path's.
    assert_eq!(try_barge(&st, &p, &me(3)), Barge::No);
}

#[test]
fn a_grantee_that_claimed_while_a_barge_held_waits_for_it_and_is_woken() {
    let owned = bounded(4);
    let st = owned.view();
    let p = ModelPlatform::new(1);
    let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
    let (t, m) = queue(&st, &p, 2);
    holder::release(&st, &p, &a, 1).unwrap();
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
        while word_state(&st, t) != Some(State::Held) {
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
        holder::release(&st, &p, &g, 3).unwrap();
        let b = claimer.join().unwrap();
        assert_eq!((b.overtaken, b.died), (1, false));
        holder::release(&st, &p, &b, 2).unwrap();
    });
}

fn word_state(st: &LockState<'_>, t: u64) -> Option<State> {
    let w = Word(st.slot(t).word.load(Relaxed));
    (w.lap() == st.lap(t)).then(|| w.state()).flatten()
}

#[test]
fn a_barger_that_finds_the_grant_claimed_after_its_cas_backs_off_and_keeps_the_news() {
    let owned = bounded(4);
    let st = owned.view();
    let p = ModelPlatform::new(1);
    let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
    let (t, m) = queue(&st, &p, 2);
    holder::release(&st, &p, &a, 1).unwrap();
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
    assert!(barge::end_barge(&st, &p, 3, t, true));
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
    holder::release(&st, &p, &b, 2).unwrap();
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
        holder::release(&st, &p, &a, 1).unwrap();
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
        holder::release(&st, &p, &b, 2).unwrap();
        // The news was told once.
        let c = claim(&st, &p, t2, &m2);
        assert!(!c.died);
        holder::release(&st, &p, &c, 4).unwrap();
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
    holder::release(&st, &p, &a, 1).unwrap();
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
    assert_eq!(word_state(&st, t2), Some(State::Waiting));
    holder::release(&st, &p, &g, 3).unwrap();
    // Then the next waiter's recovery revokes the dead grantee and t2 is granted, told its
    // predecessor died.
    let _ = recover(&st, &p, t2, &mut Watch::default(), &quick());
    assert_eq!(word_state(&st, t), Some(State::Revoked));
    assert_eq!(word_state(&st, t2), Some(State::Granted));
    let c = claim(&st, &p, t2, &m2);
    assert!(c.died);
    holder::release(&st, &p, &c, 4).unwrap();
}

#[test]
fn bounded_kinds_round_trip_and_refuse_out_of_range_bounds() {
    assert_eq!(RecordKind::decode(0, 7), Some(RecordKind::bounded(7)));
    assert_eq!(RecordKind::decode(0, 64), None);
    assert_eq!(RecordKind::decode(1, 7), None);
    assert_eq!(RecordKind::bounded(7).bypass_bound(), 7);
    assert_eq!(RecordKind::semaphore(7).bypass_bound(), 0);
    assert_eq!(layout::token_of(0, 9, 0), 10);
    assert_eq!(layout::token_of(5, 9, 3), (10 << 6) + 3);
}

#[test]
fn a_barger_whose_head_was_granted_claimed_and_released_before_its_cas_gives_the_lock_back() {
    // The word does not change when a grantee claims, releases and the walk grants the next:
    // the barger's CAS from what it saw succeeds, its look at the slot finds `Done`, and it
    // must undo the barge although `head` has moved on (it identified the barge by `head`,
    // failed to find it, and left `H` set for ever: every thread of `tests/bounded.rs` hung).
    let owned = bounded(4);
    let st = owned.view();
    let p = ModelPlatform::new(1);
    let a = lock(&st, &p, &me(1), None, &quick()).unwrap();
    let (t1, m1) = queue(&st, &p, 2);
    let (t2, m2) = queue(&st, &p, 4);
    holder::release(&st, &p, &a, 1).unwrap();
    let seen = barge::look(&st).expect("a barge is possible");
    let b = claim(&st, &p, t1, &m1);
    holder::release(&st, &p, &b, 2).unwrap(); // grants t2, head moves to t2
    assert_eq!(st.header().head.load(Relaxed), t2);
    assert_eq!(barge::commit(&st, &p, &me(3), seen), Barge::No);
    let lw = st.lock_word(Relaxed);
    assert!(!lw.held() && !lw.barged(), "the undone barge left {lw:?}");
    let c = claim(&st, &p, t2, &m2);
    assert!(!c.died);
    holder::release(&st, &p, &c, 4).unwrap();
    assert!(!st.lock_word(Relaxed).queued());
}
