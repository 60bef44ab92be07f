//! Deaths in the weighted kinds: dead holders' shares come back, the news of a death is told to
//! the batch granted next and to nobody after it, however many walkers grant it; tickets never
//! published are passed after the grace; frozen leased grantees are passed over.

use super::support::{
    HookedPlatform, claim, in_ms, me, publish_and_walk, publish_without_walk, share, state_of,
    ticking,
};
use crate::core::model::ModelPlatform;
use crate::core::state::slot_word::{LapRelation, relate};
use crate::core::state::{OwnedState, RecordKind};
use crate::core::weighted;
use crate::core::weighted::news::is_news;
use crate::core::{
    Ahead, Grant, Me, Platform, Published, State, Tuning, Watch, Word, advance, lock, publish,
    recover, release, try_lock,
};
use crate::primitive::Ordering::Relaxed;

#[test]
fn a_semaphore_admits_its_permits_in_order_and_a_dead_holders_permit_comes_back() {
    let o = OwnedState::of_kind(8, 8, RecordKind::semaphore(2));
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    let a = lock(&st, &p, &share(1), None, &t).unwrap();
    let b = lock(&st, &p, &share(2), None, &t).unwrap();
    let c = publish_and_walk(&st, &p, &share(3));
    let d = publish_and_walk(&st, &p, &share(4));
    assert_eq!(state_of(&st, c), Some(State::Waiting));
    assert!(try_lock(&st, &p, &share(5), &t).unwrap().is_none());
    p.set_dead(2, true);
    let mut watch = Watch::default();
    assert_eq!(
        weighted::recover::recover(&st, &p, d, &mut watch, &t),
        Ahead::Busy
    );
    // Revoked, its news delivered to c's grant, then rewritten so nobody reports it again.
    let bw = Word(st.slot(b.ticket).word.load(Relaxed));
    assert_eq!((bw.state(), bw.died()), (Some(State::Skipped), false));
    let cg = claim(&st, &p, c, &share(3));
    assert!(cg.died, "the grant after a death reports it");
    assert_eq!(
        state_of(&st, d),
        Some(State::Waiting),
        "two permits held: a and c"
    );
    release(&st, &p, &a, 1).unwrap();
    let dg = claim(&st, &p, d, &share(4));
    assert!(!dg.died, "the death was reported once");
    release(&st, &p, &cg, 3).unwrap();
    release(&st, &p, &dg, 4).unwrap();
    let e = try_lock(&st, &p, &share(5), &t).unwrap().expect("free");
    assert!(!e.died);
}

#[test]
fn a_dead_reader_is_revoked_past_live_ones() {
    let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    let _r1 = lock(&st, &p, &share(1), None, &t).unwrap();
    let r2 = lock(&st, &p, &share(2), None, &t).unwrap();
    let w = publish_and_walk(&st, &p, &me(3));
    p.set_dead(2, true);
    let mut watch = Watch::default();
    assert_eq!(
        weighted::recover::recover(&st, &p, w, &mut watch, &t),
        Ahead::Busy
    );
    // Revoked, then its news counted in the header (the word left a plain `Skipped`).
    assert_eq!(state_of(&st, r2.ticket), Some(State::Skipped));
    assert_eq!(st.header().deaths.load(Relaxed), 1);
    assert_eq!(
        state_of(&st, w),
        Some(State::Waiting),
        "the live reader still holds"
    );
}

#[test]
fn revoked_words_and_skipped_words_that_carry_a_death_are_news() {
    let w = Word::new(3, 1, State::Revoked, false);
    assert!(is_news(w));
    assert!(is_news(w.with_state(State::Skipped).with_died(true)));
    assert!(!is_news(w.with_state(State::Skipped)));
    assert!(!is_news(w.with_state(State::Done).with_died(true)));
}

#[test]
fn a_ticket_taken_but_never_published_is_passed_after_the_grace() {
    let o = OwnedState::of_kind(8, 8, RecordKind::semaphore(1));
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    // A taker that died between its ticket and its publication.
    let lost = st.take_ticket();
    let b = publish_and_walk(&st, &p, &share(2));
    assert_eq!(state_of(&st, b), Some(State::Waiting));
    let mut watch = Watch::default();
    assert!(matches!(
        weighted::recover::recover(&st, &p, b, &mut watch, &t),
        Ahead::Unclaimed(_)
    ));
    p.advance(t.grace_ns + 1);
    weighted::recover::recover(&st, &p, b, &mut watch, &t);
    assert_eq!(state_of(&st, lost), Some(State::Skipped));
    assert_eq!(state_of(&st, b), Some(State::Granted));
}

/// A long read ends after its slot's later laps were all retaken (given up, their words
/// never written: walks start at `front`); then a taker of that slot's next lap is killed
/// between its ticket and its publication. The slot's word is several laps behind, final,
/// every lap in between given up: the ticket is unpublished, not lapped, and is passed after
/// the grace — a reader after it gets in (taken for a lapped one, it would stop every walk for
/// good).
#[test]
fn a_dead_taker_behind_retaken_laps_is_passed_after_the_grace() {
    let o = OwnedState::of_kind(4, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ticking();
    let t = Tuning::default();
    let long = lock(&st, &p, &share(1), None, &t).unwrap(); // ticket 0, slot 0
    for _ in 0..40 {
        let g = lock(&st, &p, &share(3), None, &t).unwrap();
        release(&st, &p, &g, 3).unwrap();
    }
    release(&st, &p, &long, 1).unwrap();
    // Takers killed between their ticket and their publication, until one of slot 0.
    loop {
        let dead = st.take_ticket();
        if dead.is_multiple_of(4) {
            let w = Word(st.slot(dead).word.load(Relaxed));
            assert_eq!(
                relate(w.lap(), st.lap(dead)),
                LapRelation::Behind,
                "slot 0's word is laps behind ticket {dead}"
            );
            break;
        }
    }
    let g = lock(&st, &p, &share(4), in_ms(&p, 2_000), &t)
        .expect("a reader after the dead taker, once its grace passed");
    release(&st, &p, &g, 4).unwrap();
}

/// Two readers hold a 2-slot reader/writer lock; the first one's process dies. A third reader
/// arrives: one share is free (the dead one is revoked by the newcomer's own recovery), so it
/// is granted, and told of the death. Its ticket (t2) maps to the dead reader's slot, whose
/// `Revoked` word no grant has carried the news past — and the only ticket that could is t2
/// itself: the taker counts the death and publishes over the word, rather than poll until its
/// deadline (for ever without one).
#[test]
fn a_reader_after_a_dead_reader_is_granted_and_told() {
    let o = OwnedState::of_kind(2, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ticking(); // 1 µs per clock reading (1 ms under Miri)
    let t = Tuning::default();
    let _r0 = lock(&st, &p, &share(1), None, &t).unwrap();
    let _r1 = lock(&st, &p, &share(2), None, &t).unwrap();
    p.set_dead(1, true);
    // 10 ms of model time: far less than the grace, far more than a few polls.
    let r2 = lock(&st, &p, &share(3), in_ms(&p, 10), &t);
    assert!(
        matches!(r2, Ok(g) if g.died),
        "a reader that fits next to the live one was not granted (or not told): {r2:?}"
    );
}

/// The same without a deadline: the taker on the dead reader's slot returns, granted and told
/// (its own recovery never looks at its own ticket, and nobody else is there to skip it: it
/// must not wait for that slot). Run on a thread with a 3 s limit of real time (the model
/// clock runs on meanwhile, past many graces).
#[test]
fn a_reader_after_a_dead_reader_without_a_deadline_is_granted() {
    use std::sync::Arc;
    let o = Arc::new(OwnedState::of_kind(2, 8, RecordKind::RWLOCK));
    let p = Arc::new(ticking());
    let t = Tuning::default();
    let r1 = {
        let st = o.view();
        let _r0 = lock(&st, &*p, &share(1), None, &t).unwrap();
        lock(&st, &*p, &share(2), None, &t).unwrap()
    };
    p.set_dead(1, true);
    let (tx, rx) = std::sync::mpsc::channel();
    let (o2, p2) = (o.clone(), p.clone());
    std::thread::spawn(move || {
        let st = o2.view();
        let _ = tx.send(lock(&st, &*p2, &share(3), None, &Tuning::default()));
    });
    let got = rx.recv_timeout(std::time::Duration::from_secs(3));
    let _ = r1;
    assert!(
        matches!(got, Ok(Ok(g)) if g.died),
        "lock() on the dead reader's slot did not return within 3 s: {got:?}"
    );
}

/// The same with a semaphore that nobody ever waited on: a permit holder dies, the other permit
/// keeps being used (three quick acquire/release cycles, each granted at once, so nobody runs a
/// recovery), and the fourth acquisition — ticket 4, the dead holder's slot — gets the free
/// permit.
#[test]
fn a_semaphore_acquisition_on_a_dead_holders_slot_is_granted() {
    let o = OwnedState::of_kind(4, 8, RecordKind::semaphore(2));
    let st = o.view();
    let p = ticking();
    let t = Tuning::default();
    let _a = lock(&st, &p, &share(1), None, &t).unwrap();
    p.set_dead(1, true);
    for _ in 0..3 {
        let g = lock(&st, &p, &share(2), None, &t).unwrap();
        release(&st, &p, &g, 2).unwrap();
    }
    // Ticket 4's slot is still the dead holder's (ticket 0, not yet found dead: nobody needed
    // its permit). The taker retakes a ticket rather than wait for that slot, and one permit
    // is free: granted, not told (it needs nothing of the dead holder's).
    let g = lock(&st, &p, &share(2), in_ms(&p, 10), &t);
    let g = g.unwrap_or_else(|e| panic!("one permit free, yet: {e:?}"));
    assert!(!g.died);
    // The next one needs the dead holder's permit: recovered, and told.
    let h = lock(&st, &p, &share(3), in_ms(&p, 10), &t);
    assert!(
        matches!(h, Ok(h) if h.died),
        "the dead holder's permit did not come back with the news: {h:?}"
    );
}

/// A dead reader's death is told to some later grant — the next reader's, or the writer's
/// after everyone released — whatever the reader on the dead reader's slot does: a walk that
/// passes a given-up lapped ticket there (`walk::advance`, the `lapped::gone` branch) does
/// not erase the news by overwriting the previous lap's `Revoked` word with a plain
/// `Skipped`.
#[test]
fn a_dead_readers_death_is_reported_to_some_later_grant() {
    let o = OwnedState::of_kind(2, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ticking();
    let t = Tuning::default();
    let _r0 = lock(&st, &p, &share(1), None, &t).unwrap();
    let r1 = lock(&st, &p, &share(2), None, &t).unwrap();
    p.set_dead(1, true);
    let first = lock(&st, &p, &share(3), in_ms(&p, 10), &t);
    let mut told = matches!(first, Ok(g) if g.died);
    if let Ok(g) = first {
        release(&st, &p, &g, 3).unwrap();
    }
    release(&st, &p, &r1, 2).unwrap();
    let w = lock(&st, &p, &me(4), in_ms(&p, 10), &t).expect("nothing is held");
    told |= w.died;
    assert!(told, "t0's death was never reported (first try: {first:?})");
}

/// The same through the grace: a taker that took ticket t2 (the dead reader's slot) and has not
/// published (it is slow, or stalled) is skipped after the grace by the next waiter's
/// `weighted::recover`, whose CAS replaces the `Revoked` word of t0 by a `Skipped` of t2. The
/// news is not lost with it: the waiter, the first grant after the dead reader, is told.
#[test]
fn a_waiter_behind_an_unpublished_ticket_is_told_of_the_death_before_it() {
    let o = OwnedState::of_kind(2, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ticking();
    let t = Tuning::default();
    let _r0 = lock(&st, &p, &share(1), None, &t).unwrap();
    let r1 = lock(&st, &p, &share(2), None, &t).unwrap();
    p.set_dead(1, true);
    release(&st, &p, &r1, 2).unwrap();
    // A taker (participant 3) takes ticket 2 and is preempted before it publishes.
    let stalled = st.take_ticket();
    assert_eq!(stalled, 2);
    // A writer arrives (ticket 3, slot 1: free). One second of model time is plenty: the
    // grace is 50 ms.
    let w = lock(&st, &p, &me(4), in_ms(&p, 1_000), &t).expect("granted after the grace");
    assert_eq!(state_of(&st, stalled), Some(State::Skipped));
    assert!(
        w.died,
        "the first grant after the dead reader (ticket 0) was not told"
    );
}

/// A writer (participant 1) holds; two readers wait behind it, the first parked. The writer's
/// process dies. Walker A (a waiter's recovery) revokes it and grants the first reader with
/// `died`; while A is in the futex wake, walker B (any publication or release) walks and
/// grants the second reader. The two readers are the batch after the dead writer: both are
/// told, whichever walk grants them.
#[test]
fn two_walkers_tell_the_whole_batch_once() {
    let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
    let st = o.view();
    let model = ModelPlatform::new(1);
    let t = Tuning::default();
    let _w = lock(&st, &model, &me(1), None, &t).unwrap();
    let a = share(2);
    let b = share(3);
    let ta = publish_without_walk(&st, &a);
    // Reader a parks (`Waiting → Sleeping`), as `park` does.
    let slot = st.slot(ta);
    let wa = Word(slot.word.load(Relaxed));
    slot.word.store(wa.with_state(State::Sleeping).0, Relaxed);
    let tb = publish_without_walk(&st, &b);
    let st2 = st;
    // Walker A's first wake (of the parked reader a) stops it between its grant CAS and its
    // rewrite of the news words.
    let hooked = HookedPlatform::new(1);
    hooked.before_wake(move |_| {
        // Walker B, on another thread, while A is between its grant and its rewrite.
        advance(&st2, &ModelPlatform::new(1), 0, false);
    });
    hooked.model.set_dead(1, true);
    let mut watch = Watch::default();
    let _ = recover(&st, &hooked, tb, &mut watch, &t);
    let ga = claim(&st, &model, ta, &a);
    let gb = claim(&st, &model, tb, &b);
    assert!(ga.died, "the first grant after the death is told");
    // B's walk granted b after A's grant had told the death and raised `told`; b joins the
    // batch of a told reader (a still holds), so it is told too: it reads what the dead writer
    // left, whichever walk grants it.
    assert!(
        gb.died,
        "a reader granted next to a told one, by another walk, was not told"
    );
}

/// Eight holders die at once: the two readers granted together after them are both told (a
/// batch reads what the dead left), and a reader granted once that batch released is not.
#[test]
fn eight_deaths_are_told_to_one_batch_and_not_again() {
    let o = OwnedState::of_kind(16, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    for _ in 0..7 {
        lock(&st, &p, &share(1), None, &t).unwrap();
    }
    let w = lock(&st, &p, &me(1), Some(p.now_ns() + 1), &t);
    assert!(w.is_err(), "a writer behind readers waits");
    let (a, b) = (share(2), share(3));
    let ta = publish_without_walk(&st, &a);
    let tb = publish_without_walk(&st, &b);
    p.set_dead(1, true);
    let mut watch = Watch::default();
    let _ = recover(&st, &p, tb, &mut watch, &t);
    let ga = claim(&st, &p, ta, &a);
    let gb = claim(&st, &p, tb, &b);
    assert!(ga.died && gb.died, "the batch after the deaths is told");
    release(&st, &p, &ga, 2).unwrap();
    release(&st, &p, &gb, 3).unwrap();
    // The told batch has ended: a reader granted now is not told again.
    let c = lock(&st, &p, &share(4), Some(p.now_ns() + 1_000_000), &t).unwrap();
    assert!(!c.died, "the deaths were told again");
    release(&st, &p, &c, 4).unwrap();
}

/// After a dead writer, every reader of the batch granted next is told (each reads what the
/// writer left half done); the next batch is not.
#[test]
fn every_reader_of_the_batch_after_a_dead_writer_is_told() {
    let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    let _w = lock(&st, &p, &me(1), None, &t).unwrap();
    let readers = [share(2), share(3), share(4)];
    let tickets: Vec<u64> = readers
        .iter()
        .map(|r| publish_without_walk(&st, r))
        .collect();
    p.set_dead(1, true);
    let mut watch = Watch::default();
    let _ = recover(&st, &p, tickets[2], &mut watch, &t);
    let grants: Vec<Grant> = readers
        .iter()
        .zip(&tickets)
        .map(|(r, &tk)| claim(&st, &p, tk, r))
        .collect();
    assert!(grants.iter().all(|g| g.died), "{grants:?}");
    for (g, r) in grants.iter().zip(&readers) {
        release(&st, &p, g, r.participant).unwrap();
    }
    let next = lock(&st, &p, &share(5), None, &t).unwrap();
    assert!(!next.died);
}

/// A dead writer; reader R1 is granted and told; reader R2 arrives while R1 holds and is
/// granted by its own walk, after `told` was raised: it shares R1's batch and reads what the
/// writer left, so it is told too. A reader granted after that batch ended is not.
#[test]
fn a_reader_that_joins_a_told_batch_by_its_own_walk_is_told() {
    let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ticking();
    let t = Tuning::default();
    let _w = lock(&st, &p, &me(1), None, &t).unwrap();
    let r1 = share(2);
    let t1 = publish_without_walk(&st, &r1);
    p.set_dead(1, true);
    let mut watch = Watch::default();
    let _ = recover(&st, &p, t1, &mut watch, &t);
    let g1 = claim(&st, &p, t1, &r1);
    assert!(g1.died);
    let g2 = lock(&st, &p, &share(3), in_ms(&p, 10), &t).unwrap();
    assert!(
        g2.died,
        "a reader of the batch after the dead writer, holding together with a told one, was not told"
    );
    release(&st, &p, &g1, 2).unwrap();
    release(&st, &p, &g2, 3).unwrap();
    let g3 = lock(&st, &p, &share(4), in_ms(&p, 10), &t).unwrap();
    assert!(!g3.died, "the batch had ended");
}

/// Two leased readers (two processes) are granted and then frozen before they claim (their
/// lease stays `Pending(100 ms)`): a frozen grantee does not block the queue — each is skipped
/// once seen pending for its lease. A writer waits behind both and recovers every 50 ms with
/// its one `Watch`, as `wait_for_grant` does: the `Watch` times both grantees at once (with
/// one key, they would reset each other's timer at every pass and neither ever expire).
#[test]
fn two_frozen_leased_grantees_are_passed_over() {
    let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ModelPlatform::new(0);
    let t = Tuning::default();
    for participant in [1, 2] {
        let who = Me {
            tid: 10 + participant,
            lease_ms: Some(100),
            ..share(participant)
        };
        let tk = st.take_ticket();
        let mut watch = Watch::default();
        assert!(matches!(
            publish(&st, &p, tk, &who, None, &t, &mut watch),
            Ok(Published::Waiting(_))
        ));
        assert_eq!(
            state_of(&st, tk),
            Some(State::Granted),
            "granted, never claimed"
        );
    }
    let w = publish_without_walk(&st, &me(3));
    advance(&st, &p, w, false);
    let mut watch = Watch::default();
    for _ in 0..40 {
        p.advance(50_000_000);
        let _ = recover(&st, &p, w, &mut watch, &t);
    }
    // Two seconds of model time: twenty times the grantees' lease.
    assert_eq!(
        (state_of(&st, 0), state_of(&st, 1), state_of(&st, w)),
        (
            Some(State::Skipped),
            Some(State::Skipped),
            Some(State::Granted)
        )
    );
}

/// More frozen leased grantees than a `Watch` has observations (four): five (lease 200 ms,
/// polls every 50 ms) observed in turn by one recovering writer. When full, the `Watch` makes
/// way by dropping its *newest* timer, so the older ones reach their lease and the grantees are
/// passed one after another: the writer is granted within 4 s of model time (20 leases).
/// (Dropping the oldest instead, they would reset each other's timers for ever.)
#[test]
fn five_frozen_leased_grantees_are_passed_over() {
    let o = OwnedState::of_kind(8, 16, RecordKind::RWLOCK);
    let st = o.view();
    let p = ModelPlatform::new(0);
    let t = Tuning::default();
    for participant in 1..=5u32 {
        let who = Me {
            participant,
            tid: 10 + participant,
            lease_ms: Some(200),
            shared: true,
            beacon: 0,
        };
        let tk = st.take_ticket();
        let mut watch = Watch::default();
        assert!(matches!(
            publish(&st, &p, tk, &who, None, &t, &mut watch),
            Ok(Published::Waiting(_))
        ));
        assert_eq!(state_of(&st, tk), Some(State::Granted));
    }
    let w = publish_without_walk(&st, &me(6));
    advance(&st, &p, w, false);
    let mut watch = Watch::default();
    for _ in 0..80 {
        p.advance(50_000_000);
        let _ = recover(&st, &p, w, &mut watch, &t);
    }
    let states: Vec<_> = (0..=w).map(|k| state_of(&st, k)).collect();
    assert_eq!(
        states[w as usize],
        Some(State::Granted),
        "4 s of model time, 20 leases: {states:?}"
    );
}
