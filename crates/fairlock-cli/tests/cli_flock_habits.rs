//! `fairlock run` where `flock(1)` users go (issue 11, bugs 1 and 9): the cron pattern after a
//! crash, the signal dispositions a command inherits, signals sent to a whole process group,
//! a file `flock(1)` holds, files on virtual filesystems, flock's flags, and `status` on a
//! dead holder. The built binary, driven through `/bin/sh` as scripts drive it.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{TempDir, wait_until};

const BIN: &str = env!("CARGO_BIN_EXE_fairlock");

/// Runs a shell script with `$FL` set to the fairlock binary and `$D` to `dir`, from a clean
/// signal state: through fork and exec (a `pre_exec` keeps std off `posix_spawn`, after which
/// glibc leaves its internal signals 32 and 33 ignored in the child — the very contamination a
/// test below looks for), with 32 and 33 reset to the default in case this test process was
/// itself started that way (glibc's `sigaction` refuses them; the system call does not).
fn sh(dir: &Path, script: &str) -> Output {
    let mut c = Command::new("/bin/sh");
    c.arg("-c")
        .arg(script)
        .env("FL", BIN)
        .env("D", dir)
        .stdin(Stdio::null());
    // SAFETY: the closure only makes the rt_sigaction system call, async-signal-safe, with a
    // zeroed (SIG_DFL, empty mask) kernel sigaction of the kernel's size.
    unsafe {
        c.pre_exec(|| {
            let dfl = [0u64; 4]; // handler SIG_DFL, flags 0, restorer 0, mask 0
            for sig in [32, 33] {
                libc::syscall(libc::SYS_rt_sigaction, sig, dfl.as_ptr(), 0usize, 8usize);
            }
            Ok(())
        })
    };
    c.output().expect("run /bin/sh")
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The `SigIgn`/`SigBlk` masks of a status text.
fn masks(status: &str) -> (u64, u64) {
    let get = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
            .unwrap_or_else(|| panic!("no {name} in {status:?}"))
    };
    (get("SigIgn:"), get("SigBlk:"))
}

/// Bug 1: `fairlock run d.lock sleep 5 & kill -9 $!; fairlock run -n d.lock echo ok` exited 1
/// ("held or has waiters") forever, and `status` showed the dead pid as the holder. The crash
/// here takes the run and its command (the command alone keeps the lock alive: see
/// `the_command_keeps_the_lock_when_fairlock_is_killed`).
#[test]
fn nonblock_after_a_killed_holder_runs_and_is_told() {
    let d = TempDir::new("habits-cron");
    let o = sh(
        d.path(),
        r#"
        "$FL" run "$D/d.lock" sleep 3 >/dev/null 2>&1 & pid=$!
        i=0; while ! "$FL" status "$D/d.lock" 2>/dev/null | grep -q "^holder: *pid" && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done
        i=0; while [ -z "$(pgrep -P $pid)" ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done # its command too (it holds the lock first, then forks it)
        kids=$(pgrep -P $pid); kill -9 $pid $kids; wait $pid 2>/dev/null; for k in $kids; do while [ -e /proc/$k ] && ! grep -q '^State:.*Z' /proc/$k/status 2>/dev/null; do sleep 0.01; done; done
        "$FL" status "$D/d.lock"
        "$FL" run -n "$D/d.lock" sh -c 'echo "ran died=$FAIRLOCK_OWNER_DIED"'; echo "n: $?"
        "$FL" run -n "$D/d.lock" sh -c 'echo "again died=$FAIRLOCK_OWNER_DIED"'; echo "n: $?"
        "#,
    );
    let s = out(&o);
    assert!(
        s.contains("DEAD"),
        "status must say the holder is dead:\n{s}"
    );
    assert!(
        s.contains("ran died=1\nn: 0\nagain died=0\nn: 0"),
        "-n must pass the dead holder once, with owner_died:\n{s}{}",
        err(&o)
    );
}

/// Bug 1, `-w 0` and a short `-w`: the same.
#[test]
fn zero_and_short_waits_after_a_killed_holder_run() {
    for w in ["0", "0.05"] {
        let d = TempDir::new("habits-w0");
        let script = format!(
            r#"
            "$FL" run "$D/d.lock" sleep 3 >/dev/null 2>&1 & pid=$!
            i=0; while ! "$FL" status "$D/d.lock" 2>/dev/null | grep -q "^holder: *pid" && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done
            i=0; while [ -z "$(pgrep -P $pid)" ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done # its command too (it holds the lock first, then forks it)
            kids=$(pgrep -P $pid); kill -9 $pid $kids; wait $pid 2>/dev/null; for k in $kids; do while [ -e /proc/$k ] && ! grep -q '^State:.*Z' /proc/$k/status 2>/dev/null; do sleep 0.01; done; done
            "$FL" run -w {w} "$D/d.lock" sh -c 'echo "ran died=$FAIRLOCK_OWNER_DIED"'; echo "w: $?"
            "#
        );
        let o = sh(d.path(), &script);
        assert!(
            out(&o).contains("ran died=1\nw: 0"),
            "-w {w}: {}{}",
            out(&o),
            err(&o)
        );
    }
}

/// Bug 9a: a signal fairlock inherited ignored (`nohup`, `trap '' HUP`) was caught and
/// forwarded anyway, killing the job; and the command started with signals 32 and 33 ignored.
/// The command must start with exactly the dispositions and mask fairlock inherited.
#[test]
fn the_command_inherits_exactly_fairlocks_signal_state() {
    let d = TempDir::new("habits-sigstate");
    let o = sh(
        d.path(),
        r#"
        trap '' HUP PIPE
        grep -E '^Sig(Ign|Blk):' /proc/self/status > "$D/outside"
        "$FL" run "$D/l" grep -E '^Sig(Ign|Blk):' /proc/self/status > "$D/inside"
        cat "$D/outside"; echo --; cat "$D/inside"
        "#,
    );
    let s = out(&o);
    let (outside, inside) = s.split_once("--\n").expect("two parts");
    assert_eq!(
        masks(inside),
        masks(outside),
        "the command's ignored/blocked signals differ from fairlock's own:\n{s}"
    );
    let (ign, _) = masks(inside);
    assert_eq!(
        masks(outside).0 & (0b11 << 31),
        0,
        "the test's own baseline is clean"
    );
    assert!(ign & 1 != 0, "SIGHUP must stay ignored");
    assert!(ign & (1 << 12) != 0, "SIGPIPE must stay ignored");
    assert_eq!(
        ign & (0b11 << 31),
        0,
        "glibc's signals 32 and 33 must not be ignored"
    );

    // A HUP sent to fairlock under nohup neither kills fairlock nor reaches the job.
    let o = sh(
        d.path(),
        r#"
        trap '' HUP
        "$FL" run "$D/l" sh -c 'sleep 0.4; echo done' & pid=$!
        sleep 0.2; kill -HUP $pid; wait $pid; echo "exit $?"
        "#,
    );
    assert!(out(&o).contains("done\nexit 0"), "{}{}", out(&o), err(&o));

    // Without nohup the default is back: the command gets SIGPIPE's default too.
    let o = sh(
        d.path(),
        r#""$FL" run "$D/l" grep -E '^SigIgn:' /proc/self/status"#,
    );
    assert!(out(&o).contains("SigIgn:\t0000000000000000"), "{}", out(&o));
}

/// Counts the signals it gets (a worker run as the command): every delivery, at once.
static COUNT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

extern "C" fn count_signal(_: libc::c_int) {
    COUNT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

fn count_signals_worker() {
    let out = common::env("FL_COUNT");
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: installs an async-signal-safe handler (one atomic add).
        unsafe { libc::signal(sig, count_signal as *const () as libc::sighandler_t) };
    }
    let started = Instant::now();
    let mut last = u32::MAX;
    while started.elapsed() < Duration::from_millis(2500) {
        let n = COUNT.load(std::sync::atomic::Ordering::SeqCst);
        if n != last {
            std::fs::write(&out, n.to_string()).unwrap();
            last = n;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Bug 9b: `kill -INT -PGID` reached the command twice: once from the kernel (it is in the
/// group) and once forwarded by fairlock. A signal to fairlock alone is still forwarded once.
/// The command is a worker that counts every delivery as it happens.
#[test]
fn a_group_signal_reaches_the_command_once() {
    if common::role().is_some() {
        return count_signals_worker();
    }
    for (sig, name) in [(libc::SIGINT, "INT"), (libc::SIGTERM, "TERM")] {
        let d = TempDir::new("habits-group");
        let count = d.join("count");
        let lock = d.join("l");
        let mut cmd = Command::new(BIN);
        cmd.args(["run", lock.to_str().unwrap(), "--"])
            .arg(std::env::current_exe().unwrap())
            .args([
                "a_group_signal_reaches_the_command_once",
                "--exact",
                "--test-threads=1",
            ])
            .env(common::ROLE, "count")
            .env("FL_COUNT", &count)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .process_group(0);
        let mut child = cmd.spawn().expect("spawn fairlock");
        let pid = child.id() as libc::pid_t;
        let n = || {
            std::fs::read_to_string(&count)
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok())
        };
        wait_until(Duration::from_secs(10), "the command to start", || {
            n() == Some(0)
        });
        // SAFETY: kill has no memory-safety preconditions; -pid is the group we created.
        unsafe { libc::kill(-pid, sig) };
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(n(), Some(1), "SIG{name} to the process group: once");
        // SAFETY: as above, to fairlock alone.
        unsafe { libc::kill(pid, sig) };
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(n(), Some(2), "SIG{name} to fairlock alone: forwarded once");
        let st = child.wait().unwrap();
        assert!(st.success(), "the command survived its handlers: {st:?}");
    }
}

/// Bug 9c: while `flock(1)` held an empty file, `fairlock run -w 0.5` on it blocked 3.7 s:
/// the initialisation lock ignored `-w` and `-n`.
#[test]
fn wait_and_nonblock_bound_the_initialisation_lock() {
    if Command::new("flock").arg("--version").output().is_err() {
        eprintln!("skipped: no flock(1)");
        return;
    }
    let d = TempDir::new("habits-initlock");
    let file = d.join("empty.lock");
    std::fs::write(&file, b"").unwrap();
    let mut holder = Command::new("flock")
        .arg(&file)
        .args(["sleep", "5"])
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let o = Command::new(BIN)
        .args(["run", "-w", "0.5", file.to_str().unwrap(), "true"])
        .output()
        .unwrap();
    let took = started.elapsed();
    assert_eq!(o.status.code(), Some(1), "{}", err(&o));
    assert!(took < Duration::from_millis(1500), "-w 0.5 took {took:?}");
    let started = Instant::now();
    let o = Command::new(BIN)
        .args(["run", "-n", "-E", "7", file.to_str().unwrap(), "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(7), "{}", err(&o));
    assert!(started.elapsed() < Duration::from_millis(500));
    let _ = holder.kill();
    let _ = holder.wait();
    // Once flock(1) is gone, the file is initialised and used.
    let o = Command::new(BIN)
        .args(["run", "-w", "5", file.to_str().unwrap(), "true"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", err(&o));
}

/// Bug 9d: `/proc/version` was "initialised" (the write failed only with "Illegal seek"); as
/// root an empty file on procfs or sysfs could have been written. Files on virtual filesystems
/// are refused before anything is written; tmpfs (`/dev/shm`) keeps working.
#[test]
fn files_on_virtual_filesystems_are_refused() {
    for path in ["/proc/version", "/proc/self/comm", "/sys/kernel/profiling"] {
        if !Path::new(path).exists() {
            continue;
        }
        let before = std::fs::read(path).ok();
        let o = Command::new(BIN)
            .args(["run", path, "true"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(66), "{path}: {}", err(&o));
        assert!(
            err(&o).contains("virtual filesystem"),
            "{path}: {}",
            err(&o)
        );
        if path != "/proc/self/comm" {
            assert_eq!(std::fs::read(path).ok(), before, "{path} changed");
        }
    }
    if Path::new("/dev/shm").is_dir() {
        let p = format!("/dev/shm/fairlock-habits-{}.lock", std::process::id());
        let o = Command::new(BIN)
            .args(["run", &p, "true"])
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&p);
        assert!(o.status.success(), "tmpfs must work: {}", err(&o));
    }
}

/// Bug 9e: `-x`, `-e`, `--exclusive`, `--nb`, `--nonblocking` (and `-o`/`--close`) were
/// rejected although they change nothing for fairlock.
#[test]
fn flocks_flags_are_accepted() {
    let d = TempDir::new("habits-flags");
    let l = d.join("l");
    for flags in [
        &["-x"][..],
        &["-e"],
        &["--exclusive"],
        &["--nb"],
        &["--nonblock"],
        &["--nonblocking"],
        &["-o"],
        &["--close"],
        &["-x", "-e", "--exclusive", "-n", "--nb", "-o"],
    ] {
        let o = Command::new(BIN)
            .arg("run")
            .args(flags)
            .arg(&l)
            .arg("true")
            .output()
            .unwrap();
        assert!(o.status.success(), "{flags:?}: {}", err(&o));
    }
}

/// Bug 9f: `status` showed a dead holder as if alive; it says it is dead, and what the next
/// acquire does; `--json` gives `alive`.
#[test]
fn status_says_a_dead_holder_is_dead() {
    let d = TempDir::new("habits-status");
    let o = sh(
        d.path(),
        r#"
        "$FL" run "$D/d.lock" sleep 3 >/dev/null 2>&1 & pid=$!
        i=0; while ! "$FL" status "$D/d.lock" 2>/dev/null | grep -q "^holder: *pid" && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done
        "$FL" status --json "$D/d.lock"; echo
        i=0; while [ -z "$(pgrep -P $pid)" ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done # its command too (it holds the lock first, then forks it)
        kids=$(pgrep -P $pid); kill -9 $pid $kids; wait $pid 2>/dev/null; for k in $kids; do while [ -e /proc/$k ] && ! grep -q '^State:.*Z' /proc/$k/status 2>/dev/null; do sleep 0.01; done; done
        "$FL" status "$D/d.lock"; "$FL" status --json "$D/d.lock"
        "#,
    );
    let s = out(&o);
    let (alive, dead) = s.split_once('\n').unwrap();
    assert!(alive.contains("\"alive\":true"), "{alive}");
    assert!(
        dead.contains("DEAD") && dead.contains("owner died"),
        "{dead}"
    );
    assert!(dead.contains("\"alive\":false"), "{dead}");
}

/// Command lines written as for flock(1) get a hint of what to type: `fairlock FILE CMD...`
/// (flock takes the file first) names `fairlock run FILE -- CMD...`, and `fairlock -u FD`
/// names `fairlock unlock FD`; both are usage errors (64), one line each.
#[test]
fn flock_style_command_lines_get_a_hint() {
    let d = TempDir::new("habits-hints");
    let file = d.join("l");
    let file = file.to_str().expect("utf-8 path");
    let o = Command::new(BIN)
        .args([file, "echo", "hi"])
        .output()
        .expect("run fairlock");
    assert_eq!(o.status.code(), Some(64), "{}", err(&o));
    assert!(
        err(&o).contains(&format!("did you mean `fairlock run {file} -- echo hi`?")),
        "{}",
        err(&o)
    );
    assert_eq!(err(&o).lines().count(), 1, "{}", err(&o));
    assert!(
        !d.join("l").exists(),
        "no lock file is made by a usage error"
    );
    for flag in ["-u", "--unlock"] {
        let o = Command::new(BIN)
            .args([flag, "9"])
            .output()
            .expect("run fairlock");
        assert_eq!(o.status.code(), Some(64), "{}", err(&o));
        assert!(
            err(&o).contains("did you mean `fairlock unlock 9`?"),
            "{flag}: {}",
            err(&o)
        );
    }
}

/// A semaphore file run without `--permits` is refused (65) with a line that says which
/// `--permits` takes one of its permits, for `-s` too.
#[test]
fn a_semaphore_run_without_permits_is_told_its_permits() {
    let d = TempDir::new("habits-permits");
    let file = d.join("sem");
    let file = file.to_str().expect("utf-8 path");
    let o = Command::new(BIN)
        .args(["run", "--permits", "3", file, "true"])
        .output()
        .expect("run fairlock");
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    for flags in [&[][..], &["-s"][..], &["-x"][..]] {
        let o = Command::new(BIN)
            .arg("run")
            .args(flags)
            .args([file, "true"])
            .output()
            .expect("run fairlock");
        assert_eq!(o.status.code(), Some(65), "{flags:?}: {}", err(&o));
        assert!(
            err(&o).contains("fairlock run --permits 3"),
            "{flags:?}: {}",
            err(&o)
        );
        assert_eq!(err(&o).lines().count(), 1, "{}", err(&o));
    }
}

/// `--mode` sets the permission bits of a lock file the run creates (a file to share with a
/// group: 660), and leaves an existing file's alone; a value that is not octal permission
/// bits is a usage error (64). Without it a new file is the user's own (600).
#[test]
fn mode_sets_the_permission_bits_of_a_new_lock_file() {
    use std::os::unix::fs::PermissionsExt;
    let d = TempDir::new("habits-mode");
    let mode_of = |name: &str| {
        std::fs::metadata(d.join(name))
            .expect("lock file")
            .permissions()
            .mode()
            & 0o7777
    };
    let run = |args: &[&str]| {
        Command::new(BIN)
            .arg("run")
            .args(args)
            .output()
            .expect("run fairlock")
    };
    let shared = d.join("shared");
    let shared = shared.to_str().expect("utf-8 path");
    // The umask may clear bits: compare with what it leaves of 0660.
    let umask = {
        // SAFETY: umask has no preconditions; it is set back at once.
        let old = unsafe { libc::umask(0o022) };
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        old as u32
    };
    let o = run(&["--mode", "660", shared, "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(mode_of("shared"), 0o660 & !umask);
    let o = run(&["--mode", "0o600", shared, "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(
        mode_of("shared"),
        0o660 & !umask,
        "an existing file keeps its mode"
    );
    let own = d.join("own");
    let own = own.to_str().expect("utf-8 path");
    let o = run(&[own, "true"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(mode_of("own"), 0o600 & !umask);
    for bad in ["9", "rw-r--r--", "17777"] {
        let o = run(&["--mode", bad, own, "true"]);
        assert_eq!(o.status.code(), Some(64), "{bad}: {}", err(&o));
        assert!(err(&o).contains("octal"), "{bad}: {}", err(&o));
    }
}

/// `fairlock run L -- job`, then `fairlock` SIGKILLed while `job` runs (the OOM killer, `timeout
/// -s KILL`, a crashed supervisor): the job keeps the lock, as flock(1)'s child does, for
/// every kind; when the job ends, the next holder is told the owner died. With `-o` (flock's
/// "the command does not hold the lock") it is freed with `fairlock`.
#[test]
fn the_command_keeps_the_lock_when_fairlock_is_killed() {
    let d = TempDir::new("habits-wrapper-killed");
    for (kind, flags) in [
        ("exclusive", &[][..]),
        ("write", &["-x"][..]),
        ("permit", &["--permits", "1"][..]),
        ("named", &["--name", "job"][..]),
        // flock's -o: the command does not hold the lock; a killed fairlock frees it at once.
        ("close", &["-o"][..]),
    ] {
        let lock = d.join(kind);
        let started = d.join(&format!("{kind}.started"));
        let release = d.join(&format!("{kind}.release"));
        let mut wrapper = Command::new(BIN)
            .arg("run")
            .args(flags)
            .arg(&lock)
            .args(["--", "/bin/sh", "-c"])
            // Ends when told, or when the test's directory is gone (a failed test).
            .arg(format!(
                "touch {s}; while [ -d {d} ] && [ ! -e {r} ]; do sleep 0.02; done",
                s = started.display(),
                d = d.path().display(),
                r = release.display()
            ))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn fairlock run");
        wait_until(Duration::from_secs(30), "the job to start", || {
            started.exists()
        });
        common::chaos::signal(wrapper.id(), libc::SIGKILL);
        let _ = wrapper.wait();
        let other = |extra: &[&str]| {
            Command::new(BIN)
                .arg("run")
                .args(flags)
                .args(extra)
                .arg(&lock)
                .args(["--", "/bin/sh", "-c", "echo $FAIRLOCK_OWNER_DIED"])
                .output()
                .expect("run fairlock")
        };
        let o = other(&["-n"]);
        if kind == "close" {
            assert_eq!(
                o.status.code(),
                Some(0),
                "-o: freed with fairlock: {}",
                err(&o)
            );
            assert_eq!(
                out(&o).trim(),
                "1",
                "-o: the next holder is told the owner died"
            );
            std::fs::write(&release, b"").unwrap();
            continue;
        }
        assert_ne!(
            o.status.code(),
            Some(0),
            "{kind}: another run got the lock while the job still ran: {}",
            out(&o)
        );
        std::fs::write(&release, b"").unwrap();
        let o = other(&["-w", "20"]);
        assert_eq!(o.status.code(), Some(0), "{kind}: {}", err(&o));
        assert_eq!(
            out(&o).trim(),
            "1",
            "{kind}: the next holder is told the owner died"
        );
    }
}
