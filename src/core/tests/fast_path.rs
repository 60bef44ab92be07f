//! The lock word and the uncontended path: a grant and a release with one CAS each on the
//! word, a fast release that hands over to a queue, the died flag a leased taker carries from
//! the word, and the word's counter arithmetic — tickets taken with a `fetch_add` or a CAS
//! across the counter's wrap, the epoch's parity, slots refreshed at each wrap.

use super::support::{enqueue, me, state_of, word};
use crate::core::model::ModelPlatform;
use crate::core::state::lock_word::{self, LockWord};
use crate::core::state::{OwnedState, RecordKind};
use crate::core::{
    Me, Platform, Published, State, Taken, Tuning, WaitError, Watch, finish_unleased_release, lock,
    publish, recover, release, release_unleased_fast, revoke_own, take, try_fast,
};
use crate::primitive::Ordering::{Acquire, Relaxed, SeqCst};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};

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
    recover(&st, &p, t, &mut watch, &Tuning::default());
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

/// A weighted kind takes its tickets with a `fetch_add`, whose carry flips the epoch's parity
/// across the counter's wrap: tickets stay consecutive through the wrap.
#[test]
fn weighted_tickets_stay_consecutive_through_the_counter_s_wrap() {
    let o = OwnedState::of_kind(4, 4, RecordKind::semaphore(1));
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

/// `take_ticket` is one `fetch_add`, whatever the word it finds: a taker that stalls
/// (preempted, SIGSTOPped) while others take the tickets up to the last counter before the
/// wrap adds to that word, and the add's carry out of the counter flips `P`, the epoch's parity
/// right above it. (A wrap that left `P` alone would name that ticket and every later one a
/// whole epoch too low: tickets going backwards, a corrupt queue.)
///
/// The stall is stood in for by a second thread that moves the word from 2^16 + 1 tickets
/// before the last counter of an epoch to that last counter (as 2^16 takers would) at varying
/// moments during the taker's `take_ticket`. Whenever the taker gets the ticket before the
/// wrap, the next ticket is the one after it.
#[test]
fn a_stalled_fetch_add_taker_never_wraps_the_counter_without_flipping_the_parity() {
    let o = Arc::new(OwnedState::of_kind(4, 4, RecordKind::semaphore(1)));
    let mask = (1u64 << lock_word::COUNTER_BITS) - 1;
    let epoch = 5u64;
    let low = LockWord::initial(
        (epoch << lock_word::COUNTER_BITS) | (mask - (1 << 16) - 1),
        true,
    );
    let last = LockWord::initial((epoch << lock_word::COUNTER_BITS) | mask, true);
    let go = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // The "others": at a varying moment after the round starts, the word jumps to the last
    // counter before the wrap (if the taker has not taken its ticket yet).
    let others = {
        let (o, go, done, stop) = (
            Arc::clone(&o),
            Arc::clone(&go),
            Arc::clone(&done),
            Arc::clone(&stop),
        );
        std::thread::spawn(move || {
            let mut round = 0u64;
            while !stop.load(SeqCst) {
                if go.load(SeqCst) == round {
                    std::hint::spin_loop();
                    continue;
                }
                round += 1;
                for _ in 0..round % 64 {
                    std::hint::spin_loop();
                }
                let _ = o
                    .view()
                    .header()
                    .word
                    .compare_exchange(low.0, last.0, SeqCst, SeqCst);
                done.store(round, SeqCst);
            }
        })
    };
    let started = std::time::Instant::now();
    let mut bad = None;
    let mut hits = 0u64;
    let mut round = 0u64;
    while started.elapsed() < std::time::Duration::from_secs(3) && bad.is_none() {
        round += 1;
        let st = o.view();
        st.header().epoch.store(epoch, Relaxed);
        st.header().word.store(low.0, SeqCst);
        go.store(round, SeqCst);
        let t = st.take_ticket();
        while done.load(SeqCst) != round {
            std::hint::spin_loop();
        }
        if t & mask == mask {
            hits += 1;
            // The last ticket of epoch 5 was ours: the next one is epoch 6's ticket 0.
            let next = st.next_ticket();
            if next != t + 1 {
                bad = Some((t, next, st.lock_word(Relaxed)));
            }
        }
    }
    stop.store(true, SeqCst);
    others.join().unwrap();
    assert!(
        bad.is_none(),
        "after {round} rounds ({hits} with the ticket before the wrap): took {:#x}, next \
         ticket {:#x} (word {:?}): the counter wrapped without flipping P",
        bad.unwrap().0,
        bad.unwrap().1,
        bad.unwrap().2,
    );
}

/// `LockState::ticket_of` names a word's ticket from `epoch` read afterwards, unless the
/// reader stalled for a whole epoch. A taker reads the word one ticket before the counter
/// wraps, and reads `epoch` only after two others took the last ticket of the epoch and the
/// first of the next (the second raising `epoch` to 1): the word's parity is then older than
/// `epoch`'s, not newer, and the taker names the last ticket of epoch 0 and leaves `epoch` at 1.
/// (Raising it again, to 2, would make later tickets jump by epochs — and the next release walk
/// see a counter far beyond the next taker's, so that the lock, held by nobody, is never
/// granted again.) The next lock of the free lock gets the ticket after C's.
#[test]
fn a_word_read_just_before_the_counter_wraps_does_not_raise_the_epoch_twice() {
    let o = OwnedState::new(4, 8);
    let st = o.view();
    let p = ModelPlatform::new(1_000);
    let tuning = Tuning::default();
    let last = (1u64 << lock_word::COUNTER_BITS) - 1;
    // A lock that has handed out 2^40 − 1 tickets, all of them fast (epoch 0).
    st.header()
        .word
        .store(lock_word::LockWord::initial(last, false).0, Relaxed);
    // A taker loads the word (as `take` does before `take_behind` names its ticket) and is
    // preempted before `ticket_of` loads `epoch`.
    let seen = st.lock_word(Acquire);
    // Meanwhile B takes the last ticket of epoch 0 and C queues behind it (taking the first
    // ticket of epoch 1, which raises `epoch` to 1).
    let b = try_fast(&st, 1, 0).unwrap();
    assert_eq!(b.ticket, last);
    let Taken::Queued(c, _) = take(&st, &p, &me(2)) else {
        panic!("C queues behind B")
    };
    assert_eq!(c, 1 << lock_word::COUNTER_BITS);
    assert_eq!(st.header().epoch.load(Relaxed), 1);
    // The preempted taker resumes: the ticket its word names.
    let named = st.ticket_of(seen);
    // B releases, C is granted and releases: nobody holds the lock.
    release(&st, &p, &b, 1).unwrap();
    let gc = match publish(&st, &p, c, &me(2), None, &tuning, &mut Watch::default()).unwrap() {
        Published::Held(g) => g,
        _ => panic!("C was pre-granted by B's release"),
    };
    release(&st, &p, &gc, 2).unwrap();
    let deadline = p.now_ns() + 5 * tuning.grace_ns;
    let next = lock(&st, &p, &me(3), Some(deadline), &tuning);
    assert_eq!(
        (
            named,
            st.header().epoch.load(Relaxed),
            next.map(|g| g.token())
        ),
        (last, 1, Ok((1 << lock_word::COUNTER_BITS) + 2)),
        "(ticket named by the word read before the wrap, epoch, the next lock of a free lock)"
    );
}

/// Fast tickets never touch the slots, so a slot's lap may fall any number of laps behind
/// (`LapRelation::Behind`). Laps are compared modulo 2^44 with a 2^43 window: after 2^43 laps
/// of fast tickets (2^44 acquisitions with two slots — days of a busy uncontended lock) an
/// untouched slot's lap would read as *later* than the ticket's, and a taker that queues would
/// find its ticket "skipped" (`publish` → `Skipped`), retake 1000 times and fail with
/// `Corrupt` although a live holder simply holds the lock. The slots are refreshed whenever
/// the counter wraps, so a waiter behind a live holder just times out.
///
/// The test gets there the way a lock does: through every wrap of the counter in between, each
/// taken by a fast acquisition (the counter set to the last ticket of each epoch in turn).
#[test]
fn a_slot_untouched_for_2_pow_43_laps_is_still_behind() {
    let o = OwnedState::new(2, 8);
    let st = o.view();
    let p = ModelPlatform::new(1_000);
    let tuning = Tuning::default();
    let last = (1u64 << lock_word::COUNTER_BITS) - 1;
    // 2^44 + 2^43 uncontended acquisitions, the slots untouched by any of them: through every
    // wrap of the counter in between, each taken fast.
    let wraps = ((1u64 << 44) + (1 << 43)) >> lock_word::COUNTER_BITS;
    for epoch in 0..wraps {
        let t = (epoch << lock_word::COUNTER_BITS) | last;
        st.header()
            .word
            .store(lock_word::LockWord::initial(t, false).0, Relaxed);
        st.header().epoch.store(epoch, Relaxed);
        let g = lock(&st, &p, &me(1), None, &tuning).unwrap();
        assert_eq!(g.ticket, t);
        release(&st, &p, &g, 1).unwrap();
    }
    let start = (1u64 << 44) + (1 << 43);
    st.header()
        .word
        .store(lock_word::LockWord::initial(start, false).0, Relaxed);
    st.header()
        .epoch
        .store(start >> lock_word::COUNTER_BITS, Relaxed);
    let g = lock(&st, &p, &me(1), None, &tuning).unwrap();
    assert_eq!(g.ticket, start);
    // P2 waits behind P1, with a deadline.
    let deadline = p.now_ns() + 1_000_000;
    let r = lock(&st, &p, &me(2), Some(deadline), &tuning);
    assert_eq!(
        r,
        Err(WaitError::Timeout),
        "a waiter behind a live holder times out, nothing else"
    );
}
