//! The library's design: a thread per wait in progress, sleeping in `futex_waitv` on the wait's
//! words (here its turn word and its bell), which wakes the task. Each waiter has its thread
//! here (the library hands a wait to an idle thread of a pool: one mutex more).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use fairlock_bench::futex;

use crate::words::{Design, Signal, Words};

struct Slot {
    job: Mutex<Option<Arc<Signal>>>,
    thread: std::thread::Thread,
}

pub struct Pool {
    slots: Vec<Arc<Slot>>,
}

impl Pool {
    pub fn new(words: Arc<Words>) -> Pool {
        let slots = (0..words.len())
            .map(|i| {
                let (tx, rx) = std::sync::mpsc::channel();
                let words = words.clone();
                std::thread::Builder::new()
                    .stack_size(256 * 1024)
                    .spawn(move || {
                        let me: Arc<Slot> = rx.recv().unwrap();
                        loop {
                            let Some(signal) = me.job.lock().unwrap().take() else {
                                if Arc::strong_count(&me) == 1 {
                                    return;
                                }
                                std::thread::park();
                                continue;
                            };
                            let turn = words.turn(i);
                            let bell = words.bell(i);
                            // Acquire: pairs with the Release store of `Words::give`.
                            while turn.load(Ordering::Acquire) == 0 {
                                futex::waitv(&[(turn, 0), (bell, 0)], None);
                            }
                            signal.fire();
                        }
                    })
                    .map(|handle| {
                        let slot = Arc::new(Slot {
                            job: Mutex::new(None),
                            thread: handle.thread().clone(),
                        });
                        tx.send(slot.clone()).unwrap();
                        slot
                    })
                    .unwrap()
            })
            .collect();
        Pool { slots }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        for slot in self.slots.drain(..) {
            let thread = slot.thread.clone();
            drop(slot);
            thread.unpark();
        }
    }
}

impl Design for Pool {
    fn arm(&self, i: usize, signal: Arc<Signal>) {
        let slot = &self.slots[i];
        *slot.job.lock().unwrap() = Some(signal);
        slot.thread.unpark();
    }
}
