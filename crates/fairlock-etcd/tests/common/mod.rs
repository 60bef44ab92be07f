//! Helpers of the integration tests: the real cluster (`cluster`), and worker processes (the
//! test binary re-executed in a role, the way a user's separate program would use the lock).

#![allow(dead_code)] // each test binary uses a different subset

pub mod cluster;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use fairlock_etcd::{Error, EtcdLock};

/// The environment variable naming a re-executed test binary's role.
pub const ROLE: &str = "FAIRLOCK_ETCD_TEST_ROLE";

/// The role, if this process is a worker.
pub fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

/// A worker's required environment variable.
pub fn env(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| panic!("worker: missing env var {key}"))
}

/// Starts this test binary again as a worker running test `test` in role `role`.
pub fn spawn_worker(test: &str, role: &str, vars: &[(&str, String)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(ROLE, role);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn a worker")
}

/// A fresh temporary directory for a test's files.
pub fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "fairlock-etcd-test-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Waits up to `limit` for `path` to exist and hold a line; its content.
pub fn wait_file(path: &Path, limit: Duration) -> String {
    let start = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && s.ends_with('\n')
        {
            return s;
        }
        assert!(
            start.elapsed() < limit,
            "{} did not appear within {limit:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Writes `text` to `path` atomically (a rename), so that `wait_file` sees all or nothing.
pub fn put_file(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Connects with a lease of `ttl_s` seconds.
pub fn connect(endpoints: &[String], name: &str, ttl_s: u64) -> EtcdLock {
    EtcdLock::options()
        .lease_ttl(Duration::from_secs(ttl_s))
        .request_timeout(Duration::from_secs(2))
        .connect(endpoints, name)
        .unwrap_or_else(|e| panic!("connect to {endpoints:?}: {e}"))
}

/// Waits until the lock has `n` waiters, as etcd reports it.
pub fn wait_waiters(lock: &EtcdLock, n: usize, limit: Duration) {
    let start = Instant::now();
    loop {
        let s = lock.status().unwrap();
        if s.waiters.len() == n {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "{} waiters, not {n}, after {limit:?}: {s:?}",
            s.waiters.len()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A short name for an error's variant, for the files workers write.
pub fn kind(e: &Error) -> &'static str {
    match e {
        Error::WouldBlock { .. } => "WouldBlock",
        Error::Timeout { .. } => "Timeout",
        Error::LockLost { .. } => "LockLost",
        Error::Unavailable { .. } => "Unavailable",
        Error::InvalidEndpoint { .. } => "InvalidEndpoint",
        Error::InvalidName { .. } => "InvalidName",
        Error::InvalidOption { .. } => "InvalidOption",
        Error::Corrupt { .. } => "Corrupt",
        Error::Etcd { .. } => "Etcd",
        _ => "other",
    }
}

/// `Ok` or the error's kind.
pub fn outcome(r: &Result<(), Error>) -> String {
    match r {
        Ok(()) => "Ok".into(),
        Err(e) => kind(e).into(),
    }
}
