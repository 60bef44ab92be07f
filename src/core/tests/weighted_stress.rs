//! Stress tests of the weighted kinds: many threads over heap state.

use super::support::share;
use crate::core::model::ModelPlatform;
use crate::core::state::{OwnedState, RecordKind};
use crate::core::{Claim, Published, Tuning, Watch, claim_granted, lock, publish, release};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The shape of the loom model `a_permit_comes_back_while_two_queue` with publication
/// racing too (too big a state space for loom), on real threads: a semaphore of one
/// permit, its holder releasing while two takers publish; waiters that never recover, so
/// a lost grant shows as a stall (a failure after 2 s) rather than a poll's delay.
#[test]
fn a_permit_returned_while_two_publish_is_never_lost() {
    // Fewer rounds under Miri, which runs threads very slowly (same assertions).
    let rounds = if cfg!(miri) { 10 } else { 3000 };
    for round in 0..rounds {
        let o = Arc::new(OwnedState::of_kind(4, 4, RecordKind::semaphore(1)));
        let p = Arc::new(ModelPlatform::new(1));
        let held = lock(&o.view(), &*p, &share(1), None, &Tuning::default()).unwrap();
        let threads: Vec<_> = (0..3u32)
            .map(|k| {
                let (o, p) = (o.clone(), p.clone());
                std::thread::spawn(move || {
                    let st = o.view();
                    if k == 0 {
                        release(&st, &*p, &held, 1).unwrap();
                        return;
                    }
                    let who = share(k + 1);
                    let t = st.take_ticket();
                    let tuning = Tuning::default();
                    let mut watch = Watch::default();
                    let Ok(Published::Waiting(_)) =
                        publish(&st, &*p, t, &who, None, &tuning, &mut watch)
                    else {
                        panic!("ticket {t} not waiting");
                    };
                    let start = Instant::now();
                    loop {
                        match claim_granted(&st, &*p, t, &who).unwrap() {
                            Claim::Held(g) => {
                                release(&st, &*p, &g, k + 1).unwrap();
                                return;
                            }
                            Claim::Lost => panic!("ticket {t} skipped"),
                            Claim::NotGranted(_) => {
                                assert!(
                                    start.elapsed() < Duration::from_secs(2),
                                    "round {round}: ticket {t} never granted"
                                );
                                std::thread::yield_now();
                            }
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
