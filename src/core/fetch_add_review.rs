//! Second review of issue 15 (commit 470c342: weighted kinds took tickets with a `fetch_add`
//! far from the counter's wrap, a CAS near it). Failed on the code as reviewed; fixed by
//! putting the epoch's parity right above the counter, where the carry flips it.

use crate::core::state::lock_word::{self, LockWord};
use crate::core::state::{self as layout, OwnedState};
use crate::primitive::Ordering::{Relaxed, SeqCst};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};

/// `take_ticket` decided between `fetch_add` and the wrap-flipping CAS on a word it loaded
/// *before* the `fetch_add`. A taker that loaded a counter below `FETCH_ADD_BELOW` and then
/// stalled (preempted, SIGSTOPped) while others took the 2^16 tickets up to the wrap adds to
/// whatever word it finds: if that is the last counter before the wrap (`2^40 − 1`), the add
/// carries out of the word's top bit — the counter becomes 0 but `P` is not flipped, so that
/// ticket and every later one are named `2^40` too low (the epoch's parity says "not wrapped
/// yet"): tickets go backwards and the queue is corrupt. The comment ("cannot wrap here unless
/// 2^16 takers raced past the check at once") misses the single stalled taker.
///
/// The stall is stood in for by a second thread that moves the word from just below
/// `FETCH_ADD_BELOW` to the last counter before the wrap (as 2^16 takers would) at varying
/// moments during the taker's `take_ticket`. Whenever the taker got the ticket before the wrap,
/// the next ticket must be the one after it.
#[test]
fn a_stalled_fetch_add_taker_never_wraps_the_counter_without_flipping_the_parity() {
    let o = Arc::new(OwnedState::of_kind(4, 4, layout::RecordKind::semaphore(1)));
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
