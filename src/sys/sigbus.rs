//! Surviving a lock file truncated while it is mapped (`SIGBUS`).
//!
//! Whoever may write a lock file may truncate it, and every access to a page of a shared
//! mapping beyond the file's new end raises `SIGBUS`, whose default action kills the process:
//! another user could kill every service that embeds the library. The trust model allows such
//! a user to deny service, never to crash us. So every mapping of a lock file is registered
//! here, and a `SIGBUS` handler (installed with the first mapping, chained to whatever handled
//! `SIGBUS` before) catches a fault inside one: it maps private zero pages over the whole
//! mapping (`MAP_FIXED`), so that the faulting access and every later one succeed, and marks
//! the mapping broken. Nothing shared is touched: the zero pages are this process's alone.
//! Each registered mapping carries the fork generation its views belong to
//! ([`Registration::generation`]); breaking it sets that to [`BROKEN`], so that the views'
//! check of "is this view still ours" (one load, made anyway) says no: their next call fails
//! with a typed error, a waiter gives up its wait at its next wake-up, and a guard's release
//! reports the lock lost (the state it was granted in is gone).
//!
//! A fault outside every registered mapping is not ours, nor is a `SIGBUS` sent by `kill`
//! (whatever its "address"): it goes to the disposition that was there before ours (Rust's own
//! guard-page handler, Python's `faulthandler`...; ignored if it was ignored and not a fault;
//! the default action otherwise), and our handler stays installed after a sent signal.
//!
//! The registry is a fixed table of atomics, so that the handler reads it without locks or
//! allocation (both forbidden in a signal handler); a mapping registered while it is full is
//! not protected (a `SIGBUS` in it kills as before), which takes more than [`CAPACITY`]
//! lock files mapped at once in one process.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// How many mappings can be registered at once.
pub const CAPACITY: usize = 4096;

/// The generation of a broken mapping: no fork generation (those count forks from 0).
pub const BROKEN: u64 = u64::MAX;

/// One registered mapping: `[start, start + len)`; `start` is 0 while the entry is free.
struct Entry {
    start: AtomicUsize,
    len: AtomicUsize,
    /// The fork generation the mapping's views belong to, or [`BROKEN`].
    generation: AtomicU64,
}

static ENTRIES: [Entry; CAPACITY] = [const {
    Entry {
        start: AtomicUsize::new(0),
        len: AtomicUsize::new(0),
        generation: AtomicU64::new(0),
    }
}; CAPACITY];

/// The disposition of `SIGBUS` before ours, called for faults that are not ours: written once
/// in `install` (under `Once`) before our handler is installed, then only read, by it.
struct Previous(UnsafeCell<MaybeUninit<libc::sigaction>>);

// SAFETY: see `Previous`: one write before any reader can exist, then reads only.
unsafe impl Sync for Previous {}

static PREVIOUS: Previous = Previous(UnsafeCell::new(MaybeUninit::uninit()));

/// 0: our handler is not installed; 1: installed; `pid << 1` (≥ 2): being installed by a
/// thread of process `pid`. Not a `Once`: a fork while another thread is inside its
/// `call_once` leaves the child waiting for it for good (as `sys::thread`'s fork handlers); a
/// child that finds its parent's installation half-done installs it itself.
static INSTALL: AtomicU64 = AtomicU64::new(0);

/// Installs our handler once per process (see [`INSTALL`]).
fn ensure_installed() {
    loop {
        // Acquire: pairs with the Release store of 1 (installed).
        let state = INSTALL.load(Ordering::Acquire);
        if state == 1 {
            return;
        }
        let me = u64::from(std::process::id());
        if state != 0 && state >> 1 == me {
            std::thread::yield_now(); // another thread of ours is installing it
            continue;
        }
        if INSTALL
            .compare_exchange(state, me << 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            continue;
        }
        crate::crash_point!("sigbus.installing");
        install();
        INSTALL.store(1, Ordering::Release);
        return;
    }
}

/// A registered mapping; unregistered on drop.
#[derive(Debug)]
pub struct Registration {
    /// The entry, if the table had room.
    entry: Option<usize>,
    /// The mapping's generation: its entry's, or, unregistered, a word of its own (leaked:
    /// 8 bytes per mapping beyond [`CAPACITY`], never broken).
    generation: &'static AtomicU64,
}

impl Registration {
    /// The fork generation the mapping's views belong to, [`BROKEN`] once a truncation of
    /// the file broke it (see the module's documentation); the mapping's for as long as the
    /// registration lives.
    #[inline]
    pub fn generation(&self) -> &'static AtomicU64 {
        self.generation
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(i) = self.entry {
            // Release: pairs with the Acquire claim of the entry's next registration.
            ENTRIES[i].start.store(0, Ordering::Release);
        }
    }
}

/// Registers the mapping `[start, start + len)`, whose views belong to fork generation
/// `generation` (installing the handler first, once).
pub fn register(start: *const u8, len: usize, generation: u64) -> Registration {
    ensure_installed();
    let start = start as usize;
    if start != 0 && len != 0 {
        for (i, e) in ENTRIES.iter().enumerate() {
            // Acquire: pairs with the Release of the registration that freed the entry.
            if e.start
                .compare_exchange(0, usize::MAX, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                e.generation.store(generation, Ordering::Relaxed);
                e.len.store(len, Ordering::Relaxed);
                // Release: the handler that reads `start` (Acquire) sees `len` with it; the
                // views that read `generation` get it from this thread (through the mapping's
                // construction) or after it.
                e.start.store(start, Ordering::Release);
                return Registration {
                    entry: Some(i),
                    generation: &e.generation,
                };
            }
        }
    }
    Registration {
        entry: None,
        generation: Box::leak(Box::new(AtomicU64::new(generation))),
    }
}

/// Our handler's disposition.
fn ours() -> libc::sigaction {
    // SAFETY: a zeroed sigaction is a valid value; `sa_sigaction` is a handler of the
    // SA_SIGINFO signature; the mask is initialised with sigemptyset.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigbus as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut action.sa_mask);
        action
    }
}

fn install() {
    // SAFETY: PREVIOUS is written only here, by the one installer of this process (see
    // `INSTALL`), before our handler (its only reader) is installed — or not at all when our
    // handler is installed already (a parent forked us half-way through its installation:
    // its PREVIOUS, written before, is ours too).
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut current) != 0 {
            return; // not installed: a truncation kills, as without us
        }
        if current.sa_sigaction == on_sigbus as *const () as usize {
            return;
        }
        PREVIOUS.0.get().cast::<libc::sigaction>().write(current);
        libc::sigaction(libc::SIGBUS, &ours(), std::ptr::null_mut());
    }
}

/// The handler: see the module's documentation. Async-signal-safe: atomics of a static table,
/// `mmap`, `sigaction` and `raise` only.
extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    // A fault has a positive code (BUS_ADRERR...); a signal sent by `kill`, `tgkill` or
    // `sigqueue` has SI_USER or a negative one, and its "address" is the sender's pid and uid.
    let fault = code > 0;
    if fault && repair(addr) {
        return; // the faulting access is made again, on the zero pages
    }
    // Not ours (or not repairable): the previous disposition.
    // SAFETY: PREVIOUS was written before this handler was installed and never since.
    let previous = unsafe { &*PREVIOUS.0.get().cast::<libc::sigaction>() };
    let handler = previous.sa_sigaction;
    if handler == libc::SIG_IGN && !fault {
        return; // ignored, as before us
    }
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // SAFETY: restoring the default disposition and raising again are async-signal-safe.
        // A fault is then made again by the returning access and takes the default action;
        // a sent signal is raised again.
        unsafe {
            let mut dfl: libc::sigaction = std::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigemptyset(&mut dfl.sa_mask);
            libc::sigaction(libc::SIGBUS, &dfl, std::ptr::null_mut());
            if !fault {
                libc::raise(libc::SIGBUS);
            }
        }
        return;
    }
    if previous.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed with SA_SIGINFO: this is its signature.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(handler) };
        f(sig, info, context);
    } else {
        // SAFETY: a handler installed without SA_SIGINFO takes the signal number only.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        f(sig);
    }
    if !fault {
        // A sent signal, handled: the previous handler may have reset the disposition (Rust's
        // own guard-page handler does, for any address but a guard page's, relying on the
        // fault coming back); ours stays. (After a fault it may not: that fault must take
        // the default action when the access is made again.)
        // SAFETY: sigaction is async-signal-safe; `ours()` is a valid disposition.
        unsafe { libc::sigaction(libc::SIGBUS, &ours(), std::ptr::null_mut()) };
    }
}

/// If `addr` lies in a registered mapping: maps private zero pages over it and marks it
/// broken; true if so. Async-signal-safe: the table's atomics and `mmap`.
fn repair(addr: usize) -> bool {
    for e in &ENTRIES {
        // Acquire: pairs with `register`'s Release store of `start`.
        let start = e.start.load(Ordering::Acquire);
        if start == 0 || start == usize::MAX {
            continue;
        }
        let len = e.len.load(Ordering::Relaxed);
        if addr < start || addr - start >= len {
            continue;
        }
        // Broken first: a thread of ours that finds the zero pages (once mapped, below) must
        // find the mapping broken too, or it could take a grant made in them for one.
        // Relaxed: its readers are this process's threads, whose views read it Relaxed on
        // every call; the remap below shoots down the TLB of every CPU that runs one of them
        // (an interrupt, a full barrier there) before any of them can reach the zero pages,
        // so a thread that reads them reads this store too.
        e.generation.store(BROKEN, Ordering::Relaxed);
        // SAFETY: `[start, start + len)` is a live mapping of ours (registered while mapped,
        // unregistered before it is unmapped); replacing it with private anonymous pages of
        // the same protection keeps every reference into it valid memory.
        let p = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        return p != libc::MAP_FAILED; // if it failed, the fault is fatal, as without us
    }
    false
}
