//! The weighted kinds — the reader/writer lock and the semaphore — granted by weight in ticket
//! order: shares together, a writer alone and keeping later readers back, `try_*` that never
//! jumps the queue; long-held shares that neither block later shares nor lengthen walks.

use super::support::{claim, in_ms, me, publish_and_walk, share, state_of, ticking};
use crate::core::model::ModelPlatform;
use crate::core::state::format::cas;
use crate::core::state::slot_word::{State, Word};
use crate::core::state::{OwnedState, RecordKind};
use crate::core::weighted;
use crate::core::weighted::admit::holds_already;
use crate::core::weighted::walk::{self, Front, STEPS};
use crate::core::{
    LappedGiveUp, Look, Taken, Tuning, WaitError, Watch, give_up_lapped, lock, publish_once,
    release, take, try_lock,
};
use crate::primitive::Ordering::Relaxed;

#[test]
fn readers_hold_together_and_a_writer_keeps_later_readers_back() {
    let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    let r1 = lock(&st, &p, &share(1), None, &t).unwrap();
    let r2 = lock(&st, &p, &share(2), None, &t).unwrap();
    assert_eq!((r1.ticket, r2.ticket), (0, 1));
    let w = publish_and_walk(&st, &p, &me(3));
    let r3 = publish_and_walk(&st, &p, &share(4));
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
    let wg = claim(&st, &p, w, &me(3));
    assert!(wg.token() > r2.token());
    release(&st, &p, &wg, 3).unwrap();
    assert_eq!(state_of(&st, r3), Some(State::Granted));
}

#[test]
fn try_never_jumps_a_waiting_writer() {
    let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    let r1 = try_lock(&st, &p, &share(1), &t).unwrap().expect("free");
    let r2 = try_lock(&st, &p, &share(2), &t)
        .unwrap()
        .expect("readers share");
    assert!(try_lock(&st, &p, &me(3), &t).unwrap().is_none());
    let w = publish_and_walk(&st, &p, &me(3));
    assert!(
        try_lock(&st, &p, &share(4), &t).unwrap().is_none(),
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
    let _r1 = lock(&st, &p, &share(1), None, &t).unwrap();
    let w = publish_and_walk(&st, &p, &me(2));
    let r2 = publish_and_walk(&st, &p, &share(3));
    assert_eq!(state_of(&st, r2), Some(State::Waiting));
    // The writer times out: as `wait_for_grant` does, abandon and walk.
    let slot = st.slot(w);
    let ww = Word(slot.word.load(Relaxed));
    assert!(cas(slot, ww, ww.with_state(State::Abandoned)));
    walk::advance(&st, &p);
    assert_eq!(state_of(&st, r2), Some(State::Granted));
    // And through the real wait: a writer with a deadline already past.
    let e = lock(&st, &p, &me(4), Some(0), &t);
    assert_eq!(e, Err(WaitError::Timeout));
    let r3 = lock(&st, &p, &share(5), Some(0), &t).expect("nothing but readers ahead");
    assert!(r3.ticket > w);
}

#[test]
fn a_thread_holding_the_rwlock_is_found() {
    let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    let r = lock(&st, &p, &share(1), None, &t).unwrap();
    assert!(holds_already(&st, 1, 101));
    assert!(!holds_already(&st, 1, 102) && !holds_already(&st, 2, 101));
    release(&st, &p, &r, 1).unwrap();
    assert!(!holds_already(&st, 1, 101));
}

#[test]
fn a_front_admits_shares_up_to_the_capacity_and_an_exclusive_taker_alone() {
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

/// A reader holds ticket 0 of a 4-slot reader/writer lock for a long time; other readers come
/// and go (tickets 1..3). The next reader (ticket 4) shares with one reader only — it fits —
/// and is granted, although its slot is still ticket 0's: it does not wait for ticket 0's
/// release (with the default 256 slots, that would be after 255 reads during one long read,
/// every reader after it queued behind it).
#[test]
fn a_long_read_does_not_block_readers_n_tickets_later() {
    let o = OwnedState::of_kind(4, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ticking();
    let t = Tuning::default();
    let _long = lock(&st, &p, &share(1), None, &t).unwrap();
    for _ in 0..3 {
        let g = lock(&st, &p, &share(2), None, &t).unwrap();
        release(&st, &p, &g, 2).unwrap();
    }
    let g = lock(&st, &p, &share(2), in_ms(&p, 10), &t);
    assert!(g.is_ok(), "a reader next to one other reader waited: {g:?}");
}

/// The semaphore form: 2 permits (so 4 slots, the minimum), one held for a long time, the
/// other used over and over. The fourth reuse of the free permit, on the long holder's slot,
/// does not wait for the long holder.
#[test]
fn a_free_permit_is_granted_whatever_was_taken_n_tickets_ago() {
    let o = OwnedState::of_kind(4, 8, RecordKind::semaphore(2));
    let st = o.view();
    let p = ticking();
    let t = Tuning::default();
    let _long = lock(&st, &p, &share(1), None, &t).unwrap();
    for _ in 0..3 {
        let g = lock(&st, &p, &share(2), None, &t).unwrap();
        release(&st, &p, &g, 2).unwrap();
    }
    let g = lock(&st, &p, &share(2), in_ms(&p, 10), &t);
    assert!(g.is_ok(), "one permit of two free, yet no grant: {g:?}");
    assert!(
        try_lock(&st, &p, &share(3), &t).unwrap().is_none(),
        "(both permits held now)"
    );
}

/// Long-held shares taken one after another (workers that each take a permit at start-up)
/// occupy consecutive slots: a taker landing on the first of them is granted a free permit all
/// the same (a taker that stopped retaking after 16 tickets and waited for the 17th slot would
/// hold up every later ticket although a permit is free).
#[test]
fn a_free_permit_is_granted_next_to_seventeen_long_holders() {
    let o = OwnedState::of_kind(64, 8, RecordKind::semaphore(20));
    let st = o.view();
    let p = ticking();
    let t = Tuning::default();
    for _ in 0..17 {
        lock(&st, &p, &share(1), None, &t).unwrap(); // tickets 0..16, held
    }
    for i in 0..100 {
        let g = lock(&st, &p, &share(2), in_ms(&p, 10), &t).unwrap_or_else(|e| {
            panic!(
                "acquisition {i} (next ticket {}), 3 permits free: {e:?}",
                st.next_ticket()
            )
        });
        release(&st, &p, &g, 2).unwrap();
    }
}

/// After a retake, a thread's own read lies more than `N` tickets past `head` (pinned at the
/// long read): `holds_already` finds it all the same (scanning only `N` tickets from `head`, it
/// would not, and the thread's request for a write, not refused with `WouldDeadlock`, would
/// wait behind its own read).
#[test]
fn holds_already_finds_a_read_beyond_n_tickets_of_head() {
    let o = OwnedState::of_kind(4, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ticking();
    let t = Tuning::default();
    let _long = lock(&st, &p, &share(1), None, &t).unwrap(); // ticket 0
    for _ in 0..3 {
        let g = lock(&st, &p, &share(2), None, &t).unwrap();
        release(&st, &p, &g, 2).unwrap();
    }
    // Ticket 4 maps to the long read's slot: retaken as ticket 5.
    let mine = lock(&st, &p, &share(2), in_ms(&p, 10), &t).unwrap();
    assert_eq!(mine.ticket, 5);
    assert!(
        holds_already(&st, 2, 102),
        "participant 2 / tid 102 holds ticket 5, not found (head {})",
        st.header().head.load(Relaxed)
    );
}

/// `try_*` after a retake: the given-up ticket (its slot still the long read's) does not make
/// `admit::admits` answer no, so a `try_read` next to one reader and nobody waiting is
/// granted, as a blocking read is.
#[test]
fn a_try_read_after_a_retake_is_granted() {
    let o = OwnedState::of_kind(4, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ticking();
    let t = Tuning::default();
    let _long = lock(&st, &p, &share(1), None, &t).unwrap();
    for _ in 0..3 {
        let g = lock(&st, &p, &share(2), None, &t).unwrap();
        release(&st, &p, &g, 2).unwrap();
    }
    let g = lock(&st, &p, &share(2), in_ms(&p, 10), &t).unwrap(); // retook 4 -> 5
    release(&st, &p, &g, 2).unwrap();
    let tr = try_lock(&st, &p, &share(3), &t).unwrap();
    assert!(
        tr.is_some(),
        "one reader holds, nobody waits: try_read refused"
    );
}

/// A writer lapped behind a long-held read (its slot still the read's) is killed: walks
/// pass its ticket (its `lapped` entry names a dead process). Every later lap of that slot
/// is retaken by readers; the slot's given-up word must absorb them past the dead writer's
/// lap, so that readers go on taking tickets beside the long read: the dead writer's ticket is
/// passed with its bit set in that word (without it, its lap would stop the absorption, and
/// after 20 laps no ticket could be taken until the read ended). The same with a writer that
/// times out instead.
#[test]
fn a_dead_lapped_taker_behind_a_long_read_stops_no_reader() {
    for dies in [true, false] {
        let o = OwnedState::of_kind(4, 8, RecordKind::RWLOCK);
        let st = o.view();
        let p = ticking();
        let t = Tuning::default();
        let _long = lock(&st, &p, &share(1), None, &t).unwrap(); // ticket 0, slot 0
        for _ in 0..3 {
            let g = lock(&st, &p, &share(3), None, &t).unwrap();
            release(&st, &p, &g, 3).unwrap();
        }
        // Ticket 4 (slot 0): a writer, lapped behind the long read.
        let Taken::Queued(w4, _) = take(&st, &p, &me(2)) else {
            panic!("no ticket")
        };
        assert_eq!(w4, 4);
        let mut watch = Watch::default();
        assert!(matches!(
            publish_once(&st, &p, w4, &me(2), None, &t, &mut watch),
            Ok(Look::Lapped)
        ));
        if dies {
            p.set_dead(2, true);
        } else {
            assert_eq!(give_up_lapped(&st, &p, w4, 2), LappedGiveUp::Gone);
        }
        for i in 0..200 {
            let g = lock(&st, &p, &share(3), in_ms(&p, 200), &t).unwrap_or_else(|e| {
                panic!(
                    "writer dies {dies}: read {i} (next ticket {}): {e:?}",
                    st.next_ticket()
                )
            });
            release(&st, &p, &g, 3).unwrap();
        }
    }
}

/// A read held across more than `N` tickets makes walks start at `front`; once it ends,
/// `head` catches up and walks step from it again (left at the ended read, every later lock
/// and release would count every slot, and `status` step from there).
#[test]
fn head_catches_up_once_the_long_read_ended() {
    let o = OwnedState::of_kind(2, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    let long = lock(&st, &p, &share(1), None, &t).unwrap();
    for _ in 0..100 {
        let g = lock(&st, &p, &share(2), None, &t).unwrap();
        release(&st, &p, &g, 2).unwrap();
    }
    let head = st.header().head.load(Relaxed);
    assert_eq!(head, 0, "head stays at the long read while it is held");
    release(&st, &p, &long, 1).unwrap();
    for _ in 0..10 {
        let g = lock(&st, &p, &share(2), None, &t).unwrap();
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
/// every ticket taken since the long read began (a walk that stepped from `head`, the long
/// read, over all of them would be quadratic in the traffic).
#[test]
fn walks_beside_a_long_held_share_are_bounded_by_the_slots() {
    let o = OwnedState::of_kind(2, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    let long = lock(&st, &p, &share(1), None, &t).unwrap();
    let mut worst = 0;
    for i in 0..5_000u32 {
        STEPS.with(|c| c.set(0));
        let g = lock(&st, &p, &share(2), None, &t).unwrap();
        release(&st, &p, &g, 2).unwrap();
        let mut watch = Watch::default();
        let _ = weighted::recover::recover(&st, &p, st.next_ticket(), &mut watch, &t);
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
    let w = lock(&st, &p, &me(3), None, &t).expect("a writer after the long read");
    release(&st, &p, &w, 3).unwrap();
}

/// Parks ticket `t`'s waiter, as `wait_for_grant` does before it sleeps.
fn sleep_on(st: &crate::core::state::LockState<'_>, t: u64) {
    let slot = st.slot(t);
    let w = Word(slot.word.load(Relaxed));
    assert_eq!(w.state(), Some(State::Waiting));
    assert!(cas(slot, w, w.with_state(State::Sleeping)));
}

/// A walk that grants nudges the first sleeping ticket that does not fit behind its grants
/// (`Sleeping → Waiting` and a wake: TWA's early wake), so that it spins and takes its grant
/// without a futex round trip; a walk that grants nothing leaves it asleep. The same for a
/// semaphore's permits.
#[test]
fn a_grant_nudges_the_sleeping_ticket_behind_it() {
    let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    let w1 = lock(&st, &p, &me(1), None, &t).unwrap();
    let w2 = publish_and_walk(&st, &p, &me(2));
    let w3 = publish_and_walk(&st, &p, &me(3));
    sleep_on(&st, w2);
    sleep_on(&st, w3);
    walk::advance(&st, &p);
    assert_eq!(state_of(&st, w2), Some(State::Sleeping), "nothing granted");
    release(&st, &p, &w1, 1).unwrap();
    assert_eq!(state_of(&st, w2), Some(State::Granted));
    assert_eq!(
        state_of(&st, w3),
        Some(State::Waiting),
        "the writer behind the grant is nudged"
    );
    sleep_on(&st, w3);
    let g2 = claim(&st, &p, w2, &me(2));
    walk::advance(&st, &p);
    assert_eq!(state_of(&st, w3), Some(State::Sleeping), "nothing granted");
    release(&st, &p, &g2, 2).unwrap();
    assert_eq!(state_of(&st, w3), Some(State::Granted));

    let o = OwnedState::of_kind(8, 8, RecordKind::semaphore(2));
    let st = o.view();
    let p1 = lock(&st, &p, &share(1), None, &t).unwrap();
    let p2 = lock(&st, &p, &share(2), None, &t).unwrap();
    let p3 = publish_and_walk(&st, &p, &share(3));
    let p4 = publish_and_walk(&st, &p, &share(4));
    sleep_on(&st, p3);
    sleep_on(&st, p4);
    release(&st, &p, &p1, 1).unwrap();
    assert_eq!(state_of(&st, p3), Some(State::Granted));
    assert_eq!(
        state_of(&st, p4),
        Some(State::Waiting),
        "the permit behind the grant is nudged"
    );
    release(&st, &p, &p2, 2).unwrap();
}

/// A walk that nudges a sleeping writer (`Sleeping → Waiting`) and stops before its futex
/// wake — preempted or killed there — while a reader ahead of the writer holds, releases and
/// grants it: that grant sees `Waiting` and sends no wake. The grant is kept for the sleeper,
/// which claims it when the nudger's wake comes, or at its next poll (the failure model's row;
/// nothing is lost, only the wake-up waits).
#[test]
fn a_grant_behind_a_stopped_nudge_is_kept_for_its_sleeper() {
    use super::support::HookedPlatform;
    let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    let w1 = lock(&st, &p, &me(1), None, &t).unwrap();
    let r2 = publish_and_walk(&st, &p, &share(2));
    let w3 = publish_and_walk(&st, &p, &me(3));
    sleep_on(&st, w3);
    let ran = std::sync::atomic::AtomicBool::new(false);
    let hooked = HookedPlatform::new(1);
    // The first wake of the writer's release walk is the nudge: the reader, granted by that
    // walk, claims, holds and releases before it.
    hooked.before_wake(|_| {
        assert_eq!(state_of(&st, w3), Some(State::Waiting), "nudged");
        let g2 = claim(&st, &p, r2, &share(2));
        release(&st, &p, &g2, 2).unwrap();
        ran.store(true, Relaxed);
    });
    release(&st, &hooked, &w1, 1).unwrap();
    assert!(ran.load(Relaxed), "the walk nudged the writer");
    assert_eq!(state_of(&st, w3), Some(State::Granted));
    let g3 = claim(&st, &p, w3, &me(3));
    assert!(g3.token() > w1.token());
    release(&st, &p, &g3, 3).unwrap();
}
