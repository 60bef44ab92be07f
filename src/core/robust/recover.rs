//! Recovery, for the lock's kind: what any acquirer does — a waiter at a bounded rate, a taker
//! polling for its slot, `try_lock` and a timed-out waiter before they answer — to keep the
//! queue moving when a process ahead died, a lease ran out, or a ticket was never claimed. The
//! one place where a recovery chooses between the exclusive lock's
//! ([`crate::core::exclusive::recover`]) and the weighted kinds'
//! ([`crate::core::weighted::recover`]).

use crate::core::platform::{Platform, Tuning};
use crate::core::queue::watch::{Ahead, Watch};
use crate::core::state::LockState;

/// One recovery pass over the tickets before ticket `me` (ours, or for `try_lock` the next one
/// to be taken), which fixes what is stuck and says what stands between `me` and the lock.
pub fn recover<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    me: u64,
    watch: &mut Watch<'_>,
    tuning: &Tuning,
) -> Ahead {
    watch.new_pass();
    if st.is_weighted() {
        crate::core::weighted::recover::recover(st, p, me, watch, tuning)
    } else {
        crate::core::exclusive::recover::recover(st, p, me, watch, tuning)
    }
}
