//! Regression tests from the adversarial review of the weighted FIFO (614ce19): each failed on
//! that code. Scripted platform, heap state (`cargo test -p fairlock --lib weighted_review`).
//! Finding 3 (one lease deadline per process, several leased grants) is fixed by a deadline per
//! grant, in its slot, and tested through the API (`tests/kinds_review.rs`).

use super::*;
#[allow(unused_imports)]
use crate::core::exclusive::{advance, barge, fast};
use crate::core::model::ModelPlatform;
use crate::core::platform::{Liveness, Platform};
use crate::core::queue::watch::Watch;
#[allow(unused_imports)]
use crate::core::queue::{claim, frontier, given_up, lapped, publish};
#[allow(unused_imports)]
use crate::core::robust::{cleanup, leasing, recover};
#[allow(unused_imports)]
use crate::core::state::{self as layout, lease, lock_word, slot_word as word};
use crate::core::state::{OwnedState, RecordKind};
use crate::core::weighted_test_support::*;
#[allow(unused_imports)]
use crate::core::{acquire as wait, release as holder, weighted::walk as weighted};
use crate::primitive::AtomicU64;
use crate::primitive::Ordering::Relaxed;
use std::cell::RefCell;

// ---------------------------------------------------------------------------------------------
// Finding 1: a dead holder's news on the slot the next taker needs.

/// Two readers hold a 2-slot reader/writer lock; the first one's process dies. A third reader
/// arrives: one share is free (the dead one is revoked by the newcomer's own recovery), so it
/// must be granted, and told of the death. On 614ce19 its ticket (t2) maps to the dead
/// reader's slot, whose `Revoked` word `may_reuse` refuses to overwrite until a grant carried
/// the news past it — and the only ticket that could carry it is t2 itself, which cannot
/// publish. It polls until its deadline (for ever without one).
#[test]
fn a_reader_after_a_dead_reader_is_granted_and_told() {
    let o = OwnedState::of_kind(2, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ticking(); // 1 µs per clock reading (1 ms under Miri)
    let t = Tuning::default();
    let _r0 = lock(&st, &p, &me(1, true), None, &t).unwrap();
    let _r1 = lock(&st, &p, &me(2, true), None, &t).unwrap();
    p.set_dead(1, true);
    // 10 ms of model time: far less than the grace, far more than a few polls.
    let r2 = lock(&st, &p, &me(3, true), in_ms(&p, 10), &t);
    assert!(
        matches!(r2, Ok(g) if g.died),
        "a reader that fits next to the live one was not granted (or not told): {r2:?}"
    );
}

/// The same with a semaphore that nobody ever waited on: a permit holder dies, the other permit
/// keeps being used (three quick acquire/release cycles, each granted at once, so nobody ran a
/// recovery), and the fourth acquisition — ticket 4, the dead holder's slot — never gets a
/// permit although one is free.
#[test]
fn a_semaphore_acquisition_on_a_dead_holders_slot_is_granted() {
    let o = OwnedState::of_kind(4, 8, RecordKind::semaphore(2));
    let st = o.view();
    let p = ticking();
    let t = Tuning::default();
    let _a = lock(&st, &p, &me(1, true), None, &t).unwrap();
    p.set_dead(1, true);
    for _ in 0..3 {
        let g = lock(&st, &p, &me(2, true), None, &t).unwrap();
        release(&st, &p, &g, 2).unwrap();
    }
    // Ticket 4's slot is still the dead holder's (ticket 0, not yet found dead: nobody needed
    // its permit). The taker retakes a ticket rather than wait for that slot, and one permit
    // is free: granted, not told (it needs nothing of the dead holder's).
    let g = lock(&st, &p, &me(2, true), in_ms(&p, 10), &t);
    let g = g.unwrap_or_else(|e| panic!("one permit free, yet: {e:?}"));
    assert!(!g.died);
    // The next one needs the dead holder's permit: recovered, and told.
    let h = lock(&st, &p, &me(3, true), in_ms(&p, 10), &t);
    assert!(
        matches!(h, Ok(h) if h.died),
        "the dead holder's permit did not come back with the news: {h:?}"
    );
}

/// Where the death goes when the stalled taker above gives up: its lapped give-up lets the walk
/// pass its ticket by overwriting the previous lap's `Revoked` word with a plain `Skipped`
/// (`weighted::advance`, `lapped::gone` branch) — the news is erased, and no later grant is
/// told that a reader died.
#[test]
fn a_dead_readers_death_is_reported_to_some_later_grant() {
    let o = OwnedState::of_kind(2, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ticking();
    let t = Tuning::default();
    let _r0 = lock(&st, &p, &me(1, true), None, &t).unwrap();
    let r1 = lock(&st, &p, &me(2, true), None, &t).unwrap();
    p.set_dead(1, true);
    let first = lock(&st, &p, &me(3, true), in_ms(&p, 10), &t);
    let mut told = matches!(first, Ok(g) if g.died);
    if let Ok(g) = first {
        release(&st, &p, &g, 3).unwrap();
    }
    release(&st, &p, &r1, 2).unwrap();
    let w = lock(&st, &p, &me(4, false), in_ms(&p, 10), &t).expect("nothing is held");
    told |= w.died;
    assert!(told, "t0's death was never reported (first try: {first:?})");
}

/// The same loss through the grace: a taker that took ticket t2 (the dead reader's slot) and has
/// not published (it cannot: `may_reuse`; or it is merely slow) is skipped after the grace by
/// the next waiter's `weighted::recover`, whose CAS replaces the `Revoked` word of t0 by a
/// clean `Skipped` of t2. The waiter is then granted without `died`.
#[test]
fn a_waiter_behind_an_unpublished_ticket_is_told_of_the_death_before_it() {
    let o = OwnedState::of_kind(2, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ticking();
    let t = Tuning::default();
    let _r0 = lock(&st, &p, &me(1, true), None, &t).unwrap();
    let r1 = lock(&st, &p, &me(2, true), None, &t).unwrap();
    p.set_dead(1, true);
    release(&st, &p, &r1, 2).unwrap();
    // A taker (participant 3) takes ticket 2 and is preempted before it publishes.
    let stalled = st.take_ticket();
    assert_eq!(stalled, 2);
    // A writer arrives (ticket 3, slot 1: free). One second of model time is plenty: the
    // grace is 50 ms.
    let w = lock(&st, &p, &me(4, false), in_ms(&p, 1_000), &t).expect("granted after the grace");
    assert_eq!(state_of(&st, stalled), Some(State::Skipped));
    assert!(
        w.died,
        "the first grant after the dead reader (ticket 0) was not told"
    );
}

// ---------------------------------------------------------------------------------------------
// Finding 2: a ticket needs its slot, so one old holder blocks acquisitions that fit.

/// A reader holds ticket 0 of a 4-slot reader/writer lock for a long time; other readers come
/// and go (tickets 1..3). The next reader (ticket 4) shares with one reader only — it fits —
/// yet waits for ticket 0's release, because its slot is still ticket 0's. With the default
/// 256 slots this happens after 255 reads during one long read; every reader after it queues
/// behind it.
#[test]
fn a_long_read_does_not_block_readers_n_tickets_later() {
    let o = OwnedState::of_kind(4, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ticking();
    let t = Tuning::default();
    let _long = lock(&st, &p, &me(1, true), None, &t).unwrap();
    for _ in 0..3 {
        let g = lock(&st, &p, &me(2, true), None, &t).unwrap();
        release(&st, &p, &g, 2).unwrap();
    }
    let g = lock(&st, &p, &me(2, true), in_ms(&p, 10), &t);
    assert!(g.is_ok(), "a reader next to one other reader waited: {g:?}");
}

/// The semaphore form: 2 permits (so 4 slots, the minimum), one held for a long time, the
/// other used over and over. The fourth reuse of the free permit waits for the long holder.
#[test]
fn a_free_permit_is_granted_whatever_was_taken_n_tickets_ago() {
    let o = OwnedState::of_kind(4, 8, RecordKind::semaphore(2));
    let st = o.view();
    let p = ticking();
    let t = Tuning::default();
    let _long = lock(&st, &p, &me(1, true), None, &t).unwrap();
    for _ in 0..3 {
        let g = lock(&st, &p, &me(2, true), None, &t).unwrap();
        release(&st, &p, &g, 2).unwrap();
    }
    let g = lock(&st, &p, &me(2, true), in_ms(&p, 10), &t);
    assert!(g.is_ok(), "one permit of two free, yet no grant: {g:?}");
    assert!(
        try_lock(&st, &p, &me(3, true), &t).unwrap().is_none(),
        "(both permits held now)"
    );
}

// ---------------------------------------------------------------------------------------------
// Finding 4: spurious `owner_died` without any walker dying.

/// A platform whose first `wake` runs a closure: a walker that is preempted (or just slow, in
/// the futex wake system call) between its grant CAS and its rewrite of the news words.
struct WakeHook<'a> {
    inner: ModelPlatform,
    on_wake: RefCell<Option<Box<dyn FnOnce() + 'a>>>,
}

impl Platform for WakeHook<'_> {
    fn now_ns(&self) -> u64 {
        self.inner.now_ns()
    }
    fn yield_cpu(&self) {
        self.inner.yield_cpu();
    }
    fn wait(&self, word: &AtomicU64, expected: u32, until: Option<u64>) {
        self.inner.wait(word, expected, until)
    }
    fn wake(&self, _word: &AtomicU64) {
        let hook = self.on_wake.borrow_mut().take();
        if let Some(f) = hook {
            f();
        }
    }
    fn pause(&self, until: Option<u64>) {
        self.inner.pause(until)
    }
    fn liveness(&self, index: u32) -> Liveness {
        self.inner.liveness(index)
    }
}

/// A writer (participant 1) holds; two readers wait behind it, the first parked. The writer's
/// process dies. Walker A (a waiter's recovery) revokes it and grants the first reader with
/// `died`; while A is in the futex wake, walker B (any publication or release) walks: the
/// news word is still there, so B grants the second reader with `died` too. No walker died;
/// the death is reported twice (the docs: once, spuriously only if the finder died).
#[test]
fn two_walkers_tell_the_whole_batch_once() {
    let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
    let st = o.view();
    let model = ModelPlatform::new(1);
    let t = Tuning::default();
    let _w = lock(&st, &model, &me(1, false), None, &t).unwrap();
    let a = me(2, true);
    let b = me(3, true);
    let ta = publish_without_walk(&st, &a);
    // Reader a parks (`Waiting → Sleeping`), as `park` does.
    let slot = st.slot(ta);
    let wa = Word(slot.word.load(Relaxed));
    slot.word.store(wa.with_state(State::Sleeping).0, Relaxed);
    let tb = publish_without_walk(&st, &b);
    let st2 = st;
    let hooked = WakeHook {
        inner: ModelPlatform::new(1),
        on_wake: RefCell::new(Some(Box::new(move || {
            // Walker B, on another thread, while A is between its grant and its rewrite.
            advance(&st2, &ModelPlatform::new(1), 0, false);
        }))),
    };
    hooked.inner.set_dead(1, true);
    let mut watch = Watch::default();
    let _ = recover(&st, &hooked, tb, &mut watch, &t);
    let ga = claim(&st, &model, ta, &a);
    let gb = claim(&st, &model, tb, &b);
    assert!(ga.died, "the first grant after the death is told");
    // B's walk granted b after A's grant had told the death and raised `told`; b joins the
    // batch of a told reader (a still holds), so it is told too: it reads what the dead writer
    // left, whichever walk grants it (second review, finding 6).
    assert!(
        gb.died,
        "a reader granted next to a told one, by another walk, was not told"
    );
}

/// Eight holders die at once (the walk used to remember eight news words, and an off-by-one
/// then told a later grant again): the two readers granted together after them are both told
/// (a batch reads what the dead left), and a reader granted once that batch released is not.
#[test]
fn eight_deaths_are_told_to_one_batch_and_not_again() {
    let o = OwnedState::of_kind(16, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ModelPlatform::new(1);
    let t = Tuning::default();
    for _ in 0..7 {
        lock(&st, &p, &me(1, true), None, &t).unwrap();
    }
    let w = lock(&st, &p, &me(1, false), Some(p.now_ns() + 1), &t);
    assert!(w.is_err(), "a writer behind readers waits");
    let (a, b) = (me(2, true), me(3, true));
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
    let c = lock(&st, &p, &me(4, true), Some(p.now_ns() + 1_000_000), &t).unwrap();
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
    let _w = lock(&st, &p, &me(1, false), None, &t).unwrap();
    let readers = [me(2, true), me(3, true), me(4, true)];
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
    let next = lock(&st, &p, &me(5, true), None, &t).unwrap();
    assert!(!next.died);
}

/// Finding 1 without a deadline: the taker on the dead reader's slot never returns (its own
/// recovery never looks at its own ticket; nobody else is there to skip it). Run on a thread
/// with a 3 s limit of real time (the model clock runs on meanwhile, past many graces).
#[test]
fn a_reader_after_a_dead_reader_without_a_deadline_is_granted() {
    use std::sync::Arc;
    let o = Arc::new(OwnedState::of_kind(2, 8, RecordKind::RWLOCK));
    let p = Arc::new(ticking());
    let t = Tuning::default();
    let r1 = {
        let st = o.view();
        let _r0 = lock(&st, &*p, &me(1, true), None, &t).unwrap();
        lock(&st, &*p, &me(2, true), None, &t).unwrap()
    };
    p.set_dead(1, true);
    let (tx, rx) = std::sync::mpsc::channel();
    let (o2, p2) = (o.clone(), p.clone());
    std::thread::spawn(move || {
        let st = o2.view();
        let _ = tx.send(lock(&st, &*p2, &me(3, true), None, &Tuning::default()));
    });
    let got = rx.recv_timeout(std::time::Duration::from_secs(3));
    let _ = r1;
    assert!(
        matches!(got, Ok(Ok(g)) if g.died),
        "lock() on the dead reader's slot did not return within 3 s: {got:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Finding 5: one `Watch` times one thing, a weighted recovery passes several.

/// Two leased readers (two processes) are granted and then frozen before they claim (their
/// lease stays `Pending(100 ms)`): "a frozen grantee must not block the queue" — each is to be
/// skipped once seen pending for its lease. A writer waits behind both and recovers every
/// 50 ms with its one `Watch`, as `wait_for_grant` does. `Watch::observe` remembers one key:
/// the two grantees reset each other's timer at every pass, so neither ever expires.
#[test]
fn two_frozen_leased_grantees_are_passed_over() {
    let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ModelPlatform::new(0);
    let t = Tuning::default();
    for participant in [1, 2] {
        let who = leased(participant, 10 + participant, 100);
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
    let w = publish_without_walk(&st, &me(3, false));
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
