//! Finding a name's record in a file of named locks: open addressing with linear probing over
//! the records themselves (see [`crate::names::layout`]). No system calls here; the file
//! and API layers add the names lock, the beacons and the owner words.
//!
//! # The protocol
//!
//! * **Lookup** (no lock): from the key's home record `hash mod R`, read each record's state
//!   word (`Acquire`): `Empty` ends the search (absent); `Used` or `Reclaiming` with the key's
//!   hash and bytes is the name; anything else is passed. The key bytes are read after the
//!   state word and checked again against it afterwards, so a record that changed name while
//!   being read is never taken for a match.
//! * **Open**: the opener takes a participant entry of the record (a `SeqCst` CAS of the
//!   entry's owner word to its own, see [`crate::names::layout`]), then, after a `SeqCst`
//!   fence, checks that the state word is still the `Used` word it found. A reclaimer (below)
//!   changes the word (`SeqCst`) *before* it reads the owner words (after a `SeqCst` fence):
//!   whichever comes second sees the other (Dekker), so a name is never reclaimed under a
//!   process that opened it.
//! * **Create, reclaim, compact**: only under the names lock (an OFD lock on one byte, which
//!   the kernel releases if its holder dies), so these never race each other; lock-free
//!   lookups may run alongside. A record found `Creating` or `Reclaiming` under the lock was
//!   left so by a holder that died: `Creating` is reused, `Reclaiming` made `Used` again.
//! * **Reuse**: a `Used` record none of whose participant entries has a live owner has no
//!   holder and no waiter (owners are alive only while their process's beacon is held); the
//!   reclaimer makes it `Free` (a later creator reuses it) and raises the file's token floor
//!   to the highest token it could have granted (`layout::token_ceiling`). Compaction makes a `Free`
//!   record `Empty` when no `Used` record's probe sequence passes it, so lookups of absent names
//!   stay short.
//!
//! Orderings: the creator writes the key and the lock image with `Relaxed` stores and
//! publishes them with the `Release` store of the `Used` word; lookups load the state word
//! with `Acquire`. Fields of the header (`occupied`, `token_floor`, `swept_at`) are read and
//! written only under the names lock, which orders them (`Relaxed`).

use crate::core::Liveness;
use crate::names::layout::{
    MAX_KEY_LEN, NameEntry, RecordState, generation_of, owner_of, same_generation,
};
use crate::primitive::Ordering::{Acquire, Relaxed, Release, SeqCst};

/// The records of a file of named locks, as the algorithm sees them.
pub trait NameTable {
    /// Number of records (a power of two).
    fn records(&self) -> u32;
    /// Record `r`'s name entry (`r < records()`).
    fn entry(&self, r: u32) -> &NameEntry;
}

/// The key's hash: FNV-1a, 64 bits.
pub fn hash_key(key: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in key {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The record a key's probe sequence starts at.
pub fn home(hash: u64, records: u32) -> u32 {
    // Fold the high bits in: FNV's low bits are its weakest.
    ((hash ^ (hash >> 32)) & u64::from(records - 1)) as u32
}

/// The key stored in `e` (at most [`MAX_KEY_LEN`] bytes, whatever the file says).
pub fn stored_key(e: &NameEntry) -> Vec<u8> {
    // Relaxed: the caller loaded the state word with Acquire before, and checks it after.
    let len = (e.key_len.load(Relaxed) as usize).min(MAX_KEY_LEN);
    let mut out = Vec::with_capacity(len);
    for w in &e.key {
        if out.len() >= len {
            break;
        }
        let bytes = w.load(Relaxed).to_le_bytes();
        let take = (len - out.len()).min(8);
        out.extend_from_slice(&bytes[..take]);
    }
    out
}

/// Whether `e` holds `key` (of hash `hash`); the caller re-checks the state word afterwards.
fn holds_key(e: &NameEntry, key: &[u8], hash: u64) -> bool {
    // Relaxed: see `stored_key`.
    e.hash.load(Relaxed) == hash
        && e.key_len.load(Relaxed) as usize == key.len()
        && stored_key(e) == key
}

/// Writes `key` into `e` (under the names lock, while `e` is `Creating`).
pub fn write_key(e: &NameEntry, key: &[u8], hash: u64) {
    debug_assert!(key.len() <= MAX_KEY_LEN);
    // Relaxed: published by the Release store of the `Used` word.
    e.hash.store(hash, Relaxed);
    e.key_len.store(key.len() as u32, Relaxed);
    for (i, w) in e.key.iter().enumerate() {
        let mut b = [0u8; 8];
        let from = (i * 8).min(key.len());
        let to = (from + 8).min(key.len());
        b[..to - from].copy_from_slice(&key[from..to]);
        w.store(u64::from_le_bytes(b), Relaxed);
    }
}

/// Whether the owner an owner word names (see [`crate::names::layout::owner_word`]) is
/// alive: free (0) is dead; our own entry (`me`: our file-wide entry and its generation) is
/// alive in our generation and dead in any other (a process before us had it); another
/// process's entry is alive while its generation is the word's and its beacon is held
/// (`held`; `None` when it cannot be probed, which never counts as dead).
pub fn owner_liveness(
    word: u64,
    me: (u32, u64),
    generation: impl FnOnce(u32) -> Option<u64>,
    held: impl FnOnce(u32) -> Option<bool>,
) -> Liveness {
    let Some(j) = owner_of(word) else {
        return Liveness::Dead;
    };
    if j == me.0 {
        return if same_generation(word, me.1) {
            Liveness::Alive
        } else {
            Liveness::Dead
        };
    }
    // The beacon first, then the generation: a process that claims entry `j` takes its beacon
    // before it bumps the generation, so a dead owner never looks alive for long (and a live
    // one never looks dead: its generation stays while its beacon is held).
    match held(j) {
        Some(false) => return Liveness::Dead,
        None => return Liveness::Alive,
        Some(true) => {}
    }
    match generation(j) {
        Some(g) if !same_generation(word, g) => Liveness::Dead,
        _ => Liveness::Alive,
    }
}

/// What a lookup found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The name is in record `record`, whose state word is `word` (`Used`).
    Found {
        /// The record.
        record: u32,
        /// Its state word when found.
        word: u64,
    },
    /// The name's record is being checked for reuse: wait for the names lock, then look again.
    Busy,
    /// The name is not in the file.
    Absent,
}

/// Looks `key` up without any lock.
pub fn lookup(t: &impl NameTable, key: &[u8], hash: u64) -> Lookup {
    let n = t.records();
    let start = home(hash, n);
    for k in 0..n {
        let r = (start + k) & (n - 1);
        let e = t.entry(r);
        // Acquire: pairs with the creator's Release store of the `Used` word, so the key and
        // the lock image it wrote before are visible.
        let word = e.state.load(Acquire);
        match RecordState::of(word) {
            RecordState::Empty => return Lookup::Absent,
            s @ (RecordState::Used | RecordState::Reclaiming) => {
                // A seqlock read: the key, then an Acquire fence, then the word again. If a key
                // load saw a creator's write, the fence synchronises with the creator's Release
                // fence (`begin_create`) and the re-check sees its `Creating` word or later:
                // a record renamed while we read it is never taken for a match. (A claim checks
                // the word once more in any case.)
                if holds_key(e, key, hash) && {
                    crate::primitive::fence(Acquire);
                    e.state.load(Relaxed) == word
                } {
                    return if s == RecordState::Used {
                        Lookup::Found { record: r, word }
                    } else {
                        Lookup::Busy
                    };
                }
            }
            RecordState::Creating | RecordState::Free => {}
        }
    }
    Lookup::Absent
}

/// What a lookup under the names lock found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockedLookup {
    /// The name is in `record` (state word `word`).
    Found {
        /// The record.
        record: u32,
        /// Its `Used` word.
        word: u64,
    },
    /// Absent; `record` is where to create it (the first reusable record of its probe
    /// sequence), `was_empty` whether that record is `Empty`.
    Insert {
        /// The record to create the name in.
        record: u32,
        /// Whether it was `Empty` (then `occupied` grows by one).
        was_empty: bool,
    },
    /// Absent, and no record of the probe sequence can take it.
    Full,
}

/// Looks `key` up under the names lock, repairing what dead holders of the lock left on the
/// way (a `Reclaiming` record is made `Used` again).
pub fn lookup_locked(t: &impl NameTable, key: &[u8], hash: u64) -> LockedLookup {
    let n = t.records();
    let start = home(hash, n);
    let mut reusable = None;
    for k in 0..n {
        let r = (start + k) & (n - 1);
        let e = t.entry(r);
        // Acquire: as in `lookup` (a record created by an earlier holder of the lock).
        let mut word = e.state.load(Acquire);
        if RecordState::of(word) == RecordState::Reclaiming {
            // Its checker died holding the names lock (we hold it now): the check never
            // finished, so the record is in use as far as anyone knows. Release: as for any
            // `Used` word (nothing new to publish, but keeps the rule simple).
            word = RecordState::Used.word(generation_of(word));
            e.state.store(word, Release);
        }
        match RecordState::of(word) {
            RecordState::Empty => {
                return match reusable {
                    Some(record) => LockedLookup::Insert {
                        record,
                        was_empty: false,
                    },
                    None => LockedLookup::Insert {
                        record: r,
                        was_empty: true,
                    },
                };
            }
            RecordState::Used => {
                if holds_key(e, key, hash) {
                    return LockedLookup::Found { record: r, word };
                }
            }
            RecordState::Creating | RecordState::Free => {
                reusable.get_or_insert(r);
            }
            RecordState::Reclaiming => unreachable!("repaired above"),
        }
    }
    match reusable {
        Some(record) => LockedLookup::Insert {
            record,
            was_empty: false,
        },
        None => LockedLookup::Full,
    }
}

/// Starts giving record `r` to a name (under the names lock): `Creating` in the next
/// generation, the key written. Returns the generation; the caller writes the lock image and
/// then calls [`publish`].
pub fn begin_create(t: &impl NameTable, r: u32, key: &[u8], hash: u64) -> u64 {
    let e = t.entry(r);
    // Relaxed: under the names lock, nobody else writes the word; lookups pass `Creating`.
    let generation = generation_of(e.state.load(Relaxed)).wrapping_add(1) & (u64::MAX >> 8);
    e.state
        .store(RecordState::Creating.word(generation), Relaxed);
    // Release: the `Creating` word before the key (see the seqlock read in `lookup`).
    crate::primitive::fence(Release);
    write_key(e, key, hash);
    generation
}

/// Publishes record `r` as `Used` in `generation`: its key and lock image become visible.
pub fn publish(t: &impl NameTable, r: u32, generation: u64) -> u64 {
    let word = RecordState::Used.word(generation);
    // Release: pairs with the Acquire loads of lookups (key and image written before).
    t.entry(r).state.store(word, Release);
    word
}

/// Starts checking `Used` record `r` (its `Used` word `word`; the record may also show the
/// `Reclaiming` word of the same generation, left by a reclaimer that died holding the names
/// lock) for reuse: `Reclaiming`. Then the caller reads the owner words of the record's
/// participant entries and calls [`finish_reclaim`]. False if the word changed (it cannot
/// under the names lock, but a file is not trusted).
pub fn begin_reclaim(t: &impl NameTable, r: u32, word: u64) -> bool {
    let reclaiming = RecordState::Reclaiming.word(generation_of(word));
    let e = &t.entry(r).state;
    // SeqCst: the store half of the Dekker pair with an opener's owner-word claim (see the
    // module notes); the fence after it orders it before the caller reads the owner words.
    let ok = e
        .compare_exchange(word, reclaiming, SeqCst, SeqCst)
        .or_else(|_| e.compare_exchange(reclaiming, reclaiming, SeqCst, SeqCst))
        .is_ok();
    crate::primitive::fence(SeqCst);
    ok
}

/// Whether the lock `st` — every one of whose owners is gone (no participant entry has a live
/// owner) — still holds news of a death for its next holder: a holder (necessarily dead), a
/// died flag in the lock word, a counted death not yet told (weighted kinds), or an unfinished
/// ticket whose word tells of one (`Revoked`, or a grant or pass that carries the died flag).
/// A record holding such news is not reclaimed: the news belongs to the name, and its next
/// holder must be told (a reclaimed record gave the name a fresh lock, and the next holder was
/// not).
pub fn carries_news(st: &crate::core::LockState<'_>) -> bool {
    use crate::core::state::slot_word::{State, Word};
    let h = st.header();
    // Acquire: as a walker loads it.
    let lw = st.lock_word(Acquire);
    if st.is_weighted() {
        // Acquire: as the weighted walk loads them.
        if h.deaths.load(Acquire) != h.told.load(Acquire) {
            return true;
        }
    } else if lw.held() || lw.died() {
        return true;
    } else if !lw.queued() {
        return false; // free: every ticket final, its news (if any) in `D`
    }
    // Acquire: a lower bound of the unfinished tickets (before it, every death was passed on).
    let head = h.head.load(Acquire);
    let next = st.ticket_of(lw);
    // Each slot's word is one ticket's: one that tells of a death, at or after `head`, is
    // news not yet passed on. (Walking the tickets from `head` could miss one behind a long
    // run of given-up tickets.)
    (0..st.slot_count()).any(|i| {
        let w = Word(st.slot(i).word.load(Acquire));
        let t = crate::core::state::slot_word::ticket_of(w.lap(), i, st.slot_shift(), next);
        !crate::core::queue::frontier::before(t, head)
            && crate::core::queue::frontier::before(t, next)
            && match w.state() {
                Some(State::Held | State::Revoked) => true,
                Some(State::Granted | State::Ready | State::Skipped) => w.died(),
                _ => false,
            }
    })
}

/// Ends the check of record `r`: `Free` (next generation) if no participant entry has a live
/// owner, `Used` again otherwise.
pub fn finish_reclaim(t: &impl NameTable, r: u32, word: u64, in_use: bool) {
    let generation = generation_of(word);
    let next = if in_use {
        RecordState::Used.word(generation)
    } else {
        RecordState::Free.word(generation.wrapping_add(1) & (u64::MAX >> 8))
    };
    // Release: a `Used` word publishes the (unchanged) record as before.
    t.entry(r).state.store(next, Release);
}

/// Under the names lock, after reclaiming: makes `Empty` every `Free` or `Creating` record
/// that no `Used` (or `Reclaiming`) record's probe sequence passes, and returns how many
/// records are still occupied (not `Empty`).
pub fn compact(t: &impl NameTable) -> u64 {
    let n = t.records();
    let mask = n - 1;
    let state = |r: u32| RecordState::of(t.entry(r).state.load(Acquire));
    // needed[r]: some live record's probe sequence runs through r.
    let mut needed = vec![false; n as usize];
    for r in 0..n {
        if matches!(state(r), RecordState::Used | RecordState::Reclaiming) {
            // Relaxed: written before the `Used` word we just loaded with Acquire.
            let h = home(t.entry(r).hash.load(Relaxed), n);
            let mut p = h;
            while p != r {
                needed[p as usize] = true;
                p = (p + 1) & mask;
            }
        }
    }
    let mut occupied = 0;
    for r in 0..n {
        let e = t.entry(r);
        let word = e.state.load(Acquire);
        match RecordState::of(word) {
            RecordState::Empty => {}
            RecordState::Free | RecordState::Creating if !needed[r as usize] => {
                // Release: keeps the generation, so the record's next name bumps it.
                e.state
                    .store(RecordState::Empty.word(generation_of(word)), Release);
            }
            _ => occupied += 1,
        }
    }
    occupied
}

#[cfg(all(test, not(fairlock_loom)))]
mod tests {
    use super::*;

    struct Table(Vec<NameEntry>);

    fn entry() -> NameEntry {
        use crate::primitive::{AtomicU32, AtomicU64};
        NameEntry {
            state: AtomicU64::new(0),
            hash: AtomicU64::new(0),
            key_len: AtomicU32::new(0),
            reserved0: AtomicU32::new(0),
            key: core::array::from_fn(|_| AtomicU64::new(0)),
            reserved1: core::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    impl Table {
        fn new(n: u32) -> Table {
            Table((0..n).map(|_| entry()).collect())
        }
        /// Creates `key` with hash `hash` as the names lock holder would.
        fn create(&self, key: &str, hash: u64) -> u32 {
            match lookup_locked(self, key.as_bytes(), hash) {
                LockedLookup::Insert { record, .. } => {
                    let g = begin_create(self, record, key.as_bytes(), hash);
                    publish(self, record, g);
                    record
                }
                other => panic!("{other:?}"),
            }
        }
        fn free(&self, r: u32) {
            let w = self.0[r as usize].state.load(Relaxed);
            assert!(begin_reclaim(self, r, w));
            finish_reclaim(self, r, w, false);
        }
    }

    impl NameTable for Table {
        fn records(&self) -> u32 {
            self.0.len() as u32
        }
        fn entry(&self, r: u32) -> &NameEntry {
            &self.0[r as usize]
        }
    }

    #[test]
    fn keys_round_trip_at_every_length() {
        let e = entry();
        for len in [0usize, 1, 7, 8, 9, 63, 254, 255] {
            let key: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
            write_key(&e, &key, 1);
            assert_eq!(stored_key(&e), key);
            assert!(holds_key(&e, &key, 1));
            assert!(!holds_key(&e, &key, 2));
        }
    }

    #[test]
    fn full_hash_collisions_are_told_apart_by_the_key() {
        let t = Table::new(8);
        // Same hash for every key: one probe sequence, told apart only by the bytes.
        let a = t.create("alpha", 42);
        let b = t.create("beta", 42);
        let c = t.create("alphb", 42);
        assert_ne!(a, b);
        for (k, r) in [("alpha", a), ("beta", b), ("alphb", c)] {
            match lookup(&t, k.as_bytes(), 42) {
                Lookup::Found { record, .. } => assert_eq!(record, r, "{k}"),
                other => panic!("{k}: {other:?}"),
            }
        }
        assert_eq!(lookup(&t, b"gamma", 42), Lookup::Absent);
    }

    #[test]
    fn a_freed_record_in_a_chain_keeps_the_chain_and_is_reused() {
        let t = Table::new(8);
        let a = t.create("a", 3);
        let b = t.create("b", 3);
        t.free(a);
        // `b` lies past the freed `a`: still found.
        assert!(matches!(lookup(&t, b"b", 3), Lookup::Found { record, .. } if record == b));
        // A new name of the same home reuses `a`'s record, in a new generation.
        let w_before = t.0[a as usize].state.load(Relaxed);
        assert_eq!(t.create("c", 3), a);
        assert!(generation_of(t.0[a as usize].state.load(Relaxed)) > generation_of(w_before));
        // Compaction keeps what chains need.
        assert_eq!(compact(&t), 2);
    }

    #[test]
    fn compaction_empties_free_records_no_chain_passes() {
        let t = Table::new(8);
        let a = t.create("a", 0);
        let b = t.create("b", 0);
        let c = t.create("c", 5);
        t.free(b);
        t.free(a);
        assert_eq!(compact(&t), 1);
        for r in [a, b] {
            assert_eq!(
                RecordState::of(t.0[r as usize].state.load(Relaxed)),
                RecordState::Empty
            );
        }
        assert!(matches!(lookup(&t, b"c", 5), Lookup::Found { record, .. } if record == c));
        // `a` freed but `b` (past it, same home) still used: `a` is kept for the chain.
        let t = Table::new(8);
        let a = t.create("a", 0);
        let b = t.create("b", 0);
        t.free(a);
        assert_eq!(compact(&t), 2);
        assert!(matches!(lookup(&t, b"b", 0), Lookup::Found { record, .. } if record == b));
    }

    #[test]
    fn what_dead_lock_holders_left_is_repaired_or_reused() {
        let t = Table::new(4);
        let a = t.create("a", 1);
        // A reclaimer died after marking it.
        let w = t.0[a as usize].state.load(Relaxed);
        assert!(begin_reclaim(&t, a, w));
        assert_eq!(lookup(&t, b"a", 1), Lookup::Busy);
        assert!(
            matches!(lookup_locked(&t, b"a", 1), LockedLookup::Found { record, word } if record == a && word == w)
        );
        // A creator died half-way: the record is passed by lookups and reused.
        let LockedLookup::Insert { record, .. } = lookup_locked(&t, b"z", 1) else {
            panic!()
        };
        begin_create(&t, record, b"z", 1);
        assert_eq!(lookup(&t, b"z", 1), Lookup::Absent);
        assert!(
            matches!(lookup_locked(&t, b"z", 1), LockedLookup::Insert { record: r, was_empty: false } if r == record)
        );
    }

    #[test]
    fn owners_live_by_beacon_and_generation() {
        use crate::names::layout::owner_word;
        let me = (3, 7);
        let live = |w| owner_liveness(w, me, |_| Some(5), |_| Some(true));
        assert_eq!(live(0), Liveness::Dead);
        assert_eq!(live(owner_word(3, 7)), Liveness::Alive);
        assert_eq!(
            live(owner_word(3, 6)),
            Liveness::Dead,
            "our entry, a former process"
        );
        assert_eq!(live(owner_word(9, 5)), Liveness::Alive);
        assert_eq!(
            live(owner_word(9, 4)),
            Liveness::Dead,
            "entry re-claimed since"
        );
        let dead = owner_liveness(owner_word(9, 5), me, |_| Some(5), |_| Some(false));
        assert_eq!(dead, Liveness::Dead);
        let unknown = owner_liveness(owner_word(9, 5), me, |_| None, |_| None);
        assert_eq!(unknown, Liveness::Alive);
    }

    #[test]
    fn a_full_table_says_so() {
        let t = Table::new(2);
        t.create("a", 0);
        t.create("b", 0);
        assert_eq!(lookup_locked(&t, b"c", 0), LockedLookup::Full);
        assert_eq!(lookup(&t, b"c", 0), Lookup::Absent);
    }
}
