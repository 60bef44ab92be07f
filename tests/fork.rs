//! fork: a child inherits its parent's memory, descriptors and guards, but never its identity.
//! It cannot release or keep alive its parent's lock, and it can take the lock itself.
//!
//! And `fork` racing the library's own bookkeeping: a fork while another thread is inside
//! `open` never deadlocks the child; a fork between claiming a beacon and registering its
//! descriptor never lets the child keep the parent's beacon alive; a process with more lock
//! files than a small table would hold has every beacon dropped in its children, and a full
//! table is a typed error. A parent's death is seen while its forked children live.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::{Shm, TempDir, Worker, role, wait_all, wait_until};
use fairlock::{Error, FairLock};

const PARENT_READY: usize = 0;
const CHILD_PID: usize = 1;

fn fork() -> libc::pid_t {
    // SAFETY: the child only opens and uses locks (whose fork handlers made that safe),
    // allocates (glibc's fork keeps malloc usable) and leaves with `_exit`.
    unsafe { libc::fork() }
}

fn child_exit(code: i32) -> ! {
    // SAFETY: `_exit` never returns and skips the parent's atexit handlers and test harness.
    unsafe { libc::_exit(code) }
}

fn wait_child(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a valid out-pointer.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    }
}

/// Child checks, by exit code: 0 ok; 10+ the step that failed.
fn child_of_holder(lock: &FairLock, guard: fairlock::LockGuard<'_>) -> ! {
    // The inherited guard is the parent's: not ours.
    if !matches!(guard.check(), Err(Error::LockLost { .. })) {
        child_exit(10);
    }
    // Dropping it must not release the parent's lock.
    drop(guard);
    // The child is a participant of its own and waits in line like anyone else.
    match lock.try_lock() {
        Err(Error::WouldBlock { .. }) => {}
        _ => child_exit(11),
    }
    match lock.lock_timeout(Duration::from_millis(50)) {
        Err(Error::Timeout { .. }) => {}
        _ => child_exit(12),
    }
    child_exit(0)
}

fn worker(r: &str) {
    let dir = common::env("FL_DIR");
    let lock = FairLock::open(format!("{dir}/lock")).expect("open");
    match r {
        "inherit" => {
            let guard = lock.lock().expect("lock");
            let token = guard.token();
            let pid = fork();
            if pid == 0 {
                child_of_holder(&lock, guard);
            }
            assert_eq!(wait_child(pid), 0, "child step failed");
            // Still ours, and still the same grant.
            guard
                .check()
                .expect("still held after the child dropped its copy");
            let st = fairlock::inspect(format!("{dir}/lock")).unwrap();
            assert_eq!(st.holder.as_ref().unwrap().pid, Some(std::process::id()));
            assert_eq!(st.token(), token);
            guard.unlock().expect("unlock");
            // And the child's participant left nothing behind: the lock is free.
            drop(lock.try_lock().expect("free after the child exited"));
        }
        "die-leaving-child" => {
            let shm = Shm::open(format!("{dir}/shm").as_ref());
            let guard = lock.lock().expect("lock");
            let pid = fork();
            if pid == 0 {
                // Outlive the parent without exec'ing: inherited descriptors must not keep
                // the parent's beacon alive.
                std::thread::sleep(Duration::from_secs(30));
                child_exit(0);
            }
            shm.write(CHILD_PID, pid as u64);
            shm.write(PARENT_READY, 1);
            std::mem::forget(guard);
            std::thread::sleep(Duration::from_secs(30));
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn child_cannot_release_or_use_parent_grant() {
    if let Some(r) = role() {
        return worker(&r);
    }
    let dir = TempDir::new("fork-inherit");
    let env = [("FL_DIR", dir.path().display().to_string())];
    let mut w = vec![Worker::spawn(
        dir.path(),
        "child_cannot_release_or_use_parent_grant",
        "inherit",
        "w",
        &env,
    )];
    wait_all(&mut w, Duration::from_secs(30));
}

#[test]
fn parent_death_is_seen_while_its_child_lives() {
    if let Some(r) = role() {
        return worker(&r);
    }
    let dir = TempDir::new("fork-parent-dies");
    let shm = Shm::create(&dir.join("shm"), 2);
    let lock = FairLock::open(dir.join("lock")).unwrap();
    let env = [("FL_DIR", dir.path().display().to_string())];
    let mut w = Worker::spawn(
        dir.path(),
        "parent_death_is_seen_while_its_child_lives",
        "die-leaving-child",
        "w",
        &env,
    );
    wait_until(Duration::from_secs(20), "holder forked", || {
        shm.read(PARENT_READY) == 1
    });
    let child = shm.read(CHILD_PID) as libc::pid_t;
    // SAFETY: plain kill(2) of the worker process.
    unsafe { libc::kill(w.pid() as libc::pid_t, libc::SIGKILL) };
    let got = lock.lock_timeout(Duration::from_secs(5));
    // SAFETY: the orphaned grandchild, which we must not leave behind.
    unsafe { libc::kill(child, libc::SIGKILL) };
    let g = got.expect("the dead parent's lock is recovered although its child lives");
    assert!(g.owner_died());
    w.poll();
}

// ---------------------------------------------------------------------------------------------
// fork racing the library's own bookkeeping
// ---------------------------------------------------------------------------------------------

/// Waits for child `pid` at most `limit`; `None` if it did not exit (it is then killed).
fn wait_child_within(pid: libc::pid_t, limit: Duration) -> Option<i32> {
    let until = Instant::now() + limit;
    loop {
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            return Some(if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                -1
            });
        }
        if Instant::now() >= until {
            // SAFETY: our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return None;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A fork while another thread is inside `open` (creating, initialising and registering new
/// files) never leaves the child a process-wide lock locked forever: the child's own `open`
/// and `lock` work.
#[test]
fn a_fork_during_another_threads_open_does_not_deadlock_the_child() {
    let dir = TempDir::new("fork-race-open");
    let stop = Arc::new(AtomicBool::new(false));
    let opener = {
        let (dir, stop) = (dir.path().to_path_buf(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(SeqCst) {
                // A new file each time: the slow path (create, initialise, register).
                let l = FairLock::open(dir.join(format!("opened-{}", i % 64))).expect("open");
                drop(l);
                i += 1;
            }
            i
        })
    };
    let target = dir.join("child.lock");
    let mut stuck = 0;
    for _ in 0..200 {
        let pid = fork();
        if pid == 0 {
            let ok = FairLock::open(&target)
                .and_then(|l| l.lock().map(drop))
                .is_ok();
            child_exit(if ok { 0 } else { 1 });
        }
        match wait_child_within(pid, Duration::from_secs(5)) {
            Some(0) => {}
            Some(code) => panic!("child failed with {code}"),
            None => stuck += 1,
        }
    }
    stop.store(true, SeqCst);
    let opens = opener.join().unwrap();
    assert_eq!(
        stuck, 0,
        "{stuck} of 200 children deadlocked ({opens} opens raced them)"
    );
}

const READY: usize = 0;
/// The worker's children's pids follow `READY` in the shared words (so the test can end them).
const MAX_CHILDREN: usize = 4096;

/// Worker: hold the lock of each of `FL_FILES` files, opened on a second thread while the
/// main thread forks children that stay alive (`FL_FORKS` of them); report; wait to be
/// killed. Its children live on after its death.
fn hold_many_and_fork() {
    let dir = std::path::PathBuf::from(common::env("FL_DIR"));
    let files: usize = common::env_parse("FL_FILES");
    let forks: usize = common::env_parse("FL_FORKS");
    let shm = Shm::open(&dir.join("shm"));
    let done = Arc::new(AtomicBool::new(false));
    let holder = {
        let (dir, done) = (dir.clone(), done.clone());
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for i in 0..files {
                let l = Box::leak(Box::new(
                    FairLock::open(dir.join(format!("f{i}"))).expect("open"),
                ));
                held.push(l.lock().expect("lock"));
            }
            done.store(true, SeqCst);
            // Stay alive holding them: a thread that exits while holding gives its locks up
            // (as if dead), which is not what this test is about.
            std::thread::sleep(Duration::from_secs(120));
            drop(held);
        })
    };
    let mut children = 0;
    while children < forks || !done.load(SeqCst) {
        let pid = fork();
        if pid == 0 {
            std::thread::sleep(Duration::from_secs(20));
            child_exit(0);
        }
        if children < MAX_CHILDREN {
            shm.atomic(1 + children).store(pid as u64, SeqCst);
        }
        children += 1;
        std::thread::sleep(Duration::from_micros(50));
    }
    shm.atomic(READY).store(1, SeqCst);
    let _ = holder;
    std::thread::sleep(Duration::from_secs(60));
}

fn run_worker(r: &str) {
    match r {
        "hold-many-and-fork" => hold_many_and_fork(),
        other => panic!("unknown role {other}"),
    }
}

/// Tests that fill this process's table of open lock files, or open many, one at a time.
static TABLE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// After the worker is SIGKILLed (its forked children alive), every one of its `files` locks
/// must be passed over as a dead holder's, at once.
fn parents_death_is_seen_on_every_file(test: &str, files: usize, forks: usize) {
    let _serial = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = TempDir::new(test);
    let shm = Shm::create(&dir.join("shm"), 1 + MAX_CHILDREN);
    let envs = [
        ("FL_DIR", dir.path().display().to_string()),
        ("FL_FILES", files.to_string()),
        ("FL_FORKS", forks.to_string()),
    ];
    let mut w = Worker::spawn(dir.path(), test, "hold-many-and-fork", "parent", &envs);
    wait_until(Duration::from_secs(60), "the worker's locks", || {
        shm.atomic(READY).load(SeqCst) == 1 || w.poll()
    });
    assert!(!w.poll(), "worker died early:\n{}", w.stderr());
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(w.pid() as libc::pid_t, libc::SIGKILL) };
    let _ = w.child.wait();
    w.status = Some(std::os::unix::process::ExitStatusExt::from_raw(9));
    let mut kept_alive = Vec::new();
    for i in 0..files {
        let l = FairLock::open(dir.join(&format!("f{i}"))).expect("open");
        // A waiter that waits a little (not only try_lock, whose own fix is elsewhere).
        match l.lock_timeout(Duration::from_millis(500)) {
            Ok(g) => assert!(g.owner_died()),
            Err(Error::Timeout { .. }) => kept_alive.push(i),
            Err(e) => panic!("file {i}: {e}"),
        }
    }
    // The children (now orphans) go too.
    for k in 0..MAX_CHILDREN {
        let pid = shm.atomic(1 + k).load(SeqCst);
        if pid == 0 {
            break;
        }
        // SAFETY: kill has no memory-safety preconditions; these are the worker's children.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
    assert!(
        kept_alive.is_empty(),
        "the dead parent still looks alive on {} of {files} files (its forked children keep its beacons): {kept_alive:?}",
        kept_alive.len()
    );
}

/// A process that holds the locks of 100 files (more than a table of 64 beacons would hold)
/// and forks: every one of its beacons is dropped in the child, so its death is seen on every
/// file while the child lives.
#[test]
fn a_hundred_lock_files_are_all_dropped_in_a_forked_child() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    parents_death_is_seen_on_every_file(
        "a_hundred_lock_files_are_all_dropped_in_a_forked_child",
        100,
        1,
    );
}

/// A fork between claiming a beacon (its OFD lock) and registering its descriptor for the fork
/// handler never leaves the child an unregistered copy that keeps the beacon alive: 200 forks
/// while 60 files are opened and locked, and the parent's death is seen on every file.
#[test]
fn a_fork_while_beacons_are_claimed_never_inherits_one() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    parents_death_is_seen_on_every_file(
        "a_fork_while_beacons_are_claimed_never_inherits_one",
        60,
        200,
    );
}

/// A full table fails loudly, with a typed error naming the file; the process goes on.
#[test]
fn a_full_beacon_table_is_a_typed_error() {
    // Not while another test of this binary opens its many files (it would find the table full).
    let _serial = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    // Raise the soft descriptor limit: each lock file open takes a descriptor.
    // SAFETY: getrlimit/setrlimit on a valid struct.
    unsafe {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        if r.rlim_max < 1200 {
            eprintln!("skipped: RLIMIT_NOFILE hard limit {} < 1200", r.rlim_max);
            return;
        }
        r.rlim_cur = r.rlim_max.min(4096);
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
    }
    let dir = TempDir::new("fork-race-full");
    let mut open = Vec::new();
    let err = loop {
        match FairLock::open(dir.join(&format!("f{}", open.len()))) {
            Ok(l) => open.push(l),
            Err(e) => break e,
        }
        assert!(open.len() <= 2000, "no limit at all?");
    };
    match &err {
        Error::TooManyOpenFiles { path, capacity } => {
            // Other tests of this binary, running meanwhile, may hold a few entries.
            assert!(
                open.len() <= *capacity && open.len() + 16 >= *capacity,
                "{} open, {err}",
                open.len()
            );
            assert!(path.ends_with(format!("f{}", open.len())));
            assert!(err.to_string().contains(&format!("f{}", open.len())));
        }
        other => panic!("expected TooManyOpenFiles, got {other:?}"),
    }
    // Closing one makes room again.
    open.pop();
    let again = FairLock::open(dir.join("again")).expect("room again");
    drop(again);
}

/// A fork while another thread is installing the `SIGBUS` handler (the process's first
/// mapping of a lock file) never leaves the child waiting for that installation: the child
/// installs it itself. The installing thread waits at the crash point `sigbus.installing`
/// while the main thread forks.
#[cfg(feature = "__test-crash-points")]
#[test]
fn a_fork_while_the_sigbus_handler_is_installed_does_not_hang_the_child() {
    if role().is_some() {
        let dir = std::path::PathBuf::from(common::env("FL_DIR"));
        let path = dir.join("l");
        let opener = {
            let path = path.clone();
            std::thread::spawn(move || drop(FairLock::open(&path).unwrap()))
        };
        let reached = dir.join("reached");
        let t0 = Instant::now();
        while !reached.exists() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the installation never began"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        let pid = fork();
        if pid == 0 {
            let ok = FairLock::open(dir.join("other")).and_then(|l| l.try_lock().map(drop));
            child_exit(if ok.is_ok() { 0 } else { 3 });
        }
        let t0 = Instant::now();
        let code = loop {
            let mut status = 0;
            // SAFETY: `pid` is our child; `status` is a valid out-pointer.
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
                break libc::WEXITSTATUS(status);
            }
            if t0.elapsed() > Duration::from_secs(10) {
                // SAFETY: our child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                break 1;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        std::fs::write(dir.join("release"), b"").unwrap();
        opener.join().unwrap();
        assert_eq!(code, 0, "the child's open (1: it never returned)");
        return;
    }
    let dir = TempDir::new("fork-sigbus-install");
    let d = dir.path().display().to_string();
    let mut w = Worker::spawn(
        dir.path(),
        "a_fork_while_the_sigbus_handler_is_installed_does_not_hang_the_child",
        "forker",
        "forker",
        &[
            ("FL_DIR", d.clone()),
            ("FAIRLOCK_CRASH", "sigbus.installing:wait".to_string()),
            ("FAIRLOCK_CRASH_REACHED", format!("{d}/reached")),
            ("FAIRLOCK_CRASH_RELEASE", format!("{d}/release")),
        ],
    );
    wait_all(std::slice::from_mut(&mut w), Duration::from_secs(60));
}
