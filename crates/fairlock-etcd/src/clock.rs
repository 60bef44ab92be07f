//! The clock lease deadlines are kept on.

/// `CLOCK_BOOTTIME` in nanoseconds: monotonic, and it goes on counting while the machine is
/// suspended (`CLOCK_MONOTONIC` does not), as the etcd servers' clocks do while our lease
/// runs out there.
pub(crate) fn boottime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_BOOTTIME exists on every Linux this
    // crate supports (2.6.39+), so the call cannot fail.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    debug_assert_eq!(rc, 0);
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn advances() {
        let a = super::boottime_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = super::boottime_ns();
        assert!(b >= a + 2_000_000, "{a} {b}");
    }
}
