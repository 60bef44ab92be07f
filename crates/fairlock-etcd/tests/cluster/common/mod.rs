//! Helpers of the integration tests: the real cluster (`cluster`), and worker processes (the
//! test binary re-executed in a role, the way a user's separate program would use the lock).

#![allow(dead_code)] // not every helper is used by every build of the tests

pub mod cluster;
pub mod proxy;
pub mod secure;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use fairlock_etcd::{AsyncEtcdLock, Error, EtcdLock, Status};

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

/// Starts this test binary again as a worker running test `test` (its full name,
/// `module::name`) in role `role`. Panics if the binary has no such test: a worker of a
/// misnamed test would run nothing and exit 0.
pub fn spawn_worker(test: &str, role: &str, vars: &[(&str, String)]) -> Child {
    let exe = std::env::current_exe().unwrap();
    let listed = Command::new(&exe)
        .args([test, "--exact", "--list"])
        .env_remove(ROLE)
        .output()
        .expect("list the tests of this binary");
    assert!(
        String::from_utf8_lossy(&listed.stdout)
            .lines()
            .any(|l| l == format!("{test}: test")),
        "no test named {test:?} in {}: a worker of it would run nothing",
        exe.display()
    );
    let mut cmd = Command::new(exe);
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

/// A runtime for the async tests (two workers: a test's tasks and the clients' keep-alives).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Connects for async use with a lease of `ttl_s` seconds and the given request timeout.
pub async fn connect_async(
    endpoints: &[String],
    name: &str,
    ttl_s: u64,
    request_timeout: Duration,
) -> AsyncEtcdLock {
    AsyncEtcdLock::options()
        .lease_ttl(Duration::from_secs(ttl_s))
        .request_timeout(request_timeout)
        .connect_async(endpoints, name)
        .await
        .unwrap_or_else(|e| panic!("connect to {endpoints:?}: {e}"))
}

/// How many queue keys (the holder's and the waiters') etcd has.
pub fn keys(s: &Status) -> usize {
    s.waiters.len() + usize::from(s.holder.is_some())
}

/// Polls the lock's status until `done` holds, for up to `limit`: `Ok` with that status, or
/// `Err` with the last one seen.
pub async fn until_status(
    lock: &AsyncEtcdLock,
    limit: Duration,
    done: impl Fn(&Status) -> bool,
) -> Result<Status, Status> {
    let start = Instant::now();
    loop {
        let s = lock.status().await.unwrap();
        if done(&s) {
            return Ok(s);
        }
        if start.elapsed() > limit {
            return Err(s);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A short description of an acquisition's outcome, for assertion messages.
pub fn show<T>(r: &Result<T, Error>) -> String {
    match r {
        Ok(_) => "Ok".into(),
        Err(e) => format!("{}: {e}", kind(e)),
    }
}

/// The message of a caught panic.
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "(no message)".into())
}

/// Runs independent scenarios one after the other, each to its end even if another failed,
/// then fails naming every one that did.
pub fn each(scenarios: &[(&str, &dyn Fn())]) {
    let failed: Vec<String> = scenarios
        .iter()
        .filter_map(|(name, f)| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
                .err()
                .map(|p| format!("{name}: {}", panic_message(p.as_ref())))
        })
        .collect();
    assert!(failed.is_empty(), "failed:\n{}", failed.join("\n"));
}

/// One async scenario of a test.
pub type Scenario = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Runs independent async scenarios side by side (each a task), each to its end even if
/// another failed, then fails naming every one that did.
pub async fn side_by_side(scenarios: Vec<(&str, Scenario)>) {
    let tasks: Vec<_> = scenarios
        .into_iter()
        .map(|(name, f)| (name, tokio::spawn(f)))
        .collect();
    let mut failed = Vec::new();
    for (name, t) in tasks {
        if let Err(e) = t.await {
            let why = if e.is_panic() {
                panic_message(e.into_panic().as_ref())
            } else {
                e.to_string()
            };
            failed.push(format!("{name}: {why}"));
        }
    }
    assert!(failed.is_empty(), "failed:\n{}", failed.join("\n"));
}
