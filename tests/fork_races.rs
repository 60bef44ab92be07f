//! `fork` racing the library's own bookkeeping (issue 11, bug 7): a fork while another thread
//! is inside `open` used to deadlock the child; a fork between claiming a beacon and
//! registering its descriptor let the child keep the parent's beacon alive; the 64-entry
//! beacon table silently ignored overflow (more lock files than that, and every forked child
//! kept the rest of its parent's beacons alive). A parent's death must be seen while its
//! forked children live, and a child must be able to use locks.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use common::{Shm, TempDir, Worker, role, wait_until};
use fairlock::{Error, FairLock};

fn fork() -> libc::pid_t {
    // SAFETY: the child only opens and uses locks (whose fork handlers made that safe),
    // allocates (glibc's fork keeps malloc usable) and leaves with `_exit`.
    unsafe { libc::fork() }
}

fn child_exit(code: i32) -> ! {
    // SAFETY: `_exit` never returns and skips the parent's atexit handlers and test harness.
    unsafe { libc::_exit(code) }
}

/// Waits for child `pid` at most `limit`; `None` if it did not exit (it is then killed).
fn wait_child(pid: libc::pid_t, limit: Duration) -> Option<i32> {
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

/// Bug 7: a fork while another thread was inside `open` (which held a process-wide lock
/// across registration) could leave that lock locked forever in the child, whose own `open`
/// then deadlocked.
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
        match wait_child(pid, Duration::from_secs(5)) {
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

/// Bug 7: the beacon table had 64 entries and silently ignored more: a process with more lock
/// files open than that, once forked, had the rest of its beacons kept alive by the child.
#[test]
fn more_lock_files_than_the_old_table_are_all_dropped_in_a_child() {
    if let Some(r) = role() {
        return run_worker(&r);
    }
    parents_death_is_seen_on_every_file(
        "more_lock_files_than_the_old_table_are_all_dropped_in_a_child",
        100,
        1,
    );
}

/// Bug 7: a fork between claiming a beacon (its OFD lock) and registering its descriptor for
/// the fork handler left the child an unregistered copy, keeping the beacon alive.
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
