//! Helpers of the crash and chaos suites: a directory with a lock file, shared words and
//! workers to spawn into it, a seeded generator, the monotonic clock shared by processes, and
//! what /proc says about a process.

use super::{Shm, TempDir, Worker};

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

/// A test's directory: the lock file `lock`, the shared words `shm`, and the workers spawned
/// into it (the test binary re-run as test `entry` with a role; they find both through
/// `FL_LOCK` and `FL_SHM`).
pub struct Env {
    pub dir: TempDir,
    entry: &'static str,
    base: Vec<(&'static str, String)>,
    pub spawned: usize,
}

impl Env {
    /// A fresh directory for `test` with `shm_words` shared words; workers run as `entry`.
    pub fn new(test: &'static str, entry: &'static str, shm_words: usize) -> (Env, Shm) {
        let dir = TempDir::new(test);
        let shm = Shm::create(&dir.join("shm"), shm_words);
        let base = vec![
            ("FL_LOCK", dir.join("lock").display().to_string()),
            ("FL_SHM", dir.join("shm").display().to_string()),
        ];
        let env = Env {
            dir,
            entry,
            base,
            spawned: 0,
        };
        (env, shm)
    }

    /// The lock file.
    pub fn path(&self) -> std::path::PathBuf {
        self.dir.join("lock")
    }

    /// Spawns a worker with `role` and `envs` on top of the base environment.
    pub fn spawn(&mut self, role: &str, envs: &[(&str, String)]) -> Worker {
        self.spawned += 1;
        let mut all = self.base.clone();
        all.extend(envs.iter().cloned());
        Worker::spawn(
            self.dir.path(),
            self.entry,
            role,
            &format!("{role}-{}", self.spawned),
            &all,
        )
    }
}
