//! Property-based test of the weighted kinds (`FairRwLock`, `FairSemaphore`: `core::weighted`)
//! against their invariants, on one thread with the real pieces: a taker takes a ticket and
//! runs the real `publish` (which walks), a granted waiter runs the real `claim_granted`, a
//! holder the real `release`, a waiter the real weighted `recover`; a timeout is the CAS and
//! walk `wait_for_grant` does; a participant dies by being declared dead to the platform.
//!
//! After every step, over the unfinished tickets as the slot words show them:
//! * **never too many**: a granted or held exclusive ticket is alone; shared ones are at most
//!   the capacity (dead holders count until they are revoked);
//! * **FIFO**: the granted and held tickets are a prefix of the unfinished ones (nobody is
//!   granted while an earlier ticket still waits);
//! * and after `Settle` (every live waiter recovers and claims until nothing changes) **no
//!   stall**: the first unfinished ticket is granted or held, and the first still waiting one
//!   does not fit beside what is granted before it.
//!
//! `Churn` takes and gives back a share up to 1,500 times in a row while other shares may be
//! held for good: their slots are lapped over and over (each lap retaken), `head` stays far
//! behind, and walks start at `front`.
//!
//! Failing cases shrink and are kept next to this file, in
//! `tests/model_weighted_proptest.proptest-regressions` (`FileFailurePersistence::WithSource`).

use std::sync::atomic::Ordering::Acquire;

use fairlock::__internal::core::model::ModelPlatform;
use fairlock::__internal::core::state::RecordKind;
use fairlock::__internal::core::state::slot_word::{LapRelation, relate};
use fairlock::__internal::core::{
    Claim, Grant, Me, OwnedState, Published, State, Tuning, Watch, Word, claim_granted, publish,
    release, try_lock, weighted,
};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

const SLOTS: u32 = 8;
const ACTORS: u32 = 6;

#[derive(Clone, Debug)]
enum Op {
    /// Takes a ticket and publishes it (a share if `true`; a semaphore's takers always are).
    Arrive(u32, bool),
    /// A granted waiter claims.
    Claim(u32),
    /// A holder releases.
    Release(u32),
    /// A waiter gives up (a timeout): `Waiting → Abandoned`, then a walk.
    GiveUp(u32),
    /// A waiter runs one round of the weighted recovery.
    Recover(u32),
    /// The participant dies (its ticket stays as it is until someone recovers it).
    Crash(u32),
    /// Everybody alive recovers and claims until nothing changes; then no stall.
    Settle,
    /// An idle actor takes and gives back a share that many times in a row (`try_lock` and
    /// `release`), while others may hold theirs for good: the slots of long-held shares are
    /// lapped again and again, and each lap retaken (given up and taken anew).
    Churn(u32, u16),
}

fn op() -> impl Strategy<Value = Op> {
    let a = 0..ACTORS;
    prop_oneof![
        5 => (a.clone(), any::<bool>()).prop_map(|(a, s)| Op::Arrive(a, s)),
        4 => a.clone().prop_map(Op::Claim),
        4 => a.clone().prop_map(Op::Release),
        1 => a.clone().prop_map(Op::GiveUp),
        2 => a.clone().prop_map(Op::Recover),
        1 => a.clone().prop_map(Op::Crash),
        1 => Just(Op::Settle),
        1 => (a.clone(), 1..1500u16).prop_map(|(a, k)| Op::Churn(a, k)),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Actor {
    Idle,
    Waiting(u64, bool),
    Holding(Grant, bool),
    Dead,
}

struct Sim {
    o: OwnedState,
    p: ModelPlatform,
    tuning: Tuning,
    kind: RecordKind,
    capacity: u64,
    actors: Vec<Actor>,
    /// Every ticket taken so far: (ticket, actor, shared).
    tickets: Vec<(u64, u32, bool)>,
}

fn me(a: u32, shared: bool) -> Me {
    Me {
        participant: a,
        tid: 100 + a,
        lease_ms: None,
        shared,
        beacon: 0,
    }
}

impl Sim {
    fn new(kind: RecordKind) -> Sim {
        let o = OwnedState::of_kind(SLOTS, ACTORS + 2, kind);
        let capacity = o.view().capacity();
        Sim {
            o,
            p: ModelPlatform::new(0),
            tuning: Tuning {
                grace_ns: 10_000_000,
                ..Tuning::default()
            },
            kind,
            capacity,
            actors: vec![Actor::Idle; ACTORS as usize],
            tickets: Vec::new(),
        }
    }

    /// A ticket's state, if its slot shows its lap.
    fn state(&self, t: u64) -> Option<State> {
        let st = self.o.view();
        let w = Word(st.slot(t).word.load(Acquire));
        (relate(w.lap(), st.lap(t)) == LapRelation::Same)
            .then(|| w.state())
            .flatten()
    }

    /// The tickets not final yet, in order: (ticket, shared, state).
    fn unfinished(&self) -> Vec<(u64, bool, State)> {
        self.tickets
            .iter()
            .filter_map(|&(t, _, shared)| {
                self.state(t)
                    .filter(|s| !s.is_final())
                    .map(|s| (t, shared, s))
            })
            .collect()
    }

    /// No taker may lap the oldest unfinished ticket (that is loom's and the unit tests'
    /// business): at most `SLOTS - 1` tickets from the oldest unfinished one.
    fn room(&self) -> bool {
        let next = self.o.view().next_ticket();
        self.unfinished()
            .first()
            .is_none_or(|&(t, _, _)| next - t < u64::from(SLOTS) - 1)
    }

    fn check(&self, what: &Op) {
        // Every unfinished ticket is its actor's current one (or its actor died): a ticket
        // left behind by a release, a timeout or a claim would hold up everyone after it.
        for &(t, a, _) in &self.tickets {
            let Some(s) = self.state(t).filter(|s| !s.is_final()) else {
                continue;
            };
            let current = match self.actors[a as usize] {
                Actor::Waiting(w, _) => w == t,
                Actor::Holding(g, _) => g.ticket == t,
                Actor::Dead => true,
                Actor::Idle => false,
            };
            assert!(
                current,
                "after {what:?}: ticket {t} of actor {a} ({:?}) is still {s:?}",
                self.actors[a as usize]
            );
        }
        let mut granted_shared = 0;
        let mut granted_exclusive = 0;
        let mut waiting_seen = None;
        for (t, shared, s) in self.unfinished() {
            if s.is_granted() {
                if let Some(w) = waiting_seen {
                    panic!("after {what:?}: ticket {t} granted while {w} still waits");
                }
                if shared {
                    granted_shared += 1;
                } else {
                    granted_exclusive += 1;
                }
            } else {
                waiting_seen.get_or_insert(t);
            }
        }
        assert!(
            granted_exclusive == 0 || (granted_exclusive == 1 && granted_shared == 0),
            "after {what:?}: an exclusive grant not alone ({granted_exclusive} exclusive, {granted_shared} shared)"
        );
        assert!(
            granted_shared <= self.capacity,
            "after {what:?}: {granted_shared} shares, capacity {}",
            self.capacity
        );
    }

    fn shared(&self, asked: bool) -> bool {
        // A semaphore's takers are all shares; a reader/writer lock's may be either.
        asked || self.kind != RecordKind::RWLOCK
    }

    fn claim(&mut self, a: u32) {
        let Actor::Waiting(t, shared) = self.actors[a as usize] else {
            return;
        };
        let st = self.o.view();
        match claim_granted(&st, &self.p, t, &me(a, shared)).expect("consistent") {
            Claim::Held(g) => self.actors[a as usize] = Actor::Holding(g, shared),
            Claim::Lost => panic!("actor {a}: ticket {t} skipped while alive"),
            Claim::NotGranted(_) => {}
        }
    }

    fn recover(&mut self, a: u32) {
        if let Actor::Waiting(t, _) = self.actors[a as usize] {
            let st = self.o.view();
            let mut watch = Watch::default();
            weighted::recover::recover(&st, &self.p, t, &mut watch, &self.tuning);
        }
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Arrive(a, asked) => {
                if self.actors[a as usize] != Actor::Idle || !self.room() {
                    return;
                }
                let shared = self.shared(asked);
                let st = self.o.view();
                let t = st.take_ticket();
                let mut watch = Watch::default();
                let r = publish(
                    &st,
                    &self.p,
                    t,
                    &me(a, shared),
                    Some(0),
                    &self.tuning,
                    &mut watch,
                )
                .expect("publish");
                self.tickets.push((t, a, shared));
                self.actors[a as usize] = match r {
                    Published::Held(g) => Actor::Holding(g, shared),
                    Published::Waiting(_) => Actor::Waiting(t, shared),
                    Published::Skipped => panic!("ticket {t} skipped at its publication"),
                };
            }
            Op::Claim(a) => self.claim(a),
            Op::Release(a) => {
                let Actor::Holding(g, _) = self.actors[a as usize] else {
                    return;
                };
                let st = self.o.view();
                release(&st, &self.p, &g, a).expect("an unleased holder's release");
                self.actors[a as usize] = Actor::Idle;
            }
            Op::GiveUp(a) => {
                let Actor::Waiting(t, _) = self.actors[a as usize] else {
                    return;
                };
                let st = self.o.view();
                let slot = st.slot(t);
                let w = Word(slot.word.load(Acquire));
                if matches!(w.state(), Some(State::Waiting | State::Sleeping))
                    && slot
                        .word
                        .compare_exchange(w.0, w.with_state(State::Abandoned).0, Acquire, Acquire)
                        .is_ok()
                {
                    weighted::walk::advance(&st, &self.p);
                    self.actors[a as usize] = Actor::Idle;
                }
                // Otherwise it was granted meanwhile: the grant won the race; it claims later.
            }
            Op::Recover(a) => self.recover(a),
            Op::Crash(a) => {
                self.p.set_dead(a, true);
                self.actors[a as usize] = Actor::Dead;
            }
            Op::Settle => self.settle(),
            Op::Churn(a, k) => {
                if self.actors[a as usize] != Actor::Idle {
                    return;
                }
                let st = self.o.view();
                for _ in 0..k {
                    if let Some(g) =
                        try_lock(&st, &self.p, &me(a, true), &self.tuning).expect("consistent")
                    {
                        release(&st, &self.p, &g, a).expect("release");
                    }
                }
            }
        }
    }

    fn settle(&mut self) {
        for _ in 0..4 * SLOTS {
            // Past every grace: a dead grantee or waiter is passed at once.
            self.p.advance(self.tuning.grace_ns + 1);
            for a in 0..ACTORS {
                self.recover(a);
                self.claim(a);
            }
        }
        let front = self.unfinished();
        let Some(&(first, _, first_state)) = front.first() else {
            return;
        };
        assert!(
            first_state.is_granted(),
            "stall: the first unfinished ticket {first} is {first_state:?} after settling"
        );
        // The first waiting ticket does not fit beside the granted ones before it.
        let granted: Vec<bool> = front
            .iter()
            .take_while(|(_, _, s)| s.is_granted())
            .map(|&(_, shared, _)| shared)
            .collect();
        if let Some(&(t, shared, _)) = front.iter().find(|(_, _, s)| !s.is_granted()) {
            let exclusive_held = granted.iter().any(|s| !s);
            let fits = if shared {
                !exclusive_held && (granted.len() as u64) < self.capacity
            } else {
                granted.is_empty()
            };
            assert!(
                !fits,
                "stall: ticket {t} (shared {shared}) fits beside {granted:?} yet waits"
            );
        }
    }
}

fn run(kind: RecordKind, ops: &[Op]) {
    let mut sim = Sim::new(kind);
    for op in ops {
        sim.apply(op);
        sim.check(op);
    }
    sim.apply(&Op::Settle);
    sim.check(&Op::Settle);
}

fn kind() -> impl Strategy<Value = RecordKind> {
    prop_oneof![
        2 => Just(RecordKind::RWLOCK),
        1 => (1..4u32).prop_map(RecordKind::semaphore),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn weighted_kinds_keep_capacity_order_and_progress(
        kind in kind(),
        ops in prop::collection::vec(op(), 1..120),
    ) {
        run(kind, &ops);
    }
}
