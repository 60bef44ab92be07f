//! `fairlock run -s/-x` (a reader/writer lock) and `--permits N` (a semaphore), driven through
//! `/bin/sh` as scripts drive them: readers run together, a writer alone, at most N commands
//! at once in arrival order, files of another kind refused, `status` showing every holder.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::{TempDir, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_fairlock");

fn sh(dir: &Path, script: &str) -> Output {
    Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .env("FL", BIN)
        .env("D", dir)
        .stdin(Stdio::null())
        .output()
        .expect("run /bin/sh")
}

fn spawn(dir: &Path, script: &str) -> Child {
    Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .env("FL", BIN)
        .env("D", dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn /bin/sh")
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(dir: &Path, file: &str) -> String {
    let o = sh(dir, &format!("\"$FL\" status --json \"$D/{file}\""));
    assert!(o.status.success(), "{}", err(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn readers_run_together_and_a_writer_runs_alone() {
    let dir = TempDir::new("cli-kinds-rw");
    let d = dir.path();
    // Each reader waits (at most 10 s) for the other's mark: both finish only if they overlap.
    let reader = |me: &str, other: &str| {
        format!(
            "\"$FL\" run -s \"$D/rw.lock\" -- sh -c 'touch \"$D/{me}\"; i=0; while [ ! -e \"$D/{other}\" ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; [ -e \"$D/{other}\" ]'"
        )
    };
    let mut a = spawn(d, &reader("a", "b"));
    let mut b = spawn(d, &reader("b", "a"));
    assert!(a.wait().unwrap().success(), "reader a did not overlap");
    assert!(b.wait().unwrap().success(), "reader b did not overlap");
    // A holding reader: another reader gets in at once, a writer does not.
    let mut holder = spawn(
        d,
        "\"$FL\" run --shared \"$D/rw.lock\" -- sh -c 'touch \"$D/held\"; while [ -d \"$D\" ] && [ ! -e \"$D/release\" ]; do sleep 0.01; done'",
    );
    wait_until(Duration::from_secs(20), "the reader", || {
        d.join("held").exists()
    });
    let o = sh(d, "\"$FL\" run -n -s \"$D/rw.lock\" true");
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let o = sh(d, "\"$FL\" run -n -x \"$D/rw.lock\" true");
    assert_eq!(o.status.code(), Some(1), "a writer got past a reader");
    let o = sh(d, "\"$FL\" run -n \"$D/rw.lock\" true");
    assert_eq!(
        o.status.code(),
        Some(1),
        "no flag on a reader/writer file is a writer"
    );
    let st = json(d, "rw.lock");
    assert!(st.contains("\"kind\":\"rwlock\""), "{st}");
    assert!(st.contains("\"shared\":true"), "{st}");
    let text = String::from_utf8_lossy(&sh(d, "\"$FL\" status \"$D/rw.lock\"").stdout).into_owned();
    assert!(
        text.contains("reader/writer lock") && text.contains("no lease, read\n"),
        "{text}"
    );
    // A writer queued behind the reader keeps a later reader out (arrival order).
    let mut writer = spawn(
        d,
        "\"$FL\" run -x \"$D/rw.lock\" -- sh -c 'echo writer >> \"$D/order\"'",
    );
    wait_until(Duration::from_secs(20), "the writer to queue", || {
        json(d, "rw.lock").contains("\"waiters\":1")
    });
    let o = sh(d, "\"$FL\" run -n -s \"$D/rw.lock\" true");
    assert_eq!(o.status.code(), Some(1), "a reader jumped a waiting writer");
    let mut late = spawn(
        d,
        "\"$FL\" run -s \"$D/rw.lock\" -- sh -c 'echo reader >> \"$D/order\"'",
    );
    wait_until(Duration::from_secs(20), "the late reader to queue", || {
        json(d, "rw.lock").contains("\"waiters\":2")
    });
    std::fs::write(d.join("release"), "").unwrap();
    assert!(holder.wait().unwrap().success());
    assert!(writer.wait().unwrap().success());
    assert!(late.wait().unwrap().success());
    let order = std::fs::read_to_string(d.join("order")).unwrap();
    assert_eq!(order, "writer\nreader\n");
}

#[test]
fn permits_run_at_most_n_commands_in_arrival_order() {
    let dir = TempDir::new("cli-kinds-permits");
    let d = dir.path();
    // Hold both permits, queue four commands one after another, then let them run.
    let mut holders: Vec<Child> = (0..2)
        .map(|i| {
            spawn(
                d,
                &format!(
                    "\"$FL\" run --permits 2 \"$D/sem.lock\" -- sh -c 'touch \"$D/h{i}\"; while [ ! -e \"$D/go\" ]; do sleep 0.01; done'"
                ),
            )
        })
        .collect();
    wait_until(Duration::from_secs(20), "two holders", || {
        d.join("h0").exists() && d.join("h1").exists()
    });
    let st = json(d, "sem.lock");
    assert!(st.contains("\"kind\":\"semaphore\",\"permits\":2"), "{st}");
    let o = sh(d, "\"$FL\" run -n --permits 2 \"$D/sem.lock\" true");
    assert_eq!(o.status.code(), Some(1), "a third command got a permit");
    let mut queued = Vec::new();
    for i in 0..4 {
        queued.push(spawn(
            d,
            &format!(
                "\"$FL\" run --permits 2 \"$D/sem.lock\" -- sh -c 'echo \"in {i} $FAIRLOCK_TOKEN\" >> \"$D/log\"; sleep 0.2; echo \"out {i}\" >> \"$D/log\"'"
            ),
        ));
        wait_until(Duration::from_secs(20), "the command to queue", || {
            json(d, "sem.lock").contains(&format!("\"waiters\":{}", i + 1))
        });
    }
    std::fs::write(d.join("go"), "").unwrap();
    for h in holders.iter_mut().chain(queued.iter_mut()) {
        assert!(h.wait().unwrap().success());
    }
    let log = std::fs::read_to_string(d.join("log")).unwrap();
    let mut inside = 0i32;
    let mut most = 0;
    let mut tokens = [0u64; 4];
    for line in log.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        if words[0] == "in" {
            inside += 1;
            most = most.max(inside);
            tokens[words[1].parse::<usize>().unwrap()] = words[2].parse().unwrap();
        } else {
            inside -= 1;
        }
    }
    assert!(most <= 2, "more than 2 at once:\n{log}");
    assert_eq!(most, 2, "the permits were not used together:\n{log}");
    // Granted in arrival order: the grant's token (its ticket + 1) rises with the order in
    // which the commands queued. (The "in" lines of two commands started together may come
    // in either order: CI saw "in 3" before "in 2".)
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "not granted in arrival order: tokens {tokens:?}\n{log}"
    );
}

#[test]
fn another_kind_or_count_is_refused_with_exit_65() {
    let dir = TempDir::new("cli-kinds-mismatch");
    let d = dir.path();
    assert!(
        sh(d, "\"$FL\" run --permits 2 \"$D/sem.lock\" true")
            .status
            .success()
    );
    let o = sh(d, "\"$FL\" run --permits 3 \"$D/sem.lock\" true");
    assert_eq!(o.status.code(), Some(65));
    assert!(
        err(&o).contains("2 permits") && err(&o).contains("3 permits"),
        "{}",
        err(&o)
    );
    let o = sh(d, "\"$FL\" run \"$D/sem.lock\" true");
    assert_eq!(o.status.code(), Some(65), "{}", err(&o));
    assert!(err(&o).contains("semaphore of 2 permits"), "{}", err(&o));
    assert!(sh(d, "\"$FL\" run \"$D/plain.lock\" true").status.success());
    let o = sh(d, "\"$FL\" run -s \"$D/plain.lock\" true");
    assert_eq!(o.status.code(), Some(65));
    assert!(err(&o).contains("exclusive lock"), "{}", err(&o));
    // Without -s the plain lock is still fine, and -x on a new file makes a reader/writer lock.
    assert!(
        sh(d, "\"$FL\" run -x \"$D/plain.lock\" true")
            .status
            .success()
    );
    assert!(sh(d, "\"$FL\" run -x \"$D/rw.lock\" true").status.success());
    assert!(json(d, "rw.lock").contains("\"kind\":\"rwlock\""));
    let o = sh(d, "\"$FL\" run -s --permits 2 \"$D/x.lock\" true");
    assert_eq!(o.status.code(), Some(64), "{}", err(&o));
    let o = sh(d, "\"$FL\" run --permits 0 \"$D/x.lock\" true");
    assert_eq!(o.status.code(), Some(64), "{}", err(&o));
    let o = sh(d, "\"$FL\" run -s etcd://127.0.0.1:1/x true");
    assert_eq!(o.status.code(), Some(64), "{}", err(&o));
    assert!(!d.join("x.lock").exists());
}

#[test]
fn a_killed_reader_is_recovered_and_the_writer_told() {
    let dir = TempDir::new("cli-kinds-killed");
    let d = dir.path();
    let mut reader = spawn(
        d,
        "exec \"$FL\" run -s \"$D/rw.lock\" -- sh -c 'touch \"$D/held\"; while [ -d \"$D\" ] && [ ! -e \"$D/release\" ]; do sleep 0.01; done'",
    );
    wait_until(Duration::from_secs(20), "the reader", || {
        d.join("held").exists()
    });
    // SIGKILL fairlock itself (the holder of the grant): its command lives on and keeps the
    // read grant alive until it ends; then the writer is told the holder died.
    reader.kill().unwrap();
    reader.wait().unwrap();
    let o = sh(d, "\"$FL\" run -n -x \"$D/rw.lock\" -- true");
    assert_eq!(
        o.status.code(),
        Some(1),
        "the command still holds the read: {}",
        err(&o)
    );
    std::fs::write(d.join("release"), "").unwrap();
    let o = sh(
        d,
        "\"$FL\" run -w 20 -x \"$D/rw.lock\" -- sh -c 'echo $FAIRLOCK_OWNER_DIED'",
    );
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "1\n");
}

#[test]
fn named_locks_in_one_file_exclude_per_name_and_status_lists_them() {
    let dir = TempDir::new("cli-kinds-names");
    let d = dir.path();
    // One command holds "alpha" until told to go; "beta" in the same file is free meanwhile,
    // "alpha" is busy (-n: exit 1), and status lists both names.
    let mut holder = spawn(
        d,
        "\"$FL\" run --name alpha \"$D/jobs.lock\" -- sh -c 'touch \"$D/in\"; i=0; while [ ! -e \"$D/go\" ] && [ $i -lt 2000 ]; do sleep 0.01; i=$((i+1)); done'",
    );
    wait_until(Duration::from_secs(20), "the holder of alpha", || {
        d.join("in").exists()
    });
    let o = sh(d, "\"$FL\" run -n --name beta \"$D/jobs.lock\" -- true");
    assert!(o.status.success(), "beta is free: {}", err(&o));
    let o = sh(d, "\"$FL\" run -n --name alpha \"$D/jobs.lock\" -- true");
    assert_eq!(o.status.code(), Some(1), "alpha is held: {}", err(&o));
    // Readers of a third name run together: another kind in the same file.
    let o = sh(
        d,
        "\"$FL\" run -s --name gamma \"$D/jobs.lock\" -- \"$FL\" run -n -s --name gamma \"$D/jobs.lock\" -- true",
    );
    assert!(o.status.success(), "{}", err(&o));
    let text = sh(d, "\"$FL\" status \"$D/jobs.lock\"");
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains("named locks (3 names, 1 held)"), "{text}");
    assert!(text.contains("name:           alpha"), "{text}");
    assert!(text.contains("reader/writer lock"), "{text}");
    let j = json(d, "jobs.lock");
    assert!(
        j.starts_with("{\"path\":") && j.contains("\"kind\":\"names\""),
        "{j}"
    );
    assert!(
        j.contains("{\"name\":\"alpha\",") && j.contains("\"held\":true"),
        "{j}"
    );
    let one = sh(d, "\"$FL\" status --json --name beta \"$D/jobs.lock\"");
    let one = String::from_utf8_lossy(&one.stdout).into_owned();
    assert!(
        one.contains("\"name\":\"beta\"") && !one.contains("alpha"),
        "{one}"
    );
    let missing = sh(d, "\"$FL\" status --name nobody \"$D/jobs.lock\"");
    assert_eq!(missing.status.code(), Some(66), "{}", err(&missing));
    // A file of named locks is not a file of one lock, and back (exit 65).
    let o = sh(d, "\"$FL\" run -n \"$D/jobs.lock\" -- true");
    assert_eq!(o.status.code(), Some(65), "{}", err(&o));
    assert!(err(&o).contains("named locks"), "{}", err(&o));
    let o = sh(
        d,
        "\"$FL\" run \"$D/one.lock\" -- true && \"$FL\" run --name x \"$D/one.lock\" -- true",
    );
    assert_eq!(o.status.code(), Some(65), "{}", err(&o));
    std::fs::write(d.join("go"), b"").unwrap();
    assert!(holder.wait().unwrap().success());
}

/// `fairlock status` says a file's bypass bound (a file made with `Fairness::Bounded` by a
/// program using the library), in text and JSON; a strict file has `"bypass_bound":null`.
/// `fairlock run` takes such a lock with its bound (it was refused, exit 65), while the
/// program holds it too.
#[test]
fn status_shows_a_bounded_file_s_bound() {
    let dir = TempDir::new("cli-kinds-bounded");
    let d = dir.path();
    let _b = fairlock::FairLock::options()
        .fairness(fairlock::Fairness::Bounded(7))
        .open(d.join("bounded.lock"))
        .unwrap();
    let st = json(d, "bounded.lock");
    assert!(
        st.contains("\"kind\":\"exclusive\",\"permits\":null,\"bypass_bound\":7,"),
        "{st}"
    );
    assert!(st.contains("\"token\":512,"), "{st}");
    let o = sh(d, "\"$FL\" status \"$D/bounded.lock\"");
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("fairness:       bounded: a waiter may be overtaken up to 7 times\n"),
        "{text}"
    );
    let o = sh(d, "\"$FL\" run \"$D/bounded.lock\" -- sh -c 'echo ran'");
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "ran\n");
    let held = _b.lock().unwrap();
    let o = sh(d, "\"$FL\" run -n \"$D/bounded.lock\" true");
    assert_eq!(o.status.code(), Some(1), "held: -n gives up\n{}", err(&o));
    drop(held);
    // Its tokens, the bounded file's: (ticket + 1) · 512.
    let st = json(d, "bounded.lock");
    assert!(st.contains("\"token\":1536,"), "{st}");
    let o = sh(d, "\"$FL\" run \"$D/strict.lock\" true");
    assert!(o.status.success(), "{}", err(&o));
    let st = json(d, "strict.lock");
    assert!(st.contains("\"bypass_bound\":null,"), "{st}");
    let o = sh(d, "\"$FL\" status \"$D/strict.lock\"");
    assert!(!String::from_utf8_lossy(&o.stdout).contains("fairness:"));
}
