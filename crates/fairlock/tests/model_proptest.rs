//! Property-based state-machine test of the lock algorithm (`fairlock::__internal::core`) against a
//! reference model: a FIFO queue of tickets, one holder at the head, a lease clock, a set of
//! live participants, and each participant's local observation of what it waits behind.
//!
//! Everything runs on one thread with non-blocking pieces of the real code: a taker takes a
//! ticket and runs the real `publish` (which claims a grant in advance at once, or leaves a
//! published waiter), a granted waiter runs the real `claim_granted` (with its lease, so a
//! contended leased claim commits its deadline as in production), `try_lock`, release,
//! extend, check and recovery are the real functions. Only giving up (a timeout) is a CAS
//! written here, as `wait_for_grant` does it. After every step the model and the shared words
//! (slot words, lease fields, deadlines) must agree. A 4-slot array makes slots reused every
//! few tickets. Failing cases shrink and are kept in `proptest-regressions/model_proptest.txt`.

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::Ordering::{Acquire, Relaxed};

use fairlock::__internal::core::Platform;
use fairlock::__internal::core::lease::{Lease, LeaseField};
use fairlock::__internal::core::model::ModelPlatform;
use fairlock::__internal::core::word::{LapRelation, relate};
use fairlock::__internal::core::{
    Claim, Grant, Lost, Me, OwnedState, Published, State, Taken, Tuning, Watch, Word, check,
    claim_granted, extend, publish, recover, release, take, try_lock,
};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

const SLOTS: u32 = 4;
const ACTORS: u32 = 6;
/// Never more live tickets than this, so no taker is ever lapped (that is loom's business).
const MAX_QUEUE: usize = SLOTS as usize - 1;

#[derive(Clone, Debug)]
enum Op {
    /// Actor takes a ticket and publishes it (with a lease of that many ms, if any): it holds at
    /// once if the lock was free and pre-granted, else it is a published waiter.
    Arrive(u32, Option<u64>),
    /// `try_lock`, with a lease if any.
    TryLock(u32, Option<u64>),
    /// A waiter gives its ticket up (timeout): CAS `Waiting → Abandoned`.
    GiveUp(u32),
    /// A granted waiter claims (the real claim, lease commit included); an actor whose grant
    /// was skipped while it stalled tries too and must find it lost.
    Claim(u32),
    /// The holder releases.
    Release(u32),
    /// The holder extends its lease.
    Extend(u32, u64),
    /// The holder (or a holder taken over) checks its grant.
    Check(u32),
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
    let lease = prop::option::of(1..50u64);
    prop_oneof![
        4 => (a.clone(), lease.clone()).prop_map(|(a, l)| Op::Arrive(a, l)),
        1 => (a.clone(), lease).prop_map(|(a, l)| Op::TryLock(a, l)),
        1 => a.clone().prop_map(Op::GiveUp),
        3 => a.clone().prop_map(Op::Claim),
        3 => a.clone().prop_map(Op::Release),
        1 => (a.clone(), 1..50u64).prop_map(|(a, ms)| Op::Extend(a, ms)),
        1 => a.clone().prop_map(Op::Check),
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
    /// The lease it asked for (ms).
    lease_ms: Option<u64>,
    /// The grant, once claimed.
    grant: Option<Grant>,
    /// Lease deadline in ms (leased holders only).
    lease_until: Option<u64>,
}

/// What a recovery pass ended on, in the model.
#[derive(Debug, PartialEq, Eq)]
enum Pass {
    /// Reached the recoverer's own ticket (or, for `try_lock`, the end of the queue).
    Clear,
    /// A live ticket ahead.
    Busy,
}

struct Sim {
    o: OwnedState,
    p: ModelPlatform,
    tuning: Tuning,
    /// Live (non-final) tickets in ticket order; the head one may be granted or held.
    queue: VecDeque<Entry>,
    /// The next ticket to hand out.
    next: u64,
    /// The lock word's `Q`: somebody queued, and no walk has drained the queue since.
    queued: bool,
    /// The died flag the next grant will carry (how the last granted ticket ended); while
    /// nobody queues or holds, the word's `D`.
    died_next: bool,
    /// Tickets granted by the lock word (their slots are never written).
    fast_tickets: BTreeSet<u64>,
    dead: BTreeSet<u32>,
    /// Grants taken over by a lease takeover, still in their actors' hands.
    stale: Vec<(u32, Grant)>,
    /// Leased grants skipped before their actors claimed them (they stalled past the lease).
    skipped_grants: Vec<(u32, u64, Option<u64>)>,
    now_ns: u64,
    last_token: u64,
    watches: Vec<Watch<'static>>,
    /// The model of each actor's `Watch`: the granted, leased, unclaimed ticket it watches
    /// and since when (ns).
    seen: Vec<Option<(u64, u64)>>,
}

fn me(actor: u32, lease_ms: Option<u64>) -> Me {
    Me {
        participant: actor,
        tid: 1000 + actor,
        lease_ms,
        shared: false,
        beacon: 0,
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
            queued: false,
            died_next: false,
            fast_tickets: BTreeSet::new(),
            dead: BTreeSet::new(),
            stale: Vec::new(),
            skipped_grants: Vec::new(),
            now_ns: 1_000_000_000,
            last_token: 0,
            watches: (0..ACTORS).map(|_| Watch::default()).collect(),
            seen: vec![None; ACTORS as usize],
        }
    }

    fn now_ms(&self) -> u64 {
        self.now_ns / 1_000_000
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
        self.queue.iter().any(|e| e.actor == a)
            || self.stale.iter().any(|(s, _)| *s == a)
            || self.skipped_grants.iter().any(|(s, _, _)| *s == a)
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

    /// The model's `advance` from the head: grant the first live ticket, or drain the queue
    /// (the word free again, `D` = the died flag).
    fn grant_front(&mut self) {
        let died = self.died_next;
        match self.queue.front_mut() {
            Some(e) => {
                if e.status == Status::Waiting {
                    e.status = Status::Granted { died };
                }
            }
            None => self.queued = false,
        }
    }

    /// Whether the lock word is free: nobody holds it fast, nobody queues.
    fn word_free(&self) -> bool {
        !self.queued && self.queue.is_empty()
    }

    /// Actor `a` takes the lock from a free word, through the real `take` and `publish`: the
    /// fast way without a lease; with one, a ticket granted through its slot (two tickets if
    /// the word carried a death's news: a fast one passed on to a queued one).
    fn take_free(&mut self, a: u32, lease: Option<u64>) {
        let died = self.died_next;
        let taken = {
            let st = self.o.view();
            take(&st, &self.p, &me(a, lease))
        };
        let t = self.next;
        match taken {
            Taken::Fast(g) => {
                assert!(lease.is_none(), "a leased grant from the word: {g:?}");
                assert_eq!((g.ticket, g.died, g.leased, g.fast), (t, died, false, true));
                self.next += 1;
                self.died_next = false;
                self.fast_tickets.insert(t);
                self.hold(a, g, None);
            }
            Taken::Queued(q, _) => {
                assert!(lease.is_some(), "queued from a free word without a lease");
                if died {
                    assert_eq!(q, t + 1, "the fast ticket passed on");
                    self.fast_tickets.insert(t);
                } else {
                    assert_eq!(q, t);
                }
                self.next = q + 1;
                self.queued = true;
                self.died_next = false;
                let published = {
                    let st = self.o.view();
                    let mut watch = Watch::default();
                    let deadline = Some(self.p.now_ns());
                    publish(
                        &st,
                        &self.p,
                        q,
                        &me(a, lease),
                        deadline,
                        &self.tuning,
                        &mut watch,
                    )
                    .expect("publish")
                };
                match published {
                    Published::Held(g) => {
                        assert_eq!((g.ticket, g.died, g.leased), (q, died, true));
                        self.hold(a, g, lease);
                    }
                    _ => panic!("a leased taker of a free lock must hold at once"),
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

    /// A holder entry for grant `g` taken by actor `a`.
    fn hold(&mut self, a: u32, g: Grant, lease: Option<u64>) {
        self.new_grant(&g);
        let until = lease.map(|ms| self.now_ms() + ms);
        self.queue.push_back(Entry {
            ticket: g.ticket,
            actor: a,
            status: Status::Held,
            lease_ms: lease,
            grant: Some(g),
            lease_until: until,
        });
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Arrive(a, lease) => {
                if self.busy(a) || !self.alive(a) || !self.room() {
                    return;
                }
                if self.word_free() {
                    self.take_free(a, lease);
                    return;
                }
                let t = self.next;
                self.next += 1;
                self.queued = true;
                let published = {
                    let st = self.o.view();
                    let taken = match take(&st, &self.p, &me(a, lease)) {
                        Taken::Queued(t, _) => t,
                        other => panic!("held or queued, yet {other:?}"),
                    };
                    assert_eq!(taken, t);
                    let mut watch = Watch::default();
                    let deadline = Some(self.p.now_ns());
                    publish(
                        &st,
                        &self.p,
                        t,
                        &me(a, lease),
                        deadline,
                        &self.tuning,
                        &mut watch,
                    )
                    .expect("publish")
                };
                self.watches[a as usize] = Watch::default();
                self.seen[a as usize] = None;
                match published {
                    Published::Waiting(w) => {
                        assert_eq!(w.leased(), lease.is_some());
                        self.queue.push_back(Entry {
                            ticket: t,
                            actor: a,
                            status: Status::Waiting,
                            lease_ms: lease,
                            grant: None,
                            lease_until: None,
                        });
                    }
                    _ => panic!("arrive: a queued ticket must wait"),
                }
            }
            Op::TryLock(a, lease) => {
                if self.busy(a) || !self.alive(a) || !self.room() {
                    return;
                }
                // The model first: try_lock recovers (as a fresh observer behind the whole
                // queue) unless the word is free, then takes the lock if that left it free.
                let mut fresh = None;
                let free = self.word_free() || self.model_recover(None, &mut fresh) == Pass::Clear;
                let died = self.died_next;
                let next = self.next;
                let got = {
                    let st = self.o.view();
                    try_lock(&st, &self.p, &me(a, lease), &self.tuning).expect("consistent")
                };
                match (free, got) {
                    (true, Some(g)) => {
                        assert!(self.word_free(), "model: recovered but not free");
                        // Leased with news: a fast ticket passed on to a queued one.
                        let t = if lease.is_some() && died {
                            next + 1
                        } else {
                            next
                        };
                        assert_eq!(
                            (g.ticket, g.died, g.leased, g.fast),
                            (t, died, lease.is_some(), lease.is_none())
                        );
                        if t != next || g.fast {
                            self.fast_tickets.insert(next);
                        }
                        self.next = t + 1;
                        self.queued = lease.is_some();
                        self.died_next = false;
                        self.hold(a, g, lease);
                    }
                    (false, None) => {}
                    (p, g) => panic!("try_lock: model free {p:?}, lock gave {g:?}"),
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
                if let Some(k) = self.skipped_grants.iter().position(|(s, _, _)| *s == a) {
                    let (_, t, lease) = self.skipped_grants.remove(k);
                    let st = self.o.view();
                    let r = claim_granted(&st, &self.p, t, &me(a, lease)).expect("consistent");
                    assert_eq!(r, Claim::Lost, "a skipped grant must not be claimable");
                    return;
                }
                let Some(i) = self.pos(a) else { return };
                let Status::Granted { died } = self.queue[i].status else {
                    return;
                };
                if !self.alive(a) {
                    return;
                }
                let (t, lease) = (self.queue[i].ticket, self.queue[i].lease_ms);
                let g = {
                    let st = self.o.view();
                    match claim_granted(&st, &self.p, t, &me(a, lease)) {
                        Ok(Claim::Held(g)) => g,
                        other => panic!("claim of ticket {t}: {other:?}"),
                    }
                };
                assert_eq!((g.ticket, g.died, g.leased), (t, died, lease.is_some()));
                self.new_grant(&g);
                let until = lease.map(|ms| self.now_ms() + ms);
                let e = &mut self.queue[i];
                e.status = Status::Held;
                e.grant = Some(g);
                e.lease_until = until;
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
                    assert_eq!(extend(&st, &self.p, g.ticket, a, ms), Err(Lost));
                    return;
                }
                let Some(0) = self.pos(a) else { return };
                let alive = self.alive(a);
                let now_ms = self.now_ms();
                let e = &mut self.queue[0];
                if !alive || e.status != Status::Held || e.lease_until.is_none() {
                    return;
                }
                let g = e.grant.unwrap();
                let st = self.o.view();
                assert_eq!(extend(&st, &self.p, g.ticket, a, ms), Ok(()));
                e.lease_until = Some(now_ms + ms);
            }
            Op::Check(a) => {
                let st = self.o.view();
                if let Some((_, g)) = self.stale.iter().find(|(s, _)| *s == a) {
                    assert_eq!(check(&st, &self.p, g, a), Err(Lost));
                    return;
                }
                if let Some(0) = self.pos(a)
                    && self.alive(a)
                    && self.queue[0].status == Status::Held
                {
                    let g = self.queue[0].grant.unwrap();
                    assert_eq!(check(&st, &self.p, &g, a), Ok(()));
                }
            }
            Op::Crash(a) => {
                self.p.set_dead(a, true);
                self.dead.insert(a);
                self.stale.retain(|(s, _)| *s != a);
                self.skipped_grants.retain(|(s, _, _)| *s != a);
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
        let ahead = {
            let st = self.o.view();
            recover(
                &st,
                &self.p,
                e.ticket,
                &mut self.watches[e.actor as usize],
                &self.tuning,
            )
        };
        let mut seen = self.seen[e.actor as usize].take();
        let pass = self.model_recover(Some(e.ticket), &mut seen);
        self.seen[e.actor as usize] = seen;
        let real = match ahead {
            fairlock::__internal::core::Ahead::Clear => Pass::Clear,
            fairlock::__internal::core::Ahead::Busy => Pass::Busy,
            fairlock::__internal::core::Ahead::Unclaimed(ns) => {
                panic!("no unclaimed pre-grant here ({ns})")
            }
        };
        assert_eq!(real, pass, "recover by ticket {}", e.ticket);
    }

    /// The model of one `recover` pass by the owner of ticket `me` (`None`: `try_lock`, behind
    /// everything), whose watch saw `seen`.
    fn model_recover(&mut self, me: Option<u64>, seen: &mut Option<(u64, u64)>) -> Pass {
        let now_ms = self.now_ms();
        loop {
            let Some(h) = self.queue.front().cloned() else {
                self.grant_front();
                return Pass::Clear;
            };
            if Some(h.ticket) == me {
                self.grant_front();
                return Pass::Clear;
            }
            let dead = !self.alive(h.actor);
            match h.status {
                Status::Waiting => {
                    if dead {
                        self.queue.pop_front(); // skipped; a waiting word carries no died flag
                        continue;
                    }
                    self.grant_front();
                    return Pass::Busy;
                }
                Status::Granted { died } => {
                    if dead {
                        // Skipped; the walk goes on past the next grant too.
                        self.head_ended(died);
                        continue;
                    }
                    let Some(ms) = h.lease_ms else {
                        return Pass::Busy;
                    };
                    // A leased grantee that does not claim is timed with its lease.
                    if seen.is_none_or(|(t, _)| t != h.ticket) {
                        *seen = Some((h.ticket, self.now_ns));
                    }
                    let since = seen.unwrap().1;
                    if self.now_ns - since < ms * 1_000_000 {
                        return Pass::Busy;
                    }
                    self.skipped_grants.push((h.actor, h.ticket, h.lease_ms));
                    self.head_ended(died);
                }
                Status::Held => {
                    if dead {
                        // Revoked; the walk goes on, as for a dead grantee.
                        self.head_ended(true);
                        continue;
                    }
                    if h.lease_until.is_none_or(|u| now_ms < u) {
                        return Pass::Busy;
                    }
                    // Lease taken over; the walk goes on.
                    self.stale.push((h.actor, h.grant.unwrap()));
                    self.head_ended(true);
                }
            }
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
        // Mutual exclusion: at most one slot is granted or held, whatever its lap, or the
        // lock word's fast holder.
        let lw = st.lock_word(Acquire);
        let granted = (0..u64::from(SLOTS))
            .filter(|&t| {
                Word(st.slot(t).word.load(Acquire))
                    .state()
                    .is_some_and(State::is_granted)
            })
            .count()
            + usize::from(lw.held());
        assert!(granted <= 1, "{granted} holders or grantees ({lw:?})");
        // The lock word and the model agree.
        let front_fast = self
            .queue
            .front()
            .filter(|e| self.fast_tickets.contains(&e.ticket));
        assert_eq!(lw.held(), front_fast.is_some(), "fast holder: {lw:?}");
        if let Some(e) = front_fast {
            assert_eq!(lw.holder(), e.actor, "fast holder's entry");
        }
        assert_eq!(lw.queued(), self.queued, "queued: {lw:?}");
        if !lw.queued() && !lw.held() {
            assert_eq!(lw.died(), self.died_next, "D: {lw:?}");
        }
        let lo = self.next.saturating_sub(u64::from(SLOTS) - 1);
        for t in lo..self.next {
            if self.fast_tickets.contains(&t) {
                continue; // never in a slot
            }
            let w = state_of(t).unwrap_or_else(|| panic!("ticket {t}: slot on another lap"));
            match self.queue.iter().find(|e| e.ticket == t) {
                None => assert!(
                    w.state().unwrap().is_final(),
                    "ticket {t}: {w:?} should be final"
                ),
                Some(e) => {
                    assert_eq!(w.participant(), e.actor, "ticket {t}: owner");
                    assert_eq!(w.leased(), e.lease_ms.is_some(), "ticket {t}: leased flag");
                    let expect = match e.status {
                        Status::Waiting => State::Waiting,
                        Status::Granted { died } => {
                            assert_eq!(w.died(), died, "ticket {t}: died flag");
                            State::Granted
                        }
                        Status::Held => State::Held,
                    };
                    assert_eq!(w.state(), Some(expect), "ticket {t}: {w:?}, model {e:?}");
                    if let Some(ms) = e.lease_ms {
                        let f = LeaseField(st.slot(t).lease.load(Acquire));
                        match e.status {
                            Status::Held => {
                                assert_eq!(f.lease(), Lease::Leased, "ticket {t}: {f:?}");
                                let entry = st.participant(e.actor).unwrap();
                                assert_eq!(
                                    Some(entry.lease_deadline_ms.load(Relaxed)),
                                    e.lease_until,
                                    "ticket {t}: deadline"
                                );
                            }
                            _ => assert_eq!(f.lease(), Lease::Pending(ms), "ticket {t}: {f:?}"),
                        }
                    }
                }
            }
        }
        // Nothing is granted in advance before it is taken.
        let w = state_of(self.next);
        assert!(w.is_none(), "ticket {} is not taken yet: {w:?}", self.next);
        assert_eq!(st.next_ticket(), self.next);
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
