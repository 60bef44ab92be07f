//! Adversarial review of `fairlock lock FD` / `fairlock unlock FD` (docs/CLI.md, "the
//! descriptor form"). Each test failed on the code it was written against (see the report).

mod bash;
#[path = "../../../tests/common/mod.rs"]
mod common;

use bash::{sh, text};
use common::TempDir;

/// docs/CLI.md: "`fairlock unlock FD` ... 69 if the lock was lost (its `--lease` ran out and
/// the next waiter took over)". After a takeover the grant's word is `Revoked`, `unlock_fd`
/// finds nothing `Held` and `fairlock unlock` exits 0 ("held no lock"): the script cannot
/// learn that someone else was inside while it thought it held the lock.
#[test]
fn unlock_after_the_lease_was_taken_over_exits_69() {
    let dir = TempDir::new("cli-fdr-lease");
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
/// holds nothing (as `flock -u`)". On a lock file nobody has locked yet (empty: `exec 9>>f`
/// creates it) it exits 65 with "corrupt lock file: not initialised (read-only open)"
/// (`unlock_fd` opens the file with `open_read_only`, which calls an empty file corrupt).
#[test]
fn unlock_of_a_never_locked_file_exits_0_as_flock_u() {
    let dir = TempDir::new("cli-fdr-unlock-empty");
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
    // And the file is left as it was.
    assert_eq!(std::fs::metadata(dir.join("jobs.lock")).unwrap().len(), 0);
}
