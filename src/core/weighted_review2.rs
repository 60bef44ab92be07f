//! Regression tests from the second adversarial review of the weighted kinds (8c9d706); each
//! failed on that code.
//! Scripted platform, heap state: `cargo test -p fairlock --lib review2`. (Its finding 2 — a
//! share held while more than ~3 × 4096 laps of its slot pass — is a documented limit too.)

use super::*;
#[allow(unused_imports)]
use crate::core::exclusive::{advance, barge, fast};
use crate::core::model::ModelPlatform;
use crate::core::queue::publish::publish;
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
use crate::primitive::Ordering::Relaxed;

/// R2-1. After a retake, a thread's own read lies more than `N` tickets past `head` (pinned at
/// the long read): `holds_already` scans only `N` tickets from `head`, so the thread's request
/// for a write is not refused with `WouldDeadlock`; it would wait behind its own read.
#[test]
fn review2_holds_already_finds_a_read_beyond_n_tickets_of_head() {
    let o = OwnedState::of_kind(4, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ticking();
    let t = Tuning::default();
    let _long = lock(&st, &p, &me(1, true), None, &t).unwrap(); // ticket 0
    for _ in 0..3 {
        let g = lock(&st, &p, &me(2, true), None, &t).unwrap();
        release(&st, &p, &g, 2).unwrap();
    }
    // Ticket 4 maps to the long read's slot: retaken as ticket 5.
    let mine = lock(&st, &p, &me(2, true), in_ms(&p, 10), &t).unwrap();
    assert_eq!(mine.ticket, 5);
    assert!(
        crate::core::weighted::admit::holds_already(&st, 2, 102),
        "participant 2 / tid 102 holds ticket 5, not found (head {})",
        st.header().head.load(Relaxed)
    );
}

/// R2-2. `try_*` after a retake: the given-up ticket (its slot still the long read's) makes
/// `weighted::admits` answer no, so every `try_read` fails while the long read lasts, although
/// a blocking read is granted at once.
#[test]
fn review2_try_read_after_a_retake_is_granted() {
    let o = OwnedState::of_kind(4, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ticking();
    let t = Tuning::default();
    let _long = lock(&st, &p, &me(1, true), None, &t).unwrap();
    for _ in 0..3 {
        let g = lock(&st, &p, &me(2, true), None, &t).unwrap();
        release(&st, &p, &g, 2).unwrap();
    }
    let g = lock(&st, &p, &me(2, true), in_ms(&p, 10), &t).unwrap(); // retook 4 -> 5
    release(&st, &p, &g, 2).unwrap();
    let tr = try_lock(&st, &p, &me(3, true), &t).unwrap();
    assert!(
        tr.is_some(),
        "one reader holds, nobody waits: try_read refused"
    );
}

/// R2-3. `Watch` keeps four observations and evicts the *oldest* one: five frozen leased
/// grantees (lease 200 ms, polls every 50 ms) observed in turn by one recovering writer evict
/// each other's timer before it ever reaches the lease; none is passed over, the writer waits
/// for ever (4 s of model time here, 20 leases).
#[test]
fn review2_five_frozen_leased_grantees_are_passed_over() {
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
    let w = publish_without_walk(&st, &me(6, false));
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

/// R2-6. Sixteen retakes per acquisition, then the taker waits for its slot like anyone:
/// long-held shares taken one after another (workers that each take a permit at start-up)
/// occupy consecutive slots, so a taker landing on the first of them gives up 16 tickets on
/// 16 occupied slots and then waits on the 17th — holding up every later ticket although a
/// permit is free (finding 2 again, after one lap).
#[test]
fn review2_a_free_permit_is_granted_next_to_seventeen_long_holders() {
    let o = OwnedState::of_kind(64, 8, RecordKind::semaphore(20));
    let st = o.view();
    let p = ticking();
    let t = Tuning::default();
    for _ in 0..17 {
        lock(&st, &p, &me(1, true), None, &t).unwrap(); // tickets 0..16, held
    }
    for i in 0..100 {
        let g = lock(&st, &p, &me(2, true), in_ms(&p, 10), &t).unwrap_or_else(|e| {
            panic!(
                "acquisition {i} (next ticket {}), 3 permits free: {e:?}",
                st.next_ticket()
            )
        });
        release(&st, &p, &g, 2).unwrap();
    }
}

/// R2-6 (a). A dead writer; reader R1 is granted and told; reader R2 arrives while R1 holds and
/// is granted by its own walk, after `told` was raised: it shares R1's batch and reads what the
/// writer left, so it must be told too.
#[test]
fn review2_every_reader_of_the_batch_after_a_dead_writer_is_told() {
    let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
    let st = o.view();
    let p = ticking();
    let t = Tuning::default();
    let _w = lock(&st, &p, &me(1, false), None, &t).unwrap();
    let r1 = me(2, true);
    let t1 = publish_without_walk(&st, &r1);
    p.set_dead(1, true);
    let mut watch = Watch::default();
    let _ = recover(&st, &p, t1, &mut watch, &t);
    let g1 = claim(&st, &p, t1, &r1);
    assert!(g1.died);
    let g2 = lock(&st, &p, &me(3, true), in_ms(&p, 10), &t).unwrap();
    assert!(
        g2.died,
        "a reader of the batch after the dead writer, holding together with a told one, was not told"
    );
    release(&st, &p, &g1, 2).unwrap();
    release(&st, &p, &g2, 3).unwrap();
    let g3 = lock(&st, &p, &me(4, true), in_ms(&p, 10), &t).unwrap();
    assert!(!g3.died, "the batch had ended");
}
