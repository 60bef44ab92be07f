//! Regression tests for what the adversarial review of the lock word (issue 15) found: each
//! failed before its fix.

#![allow(unused_imports)]

use super::*;
#[allow(unused_imports)]
use crate::core::exclusive::{advance, barge, fast};
use crate::core::model::ModelPlatform;
use crate::core::platform::{Liveness, Platform};
#[allow(unused_imports)]
use crate::core::queue::{claim, frontier, given_up, lapped, publish};
#[allow(unused_imports)]
use crate::core::robust::{cleanup, leasing, recover};
#[allow(unused_imports)]
use crate::core::state::{self as layout, lease, lock_word, slot_word as word};
#[allow(unused_imports)]
use crate::core::{acquire as wait, release as holder, weighted::walk as weighted};
use crate::primitive::AtomicU64;
use crate::primitive::Ordering::{Acquire, Relaxed};
use core::cell::RefCell;

fn me(participant: u32) -> Me {
    Me {
        participant,
        tid: 100 + participant,
        lease_ms: None,
        shared: false,
        beacon: 0,
    }
}

/// A model platform that runs `hook` (once) just after a `liveness(on)` call has looked: what
/// other threads and processes do while the caller is preempted right after that look. The
/// answer is `inner`'s, i.e. what the look saw.
struct Hooked<'a> {
    inner: ModelPlatform,
    on: u32,
    hook: RefCell<Option<Box<dyn FnOnce() + 'a>>>,
}

impl<'a> Hooked<'a> {
    fn new(on: u32, hook: impl FnOnce() + 'a) -> Hooked<'a> {
        Hooked {
            inner: ModelPlatform::new(1_000),
            on,
            hook: RefCell::new(Some(Box::new(hook))),
        }
    }
}

impl Platform for Hooked<'_> {
    fn now_ns(&self) -> u64 {
        self.inner.now_ns()
    }
    fn yield_cpu(&self) {
        self.inner.yield_cpu();
    }
    fn wait(&self, word: &AtomicU64, expected: u32, until: Option<u64>) {
        self.inner.wait(word, expected, until);
    }
    fn wake(&self, word: &AtomicU64) {
        self.inner.wake(word);
    }
    fn pause(&self, until: Option<u64>) {
        self.inner.pause(until);
    }
    fn liveness(&self, index: u32) -> Liveness {
        let seen = self.inner.liveness(index);
        if index == self.on {
            let hook = self.hook.borrow_mut().take();
            if let Some(f) = hook {
                f();
            }
        }
        seen
    }
}

/// `recover` checks the fast holder's entry for death and only then reads which grant the word
/// shows (`fast_holder`): if, in between, the dead process's entry is reclaimed by a new
/// process — which cleans it up (revoking the dead grant, told) and then takes the lock fast
/// under the same entry — the recoverer revokes the *new, live* holder's grant. `try_lock`
/// then takes the lock fast as well: two holders at once.
#[test]
fn recover_never_revokes_a_live_fast_holder_of_a_reclaimed_entry() {
    let o = OwnedState::new(4, 8);
    let st = o.view();
    let q = ModelPlatform::new(1_000);
    let tuning = Tuning::default();
    // X (entry 5) holds the lock fast, then its process is killed.
    let gx = lock(&st, &q, &me(5), None, &tuning).unwrap();
    assert!(gx.fast);
    let reborn: RefCell<Option<Grant>> = RefCell::new(None);
    let p = Hooked::new(5, || {
        // Right after the recoverer saw entry 5 dead: a new process claims entry 5, cleans up
        // what X left (revoking its grant, news in the word), and takes the lock fast.
        cleanup::clean_up_participant(&st, &q, 5);
        let g = lock(&st, &q, &me(5), None, &tuning).unwrap();
        assert!(g.fast && g.died, "the new owner of entry 5 is told X died");
        *reborn.borrow_mut() = Some(g);
    });
    p.inner.set_dead(5, true);
    let other = try_lock(&st, &p, &me(6), &tuning).unwrap();
    let g5 = reborn.borrow().expect("the hook ran");
    assert_eq!(
        (check(&st, &q, &g5, 5), other),
        (Ok(()), None),
        "the live new owner of entry 5 lost its fast grant to a recoverer that judged X dead, \
         and try_lock took the lock while it holds it"
    );
}

/// `LockState::ticket_of` must name a word's ticket from `epoch` read afterwards "unless the
/// reader stalled for 2^40 tickets". A taker that reads the word one ticket before the counter
/// wraps and reads `epoch` after two others took the last ticket of the epoch and the first of
/// the next (the second raising `epoch` to 1) sees a stale parity and raises `epoch` *again*,
/// to 2 (and the next `ticket_of` of a current word, finding parity 0 against `P = 1`, to 3):
/// later tickets jump by 2^40 or more (and `take_behind` would raise `head` to the bogus
/// ticket it computed). Here the taker (as in `take_behind`) computes 2^41 + 2^40 − 1 for the
/// last ticket of epoch 0; B's release walk then sees a counter 2^41 tickets beyond C's, and
/// after C's release the lock, held by nobody, is never granted again (`lock` times out).
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

/// A walk that carries a death's news (`died`) to the counter and finds its drain beaten by
/// another walker's (which passed the news on in `D`) reloads the word and, if a new queued
/// period has begun meanwhile, jumps to its `head` *with the old news still in `died`*: it
/// grants (here: pre-grants) the new period's first ticket with "owner died" although the
/// fast holder in between was already told and released normally. News told twice.
///
/// Schedule (two slots): P1 fast, P2 queued and granted (ticket 1), P4 gives ticket 2 up,
/// P3 takes ticket 3 and is killed while lapped (its slot still held by ticket 1). P2's thread
/// panics while holding: `revoke_own` revokes ticket 1 and walks (A). A passes 1 (died) and 2,
/// and looks at the lapped record of 3 (the hook): meanwhile walker B drains the queue (D
/// set), F takes the lock fast (told), releases it, and a leased taker L takes ticket 5 with
/// `Q` and is preempted before its walk. A then drains in vain, reloads, and pre-grants 5 with
/// the died flag.
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
    let g2 = match claim::claim_granted(&st, &q, t1, &me(2)).unwrap() {
        claim::Claim::Held(g) => g,
        c => panic!("{c:?}"),
    };
    // P4 times out on ticket 2 (deadline already past).
    let d = q.now_ns();
    assert!(wait::lock_queued(&st, &q, &me(4), Some(d), &tuning, None, Watch::default()).is_err());
    // P3 takes ticket 3; its slot is still ticket 1's: it registers as lapped and is killed.
    let Taken::Queued(t3, _) = take(&st, &q, &me(3)) else {
        panic!()
    };
    assert_eq!(t3, 3);
    lapped::register(st.slot(t3), st.lap(t3), 3);
    q.set_dead(3, true);
    let told = RefCell::new(Vec::new());
    let leased = Me {
        lease_ms: Some(60_000),
        ..me(6)
    };
    let p = Hooked::new(3, || {
        // B: another walker passes the queue and drains it with the news.
        advance::advance(&st, &q, st.header().head.load(Relaxed), false);
        assert!(st.lock_word(Relaxed).died() && !st.lock_word(Relaxed).queued());
        // F takes the lock fast (told) and releases it normally.
        let f = lock(&st, &q, &me(5), None, &tuning).unwrap();
        told.borrow_mut().push(("F", f.died));
        release(&st, &q, &f, 5).unwrap();
        // L, leased, takes a free word without news: raises head, sets Q with its ticket
        // (`take`), and is preempted before the walk that pre-grants it.
        let w = st.lock_word(Acquire);
        let t = st.ticket_of(w);
        frontier::raise_head(&st, t);
        assert!(crate::core::state::lock_state::cas_word(
            &st,
            w,
            w.taken().with_queued()
        ));
    });
    p.inner.set_dead(3, true);
    // P2's thread panics while holding ticket 1: revoked, and the walk (A) begins.
    revoke_own(&st, &p, &g2, 2).unwrap();
    assert!(p.hook.borrow().is_none(), "the hook ran");
    // L resumes: its walk, then its publish.
    advance::advance(&st, &q, 5, false);
    let gl = match publish(&st, &q, 5, &leased, None, &tuning, &mut Watch::default()).unwrap() {
        Published::Held(g) => g,
        _ => panic!("L was pre-granted"),
    };
    told.borrow_mut().push(("L", gl.died));
    assert_eq!(
        *told.borrow(),
        vec![("F", true), ("L", false)],
        "P2's death told to F and again to L (after F released normally)"
    );
}

/// Fast tickets never touch the slots, so a slot's lap may fall any number of laps behind
/// (`LapRelation::Behind`). Laps are compared modulo 2^44 with a 2^43 window: after 2^43 laps
/// of fast tickets (2^44 acquisitions with two slots — days of a busy uncontended lock) an
/// untouched slot's lap reads as *later* than the ticket's. A taker that queues then finds its
/// ticket "skipped" (`publish` → `Skipped`) and retakes, 1000 times, and `lock` fails with
/// `Corrupt` although a live holder simply holds the lock.
///
/// (As the review wrote it, the test set the counter 2^44 + 2^43 tickets on with the slots as
/// at ticket 0. The fix refreshes the slots whenever the counter wraps (then every 2^40 tickets), so
/// the test now gets there the way a lock does: through every wrap in between (2^39 tickets
/// apart since the parity moved above the counter), each taken by
/// a fast acquisition — the counter set to the last ticket of each epoch in turn. Without the
/// refresh it fails exactly as before.)
#[test]
fn a_slot_untouched_for_2_pow_43_laps_is_still_behind() {
    let o = OwnedState::new(2, 8);
    let st = o.view();
    let p = ModelPlatform::new(1_000);
    let tuning = Tuning::default();
    let last = (1u64 << lock_word::COUNTER_BITS) - 1;
    // 2^44 + 2^43 uncontended acquisitions, the slots untouched by any of them: through the
    // 48 wraps of the 39-bit counter in between, each taken fast.
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
