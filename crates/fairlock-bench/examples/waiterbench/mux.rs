//! One thread for every wait of the process: it sleeps in one `futex_waitv` over its own bell
//! and the words of every wait in progress (at most 127 of them: `futex_waitv` takes 128
//! words), and each time it wakes, looks at every word, fires the waits that are over, and
//! goes back to sleep on the rest. A new wait is handed to it through a list and its bell.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use fairlock_bench::futex;

use crate::words::{Design, Signal, Words};

struct Shared {
    words: Arc<Words>,
    new: Mutex<Vec<(usize, Arc<Signal>)>>,
    stop: AtomicBool,
}

pub struct Mux {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Mux {
    pub fn new(words: Arc<Words>) -> Mux {
        assert!(
            words.len() < futex::WAITV_MAX,
            "futex_waitv takes 128 words"
        );
        let shared = Arc::new(Shared {
            words,
            new: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let theirs = shared.clone();
        let thread = std::thread::spawn(move || serve(&theirs));
        Mux {
            shared,
            thread: Some(thread),
        }
    }

    fn ring(&self) {
        let bell = self.shared.words.mux_bell();
        // Release: pairs with the Acquire load at the top of the multiplexer's loop (what
        // was pushed before the ring is seen once the new bell value is).
        bell.fetch_add(1, Ordering::Release);
        futex::wake(bell, 1);
    }
}

fn serve(shared: &Shared) {
    let words = &shared.words;
    let mut active: Vec<(usize, Arc<Signal>)> = Vec::new();
    let mut waitv: Vec<(&AtomicU32, u32)> = Vec::with_capacity(futex::WAITV_MAX);
    loop {
        let bell = words.mux_bell().load(Ordering::Acquire);
        // Acquire: pairs with the Release store of `Drop`.
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        active.append(&mut shared.new.lock().unwrap());
        active.retain(|(i, signal)| {
            // Acquire: pairs with the Release store of `Words::give`.
            if words.turn(*i).load(Ordering::Acquire) != 0 {
                signal.fire();
                false
            } else {
                true
            }
        });
        waitv.clear();
        waitv.push((words.mux_bell(), bell));
        for (i, _) in &active {
            waitv.push((words.turn(*i), 0));
        }
        futex::waitv(&waitv, None);
    }
}

impl Drop for Mux {
    fn drop(&mut self) {
        // Release: pairs with the Acquire load at the top of the multiplexer's loop.
        self.shared.stop.store(true, Ordering::Release);
        self.ring();
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Design for Mux {
    fn arm(&self, i: usize, signal: Arc<Signal>) {
        self.shared.new.lock().unwrap().push((i, signal));
        self.ring();
    }
}
