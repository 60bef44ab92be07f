//! What the core's unit tests share: who takes a ticket, what a ticket's slot says, tickets
//! taken and published by hand, model clocks, and [`HookedPlatform`], the scripted platform
//! that stops a caller at one of its calls while the test plays what others do meanwhile.

use crate::core::exclusive::fast;
use crate::core::model::ModelPlatform;
use crate::core::platform::{Liveness, Platform, Watched};
use crate::core::queue::watch::Watch;
use crate::core::state::LockState;
use crate::core::state::format::cas;
use crate::core::state::slot_word::{LapRelation, relate};
use crate::core::weighted::walk;
use crate::core::{
    Claim, Grant, Me, State, Tuning, WaitError, Word, claim_granted, lock_queued, lock_watched,
};
use crate::primitive::AtomicU64;
use crate::primitive::Ordering::Relaxed;
use std::sync::Mutex;

/// Participant `participant` (thread id 100 + it) taking the whole lock, without a lease.
pub(super) fn me(participant: u32) -> Me {
    Me {
        participant,
        tid: 100 + participant,
        lease_ms: None,
        shared: false,
        beacon: 0,
    }
}

/// Participant `participant` (thread id 100 + it) taking a share (a read, a permit), without
/// a lease.
pub(super) fn share(participant: u32) -> Me {
    Me {
        shared: true,
        ..me(participant)
    }
}

/// Participant `participant` taking the whole lock with a lease of `ms`.
pub(super) fn leased(participant: u32, ms: u64) -> Me {
    Me {
        lease_ms: Some(ms),
        ..me(participant)
    }
}

/// The word in ticket `t`'s slot, whatever its lap.
pub(super) fn word(st: &LockState<'_>, t: u64) -> Word {
    Word(st.slot(t).word.load(Relaxed))
}

/// Ticket `t`'s state, if its slot shows its lap.
pub(super) fn state_of(st: &LockState<'_>, t: u64) -> Option<State> {
    let w = word(st, t);
    (relate(w.lap(), st.lap(t)) == LapRelation::Same)
        .then(|| w.state())
        .flatten()
}

/// Takes the next ticket of an exclusive lock and holds it through its slot (not the fast
/// path): `lock_watched` with the ticket already taken.
pub(super) fn hold_in_slot(st: &LockState<'_>, p: &ModelPlatform, participant: u32) -> Grant {
    let t = fast::take_queued(st, p);
    let g = lock_watched(
        st,
        p,
        &me(participant),
        None,
        &Tuning::default(),
        Some((t, 0)),
        Watch::default(),
    )
    .unwrap();
    assert!(!g.fast);
    g
}

/// Takes a ticket and gives it up at once (a deadline already past), as a timed-out waiter
/// does — not `lock` with that deadline, which makes one try without a ticket.
pub(super) fn time_out<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    participant: u32,
) -> Result<Grant, WaitError> {
    lock_queued(
        st,
        p,
        &me(participant),
        Some(0),
        &Tuning::default(),
        None,
        Watch::default(),
    )
}

/// A ticket of an exclusive lock queued behind whoever holds: taken, and published `Waiting`
/// without the walk `publish` does after it.
pub(super) fn enqueue(st: &LockState<'_>, participant: u32) -> u64 {
    let t = fast::take_queued(st, &ModelPlatform::new(1));
    let slot = st.slot(t);
    let w = Word(slot.word.load(Relaxed));
    assert_eq!(relate(w.lap(), st.lap(t)), LapRelation::Previous);
    let waiting = Word::new(st.lap(t), participant, State::Waiting, false);
    slot.word
        .compare_exchange(w.0, waiting.0, Relaxed, Relaxed)
        .unwrap();
    t
}

/// Takes the next ticket of a weighted lock and publishes its `Waiting` word without the walk
/// that `publish` does after it: a taker preempted between its publication CAS and its walk.
pub(super) fn publish_without_walk(st: &LockState<'_>, who: &Me) -> u64 {
    let t = st.take_ticket();
    let slot = st.slot(t);
    let w = Word(slot.word.load(Relaxed));
    assert_eq!(relate(w.lap(), st.lap(t)), LapRelation::Previous);
    let waiting =
        Word::new(st.lap(t), who.participant, State::Waiting, false).with_shared(who.shared);
    slot.word
        .compare_exchange(w.0, waiting.0, Relaxed, Relaxed)
        .unwrap();
    t
}

/// Takes the next ticket of a weighted lock and publishes it, walk included (as `publish`
/// does), without waiting.
pub(super) fn publish_and_walk(st: &LockState<'_>, p: &ModelPlatform, who: &Me) -> u64 {
    let t = st.take_ticket();
    let slot = st.slot(t);
    let w = Word(slot.word.load(Relaxed));
    assert_eq!(relate(w.lap(), st.lap(t)), LapRelation::Previous);
    let waiting =
        Word::new(st.lap(t), who.participant, State::Waiting, false).with_shared(who.shared);
    assert!(cas(slot, w, waiting));
    walk::advance(st, p);
    t
}

/// Claims ticket `t`, which must be granted.
pub(super) fn claim(st: &LockState<'_>, p: &ModelPlatform, t: u64, who: &Me) -> Grant {
    match claim_granted(st, p, t, who).unwrap() {
        Claim::Held(g) => g,
        other => panic!("ticket {t} not granted: {other:?}"),
    }
}

/// A model clock that advances 1 µs per reading — 1 ms under Miri, where the tens of thousands
/// of readings a wait for the grace (50 ms) takes ran for many minutes (model time only: what
/// a test asserts about it is unchanged).
pub(super) fn ticking() -> ModelPlatform {
    ModelPlatform::new(if cfg!(miri) { 1_000_000 } else { 1_000 })
}

/// A deadline `ms` milliseconds of model time from now.
pub(super) fn in_ms(p: &ModelPlatform, ms: u64) -> Option<u64> {
    Some(p.now_ns() + ms * 1_000_000)
}

/// A step a hook of [`HookedPlatform`] runs, on the thread that made the call, given the
/// platform: what other threads and processes do while that caller is stopped there.
type Step<'a, R = ()> = Box<dyn FnOnce(&HookedPlatform<'a>) -> R + Send + 'a>;

/// What [`HookedPlatform`] runs at every yield, given its model.
type AtYield<'a> = Box<dyn FnMut(&ModelPlatform) + Send + 'a>;

/// A [`ModelPlatform`] with hooks, one per kind of call. A hook runs once, at the first call it
/// applies to, and is taken out before it runs (so the platform calls it makes itself run no
/// hook); the yield hook runs at every yield. Without hooks it behaves as its model.
pub(super) struct HookedPlatform<'a> {
    /// The scripted platform underneath: its clock, its deaths, its waits that yield.
    pub model: ModelPlatform,
    before_now: Mutex<Option<Step<'a>>>,
    before_wake: Mutex<Option<Step<'a>>>,
    after_liveness: Mutex<Option<(Option<u32>, Step<'a>)>>,
    watch_holder: Mutex<Option<Step<'a, Watched>>>,
    at_yield: Mutex<Option<AtYield<'a>>>,
}

impl<'a> HookedPlatform<'a> {
    /// No hooks yet, over `ModelPlatform::new(auto_tick)`.
    pub fn new(auto_tick: u64) -> Self {
        HookedPlatform {
            model: ModelPlatform::new(auto_tick),
            before_now: Mutex::new(None),
            before_wake: Mutex::new(None),
            after_liveness: Mutex::new(None),
            watch_holder: Mutex::new(None),
            at_yield: Mutex::new(None),
        }
    }

    /// Runs `f` before the next clock reading (`now_ns`, or `coarse_now_ns`, which reads it).
    pub fn before_now(&self, f: impl FnOnce(&HookedPlatform<'a>) + Send + 'a) {
        *self.before_now.lock().unwrap() = Some(Box::new(f));
    }

    /// Runs `f` before the next `wake`: the waker stopped right there.
    pub fn before_wake(&self, f: impl FnOnce(&HookedPlatform<'a>) + Send + 'a) {
        *self.before_wake.lock().unwrap() = Some(Box::new(f));
    }

    /// Runs `f` just after the next `liveness` call — of participant `of`, or of anyone with
    /// `None` — has looked; the call then answers what it saw before `f` ran: the caller
    /// stopped right after it judged an entry.
    pub fn after_liveness(&self, of: Option<u32>, f: impl FnOnce(&HookedPlatform<'a>) + Send + 'a) {
        *self.after_liveness.lock().unwrap() = Some((of, Box::new(f)));
    }

    /// Whether the hook set by [`HookedPlatform::after_liveness`] is still to run.
    pub fn liveness_hook_pending(&self) -> bool {
        self.after_liveness.lock().unwrap().is_some()
    }

    /// Answers the next `watch_holder` with what `f` returns (the model watches nothing:
    /// `Unavailable`).
    pub fn at_watch_holder(&self, f: impl FnOnce(&HookedPlatform<'a>) -> Watched + Send + 'a) {
        *self.watch_holder.lock().unwrap() = Some(Box::new(f));
    }

    /// Runs `f` with the model at every `yield_cpu`, instead of yielding.
    pub fn at_yield(&self, f: impl FnMut(&ModelPlatform) + Send + 'a) {
        *self.at_yield.lock().unwrap() = Some(Box::new(f));
    }
}

impl Platform for HookedPlatform<'_> {
    fn now_ns(&self) -> u64 {
        let hook = self.before_now.lock().unwrap().take();
        if let Some(f) = hook {
            f(self);
        }
        self.model.now_ns()
    }

    fn wait(&self, word: &AtomicU64, expected: u32, until: Option<u64>) {
        self.model.wait(word, expected, until);
    }

    fn wake(&self, word: &AtomicU64) {
        let hook = self.before_wake.lock().unwrap().take();
        if let Some(f) = hook {
            f(self);
        }
        self.model.wake(word);
    }

    fn pause(&self, until: Option<u64>) {
        self.model.pause(until);
    }

    fn yield_cpu(&self) {
        let mut hook = self.at_yield.lock().unwrap();
        match hook.as_mut() {
            Some(f) => f(&self.model),
            None => self.model.yield_cpu(),
        }
    }

    fn liveness(&self, index: u32) -> Liveness {
        let seen = self.model.liveness(index);
        let hook = {
            let mut slot = self.after_liveness.lock().unwrap();
            match *slot {
                Some((of, _)) if of.is_none_or(|i| i == index) => slot.take().map(|(_, f)| f),
                _ => None,
            }
        };
        if let Some(f) = hook {
            f(self);
        }
        seen
    }

    fn watch_holder(
        &self,
        word: &AtomicU64,
        expected: u32,
        index: u32,
        beacon: u32,
        until: Option<u64>,
    ) -> Watched {
        let hook = self.watch_holder.lock().unwrap().take();
        match hook {
            Some(f) => f(self),
            None => self
                .model
                .watch_holder(word, expected, index, beacon, until),
        }
    }
}
