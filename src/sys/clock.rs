//! Clocks: `CLOCK_MONOTONIC` for deadlines (the clock futex deadlines use) and
//! `CLOCK_MONOTONIC_COARSE` for cheap informational time stamps. See `clock_gettime(2)`.

fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes it. It cannot fail
    // for these clock ids, which every supported kernel has.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// Nanoseconds of `CLOCK_MONOTONIC`.
#[inline]
pub fn monotonic_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// Nanoseconds of `CLOCK_MONOTONIC_COARSE` (a few ms resolution, a fraction of the cost).
#[inline]
pub fn coarse_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC_COARSE)
}

/// Sleeps until `CLOCK_MONOTONIC` reaches `until_ns` (or a signal: the caller looks again).
pub fn sleep_until_ns(until_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (until_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (until_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `ts` is a valid timespec for the call; with TIMER_ABSTIME nothing is written to
    // the remainder, which is null.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            core::ptr::null_mut(),
        );
    }
}
