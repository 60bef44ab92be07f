//! Holder and waiter in different PID namespaces (containers sharing `/dev/shm`): the lock,
//! the wake-ups and the death notice work across them, because they rest on the shared file
//! (futexes on a shared mapping, OFD-lock beacons), never on pids.
//!
//! The worker runs under `unshare --pid --fork`, so it is pid 1 of a fresh namespace; it reads
//! its host pid from the host's `/proc/self` (no `--mount-proc`).

mod common;

use std::process::{Command, Stdio};
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use common::{Shm, TempDir, role, wait_for_waiters, wait_until};
use fairlock::FairLock;

const TEST: &str = "holder_and_waiter_in_different_pid_namespaces";
const HOLDING: usize = 0;
const HOST_PID: usize = 1;
const NS_PID: usize = 2;
const TOKEN: usize = 3;

fn worker() {
    let lock = FairLock::open(common::env("FL_LOCK")).expect("worker open");
    let shm = Shm::open(common::env("FL_SHM").as_ref());
    let host_pid: u64 = std::fs::read_link("/proc/self")
        .expect("host /proc/self")
        .to_string_lossy()
        .parse()
        .expect("pid");
    shm.write(HOST_PID, host_pid);
    shm.write(NS_PID, u64::from(std::process::id()));
    let g = lock.lock().expect("worker lock");
    shm.write(TOKEN, g.token());
    shm.atomic(HOLDING).store(1, SeqCst);
    std::thread::sleep(Duration::from_secs(60));
    panic!("not killed");
}

fn unshare_works() -> bool {
    Command::new("unshare")
        .args(["--pid", "--fork", "true"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn holder_and_waiter_in_different_pid_namespaces() {
    if role().is_some() {
        return worker();
    }
    if !unshare_works() {
        // Needs CAP_SYS_ADMIN (CI runs as root). Say so loudly rather than pass silently.
        eprintln!("SKIPPED: `unshare --pid --fork` is not permitted here");
        return;
    }
    let dir = TempDir::new("pidns");
    let path = dir.join("lock");
    let shm = Shm::create(&dir.join("shm"), 4);
    let lock = FairLock::open(&path).unwrap();
    let first = lock.lock().unwrap();

    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new("unshare")
        .args(["--pid", "--fork"])
        .arg(&exe)
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(common::ROLE, "worker")
        .env("FL_LOCK", &path)
        .env("FL_SHM", dir.join("shm"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn unshare");

    // It queues behind us from its own namespace, and is seen there as pid 1.
    let st = wait_for_waiters(&path, 1, Duration::from_secs(20));
    assert_eq!(shm.read(NS_PID), 1, "worker is pid 1 of its namespace");
    assert_eq!(st.waiters[0].pid, Some(1), "{st:?}");
    // Our release wakes it across the namespace boundary.
    let token = first.token();
    drop(first);
    wait_until(Duration::from_secs(20), "worker holding", || {
        shm.atomic(HOLDING).load(SeqCst) == 1
    });
    assert_eq!(shm.read(TOKEN), token + 1);

    // Killed in its namespace: we learn it died (its pid means nothing to us).
    let host_pid = shm.read(HOST_PID) as libc::pid_t;
    // SAFETY: plain kill(2) of the worker, by its host pid.
    unsafe { libc::kill(host_pid, libc::SIGKILL) };
    let g = lock
        .lock_timeout(Duration::from_secs(5))
        .expect("recovered from a holder in another pid namespace");
    assert!(g.owner_died());
    assert!(g.token() > token + 1);
    let _ = child.wait();
}
