//! The weighted FIFO of the shared kinds: a reader/writer lock (`FairRwLock`) and a counting
//! semaphore (`FairSemaphore`). Same slots, same words, same tickets as the exclusive lock; what
//! differs is how many tickets may hold at once.
//!
//! A ticket is *shared* (a reader, a permit: the word's `shared` bit) or *exclusive* (a
//! writer). Tickets are granted strictly in ticket order while they fit: an exclusive ticket
//! when nothing is held, a shared one when no exclusive one is held and fewer than
//! [`LockState::capacity`] shared ones are. So consecutive readers are granted together, a
//! writer waits for the readers ahead of it and holds back every reader behind it (task-fair
//! FIFO with reader batching), and nobody ever overtakes anybody.
//!
//! # The walk
//!
//! [`advance`] walks from `head` (every ticket below it final — or given up while lapped and
//! never published, its `Skipped` never written — and every death before it reported) over the
//! unfinished tickets: it counts the granted and held ones, grants each
//! waiting one that fits, and stops at the first that does not fit or that nobody has published
//! yet. Nothing is granted in advance: the next taker cannot be known to be a reader or a
//! writer before it publishes. So a taker publishes and then walks itself, and a releaser
//! stores its `Done` and then walks: two writes to two different words followed by reads of
//! each other's word (a store-load pattern), for which each side has a `SeqCst` fence between
//! its write and its walk. One of the two walks is then sure to see both writes and grant.
//!
//! Why two walkers never admit too many: a walker grants ticket `k` only with a CAS on the
//! `Waiting` word it read, after reading every ticket from `head` to `k`. Each of those was
//! final (it never holds again), counted as granted (it may since have finished: counting it is
//! conservative), or was `Waiting` and granted by the walker's own CAS (a failed CAS re-reads).
//! So the granted tickets always form a prefix of the unfinished ones, and whoever grants `k`
//! has counted every holder that can exist before `k`; nobody can be granted after `k` before
//! `k` is.
//!
//! # Deaths
//!
//! A dead holder is revoked (`Held → Revoked`) and a dead grantee skipped, by [`recover`],
//! which — unlike the exclusive lock's — walks past live holders, since any of them may be
//! dead. The news of a death (a `Revoked` word, or a `Skipped` one whose grant carried it) does
//! not stay in the slot: the first walk that passes it counts it in the header's `deaths` and
//! then rewrites the word as a plain `Skipped` (`collect_news`); whoever replaces a previous
//! lap's news word counts it first (`count_replaced_news`). A grant is told while `deaths` is
//! ahead of `told`, which the telling walk then raises; that walk tells every further grant it
//! makes, and a reader/writer lock also tells every reader granted while a told reader holds
//! (the batch that reads what a dead writer left). Counting before rewriting, and raising
//! `told` after granting, make a crash between them a repeated report, never a lost one.
//! `head` goes up to the first ticket not known to be final (or given up).

use crate::core::exclusive::advance::cas;
use crate::core::platform::{Liveness, Platform, Tuning};
use crate::core::queue::frontier::{MAX_STEPS, before, raise_head};
use crate::core::queue::lapped;
use crate::core::robust::leasing::{expired, take_over};
use crate::core::robust::recover::{Ahead, Watch};
use crate::core::state::layout::LockState;
use crate::core::state::slot_word::{LapRelation, State, Word, relate};
use crate::primitive::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use crate::primitive::fence;

/// What the granted tickets from `head` up to a point hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Front {
    /// Granted or held shared tickets.
    pub shared: u64,
    /// Whether an exclusive ticket is granted or held.
    pub exclusive: bool,
    /// Whether a granted or held shared ticket was told `owner_died`.
    pub told: bool,
}

impl Front {
    /// Whether a ticket (shared or not) may be granted next to these holders.
    #[inline]
    pub fn admits(&self, shared: bool, capacity: u64) -> bool {
        !self.exclusive
            && if shared {
                self.shared < capacity
            } else {
                self.shared == 0
            }
    }

    fn count(&mut self, w: Word) {
        if w.shared() {
            self.shared += 1;
            self.told |= w.died();
        } else {
            self.exclusive = true;
        }
    }
}

/// Whether final word `w` holds news of a death: `Revoked`, or `Skipped` with the died flag (a
/// grant that carried the news and was skipped, or a grant skipped for its frozen lease).
#[inline]
pub(crate) fn is_news(w: Word) -> bool {
    match w.state() {
        Some(State::Revoked) => true,
        Some(State::Skipped) => w.died(),
        _ => false,
    }
}

/// Counts the death that news word `w` (of ticket `t`) tells, and rewrites the word as a plain
/// `Skipped`, so that the news lives in the header's `deaths` counter and the slot is free of
/// it. The count comes first: a collector killed in between leaves the word to be counted
/// again (a spurious report later, never a lost one); two collectors of one word count it
/// twice, with the same effect. False if the word changed (the caller looks again).
pub(crate) fn collect_news(st: &LockState<'_>, t: u64, w: Word) -> bool {
    count_replaced_news(st, w);
    crate::crash_point!("weighted.news_counted");
    let clean = Word::new(w.lap(), w.participant(), State::Skipped, false).with_shared(w.shared());
    cas(st.slot(t), w, clean)
}

/// Counts the death that the previous lap's word `prev` tells, if it tells one, before a CAS
/// replaces it (a publication, a skip of an unpublished ticket): the news must not go with it.
#[inline]
pub(crate) fn count_replaced_news(st: &LockState<'_>, prev: Word) {
    if is_news(prev) {
        // Release: pairs with the Acquire load of `deaths` by the walk that grants next (the
        // death happens-before the report of it).
        st.header().deaths.fetch_add(1, Release);
    }
}

/// Where a walk, a recovery or an admission check starts: `head` (every ticket before it
/// final), with nothing counted yet — or, when a share held since far back keeps `head` more
/// than `N` tickets behind the header's `front` (every ticket before it final or granted),
/// `front`, with the holders before it counted from the slot words (`far`). A held ticket keeps
/// its slot's word (later laps of that slot are given up and retaken), so every grant before
/// `front` is some slot's word: `N` loads, however long the share has been held, instead of a
/// step per ticket taken since (a read held for an hour made every walk that long: issue 28).
struct Start {
    at: u64,
    front: Front,
    /// Started at `front`: where `head` may go — the oldest grant counted before `at`, or `at`
    /// if there is none (every ticket before it is final or given up, its news collected).
    far: Option<u64>,
}

#[inline]
fn start(st: &LockState<'_>) -> Start {
    let hdr = st.header();
    // Acquire: pairs with the Release raise of `head` (`frontier::raise_head`) by the walk
    // that passed the tickets below it.
    let head = hdr.head.load(Acquire);
    // Acquire: pairs with the Release raise of `front` (`raise_front`).
    let hint = hdr.front.load(Acquire);
    let far = before(head, hint) && hint.wrapping_sub(head) > st.slot_count();
    match far.then(|| holders_before(st, hint)).flatten() {
        Some((front, oldest)) => Start {
            at: hint,
            front,
            far: Some(oldest.unwrap_or(hint)),
        },
        None => Start {
            at: head,
            front: Front::default(),
            far: None,
        },
    }
}

/// The grants before ticket `at` (every ticket before it final or granted), counted from the
/// slot words: a grant's word stays in its slot until it ends; and the oldest of them. A grant
/// that ends while we count may still be counted (conservative: a walk may then grant a little
/// later). The news of a death a word before `at` tells (a holder revoked there) is collected
/// on the way, as a walk from `head` would collect it passing that word — no walk from `front`
/// comes there. So every ticket before the oldest grant is final or given up and its news
/// collected: `head` may go there (else it stayed at a long share for good once the share
/// ended, and every walk kept counting the slots). `None` if a word before `at` waits, which
/// `front`'s promise rules out: the caller then walks from `head`, which passes nothing.
#[cold]
#[inline(never)]
fn holders_before(st: &LockState<'_>, at: u64) -> Option<(Front, Option<u64>)> {
    let mut front = Front::default();
    let mut oldest: Option<u64> = None;
    for i in 0..st.slot_count() {
        for _ in 0..4 {
            // Acquire: as the walk loads words.
            let w = Word(st.slot(i).word.load(Acquire));
            let t = word_ticket(st, i, w);
            if !before(t, at) {
                break;
            }
            if matches!(w.state(), Some(State::Granted | State::Held)) {
                front.count(w);
                if oldest.is_none_or(|o| before(t, o)) {
                    oldest = Some(t);
                }
            } else if matches!(w.state(), Some(State::Waiting | State::Sleeping) | None) {
                return None;
            } else if is_news(w) && !collect_news(st, t, w) {
                continue; // changed under us: look again
            }
            break;
        }
    }
    Some((front, oldest))
}

/// The ticket whose word `w` slot `i` holds, `w` loaded (`Acquire`) just before: the counter is
/// read after the word, so it is past that ticket (its taker took it before writing the word,
/// which our load synchronised with). Read before the word, a word of the next lap written
/// in between would name a ticket 2^44 laps back.
fn word_ticket(st: &LockState<'_>, i: u64, w: Word) -> u64 {
    ticket_of(w.lap(), i, st.slot_shift(), st.next_ticket())
}

/// Raises the header's `front` to `t` unless it is already there or beyond (monotone, like
/// `head`). `Release`, as `raise_head`: pairs with the `Acquire` load in [`start`].
fn raise_front(st: &LockState<'_>, t: u64) {
    let front = &st.header().front;
    // Relaxed: the CAS below decides.
    let mut cur = front.load(Relaxed);
    while before(cur, t) {
        match front.compare_exchange_weak(cur, t, Release, Relaxed) {
            Ok(_) => return,
            Err(now) => cur = now,
        }
    }
}

/// Grants every waiting ticket that fits, in ticket order, from `head` (or `front`: see
/// `start`); see the module notes. Anyone may run it at any time; it is how a weighted lock's
/// release, abandonment, recovery and publication pass the lock on.
pub fn advance<P: Platform>(st: &LockState<'_>, p: &P) {
    // SeqCst: the store-load fence with the caller's write just before (a release's `Done`, a
    // publication's `Waiting`, an abandonment): pairs with the same fence of the walk that
    // follows the other party's write, so at least one of the two walks sees both.
    fence(SeqCst);
    let hdr = st.header();
    let Start {
        at,
        front: counted,
        far,
    } = start(st);
    let cap = st.capacity();
    let mut front = counted;
    // Once this walk tells a grant of a death, it tells every grant it makes: readers granted
    // together after a dead writer all read what it left.
    let mut telling = false;
    // Where `head` may go: the first ticket not known to be final.
    let mut unfinished: Option<u64> = None;
    let mut h = at;
    let mut steps = 0u64;
    while steps < MAX_STEPS {
        steps += 1;
        #[cfg(all(test, not(loom)))]
        tests::STEPS.with(|c| c.set(c.get() + 1));
        let slot = st.slot(h);
        let lap = st.lap(h);
        // Acquire: pairs with the Release CAS or store that wrote the word (a release, a
        // grant, a publication), so a grant we make carries what the releasers did.
        let w = Word(slot.word.load(Acquire));
        let Some(state) = w.state() else { break };
        match relate(w.lap(), lap) {
            LapRelation::Same => {}
            // The slot was reused by a later ticket: `h` is final (its news, if any, was
            // counted before the reuse: `publish::may_reuse`).
            LapRelation::Later => {
                h = h.wrapping_add(1);
                continue;
            }
            LapRelation::Previous | LapRelation::Behind if free_for(st, h, w) => {
                // Taken (maybe) but not published: nobody behind it may go first. A lapped
                // taker that gave up or died is passed at once (`recover` passes one that
                // stays unpublished for the grace).
                if lapped::gone(slot, lap, p) {
                    count_replaced_news(st, w);
                    if cas(slot, w, Word::new(lap, 0, State::Skipped, false)) {
                        h = h.wrapping_add(1);
                    }
                    continue;
                }
                unfinished.get_or_insert(h);
                break;
            }
            LapRelation::Previous | LapRelation::Behind => {
                // The slot is still used by an earlier lap (more than `N` tickets apart): `h`
                // cannot publish yet. If its taker gave up (a shared taker that retook a
                // ticket rather than wait behind a long-held share, or a timeout) or died, it
                // will never hold: pass it without writing (the slot is not ours to write);
                // `head` stays at it, and the walk that finds the slot free writes its
                // `Skipped` (the branch above).
                unfinished.get_or_insert(h);
                match lapped_gone(st, p, h, w) {
                    Lapped::Gone => h = h.wrapping_add(1),
                    Lapped::Changed => {} // look again
                    Lapped::Live => break,
                }
                continue;
            }
        }
        match state {
            State::Done | State::Abandoned | State::Skipped | State::Revoked => {
                if is_news(w) && !collect_news(st, h, w) {
                    continue; // changed under us: look again
                }
                h = h.wrapping_add(1);
            }
            State::Granted | State::Held => {
                unfinished.get_or_insert(h);
                front.count(w);
                h = h.wrapping_add(1);
            }
            State::Waiting | State::Sleeping => {
                unfinished.get_or_insert(h);
                if !front.admits(w.shared(), cap) {
                    break;
                }
                // Acquire: pairs with the Release count of the death (`collect_news`).
                let deaths = hdr.deaths.load(Acquire);
                // Acquire: pairs with the AcqRel raise of `told` below, by the walk that told
                // the grant before ours.
                telling |= deaths != hdr.told.load(Acquire);
                // A reader granted while a reader told of a death still holds (or is granted)
                // is told too, whichever walk grants it: it joins a batch that reads what the
                // dead left. The told grants carry `died` in their words, which this walk has
                // counted (second review, finding 6).
                let joins_told = st.is_rwlock() && w.shared() && front.told;
                let granted = w
                    .with_state(State::Granted)
                    .with_died(telling || joins_told);
                if !cas(slot, w, granted) {
                    continue; // changed under us: look again
                }
                crate::crash_point!("weighted.granted");
                if telling {
                    // Told: later grants by other walks need not be (this one's go on telling).
                    // A walker killed before this leaves the death to be told again.
                    // AcqRel: releases our grant's telling to the walks that load `told` next;
                    // acquires the raises before ours (a read-modify-write on one word).
                    hdr.told.fetch_max(deaths, AcqRel);
                }
                if state == State::Sleeping {
                    p.wake(&slot.word);
                }
                front.count(granted);
                h = h.wrapping_add(1);
            }
            // Never written in a weighted file (nothing is granted in advance): a corrupt
            // file, or one whose kind changed under a walker. Count it as the whole lock.
            State::Ready => {
                unfinished.get_or_insert(h);
                front.exclusive = true;
                h = h.wrapping_add(1);
            }
        }
    }
    // `head` goes up to the first ticket not known to be final, else to where the walk ended
    // (when it started at `front`: to the oldest grant before it, or to `front`); `front` to
    // where the walk ended, the first ticket it could not grant.
    raise_head(st, far.unwrap_or_else(|| unfinished.unwrap_or(h)));
    raise_front(st, h);
}

/// Whether ticket `me` (a shared one if `shared`) could be granted now: every unfinished
/// ticket before it is granted or held, and it fits next to them. For `try_*`, after a
/// [`recover`]; a race with other takers may still leave it waiting (then it gives up).
pub fn admits<P: Platform>(st: &LockState<'_>, p: &P, me: u64, shared: bool) -> bool {
    let Start {
        at, front: counted, ..
    } = start(st);
    let mut front = counted;
    let mut h = at;
    for _ in 0..MAX_STEPS {
        if !before(h, me) {
            return front.admits(shared, st.capacity());
        }
        let slot = st.slot(h);
        // Acquire: as in `advance`.
        let w = Word(slot.word.load(Acquire));
        match (relate(w.lap(), st.lap(h)), w.state()) {
            (LapRelation::Later, _) => {}
            (LapRelation::Same, Some(s)) if s.is_final() => {}
            (LapRelation::Same, Some(State::Granted | State::Held)) => front.count(w),
            // Given up (or dead) and passed by every walk, as `advance` does.
            (LapRelation::Previous | LapRelation::Behind, Some(_)) => {
                match lapped_gone(st, p, h, w) {
                    Lapped::Gone => {}
                    Lapped::Changed => continue, // look again
                    Lapped::Live => return false,
                }
            }
            _ => return false,
        }
        h = h.wrapping_add(1);
    }
    false
}

/// The weighted form of [`crate::core::robust::recover()`]: looks at every ticket from `head` to `me`
/// and fixes what is stuck — a dead holder revoked, a holder whose lease expired taken over, a
/// dead grantee or waiter skipped, a ticket taken but not published within the grace (its
/// taker died in between) skipped — walking past live holders, since a dead one may hide
/// behind them. Then walks ([`advance`]) so that whatever fits is granted.
pub fn recover<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    me: u64,
    watch: &mut Watch<'_>,
    tuning: &Tuning,
) -> Ahead {
    let Start { at, far, .. } = start(st);
    let mut busy = false;
    if far.is_some() {
        // The grants before `front` are slot words (see `start`): look at each of them.
        for i in 0..st.slot_count() {
            for _ in 0..4 {
                // Acquire: as in `advance`.
                let w = Word(st.slot(i).word.load(Acquire));
                if !matches!(w.state(), Some(State::Granted | State::Held)) {
                    break;
                }
                let t = word_ticket(st, i, w);
                if !before(t, at) || !before(t, me) {
                    break;
                }
                match fix_holder(st, p, t, w, watch) {
                    Holder::Live => {
                        busy = true;
                        break;
                    }
                    Holder::Passed => break,
                    Holder::Changed => {} // look again
                }
            }
        }
    }
    let mut h = at;
    for _ in 0..MAX_STEPS {
        #[cfg(all(test, not(loom)))]
        tests::STEPS.with(|c| c.set(c.get() + 1));
        if !before(h, me) {
            break;
        }
        let slot = st.slot(h);
        let lap = st.lap(h);
        // Acquire: as in `advance`.
        let w = Word(slot.word.load(Acquire));
        let Some(state) = w.state() else {
            return Ahead::Busy;
        };
        match relate(w.lap(), lap) {
            LapRelation::Later => {
                h = h.wrapping_add(1);
                continue;
            }
            LapRelation::Previous | LapRelation::Behind if free_for(st, h, w) => {
                // Taken, not published. Its taker publishes within nanoseconds unless it died
                // or stalls; after the grace (or at once, if its lapped record says it gave up
                // or died) the ticket is skipped, and a stalled taker takes another.
                // Relaxed: a ticket is only a number.
                let next = st.next_ticket();
                if !before(h, next) {
                    break;
                }
                let unpublished = watch.observe((h, w.0, 1), p.now_ns());
                if unpublished < tuning.grace_ns && !lapped::gone(slot, lap, p) {
                    advance(st, p);
                    return Ahead::Unclaimed(unpublished);
                }
                count_replaced_news(st, w);
                if cas(slot, w, Word::new(lap, 0, State::Skipped, false)) {
                    crate::crash_point!("weighted.unpublished_skipped");
                }
                continue;
            }
            LapRelation::Previous | LapRelation::Behind => {
                // Its slot is still used by an earlier lap. A taker that gave up (or died)
                // there is passed, as `advance` does; a live one waits for its slot.
                match lapped_gone(st, p, h, w) {
                    Lapped::Gone => h = h.wrapping_add(1),
                    Lapped::Changed => {} // look again
                    Lapped::Live => {
                        advance(st, p);
                        return Ahead::Busy;
                    }
                }
                continue;
            }
            LapRelation::Same => {}
        }
        let dead = || p.liveness(w.participant()) == Liveness::Dead;
        match state {
            State::Done | State::Abandoned | State::Skipped | State::Revoked => {}
            State::Waiting | State::Sleeping => {
                if dead() {
                    if !cas(slot, w, w.with_state(State::Skipped)) {
                        continue;
                    }
                } else {
                    // A live waiter ahead: whether it can go is the walk's business.
                    busy = true;
                    break;
                }
            }
            State::Granted | State::Held => match fix_holder(st, p, h, w, watch) {
                Holder::Live => busy = true,
                Holder::Passed => {}
                Holder::Changed => continue, // look again
            },
            State::Ready => return Ahead::Busy,
        }
        h = h.wrapping_add(1);
    }
    advance(st, p);
    if busy { Ahead::Busy } else { Ahead::Clear }
}

/// Whether ticket `h`'s slot is free for it, the word `w` an earlier lap's and final: the
/// previous lap's, or one several laps back all of whose later laps before `h`'s were given up
/// (retaken beside a long-held share; nobody writes their `Skipped` when walks start at
/// `front`: see [`start`]). Then `h` is unpublished, not lapped: it may publish now, and is
/// passed after the grace if its taker never does (one killed with no `lapped` entry kept
/// every walk at it for good while the slot's word stayed behind: found by the soak test).
#[inline]
fn free_for(st: &LockState<'_>, h: u64, w: Word) -> bool {
    if !w.state().is_some_and(State::is_final) {
        return false;
    }
    match relate(w.lap(), st.lap(h)) {
        LapRelation::Previous => true,
        LapRelation::Behind => {
            crate::core::queue::given_up::all_given_up_between(st.slot(h), w.lap(), st.lap(h))
        }
        _ => false,
    }
}

/// What [`lapped_gone`] found.
enum Lapped {
    /// Given up, or its taker dead: pass it.
    Gone,
    /// Its taker lives and may still publish: wait for it.
    Live,
    /// The slot's word is no longer the one the caller read: look again.
    Changed,
}

/// Whether lapped ticket `h` (its slot showing `w`, an earlier lap's word, when the caller
/// looked) will never be published: its taker gave up (its bit), or its `lapped` entry names a
/// dead process — whose bit is then set on its behalf (it will never look again), so that the
/// slot's given-up word can absorb the laps after it. (Passed without a bit, a dead writer
/// behind a long-held read kept the word from absorbing the readers' retaken laps behind it:
/// after 20 of them nobody could take a ticket until the read ended.)
///
/// The given-up word counts every lap up to its base as given up, and a later lap's give-up
/// rebases it onto the slot word's lap: once `h` published, a give-up behind it makes `h`'s
/// own lap read as given up. So `h` is passed only if its slot still shows `w` — a word of an
/// earlier lap never comes back once the slot moved on. (Read from a stale `w`, a walk passed
/// a writer that had published and been granted, and granted the reader behind it too.)
fn lapped_gone<P: Platform>(st: &LockState<'_>, p: &P, h: u64, w: Word) -> Lapped {
    let slot = st.slot(h);
    let lap = st.lap(h);
    let gone = crate::core::queue::given_up::given_up(slot, lap)
        || (lapped::dead(slot, lap, p) && {
            let _ = crate::core::queue::given_up::give_up(st, h);
            true
        });
    if !gone {
        return Lapped::Live;
    }
    // Acquire: pairs with the Release write that moved the slot on (a publication). The
    // given-up word was loaded (Acquire) before this; if it read a rebase's AcqRel CAS, that
    // CAS came after the rebaser saw the slot at `h`'s lap (a rebase onto the word), or saw
    // `head` past `h` (onto `head`'s floor: raised, Release, by a walk that had read `h`
    // published), so this load sees the word moved.
    if Word(slot.word.load(Acquire)) == w {
        Lapped::Gone
    } else {
        Lapped::Changed
    }
}

/// What [`fix_holder`] found.
enum Holder {
    /// Alive, and within its lease.
    Live,
    /// Dead (revoked or skipped), or its lease ran out (taken over).
    Passed,
    /// The word changed under us.
    Changed,
}

/// Recovery of granted or held ticket `h` (word `w`): revoked (held) or skipped (granted) if
/// its process is dead, taken over if its lease ran out.
fn fix_holder<P: Platform>(
    st: &LockState<'_>,
    p: &P,
    h: u64,
    w: Word,
    watch: &mut Watch<'_>,
) -> Holder {
    if p.liveness(w.participant()) == Liveness::Dead {
        let to = if w.state() == Some(State::Held) {
            State::Revoked
        } else {
            State::Skipped
        };
        if !cas(st.slot(h), w, w.with_state(to)) {
            return Holder::Changed;
        }
        crate::crash_point!("weighted.dead_holder_passed");
        return Holder::Passed;
    }
    match w.leased().then(|| expired(st, p, h, w, watch)).flatten() {
        Some(f) => {
            take_over(st, p, h, w, f);
            Holder::Changed
        }
        None => Holder::Live,
    }
}

/// The ticket at or below `next` whose slot is `i` (of `1 << shift`) and whose lap is `lap`
/// (modulo 2^44, as words keep it): the most recent such ticket.
pub fn ticket_of(lap: u64, i: u64, shift: u32, next: u64) -> u64 {
    let lap_mask = (1u64 << crate::core::state::slot_word::LAP_BITS) - 1;
    // Laps are `(t >> shift) + 1`; how many laps `lap` is behind the lap of `next`.
    let next_lap = crate::core::state::slot_word::lap_of(next, shift);
    let behind = next_lap.wrapping_sub(lap) & lap_mask;
    ((next >> shift).wrapping_sub(behind) << shift) | (i & ((1u64 << shift) - 1))
}

/// Whether this thread's acquiring ticket `me` of a reader/writer lock would wait for itself:
/// a ticket of participant `participant` and thread `tid` held before it in a way that blocks
/// it (a writer behind its own read, or anything behind its own write). Threads are told apart
/// by the informational `tid` stamp, which the holder wrote when it claimed.
pub fn holds_already(st: &LockState<'_>, participant: u32, tid: u32) -> bool {
    let n = st.slot_count();
    let held_by_us = |i: u64| {
        let slot = st.slot(i);
        // Acquire: as in `advance`.
        let w = Word(slot.word.load(Acquire));
        // Relaxed: informational stamps; for a ticket of ours, written by this very thread.
        let stamp = slot.stamp.load(Relaxed);
        matches!(w.state(), Some(State::Held | State::Granted))
            && w.participant() == participant
            && slot.tid.load(Relaxed) == tid
            && stamp != 0
            && stamp.wrapping_sub(1) & (n - 1) == i & (n - 1)
            && st.lap(stamp.wrapping_sub(1)) == w.lap()
    };
    // Relaxed: a bound for the look below; `head` is a lower bound of every unfinished ticket.
    let head = st.header().head.load(Relaxed);
    let next = st.next_ticket();
    let span = next.wrapping_sub(head);
    if span <= n {
        // Every unfinished ticket lies in [head, next): look at those tickets' slots only (the
        // common case, a few of them).
        (0..span).any(|k| held_by_us(head.wrapping_add(k)))
    } else {
        // More than `N` tickets since `head` (a long-held share, retakes past it): a grant of
        // ours may lie anywhere, so every slot (second review: a write behind its own retaken
        // read was not refused).
        (0..n).any(held_by_us)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    thread_local! {
        /// Tickets the weighted walks and recoveries of this thread looked at.
        pub(super) static STEPS: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
    }

    /// A writer lapped behind a long-held read (its slot still the read's) is killed: walks
    /// pass its ticket (its `lapped` entry names a dead process). Every later lap of that slot
    /// is retaken by readers; the slot's given-up word must absorb them past the dead writer's
    /// lap, so that readers go on taking tickets beside the long read. (Passed without a bit,
    /// the dead writer's lap stopped the absorption: after 20 laps no ticket could be taken
    /// until the read ended. Review finding.) The same with a writer that times out instead.
    #[test]
    fn a_dead_lapped_taker_behind_a_long_read_stops_no_reader() {
        use crate::core::weighted_test_support::{in_ms, ticking};
        for dies in [true, false] {
            let o = OwnedState::of_kind(4, 8, RecordKind::RWLOCK);
            let st = o.view();
            let p = ticking();
            let t = Tuning::default();
            let _long = lock(&st, &p, &me(1, true), None, &t).unwrap(); // ticket 0, slot 0
            for _ in 0..3 {
                let g = lock(&st, &p, &me(3, true), None, &t).unwrap();
                release(&st, &p, &g, 3).unwrap();
            }
            // Ticket 4 (slot 0): a writer, lapped behind the long read.
            let crate::core::Taken::Queued(w4, _) = crate::core::take(&st, &p, &me(2, false))
            else {
                panic!("no ticket")
            };
            assert_eq!(w4, 4);
            let mut watch = Watch::default();
            assert!(matches!(
                crate::core::publish_once(&st, &p, w4, &me(2, false), None, &t, &mut watch),
                Ok(crate::core::Look::Lapped)
            ));
            if dies {
                p.set_dead(2, true);
            } else {
                assert_eq!(
                    crate::core::give_up_lapped(&st, &p, w4, 2),
                    crate::core::LappedGiveUp::Gone
                );
            }
            for i in 0..200 {
                let g = lock(&st, &p, &me(3, true), in_ms(&p, 200), &t).unwrap_or_else(|e| {
                    panic!(
                        "writer dies {dies}: read {i} (next ticket {}): {e:?}",
                        st.next_ticket()
                    )
                });
                release(&st, &p, &g, 3).unwrap();
            }
        }
    }

    /// A long read ends after its slot's later laps were all retaken (given up, their words
    /// never written: walks start at `front`); then a taker of that slot's next lap is killed
    /// between its ticket and its publication. The slot's word is several laps behind, final,
    /// every lap in between given up: the ticket is unpublished, not lapped, and is passed after
    /// the grace — a reader after it gets in. (It was taken for a lapped one, and every walk
    /// stopped at it for good: found by the soak test.)
    #[test]
    fn a_dead_taker_behind_retaken_laps_is_passed_after_the_grace() {
        use crate::core::weighted_test_support::{in_ms, ticking};
        let o = OwnedState::of_kind(4, 8, RecordKind::RWLOCK);
        let st = o.view();
        let p = ticking();
        let t = Tuning::default();
        let long = lock(&st, &p, &me(1, true), None, &t).unwrap(); // ticket 0, slot 0
        for _ in 0..40 {
            let g = lock(&st, &p, &me(3, true), None, &t).unwrap();
            release(&st, &p, &g, 3).unwrap();
        }
        release(&st, &p, &long, 1).unwrap();
        // Takers killed between their ticket and their publication, until one of slot 0.
        loop {
            let dead = st.take_ticket();
            if dead.is_multiple_of(4) {
                let w = Word(st.slot(dead).word.load(Relaxed));
                assert_eq!(
                    relate(w.lap(), st.lap(dead)),
                    LapRelation::Behind,
                    "slot 0's word is laps behind ticket {dead}"
                );
                break;
            }
        }
        let g = lock(&st, &p, &me(4, true), in_ms(&p, 2_000), &t)
            .expect("a reader after the dead taker, once its grace passed");
        release(&st, &p, &g, 4).unwrap();
    }

    /// A read held across more than `N` tickets makes walks start at `front`; once it ends,
    /// `head` catches up and walks step from it again. (It stayed at the ended read for good:
    /// every later lock and release counted every slot, and `status` stepped from there.)
    #[test]
    fn head_catches_up_once_the_long_read_ended() {
        let o = OwnedState::of_kind(2, 8, RecordKind::RWLOCK);
        let st = o.view();
        let p = crate::core::model::ModelPlatform::new(1);
        let t = Tuning::default();
        let long = lock(&st, &p, &me(1, true), None, &t).unwrap();
        for _ in 0..100 {
            let g = lock(&st, &p, &me(2, true), None, &t).unwrap();
            release(&st, &p, &g, 2).unwrap();
        }
        let head = st.header().head.load(Relaxed);
        assert_eq!(head, 0, "head stays at the long read while it is held");
        release(&st, &p, &long, 1).unwrap();
        for _ in 0..10 {
            let g = lock(&st, &p, &me(2, true), None, &t).unwrap();
            release(&st, &p, &g, 2).unwrap();
        }
        let (head, front, next) = (
            st.header().head.load(Relaxed),
            st.header().front.load(Relaxed),
            st.next_ticket(),
        );
        assert!(
            next.wrapping_sub(head) <= st.slot_count(),
            "head {head}, front {front}, next {next}: walks still start at front"
        );
    }

    /// A read held while thousands of others come and go on a 2-slot file: every walk and
    /// recovery looks at a bounded number of tickets (the slots, and the waiting ones), not at
    /// every ticket taken since the long read began (each walk stepped from `head`, the long
    /// read, over all of them: quadratic in the traffic).
    #[test]
    fn walks_beside_a_long_held_share_are_bounded_by_the_slots() {
        let o = OwnedState::of_kind(2, 8, RecordKind::RWLOCK);
        let st = o.view();
        let p = ModelPlatform::new(1);
        let t = Tuning::default();
        let long = lock(&st, &p, &me(1, true), None, &t).unwrap();
        let mut worst = 0;
        for i in 0..5_000u32 {
            STEPS.with(|c| c.set(0));
            let g = lock(&st, &p, &me(2, true), None, &t).unwrap();
            release(&st, &p, &g, 2).unwrap();
            let mut watch = Watch::default();
            let _ = recover(&st, &p, st.next_ticket(), &mut watch, &t);
            let steps = STEPS.with(|c| c.get());
            if i > 100 {
                worst = worst.max(steps);
            }
        }
        assert!(
            worst <= 64,
            "{worst} tickets looked at by one lock, unlock and recovery"
        );
        release(&st, &p, &long, 1).unwrap();
        let w = lock(&st, &p, &me(3, false), None, &t).expect("a writer after the long read");
        release(&st, &p, &w, 3).unwrap();
    }
    use crate::core::model::ModelPlatform;
    use crate::core::state::layout::{OwnedState, RecordKind};
    use crate::core::weighted_test_support::{claim, me, state_of};
    use crate::core::{Me, lock, release, try_lock};

    /// Takes a ticket and publishes it (as `publish` does, walk included), without waiting.
    fn enqueue(st: &LockState<'_>, p: &ModelPlatform, who: &Me) -> u64 {
        let t = st.take_ticket();
        let slot = st.slot(t);
        let w = Word(slot.word.load(Relaxed));
        assert_eq!(relate(w.lap(), st.lap(t)), LapRelation::Previous);
        let waiting =
            Word::new(st.lap(t), who.participant, State::Waiting, false).with_shared(who.shared);
        assert!(cas(slot, w, waiting));
        advance(st, p);
        t
    }

    #[test]
    fn readers_hold_together_and_a_writer_keeps_later_readers_back() {
        let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
        let st = o.view();
        let p = ModelPlatform::new(1);
        let t = Tuning::default();
        let r1 = lock(&st, &p, &me(1, true), None, &t).unwrap();
        let r2 = lock(&st, &p, &me(2, true), None, &t).unwrap();
        assert_eq!((r1.ticket, r2.ticket), (0, 1));
        let w = enqueue(&st, &p, &me(3, false));
        let r3 = enqueue(&st, &p, &me(4, true));
        assert_eq!(state_of(&st, w), Some(State::Waiting));
        assert_eq!(
            state_of(&st, r3),
            Some(State::Waiting),
            "a reader after a writer waits"
        );
        release(&st, &p, &r1, 1).unwrap();
        assert_eq!(
            state_of(&st, w),
            Some(State::Waiting),
            "one reader still holds"
        );
        release(&st, &p, &r2, 2).unwrap();
        assert_eq!(state_of(&st, w), Some(State::Granted));
        assert_eq!(state_of(&st, r3), Some(State::Waiting));
        let wg = claim(&st, &p, w, &me(3, false));
        assert!(wg.token() > r2.token());
        release(&st, &p, &wg, 3).unwrap();
        assert_eq!(state_of(&st, r3), Some(State::Granted));
    }

    #[test]
    fn a_semaphore_admits_its_permits_in_order_and_a_dead_holders_permit_comes_back() {
        let o = OwnedState::of_kind(8, 8, RecordKind::semaphore(2));
        let st = o.view();
        let p = ModelPlatform::new(1);
        let t = Tuning::default();
        let a = lock(&st, &p, &me(1, true), None, &t).unwrap();
        let b = lock(&st, &p, &me(2, true), None, &t).unwrap();
        let c = enqueue(&st, &p, &me(3, true));
        let d = enqueue(&st, &p, &me(4, true));
        assert_eq!(state_of(&st, c), Some(State::Waiting));
        assert!(try_lock(&st, &p, &me(5, true), &t).unwrap().is_none());
        p.set_dead(2, true);
        let mut watch = Watch::default();
        assert_eq!(recover(&st, &p, d, &mut watch, &t), Ahead::Busy);
        // Revoked, its news delivered to c's grant, then rewritten so nobody reports it again.
        let bw = Word(st.slot(b.ticket).word.load(Relaxed));
        assert_eq!((bw.state(), bw.died()), (Some(State::Skipped), false));
        let cg = claim(&st, &p, c, &me(3, true));
        assert!(cg.died, "the grant after a death reports it");
        assert_eq!(
            state_of(&st, d),
            Some(State::Waiting),
            "two permits held: a and c"
        );
        release(&st, &p, &a, 1).unwrap();
        let dg = claim(&st, &p, d, &me(4, true));
        assert!(!dg.died, "the death was reported once");
        release(&st, &p, &cg, 3).unwrap();
        release(&st, &p, &dg, 4).unwrap();
        let e = try_lock(&st, &p, &me(5, true), &t).unwrap().expect("free");
        assert!(!e.died);
    }

    #[test]
    fn try_never_jumps_a_waiting_writer() {
        let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
        let st = o.view();
        let p = ModelPlatform::new(1);
        let t = Tuning::default();
        let r1 = try_lock(&st, &p, &me(1, true), &t).unwrap().expect("free");
        let r2 = try_lock(&st, &p, &me(2, true), &t)
            .unwrap()
            .expect("readers share");
        assert!(try_lock(&st, &p, &me(3, false), &t).unwrap().is_none());
        let w = enqueue(&st, &p, &me(3, false));
        assert!(
            try_lock(&st, &p, &me(4, true), &t).unwrap().is_none(),
            "a reader may not pass a waiting writer"
        );
        release(&st, &p, &r1, 1).unwrap();
        release(&st, &p, &r2, 2).unwrap();
        assert_eq!(state_of(&st, w), Some(State::Granted));
    }

    #[test]
    fn a_writer_that_gives_up_lets_the_readers_behind_it_in() {
        let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
        let st = o.view();
        let p = ModelPlatform::new(1);
        let t = Tuning::default();
        let _r1 = lock(&st, &p, &me(1, true), None, &t).unwrap();
        let w = enqueue(&st, &p, &me(2, false));
        let r2 = enqueue(&st, &p, &me(3, true));
        assert_eq!(state_of(&st, r2), Some(State::Waiting));
        // The writer times out: as `wait_for_grant` does, abandon and walk.
        let slot = st.slot(w);
        let ww = Word(slot.word.load(Relaxed));
        assert!(cas(slot, ww, ww.with_state(State::Abandoned)));
        advance(&st, &p);
        assert_eq!(state_of(&st, r2), Some(State::Granted));
        // And through the real wait: a writer with a deadline already past.
        let e = lock(&st, &p, &me(4, false), Some(0), &t);
        assert_eq!(e, Err(crate::core::WaitError::Timeout));
        let r3 = lock(&st, &p, &me(5, true), Some(0), &t).expect("nothing but readers ahead");
        assert!(r3.ticket > w);
    }

    #[test]
    fn a_ticket_taken_but_never_published_is_passed_after_the_grace() {
        let o = OwnedState::of_kind(8, 8, RecordKind::semaphore(1));
        let st = o.view();
        let p = ModelPlatform::new(1);
        let t = Tuning::default();
        // A taker that died between its ticket and its publication.
        let lost = st.take_ticket();
        let b = enqueue(&st, &p, &me(2, true));
        assert_eq!(state_of(&st, b), Some(State::Waiting));
        let mut watch = Watch::default();
        assert!(matches!(
            recover(&st, &p, b, &mut watch, &t),
            Ahead::Unclaimed(_)
        ));
        p.advance(t.grace_ns + 1);
        recover(&st, &p, b, &mut watch, &t);
        assert_eq!(state_of(&st, lost), Some(State::Skipped));
        assert_eq!(state_of(&st, b), Some(State::Granted));
    }

    #[test]
    fn a_dead_reader_is_revoked_past_live_ones() {
        let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
        let st = o.view();
        let p = ModelPlatform::new(1);
        let t = Tuning::default();
        let _r1 = lock(&st, &p, &me(1, true), None, &t).unwrap();
        let r2 = lock(&st, &p, &me(2, true), None, &t).unwrap();
        let w = enqueue(&st, &p, &me(3, false));
        p.set_dead(2, true);
        let mut watch = Watch::default();
        assert_eq!(recover(&st, &p, w, &mut watch, &t), Ahead::Busy);
        // Revoked, then its news counted in the header (the word left a plain `Skipped`).
        assert_eq!(state_of(&st, r2.ticket), Some(State::Skipped));
        assert_eq!(st.header().deaths.load(Relaxed), 1);
        assert_eq!(
            state_of(&st, w),
            Some(State::Waiting),
            "the live reader still holds"
        );
    }

    #[test]
    fn a_thread_holding_the_rwlock_is_found() {
        let o = OwnedState::of_kind(8, 8, RecordKind::RWLOCK);
        let st = o.view();
        let p = ModelPlatform::new(1);
        let t = Tuning::default();
        let r = lock(&st, &p, &me(1, true), None, &t).unwrap();
        assert!(holds_already(&st, 1, 101));
        assert!(!holds_already(&st, 1, 102) && !holds_already(&st, 2, 101));
        release(&st, &p, &r, 1).unwrap();
        assert!(!holds_already(&st, 1, 101));
    }

    #[test]
    fn admission() {
        let none = Front::default();
        assert!(none.admits(true, 1) && none.admits(false, 1));
        let readers = Front {
            shared: 2,
            exclusive: false,
            told: false,
        };
        assert!(readers.admits(true, 3) && !readers.admits(true, 2));
        assert!(!readers.admits(false, 3));
        let writer = Front {
            shared: 0,
            exclusive: true,
            told: false,
        };
        assert!(!writer.admits(true, 8) && !writer.admits(false, 8));
    }

    #[test]
    fn news_words() {
        let w = Word::new(3, 1, State::Revoked, false);
        assert!(is_news(w));
        assert!(is_news(w.with_state(State::Skipped).with_died(true)));
        assert!(!is_news(w.with_state(State::Skipped)));
        assert!(!is_news(w.with_state(State::Done).with_died(true)));
    }
}

#[cfg(all(test, not(loom)))]
mod stress {
    use super::*;
    use crate::core::model::ModelPlatform;
    use crate::core::state::layout::{OwnedState, RecordKind};
    use crate::core::{Claim, Me, Published, claim_granted, lock, publish, release};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    fn me(participant: u32) -> Me {
        Me {
            participant,
            tid: participant,
            lease_ms: None,
            shared: true,
            beacon: 0,
        }
    }

    /// The shape of the loom model `a_permit_comes_back_while_two_queue` with publication
    /// racing too (too big a state space for loom), on real threads: a semaphore of one
    /// permit, its holder releasing while two takers publish; waiters that never recover, so
    /// a lost grant shows as a stall (failed after 2 s) rather than a poll's delay.
    #[test]
    fn a_permit_returned_while_two_publish_is_never_lost() {
        // Fewer rounds under Miri, which runs threads very slowly (same assertions).
        let rounds = if cfg!(miri) { 10 } else { 3000 };
        for round in 0..rounds {
            let o = Arc::new(OwnedState::of_kind(4, 4, RecordKind::semaphore(1)));
            let p = Arc::new(ModelPlatform::new(1));
            let held = lock(&o.view(), &*p, &me(1), None, &Tuning::default()).unwrap();
            let threads: Vec<_> = (0..3u32)
                .map(|k| {
                    let (o, p) = (o.clone(), p.clone());
                    std::thread::spawn(move || {
                        let st = o.view();
                        if k == 0 {
                            release(&st, &*p, &held, 1).unwrap();
                            return;
                        }
                        let who = me(k + 1);
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
}
