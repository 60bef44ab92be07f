//! util-linux's own `flock(1)` tests (`tests/ts/flock/{flock,close,unlock}` and their expected
//! outputs), ported to `fairlock run`: the same commands, options and exit codes, driven from
//! `/bin/sh` as the originals are. Written anew from what those scripts check; nothing copied.
//!
//! | util-linux case | here | note |
//! |---|---|---|
//! | general lock (a holder in the background that prints Locking/Unlocking) | every test | held with a shorter sleep |
//! | `non-block`: `--nonblocking --conflict-exit-code 123` on a held lock | [`non_block`] | |
//! | `no-fork`: `--no-fork --nonblocking -E 123` | — | does not apply: fairlock must stay alive to hold the lock (its beacon and guard live in its process), so it always forks; `-F` is rejected |
//! | `shared`: `--shared` beside a shared holder | [`shared_beside_a_shared_holder`] | the holder is `-s` too (a file first used without `-s`/`-x` is an exclusive lock, where `-s` is refused: exit 65) |
//! | `exclusive`: `--nb --exclusive -E 123` | [`exclusive_is_the_default`] | |
//! | `fd`: `flock -n -x -E 123 4` on an inherited descriptor | [`fd_on_an_inherited_descriptor`] | `fairlock lock -n -x -E 123 4`: the descriptor must be open for writing (`4<>` as in the original, or `4>>`) |
//! | `fcntl-*`: the same over fcntl locks | — | does not apply: fairlock has one kind of lock |
//! | `timeout`: `--timeout 5 -E 5` waits for the holder | [`timeout_waits_for_the_holder`] | |
//! | `time-check`: that wait lasts as long as the holder held | [`timeout_waits_for_the_holder`] | |
//! | `close`: `--close` keeps the lock from the command's children | [`the_command_never_inherits_the_lock`] | the command never holds the lock itself: its own `fairlock run -n` on the file finds it held, with or without `-o`; what it inherits (without `-o`) is the lock's liveness, so that it keeps the lock if `fairlock` is killed (`cli_flock_habits::the_command_keeps_the_lock_when_fairlock_is_killed`); the second half of the original (the child re-locking through the shared descriptor) does not apply |
//! | `unlock`: `--wait 0` is `--nonblock`; `--verbose` | [`wait_zero_is_nonblock`] | |
//! | `unlock`: `flock --unlock FD` releases a descriptor's lock early | [`unlock_by_descriptor`] | `fairlock unlock FD` |
//! | exit codes: 64 usage, 66 cannot open, 1 (or `-E`) conflict | [`exit_codes`] | |

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::TempDir;

const BIN: &str = env!("CARGO_BIN_EXE_fairlock");

fn sh(dir: &TempDir, script: &str) -> Output {
    Command::new("/bin/sh")
        .arg("-c")
        .arg(script)
        .env("FL", BIN)
        .env("D", dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("run /bin/sh")
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The general lock of the original: a holder in the background, started before the case and
/// running `sleep SECS`; the case runs once the holder holds.
const HOLD: &str = r#"
    "$FL" run "$D/lockfile" sh -c 'echo Locking; sleep $SECS; echo Unlocking' >> "$D/general" 2>&1 &
    holder=$!
    i=0; while ! "$FL" status "$D/lockfile" 2>/dev/null | grep -q '^holder: *pid' && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done
"#;

fn with_holder(dir: &TempDir, secs: &str, case: &str) -> Output {
    sh(
        dir,
        &format!(
            "export SECS={secs}\n{HOLD}\n{case}\nwait $holder\necho Unlocked >> \"$D/general\""
        ),
    )
}

#[test]
fn non_block() {
    let d = TempDir::new("flock-suite-nb");
    let o = with_holder(
        &d,
        "1",
        r#""$FL" run --nonblocking --conflict-exit-code 123 "$D/lockfile" echo "You will never see this!"; echo "rc=$?""#,
    );
    assert_eq!(out(&o), "rc=123\n");
    let general = std::fs::read_to_string(d.join("general")).unwrap();
    assert_eq!(general, "Locking\nUnlocking\nUnlocked\n");
}

#[test]
fn shared_beside_a_shared_holder() {
    let d = TempDir::new("flock-suite-s");
    let hold_shared = HOLD.replace(
        r#""$FL" run "$D/lockfile""#,
        r#""$FL" run --shared "$D/lockfile""#,
    );
    let o = sh(
        &d,
        &format!(
            "export SECS=1\n{hold_shared}\n{}\nwait $holder\necho Unlocked >> \"$D/general\"",
            r#""$FL" run --nb --shared --conflict-exit-code 123 "$D/lockfile" echo "Have shared lock"; echo "rc=$?""#
        ),
    );
    assert_eq!(out(&o), "Have shared lock\nrc=0\n");
    let general = std::fs::read_to_string(d.join("general")).unwrap();
    assert_eq!(general, "Locking\nUnlocking\nUnlocked\n");
    // And an exclusive request beside it conflicts, as flock's.
    let o = sh(
        &d,
        &format!(
            "export SECS=1\n{hold_shared}\n{}\nwait $holder",
            r#""$FL" run --nb --exclusive -E 123 "$D/lockfile" true; echo "rc=$?""#
        ),
    );
    assert_eq!(out(&o), "rc=123\n");
}

#[test]
fn exclusive_is_the_default() {
    let d = TempDir::new("flock-suite-x");
    let o = with_holder(
        &d,
        "1",
        r#""$FL" run --nb --exclusive --conflict-exit-code 123 "$D/lockfile" echo "You will never see this!"; echo "rc=$?""#,
    );
    assert_eq!(out(&o), "rc=123\n");
}

#[test]
fn timeout_waits_for_the_holder() {
    let d = TempDir::new("flock-suite-timeout");
    let started = Instant::now();
    let o = with_holder(
        &d,
        "2",
        r#""$FL" run --timeout 5 --conflict-exit-code 5 "$D/lockfile" echo "After timeout."; echo "rc=$?""#,
    );
    let took = started.elapsed();
    assert_eq!(out(&o), "After timeout.\nrc=0\n");
    // time-check: the wait lasted about as long as the holder held (2 s), not the timeout.
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(4),
        "{took:?}"
    );
}

#[test]
fn the_command_never_inherits_the_lock() {
    let d = TempDir::new("flock-suite-close");
    // The command's own `fairlock run -n` on the same file finds it held (by its parent),
    // with or without `-o`/`--close`.
    for close in ["", "--close"] {
        let script = format!(
            r#""$FL" run -x {close} "$D/lock" -c '"$FL" run -x -n "$D/lock" true; echo "inner=$?"'; echo "outer=$?""#
        );
        let o = sh(&d, &script);
        assert_eq!(out(&o), "inner=1\nouter=0\n", "close={close:?}");
    }
}

#[test]
fn wait_zero_is_nonblock() {
    let d = TempDir::new("flock-suite-w0");
    // Free: runs at once, and -v says so.
    let o = sh(
        &d,
        r#""$FL" run --exclusive --wait 0 --verbose "$D/lockfile" true; echo "rc=$?""#,
    );
    assert_eq!(out(&o), "rc=0\n");
    assert!(String::from_utf8_lossy(&o.stderr).contains("got"));
    // Held: gives up at once.
    let started = Instant::now();
    let o = with_holder(
        &d,
        "1",
        r#""$FL" run --wait 0 -E 9 "$D/lockfile" true; echo "rc=$?""#,
    );
    assert_eq!(out(&o), "rc=9\n");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[test]
fn exit_codes() {
    let d = TempDir::new("flock-suite-exit");
    let code = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(code(&["run"]), Some(64), "missing arguments");
    assert_eq!(
        code(&["run", "--bogus", "f", "true"]),
        Some(64),
        "unknown option"
    );
    assert_eq!(
        code(&["run", "-s", "--permits", "2", "f", "true"]),
        Some(64),
        "a semaphore has no shared mode"
    );
    assert_eq!(code(&["run", "-F", "f", "true"]), Some(64), "no --no-fork");
    let missing = d.join("no/such/dir/lock");
    assert_eq!(code(&["run", missing.to_str().unwrap(), "true"]), Some(66));
    let l = d.join("l");
    assert_eq!(
        code(&["run", l.to_str().unwrap(), "sh", "-c", "exit 7"]),
        Some(7)
    );
}

#[test]
fn fd_on_an_inherited_descriptor() {
    let d = TempDir::new("flock-suite-fd");
    let o = with_holder(
        &d,
        "1",
        r#""$FL" lock -n -x -E 123 4 4<>"$D/lockfile"; echo "rc=$?""#,
    );
    assert_eq!(out(&o), "rc=123\n");
    let general = std::fs::read_to_string(d.join("general")).unwrap();
    assert_eq!(general, "Locking\nUnlocking\nUnlocked\n");
}

#[test]
fn unlock_by_descriptor() {
    let d = TempDir::new("flock-suite-unlock-fd");
    // The original: a subshell locks fd 9, unlocks it early, and a second locker gets in
    // while the subshell still runs.
    let o = sh(
        &d,
        r#"(
            "$FL" lock 9 && echo locked
            "$FL" unlock 9 && echo unlocked
            sleep 0.5
        ) 9>>"$D/lockfile" &
        sleep 0.2
        "$FL" run -n "$D/lockfile" echo "second got it"
        wait"#,
    );
    assert_eq!(out(&o), "locked\nunlocked\nsecond got it\n");
}
