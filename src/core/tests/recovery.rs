//! Recovery: dead holders revoked and dead waiters skipped (in one pass), the news told to the
//! next holder; pre-grants nobody claims, skipped after the grace; leases taken over; a dead
//! process's entry cleaned up by its next owner; garbage in the shared words.

use super::support::{HookedPlatform, enqueue, hold_in_slot, leased, me, state_of, word};
use crate::core::exclusive::fast;
use crate::core::model::ModelPlatform;
use crate::core::state::lease;
use crate::core::{
    Claim, Grant, Look, Lost, Me, OwnedState, Platform, Published, State, Tuning, Watch, advance,
    check, claim_granted, clean_up_participant, extend, lock, publish, publish_once, recover,
    release, revoke_own, try_lock,
};
use crate::primitive::Ordering::Relaxed;
use std::sync::Mutex;

#[test]
fn dead_holder_is_revoked_and_next_is_told() {
    let o = OwnedState::new(8, 4);
    let st = o.view();
    let p = ModelPlatform::new(1_000);
    let g = hold_in_slot(&st, &p, 1);
    let t = enqueue(&st, 2);
    p.set_dead(1, true);
    let mut watch = Watch::default();
    recover(&st, &p, t, &mut watch, &Tuning::default());
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
    recover(&st, &p, live, &mut Watch::default(), &Tuning::default());
    assert_eq!(state_of(&st, dead), Some(State::Skipped));
    assert_eq!(state_of(&st, live), Some(State::Granted));
}

/// A dead holder followed by dead waiters: one `recover` pass by the live waiter behind them
/// revokes the holder, skips every dead grantee in turn and leaves the live waiter granted
/// (with the died flag): no dead grantee is left to a later poll (an idle poll, 50 ms, per
/// dead ticket).
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
    recover(&st, &p, live, &mut watch, &Tuning::default());
    assert_eq!(state_of(&st, g.ticket), Some(State::Revoked));
    for t in dead_waiters {
        assert_eq!(state_of(&st, t), Some(State::Skipped), "ticket {t}");
    }
    let w = word(&st, live);
    assert_eq!(w.state(), Some(State::Granted));
    assert!(w.died(), "the next holder must learn that the owner died");
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

/// `recover` checks the fast holder's entry for death, and the dead process's entry is
/// reclaimed right after that look by a new process — which cleans it up (revoking the dead
/// grant, told) and then takes the lock fast under the same entry. The recoverer never
/// revokes the *new, live* holder's grant, and `try_lock` does not take the lock while that
/// holder holds it (two holders at once).
#[test]
fn recover_never_revokes_a_live_fast_holder_of_a_reclaimed_entry() {
    let o = OwnedState::new(4, 8);
    let st = o.view();
    let q = ModelPlatform::new(1_000);
    let tuning = Tuning::default();
    // X (entry 5) holds the lock fast, then its process is killed.
    let gx = lock(&st, &q, &me(5), None, &tuning).unwrap();
    assert!(gx.fast);
    let reborn: Mutex<Option<Grant>> = Mutex::new(None);
    let p = HookedPlatform::new(1_000);
    p.after_liveness(Some(5), |_| {
        // Right after the recoverer saw entry 5 dead: a new process claims entry 5, cleans up
        // what X left (revoking its grant, news in the word), and takes the lock fast.
        clean_up_participant(&st, &q, 5);
        let g = lock(&st, &q, &me(5), None, &tuning).unwrap();
        assert!(g.fast && g.died, "the new owner of entry 5 is told X died");
        *reborn.lock().unwrap() = Some(g);
    });
    p.model.set_dead(5, true);
    let other = try_lock(&st, &p, &me(6), &tuning).unwrap();
    let g5 = reborn.lock().unwrap().expect("the hook ran");
    assert_eq!(
        (check(&st, &q, &g5, 5), other),
        (Ok(()), None),
        "the live new owner of entry 5 lost its fast grant to a recoverer that judged X dead, \
         and try_lock took the lock while it holds it"
    );
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
    recover(&st, &p, t1, &mut watch, &tuning);
    assert_eq!(state_of(&st, t0), Some(State::Ready));
    p.advance(tuning.grace_ns - 1);
    recover(&st, &p, t1, &mut watch, &tuning);
    assert_eq!(state_of(&st, t0), Some(State::Ready));
    p.advance(1);
    recover(&st, &p, t1, &mut watch, &tuning);
    assert_eq!(state_of(&st, t0), Some(State::Skipped));
    assert_eq!(state_of(&st, t1), Some(State::Granted));
}

/// One dead pre-grant ahead (its taker died between taking the ticket and claiming it),
/// nobody holding: within a few `try_lock`s (each waits out a grace at most) it is skipped
/// and the lock taken, with a clock that moves 1 µs or 1 ms per reading.
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
    recover(&st, &p, t, &mut watch, &tuning);
    assert_eq!(
        state_of(&st, g.ticket),
        Some(State::Held),
        "not expired yet"
    );
    // Extension in time moves the deadline.
    p.advance(90_000_000);
    extend(&st, &p, g.ticket, 1, 100).unwrap();
    p.advance(90_000_000);
    recover(&st, &p, t, &mut watch, &tuning);
    assert_eq!(state_of(&st, g.ticket), Some(State::Held), "extended");
    p.advance(20_000_000);
    recover(&st, &p, t, &mut watch, &tuning);
    assert_eq!(state_of(&st, g.ticket), Some(State::Revoked));
    let w = word(&st, t);
    assert_eq!(w.state(), Some(State::Granted));
    assert!(w.died());
    assert_eq!(check(&st, &p, &g, 1), Err(Lost));
    assert_eq!(extend(&st, &p, g.ticket, 1, 100), Err(Lost));
    assert_eq!(release(&st, &p, &g, 1), Err(Lost));
    assert!(t + 1 > g.token());
}

/// A leased holder checks that it still holds its ticket and then stalls, before writing its
/// new deadline (`extend`): meanwhile its lease runs out, it is taken over, and a later ticket
/// of the same slot is granted with a lease of its own and commits its deadline. When the
/// stalled holder goes on, its write fails (it reads `LockLost`) and the later ticket's
/// deadline stays. (Each grant's deadline is in its slot; overwritten with the stalled
/// holder's lap's, the later lease could never be judged expired.)
#[test]
fn a_stalled_extend_never_overwrites_a_later_ticket_s_deadline() {
    let o = OwnedState::new(2, 8);
    let st = o.view();
    let t = Tuning::default();
    let p = ModelPlatform::new(0);
    let a = lock(&st, &p, &leased(1, 100), None, &t).unwrap();
    assert_eq!((a.ticket, a.leased), (0, true));
    let later = Mutex::new(None);
    // The stalled holder's platform: its next clock reading (in `extend`, after its check)
    // first plays what happens while it is stopped there.
    let hooked = HookedPlatform::new(0);
    hooked.before_now(|q| {
        // (The stalled holder's platform: its own clock, moved on with the others'.)
        q.model.advance(10_000_000_000);
        p.advance(10_000_000_000);
        // Its lease ran out: taken over by the next taker's recovery.
        let mut watch = Watch::default();
        let _ = recover(&st, &p, st.next_ticket(), &mut watch, &t);
        // Leased grants until one uses slot 0 again (a later lap): that one is kept.
        loop {
            let b = lock(&st, &p, &leased(2, 60_000), None, &t).unwrap();
            if b.ticket % 2 == 0 {
                *later.lock().unwrap() = Some(b);
                break;
            }
            release(&st, &p, &b, 2).unwrap();
        }
    });
    hooked.model.advance(p.now_ns() - hooked.model.now_ns());
    assert_eq!(
        extend(&st, &hooked, a.ticket, 1, 30_000),
        Err(Lost),
        "the stalled holder lost its grant"
    );
    let b = later.lock().unwrap().expect("the later ticket was granted");
    let d = lease::Deadline(st.slot(b.ticket).deadline.load(Relaxed));
    assert_eq!(
        d.of(st.lap(b.ticket)),
        Some(p.now_ns() / 1_000_000 + 60_000),
        "the later ticket's deadline stays its own"
    );
    release(&st, &p, &b, 2).unwrap();
}

/// The new owner of a dead process's participant entry gives up every lapped ticket the
/// slots' `lapped` entries say that process took, so that walks pass them at once (none is
/// left pre-granted, to wait out the grace).
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
            publish_once(&st, &p, tk, &me(who), None, &t, &mut w),
            Ok(Look::Lapped)
        ));
        tk
    };
    let t2 = lapped_ticket(5);
    let t3 = lapped_ticket(6);
    assert_eq!((t1, t2, t3), (1, 2, 3));
    // Participant 5's process is killed; a new process claims entry 5 and cleans up.
    clean_up_participant(&st, &p, 5);
    release(&st, &p, &g0, 0).unwrap();
    let Claim::Held(g1) = claim_granted(&st, &p, t1, &me(1)).unwrap() else {
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
        recover(
            &st,
            &p,
            x.rotate_left(11),
            &mut Watch::default(),
            &Tuning::default(),
        );
    }
}

/// A weighted lock's word never shows a fast holder; one that does (a corrupt or foreign file)
/// is left alone by the clean-up of the entry it names: no exclusive walk runs over the
/// weighted slots, the word stays queued, and shares are still granted.
#[test]
fn a_weighted_word_that_shows_a_fast_holder_is_left_to_the_weighted_walk() {
    use crate::core::state::RecordKind;
    use crate::core::state::lock_word::LockWord;
    for kind in [RecordKind::RWLOCK, RecordKind::semaphore(2)] {
        let o = OwnedState::of_kind(8, 4, kind);
        let st = o.view();
        let p = ModelPlatform::new(0);
        let w = LockWord(st.header().word.load(Relaxed));
        assert!(w.queued() && !w.held());
        st.header().word.store(w.with_holder(1).0, Relaxed);
        clean_up_participant(&st, &p, 1);
        assert!(LockWord(st.header().word.load(Relaxed)).queued());
        let reader = Me {
            shared: true,
            ..me(2)
        };
        let g = lock(&st, &p, &reader, None, &Tuning::default()).expect("a share is granted");
        assert!(release(&st, &p, &g, 2).is_ok());
    }
}
