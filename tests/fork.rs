//! fork: a child inherits its parent's memory, descriptors and guards, but never its identity.
//! It cannot release or keep alive its parent's lock, and it can take the lock itself.

mod common;

use std::time::Duration;

use common::{Shm, TempDir, Worker, role, wait_all, wait_until};
use fairlock::{Error, FairLock};

const PARENT_READY: usize = 0;
const CHILD_PID: usize = 1;

fn fork() -> libc::pid_t {
    // SAFETY: the child only uses the lock (whose fork handler made it safe for the child),
    // allocates (glibc's fork keeps malloc usable) and exits with `_exit`.
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
