//! Shared futex wait and wake on the low 32 bits of a 64-bit slot word.
//!
//! Never `FUTEX_PRIVATE_FLAG`: waiters and wakers are in different processes, and a private
//! futex silently fails to wake across them. See `futex(2)`.

use crate::primitive::AtomicU64;

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

/// `FUTEX_WAKE` of one waiter on `word` (there is at most one: the ticket's owner).
pub fn wake(word: &AtomicU64) {
    // SAFETY: as in `wait`; FUTEX_WAKE only uses the address as a key.
    unsafe {
        libc::syscall(libc::SYS_futex, futex_addr(word), libc::FUTEX_WAKE, 1i32);
    }
}
