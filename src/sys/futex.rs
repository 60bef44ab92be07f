//! Shared futex wait and wake on the low 32 bits of a 64-bit slot word.
//!
//! Never `FUTEX_PRIVATE_FLAG`: waiters and wakers are in different processes, and a private
//! futex silently fails to wake across them. See `futex(2)`.

use crate::primitive::{AtomicU32, AtomicU64};

/// The address the kernel compares: the low (first, on little-endian) 32 bits of the word.
#[inline]
fn futex_addr(word: &AtomicU64) -> *const u32 {
    word.as_ptr().cast::<u32>().cast_const()
}

/// `FUTEX_WAIT_BITSET` with an absolute `CLOCK_MONOTONIC` deadline: sleeps while the low 32
/// bits of `word` equal `expected`, until a wake, `until_ns`, a signal or spuriously. Every
/// outcome (woken, `EAGAIN`, `ETIMEDOUT`, `EINTR`) just returns; callers re-check the word.
pub fn wait(word: &AtomicU64, expected: u32, until_ns: Option<u64>) {
    let ts = until_ns.map(|ns| libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(core::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `futex_addr` points into a live `AtomicU64` (aligned to 8, so its first four bytes
    // are an aligned u32); the kernel only reads it. `ts_ptr` is null or points to `ts`, alive
    // for the call. FUTEX_WAIT_BITSET without FUTEX_CLOCK_REALTIME takes an absolute
    // CLOCK_MONOTONIC time; the bitset must be non-zero (match any).
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            futex_addr(word),
            libc::FUTEX_WAIT_BITSET,
            expected,
            ts_ptr,
            core::ptr::null::<u32>(),
            libc::FUTEX_BITSET_MATCH_ANY,
        );
    }
}

/// Set once `futex_waitv` was refused (`ENOSYS` before Linux 5.16, `EPERM` or `EACCES` under
/// a seccomp profile that predates it, `EINVAL`): from then on the process does not watch
/// beacons ([`waitv_works`]). A word the kernel could not read, or a lack of memory, is not a
/// refusal.
static WAITV_BROKEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether `futex_waitv` can be used (it has not failed in this process).
#[inline]
pub fn waitv_works() -> bool {
    !WAITV_BROKEN.load(std::sync::atomic::Ordering::Relaxed)
}

/// `futex_waitv` on two shared 32-bit futex words — the low half of `word` (expected
/// `expected`) and `beacon` (expected `beacon_expected`) — and the caller's `bell` if any
/// (expected 0: see [`wait_ringing`]), until one changes and is woken, `until_ns` (absolute
/// `CLOCK_MONOTONIC`) passes, a signal or spuriously. Every outcome just returns; callers
/// re-check the words. If the call is refused (see [`waitv_works`]) it remembers that and waits
/// on `word` alone for at most 1 ms, so that the caller neither spins (a refused call
/// returning at once would burn a CPU) nor misses a death or a bell for long.
pub fn wait_watching(
    word: &AtomicU64,
    expected: u32,
    beacon: &AtomicU32,
    beacon_expected: u32,
    bell: Option<&AtomicU32>,
    until_ns: Option<u64>,
) {
    let beacon = (beacon.as_ptr().cast_const(), beacon_expected);
    match bell {
        Some(b) => wait_any(
            word,
            expected,
            &[beacon, (b.as_ptr().cast_const(), 0)],
            until_ns,
        ),
        None => wait_any(word, expected, &[beacon], until_ns),
    }
}

/// Sleeps while the low half of `word` is `expected` and `bell` is 0: until a wake of either,
/// `until_ns`, a signal or spuriously (see [`wait_watching`] for a refused `futex_waitv`). A
/// bell is a process's own word that some thread sets non-zero, then wakes, to call a waiter
/// back from a wait on a word it must not write (an abandoned asynchronous acquisition:
/// `raw::acquire_async`); set before the sleep, it makes the sleep return at once.
pub fn wait_ringing(word: &AtomicU64, expected: u32, bell: &AtomicU32, until_ns: Option<u64>) {
    wait_any(word, expected, &[(bell.as_ptr().cast_const(), 0)], until_ns);
}

/// `futex_waitv` on the low half of `word` (expected `expected`) and each of `others`
/// (address, expected value): see [`wait_watching`].
fn wait_any(word: &AtomicU64, expected: u32, others: &[(*const u32, u32)], until_ns: Option<u64>) {
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct FutexWaitv {
        val: u64,
        uaddr: u64,
        flags: u32,
        reserved: u32,
    }
    /// `FUTEX2_SIZE_U32`, and no `FUTEX2_PRIVATE`: the words are shared across processes.
    const FUTEX2_SIZE_U32: u32 = 0x02;
    let entry = |uaddr: *const u32, val: u32| FutexWaitv {
        val: u64::from(val),
        uaddr: uaddr as u64,
        flags: FUTEX2_SIZE_U32,
        reserved: 0,
    };
    let mut w = [entry(futex_addr(word), expected); 3];
    let n = 1 + others.len().min(w.len() - 1);
    for (e, &(uaddr, val)) in w[1..n].iter_mut().zip(others) {
        *e = entry(uaddr, val);
    }
    let ts = until_ns.map(|ns| libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(core::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `n` valid entries for 4-byte aligned words that stay mapped during the call (the
    // slot word in the lock file's mapping, a beacon in a segment its `Attachment` keeps
    // attached, a bell its caller keeps alive); the kernel only reads them. `ts_ptr` is null or points to `ts`,
    // alive for the call; the timeout is absolute on CLOCK_MONOTONIC.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex_waitv,
            w.as_ptr(),
            n as u32,
            0u32,
            ts_ptr,
            libc::CLOCK_MONOTONIC,
        )
    };
    if r >= 0 {
        return;
    }
    let errno = std::io::Error::last_os_error().raw_os_error();
    let now = super::clock::monotonic_ns();
    let cap = now.saturating_add(1_000_000);
    let cap = until_ns.map_or(cap, |u| u.min(cap));
    match errno {
        Some(libc::EINTR | libc::EAGAIN | libc::ETIMEDOUT) => {}
        // The call itself is refused: not in this kernel (before Linux 5.16), or forbidden (a
        // seccomp profile that predates it), or our flags are not understood.
        Some(libc::ENOSYS | libc::EPERM | libc::EACCES | libc::EINVAL) => {
            WAITV_BROKEN.store(true, std::sync::atomic::Ordering::Relaxed);
            wait(word, expected, Some(cap));
        }
        // A word the kernel could not read (`EFAULT`): a page of the lock file that a
        // truncation took away between our last look at the word and the call (our own loads
        // of it would now fault and be mapped over: `sys::sigbus`); or the kernel short of
        // memory for the call (`ENOMEM`). Neither is a refusal of `futex_waitv`: the process
        // goes on watching beacons. No futex call on an unreadable word can sleep, so sleep
        // on the clock, at most 1 ms, and let the caller look again.
        _ => super::clock::sleep_until_ns(cap),
    }
}

/// `FUTEX_WAKE` of every waiter on a 32-bit word (a beacon whose owner died: the kernel wakes
/// one of its watchers, who wakes the others). Needs only read access to the word.
pub fn wake_all_u32(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE only uses the address as a key; the word stays mapped.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

/// `FUTEX_WAKE` of every waiter on `word`. Usually there is one, the ticket's owner; but a
/// waiter of an earlier lap of the slot may still be queued on the same word (a thread
/// stopped in its wait while its ticket was skipped), and waking only one could wake that one
/// and leave the owner asleep (behind a beacon, an untimed wait: a stall until the next
/// wake-up).
pub fn wake(word: &AtomicU64) {
    // SAFETY: as in `wait`; FUTEX_WAKE only uses the address as a key.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            futex_addr(word),
            libc::FUTEX_WAKE,
            i32::MAX,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32 as StdU32, Ordering::SeqCst};
    use std::time::{Duration, Instant};

    /// A wake reaches every thread waiting on the word: a stale waiter of an earlier lap queued
    /// on the same slot word (a thread stopped in its wait) must not take the only wake-up and
    /// leave the ticket's owner asleep (`chaos_leases` stalled 10 s on it, once beacon waits
    /// had no timer).
    #[test]
    #[cfg_attr(
        miri,
        ignore = "real futexes on the low half of an AtomicU64: Miri rejects mixed-size atomics"
    )]
    fn a_wake_reaches_every_waiter_of_the_word() {
        let word = Arc::new(AtomicU64::new(7));
        let woken = Arc::new(StdU32::new(0));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (word, woken) = (Arc::clone(&word), Arc::clone(&woken));
                std::thread::spawn(move || {
                    let limit = super::super::clock::monotonic_ns() + 3_000_000_000;
                    while word.load(SeqCst) == 7 && super::super::clock::monotonic_ns() < limit {
                        wait(&word, 7, Some(limit));
                    }
                    woken.fetch_add(1, SeqCst);
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(200)); // both queued in FUTEX_WAIT
        let started = Instant::now();
        word.store(8, SeqCst);
        wake(&word);
        for t in threads {
            t.join().unwrap();
        }
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "one waiter slept until its timeout: {:?}",
            started.elapsed()
        );
        assert_eq!(woken.load(SeqCst), 2);
    }

    /// A word the kernel cannot read (a page of a shared file mapping past the file's end, as
    /// after a truncation between a waiter's look and its call) makes `futex_waitv` fail with
    /// `EFAULT`: the wait sleeps on the clock instead (no spin) and the process keeps watching
    /// beacons — it is not a refusal of the call.
    #[test]
    #[cfg_attr(miri, ignore = "system calls on a file mapping")]
    fn a_word_the_kernel_cannot_read_does_not_stop_beacon_watching() {
        let dir = std::env::temp_dir().join(format!("fairlock-efault-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        file.set_len(4096).unwrap();
        let map = memmap2::MmapRaw::map_raw(&file).unwrap();
        file.set_len(0).unwrap();
        // SAFETY: an aligned address inside a live mapping; only the kernel reads it (and
        // fails: the page is past the file's end), never this thread.
        let word = unsafe { &*map.as_ptr().cast::<AtomicU64>() };
        let beacon = AtomicU32::new(0);
        // Where `futex_waitv` is refused (before Linux 5.16, an old seccomp profile) there is
        // nothing to keep: a first wait on a readable word tells.
        let readable = AtomicU64::new(1);
        wait_watching(&readable, 0, &beacon, 0, None, Some(0));
        if !waitv_works() {
            return;
        }
        let started = Instant::now();
        let until = super::super::clock::monotonic_ns() + 20_000_000;
        wait_watching(word, 0, &beacon, 0, None, Some(until));
        let took = started.elapsed();
        assert!(
            waitv_works(),
            "an unreadable word made the process stop watching beacons"
        );
        assert!(
            took >= Duration::from_micros(900),
            "the wait on an unreadable word returned at once ({took:?}): its caller would spin"
        );
        drop(map);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
