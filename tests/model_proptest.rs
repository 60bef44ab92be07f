//! Property-based state-machine test of the lock algorithm (`fairlock::core`) against a
//! reference model: a FIFO queue of tickets, one holder at the head, a lease clock and a set
//! of live participants.
//!
//! Everything runs on one thread with non-blocking pieces: a waiter is published the way
//! `lock` publishes it (take a ticket, CAS the slot to `Waiting`), gives up the way a timeout
//! does (CAS `Waiting → Abandoned`) and claims a grant the way `wait_for_grant` does (CAS
//! `Granted → Held`); uncontended acquisitions go through the real `lock` (with a deadline
//! already past, so it can never block) and `try_lock`; release, extend, check and recovery
//! are the real functions. After every step the model and the shared words must agree.
//! Failing cases shrink and are kept in `proptest-regressions/model_proptest.txt`.

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::Ordering::{Acquire, Relaxed};

use fairlock::core::lease::Lease;
use fairlock::core::model::ModelPlatform;
use fairlock::core::recover::{Watch, recover};
use fairlock::core::word::{LapRelation, relate};
use fairlock::core::{
    Grant, Lost, Me, OwnedState, State, Tuning, Word, extend, lock, release, try_lock,
};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

const SLOTS: u32 = 8;
const ACTORS: u32 = 6;
/// Never more live tickets than this, so no taker is ever lapped (that is loom's business).
const MAX_QUEUE: usize = SLOTS as usize - 2;

#[derive(Clone, Debug)]
enum Op {
    /// Actor takes a ticket: through `lock` (deadline past) when the model says the lock is
    /// free and pre-granted, else published as a waiter.
    Arrive(u32, Option<u64>),
    /// `try_lock`.
    TryLock(u32),
    /// A waiter gives its ticket up (timeout): CAS `Waiting → Abandoned`.
    GiveUp(u32),
    /// A granted waiter claims: CAS `Granted → Held`.
    Claim(u32),
    /// The holder releases.
    Release(u32),
    /// The holder extends its lease.
    Extend(u32, u64),
    /// The participant dies (never runs again).
    Crash(u32),
    /// The clock moves (ms).
    Tick(u64),
    /// A waiter runs one round of recovery.
    Recover(u32),
    /// An actor whose grant was taken over releases it (must be `Err(Lost)`, harmless).
    StaleRelease(u32),
    /// Clock far ahead, then the last live waiter recovers until the queue settles: the first
    /// live ticket must be at the head (no stall).
    Settle,
}

fn op() -> impl Strategy<Value = Op> {
    let a = 0..ACTORS;
    prop_oneof![
        4 => (a.clone(), prop::option::of(1..50u64)).prop_map(|(a, l)| Op::Arrive(a, l)),
        1 => a.clone().prop_map(Op::TryLock),
        1 => a.clone().prop_map(Op::GiveUp),
        3 => a.clone().prop_map(Op::Claim),
        3 => a.clone().prop_map(Op::Release),
        1 => (a.clone(), 1..50u64).prop_map(|(a, ms)| Op::Extend(a, ms)),
        1 => a.clone().prop_map(Op::Crash),
        2 => (0..60u64).prop_map(Op::Tick),
        3 => a.clone().prop_map(Op::Recover),
        1 => a.clone().prop_map(Op::StaleRelease),
        1 => Just(Op::Settle),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Waiting,
    Granted { died: bool },
    Held,
}

#[derive(Clone, Debug)]
struct Entry {
    ticket: u64,
    actor: u32,
    status: Status,
    /// The grant, once claimed.
    grant: Option<Grant>,
    /// Lease deadline in ms (leased holders only).
    lease_until: Option<u64>,
}

struct Sim {
    o: OwnedState,
    p: ModelPlatform,
    tuning: Tuning,
    /// Live (non-final) tickets in ticket order; the head one may be granted or held.
    queue: VecDeque<Entry>,
    /// The next ticket to hand out.
    next: u64,
    /// Ticket `next` is pre-granted (`Ready`), with this died flag.
    ready: Option<bool>,
    /// The died flag the next grant will carry (how the last granted ticket ended).
    died_next: bool,
    dead: BTreeSet<u32>,
    /// Grants taken over by a lease takeover, still in their actors' hands.
    stale: Vec<(u32, Grant)>,
    now_ns: u64,
    last_token: u64,
    watches: Vec<Watch>,
}

fn me(actor: u32, lease_ms: Option<u64>) -> Me {
    Me {
        participant: actor,
        tid: 1000 + actor,
        lease_ms,
    }
}

impl Sim {
    fn new() -> Sim {
        Sim {
            o: OwnedState::new(SLOTS, ACTORS + 2),
            p: ModelPlatform::new(0),
            tuning: Tuning {
                grace_ns: 10_000_000,
                ..Tuning::default()
            },
            queue: VecDeque::new(),
            next: 0,
            ready: Some(false),
            died_next: false,
            dead: BTreeSet::new(),
            stale: Vec::new(),
            now_ns: 1_000_000_000,
            last_token: 0,
            watches: (0..ACTORS).map(|_| Watch::default()).collect(),
        }
    }

    /// Taking ticket `next` would not lap the oldest live ticket (whose slot it would share).
    fn room(&self) -> bool {
        self.queue.len() < MAX_QUEUE
            && self
                .queue
                .front()
                .is_none_or(|f| self.next - f.ticket < u64::from(SLOTS) - 1)
    }

    fn busy(&self, a: u32) -> bool {
        self.queue.iter().any(|e| e.actor == a) || self.stale.iter().any(|(s, _)| *s == a)
    }

    fn alive(&self, a: u32) -> bool {
        !self.dead.contains(&a)
    }

    fn pos(&self, a: u32) -> Option<usize> {
        self.queue.iter().position(|e| e.actor == a)
    }

    fn new_grant(&mut self, g: &Grant) {
        assert!(
            g.token() > self.last_token,
            "tokens must rise: {g:?} after {}",
            self.last_token
        );
        self.last_token = g.token();
    }

    /// The model's `advance` from the head: grant the first live ticket, or pre-grant `next`.
    fn grant_front(&mut self) {
        let died = self.died_next;
        match self.queue.front_mut() {
            Some(e) => {
                if e.status == Status::Waiting {
                    e.status = Status::Granted { died };
                }
            }
            None => {
                if self.ready.is_none() {
                    self.ready = Some(died);
                }
            }
        }
    }

    /// The head ticket ended (`died`: revoked, or skipped carrying this flag); grant the next.
    fn head_ended(&mut self, died: bool) {
        self.queue.pop_front();
        self.died_next = died;
        self.grant_front();
    }

    fn apply(&mut self, op: &Op) {
        let now_ms = self.now_ns / 1_000_000;
        match *op {
            Op::Arrive(a, lease) => {
                if self.busy(a) || !self.alive(a) || !self.room() {
                    return;
                }
                let t = self.next;
                self.next += 1;
                if let Some(died) = self.ready.take() {
                    let st = self.o.view();
                    let g = lock(&st, &self.p, &me(a, lease), Some(0), &self.tuning)
                        .expect("pre-granted ticket is claimed at once");
                    assert_eq!((g.ticket, g.died, g.leased), (t, died, lease.is_some()));
                    self.new_grant(&g);
                    self.queue.push_back(Entry {
                        ticket: t,
                        actor: a,
                        status: Status::Held,
                        grant: Some(g),
                        lease_until: lease.map(|ms| now_ms + ms),
                    });
                } else {
                    let st = self.o.view();
                    let taken = st.header().next_ticket.fetch_add(1, Relaxed);
                    assert_eq!(taken, t);
                    let slot = st.slot(t);
                    let w = Word(slot.word.load(Acquire));
                    assert_eq!(
                        (
                            relate(w.lap(), st.lap(t)),
                            w.state().is_some_and(State::is_final)
                        ),
                        (LapRelation::Previous, true),
                        "ticket {t}: slot should be free, is {w:?}"
                    );
                    let waiting = Word::new(st.lap(t), a, State::Waiting, false);
                    slot.word
                        .compare_exchange(w.0, waiting.0, Acquire, Relaxed)
                        .unwrap();
                    self.watches[a as usize] = Watch::default();
                    self.queue.push_back(Entry {
                        ticket: t,
                        actor: a,
                        status: Status::Waiting,
                        grant: None,
                        lease_until: None,
                    });
                }
            }
            Op::TryLock(a) => {
                if self.busy(a) || !self.alive(a) || !self.room() {
                    return;
                }
                let got = {
                    let st = self.o.view();
                    try_lock(&st, &self.p, &me(a, None)).expect("consistent")
                };
                match (self.ready.take(), got) {
                    (Some(died), Some(g)) => {
                        assert_eq!((g.ticket, g.died), (self.next, died));
                        self.next += 1;
                        self.new_grant(&g);
                        self.queue.push_back(Entry {
                            ticket: g.ticket,
                            actor: a,
                            status: Status::Held,
                            grant: Some(g),
                            lease_until: None,
                        });
                    }
                    (None, None) => {}
                    (r, g) => panic!("try_lock: model ready {r:?}, lock gave {g:?}"),
                }
            }
            Op::GiveUp(a) => {
                let Some(i) = self.pos(a) else { return };
                if !self.alive(a) || self.queue[i].status != Status::Waiting {
                    return;
                }
                let t = self.queue[i].ticket;
                let st = self.o.view();
                let slot = st.slot(t);
                let w = Word(slot.word.load(Acquire));
                assert_eq!(w.state(), Some(State::Waiting), "ticket {t}");
                slot.word
                    .compare_exchange(w.0, w.with_state(State::Abandoned).0, Acquire, Acquire)
                    .expect("abandon a waiting ticket");
                self.queue.remove(i);
            }
            Op::Claim(a) => {
                let Some(i) = self.pos(a) else { return };
                let Status::Granted { died } = self.queue[i].status else {
                    return;
                };
                if !self.alive(a) {
                    return;
                }
                let e = &mut self.queue[i];
                let st = self.o.view();
                let slot = st.slot(e.ticket);
                let w = Word(slot.word.load(Acquire));
                assert_eq!(w.state(), Some(State::Granted), "ticket {}", e.ticket);
                assert_eq!(w.died(), died);
                slot.word
                    .compare_exchange(w.0, w.with_state(State::Held).0, Acquire, Acquire)
                    .expect("claim");
                slot.lease
                    .store(Lease::None.encode(st.lap(e.ticket)), Relaxed);
                let g = Grant {
                    ticket: e.ticket,
                    died,
                    leased: false,
                };
                e.status = Status::Held;
                e.grant = Some(g);
                self.new_grant(&g);
            }
            Op::Release(a) => {
                let Some(0) = self.pos(a) else { return };
                if !self.alive(a) || self.queue[0].status != Status::Held {
                    return;
                }
                let g = self.queue[0].grant.unwrap();
                let r = {
                    let st = self.o.view();
                    release(&st, &self.p, &g, a)
                };
                assert_eq!(r, Ok(()));
                self.head_ended(false);
            }
            Op::Extend(a, ms) => {
                if let Some(k) = self.stale.iter().position(|(s, _)| *s == a) {
                    let g = self.stale[k].1;
                    let st = self.o.view();
                    assert_eq!(extend(&st, &self.p, &g, a, ms), Err(Lost));
                    return;
                }
                let Some(0) = self.pos(a) else { return };
                let alive = self.alive(a);
                let e = &mut self.queue[0];
                if !alive || e.status != Status::Held || e.lease_until.is_none() {
                    return;
                }
                let g = e.grant.unwrap();
                let st = self.o.view();
                assert_eq!(extend(&st, &self.p, &g, a, ms), Ok(()));
                e.lease_until = Some(now_ms + ms);
            }
            Op::Crash(a) => {
                self.p.set_dead(a, true);
                self.dead.insert(a);
                self.stale.retain(|(s, _)| *s != a);
            }
            Op::Tick(ms) => {
                self.p.advance(ms * 1_000_000);
                self.now_ns += ms * 1_000_000;
            }
            Op::Recover(a) => {
                let Some(i) = self.pos(a) else { return };
                if !self.alive(a) || self.queue[i].status != Status::Waiting {
                    return;
                }
                self.recover(i);
            }
            Op::StaleRelease(a) => {
                let Some(k) = self.stale.iter().position(|(s, _)| *s == a) else {
                    return;
                };
                let (_, g) = self.stale.remove(k);
                let st = self.o.view();
                assert_eq!(release(&st, &self.p, &g, a), Err(Lost));
            }
            Op::Settle => self.settle(),
        }
    }

    /// Real `recover` by the waiter at queue position `i`, and the model's prediction of it.
    fn recover(&mut self, i: usize) {
        let e = self.queue[i].clone();
        {
            let st = self.o.view();
            recover(
                &st,
                &self.p,
                e.ticket,
                &mut self.watches[e.actor as usize],
                &self.tuning,
            );
        }
        let now_ms = self.now_ns / 1_000_000;
        loop {
            let Some(h) = self.queue.front().cloned() else {
                unreachable!("the recovering waiter is queued")
            };
            if h.ticket == e.ticket {
                self.grant_front();
                return;
            }
            let dead = !self.alive(h.actor);
            match h.status {
                Status::Waiting => {
                    if dead {
                        self.queue.pop_front(); // skipped; a waiting word carries no died flag
                        continue;
                    }
                    self.grant_front();
                }
                Status::Granted { died } => {
                    if dead {
                        // Skipped; the walk goes on past the next grant too.
                        self.head_ended(died);
                        continue;
                    }
                }
                Status::Held => {
                    if dead {
                        // Revoked; the walk goes on, as for a dead grantee.
                        self.head_ended(true);
                        continue;
                    }
                    if h.lease_until.is_some_and(|u| now_ms >= u) {
                        // Lease taken over: the walk stops there.
                        self.stale.push((h.actor, h.grant.unwrap()));
                        self.head_ended(true);
                    }
                }
            }
            return;
        }
    }

    fn settle(&mut self) {
        self.apply(&Op::Tick(1_000));
        for _ in 0..2 * MAX_QUEUE + 2 {
            let Some(i) = self
                .queue
                .iter()
                .rposition(|e| e.status == Status::Waiting && self.alive(e.actor))
            else {
                break;
            };
            self.recover(i);
            self.check();
        }
        // No stall: if a live waiter is queued (someone to recover), dead tickets ahead of it
        // are gone and the first live ticket is at the head.
        let live_waiter = self
            .queue
            .iter()
            .any(|e| e.status == Status::Waiting && self.alive(e.actor));
        if let Some(h) = self.queue.front().filter(|_| live_waiter) {
            assert!(self.alive(h.actor), "dead head after settling: {h:?}");
            assert_ne!(h.status, Status::Waiting, "head not granted after settling");
        }
    }

    /// The model and the shared words agree.
    fn check(&self) {
        let st = self.o.view();
        let state_of = |t: u64| {
            let w = Word(st.slot(t).word.load(Acquire));
            (relate(w.lap(), st.lap(t)) == LapRelation::Same).then_some(w)
        };
        // Mutual exclusion: at most one slot is granted or held, whatever its lap.
        let granted = (0..u64::from(SLOTS))
            .filter(|&t| {
                Word(st.slot(t).word.load(Acquire))
                    .state()
                    .is_some_and(State::is_granted)
            })
            .count();
        assert!(granted <= 1, "{granted} slots granted or held");
        let lo = self.next.saturating_sub(u64::from(SLOTS) - 1);
        for t in lo..self.next {
            let w = state_of(t).unwrap_or_else(|| panic!("ticket {t}: slot on another lap"));
            match self.queue.iter().find(|e| e.ticket == t) {
                None => assert!(
                    w.state().unwrap().is_final(),
                    "ticket {t}: {w:?} should be final"
                ),
                Some(e) => {
                    assert_eq!(w.participant(), e.actor, "ticket {t}: owner");
                    let expect = match e.status {
                        Status::Waiting => State::Waiting,
                        Status::Granted { died } => {
                            assert_eq!(w.died(), died, "ticket {t}: died flag");
                            State::Granted
                        }
                        Status::Held => State::Held,
                    };
                    assert_eq!(w.state(), Some(expect), "ticket {t}: {w:?}, model {e:?}");
                }
            }
        }
        let w = state_of(self.next);
        match self.ready {
            Some(died) => {
                let w = w.expect("pre-granted next ticket");
                assert_eq!(
                    (w.state(), w.died()),
                    (Some(State::Ready), died),
                    "next ticket"
                );
            }
            None => assert!(
                w.is_none(),
                "ticket {} should not be pre-granted: {w:?}",
                self.next
            ),
        }
        assert_eq!(st.header().next_ticket.load(Relaxed), self.next);
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        // 256 unless PROPTEST_CASES asks for more (a longer run).
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/model_proptest.txt",
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn core_follows_the_model(ops in prop::collection::vec(op(), 1..120)) {
        let mut sim = Sim::new();
        sim.check();
        for op in &ops {
            sim.apply(op);
            sim.check();
        }
        sim.settle();
        sim.check();
    }
}
