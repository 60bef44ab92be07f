//! `fairlock lock FD` / `fairlock unlock FD`, the fd form scripts use with `flock 9`: the lock
//! belongs to the shell's open file description, outlives `fairlock lock`, is released by
//! `fairlock unlock` or when the shell dies (the next waiter told), keeps arrival order with
//! `fairlock run` waiters, and a waiter interrupted by Ctrl-C gives its place up.
//! `fairlock unlock` reports a lock lost to a takeover (69) and, as `flock -u`, exits 0 when FD
//! holds nothing, a file nobody has locked yet included.

mod bash;
#[path = "../../../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::time::Duration;

use bash::{sh, spawn, text};
use common::{TempDir, wait_until};

fn status(dir: &Path) -> fairlock::Status {
    fairlock::inspect(dir.join("jobs.lock")).expect("inspect")
}

#[test]
fn the_shell_holds_the_lock_between_lock_and_unlock() {
    let dir = TempDir::new("cli-fd-hold");
    let d = dir.path();
    let o = sh(
        d,
        r#"
        exec 9>>"$D/jobs.lock"
        "$FL" lock 9 || exit 10
        # fairlock lock has exited; the shell's fd 9 holds the lock.
        "$FL" run -n "$D/jobs.lock" true && exit 11     # busy for everyone else
        "$FL" lock -n 9 2>/dev/null; [ $? = 64 ] || exit 12   # fd 9 holds it already
        ( exec 8>>"$D/jobs.lock"; "$FL" lock -n 8 ) && exit 13 # another description waits
        "$FL" status --json "$D/jobs.lock" > "$D/held.json"
        "$FL" unlock 9 || exit 14
        "$FL" run -n "$D/jobs.lock" true || exit 15     # free again
        "$FL" unlock 9 || exit 16                       # nothing held: 0, as flock -u
        exit 0
        "#,
    );
    assert!(o.status.success(), "{}", text(&o));
    let held = std::fs::read_to_string(d.join("held.json")).unwrap();
    assert!(held.contains("\"held\":true"), "{held}");
    assert!(held.contains("\"alive\":true"), "{held}");
}

#[test]
fn a_waiting_lock_is_granted_in_arrival_order_and_told_when_the_shell_dies() {
    let dir = TempDir::new("cli-fd-order");
    let d = dir.path();
    // A shell takes the lock through fd 9 and then sleeps: killing it closes fd 9.
    let mut holder = spawn(
        d,
        r#"exec 9>>"$D/jobs.lock"; "$FL" lock 9 || exit 1; touch "$D/held"; exec sleep 600"#,
    );
    wait_until(Duration::from_secs(20), "the shell to hold", || {
        d.join("held").exists()
    });
    // Two waiters in a known order: an fd-form one, then a `fairlock run`.
    let mut first = spawn(
        d,
        r#"exec 7>>"$D/jobs.lock"; "$FL" lock 7 || exit 1; echo "fd-form $FAIRLOCK_X" >> "$D/order"; "$FL" status --json "$D/jobs.lock" > "$D/first.json"; "$FL" unlock 7"#,
    );
    wait_until(Duration::from_secs(20), "the first waiter", || {
        status(d).waiters.len() == 1
    });
    let mut second = spawn(
        d,
        r#""$FL" run "$D/jobs.lock" sh -c 'echo "run $FAIRLOCK_OWNER_DIED" >> "$D/order"'"#,
    );
    wait_until(Duration::from_secs(20), "the second waiter", || {
        status(d).waiters.len() == 2
    });
    // The shell holding fd 9 dies (its `exec sleep` keeps fd 9: it is the shell, replaced).
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert!(first.wait().unwrap().success());
    assert!(second.wait().unwrap().success());
    let order = std::fs::read_to_string(d.join("order")).unwrap();
    assert_eq!(order, "fd-form \nrun 0\n", "arrival order");
    let first_st = std::fs::read_to_string(d.join("first.json")).unwrap();
    assert!(
        first_st.contains("\"owner_died\":true"),
        "the grant after the dead shell is told: {first_st}"
    );
}

#[test]
fn an_interrupted_waiter_gives_its_place_up() {
    let dir = TempDir::new("cli-fd-interrupt");
    let d = dir.path();
    let o = sh(
        d,
        r#"exec 9>>"$D/jobs.lock"; "$FL" lock 9 || exit 1
        ( exec 8>>"$D/jobs.lock"; exec "$FL" lock 8 ) &
        w=$!
        i=0; until "$FL" status --json "$D/jobs.lock" | grep -q '"waiters":1'; do
            sleep 0.01; i=$((i+1)); [ $i -lt 2000 ] || exit 2; done
        kill -INT $w; wait $w; echo "waiter rc=$?" > "$D/rc"
        "$FL" unlock 9 || exit 3
        # Nobody holds it now: the interrupted waiter left the queue and holds nothing.
        "$FL" run -n "$D/jobs.lock" true || exit 4"#,
    );
    assert!(o.status.success(), "{}", text(&o));
    let rc = std::fs::read_to_string(d.join("rc")).unwrap();
    assert_eq!(rc.trim(), "waiter rc=130");
}

#[test]
fn readers_by_fd_hold_together_and_errors_are_clear() {
    let dir = TempDir::new("cli-fd-kinds");
    let d = dir.path();
    let o = sh(
        d,
        r#"exec 9>>"$D/rw.lock" 8>>"$D/rw.lock"
        "$FL" lock -s 9 || exit 1
        "$FL" lock -s -n 8 || exit 2                    # readers together
        "$FL" run -n -x "$D/rw.lock" true && exit 3     # a writer waits
        "$FL" unlock 9 && "$FL" unlock 8 || exit 4
        "$FL" run -n -x "$D/rw.lock" true || exit 5
        exec 6<"$D/rw.lock"
        "$FL" lock 6 2>"$D/ro.err"; [ $? = 64 ] || exit 6     # read-only descriptor
        "$FL" lock 5 2>"$D/closed.err"; [ $? = 66 ] || exit 7 # not open
        exit 0"#,
    );
    assert!(o.status.success(), "{}", text(&o));
    let ro = std::fs::read_to_string(d.join("ro.err")).unwrap();
    assert!(ro.contains("read-only") && ro.contains("9>>"), "{ro}");
    let closed = std::fs::read_to_string(d.join("closed.err")).unwrap();
    assert!(closed.contains("descriptor 5 is not open"), "{closed}");
}

#[test]
fn a_waiter_killed_by_sigkill_holds_the_queue_until_its_descriptor_is_unlocked_or_closed() {
    let dir = TempDir::new("cli-fd-sigkill");
    let d = dir.path();
    let o = sh(
        d,
        r#"exec 9>>"$D/jobs.lock" 8>>"$D/jobs.lock"; "$FL" lock 9 || exit 1
        "$FL" lock 8 &
        w=$!
        i=0; until "$FL" status --json "$D/jobs.lock" | grep -q '"waiters":1'; do
            sleep 0.01; i=$((i+1)); [ $i -lt 2000 ] || exit 2; done
        kill -KILL $w; wait $w
        "$FL" unlock 9 || exit 3
        # The killed waiter's place belongs to fd 8, which this shell still has open: the
        # queue waits for it, as it would for a holder.
        "$FL" run -w 0.3 "$D/jobs.lock" true && exit 4
        "$FL" unlock 8 || exit 5        # gives the place up
        "$FL" run -w 5 "$D/jobs.lock" true || exit 6"#,
    );
    assert!(o.status.success(), "{}", text(&o));
}

/// docs/CLI.md: "`fairlock unlock FD` ... 69 if the lock was lost (its `--lease` ran out and
/// the next waiter took over)". The script learns at its unlock that someone else was inside
/// while it thought it held the lock.
#[test]
fn unlock_after_the_lease_was_taken_over_exits_69() {
    let dir = TempDir::new("cli-fd-lease-lost");
    let o = sh(
        dir.path(),
        r#"
        exec 9>>"$D/jobs.lock"
        "$FL" lock --lease 0.2 9 || exit 90
        # The next waiter takes over once the lease has run out.
        "$FL" run -w 10 "$D/jobs.lock" -c 'test "$FAIRLOCK_OWNER_DIED" = 1' || exit 91
        "$FL" unlock -v 9
        echo "unlock=$?"
        "#,
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("unlock=69"),
        "{}",
        text(&o)
    );
}

/// docs/CLI.md: "`fairlock unlock FD` releases the lock FD holds ...: exit 0, also when FD
/// holds nothing (as `flock -u`)". A lock file nobody has locked yet (empty: `exec 9>>f`
/// creates it) holds nothing, and `fairlock unlock` leaves it as it is.
#[test]
fn unlock_of_a_never_locked_file_exits_0_as_flock_u() {
    let dir = TempDir::new("cli-fd-unlock-empty");
    let o = sh(
        dir.path(),
        r#"
        exec 9>>"$D/jobs.lock"
        "$FL" unlock 9
        echo "unlock=$?"
        "#,
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("unlock=0"),
        "{}",
        text(&o)
    );
    assert_eq!(std::fs::metadata(dir.join("jobs.lock")).unwrap().len(), 0);
}
