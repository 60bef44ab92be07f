//! The lock across real processes on a real 3-member cluster: FIFO, a SIGKILLed holder, a
//! SIGSTOPped holder past its TTL, a waiter whose own lease is revoked.

use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::common::cluster::Cluster;
use crate::common::{connect, env, outcome, put_file, role, spawn_worker, temp_dir, wait_file};

/// Worker "fifo": connect, queue, append "start TOKEN I" / "end I" to LOG under the lock.
/// Worker "hold": lock, write "TOKEN DIED" to OUT, wait for GO, then write the outcomes of
/// check() and unlock() to RESULT.
fn worker(role: &str) {
    let endpoints: Vec<String> = env("ENDPOINTS").split(',').map(str::to_owned).collect();
    let ttl: u64 = env("TTL").parse().unwrap();
    let lock = connect(&endpoints, &env("NAME"), ttl);
    match role {
        "fifo" => {
            let i = env("INDEX");
            let g = lock.lock().unwrap();
            let log = PathBuf::from(env("LOG"));
            let append = |line: String| {
                use std::io::Write;
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(&log)
                    .unwrap();
                f.write_all(line.as_bytes()).unwrap();
            };
            append(format!("start {} {i}\n", g.token()));
            std::thread::sleep(Duration::from_millis(30));
            append(format!("end {i}\n"));
            g.unlock().unwrap();
        }
        "hold" => {
            let g = lock.lock().unwrap();
            put_file(
                &PathBuf::from(env("OUT")),
                &format!("{} {}\n", g.token(), g.owner_died()),
            );
            wait_file(&PathBuf::from(env("GO")), Duration::from_secs(120));
            let check = outcome(&g.check());
            let unlock = outcome(&g.unlock());
            put_file(
                &PathBuf::from(env("RESULT")),
                &format!("{check} {unlock}\n"),
            );
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn fifo_across_six_processes() {
    if let Some(r) = role() {
        return worker(&r);
    }
    let cluster = Cluster::start("fifo");
    let dir = temp_dir("fifo");
    let log = dir.join("log");
    let main = connect(&cluster.endpoints(), "fifo", 5);
    let first = main.lock().unwrap();
    let mut children = Vec::new();
    for i in 0..6 {
        children.push(spawn_worker(
            "processes::fifo_across_six_processes",
            "fifo",
            &[
                ("ENDPOINTS", cluster.joined()),
                ("NAME", "fifo".into()),
                ("TTL", "5".into()),
                ("INDEX", i.to_string()),
                ("LOG", log.display().to_string()),
            ],
        ));
        // The next one starts only once this one is in line.
        common::wait_waiters(&main, i + 1, Duration::from_secs(30));
    }
    let held_token = first.token();
    first.unlock().unwrap();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 12, "{text}");
    let mut last = held_token;
    for (i, pair) in lines.chunks(2).enumerate() {
        let start: Vec<&str> = pair[0].split(' ').collect();
        assert_eq!(start[0], "start", "{text}");
        assert_eq!(
            start[2],
            i.to_string(),
            "granted out of arrival order:\n{text}"
        );
        let token: u64 = start[1].parse().unwrap();
        assert!(token > last, "tokens must increase:\n{text}");
        last = token;
        assert_eq!(pair[1], format!("end {i}"), "sections overlapped:\n{text}");
    }
    let s = main.status().unwrap();
    assert!(s.holder.is_none() && s.waiters.is_empty(), "{s:?}");
    let _ = std::fs::remove_dir_all(dir);
}

fn hold_worker(
    test: &str,
    cluster: &Cluster,
    name: &str,
    dir: &std::path::Path,
) -> std::process::Child {
    spawn_worker(
        test,
        "hold",
        &[
            ("ENDPOINTS", cluster.joined()),
            ("NAME", name.into()),
            ("TTL", "2".into()),
            ("OUT", dir.join("out").display().to_string()),
            ("GO", dir.join("go").display().to_string()),
            ("RESULT", dir.join("result").display().to_string()),
        ],
    )
}

#[test]
fn killed_holder_is_taken_over_after_its_ttl_with_owner_died() {
    if let Some(r) = role() {
        return worker(&r);
    }
    let cluster = Cluster::start("kill");
    let dir = temp_dir("kill");
    let mut child = hold_worker(
        "processes::killed_holder_is_taken_over_after_its_ttl_with_owner_died",
        &cluster,
        "kill",
        &dir,
    );
    let out = wait_file(&dir.join("out"), Duration::from_secs(30));
    let their: u64 = out.split(' ').next().unwrap().parse().unwrap();
    let me = connect(&cluster.endpoints(), "kill", 5);
    assert!(matches!(
        me.try_lock(),
        Err(fairlock_etcd::Error::WouldBlock { .. })
    ));
    child.kill().unwrap();
    let killed = Instant::now();
    child.wait().unwrap();
    let g = me.lock().unwrap();
    let took = killed.elapsed();
    assert!(
        g.owner_died(),
        "the holder was killed: owner_died must be set"
    );
    assert!(g.token() > their, "{} after {their}", g.token());
    // Not before the TTL (2 s), and not much after it.
    assert!(took >= Duration::from_millis(1500), "{took:?}");
    assert!(took < Duration::from_secs(6), "{took:?}");
    eprintln!("SIGKILLed holder (TTL 2 s) -> next holder after {took:?}");
    g.unlock().unwrap();
    // The next one after a clean release is told nobody died.
    let g = me.lock().unwrap();
    assert!(!g.owner_died());
    drop(g);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn stopped_holder_past_its_ttl_loses_the_lock_and_is_told() {
    if let Some(r) = role() {
        return worker(&r);
    }
    let cluster = Cluster::start("stop");
    let dir = temp_dir("stop");
    let mut child = hold_worker(
        "processes::stopped_holder_past_its_ttl_loses_the_lock_and_is_told",
        &cluster,
        "stop",
        &dir,
    );
    let out = wait_file(&dir.join("out"), Duration::from_secs(30));
    let their: u64 = out.split(' ').next().unwrap().parse().unwrap();
    let pid = child.id() as libc::pid_t;
    // SAFETY: kill(2) on our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let me = connect(&cluster.endpoints(), "stop", 5);
    let g = me.lock().unwrap();
    assert!(g.owner_died());
    assert!(g.token() > their, "{} after {their}", g.token());
    // Resume the old holder: every call on its guard says LockLost, and its unlock must not
    // touch our key.
    put_file(&dir.join("go"), "go\n");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let result = wait_file(&dir.join("result"), Duration::from_secs(30));
    assert_eq!(result.trim(), "LockLost LockLost");
    assert!(child.wait().unwrap().success());
    g.check().unwrap();
    g.extend().unwrap();
    let s = me.status().unwrap();
    assert_eq!(s.holder.as_ref().map(|h| h.token), Some(g.token()), "{s:?}");
    g.unlock().unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_waiter_whose_lease_is_revoked_stops_waiting() {
    if let Some(r) = role() {
        return worker(&r);
    }
    // etcd#19597: a waiter whose own lease expired went on waiting and then "acquired".
    let cluster = Cluster::start("revoked");
    let holder = connect(&cluster.endpoints(), "rv", 5);
    let g = holder.lock().unwrap();
    let waiter_lock = connect(&cluster.endpoints(), "rv", 5);
    let waiting = std::thread::spawn(move || {
        let r = waiter_lock.lock().map(|g| g.token());
        (
            r.map_err(|e| (common::kind(&e), e.to_string())),
            waiter_lock,
        )
    });
    common::wait_waiters(&holder, 1, Duration::from_secs(10));
    let lease = holder.status().unwrap().waiters[0].lease;
    cluster
        .etcdctl(&["lease", "revoke", &format!("{lease:x}")])
        .unwrap();
    let (r, _l) = waiting.join().unwrap();
    let (kind, msg) = r.expect_err("a waiter whose lease was revoked must not be granted");
    assert_eq!(kind, "LockLost", "{msg}");
    assert!(msg.contains("lease"), "{msg}");
    g.unlock().unwrap();
}
