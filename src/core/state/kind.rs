//! A lock's kind as the file records it: exclusive, reader/writer or semaphore, with a
//! semaphore's permits or an exclusive lock's bypass bound.

use crate::core::state::tokens::MAX_BYPASS;

/// What kind of lock a file holds: every kind is a FIFO of tickets over the same slots (see
/// [`crate::core::weighted::walk`]); they differ in how many tickets may hold at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// One holder at a time (`FairLock`, `FairRLock`, `FairMutex`). File code 0.
    Exclusive,
    /// Readers hold together, a writer alone (`FairRwLock`). File code 1.
    RwLock,
    /// At most `permits` holders (`FairSemaphore`). File code 2.
    Semaphore,
}

/// The largest number of permits of a semaphore (2^19): its file needs at least twice as many
/// slots, and 2^20 slots (64 MiB) is the most a file offers.
pub const MAX_PERMITS: u32 = 1 << 19;

/// A file's kind as its header stores it: the kind and, for a semaphore, its permits — or,
/// for an exclusive lock, its bypass bound (0: strict FIFO).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordKind {
    /// The kind.
    pub kind: Kind,
    /// A semaphore's permits; an exclusive lock's bypass bound (0 for strict FIFO); 0 for a
    /// reader/writer lock.
    pub permits: u32,
}

impl RecordKind {
    /// An exclusive lock.
    pub const EXCLUSIVE: RecordKind = RecordKind {
        kind: Kind::Exclusive,
        permits: 0,
    };
    /// A reader/writer lock.
    pub const RWLOCK: RecordKind = RecordKind {
        kind: Kind::RwLock,
        permits: 0,
    };

    /// A semaphore with `permits` permits.
    pub const fn semaphore(permits: u32) -> RecordKind {
        RecordKind {
            kind: Kind::Semaphore,
            permits,
        }
    }

    /// An exclusive lock with bypass bound `k` (`Fairness::Bounded(k)`; 0: strict FIFO).
    pub const fn bounded(k: u32) -> RecordKind {
        RecordKind {
            kind: Kind::Exclusive,
            permits: k,
        }
    }

    /// The bypass bound of an exclusive lock (0: strict FIFO, and for the other kinds).
    pub fn bypass_bound(self) -> u32 {
        match self.kind {
            Kind::Exclusive => self.permits,
            _ => 0,
        }
    }

    /// The kind stored as (`code`, `permits`), if it is one this crate knows and consistent.
    pub fn decode(code: u32, permits: u32) -> Option<RecordKind> {
        let k = match code {
            0 => RecordKind::bounded(permits),
            1 => RecordKind::RWLOCK,
            2 => RecordKind::semaphore(permits),
            _ => return None,
        };
        (k.is_valid() && k.permits == permits).then_some(k)
    }

    /// The header's code for the kind.
    pub fn code(self) -> u32 {
        match self.kind {
            Kind::Exclusive => 0,
            Kind::RwLock => 1,
            Kind::Semaphore => 2,
        }
    }

    /// Whether a file may hold it: a semaphore needs 1 to [`MAX_PERMITS`] permits, the other
    /// kinds none.
    pub fn is_valid(self) -> bool {
        match self.kind {
            Kind::Semaphore => (1..=MAX_PERMITS).contains(&self.permits),
            Kind::Exclusive => self.permits <= MAX_BYPASS,
            Kind::RwLock => self.permits == 0,
        }
    }

    /// Whether tickets are granted by weight (readers together, several permit holders) rather
    /// than one at a time with the exclusive lock's grants in advance.
    pub fn is_weighted(self) -> bool {
        self.kind != Kind::Exclusive
    }

    /// The fewest slots a file of this kind may have: a semaphore twice its permits (so that
    /// holders never fill the array), the others the general minimum of 2.
    pub fn min_slots(self) -> u32 {
        match self.kind {
            Kind::Semaphore => (self.permits.saturating_mul(2)).next_power_of_two().max(2),
            _ => 2,
        }
    }

    /// How the kind reads in messages and status: "exclusive", "rwlock", "semaphore of 3".
    pub fn describe(self) -> String {
        match self.kind {
            Kind::Exclusive if self.permits == 0 => "exclusive lock".to_string(),
            Kind::Exclusive => format!("exclusive lock bounded to {} bypasses", self.permits),
            Kind::RwLock => "reader/writer lock".to_string(),
            Kind::Semaphore => format!("semaphore of {} permits", self.permits),
        }
    }
}
