//! loom models of the lock algorithm (`src/core`) on heap state with the scripted platform.
//!
//! Run with `ci/loom.sh` (`RUSTFLAGS="--cfg fairlock_loom" cargo test --release --test loom`). Without
//! `--cfg fairlock_loom` this file is empty.
//!
//! Every model ends with every waiter granted (nobody waits for a release that never comes),
//! and checks, after joining, that the queue is left with exactly one next holder (or none and
//! the lock free). Mutual exclusion is checked with a loom `UnsafeCell` (loom reports two
//! accesses not ordered by happens-before) holding the log of tokens, which must be increasing.
//!
//! Re-entrancy is process-local bookkeeping in the API layer (a depth counter on the guard of
//! the owning thread), not part of `core`, so there is no model for it here. Slot reuse, the
//! lease protocol across reuse, the died flag across reuse and the clean-up of a dead
//! participant's entry are modelled (bugs that need them are invisible to models without them).
#![cfg(fairlock_loom)]

use std::sync::atomic::Ordering::{Acquire, Relaxed};

use fairlock::__internal::core::model::ModelPlatform;
use fairlock::__internal::core::state::RecordKind;
use fairlock::__internal::core::state::lease::{Lease, LeaseField};
use fairlock::__internal::core::state::slot_word::{LapRelation, relate};
use fairlock::__internal::core::{
    Claim, Grant, LappedGiveUp, LockState, Look, Lost, Me, OwnedState, Platform, Published, State,
    Taken, Tuning, WaitError, Watch, Word, advance, check, claim_granted, clean_up_participant,
    extend, give_up_lapped, lock, lock_queued, publish, publish_once, recover, release, take,
    try_lock,
};
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

/// Short polls so a waiter re-checks (and recovers) often; a grace no model reaches, so a
/// pre-granted ticket is never skipped under a taker that is merely slow.
fn tuning() -> Tuning {
    Tuning {
        spin_ns: 0,
        spin_keep_cpu_ns: 0,
        head_poll_min_ns: 1,
        head_poll_ns: 1,
        idle_poll_ns: 1,
        grace_ns: u64::MAX / 4,
    }
}

fn me(participant: u32) -> Me {
    Me {
        participant,
        tid: 100 + participant,
        lease_ms: None,
        shared: false,
        beacon: 0,
    }
}

struct World {
    st: OwnedState,
    p: ModelPlatform,
    /// The critical section: the tokens of the holders, in the order they held the lock.
    log: UnsafeCell<Vec<u64>>,
}

impl World {
    fn new(auto_tick: u64) -> Arc<World> {
        World::with_slots(4, auto_tick)
    }

    fn with_slots(slots: u32, auto_tick: u64) -> Arc<World> {
        Arc::new(World {
            st: OwnedState::new(slots, 4),
            p: ModelPlatform::new(auto_tick),
            log: UnsafeCell::new(Vec::new()),
        })
    }

    fn view(&self) -> LockState<'_> {
        self.st.view()
    }

    /// The critical section: loom fails the model if two holders overlap.
    fn enter(&self, g: &Grant) {
        self.log.with_mut(|v| {
            // SAFETY: only a holder of the lock touches the log; loom checks that claim.
            unsafe { (*v).push(g.token()) }
        });
    }

    fn log(&self) -> Vec<u64> {
        // SAFETY: called after every thread was joined.
        self.log.with(|v| unsafe { (*v).clone() })
    }

    /// Lock (no deadline), critical section, release. Returns the grant.
    fn lock_unlock(&self, participant: u32) -> Grant {
        let st = self.view();
        let g = lock(&st, &self.p, &me(participant), None, &tuning()).expect("lock");
        self.enter(&g);
        release(&st, &self.p, &g, participant).expect("release");
        g
    }

    fn state_of(&self, t: u64) -> Option<State> {
        let st = self.view();
        let w = word(&st, t);
        (relate(w.lap(), st.lap(t)) == LapRelation::Same)
            .then(|| w.state())
            .flatten()
    }
}

fn word(st: &LockState<'_>, t: u64) -> Word {
    Word(st.slot(t).word.load(Acquire))
}

/// Publishes a waiter for the next ticket without blocking, with the real `publish`.
fn enqueue(st: &LockState<'_>, p: &ModelPlatform, me: &Me) -> u64 {
    let t = fairlock::__internal::core::exclusive::fast::take_queued(st, p);
    match publish(st, p, t, me, None, &tuning(), &mut Watch::default()).expect("publish") {
        Published::Waiting(_) => t,
        _ => panic!("ticket {t} should wait"),
    }
}

/// A live waiter of published ticket `t`: recovers what is ahead until its grant comes, then
/// claims it (with the real claim code).
fn claim_when_granted(w: &World, t: u64, me: &Me) -> Grant {
    let st = w.view();
    let mut watch = Watch::default();
    loop {
        match claim_granted(&st, &w.p, t, me).expect("consistent") {
            Claim::Held(g) => return g,
            Claim::Lost => panic!("live waiter skipped"),
            Claim::NotGranted(_) => {
                recover(&st, &w.p, t, &mut watch, &tuning());
                loom::thread::yield_now();
            }
        }
    }
}

/// Takes a ticket and gives it up at once (a deadline already past), as a timed-out waiter
/// does (`lock` with such a deadline makes one try without a ticket).
fn time_out(w: &World, participant: u32) -> Result<Grant, WaitError> {
    let st = w.view();
    lock_queued(
        &st,
        &w.p,
        &me(participant),
        Some(0),
        &tuning(),
        None,
        Watch::default(),
    )
}

/// After a model: the lock is free and nobody is queued, so `try_lock` gets the next token.
fn assert_free(w: &World, expect_token: u64) {
    let st = w.view();
    let g = try_lock(&st, &w.p, &me(3), &tuning())
        .expect("consistent")
        .expect("lock left free");
    assert_eq!(g.token(), expect_token);
    release(&st, &w.p, &g, 3).unwrap();
}

fn assert_increasing(log: &[u64]) {
    assert!(log.windows(2).all(|p| p[0] < p[1]), "tokens {log:?}");
}

/// Two threads lock and unlock: mutual exclusion, tokens 1 and 2 in critical-section order.
#[test]
fn two_threads_lock_unlock() {
    loom::model(|| {
        let w = World::new(0);
        let hs: Vec<_> = (1..=2)
            .map(|i| {
                let w = w.clone();
                thread::spawn(move || w.lock_unlock(i).token())
            })
            .collect();
        let mut tokens: Vec<u64> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        tokens.sort();
        assert_eq!(tokens, [1, 2]);
        assert_eq!(w.log(), [1, 2]);
        assert_free(&w, 3);
    });
}

/// The main thread holds; two threads queue behind it and then lock again each... kept to one
/// round each (three tickets in a four-slot array), the most loom can explore in time.
///
/// Two full waiters make this the biggest model: it runs with at most one preemption (it did
/// not finish in 400 s with two on the dev machine).
#[test]
fn three_threads_lock_unlock() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(1);
    b.check(|| {
        let w = World::new(0);
        let st = w.view();
        let g0 = lock(&st, &w.p, &me(0), None, &tuning()).unwrap();
        w.enter(&g0);
        let hs: Vec<_> = (1..=2)
            .map(|i| {
                let w = w.clone();
                thread::spawn(move || w.lock_unlock(i).token())
            })
            .collect();
        release(&st, &w.p, &g0, 0).unwrap();
        let mut tokens: Vec<u64> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        tokens.sort();
        assert_eq!(tokens, [2, 3]);
        assert_eq!(w.log(), [1, 2, 3]);
        assert_free(&w, 4);
    });
}

/// `try_lock` racing a `lock`/`release`: it either gets the lock while free (never while held,
/// never jumping a queued waiter) or nothing; tokens stay in critical-section order.
#[test]
fn try_lock_races_lock() {
    loom::model(|| {
        let w = World::new(0);
        let w1 = w.clone();
        let locker = thread::spawn(move || w1.lock_unlock(1).token());
        let w2 = w.clone();
        let trier = thread::spawn(move || {
            let st = w2.view();
            let g = try_lock(&st, &w2.p, &me(2), &tuning()).expect("consistent")?;
            w2.enter(&g);
            release(&st, &w2.p, &g, 2).unwrap();
            Some(g.token())
        });
        let t1 = locker.join().unwrap();
        let t2 = trier.join().unwrap();
        let log = w.log();
        assert_increasing(&log);
        match t2 {
            Some(t2) => {
                let mut both = [t1, t2];
                both.sort();
                assert_eq!(both, [1, 2]);
                assert_free(&w, 3);
            }
            None => {
                assert_eq!(log, [t1]);
                assert_free(&w, 2);
            }
        }
    });
}

/// A waiter whose deadline passes while the holder releases: the grant and the timeout race
/// on one CAS. Either the waiter gets the lock (token 2) or its ticket is abandoned and the
/// lock is left free — never granted to nobody, never both.
#[test]
fn timeout_races_grant() {
    loom::model(|| {
        // Every clock reading advances it by 1 ns: deadlines pass after a few readings.
        let w = World::new(1);
        let st = w.view();
        let g = lock(&st, &w.p, &me(1), None, &tuning()).unwrap();
        w.enter(&g);
        let w2 = w.clone();
        let waiter = thread::spawn(move || {
            let st = w2.view();
            let deadline = w2.p.now_ns() + 3;
            match lock(&st, &w2.p, &me(2), Some(deadline), &tuning()) {
                Ok(g) => {
                    w2.enter(&g);
                    release(&st, &w2.p, &g, 2).unwrap();
                    Some(g.token())
                }
                Err(WaitError::Timeout) => None,
                Err(e) => panic!("{e:?}"),
            }
        });
        release(&st, &w.p, &g, 1).unwrap();
        let got = waiter.join().unwrap();
        match got {
            Some(t) => {
                assert_eq!(t, 2);
                assert_eq!(w.log(), [1, 2]);
            }
            None => {
                assert_eq!(w.state_of(1), Some(State::Abandoned));
                assert_eq!(w.log(), [1]);
            }
        }
        assert_free(&w, 3);
    });
}

/// A live holder releases while the waiter behind it runs recovery and `advance`: the waiter
/// ends up granted exactly once (no died flag), and the ticket after it is not pre-granted.
#[test]
fn release_races_recover_and_advance() {
    loom::model(|| {
        let w = World::new(1);
        let st = w.view();
        let g = lock(&st, &w.p, &me(1), None, &tuning()).unwrap();
        let t = enqueue(&st, &w.p, &me(2));
        let w1 = w.clone();
        let holder = thread::spawn(move || {
            let st = w1.view();
            release(&st, &w1.p, &g, 1)
        });
        let w2 = w.clone();
        let helper = thread::spawn(move || {
            let st = w2.view();
            recover(&st, &w2.p, t, &mut Watch::default(), &tuning());
            advance(&st, &w2.p, 0, false);
        });
        assert_eq!(holder.join().unwrap(), Ok(()));
        helper.join().unwrap();
        assert!(g.fast, "an uncontended grant comes from the lock word");
        assert!(!st.lock_word(Acquire).held());
        let wt = word(&st, t);
        assert_eq!(wt.state(), Some(State::Granted));
        assert!(!wt.died());
        assert_eq!(
            w.state_of(t + 1),
            None,
            "next ticket must not be pre-granted"
        );
    });
}

/// The holder died (it never runs again); two waiters run the full `lock` and recover it
/// concurrently: exactly one revocation, the first granted is told the owner died, the
/// second is not, and both hold in ticket order.
#[test]
fn concurrent_recovery_of_dead_holder() {
    loom::model(|| {
        let w = World::new(1);
        let st = w.view();
        let g = lock(&st, &w.p, &me(0), None, &tuning()).unwrap();
        w.enter(&g);
        w.p.set_dead(0, true);
        let hs: Vec<_> = (1..=2)
            .map(|i| {
                let w = w.clone();
                thread::spawn(move || {
                    let st = w.view();
                    let g = lock(&st, &w.p, &me(i), None, &tuning()).expect("lock");
                    w.enter(&g);
                    release(&st, &w.p, &g, i).expect("release");
                    g
                })
            })
            .collect();
        let mut grants: Vec<Grant> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        grants.sort_by_key(|g| g.ticket);
        assert_eq!(grants[0].token(), 2);
        assert!(grants[0].died, "first holder after the dead one is told");
        assert_eq!(grants[1].token(), 3);
        assert!(!grants[1].died);
        assert!(g.fast);
        assert_eq!(w.log(), [1, 2, 3]);
        assert_eq!(release(&st, &w.p, &g, 0), Err(Lost));
        assert_free(&w, 4);
    });
}

fn leased(participant: u32, ms: u64) -> Me {
    Me {
        lease_ms: Some(ms),
        shared: false,
        ..me(participant)
    }
}

/// A holder whose lease ran out extends it while the waiter behind it takes over: exactly one
/// wins. Extension won: still `Held`, `check` is Ok, the waiter still waits. Takeover won:
/// `Err(Lost)`, the word is `Revoked` and the waiter is granted with the died flag.
#[test]
fn extend_races_takeover() {
    loom::model(|| {
        let w = World::new(0);
        let st = w.view();
        let g = lock(&st, &w.p, &leased(1, 1), None, &tuning()).unwrap();
        assert!(g.leased);
        let t = enqueue(&st, &w.p, &me(2));
        w.p.advance(5_000_000); // the 1 ms lease has run out
        let w1 = w.clone();
        let holder = thread::spawn(move || {
            let st = w1.view();
            extend(&st, &w1.p, g.ticket, 1, 100)
        });
        let w2 = w.clone();
        let taker = thread::spawn(move || {
            let st = w2.view();
            recover(&st, &w2.p, t, &mut Watch::default(), &tuning());
        });
        let extended = holder.join().unwrap();
        taker.join().unwrap();
        let wt = word(&st, t);
        match extended {
            Ok(()) => {
                assert_eq!(w.state_of(0), Some(State::Held));
                assert_eq!(check(&st, &w.p, &g, 1), Ok(()));
                assert_eq!(wt.state(), Some(State::Waiting));
                assert_eq!(
                    LeaseField(st.slot(0).lease.load(Acquire)).lease(),
                    Lease::Leased
                );
            }
            Err(Lost) => {
                assert_eq!(w.state_of(0), Some(State::Revoked));
                assert_eq!(wt.state(), Some(State::Granted));
                assert!(wt.died());
                assert_eq!(check(&st, &w.p, &g, 1), Err(Lost));
            }
        }
    });
}

/// A holder whose lease ran out releases while the waiter behind it takes over: either the
/// release wins (Ok, the waiter granted without the died flag) or the takeover does
/// (`Err(Lost)`, granted with it). Exactly one grant either way.
#[test]
fn release_races_takeover() {
    loom::model(|| {
        let w = World::new(0);
        let st = w.view();
        let g = lock(&st, &w.p, &leased(1, 1), None, &tuning()).unwrap();
        let t = enqueue(&st, &w.p, &me(2));
        w.p.advance(5_000_000);
        let w1 = w.clone();
        let holder = thread::spawn(move || {
            let st = w1.view();
            release(&st, &w1.p, &g, 1)
        });
        let w2 = w.clone();
        let taker = thread::spawn(move || {
            let st = w2.view();
            recover(&st, &w2.p, t, &mut Watch::default(), &tuning());
        });
        let released = holder.join().unwrap();
        taker.join().unwrap();
        let wt = word(&st, t);
        assert_eq!(wt.state(), Some(State::Granted));
        match released {
            Ok(()) => {
                assert_eq!(w.state_of(0), Some(State::Done));
                assert!(!wt.died());
            }
            Err(Lost) => {
                assert_eq!(w.state_of(0), Some(State::Revoked));
                assert!(wt.died());
            }
        }
        assert_eq!(w.state_of(t + 1), None, "exactly one grant");
    });
}

/// Slot reuse: a 2-slot array and four tickets, so both slots are used by two laps; two
/// threads lock and unlock twice each. Mutual exclusion (the log), tokens 1..4 in
/// critical-section order, the lock left free.
#[test]
fn two_slots_reused_by_four_tickets() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| {
        let w = World::with_slots(2, 0);
        let hs: Vec<_> = (1..=2)
            .map(|i| {
                let w = w.clone();
                thread::spawn(move || {
                    let a = w.lock_unlock(i).token();
                    let b = w.lock_unlock(i).token();
                    assert!(a < b);
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(w.log(), [1, 2, 3, 4]);
        assert_free(&w, 5);
    });
}

/// A lease-aware witness of mutual exclusion (atomics, not loom's cell: a holder taken over
/// may legitimately still be inside when the next one enters). One word: the newest token that
/// ever entered (high half) and the token inside now (low half, 0 if none). Entering: a newer
/// token has entered already means we were taken over before we got here — our `check` must
/// say so, and we record nothing; else we are the newest and inside, and if someone still was,
/// we must have been told `died`. `check` may not say `Ok` unless we are the one inside.
/// Leaving: if we are not the one inside any more, our release must say `Lost`.
struct LeaseWitness(loom::sync::atomic::AtomicU64);

impl LeaseWitness {
    /// Returns whether we recorded ourselves (false: we were already taken over).
    fn enter(&self, st: &LockState<'_>, p: &ModelPlatform, g: &Grant, who: u32) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        let mine = g.token();
        let mut cur = self.0.load(SeqCst);
        loop {
            if cur >> 32 > mine {
                assert_eq!(
                    check(st, p, g, who),
                    Err(Lost),
                    "taken over, yet check is Ok"
                );
                return false;
            }
            match self
                .0
                .compare_exchange(cur, (mine << 32) | mine, SeqCst, SeqCst)
            {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        let inside = cur & 0xFFFF_FFFF;
        assert!(
            inside == 0 || g.died,
            "two holders: token {mine} entered without the died flag while {inside} was inside"
        );
        true
    }

    fn check(&self, st: &LockState<'_>, p: &ModelPlatform, g: &Grant, who: u32) {
        let seen = self.0.load(std::sync::atomic::Ordering::SeqCst) & 0xFFFF_FFFF;
        if check(st, p, g, who).is_ok() {
            assert_eq!(
                seen,
                g.token(),
                "check Ok for {} while {seen} is inside",
                g.token()
            );
        }
    }

    fn leave(&self, st: &LockState<'_>, p: &ModelPlatform, g: &Grant, who: u32, entered: bool) {
        use std::sync::atomic::Ordering::SeqCst;
        let me = g.token();
        let alone = entered
            && self
                .0
                .fetch_update(SeqCst, SeqCst, |v| {
                    (v & 0xFFFF_FFFF == me).then_some(v & !0xFFFF_FFFF)
                })
                .is_ok();
        let r = release(st, p, g, who);
        assert!(
            alone || r == Err(Lost),
            "release {r:?} of {me} after another entered"
        );
    }
}

/// A leased waiter (ticket 1) is granted; it claims — and may be preempted
/// right after its claim CAS, or inside `extend` — while the waiter behind it (ticket 2) times
/// its lease, takes it over, holds, releases, and takes ticket 3, which reuses ticket 1's slot
/// (2 slots) with a lease of its own. The lease-aware witness must hold whatever the
/// interleaving: the paused one never writes its deadline into ticket 3's lease to hold with it
/// (two holders, and ticket 3 no longer taken over by its own lease).
#[test]
fn leased_claim_races_takeover_and_slot_reuse() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| {
        // Every clock reading is 1 ms later: 1 ms leases run out on the next looks.
        let w = World::with_slots(2, 1_000_000);
        let witness = Arc::new(LeaseWitness(loom::sync::atomic::AtomicU64::new(0)));
        let st = w.view();
        let g0 = lock(&st, &w.p, &me(0), None, &tuning()).unwrap();
        let t1 = enqueue(&st, &w.p, &leased(1, 1));
        release(&st, &w.p, &g0, 0).unwrap(); // grants ticket 1
        // Ticket 2 after the release: with two slots it shares ticket 0's.
        let t2 = enqueue(&st, &w.p, &leased(2, 1));
        let (w1, x1) = (w.clone(), witness.clone());
        let claimer = thread::spawn(move || {
            let st = w1.view();
            if let Claim::Held(g) = claim_granted(&st, &w1.p, t1, &leased(1, 1)).expect("ok") {
                let entered = x1.enter(&st, &w1.p, &g, 1);
                let _ = extend(&st, &w1.p, g.ticket, 1, 1);
                x1.check(&st, &w1.p, &g, 1);
                x1.leave(&st, &w1.p, &g, 1, entered);
            }
        });
        let (w2, x2) = (w.clone(), witness.clone());
        let behind = thread::spawn(move || {
            let st = w2.view();
            let mut watch = Watch::default();
            for _ in 0..6 {
                match claim_granted(&st, &w2.p, t2, &leased(2, 1)).expect("consistent") {
                    Claim::Held(g) => {
                        let entered = x2.enter(&st, &w2.p, &g, 2);
                        x2.leave(&st, &w2.p, &g, 2, entered);
                        // Ticket 3: ticket 1's slot, one lap on; a long lease of its own.
                        let deadline = Some(w2.p.now_ns() + 8_000_000);
                        if let Ok(g) = lock(&st, &w2.p, &leased(2, 1_000), deadline, &tuning()) {
                            let entered = x2.enter(&st, &w2.p, &g, 2);
                            x2.check(&st, &w2.p, &g, 2);
                            x2.leave(&st, &w2.p, &g, 2, entered);
                        }
                        return;
                    }
                    Claim::Lost => panic!("ticket 2 skipped"),
                    Claim::NotGranted(_) => {
                        recover(&st, &w2.p, t2, &mut watch, &tuning());
                    }
                }
            }
        });
        claimer.join().unwrap();
        behind.join().unwrap();
    });
}

/// The died flag across slot reuse: the holder of ticket 0 is dead; the waiter of ticket 1
/// recovers it while a new taker takes ticket 2 — slot 0 again, one lap on — and would like to
/// overwrite the `Revoked` word that tells the news. The waiter of ticket 1 must be told the
/// owner died; the taker of ticket 2 must not be.
#[test]
fn died_flag_survives_slot_reuse() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| {
        let w = World::with_slots(2, 1);
        let st = w.view();
        let g0 = lock(&st, &w.p, &me(0), None, &tuning()).unwrap();
        w.enter(&g0);
        let t1 = enqueue(&st, &w.p, &me(1));
        w.p.set_dead(0, true);
        let w1 = w.clone();
        let waiter = thread::spawn(move || {
            let st = w1.view();
            let g = claim_when_granted(&w1, t1, &me(1));
            w1.enter(&g);
            release(&st, &w1.p, &g, 1).unwrap();
            g
        });
        let w2 = w.clone();
        let taker = thread::spawn(move || {
            let st = w2.view();
            let g = lock(&st, &w2.p, &me(2), None, &tuning()).expect("lock");
            w2.enter(&g);
            release(&st, &w2.p, &g, 2).unwrap();
            g
        });
        let g1 = waiter.join().unwrap();
        let g2 = taker.join().unwrap();
        assert!(g1.died, "the holder after the dead one must be told");
        assert!(!g2.died, "and only that one");
        assert_eq!(w.log(), [1, 2, 3]);
        assert_free(&w, 4);
    });
}

/// A new process claims the participant entry of a dead holder (its beacon was free) and
/// cleans up what it left, while the waiter behind recovers it: exactly one revocation, the
/// waiter is granted with the died flag, and the new owner of the entry then locks in turn.
#[test]
fn participant_clean_up_races_recovery() {
    loom::model(|| {
        let w = World::new(1);
        let st = w.view();
        let g0 = lock(&st, &w.p, &me(1), None, &tuning()).unwrap();
        w.enter(&g0);
        let t = enqueue(&st, &w.p, &me(2));
        w.p.set_dead(1, true);
        let w1 = w.clone();
        let newcomer = thread::spawn(move || {
            let st = w1.view();
            // The entry's previous owner is dead; the newcomer claims its beacon first (as
            // `Shared::open` does: that is how it learns the entry is free), so the entry is
            // alive again while it cleans up.
            w1.p.set_dead(1, false);
            clean_up_participant(&st, &w1.p, 1);
        });
        let w2 = w.clone();
        let waiter = thread::spawn(move || claim_when_granted(&w2, t, &me(2)));
        newcomer.join().unwrap();
        let g = waiter.join().unwrap();
        assert!(g.died);
        assert!(g0.fast);
        w.enter(&g);
        release(&st, &w.p, &g, 2).unwrap();
        assert_eq!(release(&st, &w.p, &g0, 1), Err(Lost));
        let g = lock(&st, &w.p, &me(1), None, &tuning()).expect("the newcomer locks");
        w.enter(&g);
        release(&st, &w.p, &g, 1).unwrap();
        assert_eq!(w.log(), [1, 2, 3]);
    });
}

/// Passing a lapped taker's given-up ticket replaces the previous lap's word
/// of its slot, which may be a dead holder's `Revoked` — the only place the death's news lives
/// until a grant passed it. A second walker starting from a `head` at or before the revoked
/// ticket must still learn it: the next holder is told the owner died.
#[test]
fn passing_a_given_up_lapped_ticket_keeps_a_deaths_news() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| {
        let w = World::with_slots(2, 1);
        let st = w.view();
        // Ticket 0: held (fast path; head stays 0).
        let g0 = lock(&st, &w.p, &me(0), None, &tuning()).unwrap();
        // Ticket 1: a waiter that times out. Ticket 2: a lapped taker (slot 0 is still ticket
        // 0's) that times out, saying so in the slot's given-up word.
        assert_eq!(time_out(&w, 1), Err(WaitError::Timeout));
        assert_eq!(time_out(&w, 2), Err(WaitError::Timeout));
        let w1 = w.clone();
        // The holder's thread gives the lock up as dead (it exited or panicked holding).
        let revoker = thread::spawn(move || {
            let st = w1.view();
            let _ = fairlock::__internal::core::revoke_own(&st, &w1.p, &g0, 0);
        });
        let w2 = w.clone();
        let next = thread::spawn(move || {
            let st = w2.view();
            let g = lock(&st, &w2.p, &me(3), None, &tuning()).expect("lock");
            w2.enter(&g);
            release(&st, &w2.p, &g, 3).unwrap();
            g
        });
        revoker.join().unwrap();
        let g3 = next.join().unwrap();
        assert_eq!(g3.ticket, 3);
        assert!(
            g3.died,
            "ticket 3 follows a revoked holder: owner_died must be reported"
        );
    });
}

/// A lapped taker gives its ticket up while the release ahead of it walks to it: the walk
/// pre-grants the ticket before the taker's bit is set, or finds the bit. Either way the ticket
/// is passed at once — by the walk, which looks at the bit again after its pre-grant, or by the
/// taker, which looks at the word after its bit (a Dekker pair: `given_up`) — and the waiter
/// behind it is granted. A pre-grant left for a taker that gave up would hold everyone behind
/// it for a grace (which this model never reaches).
#[test]
fn a_lapped_taker_gives_up_while_the_walk_reaches_it() {
    loom::model(|| {
        let w = World::with_slots(2, 0);
        let st = w.view();
        // Ticket 0 held in slot 0; ticket 1 given up (abandoned in slot 1); ticket 2 lapped
        // (slot 0 still ticket 0's); ticket 3 waits in slot 1.
        let t0 = fairlock::__internal::core::exclusive::fast::take_queued(&st, &w.p);
        let g0 = match publish(
            &st,
            &w.p,
            t0,
            &me(0),
            None,
            &tuning(),
            &mut Watch::default(),
        ) {
            Ok(Published::Held(g)) => g,
            _ => panic!("ticket 0 is pre-granted"),
        };
        assert_eq!(time_out(&w, 1), Err(WaitError::Timeout));
        let Taken::Queued(t2, _) = take(&st, &w.p, &me(2)) else {
            panic!("room for ticket 2")
        };
        let look = publish_once(
            &st,
            &w.p,
            t2,
            &me(2),
            None,
            &tuning(),
            &mut Watch::default(),
        );
        assert!(matches!(look, Ok(Look::Lapped)));
        let t3 = enqueue(&st, &w.p, &me(3));
        assert_eq!((t0, t2, t3), (0, 2, 3));
        let w1 = w.clone();
        let releaser = thread::spawn(move || {
            let st = w1.view();
            release(&st, &w1.p, &g0, 0).unwrap();
        });
        let w2 = w.clone();
        let giver = thread::spawn(move || {
            let st = w2.view();
            match give_up_lapped(&st, &w2.p, t2, 2) {
                LappedGiveUp::Gone => false,
                // Pre-granted before the bit: the grant won the race, as a timeout's does.
                LappedGiveUp::InWord => {
                    let look = publish_once(
                        &st,
                        &w2.p,
                        t2,
                        &me(2),
                        None,
                        &tuning(),
                        &mut Watch::default(),
                    );
                    let Ok(Look::Done(Published::Held(g))) = look else {
                        panic!("pre-granted, yet not claimable")
                    };
                    w2.enter(&g);
                    release(&st, &w2.p, &g, 2).unwrap();
                    true
                }
            }
        });
        releaser.join().unwrap();
        let held = giver.join().unwrap();
        let end = if held { State::Done } else { State::Skipped };
        assert_eq!(w.state_of(t2), Some(end), "ticket 2 passed or held");
        assert_eq!(w.state_of(t3), Some(State::Granted), "ticket 3 granted");
        let g3 = claim_when_granted(&w, t3, &me(3));
        release(&st, &w.p, &g3, 3).unwrap();
        assert_free(&w, 5);
    });
}

/// `clean_up_participant` runs with the entry already alive again (the new
/// owner holds its beacon). If a grant moves the dead process's waiting ticket between the
/// clean-up's load and its CAS, the clean-up must follow it — else that ticket stays granted to
/// a live participant that never claims it, and nobody ever skips it.
#[test]
fn clean_up_follows_a_ticket_granted_under_it() {
    loom::model(|| {
        let w = World::new(1);
        let st = w.view();
        let g0 = lock(&st, &w.p, &me(0), None, &tuning()).unwrap();
        // Ticket 1: a waiter of a process that died; participant 1 now belongs to a live one.
        let t1 = enqueue(&st, &w.p, &me(1));
        let t2 = enqueue(&st, &w.p, &me(2));
        let w1 = w.clone();
        let newcomer = thread::spawn(move || {
            let st = w1.view();
            clean_up_participant(&st, &w1.p, 1);
        });
        let w2 = w.clone();
        let holder = thread::spawn(move || {
            let st = w2.view();
            release(&st, &w2.p, &g0, 0).unwrap();
        });
        newcomer.join().unwrap();
        holder.join().unwrap();
        let mut watch = Watch::default();
        for _ in 0..3 {
            recover(&st, &w.p, t2, &mut watch, &tuning());
            w.p.advance(1 << 40);
        }
        assert_ne!(
            w.state_of(t1),
            Some(State::Granted),
            "the dead process's ticket is left granted to the entry's new owner: stuck"
        );
        assert_eq!(w.state_of(t2), Some(State::Granted));
    });
}

// ---- The weighted kinds (`core::weighted`): reader/writer lock and semaphore. ----

fn weighted_world(kind: RecordKind) -> Arc<World> {
    Arc::new(World {
        st: OwnedState::of_kind(4, 4, kind),
        p: ModelPlatform::new(1),
        log: UnsafeCell::new(Vec::new()),
    })
}

/// A reader/writer world of `slots` slots and `participants` participant entries.
fn weighted_world_of(slots: u32, participants: u32) -> Arc<World> {
    Arc::new(World {
        st: OwnedState::of_kind(slots, participants, RecordKind::RWLOCK),
        p: ModelPlatform::new(1),
        log: UnsafeCell::new(Vec::new()),
    })
}

fn shared_me(participant: u32, shared: bool) -> Me {
    Me {
        shared,
        ..me(participant)
    }
}

/// A waiter that does nothing but look at its own word until it is granted (no recovery, no
/// walk): if every walk missed it, the model never ends and loom reports it. This is how the
/// models show that no grant is lost (a real waiter would also recover, which hides a lost
/// grant behind its next poll).
fn wait_granted_only(w: &World, t: u64, me: &Me) -> Grant {
    let st = w.view();
    loop {
        match claim_granted(&st, &w.p, t, me).expect("consistent") {
            Claim::Held(g) => return g,
            Claim::Lost => panic!("live waiter skipped"),
            Claim::NotGranted(_) => thread::yield_now(),
        }
    }
}

impl World {
    /// A reader's critical section: reads the log (readers may overlap; a writer may not
    /// overlap them — loom reports it).
    fn read_section(&self) -> usize {
        // SAFETY: only holders touch the log; readers only read it, and loom checks that no
        // write overlaps.
        self.log.with(|v| unsafe { (*v).len() })
    }
}

/// Two readers release at the same time while a writer waits: each release stores `Done` and
/// walks; without the `SeqCst` fence at the start of the walk, each may still see the other
/// holding and nobody grants the writer (this model then never ends).
#[test]
fn two_readers_release_while_a_writer_waits() {
    loom::model(|| {
        let w = weighted_world(RecordKind::RWLOCK);
        let (r1, r2, wt) = {
            let st = w.view();
            let r1 = lock(&st, &w.p, &shared_me(1, true), None, &tuning()).expect("r1");
            let r2 = lock(&st, &w.p, &shared_me(2, true), None, &tuning()).expect("r2");
            (r1, r2, enqueue(&st, &w.p, &shared_me(3, false)))
        };
        let release_in = |g: Grant, who: u32| {
            let w = w.clone();
            thread::spawn(move || {
                w.read_section();
                release(&w.view(), &w.p, &g, who).expect("release");
            })
        };
        let a = release_in(r1, 1);
        let b = release_in(r2, 2);
        let writer = {
            let w = w.clone();
            thread::spawn(move || {
                let g = wait_granted_only(&w, wt, &shared_me(3, false));
                w.enter(&g);
                release(&w.view(), &w.p, &g, 3).expect("release");
            })
        };
        a.join().unwrap();
        b.join().unwrap();
        writer.join().unwrap();
        assert_eq!(w.log(), vec![wt + 1]);
    });
}

/// A reader releases while a writer publishes: the release's walk may miss the unpublished
/// writer, so the writer's own walk after publishing must see the release (the fences pair).
#[test]
fn a_reader_releases_while_a_writer_publishes() {
    loom::model(|| {
        let w = weighted_world(RecordKind::RWLOCK);
        let r = {
            let st = w.view();
            lock(&st, &w.p, &shared_me(1, true), None, &tuning()).expect("r")
        };
        let reader = {
            let w = w.clone();
            thread::spawn(move || {
                w.read_section();
                release(&w.view(), &w.p, &r, 1).expect("release");
            })
        };
        let writer = {
            let w = w.clone();
            thread::spawn(move || {
                let me = shared_me(2, false);
                let t = enqueue(&w.view(), &w.p, &me);
                let g = wait_granted_only(&w, t, &me);
                w.enter(&g);
                release(&w.view(), &w.p, &g, 2).expect("release");
            })
        };
        reader.join().unwrap();
        writer.join().unwrap();
        assert_eq!(w.log().len(), 1);
    });
}

/// A semaphore of one permit: its holder leaves its section and gives the permit back while
/// the first of two queued tickets (published before the threads start: publication races
/// are the other models') waits for it; that one gets it alone (loom checks the sections),
/// and hands it on to the second (which the main thread claims at the end), in ticket order.
/// Two spinning waiters as threads made the model too big to check.
#[test]
fn a_permit_comes_back_while_two_queue() {
    loom::model(|| {
        let w = weighted_world(RecordKind::semaphore(1));
        let (held, queued) = {
            let st = w.view();
            let held = lock(&st, &w.p, &shared_me(1, true), None, &tuning()).expect("first");
            let queued = [2u32, 3].map(|who| (who, enqueue(&st, &w.p, &shared_me(who, true))));
            (held, queued)
        };
        let holder = {
            let w = w.clone();
            thread::spawn(move || {
                w.enter(&held);
                release(&w.view(), &w.p, &held, 1).expect("release");
            })
        };
        let (who, t) = queued[0];
        let first = {
            let w = w.clone();
            thread::spawn(move || {
                let me = shared_me(who, true);
                let g = wait_granted_only(&w, t, &me);
                w.enter(&g);
                release(&w.view(), &w.p, &g, who).expect("release");
            })
        };
        holder.join().unwrap();
        first.join().unwrap();
        let (who, t) = queued[1];
        let last = wait_granted_only(&w, t, &shared_me(who, true));
        w.enter(&last);
        release(&w.view(), &w.p, &last, who).expect("release");
        assert_eq!(w.log(), vec![held.token(), queued[0].1 + 1, t + 1]);
    });
}

/// Two readers and a writer with the real `lock` (publication, walks, recovery): readers may
/// hold together, the writer alone; everyone is served. Three threads: at most one preemption.
#[test]
fn readers_and_a_writer_exclude_each_other() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(1);
    b.check(|| {
        let w = weighted_world(RecordKind::RWLOCK);
        let threads: Vec<_> = [(1u32, true), (2, true), (3, false)]
            .into_iter()
            .map(|(who, shared)| {
                let w = w.clone();
                thread::spawn(move || {
                    let st = w.view();
                    let me = shared_me(who, shared);
                    let g = lock(&st, &w.p, &me, None, &tuning()).expect("lock");
                    if shared {
                        w.read_section();
                    } else {
                        w.enter(&g);
                    }
                    release(&st, &w.p, &g, who).expect("release");
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(w.log().len(), 1);
    });
}

// ---- The lock word: fast grants, the first queuer, revocation of a fast holder ----

/// A dead fast holder and nobody queued; two takers race: one revokes it (the word's `D` set)
/// or queues behind it and revokes it through the walk; exactly one of them is told the owner
/// died, they hold in turn, and the lock ends free.
#[test]
fn two_takers_race_for_a_dead_fast_holder() {
    loom::model(|| {
        let w = World::new(1);
        let st = w.view();
        let g = lock(&st, &w.p, &me(0), None, &tuning()).unwrap();
        assert!(g.fast);
        w.enter(&g);
        w.p.set_dead(0, true);
        let hs: Vec<_> = (1..=2)
            .map(|i| {
                let w = w.clone();
                thread::spawn(move || {
                    let st = w.view();
                    let g = loop {
                        // try_lock, as a taker that must not wait would; then lock.
                        if let Some(g) = try_lock(&st, &w.p, &me(i), &tuning()).expect("ok") {
                            break g;
                        }
                        if i == 2 {
                            break lock(&st, &w.p, &me(i), None, &tuning()).expect("lock");
                        }
                        thread::yield_now();
                    };
                    w.enter(&g);
                    release(&st, &w.p, &g, i).expect("release");
                    g
                })
            })
            .collect();
        let grants: Vec<Grant> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        let told = grants.iter().filter(|g| g.died).count();
        assert_eq!(told, 1, "{grants:?}");
        assert_increasing(&w.log());
        let lw = st.lock_word(Acquire);
        assert!(!lw.held() && !lw.queued(), "{lw:?}");
        assert_eq!(release(&st, &w.p, &g, 0), Err(Lost));
    });
}

/// A leased taker (always granted through a slot) and an unleased one race for a free lock:
/// both hold in turn, never together, and the lock ends free.
#[test]
fn leased_and_fast_takers_race_for_a_free_lock() {
    loom::model(|| {
        let w = World::new(1);
        let hs: Vec<_> = [me(1), leased(2, 1_000)]
            .into_iter()
            .map(|m| {
                let w = w.clone();
                thread::spawn(move || {
                    let st = w.view();
                    let g = lock(&st, &w.p, &m, None, &tuning()).expect("lock");
                    // A leased grant always lives in a slot (an unleased one queues too when
                    // the other holds).
                    assert!(!(g.fast && m.lease_ms.is_some()), "{g:?}");
                    w.enter(&g);
                    release(&st, &w.p, &g, m.participant).expect("release");
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(w.log().len(), 2);
        let st = w.view();
        let lw = st.lock_word(Acquire);
        assert!(!lw.held() && !lw.queued(), "{lw:?}");
    });
}

/// A walk reads a lapped writer's slot (still the long read's word), is preempted, and then
/// looks at the slot's given-up word: meanwhile the read ended, the writer published and was
/// granted, and a later taker of that slot gave up — its `give_up` rebased the word's base onto
/// the writer's lap and absorbed its own, so the writer's lap reads as given up. The walk must
/// not pass the writer on that stale look (it passed it and granted the reader behind it too).
#[test]
fn a_stale_lapped_look_never_passes_a_published_writer() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| {
        let w = weighted_world_of(2, 8);
        let (long, x, y, z) = {
            let st = w.view();
            let p = &w.p;
            let long = lock(&st, p, &shared_me(1, true), None, &tuning()).expect("long read");
            let r = lock(&st, p, &shared_me(2, true), None, &tuning()).expect("read");
            release(&st, p, &r, 2).unwrap();
            let Taken::Queued(x, _) = take(&st, p, &shared_me(3, false)) else {
                panic!("no ticket")
            };
            assert_eq!(x, 2);
            let mut watch = Watch::default();
            assert!(matches!(
                publish_once(&st, p, x, &shared_me(3, false), None, &tuning(), &mut watch),
                Ok(Look::Lapped)
            ));
            let y = enqueue(&st, p, &shared_me(4, true));
            assert_eq!(y, 3);
            let Taken::Queued(z, _) = take(&st, p, &shared_me(5, false)) else {
                panic!("no ticket")
            };
            assert_eq!(z, 4);
            (long, x, y, z)
        };
        let walker = {
            let w = w.clone();
            thread::spawn(move || advance(&w.view(), &w.p, 0, false))
        };
        let others = {
            let w = w.clone();
            thread::spawn(move || {
                let st = w.view();
                release(&st, &w.p, &long, 1).expect("release");
                let mut watch = Watch::default();
                let r = publish_once(
                    &st,
                    &w.p,
                    x,
                    &shared_me(3, false),
                    None,
                    &tuning(),
                    &mut watch,
                );
                assert!(matches!(r, Ok(Look::Done(Published::Waiting(_)))));
                give_up_lapped(&st, &w.p, z, 5);
            })
        };
        walker.join().unwrap();
        others.join().unwrap();
        let (sx, sy) = (w.state_of(x), w.state_of(y));
        assert!(
            !(sx == Some(State::Granted) && sy == Some(State::Granted)),
            "writer {x} and reader {y} both granted: {sx:?} {sy:?}"
        );
    });
}

/// The same stale look when walks start at `front` (a read held across more than `N`
/// tickets): the walk passed a published writer that still waited (a live reader holds),
/// granted the readers behind it and raised `front` past it; once everyone ahead had left, the
/// writer was still not granted. It must be.
#[test]
fn a_stale_lapped_look_never_strands_a_waiting_writer_before_front() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| {
        let w = weighted_world_of(4, 16);
        let (long, r2, x, later) = {
            let st = w.view();
            let p = &w.p;
            let long = lock(&st, p, &shared_me(1, true), None, &tuning()).expect("long read");
            while st.next_ticket() < 8 || st.next_ticket() % 4 != 3 {
                let r = lock(&st, p, &shared_me(2, true), None, &tuning()).expect("read");
                release(&st, p, &r, 2).unwrap();
            }
            let h = st.header();
            let (head, front) = (h.head.load(Acquire), h.front.load(Acquire));
            assert!(
                front.wrapping_sub(head) > 4,
                "head {head} front {front}: not far"
            );
            let r2 = lock(&st, p, &shared_me(3, true), None, &tuning()).expect("r2");
            assert_eq!(r2.ticket % 4, 3);
            let Taken::Queued(x, _) = take(&st, p, &shared_me(4, false)) else {
                panic!("no ticket")
            };
            assert_eq!(x % 4, 0);
            let mut watch = Watch::default();
            assert!(matches!(
                publish_once(&st, p, x, &shared_me(4, false), None, &tuning(), &mut watch),
                Ok(Look::Lapped)
            ));
            let y1 = enqueue(&st, p, &shared_me(5, true));
            let y2 = enqueue(&st, p, &shared_me(6, true));
            assert_eq!((y1 % 4, y2 % 4), (1, 2));
            let Taken::Queued(v, _) = take(&st, p, &shared_me(7, false)) else {
                panic!("no ticket")
            };
            let Taken::Queued(z, _) = take(&st, p, &shared_me(8, false)) else {
                panic!("no ticket")
            };
            assert_eq!((v % 4, z % 4), (3, 0));
            (long, r2, x, [y1, y2, v, z])
        };
        let [y1, y2, v, z] = later;
        let walker = {
            let w = w.clone();
            thread::spawn(move || advance(&w.view(), &w.p, 0, false))
        };
        let others = {
            let w = w.clone();
            thread::spawn(move || {
                let st = w.view();
                release(&st, &w.p, &long, 1).expect("release");
                let mut watch = Watch::default();
                let r = publish_once(
                    &st,
                    &w.p,
                    x,
                    &shared_me(4, false),
                    None,
                    &tuning(),
                    &mut watch,
                );
                assert!(matches!(r, Ok(Look::Done(Published::Waiting(_)))));
                give_up_lapped(&st, &w.p, z, 8);
            })
        };
        walker.join().unwrap();
        others.join().unwrap();
        let st = w.view();
        let p = &w.p;
        release(&st, p, &r2, 3).expect("r2 releases");
        give_up_lapped(&st, p, v, 7);
        for (t, who) in [(y1, 5), (y2, 6)] {
            if let Ok(Claim::Held(g)) = claim_granted(&st, p, t, &shared_me(who, true)) {
                release(&st, p, &g, who).unwrap();
            }
        }
        let mut watch = Watch::default();
        for _ in 0..3 {
            recover(&st, p, x, &mut watch, &tuning());
        }
        let h = st.header();
        assert_eq!(
            w.state_of(x),
            Some(State::Granted),
            "writer {x} never granted once everyone ahead left (head {}, front {})",
            h.head.load(Acquire),
            h.front.load(Acquire)
        );
    });
}
