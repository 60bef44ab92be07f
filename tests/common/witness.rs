//! The fenced witness of exclusive grants, in one shared word: the newest token that ever
//! entered (high half) and the token inside (low half, 0 if none). Used by the chaos and soak
//! tests; each counts what it wants around these steps.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::SeqCst;

/// The witness word's halves: (newest token that entered, token inside).
pub fn parts(v: u64) -> (u64, u64) {
    (v >> 32, v & 0xFFFF_FFFF)
}

/// What a holder's entry found.
pub enum Entry {
    /// A newer token entered already: we were taken over before we got here (and our grant's
    /// `check` said so).
    Lost,
    /// We are the newest and inside; `displaced` is the token that still was (0 if none): its
    /// holder died or was taken over, and we were told `owner_died`.
    Inside { displaced: u64 },
}

/// The holder of token `mine` enters. `told`: its grant's `owner_died()`; `lost`: whether its
/// grant's `check` says `LockLost` (asked only if a newer token entered first).
pub fn enter(word: &AtomicU64, mine: u64, told: bool, lost: impl FnOnce() -> bool) -> Entry {
    let mut cur = word.load(SeqCst);
    loop {
        if parts(cur).0 > mine {
            assert!(
                lost(),
                "token {mine} granted after a newer one entered, and check() says Ok"
            );
            return Entry::Lost;
        }
        match word.compare_exchange(cur, (mine << 32) | mine, SeqCst, SeqCst) {
            Ok(_) => break,
            Err(now) => cur = now,
        }
    }
    let inside = parts(cur).1;
    assert!(
        inside == 0 || told,
        "two holders: token {mine} granted without owner_died while token {inside} was inside"
    );
    Entry::Inside { displaced: inside }
}

/// The holder of token `mine`, which entered (`entered`), leaves: true if it was still the one
/// inside (its `unlock` may then succeed), false if a newer holder entered meanwhile (its
/// `unlock` must then say `LockLost`).
pub fn leave(word: &AtomicU64, mine: u64, entered: bool) -> bool {
    entered
        && word
            .fetch_update(SeqCst, SeqCst, |v| {
                (parts(v).1 == mine).then_some(v & !0xFFFF_FFFF)
            })
            .is_ok()
}
