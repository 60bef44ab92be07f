//! io_uring futex waits (`IORING_OP_FUTEX_WAIT`, Linux 6.7): a wait is a request submitted to
//! one ring of the process; its completion fires the wait. Who reaps the completions:
//!
//! * `Reaper::Thread`: a thread of ours, asleep in `io_uring_enter` (what a library that knows
//!   no runtime can do); the task submits its wait itself;
//! * `Reaper::ThreadSubmits`: the same thread also submits every wait: a task hands its wait
//!   over through a list and the thread's bell (a futex word the thread waits on through the
//!   ring too). A futex wait's completion runs as task work of the thread that submitted it,
//!   so this keeps the completion on the reaper rather than on the task's runtime thread;
//! * `Reaper::Reactor`: the runtime's own reactor — the ring signals an eventfd registered
//!   with tokio (`AsyncFd`), and a task reaps. The library cannot do this without depending
//!   on one runtime; measured for what it would buy.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use io_uring::squeue::Entry;
use io_uring::{IoUring, opcode};

use crate::words::{Design, Signal, Words};

const FUTEX2_SIZE_U32: u32 = 0x02;
const FUTEX_BITSET_MATCH_ANY: u64 = 0xffff_ffff;
const STOP: u64 = u64::MAX;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Reaper {
    Thread,
    ThreadSubmits,
    Reactor,
}

const BELL: u64 = u64::MAX - 1;

struct Shared {
    ring: IoUring,
    submit: Mutex<()>,
    words: Arc<Words>,
    signals: Vec<Mutex<Option<Arc<Signal>>>>,
    /// `Reaper::ThreadSubmits`: the waits to submit.
    handed: Mutex<Vec<usize>>,
    stop: AtomicBool,
}

fn futex_wait(word: &std::sync::atomic::AtomicU32, expected: u32, user_data: u64) -> Entry {
    opcode::FutexWait::new(
        word.as_ptr(),
        expected as u64,
        FUTEX_BITSET_MATCH_ANY,
        FUTEX2_SIZE_U32,
    )
    .build()
    .user_data(user_data)
}

impl Shared {
    /// `Reaper::ThreadSubmits`' thread: submits and reaps every wait.
    fn submit_and_reap(&self) {
        let bell = self.words.mux_bell();
        let arm_bell = || {
            // Acquire: pairs with the Release increment of `arm` (the list's new waits are
            // seen once the new bell value is).
            let rung = bell.load(Ordering::Acquire);
            // SAFETY: only this thread touches the submission queue in this mode.
            unsafe {
                self.ring
                    .submission_shared()
                    .push(&futex_wait(bell, rung, BELL))
            }
            .expect("the ring's submission queue is full");
        };
        // The bell's value is read before the list is drained: a wait handed over after the
        // drain rings a bell value the armed wait does not expect.
        let drain = || {
            for i in self.handed.lock().unwrap().drain(..) {
                // SAFETY: as above.
                unsafe {
                    self.ring
                        .submission_shared()
                        .push(&futex_wait(self.words.turn(i), 0, i as u64))
                }
                .expect("the ring's submission queue is full");
            }
        };
        arm_bell();
        drain();
        loop {
            self.ring.submitter().submit_and_wait(1).unwrap();
            // SAFETY: the completion queue is touched by this thread only.
            let cq = unsafe { self.ring.completion_shared() };
            let mut rung = false;
            for cqe in cq {
                if cqe.user_data() == BELL {
                    rung = true;
                } else if let Some(signal) = self.signals[cqe.user_data() as usize]
                    .lock()
                    .unwrap()
                    .take()
                {
                    signal.fire();
                }
            }
            if rung {
                // Acquire: pairs with the Release store of `Uring::stop`.
                if self.stop.load(Ordering::Acquire) {
                    return;
                }
                arm_bell();
                drain();
            }
        }
    }

    fn push(&self, entry: io_uring::squeue::Entry) {
        let _only = self.submit.lock().unwrap();
        // SAFETY: the submission queue is touched under `submit` only.
        unsafe {
            let mut sq = self.ring.submission_shared();
            sq.push(&entry)
                .expect("the ring's submission queue is full");
        }
        self.ring.submit().unwrap();
    }

    /// Fires the waits whose requests completed.
    fn reap(&self) -> bool {
        let mut stop = false;
        // SAFETY: the completion queue is touched by the one reaper only.
        let cq = unsafe { self.ring.completion_shared() };
        for cqe in cq {
            if cqe.user_data() == STOP {
                stop = true;
                continue;
            }
            let i = cqe.user_data() as usize;
            if let Some(signal) = self.signals[i].lock().unwrap().take() {
                signal.fire();
            }
        }
        stop
    }
}

pub struct Uring {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
    reactor: Option<tokio::task::JoinHandle<()>>,
    reaper: Reaper,
}

impl Uring {
    /// With `Reaper::Reactor`, call inside the runtime.
    pub fn new(words: Arc<Words>, reaper: Reaper) -> Uring {
        let ring = IoUring::new(256).expect("io_uring_setup");
        let signals = (0..words.len()).map(|_| Mutex::new(None)).collect();
        let shared = Arc::new(Shared {
            ring,
            submit: Mutex::new(()),
            words,
            signals,
            handed: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let theirs = shared.clone();
        match reaper {
            Reaper::Thread => {
                let thread = std::thread::spawn(move || {
                    loop {
                        theirs.ring.submitter().submit_and_wait(1).unwrap();
                        if theirs.reap() {
                            return;
                        }
                    }
                });
                Uring {
                    shared,
                    thread: Some(thread),
                    reactor: None,
                    reaper,
                }
            }
            Reaper::ThreadSubmits => {
                let thread = std::thread::spawn(move || theirs.submit_and_reap());
                Uring {
                    shared,
                    thread: Some(thread),
                    reactor: None,
                    reaper,
                }
            }
            Reaper::Reactor => {
                // SAFETY: eventfd(2) returns a new descriptor or -1.
                let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
                assert!(fd >= 0, "eventfd");
                // SAFETY: a descriptor this function just opened and nothing else owns.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                shared
                    .ring
                    .submitter()
                    .register_eventfd(fd.as_raw_fd())
                    .unwrap();
                // SAFETY: `fd` is an OwnedFd the AsyncFd owns: it stays open as long as it is
                // registered, and is closed only by the AsyncFd's drop, after deregistering.
                let fd = unsafe { tokio::io::unix::AsyncFd::register(fd) }
                    .map_err(|e| e.into_parts().1)
                    .unwrap();
                let task = tokio::spawn(async move {
                    loop {
                        let mut ready = fd.readable().await.unwrap();
                        let mut count = [0u8; 8];
                        // SAFETY: reads 8 bytes into a buffer of 8 from a live descriptor.
                        unsafe {
                            libc::read(fd.get_ref().as_raw_fd(), count.as_mut_ptr().cast(), 8)
                        };
                        // What completes after the read signals the eventfd again (tokio
                        // keeps a readiness that came after this guard).
                        ready.clear_ready();
                        if theirs.reap() {
                            return;
                        }
                    }
                });
                Uring {
                    shared,
                    thread: None,
                    reactor: Some(task),
                    reaper,
                }
            }
        }
    }

    /// Stops the reaper (a request that completes at once, with `STOP`).
    pub async fn stop(mut self) {
        if self.reaper == Reaper::ThreadSubmits {
            // Release: pairs with the Acquire load of `submit_and_reap`.
            self.shared.stop.store(true, Ordering::Release);
            self.ring_bell();
        } else {
            self.shared.push(opcode::Nop::new().build().user_data(STOP));
        }
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
        if let Some(t) = self.reactor.take() {
            t.await.unwrap();
        }
    }
}

impl Uring {
    fn ring_bell(&self) {
        let bell = self.shared.words.mux_bell();
        // Release: pairs with the Acquire load of `Shared::submit_and_reap`.
        bell.fetch_add(1, Ordering::Release);
        fairlock_bench::futex::wake(bell, 1);
    }
}

impl Design for Uring {
    fn arm(&self, i: usize, signal: Arc<Signal>) {
        *self.shared.signals[i].lock().unwrap() = Some(signal);
        if self.reaper == Reaper::ThreadSubmits {
            self.shared.handed.lock().unwrap().push(i);
            self.ring_bell();
        } else {
            self.shared
                .push(futex_wait(self.shared.words.turn(i), 0, i as u64));
        }
    }
}
