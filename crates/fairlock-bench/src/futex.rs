//! Raw futex calls for the benches' floors and waiter designs: shared (not private) futexes,
//! as a lock file's words are (the words live in `MAP_SHARED` mappings). The kernel only reads
//! the words.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// `FUTEX_WAIT` while `*word == expected`, for at most `timeout` (none: until woken); returns
/// on a wake, the timeout, a signal, a changed word or spuriously (callers look again).
pub fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|d| libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned word the kernel only reads; `ts_ptr` is null or points
    // to `ts`, alive for the call.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            ts_ptr,
        );
    }
}

/// `FUTEX_WAKE` of up to `n` waiters on `word`.
pub fn wake(word: &AtomicU32, n: i32) {
    // SAFETY: FUTEX_WAKE only uses the address as a key.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, n);
    }
}

/// `struct futex_waitv` (linux/futex.h).
#[repr(C)]
struct WaitV {
    val: u64,
    uaddr: u64,
    flags: u32,
    reserved: u32,
}

/// `FUTEX2_SIZE_U32`, and no `FUTEX2_PRIVATE`: shared futexes.
const FUTEX2_SIZE_U32: u32 = 0x02;

/// The most words one `futex_waitv` takes.
pub const WAITV_MAX: usize = 128;

/// `futex_waitv` on each `(word, expected)` of `words` (at most [`WAITV_MAX`]), for at most
/// `timeout`: returns when one was woken or differed, at the timeout, on a signal or
/// spuriously.
pub fn waitv(words: &[(&AtomicU32, u32)], timeout: Option<Duration>) {
    assert!(
        words.len() <= WAITV_MAX,
        "futex_waitv takes {WAITV_MAX} words"
    );
    let v: Vec<WaitV> = words
        .iter()
        .map(|&(w, val)| WaitV {
            val: u64::from(val),
            uaddr: w.as_ptr() as u64,
            flags: FUTEX2_SIZE_U32,
            reserved: 0,
        })
        .collect();
    // `futex_waitv`'s timeout is absolute (CLOCK_MONOTONIC).
    let until = timeout.map(|d| {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: writes the current time into `now`.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
        let ns = now.tv_nsec as u64 + u64::from(d.subsec_nanos());
        libc::timespec {
            tv_sec: now.tv_sec + d.as_secs() as libc::time_t + (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as libc::c_long,
        }
    });
    let until_ptr = until
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `v` is an array of `v.len()` `struct futex_waitv` naming live, aligned words
    // (borrowed for the call) that the kernel only reads; `until_ptr` is null or points to `until`, alive for the call.
    unsafe {
        libc::syscall(
            libc::SYS_futex_waitv,
            v.as_ptr(),
            v.len() as libc::c_uint,
            0,
            until_ptr,
            libc::CLOCK_MONOTONIC,
        );
    }
}
