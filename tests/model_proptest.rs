//! Property-based state-machine test of the lock algorithm (`fairlock::__internal::core`) against a
//! reference model: a FIFO queue of tickets, one holder at the head, a lease clock, a set of
//! live participants, and each participant's local observation of what it waits behind.
//!
//! Everything runs on one thread with non-blocking pieces of the real code: a taker takes a
//! ticket and runs one look of the real `publish` (which claims a grant in advance at once,
//! leaves a published waiter, or — its slot still used by an earlier lap — leaves it *lapped*,
//! to look again later or give up); a granted waiter runs the real `claim_granted` (with its
//! lease, so a contended leased claim commits its deadline as in production); `try_lock`, a
//! zero timeout, a polling loop of timed-out takers, release, extend, check and recovery are
//! the real functions. Only giving up a published ticket (a timeout) is a CAS written here, as
//! `wait_for_grant` does it. After every step the model and the shared words (slot words, lease
//! fields, deadlines, the lock word) must agree.
//!
//! Arrays of 2 and 4 slots make slots reused every few tickets and most takers lapped; a
//! polling loop (`Storm`) gives up run after run of tickets behind a holder, interleaved with
//! live lapped waiters. A ticket given up is passed by the next walk that reaches it, at once:
//! the model never moves the clock for it, so a walk that pre-granted it instead (and waited a
//! grace for a claim that never comes) shows as a slot word the model does not expect.
//! `Idle` makes every live actor give up or finish; the lock must then be free at once.
//! Failing cases shrink and are kept in `proptest-regressions/model_proptest.txt`.

use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::Ordering::{Acquire, Relaxed};

use fairlock::__internal::core::Platform;
use fairlock::__internal::core::model::ModelPlatform;
use fairlock::__internal::core::state::lease::{Deadline, Lease, LeaseField};
use fairlock::__internal::core::state::slot_word::{LapRelation, relate};
use fairlock::__internal::core::{
    Claim, Grant, LappedGiveUp, Look, Lost, Me, OwnedState, Published, State, Taken, Tuning,
    WaitError, Watch, Word, check, claim_granted, extend, give_up_lapped, lock, lock_queued,
    publish, publish_once, recover, release, take, try_lock,
};
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

const ACTORS: u32 = 6;
/// Bits per slot for given-up laps (`given_up::WINDOW`): a ticket is taken only if its lap
/// has one.
const WINDOW: usize = 20;

#[derive(Clone, Debug)]
enum Op {
    /// Actor takes a ticket and looks at its slot once (with a lease of that many ms, if any):
    /// it holds at once if the lock was free and pre-granted, is a published waiter, or is
    /// lapped (its slot still used by an earlier ticket).
    Arrive(u32, Option<u64>),
    /// `try_lock`, with a lease if any.
    TryLock(u32, Option<u64>),
    /// `lock` with a deadline already past: one try, no ticket.
    ZeroTimeout(u32),
    /// A waiter gives its ticket up (timeout): a published one by CAS `Waiting → Abandoned`,
    /// a lapped one through the real give-up (its bit); a pre-granted one finds its grant and
    /// claims it.
    GiveUp(u32),
    /// A lapped taker looks at its slot again (the real `publish_once`).
    Poll(u32),
    /// A polling loop behind a live holder: that many takers (actor `a`, one after another)
    /// take a ticket and give it up at once (the real `lock_queued` with a deadline already
    /// past), or find no room and take none.
    Storm(u32, u8),
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
    /// Every live actor gives up what it waits for, or claims and releases what it was
    /// granted: then the lock must be free, the clock unmoved.
    Idle,
}

fn op() -> impl Strategy<Value = Op> {
    let a = 0..ACTORS;
    let lease = prop::option::of(1..50u64);
    prop_oneof![
        4 => (a.clone(), lease.clone()).prop_map(|(a, l)| Op::Arrive(a, l)),
        1 => (a.clone(), lease).prop_map(|(a, l)| Op::TryLock(a, l)),
        1 => a.clone().prop_map(Op::ZeroTimeout),
        2 => a.clone().prop_map(Op::GiveUp),
        2 => a.clone().prop_map(Op::Poll),
        1 => (a.clone(), 1..30u8).prop_map(|(a, k)| Op::Storm(a, k)),
        3 => a.clone().prop_map(Op::Claim),
        3 => a.clone().prop_map(Op::Release),
        1 => (a.clone(), 1..50u64).prop_map(|(a, ms)| Op::Extend(a, ms)),
        1 => a.clone().prop_map(Op::Check),
        1 => a.clone().prop_map(Op::Crash),
        2 => (0..60u64).prop_map(Op::Tick),
        3 => a.clone().prop_map(Op::Recover),
        1 => a.clone().prop_map(Op::StaleRelease),
        1 => Just(Op::Settle),
        1 => Just(Op::Idle),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    /// Taken, not published: the slot is still used by an earlier ticket.
    Lapped,
    /// Taken, not published, and granted in advance (the walk reached it).
    Ready {
        died: bool,
    },
    Waiting,
    Granted {
        died: bool,
    },
    Held,
    /// Lapped, then given up: the next walk that reaches it passes it at once. Its actor has
    /// moved on.
    GaveUp,
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

struct Sim {
    o: OwnedState,
    p: ModelPlatform,
    tuning: Tuning,
    /// `N`.
    slots: u64,
    /// Non-final tickets in ticket order; the head one may be granted or held.
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
    /// Pre-grants skipped before their (lapped) takers looked again (unclaimed for the grace).
    skipped_lapped: Vec<(u32, u64, Option<u64>)>,
    now_ns: u64,
    last_token: u64,
    watches: Vec<Watch<'static>>,
    /// The model of each actor's `Watch`: the unclaimed ticket it watches (a leased grant, a
    /// pre-grant) and since when (ns).
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

/// What a recovery pass ended on, in the model.
#[derive(Debug, PartialEq, Eq)]
enum Pass {
    /// Reached the recoverer's own ticket (or, for `try_lock`, the end of the queue).
    Clear,
    /// A live ticket ahead.
    Busy,
    /// A pre-grant ahead that its taker has not claimed yet (within the grace).
    Unclaimed,
}

impl Sim {
    fn new(slots: u32) -> Sim {
        Sim {
            o: OwnedState::new(slots, ACTORS + 2),
            p: ModelPlatform::new(0),
            tuning: Tuning {
                grace_ns: 10_000_000,
                ..Tuning::default()
            },
            slots: u64::from(slots),
            queue: VecDeque::new(),
            next: 0,
            queued: false,
            died_next: false,
            fast_tickets: BTreeSet::new(),
            dead: BTreeSet::new(),
            stale: Vec::new(),
            skipped_grants: Vec::new(),
            skipped_lapped: Vec::new(),
            now_ns: 1_000_000_000,
            last_token: 0,
            watches: (0..ACTORS).map(|_| Watch::default()).collect(),
            seen: vec![None; ACTORS as usize],
        }
    }

    fn now_ms(&self) -> u64 {
        self.now_ns / 1_000_000
    }

    fn busy(&self, a: u32) -> bool {
        self.queue
            .iter()
            .any(|e| e.actor == a && e.status != Status::GaveUp)
            || self.stale.iter().any(|(s, _)| *s == a)
            || self.skipped_grants.iter().any(|(s, _, _)| *s == a)
            || self.skipped_lapped.iter().any(|(s, _, _)| *s == a)
    }

    fn alive(&self, a: u32) -> bool {
        !self.dead.contains(&a)
    }

    fn pos(&self, a: u32) -> Option<usize> {
        self.queue
            .iter()
            .position(|e| e.actor == a && e.status != Status::GaveUp)
    }

    /// Whether ticket `t`'s slot is still used by an earlier queued ticket (of any status: an
    /// unpublished one leaves the slot's word further back still): its taker is lapped.
    fn lapped(&self, t: u64) -> bool {
        self.queue.iter().any(|e| {
            e.ticket < t
                && (t - e.ticket).is_multiple_of(self.slots)
                && !self.fast_tickets.contains(&e.ticket)
        })
    }

    /// How many bits of the given-up word of slot `t % N` the tickets taken and not in the
    /// slot's word yet (lapped or given up) use: all of them but a run of given-up ones right
    /// after the word's (absorbed). A ticket is taken only while fewer than `WINDOW` are used.
    fn pending_in_slot(&self, t: u64) -> usize {
        let pending: Vec<Status> = self
            .queue
            .iter()
            .filter(|e| (t - e.ticket).is_multiple_of(self.slots))
            .filter(|e| matches!(e.status, Status::Lapped | Status::GaveUp))
            .map(|e| e.status)
            .collect();
        let absorbed = pending.iter().take_while(|s| **s == Status::GaveUp).count();
        pending.len() - absorbed
    }

    fn new_grant(&mut self, g: &Grant) {
        assert!(
            g.token() > self.last_token,
            "tokens must rise: {g:?} after {}",
            self.last_token
        );
        self.last_token = g.token();
    }

    /// The model's `advance` from the head: pass given-up tickets, grant the first live one
    /// (a published waiter `Granted`, an unpublished one `Ready`), or drain the queue (the
    /// word free again, `D` = the died flag).
    fn grant_front(&mut self) {
        let died = self.died_next;
        loop {
            // A lapped ticket whose taker died leaving its entry: passed at once too.
            let dead_lapped = self.queue.front().is_some_and(|e| {
                e.status == Status::Lapped
                    && !self.alive(e.actor)
                    && self.registered(e.ticket, e.actor)
            });
            match self.queue.front_mut() {
                Some(e) if e.status == Status::GaveUp || dead_lapped => {
                    // Passed at once: `Skipped` carrying the died flag on.
                    self.queue.pop_front();
                }
                Some(e) => {
                    match e.status {
                        Status::Waiting => e.status = Status::Granted { died },
                        Status::Lapped => e.status = Status::Ready { died },
                        _ => {}
                    }
                    return;
                }
                None => {
                    self.queued = false;
                    return;
                }
            }
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
            other => panic!("a free word, yet {other:?}"),
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

    /// Whether a try's recovery could come to a pre-grant not yet claimed: `try_lock` then
    /// waits for its taker (which claims within nanoseconds in real life, or is skipped after
    /// the grace) on a clock that never moves here. Tries are made only without such tickets.
    fn unclaimed_ahead(&self) -> bool {
        self.queue
            .iter()
            .any(|e| matches!(e.status, Status::Lapped | Status::Ready { .. }))
    }

    /// One look at its slot by actor `a`, whose entry at `i` is lapped or pre-granted.
    fn poll(&mut self, i: usize) {
        let e = self.queue[i].clone();
        let look = {
            let st = self.o.view();
            publish_once(
                &st,
                &self.p,
                e.ticket,
                &me(e.actor, e.lease_ms),
                None,
                &self.tuning,
                &mut self.watches[e.actor as usize],
            )
            .expect("consistent")
        };
        match (e.status, look) {
            (Status::Lapped, Look::Lapped) => {
                assert!(
                    self.lapped(e.ticket),
                    "ticket {}: lapped, model says free",
                    e.ticket
                );
            }
            (Status::Lapped, Look::Done(Published::Waiting(w))) => {
                assert!(
                    !self.lapped(e.ticket),
                    "ticket {}: published while lapped",
                    e.ticket
                );
                assert_eq!(w.leased(), e.lease_ms.is_some());
                self.queue[i].status = Status::Waiting;
            }
            (Status::Ready { died }, Look::Done(Published::Held(g))) => {
                assert_eq!(
                    (g.ticket, g.died, g.leased),
                    (e.ticket, died, e.lease_ms.is_some())
                );
                self.new_grant(&g);
                let until = e.lease_ms.map(|ms| self.now_ms() + ms);
                let x = &mut self.queue[i];
                x.status = Status::Held;
                x.grant = Some(g);
                x.lease_until = until;
            }
            (status, look) => panic!(
                "ticket {}: model {status:?}, publish said {}",
                e.ticket,
                match look {
                    Look::Lapped => "lapped".to_string(),
                    Look::Done(Published::Waiting(w)) => format!("waiting {w:?}"),
                    Look::Done(Published::Held(g)) => format!("held {g:?}"),
                    Look::Done(Published::Skipped) => "skipped".to_string(),
                }
            ),
        }
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Arrive(a, lease) => {
                if self.busy(a) || !self.alive(a) || self.queue.len() >= 3 * WINDOW {
                    return;
                }
                if self.word_free() {
                    self.take_free(a, lease);
                    return;
                }
                let t = self.next;
                let taken = {
                    let st = self.o.view();
                    take(&st, &self.p, &me(a, lease))
                };
                match taken {
                    Taken::Queued(q, _) => assert_eq!(q, t),
                    Taken::Fast(g) => panic!("held or queued, yet {g:?}"),
                    #[allow(unreachable_patterns)]
                    _ => {
                        assert!(
                            self.pending_in_slot(t) >= WINDOW,
                            "no room for ticket {t} with {} pending in its slot",
                            self.pending_in_slot(t)
                        );
                        return;
                    }
                }
                assert!(
                    self.pending_in_slot(t) < WINDOW,
                    "ticket {t} taken with {} pending in its slot",
                    self.pending_in_slot(t)
                );
                self.next += 1;
                self.queued = true;
                self.watches[a as usize] = Watch::default();
                self.seen[a as usize] = None;
                self.queue.push_back(Entry {
                    ticket: t,
                    actor: a,
                    status: Status::Lapped,
                    lease_ms: lease,
                    grant: None,
                    lease_until: None,
                });
                // Behind a holder or a queue: it publishes, or it is lapped.
                let i = self.queue.len() - 1;
                self.poll(i);
            }
            Op::TryLock(a, lease) => {
                if self.busy(a) || !self.alive(a) || self.unclaimed_ahead() {
                    return;
                }
                self.try_lock(a, lease, false);
            }
            Op::ZeroTimeout(a) => {
                if self.busy(a) || !self.alive(a) || self.unclaimed_ahead() {
                    return;
                }
                self.try_lock(a, None, true);
            }
            Op::GiveUp(a) => {
                let Some(i) = self.pos(a) else { return };
                if !self.alive(a) {
                    return;
                }
                let t = self.queue[i].ticket;
                match self.queue[i].status {
                    Status::Waiting => {
                        let st = self.o.view();
                        let slot = st.slot(t);
                        let w = Word(slot.word.load(Acquire));
                        assert_eq!(w.state(), Some(State::Waiting), "ticket {t}");
                        slot.word
                            .compare_exchange(
                                w.0,
                                w.with_state(State::Abandoned).0,
                                Acquire,
                                Acquire,
                            )
                            .expect("abandon a waiting ticket");
                        self.queue.remove(i);
                    }
                    Status::Lapped => {
                        let r = {
                            let st = self.o.view();
                            give_up_lapped(&st, &self.p, t, a)
                        };
                        assert_eq!(r, LappedGiveUp::Gone, "ticket {t}");
                        self.queue[i].status = Status::GaveUp;
                    }
                    // The grant raced the timeout and won: the taker claims it.
                    Status::Ready { .. } => self.poll(i),
                    _ => {}
                }
            }
            Op::Poll(a) => {
                if let Some(k) = self.skipped_lapped.iter().position(|(s, _, _)| *s == a) {
                    let (_, t, lease) = self.skipped_lapped.remove(k);
                    let st = self.o.view();
                    let mut watch = Watch::default();
                    let look = publish_once(
                        &st,
                        &self.p,
                        t,
                        &me(a, lease),
                        None,
                        &self.tuning,
                        &mut watch,
                    )
                    .expect("consistent");
                    assert!(
                        matches!(look, Look::Done(Published::Skipped)),
                        "a skipped pre-grant must not be claimable"
                    );
                    return;
                }
                let Some(i) = self.pos(a) else { return };
                if !self.alive(a)
                    || !matches!(self.queue[i].status, Status::Lapped | Status::Ready { .. })
                {
                    return;
                }
                self.poll(i);
            }
            Op::Storm(a, k) => {
                // Behind a live holder without a lease (nothing a recovery could move).
                let Some(h) = self.queue.front() else { return };
                if self.busy(a)
                    || !self.alive(a)
                    || h.status != Status::Held
                    || !self.alive(h.actor)
                    || h.lease_ms.is_some()
                {
                    return;
                }
                for _ in 0..k {
                    let t = self.next;
                    let lapped = self.lapped(t);
                    let r = {
                        let st = self.o.view();
                        lock_queued(
                            &st,
                            &self.p,
                            &me(a, None),
                            Some(0),
                            &self.tuning,
                            None,
                            Watch::default(),
                        )
                    };
                    assert_eq!(r, Err(WaitError::Timeout), "behind a live holder");
                    let st = self.o.view();
                    if st.next_ticket() == t {
                        assert!(
                            self.pending_in_slot(t) >= WINDOW,
                            "no room for ticket {t} with {} pending in its slot",
                            self.pending_in_slot(t)
                        );
                        continue;
                    }
                    assert!(
                        self.pending_in_slot(t) < WINDOW,
                        "ticket {t} taken with {} pending in its slot",
                        self.pending_in_slot(t)
                    );
                    self.next += 1;
                    self.queued = true;
                    if lapped {
                        // Given up where the walk finds it.
                        self.queue.push_back(Entry {
                            ticket: t,
                            actor: a,
                            status: Status::GaveUp,
                            lease_ms: None,
                            grant: None,
                            lease_until: None,
                        });
                    }
                    // Else published and abandoned: final at once.
                }
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
                self.release_front(a);
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
                self.skipped_lapped.retain(|(s, _, _)| *s != a);
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
            Op::Idle => self.idle(),
        }
    }

    /// The holder at the head (actor `a`) releases.
    fn release_front(&mut self, a: u32) {
        let g = self.queue[0].grant.unwrap();
        let r = {
            let st = self.o.view();
            release(&st, &self.p, &g, a)
        };
        assert_eq!(r, Ok(()));
        self.head_ended(false);
    }

    /// `try_lock` by actor `a` (or `lock` with a deadline already past, which makes the same
    /// one try): the model first — it recovers (as a fresh observer behind the whole queue)
    /// unless the word is free, then takes the lock if that left it free.
    fn try_lock(&mut self, a: u32, lease: Option<u64>, zero_timeout: bool) {
        let mut fresh = None;
        let free = self.word_free() || self.model_recover(None, &mut fresh) == Pass::Clear;
        let died = self.died_next;
        let next = self.next;
        let got = {
            let st = self.o.view();
            if zero_timeout {
                match lock(&st, &self.p, &me(a, lease), Some(0), &self.tuning) {
                    Ok(g) => Some(g),
                    Err(WaitError::Timeout) => None,
                    Err(e) => panic!("zero timeout: {e:?}"),
                }
            } else {
                try_lock(&st, &self.p, &me(a, lease), &self.tuning).expect("consistent")
            }
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
            (false, None) => {
                assert_eq!(self.next, next);
            }
            (p, g) => panic!("try: model free {p:?}, lock gave {g:?}"),
        }
        let st = self.o.view();
        assert_eq!(
            st.next_ticket(),
            self.next,
            "a try takes no ticket it does not keep"
        );
    }

    /// Real `recover` by the waiter at queue position `i`, and the model's prediction of it
    /// (which it returns).
    fn recover(&mut self, i: usize) -> Pass {
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
            fairlock::__internal::core::Ahead::Unclaimed(_) => Pass::Unclaimed,
        };
        assert_eq!(real, pass, "recover by ticket {}", e.ticket);
        pass
    }

    /// Whether the lapped entry actor `a` left in ticket `t`'s slot names `t` (so a walk that
    /// finds `a` dead passes the ticket at once).
    fn registered(&self, t: u64, a: u32) -> bool {
        let st = self.o.view();
        let ours = Word::new(st.lap(t), a, State::Waiting, false);
        st.slot(t).lapped.iter().any(|e| e.load(Relaxed) == ours.0)
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
                Status::Lapped | Status::GaveUp => unreachable!("the head is granted or passed"),
                Status::Ready { died } => {
                    // A pre-grant nobody claimed: passed at once if its taker's lapped entry
                    // names a dead process, else after the grace.
                    if !(dead && self.registered(h.ticket, h.actor)) {
                        if seen.is_none_or(|(t, _)| t != h.ticket) {
                            *seen = Some((h.ticket, self.now_ns));
                        }
                        if self.now_ns - seen.unwrap().1 < self.tuning.grace_ns {
                            return Pass::Unclaimed;
                        }
                        if !dead {
                            self.skipped_lapped.push((h.actor, h.ticket, h.lease_ms));
                        }
                    }
                    self.head_ended(died);
                }
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
        for _ in 0..4 * self.queue.len() + 4 {
            let Some(i) = self
                .queue
                .iter()
                .rposition(|e| e.status == Status::Waiting && self.alive(e.actor))
            else {
                break;
            };
            if self.recover(i) == Pass::Unclaimed {
                // A pre-grant its taker (dead, or stalled) does not claim: it is skipped once
                // the grace has passed since the recoverer first saw it.
                self.apply(&Op::Tick(self.tuning.grace_ns / 1_000_000 + 1));
            }
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

    /// Every live actor stops waiting: a published or lapped waiter gives up, a grantee (or a
    /// pre-granted taker) claims and, like a holder, releases. The clock does not move: with
    /// only the dead and the given-up left, the lock must be free at once — the queue passes
    /// them without a grace — or held by a dead holder, which a `try_lock` then recovers.
    fn idle(&mut self) {
        for _ in 0..4 * (self.queue.len() + 1) {
            let Some(i) = self
                .queue
                .iter()
                .position(|e| self.alive(e.actor) && e.status != Status::GaveUp)
            else {
                break;
            };
            let a = self.queue[i].actor;
            match self.queue[i].status {
                Status::Waiting | Status::Lapped | Status::Ready { .. } => {
                    self.apply(&Op::GiveUp(a));
                }
                Status::Granted { .. } => self.apply(&Op::Claim(a)),
                Status::Held if i == 0 => self.release_front(a),
                _ => break,
            }
            self.check();
        }
        assert!(
            self.queue
                .iter()
                .all(|e| !self.alive(e.actor) || e.status == Status::GaveUp),
            "live tickets left: {:?}",
            self.queue
        );
        // Only the dead may still hold or wait (they are recovered at the next look), and a
        // given-up ticket is never among what is left at the head.
        assert!(
            self.queue
                .front()
                .is_none_or(|e| e.status != Status::GaveUp),
            "a given-up ticket at the head"
        );
        if self.queue.is_empty() {
            let st = self.o.view();
            let lw = st.lock_word(Acquire);
            assert!(!lw.held() && !lw.queued(), "idle, yet {lw:?}");
        }
        // A new actor gets the lock at once (the dead recovered by its try), no clock moved.
        if let Some(a) = (0..ACTORS).find(|&a| self.alive(a) && !self.busy(a))
            && !self.unclaimed_ahead()
        {
            self.try_lock(a, None, false);
            assert!(self.pos(a).is_some(), "idle lock not taken by actor {a}");
            self.release_front(a);
        }
    }

    /// The model and the shared words agree.
    fn check(&self) {
        let st = self.o.view();
        let n = self.slots;
        let state_of = |t: u64| {
            let w = Word(st.slot(t).word.load(Acquire));
            (relate(w.lap(), st.lap(t)) == LapRelation::Same).then_some(w)
        };
        // Mutual exclusion: at most one slot is granted or held, whatever its lap, or the
        // lock word's fast holder.
        let lw = st.lock_word(Acquire);
        let granted = (0..n)
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
        // Each slot's word shows the latest ticket of that slot that reached it: a queued one
        // in the state the model says, or a final one.
        for s in 0..n {
            let latest = (0..self.next)
                .rev()
                .filter(|t| t % n == s && !self.fast_tickets.contains(t))
                .find(|t| {
                    self.queue
                        .iter()
                        .find(|e| e.ticket == *t)
                        .is_none_or(|e| !matches!(e.status, Status::Lapped | Status::GaveUp))
                });
            let Some(t) = latest else { continue };
            let w = state_of(t).unwrap_or_else(|| {
                panic!(
                    "ticket {t}: slot shows {:?}",
                    Word(st.slot(t).word.load(Acquire))
                )
            });
            match self.queue.iter().find(|e| e.ticket == t) {
                None => assert!(
                    w.state().unwrap().is_final(),
                    "ticket {t}: {w:?} should be final"
                ),
                Some(e) => {
                    let expect = match e.status {
                        Status::Waiting => State::Waiting,
                        Status::Granted { died } => {
                            assert_eq!(w.died(), died, "ticket {t}: died flag");
                            State::Granted
                        }
                        Status::Ready { died } => {
                            assert_eq!(w.died(), died, "ticket {t}: died flag");
                            State::Ready
                        }
                        Status::Held => State::Held,
                        Status::Lapped | Status::GaveUp => unreachable!(),
                    };
                    assert_eq!(w.state(), Some(expect), "ticket {t}: {w:?}, model {e:?}");
                    if expect != State::Ready {
                        assert_eq!(w.participant(), e.actor, "ticket {t}: owner");
                        assert_eq!(w.leased(), e.lease_ms.is_some(), "ticket {t}: leased flag");
                    }
                    if let Some(ms) = e.lease_ms
                        && expect != State::Ready
                    {
                        let f = LeaseField(st.slot(t).lease.load(Acquire));
                        match e.status {
                            Status::Held => {
                                assert_eq!(f.lease(), Lease::Leased, "ticket {t}: {f:?}");
                                let d = Deadline(st.slot(t).deadline.load(Relaxed));
                                assert_eq!(d.of(st.lap(t)), e.lease_until, "ticket {t}: deadline");
                            }
                            _ => assert_eq!(f.lease(), Lease::Pending(ms), "ticket {t}: {f:?}"),
                        }
                    }
                }
            }
        }
        // Unpublished tickets are not in their slot's word.
        for e in &self.queue {
            if matches!(e.status, Status::Lapped | Status::GaveUp) {
                assert!(
                    state_of(e.ticket).is_none(),
                    "ticket {}: {:?} is in its slot, model {e:?}",
                    e.ticket,
                    Word(st.slot(e.ticket).word.load(Acquire))
                );
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
    fn core_follows_the_model(
        slots in prop_oneof![Just(2u32), Just(4u32)],
        ops in prop::collection::vec(op(), 1..160),
    ) {
        let mut sim = Sim::new(slots);
        sim.check();
        for op in &ops {
            sim.apply(op);
            sim.check();
        }
        sim.idle();
        sim.check();
        sim.settle();
        sim.check();
    }
}

/// What a polling test does while a holder holds.
#[derive(Clone, Debug)]
enum Act {
    /// A live taker (participant 1) queues: a published waiter, or lapped when more than `N`
    /// tickets are outstanding. It waits until the end.
    Live,
    /// A polling loop (participant 2): that many takers each take a ticket and give it up at
    /// once (`lock_queued` with a deadline already past), or find no room and take none.
    Poll(u32),
}

fn act() -> impl Strategy<Value = Act> {
    prop_oneof![
        3 => Just(Act::Live),
        4 => (1..40u32).prop_map(Act::Poll),
        // Runs longer than any fixed record of runs (4095 laps a record, three per slot).
        1 => (4_000..30_000u32).prop_map(Act::Poll),
    ]
}

/// A polling loop next to live waiters — interleaved with them, or in runs of thousands —
/// behind a holder, on 2 to 16 slots: once the holder releases, every live waiter is granted
/// in turn and then the lock is idle, without the clock moving (no grace is ever waited out
/// for a ticket whose taker gave up).
fn polling_never_stalls(slots: u32, acts: &[Act]) {
    let o = OwnedState::new(slots, 8);
    let st = o.view();
    let p = ModelPlatform::new(0);
    let tuning = Tuning::default();
    let holder = match take(&st, &p, &me(0, None)) {
        Taken::Fast(g) => g,
        _ => panic!("a fresh lock is free"),
    };
    let mut live = Vec::new();
    for a in acts {
        match *a {
            Act::Live => match take(&st, &p, &me(1, None)) {
                Taken::Queued(t, _) => {
                    let look = publish_once(
                        &st,
                        &p,
                        t,
                        &me(1, None),
                        None,
                        &tuning,
                        &mut Watch::default(),
                    )
                    .expect("consistent");
                    assert!(
                        matches!(look, Look::Lapped | Look::Done(Published::Waiting(_))),
                        "ticket {t}: granted behind a holder"
                    );
                    live.push(t);
                }
                Taken::Fast(g) => panic!("held, yet {g:?}"),
                #[allow(unreachable_patterns)]
                _ => {} // no room: it takes no ticket
            },
            Act::Poll(n) => {
                for _ in 0..n {
                    let r = lock_queued(
                        &st,
                        &p,
                        &me(2, None),
                        Some(0),
                        &tuning,
                        None,
                        Watch::default(),
                    );
                    assert_eq!(r, Err(WaitError::Timeout));
                }
            }
        }
    }
    assert!(
        fairlock::__internal::core::release_fast(&st, holder.ticket, 0) || {
            fairlock::__internal::core::end_fast(&st, &p, 0, holder.ticket, false)
        }
    );
    for t in live {
        let w = Word(st.slot(t).word.load(Acquire));
        assert!(
            relate(w.lap(), st.lap(t)) == LapRelation::Same
                && matches!(w.state(), Some(State::Granted | State::Ready)),
            "live ticket {t} not granted in turn: {w:?} (next {})",
            st.next_ticket()
        );
        let g = match w.state() {
            Some(State::Granted) => match claim_granted(&st, &p, t, &me(1, None)) {
                Ok(Claim::Held(g)) => g,
                c => panic!("ticket {t}: {c:?}"),
            },
            _ => match publish_once(
                &st,
                &p,
                t,
                &me(1, None),
                None,
                &tuning,
                &mut Watch::default(),
            ) {
                Ok(Look::Done(Published::Held(g))) => g,
                _ => panic!("ticket {t}: pre-granted, yet not claimable"),
            },
        };
        release(&st, &p, &g, 1).unwrap();
    }
    let lw = st.lock_word(Acquire);
    assert!(
        !lw.held() && !lw.queued(),
        "the lock is idle, yet {lw:?}: a given-up ticket was pre-granted and waits out a grace"
    );
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/model_proptest.txt",
        ))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_polling_loop_never_stalls_an_idle_lock(
        slots in prop_oneof![Just(2u32), Just(4u32), Just(16u32)],
        acts in prop::collection::vec(act(), 1..24),
    ) {
        polling_never_stalls(slots, &acts);
    }
}
