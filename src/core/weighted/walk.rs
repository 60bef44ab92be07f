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
//! A dead holder is revoked (`Held → Revoked`) and a dead grantee skipped, by the recovery (`recover.rs`),
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

use crate::core::platform::Platform;
use crate::core::queue::frontier::{MAX_STEPS, before, raise_head};
use crate::core::queue::lapped;
use crate::core::state::LockState;
use crate::core::state::format::cas;
use crate::core::state::slot_word::{LapRelation, State, Word, relate, ticket_of};
use crate::core::weighted::news::{collect_news, count_replaced_news, is_news};
use crate::primitive::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use crate::primitive::fence;

#[cfg(all(test, not(fairlock_loom)))]
thread_local! {
    /// Tickets the weighted walks and recoveries of this thread looked at (unit tests count them).
    pub(crate) static STEPS: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

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

    pub(crate) fn count(&mut self, w: Word) {
        if w.shared() {
            self.shared += 1;
            self.told |= w.died();
        } else {
            self.exclusive = true;
        }
    }
}

/// Where a walk, a recovery or an admission check starts: `head` (every ticket before it
/// final), with nothing counted yet — or, when a share held since far back keeps `head` more
/// than `N` tickets behind the header's `front` (every ticket before it final or granted),
/// `front`, with the holders before it counted from the slot words (`far`). A held ticket keeps
/// its slot's word (later laps of that slot are given up and retaken), so every grant before
/// `front` is some slot's word: `N` loads, however long the share has been held, instead of a
/// step per ticket taken since (a read held for an hour would make every walk that long).
pub(crate) struct Start {
    /// Where the walk starts.
    pub(crate) at: u64,
    /// The grants counted before `at`.
    pub(crate) front: Front,
    /// Started at `front`: where `head` may go — the oldest grant counted before `at`, or `at`
    /// if there is none (every ticket before it is final or given up, its news collected).
    pub(crate) far: Option<u64>,
}

#[inline]
pub(crate) fn start(st: &LockState<'_>) -> Start {
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
pub(crate) fn holders_before(st: &LockState<'_>, at: u64) -> Option<(Front, Option<u64>)> {
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
pub(crate) fn word_ticket(st: &LockState<'_>, i: u64, w: Word) -> u64 {
    ticket_of(w.lap(), i, st.slot_shift(), st.next_ticket())
}

/// Raises the header's `front` to `t` unless it is already there or beyond (monotone, like
/// `head`). `Release`, as `raise_head`: pairs with the `Acquire` load in [`start`].
pub(crate) fn raise_front(st: &LockState<'_>, t: u64) {
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
    // Whether this walk granted a ticket (then it nudges the first one that does not fit).
    let mut granted_any = false;
    let mut h = at;
    let mut steps = 0u64;
    while steps < MAX_STEPS {
        steps += 1;
        #[cfg(all(test, not(fairlock_loom)))]
        STEPS.with(|c| c.set(c.get() + 1));
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
                    if granted_any && state == State::Sleeping {
                        // The first ticket that does not fit, behind grants this walk just
                        // made: nudge it (TWA's early wake), so that it spins and takes its
                        // grant without a futex round trip when those holders let go. Only
                        // a hint: a failed CAS (it woke, or was granted) needs nothing.
                        if cas(slot, w, w.with_state(State::Waiting)) {
                            // Between the CAS and the wake, the word says `Waiting` while its
                            // thread sleeps: a walk that grants it now sends no wake, and the
                            // grantee claims when this wake comes, or at its next poll if this
                            // walker never gets there (DESIGN.md, failure model).
                            crate::crash_point!("weighted.nudged");
                            p.wake(&slot.word);
                        }
                    }
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
                // counted.
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
                granted_any = true;
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

/// Whether ticket `h`'s slot is free for it, the word `w` an earlier lap's and final: the
/// previous lap's, or one several laps back all of whose later laps before `h`'s were given up
/// (retaken beside a long-held share; nobody writes their `Skipped` when walks start at
/// `front`: see [`start`]). Then `h` is unpublished, not lapped: it may publish now, and is
/// passed after the grace if its taker never does (one killed with no `lapped` entry would
/// keep every walk at it for good while the slot's word stayed behind).
#[inline]
pub(crate) fn free_for(st: &LockState<'_>, h: u64, w: Word) -> bool {
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
pub(crate) enum Lapped {
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
pub(crate) fn lapped_gone<P: Platform>(st: &LockState<'_>, p: &P, h: u64, w: Word) -> Lapped {
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
