//! Helpers shared by the integration tests: unique temporary directories, re-executing the
//! test binary as worker processes, and a small shared-memory area (a plain file mapped with
//! `memmap2::MmapRaw`) for counters and logs visible to every process.
//!
//! A multi-process test looks like this:
//!
//! ```ignore
//! #[test]
//! fn my_test() {
//!     if let Some(role) = common::role() {
//!         // worker: read common::env("...") and do the work; panic on failure
//!         return;
//!     }
//!     // parent: set up, common::Worker::spawn("my_test", ...), wait_all(...)
//! }
//! ```

#![allow(dead_code)] // every test binary uses a different subset

pub mod chaos;
pub mod witness;

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use memmap2::MmapRaw;

/// Environment variable naming the role a re-executed test binary plays.
pub const ROLE: &str = "FAIRLOCK_TEST_ROLE";

/// The worker role, if this process is a worker.
pub fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

/// A required environment variable of a worker.
pub fn env(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| panic!("worker: missing env var {key}"))
}

/// A required environment variable of a worker, parsed.
pub fn env_parse<T: std::str::FromStr>(key: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    env(key)
        .parse()
        .unwrap_or_else(|e| panic!("worker: bad env var {key}: {e:?}"))
}

/// A temporary directory unique to one test (and process), removed on drop.
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// A fresh directory whose name contains `name`.
    pub fn new(name: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = std::env::temp_dir().join(format!(
            "fairlock-it-{name}-{}-{n}-{nanos}",
            std::process::id()
        ));
        fs::create_dir_all(&path).expect("create temp dir");
        TempDir { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// A shared-memory area of `words` u64 words, backed by a plain file: every process that maps
/// the same file sees the same words. Word 0 is conventionally a counter / log index.
pub struct Shm {
    map: MmapRaw,
    words: usize,
    _file: File,
}

impl Shm {
    /// Creates (zero-filled) the backing file with room for `words` words and maps it.
    pub fn create(path: &Path, words: usize) -> Shm {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .expect("create shm file");
        file.set_len((words * 8) as u64).expect("size shm file");
        Self::map(file, words)
    }

    /// Maps an existing backing file (in a worker).
    pub fn open(path: &Path) -> Shm {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .expect("open shm file");
        let words = file.metadata().expect("stat shm").len() as usize / 8;
        Self::map(file, words)
    }

    fn map(file: File, words: usize) -> Shm {
        let map = MmapRaw::map_raw(&file).expect("map shm file");
        assert!(map.len() >= words * 8);
        Shm {
            map,
            words,
            _file: file,
        }
    }

    /// Number of words.
    pub fn len(&self) -> usize {
        self.words
    }

    fn ptr(&self, i: usize) -> *mut u64 {
        assert!(i < self.words, "shm index {i} out of range {}", self.words);
        // The mapping is page aligned, so every word is 8-aligned.
        self.map.as_mut_ptr().cast::<u64>().wrapping_add(i)
    }

    /// Word `i` as an atomic.
    pub fn atomic(&self, i: usize) -> &AtomicU64 {
        // SAFETY: the pointer is in bounds (checked in `ptr`), 8-aligned, lives as long as
        // `self`, and any bit pattern is a valid AtomicU64.
        unsafe { &*(self.ptr(i) as *const AtomicU64) }
    }

    /// A plain (non-atomic, volatile) read of word `i`. Only meaningful under the lock.
    pub fn read(&self, i: usize) -> u64 {
        // SAFETY: in bounds and aligned (see `ptr`); the mapping is live. Concurrent unsynchronised
        // access is what the tests check the lock prevents; volatile keeps the compiler honest.
        unsafe { self.ptr(i).read_volatile() }
    }

    /// A plain (non-atomic, volatile) write of word `i`. Only meaningful under the lock.
    pub fn write(&self, i: usize, v: u64) {
        // SAFETY: as in `read`.
        unsafe { self.ptr(i).write_volatile(v) }
    }

    /// All words, read with plain volatile loads (after the workers finished).
    pub fn snapshot(&self) -> Vec<u64> {
        (0..self.words).map(|i| self.read(i)).collect()
    }
}

/// The increment that can lose updates without the lock: read, dawdle, write.
pub fn racy_increment(shm: &Shm, i: usize, dawdle: u32) {
    let v = shm.read(i);
    for _ in 0..dawdle {
        std::hint::spin_loop();
    }
    if dawdle > 0 && v.is_multiple_of(7) {
        std::thread::yield_now();
    }
    shm.write(i, v + 1);
}

/// Appends `value` to the log kept in `shm`: word 0 is the number of entries, entry `k` is
/// word `k + 1`. Must be called under the lock. Returns the entry's index.
pub fn log_append(shm: &Shm, value: u64) -> usize {
    let n = shm.read(0) as usize;
    shm.write(n + 1, value);
    shm.write(0, (n + 1) as u64);
    n
}

/// The log written by [`log_append`].
pub fn log_entries(shm: &Shm) -> Vec<u64> {
    let n = shm.read(0) as usize;
    assert!(n < shm.len(), "log overflowed: {n} entries");
    (1..=n).map(|i| shm.read(i)).collect()
}

/// A worker process: this test binary re-executed to run one test with a role.
pub struct Worker {
    pub name: String,
    pub child: Child,
    stderr_path: PathBuf,
    pub status: Option<ExitStatus>,
}

impl Worker {
    /// Spawns `current_exe() <test> --exact --nocapture --test-threads=1` with the role and
    /// `envs`. The worker's stderr goes to a file in `dir`, shown if it fails. Panics if this
    /// binary has no test named `test` (its worker would run nothing and exit 0).
    pub fn spawn(
        dir: &Path,
        test: &str,
        role: &str,
        name: &str,
        envs: &[(&str, String)],
    ) -> Worker {
        let exe = std::env::current_exe().expect("current_exe");
        assert_test_exists(&exe, test);
        let stderr_path = dir.join(format!("worker-{name}.stderr"));
        let stderr = File::create(&stderr_path).expect("create worker stderr file");
        let mut cmd = Command::new(exe);
        cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        for (k, v) in envs {
            cmd.env(k, v);
        }
        // A worker starts with the default action of the signals tests send it, whatever the
        // test run inherited: a run started in the background by a non-interactive shell (or
        // under `nohup`) ignores SIGINT, SIGQUIT or SIGHUP, and a worker killed with one of
        // them would otherwise live on and hang its test.
        // SAFETY: between fork and exec the closure only calls `signal`, which is
        // async-signal-safe, and allocates nothing.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP, libc::SIGTERM] {
                    libc::signal(sig, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("spawn worker");
        Worker {
            name: name.to_string(),
            child,
            stderr_path,
            status: None,
        }
    }

    /// The worker's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the worker wrote to stderr so far.
    pub fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Polls for exit; true once it exited.
    pub fn poll(&mut self) -> bool {
        if self.status.is_none()
            && let Some(s) = self.child.try_wait().expect("try_wait")
        {
            self.status = Some(s);
        }
        self.status.is_some()
    }

    fn kill(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }
}

/// Panics unless the test binary `exe` has a test named exactly `test`: a worker spawned for a
/// name that matches no test runs nothing and exits 0, as if it had done its work. Asked once
/// per name in each process.
fn assert_test_exists(exe: &Path, test: &str) {
    static KNOWN: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
    if known.iter().any(|t| t == test) {
        return;
    }
    let out = Command::new(exe)
        .args([test, "--exact", "--list"])
        .env_remove(ROLE)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .expect("list the tests of this binary");
    let want = format!("{test}: test");
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l == want),
        "no test named {test:?} in {}: a worker of it would run nothing",
        exe.display()
    );
    known.push(test.to_string());
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Never leave a worker behind (a failing test may unwind past its wait).
        self.kill();
    }
}

/// Waits until every worker exited, at most `limit` in total; kills them all and panics if the
/// limit passes or any worker failed (showing its stderr).
pub fn wait_all(workers: &mut [Worker], limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let mut all = true;
        for w in workers.iter_mut() {
            if !w.poll() {
                all = false;
            } else if !w.status.unwrap().success() {
                let (name, status, err) = (w.name.clone(), w.status.unwrap(), w.stderr());
                for o in workers.iter_mut() {
                    o.kill();
                }
                panic!("worker {name} failed ({status}):\n{err}");
            }
        }
        if all {
            return;
        }
        if Instant::now() >= deadline {
            let stuck: Vec<String> = workers
                .iter_mut()
                .filter_map(|w| (!w.poll()).then(|| format!("{} (pid {})", w.name, w.pid())))
                .collect();
            let errs: Vec<String> = workers
                .iter()
                .map(|w| format!("--- {} ---\n{}", w.name, w.stderr()))
                .collect();
            for w in workers.iter_mut() {
                w.kill();
            }
            panic!(
                "workers still running after {limit:?}: {stuck:?}\n{}",
                errs.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Polls `cond` every millisecond until it holds; panics with `what` after `limit`.
pub fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Waits until `fairlock::inspect(path)` shows exactly `n` published waiters.
pub fn wait_for_waiters(path: &Path, n: usize, limit: Duration) -> fairlock::Status {
    let deadline = Instant::now() + limit;
    loop {
        let st = fairlock::inspect(path).expect("inspect");
        if st.waiters.len() == n {
            return st;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {n} waiters; last status: {st:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Runs `f` on a thread and panics if it does not finish within `limit` (the thread is then
/// leaked; the test fails anyway).
pub fn with_time_limit<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => {
            h.join().expect("join");
            v
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            // The thread panicked: propagate its panic.
            match h.join() {
                Err(p) => std::panic::resume_unwind(p),
                Ok(()) => unreachable!(),
            }
        }
        Err(_) => panic!("{what}: not finished after {limit:?} (stalled?)"),
    }
}

/// The kernel thread id of the calling thread.
pub fn gettid() -> u32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    (unsafe { libc::syscall(libc::SYS_gettid) }) as u32
}

/// The process's umask (read from /proc, without changing it).
pub fn umask() -> u32 {
    let s = fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = s
        .lines()
        .find(|l| l.starts_with("Umask:"))
        .expect("Umask line");
    u32::from_str_radix(line["Umask:".len()..].trim(), 8).expect("parse umask")
}

/// A start gate shared by processes: workers `arrive` and spin until the parent `open`s it, so
/// that they start contending at the same moment (process start-up takes milliseconds).
pub struct Gate {
    shm: Shm,
}

impl Gate {
    /// Creates the gate's backing file (parent).
    pub fn create(path: &Path) -> Gate {
        Gate {
            shm: Shm::create(path, 2),
        }
    }

    /// Maps an existing gate (worker).
    pub fn open(path: &Path) -> Gate {
        Gate {
            shm: Shm::open(path),
        }
    }

    /// Worker: announce arrival and wait (at most a minute) for the gate to open.
    pub fn arrive_and_wait(&self) {
        self.shm.atomic(0).fetch_add(1, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.shm.atomic(1).load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "gate never opened");
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Parent: wait until `n` arrivals (or a worker died: `workers` are polled), then open.
    pub fn open_when_arrived(&self, n: u64, workers: &mut [Worker]) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.shm.atomic(0).load(Ordering::SeqCst) < n {
            for w in workers.iter_mut() {
                if w.poll() {
                    panic!(
                        "worker {} exited ({:?}) before the gate opened:\n{}",
                        w.name,
                        w.status,
                        w.stderr()
                    );
                }
            }
            assert!(
                Instant::now() < deadline,
                "workers never arrived at the gate"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        self.shm.atomic(1).store(1, Ordering::SeqCst);
    }
}

/// Runs `f` as another user — nobody (65534), in a forked child, when this process is root;
/// else as ourselves, here — and returns its exit code: `f`'s result, or -1 if the child died
/// of a signal, 20 if it could not drop privileges. `f` runs in a child of a possibly
/// multi-threaded process: it must only use the library and the file system, and return.
pub fn as_another_user(f: impl FnOnce() -> i32) -> i32 {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        return f();
    }
    // SAFETY: the child drops privileges, runs `f` (see above) and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: plain system calls; the child exits right after.
        let code = unsafe {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(65534) != 0
                || libc::setuid(65534) != 0
            {
                20
            } else {
                f()
            }
        };
        // SAFETY: `_exit` never returns.
        unsafe { libc::_exit(code) }
    }
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a valid out-pointer.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    }
}
