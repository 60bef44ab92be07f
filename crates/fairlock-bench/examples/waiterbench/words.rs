//! The futex words the designs wait on: in a file mapped shared, as a lock file's slots are
//! (so that every wait and wake is a shared futex, as fairlock's), one cache line apart; and
//! the signal a design fires when a wait may be over.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;

use fairlock_bench::futex;

const STRIDE: usize = 64;

/// `n` turn words, then `n` bells (one per waiter: rung by nothing in this bench, but waited
/// on, as the library's waiter waits on its bell), then one bell of the multiplexer.
pub struct Words {
    map: memmap2::MmapMut,
    n: usize,
}

impl Words {
    pub fn new(dir: &std::path::Path, n: usize) -> Words {
        let path = dir.join(format!("words-{n}"));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.set_len(((2 * n + 1) * STRIDE) as u64).unwrap();
        // SAFETY: a file of this run's own directory, mapped once and used only through
        // atomics (`word`).
        let map = unsafe { memmap2::MmapMut::map_mut(&file) }.unwrap();
        Words { map, n }
    }

    fn at(&self, k: usize) -> &AtomicU32 {
        assert!(k <= 2 * self.n);
        // SAFETY: in bounds (above), aligned (the mapping is page-aligned, the stride 64), and
        // the mapping lives as long as `self`; every access is atomic.
        unsafe { &*(self.map.as_ptr().add(k * STRIDE) as *const AtomicU32) }
    }

    /// Waiter `i`'s turn word: 1 when it is its turn.
    pub fn turn(&self, i: usize) -> &AtomicU32 {
        assert!(i < self.n);
        self.at(i)
    }

    /// Waiter `i`'s bell.
    pub fn bell(&self, i: usize) -> &AtomicU32 {
        assert!(i < self.n);
        self.at(self.n + i)
    }

    /// The multiplexer's bell.
    pub fn mux_bell(&self) -> &AtomicU32 {
        self.at(2 * self.n)
    }

    pub fn len(&self) -> usize {
        self.n
    }

    /// Gives waiter `i` its turn: the store, then a `FUTEX_WAKE` of one waiter (shared).
    pub fn give(&self, i: usize) {
        let w = self.turn(i);
        // Release: pairs with the Acquire load of the waiter that sees its turn.
        w.store(1, Ordering::Release);
        futex::wake(w, 1);
    }
}

/// What a design fires when waiter `i`'s wait may be over: the task's waker. `armed` says a
/// design is watching the word for it.
#[derive(Default)]
pub struct Signal {
    waker: Mutex<Option<Waker>>,
    pub armed: AtomicBool,
}

impl Signal {
    pub fn fire(&self) {
        // Release: pairs with the AcqRel swap of the poll that re-arms.
        self.armed.store(false, Ordering::Release);
        if let Some(w) = self.waker.lock().unwrap().take() {
            w.wake();
        }
    }

    pub fn set_waker(&self, waker: &Waker) {
        *self.waker.lock().unwrap() = Some(waker.clone());
    }
}

/// A waiting mechanism: `arm(i, signal)` makes it fire `signal` once waiter `i`'s turn word
/// is no longer 0 (or spuriously; the task then looks again and arms again).
pub trait Design: Send + Sync {
    fn arm(&self, i: usize, signal: Arc<Signal>);
}
