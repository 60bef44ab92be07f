//! Unit tests of the weighted walk, recovery, admission and news.

use crate::core::platform::Tuning;
use crate::core::queue::watch::{Ahead, Watch};
use crate::core::state::LockState;
use crate::core::state::format::cas;
use crate::core::state::slot_word::{LapRelation, State, Word, relate};
use crate::core::weighted::admit::*;
use crate::core::weighted::news::*;
use crate::core::weighted::recover::*;
use crate::core::weighted::walk::*;
use crate::primitive::Ordering::Relaxed;

/// A writer lapped behind a long-held read (its slot still the read's) is killed: walks
/// pass its ticket (its `lapped` entry names a dead process). Every later lap of that slot
/// is retaken by readers; the slot's given-up word must absorb them past the dead writer's
/// lap, so that readers go on taking tickets beside the long read. (Passed without a bit,
/// the dead writer's lap stopped the absorption: after 20 laps no ticket could be taken
/// until the read ended. Review finding.) The same with a writer that times out instead.
#[test]
fn a_dead_lapped_taker_behind_a_long_read_stops_no_reader() {
    use crate::core::weighted_test_support::{in_ms, ticking};
    for dies in [true, false] {
        let o = OwnedState::of_kind(4, 8, RecordKind::RWLOCK);
        let st = o.view();
        let p = ticking();
        let t = Tuning::default();
        let _long = lock(&st, &p, &me(1, true), None, &t).unwrap(); // ticket 0, slot 0
        for _ in 0..3 {
            let g = lock(&st, &p, &me(3, true), None, &t).unwrap();
            release(&st, &p, &g, 3).unwrap();
        }
        // Ticket 4 (slot 0): a writer, lapped behind the long read.
        let crate::core::Taken::Queued(w4, _) = crate::core::take(&st, &p, &me(2, false)) else {
            panic!("no ticket")
        };
        assert_eq!(w4, 4);
        let mut watch = Watch::default();
        assert!(matches!(
            crate::core::publish_once(&st, &p, w4, &me(2, false), None, &t, &mut watch),
            Ok(crate::core::Look::Lapped)
        ));
        if dies {
            p.set_dead(2, true);
        } else {
            assert_eq!(
                crate::core::give_up_lapped(&st, &p, w4, 2),
                crate::core::LappedGiveUp::Gone
            );
        }
        for i in 0..200 {
            let g = lock(&st, &p, &me(3, true), in_ms(&p, 200), &t).unwrap_or_else(|e| {
                panic!(
                    "writer dies {dies}: read {i} (next ticket {}): {e:?}",
                    st.next_ticket()
                )
            });
            release(&st, &p, &g, 3).unwrap();
        }
    }
}

/// A long read ends after its slot's later laps were all retaken (given up, their words
/// never written: walks start at `front`); then a taker of that slot's next lap is killed
/// between its ticket and its publication. The slot's word is several laps behind, final,
/// every lap in between given up: the ticket is unpublished, not lapped, and is passed after
/// the grace — a reader after it gets in. (It was taken for a lapped one, and every walk
/// stopped at it for good: found by the soak test.)
#[test]
fn a_dead_taker_behind_retaken_laps_is_passed_after_the_grace() {
    use crate::core::weighted_test_support::{in_ms, ticking};
    let o = OwnedState::of_kind(4, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ticking();
    let t = Tuning::default();
    let long = lock(&st, &p, &me(1, true), None, &t).unwrap(); // ticket 0, slot 0
    for _ in 0..40 {
        let g = lock(&st, &p, &me(3, true), None, &t).unwrap();
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
    let g = lock(&st, &p, &me(4, true), in_ms(&p, 2_000), &t)
        .expect("a reader after the dead taker, once its grace passed");
    release(&st, &p, &g, 4).unwrap();
}

/// A read held across more than `N` tickets makes walks start at `front`; once it ends,
/// `head` catches up and walks step from it again. (It stayed at the ended read for good:
/// every later lock and release counted every slot, and `status` stepped from there.)
#[test]
fn head_catches_up_once_the_long_read_ended() {
    let o = OwnedState::of_kind(2, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = crate::core::model::ModelPlatform::new(1);
    let t = Tuning::default();
    let long = lock(&st, &p, &me(1, true), None, &t).unwrap();
    for _ in 0..100 {
        let g = lock(&st, &p, &me(2, true), None, &t).unwrap();
        release(&st, &p, &g, 2).unwrap();
    }
    let head = st.header().head.load(Relaxed);
    assert_eq!(head, 0, "head stays at the long read while it is held");
    release(&st, &p, &long, 1).unwrap();
    for _ in 0..10 {
        let g = lock(&st, &p, &me(2, true), None, &t).unwrap();
        release(&st, &p, &g, 2).unwrap();
    }
    let (head, front, next) = (
        st.header().head.load(Relaxed),
        st.header().front.load(Relaxed),
        st.next_ticket(),
    );
    assert!(
        next.wrapping_sub(head) <= st.slot_count(),
        "head {head}, front {front}, next {next}: walks still start at front"
    );
}

/// A read held while thousands of others come and go on a 2-slot file: every walk and
/// recovery looks at a bounded number of tickets (the slots, and the waiting ones), not at
/// every ticket taken since the long read began (each walk stepped from `head`, the long
/// read, over all of them: quadratic in the traffic).
#[test]
fn walks_beside_a_long_held_share_are_bounded_by_the_slots() {
    let o = OwnedState::of_kind(2, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    let long = lock(&st, &p, &me(1, true), None, &t).unwrap();
    let mut worst = 0;
    for i in 0..5_000u32 {
        STEPS.with(|c| c.set(0));
        let g = lock(&st, &p, &me(2, true), None, &t).unwrap();
        release(&st, &p, &g, 2).unwrap();
        let mut watch = Watch::default();
        let _ = recover(&st, &p, st.next_ticket(), &mut watch, &t);
        let steps = STEPS.with(|c| c.get());
        if i > 100 {
            worst = worst.max(steps);
        }
    }
    assert!(
        worst <= 64,
        "{worst} tickets looked at by one lock, unlock and recovery"
    );
    release(&st, &p, &long, 1).unwrap();
    let w = lock(&st, &p, &me(3, false), None, &t).expect("a writer after the long read");
    release(&st, &p, &w, 3).unwrap();
}
use crate::core::model::ModelPlatform;
use crate::core::state::{OwnedState, RecordKind};
use crate::core::weighted_test_support::{claim, me, state_of};
use crate::core::{Me, lock, release, try_lock};

/// Takes a ticket and publishes it (as `publish` does, walk included), without waiting.
fn enqueue(st: &LockState<'_>, p: &ModelPlatform, who: &Me) -> u64 {
    let t = st.take_ticket();
    let slot = st.slot(t);
    let w = Word(slot.word.load(Relaxed));
    assert_eq!(relate(w.lap(), st.lap(t)), LapRelation::Previous);
    let waiting =
        Word::new(st.lap(t), who.participant, State::Waiting, false).with_shared(who.shared);
    assert!(cas(slot, w, waiting));
    advance(st, p);
    t
}

#[test]
fn readers_hold_together_and_a_writer_keeps_later_readers_back() {
    let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    let r1 = lock(&st, &p, &me(1, true), None, &t).unwrap();
    let r2 = lock(&st, &p, &me(2, true), None, &t).unwrap();
    assert_eq!((r1.ticket, r2.ticket), (0, 1));
    let w = enqueue(&st, &p, &me(3, false));
    let r3 = enqueue(&st, &p, &me(4, true));
    assert_eq!(state_of(&st, w), Some(State::Waiting));
    assert_eq!(
        state_of(&st, r3),
        Some(State::Waiting),
        "a reader after a writer waits"
    );
    release(&st, &p, &r1, 1).unwrap();
    assert_eq!(
        state_of(&st, w),
        Some(State::Waiting),
        "one reader still holds"
    );
    release(&st, &p, &r2, 2).unwrap();
    assert_eq!(state_of(&st, w), Some(State::Granted));
    assert_eq!(state_of(&st, r3), Some(State::Waiting));
    let wg = claim(&st, &p, w, &me(3, false));
    assert!(wg.token() > r2.token());
    release(&st, &p, &wg, 3).unwrap();
    assert_eq!(state_of(&st, r3), Some(State::Granted));
}

#[test]
fn a_semaphore_admits_its_permits_in_order_and_a_dead_holders_permit_comes_back() {
    let o = OwnedState::of_kind(8, 8, RecordKind::semaphore(2));
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    let a = lock(&st, &p, &me(1, true), None, &t).unwrap();
    let b = lock(&st, &p, &me(2, true), None, &t).unwrap();
    let c = enqueue(&st, &p, &me(3, true));
    let d = enqueue(&st, &p, &me(4, true));
    assert_eq!(state_of(&st, c), Some(State::Waiting));
    assert!(try_lock(&st, &p, &me(5, true), &t).unwrap().is_none());
    p.set_dead(2, true);
    let mut watch = Watch::default();
    assert_eq!(recover(&st, &p, d, &mut watch, &t), Ahead::Busy);
    // Revoked, its news delivered to c's grant, then rewritten so nobody reports it again.
    let bw = Word(st.slot(b.ticket).word.load(Relaxed));
    assert_eq!((bw.state(), bw.died()), (Some(State::Skipped), false));
    let cg = claim(&st, &p, c, &me(3, true));
    assert!(cg.died, "the grant after a death reports it");
    assert_eq!(
        state_of(&st, d),
        Some(State::Waiting),
        "two permits held: a and c"
    );
    release(&st, &p, &a, 1).unwrap();
    let dg = claim(&st, &p, d, &me(4, true));
    assert!(!dg.died, "the death was reported once");
    release(&st, &p, &cg, 3).unwrap();
    release(&st, &p, &dg, 4).unwrap();
    let e = try_lock(&st, &p, &me(5, true), &t).unwrap().expect("free");
    assert!(!e.died);
}

#[test]
fn try_never_jumps_a_waiting_writer() {
    let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    let r1 = try_lock(&st, &p, &me(1, true), &t).unwrap().expect("free");
    let r2 = try_lock(&st, &p, &me(2, true), &t)
        .unwrap()
        .expect("readers share");
    assert!(try_lock(&st, &p, &me(3, false), &t).unwrap().is_none());
    let w = enqueue(&st, &p, &me(3, false));
    assert!(
        try_lock(&st, &p, &me(4, true), &t).unwrap().is_none(),
        "a reader may not pass a waiting writer"
    );
    release(&st, &p, &r1, 1).unwrap();
    release(&st, &p, &r2, 2).unwrap();
    assert_eq!(state_of(&st, w), Some(State::Granted));
}

#[test]
fn a_writer_that_gives_up_lets_the_readers_behind_it_in() {
    let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    let _r1 = lock(&st, &p, &me(1, true), None, &t).unwrap();
    let w = enqueue(&st, &p, &me(2, false));
    let r2 = enqueue(&st, &p, &me(3, true));
    assert_eq!(state_of(&st, r2), Some(State::Waiting));
    // The writer times out: as `wait_for_grant` does, abandon and walk.
    let slot = st.slot(w);
    let ww = Word(slot.word.load(Relaxed));
    assert!(cas(slot, ww, ww.with_state(State::Abandoned)));
    advance(&st, &p);
    assert_eq!(state_of(&st, r2), Some(State::Granted));
    // And through the real wait: a writer with a deadline already past.
    let e = lock(&st, &p, &me(4, false), Some(0), &t);
    assert_eq!(e, Err(crate::core::WaitError::Timeout));
    let r3 = lock(&st, &p, &me(5, true), Some(0), &t).expect("nothing but readers ahead");
    assert!(r3.ticket > w);
}

#[test]
fn a_ticket_taken_but_never_published_is_passed_after_the_grace() {
    let o = OwnedState::of_kind(8, 8, RecordKind::semaphore(1));
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    // A taker that died between its ticket and its publication.
    let lost = st.take_ticket();
    let b = enqueue(&st, &p, &me(2, true));
    assert_eq!(state_of(&st, b), Some(State::Waiting));
    let mut watch = Watch::default();
    assert!(matches!(
        recover(&st, &p, b, &mut watch, &t),
        Ahead::Unclaimed(_)
    ));
    p.advance(t.grace_ns + 1);
    recover(&st, &p, b, &mut watch, &t);
    assert_eq!(state_of(&st, lost), Some(State::Skipped));
    assert_eq!(state_of(&st, b), Some(State::Granted));
}

#[test]
fn a_dead_reader_is_revoked_past_live_ones() {
    let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    let _r1 = lock(&st, &p, &me(1, true), None, &t).unwrap();
    let r2 = lock(&st, &p, &me(2, true), None, &t).unwrap();
    let w = enqueue(&st, &p, &me(3, false));
    p.set_dead(2, true);
    let mut watch = Watch::default();
    assert_eq!(recover(&st, &p, w, &mut watch, &t), Ahead::Busy);
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
fn a_thread_holding_the_rwlock_is_found() {
    let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    let r = lock(&st, &p, &me(1, true), None, &t).unwrap();
    assert!(holds_already(&st, 1, 101));
    assert!(!holds_already(&st, 1, 102) && !holds_already(&st, 2, 101));
    release(&st, &p, &r, 1).unwrap();
    assert!(!holds_already(&st, 1, 101));
}

#[test]
fn admission() {
    let none = Front::default();
    assert!(none.admits(true, 1) && none.admits(false, 1));
    let readers = Front {
        shared: 2,
        exclusive: false,
        told: false,
    };
    assert!(readers.admits(true, 3) && !readers.admits(true, 2));
    assert!(!readers.admits(false, 3));
    let writer = Front {
        shared: 0,
        exclusive: true,
        told: false,
    };
    assert!(!writer.admits(true, 8) && !writer.admits(false, 8));
}

#[test]
fn news_words() {
    let w = Word::new(3, 1, State::Revoked, false);
    assert!(is_news(w));
    assert!(is_news(w.with_state(State::Skipped).with_died(true)));
    assert!(!is_news(w.with_state(State::Skipped)));
    assert!(!is_news(w.with_state(State::Done).with_died(true)));
}
