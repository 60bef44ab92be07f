//! Helpers of the crash and chaos suites: a seeded generator, the monotonic clock shared by
//! processes, and what /proc says about a process.

/// `CLOCK_MONOTONIC` in nanoseconds (the clock of `Instant`), comparable across processes.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(r, 0, "clock_gettime");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The state letter of process `pid` in /proc (`None`: no such process).
pub fn proc_state(pid: u32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    rest.trim_start().chars().next()
}

/// Whether process `pid` is gone (or a zombie: dead, not yet reaped).
pub fn pid_dead(pid: u32) -> bool {
    matches!(proc_state(pid), None | Some('Z' | 'X'))
}

/// Whether process `pid` is stopped (SIGSTOP).
pub fn pid_stopped(pid: u32) -> bool {
    matches!(proc_state(pid), Some('T' | 't'))
}

pub fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid as libc::pid_t, sig) };
}

/// A small xorshift generator (no dependency), seeded from `FL_SEED` or the clock.
pub struct Rng(u64);

impl Rng {
    pub fn new(test: &str) -> Rng {
        let seed = std::env::var("FL_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| mono_ns() ^ u64::from(std::process::id()) << 32);
        eprintln!("[{test}] seed {seed} (set FL_SEED to reproduce)");
        Rng(seed | 1)
    }

    pub fn from_seed(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
