//! The queue: tickets published, granted in order and claimed; timeouts and the given-up
//! tickets walks pass at once; lapped takers (their slot still an earlier lap's) and the room
//! a slot keeps for their giving up; the news of a death carried along a walk.

use super::support::{HookedPlatform, enqueue, hold_in_slot, me, state_of, time_out, word};
use crate::core::exclusive::fast;
use crate::core::model::ModelPlatform;
use crate::core::queue::{frontier, given_up, lapped};
use crate::core::state::lock_state::cas_word;
use crate::core::{
    Ahead, Claim, Grant, LappedGiveUp, Me, OwnedState, Platform, Published, State, Taken, Tuning,
    WaitError, Watch, Word, advance, claim_granted, give_up_lapped, lock, lock_queued,
    lock_watched, publish, recover, release, revoke_own, take, try_lock,
};
use crate::primitive::Ordering::{Acquire, Relaxed};
use std::sync::Mutex;

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

/// A taker whose ticket was skipped after the grace (it stalled between taking the ticket and
/// publishing) queues again with a new ticket, behind the one that overtook it (retrying the
/// old one could only end in a report of corruption).
#[test]
fn taker_skipped_after_the_grace_queues_again() {
    let o = OwnedState::new(8, 4);
    let st = o.view();
    let p = ModelPlatform::new(0);
    let tuning = Tuning::default();
    let (stalled, t1) = skipped_then_overtaken(&st, &p, &tuning);
    let deadline = Some(p.now_ns() + 1);
    let g = lock_watched(
        &st,
        &p,
        &me(1),
        deadline,
        &tuning,
        Some((stalled, 0)),
        Watch::default(),
    )
    .unwrap();
    assert!(
        g.ticket > t1,
        "queued again behind the ticket that overtook it"
    );
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

/// A lapped `lock_timeout(0)` recovers once before it gives up: with only the dead ahead it
/// gets the lock (the dead holder revoked), rather than time out for ever.
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
/// array): their given-up tickets are recorded, all of them, and the waiter that comes after
/// the hold sits out no grace.
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
    let g1 = match claim_granted(&st, &p, 1, &me(1)).unwrap() {
        Claim::Held(g) => g,
        c => panic!("{c:?}"),
    };
    release(&st, &p, &g1, 1).unwrap();
    let next = st.next_ticket();
    let mut watch = Watch::default();
    let mut graces = 0;
    loop {
        match recover(&st, &p, next, &mut watch, &t) {
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
/// out, the clock never moved. (A given-up ticket that a walk pre-granted instead would cost a
/// grace each: hours for a polling loop.)
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
    let mut held = match claim_granted(&st, &p, t1, &me(1)).unwrap() {
        Claim::Held(g) => g,
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
        recover(&st, &p, next, &mut Watch::default(), &t),
        Ahead::Clear
    );
    let g = try_lock(&st, &p, &me(4), &t).unwrap().expect("idle");
    assert!(g.fast && !g.died);
}

/// A lapped taker of a later lap gives up while the slot's word pre-grants an earlier one,
/// still unclaimed: the pre-granted taker, alive, keeps its grant (its lap is not read as given
/// up) until it claims it: the later give-up never rebases the slot's given-up word onto the
/// pre-granted lap, which recovery would then pass as given up.
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
    let g1 = match claim_granted(&st, &p, t1, &me(1)).unwrap() {
        Claim::Held(g) => g,
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
    assert_eq!(give_up_lapped(&st, &p, t4, 3), LappedGiveUp::Gone);
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
    assert_eq!(give_up_lapped(&st, &p, t6, 3), LappedGiveUp::Gone);
    assert!(
        !given_up::given_up(st.slot(t2), st.lap(t2)),
        "ticket 2 did not give up"
    );
    let mut watch = Watch::default();
    assert!(matches!(
        recover(&st, &p, st.next_ticket(), &mut watch, &t),
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
    assert!(lapped::gone(s0, st.lap(2), &p));
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

/// A holder that released normally is never reported dead to the next holder: the walk that
/// passes a given-up lapped ticket (2) re-reads the previous lap's `Revoked` word, whose news a
/// grant already delivered (to ticket 1), and does not hand it on again (to ticket 3).
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
    assert!(lapped::gone(st.slot(2), st.lap(2), &p));
    // Ticket 0's owner dies holding: revoked, ticket 1 granted and told (rightly).
    revoke_own(&st, &p, &g0, 0).unwrap();
    let g1 = match claim_granted(&st, &p, t1, &me(1)).unwrap() {
        Claim::Held(g) => g,
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

/// A walk that carries a death's news (`died`) to the counter and finds its drain beaten by
/// another walker's (which passed the news on in `D`) reloads the word; if a new queued period
/// has begun meanwhile, it goes on at that period's `head` *without* the old news: the fast
/// holder in between was told and released normally, so the new period's first grant (here:
/// a pre-grant) is not told again.
///
/// Schedule (two slots): P1 fast, P2 queued and granted (ticket 1), P4 gives ticket 2 up,
/// P3 takes ticket 3 and is killed while lapped (its slot still held by ticket 1). P2's thread
/// panics while holding: `revoke_own` revokes ticket 1 and walks (A). A passes 1 (died) and 2,
/// and looks at the lapped record of 3 (the hook): meanwhile walker B drains the queue (D
/// set), F takes the lock fast (told), releases it, and a leased taker L takes ticket 5 with
/// `Q` and is preempted before its walk. A then drains in vain, reloads, and pre-grants 5 —
/// without the died flag.
#[test]
fn a_walk_does_not_carry_a_drained_queues_news_into_the_next_queue() {
    let o = OwnedState::new(2, 8);
    let st = o.view();
    let q = ModelPlatform::new(1_000);
    let tuning = Tuning::default();
    let g1 = lock(&st, &q, &me(1), None, &tuning).unwrap();
    assert_eq!(g1.ticket, 0);
    let Taken::Queued(t1, _) = take(&st, &q, &me(2)) else {
        panic!()
    };
    assert!(matches!(
        publish(&st, &q, t1, &me(2), None, &tuning, &mut Watch::default()).unwrap(),
        Published::Waiting(_)
    ));
    release(&st, &q, &g1, 1).unwrap();
    let g2 = match claim_granted(&st, &q, t1, &me(2)).unwrap() {
        Claim::Held(g) => g,
        c => panic!("{c:?}"),
    };
    // P4 times out on ticket 2 (deadline already past).
    let d = q.now_ns();
    assert!(lock_queued(&st, &q, &me(4), Some(d), &tuning, None, Watch::default()).is_err());
    // P3 takes ticket 3; its slot is still ticket 1's: it registers as lapped and is killed.
    let Taken::Queued(t3, _) = take(&st, &q, &me(3)) else {
        panic!()
    };
    assert_eq!(t3, 3);
    lapped::register(st.slot(t3), st.lap(t3), 3);
    q.set_dead(3, true);
    let told = Mutex::new(Vec::new());
    let leased = Me {
        lease_ms: Some(60_000),
        ..me(6)
    };
    let p = HookedPlatform::new(1_000);
    p.after_liveness(Some(3), |_| {
        // B: another walker passes the queue and drains it with the news.
        advance(&st, &q, st.header().head.load(Relaxed), false);
        assert!(st.lock_word(Relaxed).died() && !st.lock_word(Relaxed).queued());
        // F takes the lock fast (told) and releases it normally.
        let f = lock(&st, &q, &me(5), None, &tuning).unwrap();
        told.lock().unwrap().push(("F", f.died));
        release(&st, &q, &f, 5).unwrap();
        // L, leased, takes a free word without news: raises head, sets Q with its ticket
        // (`take`), and is preempted before the walk that pre-grants it.
        let w = st.lock_word(Acquire);
        let t = st.ticket_of(w);
        frontier::raise_head(&st, t);
        assert!(cas_word(&st, w, w.taken().with_queued()));
    });
    p.model.set_dead(3, true);
    // P2's thread panics while holding ticket 1: revoked, and the walk (A) begins.
    revoke_own(&st, &p, &g2, 2).unwrap();
    assert!(!p.liveness_hook_pending(), "the hook ran");
    // L resumes: its walk, then its publish.
    advance(&st, &q, 5, false);
    let gl = match publish(&st, &q, 5, &leased, None, &tuning, &mut Watch::default()).unwrap() {
        Published::Held(g) => g,
        _ => panic!("L was pre-granted"),
    };
    told.lock().unwrap().push(("L", gl.died));
    assert_eq!(
        *told.lock().unwrap(),
        vec![("F", true), ("L", false)],
        "P2's death told to F and again to L (after F released normally)"
    );
}

/// A waiter told to stop (its watch's `abandon` says so: an asynchronous acquisition whose
/// future was dropped) whose ticket was skipped meanwhile (published after the grace) gives up:
/// it never takes another ticket, which the free lock would grant to nobody.
#[test]
fn a_stopped_waiter_whose_ticket_was_skipped_takes_no_other() {
    let o = OwnedState::new(8, 4);
    let st = o.view();
    let p = ModelPlatform::new(0);
    let tuning = Tuning::default();
    let (stalled, _) = skipped_then_overtaken(&st, &p, &tuning);
    let stop = || true;
    let r = lock_watched(
        &st,
        &p,
        &me(1),
        None,
        &tuning,
        Some((stalled, 0)),
        Watch::default().abandoning(&stop),
    );
    assert!(matches!(r, Err(WaitError::Interrupted)), "{r:?}");
    // The lock is free: nobody holds or waits.
    assert!(!st.lock_word(Relaxed).held());
}

/// A taker that takes a ticket and stalls before publishing it past the grace: participant 2,
/// queued behind it, has it skipped, then claims its own grant and releases. Returns the
/// stalled taker's ticket (now skipped; the lock free) and the one that overtook it.
fn skipped_then_overtaken(
    st: &crate::core::LockState<'_>,
    p: &ModelPlatform,
    tuning: &Tuning,
) -> (u64, u64) {
    let stalled = fast::take_queued(st, p);
    let t1 = enqueue(st, 2);
    let mut watch = Watch::default();
    recover(st, p, t1, &mut watch, tuning);
    p.advance(tuning.grace_ns);
    recover(st, p, t1, &mut watch, tuning);
    assert_eq!(state_of(st, stalled), Some(State::Skipped));
    let w = word(st, t1);
    st.slot(t1)
        .word
        .compare_exchange(w.0, w.with_state(State::Held).0, Relaxed, Relaxed)
        .unwrap();
    release(st, p, &Grant::of(t1, false, false, false), 2).unwrap();
    (stalled, t1)
}
