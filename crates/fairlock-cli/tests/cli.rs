//! The `fairlock` command-line program, driven through the built binary with real processes.

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fairlock");

/// A fresh directory, removed on drop.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        static N: AtomicU32 = AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "fairlock-cli-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn fairlock(args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args);
    c
}

fn run(args: &[&str]) -> Output {
    fairlock(args).stdin(Stdio::null()).output().unwrap()
}

fn spawn(args: &[&str]) -> Child {
    fairlock(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The raw value of a top-level JSON field (numbers, booleans, null).
fn field(json: &str, name: &str) -> String {
    let key = format!("\"{name}\":");
    let at = json
        .find(&key)
        .unwrap_or_else(|| panic!("no {name} in {json}"))
        + key.len();
    json[at..]
        .chars()
        .take_while(|c| !matches!(c, ',' | '}'))
        .collect()
}

fn status_json(lock: &Path) -> String {
    let o = run(&["status", "--json", s(lock)]);
    assert!(o.status.success(), "status failed: {}", stderr(&o));
    String::from_utf8(o.stdout).unwrap()
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        sleep(Duration::from_millis(10));
    }
}

fn waiters(lock: &Path) -> u64 {
    field(&status_json(lock), "waiters").parse().unwrap()
}

/// Whether `lock` is held; false while the file does not exist or is still being set up.
fn held(lock: &Path) -> bool {
    let o = run(&["status", "--json", s(lock)]);
    o.status.success() && field(&String::from_utf8_lossy(&o.stdout), "held") == "true"
}

/// Starts a `fairlock run` that holds `lock` until the file `go` exists.
fn hold_until(lock: &Path, go: &Path) -> Child {
    let script = format!("while [ ! -e '{}' ]; do sleep 0.02; done", s(go));
    let child = spawn(&["run", s(lock), "-c", &script]);
    wait_until("the holder", || held(lock));
    child
}

#[test]
fn staggered_runs_are_served_in_arrival_order() {
    let d = Dir::new("fifo");
    let (lock, go, order) = (d.path("L"), d.path("go"), d.path("order"));
    let mut holder = hold_until(&lock, &go);
    let mut runs = Vec::new();
    for k in 1..=5 {
        let cmd = format!("echo r{k} >> '{}'", s(&order));
        runs.push(spawn(&["run", s(&lock), "-c", &cmd]));
        wait_until("the run to queue", || waiters(&lock) == k);
    }
    fs::write(&go, "").unwrap();
    assert!(holder.wait().unwrap().success());
    for mut r in runs {
        assert!(r.wait().unwrap().success());
    }
    assert_eq!(fs::read_to_string(&order).unwrap(), "r1\nr2\nr3\nr4\nr5\n");
}

#[test]
fn nonblock_on_a_held_lock_fails_fast() {
    let d = Dir::new("nonblock");
    let (lock, go) = (d.path("L"), d.path("go"));
    let mut holder = hold_until(&lock, &go);
    let t = Instant::now();
    let o = run(&["run", "-n", s(&lock), "true"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(t.elapsed() < Duration::from_secs(1));
    assert_eq!(stderr(&o), "", "a conflict is silent without -v");
    let o = run(&["run", "-n", "-E", "7", s(&lock), "true"]);
    assert_eq!(o.status.code(), Some(7));
    let o = run(&["run", "-n", "-v", s(&lock), "true"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).starts_with("fairlock: "), "{}", stderr(&o));
    fs::write(&go, "").unwrap();
    assert!(holder.wait().unwrap().success());
    // Free again: -n gets it.
    assert!(run(&["run", "-n", s(&lock), "true"]).status.success());
}

#[test]
fn wait_times_out() {
    let d = Dir::new("wait");
    let (lock, go) = (d.path("L"), d.path("go"));
    let mut holder = hold_until(&lock, &go);
    let t = Instant::now();
    let o = run(&["run", "-w", "0.3", s(&lock), "true"]);
    let took = t.elapsed();
    assert_eq!(o.status.code(), Some(1));
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    let o = run(&["run", "--wait", "0.3", "-E", "7", s(&lock), "true"]);
    assert_eq!(o.status.code(), Some(7));
    // The timed-out waiters left the queue: a waiter behind them is not stuck.
    assert_eq!(waiters(&lock), 0);
    fs::write(&go, "").unwrap();
    assert!(holder.wait().unwrap().success());
    let o = run(&["run", "-w", "5", s(&lock), "-c", "exit 0"]);
    assert!(o.status.success());
}

#[test]
fn passes_the_command_status_through() {
    let d = Dir::new("status");
    let lock = d.path("L");
    assert_eq!(
        run(&["run", s(&lock), "-c", "exit 3"]).status.code(),
        Some(3)
    );
    assert_eq!(
        run(&["run", s(&lock), "--", "sh", "-c", "exit 0"])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(run(&["run", s(&lock), "false"]).status.code(), Some(1));
    let o = run(&["run", s(&lock), "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(o.status.code(), Some(128 + 15));
    // Arguments that look like options belong to the command.
    let o = run(&["run", s(&lock), "echo", "-n", "--wait", "x"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "--wait x");
}

#[test]
fn the_command_gets_token_and_file() {
    let d = Dir::new("env");
    let lock = d.path("L");
    let show = "echo $FAIRLOCK_TOKEN $FAIRLOCK_FILE $FAIRLOCK_OWNER_DIED";
    let mut last = 0;
    for _ in 0..3 {
        let o = run(&["run", s(&lock), "-c", show]);
        assert!(o.status.success());
        let out = String::from_utf8(o.stdout).unwrap();
        let parts: Vec<&str> = out.split_whitespace().collect();
        let token: u64 = parts[0].parse().unwrap();
        assert!(token > last, "{token} after {last}");
        last = token;
        assert_eq!(Path::new(parts[1]), lock.as_path());
        assert_eq!(parts[2], "0");
    }
}

#[test]
fn an_expired_lease_is_taken_over() {
    let d = Dir::new("lease");
    let lock = d.path("L");
    let t = Instant::now();
    let first = spawn(&["run", "--lease", "0.3", s(&lock), "sleep", "3"]);
    wait_until("the first run", || held(&lock));
    let first_token: u64 = field(&status_json(&lock), "token").parse().unwrap();
    let o = run(&[
        "run",
        s(&lock),
        "-c",
        "echo $FAIRLOCK_TOKEN $FAIRLOCK_OWNER_DIED",
    ]);
    assert!(
        t.elapsed() < Duration::from_millis(2900),
        "{:?}",
        t.elapsed()
    );
    assert!(o.status.success());
    let out = String::from_utf8(o.stdout).unwrap();
    let parts: Vec<&str> = out.split_whitespace().collect();
    assert!(parts[0].parse::<u64>().unwrap() > first_token, "{out}");
    assert_eq!(parts[1], "1", "the takeover is reported as owner died");
    // The first command finished normally, but its lock was lost meanwhile: 69.
    let o = first.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("lost the lock"), "{err}");
}

#[test]
fn kill_on_lost_terminates_the_command() {
    let d = Dir::new("killonlost");
    let lock = d.path("L");
    let t = Instant::now();
    let first = spawn(&[
        "run",
        "--lease",
        "0.3",
        "--kill-on-lost",
        s(&lock),
        "sleep",
        "10",
    ]);
    wait_until("the first run", || held(&lock));
    let o = run(&["run", s(&lock), "true"]);
    assert!(o.status.success());
    let o = first.wait_with_output().unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    assert!(stderr(&o).contains("SIGTERM"), "{}", stderr(&o));
}

#[test]
fn status_json_shows_holder_and_waiters() {
    let d = Dir::new("json");
    let (lock, go) = (d.path("L"), d.path("go"));
    let mut holder = hold_until(&lock, &go);
    let mut waiter = spawn(&["run", s(&lock), "true"]);
    wait_until("the waiter", || waiters(&lock) >= 1);
    let j = status_json(&lock);
    assert_eq!(field(&j, "held"), "true", "{j}");
    assert_eq!(field(&j, "owner_pid"), holder.id().to_string(), "{j}");
    assert_eq!(field(&j, "lease_remaining_ms"), "null", "{j}");
    assert!(field(&j, "token").parse::<u64>().unwrap() >= 1, "{j}");
    assert!(j.contains("\"queue\":[{"), "{j}");
    let text = run(&["status", s(&lock)]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains(&format!("pid {}", holder.id())), "{text}");
    assert!(text.contains(&format!("pid {}", waiter.id())), "{text}");
    fs::write(&go, "").unwrap();
    assert!(holder.wait().unwrap().success());
    assert!(waiter.wait().unwrap().success());
    let j = status_json(&lock);
    assert_eq!(field(&j, "held"), "false", "{j}");
    assert_eq!(field(&j, "waiters"), "0", "{j}");
    assert_eq!(field(&j, "owner_pid"), "null", "{j}");
}

#[test]
fn a_killed_waiter_does_not_stall_the_queue() {
    let d = Dir::new("killed");
    let (lock, go, out) = (d.path("L"), d.path("go"), d.path("out"));
    let mut holder = hold_until(&lock, &go);
    let mut doomed = spawn(&["run", s(&lock), "true"]);
    wait_until("the first waiter", || waiters(&lock) == 1);
    let mut next = spawn(&["run", s(&lock), "-c", &format!("echo ran > '{}'", s(&out))]);
    wait_until("the second waiter", || waiters(&lock) == 2);
    doomed.kill().unwrap();
    assert_eq!(doomed.wait().unwrap().signal(), Some(9));
    fs::write(&go, "").unwrap();
    assert!(holder.wait().unwrap().success());
    assert!(next.wait().unwrap().success());
    assert_eq!(fs::read_to_string(&out).unwrap(), "ran\n");
}

#[test]
fn sigterm_is_forwarded_to_the_command() {
    let d = Dir::new("signal");
    let (lock, ready) = (d.path("L"), d.path("ready"));
    let script = format!(
        "trap 'kill $p; exit 42' TERM; sleep 10 >/dev/null 2>&1 & p=$!; touch '{}'; wait",
        s(&ready)
    );
    let child = spawn(&["run", s(&lock), "-c", &script]);
    wait_until("the command", || ready.exists());
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(42), "{}", stderr(&o));
}

#[test]
fn refuses_a_file_that_is_not_a_lock_file() {
    let d = Dir::new("foreign");
    let file = d.path("notes.txt");
    let content = b"precious data, not a lock file\n";
    fs::write(&file, content).unwrap();
    for args in [vec!["run", s(&file), "true"], vec!["status", s(&file)]] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(65), "{args:?}");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("fairlock: ") && err.contains(s(&file)),
            "{err}"
        );
        assert_eq!(fs::read(&file).unwrap(), content);
    }
}

#[test]
fn missing_commands_and_unusable_paths() {
    let d = Dir::new("errors");
    let lock = d.path("L");
    let o = run(&["run", s(&lock), "no-such-command-fairlock-test"]);
    assert_eq!(o.status.code(), Some(127));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("no-such-command-fairlock-test"));
    // The lock was released after the failed start.
    assert!(run(&["run", "-n", s(&lock), "true"]).status.success());
    let dir = d.path("sub");
    fs::create_dir(&dir).unwrap();
    let missing = d.path("missing/L");
    for p in [&dir, &missing] {
        let o = run(&["run", s(p), "true"]);
        assert_eq!(o.status.code(), Some(66), "{p:?}: {}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1);
    }
    assert_eq!(
        run(&["status", s(&d.path("nothing"))]).status.code(),
        Some(66)
    );
    assert!(!d.path("nothing").exists(), "status never creates the file");
}

#[test]
fn usage_errors_are_one_line_and_exit_64() {
    let d = Dir::new("usage");
    let lock = d.path("L");
    for args in [
        vec!["run", s(&lock)],
        vec!["run", "-w", "abc", s(&lock), "true"],
        vec!["run", "-w", "-1", s(&lock), "true"],
        vec!["run", "--lease", "0", s(&lock), "true"],
        vec!["run", "-E", "300", s(&lock), "true"],
        vec!["run", "-n", "-w", "1", s(&lock), "true"],
        vec!["run", s(&lock), "-c", "true", "extra"],
        vec!["frobnicate"],
        vec![],
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(64), "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("fairlock: "), "{err}");
    }
    assert!(!lock.exists(), "usage errors touch nothing");
    for args in [vec!["--help"], vec!["run", "--help"], vec!["--version"]] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(0), "{args:?}");
        assert!(!o.stdout.is_empty());
    }
}

#[test]
fn an_unknown_scheme_is_a_usage_error_never_a_file() {
    let d = Dir::new("scheme");
    for address in [
        "redis://h:6379/jobs",
        "etcd+tls://h:2379/x",
        "https://h:2379/x",
    ] {
        let o = fairlock(&["run", address, "--", "true"])
            .current_dir(&d.0)
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(64), "{address}: {err}");
        assert!(
            err.contains("unknown scheme") && err.contains("etcd://") && err.contains("etcds://"),
            "{address}: {err}"
        );
        let o = fairlock(&["status", address])
            .current_dir(&d.0)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(64), "{address}: {}", stderr(&o));
    }
    // Nothing was created: no directory named after the scheme.
    assert_eq!(fs::read_dir(&d.0).unwrap().count(), 0);
    // A file whose name only looks like an address is reached as a path.
    let o = fairlock(&["run", "./odd://name", "--", "true"])
        .current_dir(&d.0)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(66), "{}", stderr(&o));
}
