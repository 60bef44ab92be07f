//! The boot id decides whether a file is left over from an earlier boot (and so re-initialised).
//! It must never make a process re-initialise a file that live processes are using: not when
//! the file was stamped by a process that could not read its boot id, and not when the opener
//! cannot read its own (no `/proc` in a sandbox or chroot, a seccomp filter). Review finding:
//! both used to count as "another boot", so the opener rewrote the lock state under a holder.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{TempDir, role};
use fairlock::{Error, FairLock};

const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// Writes 16 bytes of boot id into the header (offset 48, docs/FILE_FORMAT.md).
fn stamp(path: &std::path::Path, id: [u8; 16]) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(&id, 48).unwrap();
}

#[test]
fn a_file_stamped_with_an_unknown_boot_id_is_never_re_initialised() {
    let dir = TempDir::new("boot-unknown");
    let path = dir.join("a.lock");
    let lock = FairLock::open(&path).unwrap();
    let held = lock.lock().unwrap();
    // As a process that could not read its boot id stamps a file it creates.
    stamp(&path, [0; 16]);
    let before = std::fs::read(&path).unwrap();
    let busy = std::thread::scope(|s| {
        s.spawn(|| {
            let other = FairLock::open(&path).expect("open");
            other.try_lock().map(drop)
        })
        .join()
        .unwrap()
    });
    assert!(matches!(busy, Err(Error::WouldBlock { .. })), "{busy:?}");
    assert!(held.check().is_ok(), "the holder must keep the lock");
    assert!(
        std::fs::read(&path).unwrap()[..64] == before[..64],
        "the header was rewritten"
    );
    held.unlock().unwrap();
}

fn unshare_mount_works() -> bool {
    Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            &format!("mount --bind /dev/null {BOOT_ID}"),
        ])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// This test binary re-run as the worker of `test`, in a mount namespace of its own where the
/// boot id is bind-mounted over with `/dev/null` (so it reads as empty).
fn worker_without_boot_id(test: &str, lock: &std::path::Path) -> Command {
    let mut cmd = Command::new("unshare");
    cmd.args([
        "-m",
        "sh",
        "-c",
        &format!("mount --bind /dev/null {BOOT_ID} && exec \"$0\" \"$@\""),
    ])
    .arg(std::env::current_exe().unwrap())
    .args([test, "--exact", "--nocapture", "--test-threads=1"])
    .env(common::ROLE, "worker")
    .env("FL_LOCK", lock);
    cmd
}

#[test]
fn a_process_that_cannot_read_its_boot_id_never_re_initialises() {
    const TEST: &str = "a_process_that_cannot_read_its_boot_id_never_re_initialises";
    if role().is_some() {
        // Worker, in a mount namespace where the boot id reads as empty.
        assert_eq!(std::fs::read_to_string(BOOT_ID).unwrap_or_default(), "");
        let lock = FairLock::open(common::env("FL_LOCK")).expect("open");
        let r = lock.try_lock().map(drop);
        assert!(matches!(r, Err(Error::WouldBlock { .. })), "{r:?}");
        let r = lock.lock_timeout(Duration::from_millis(50)).map(drop);
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
        return;
    }
    if !unshare_mount_works() {
        // Needs CAP_SYS_ADMIN (CI runs as root). Say so loudly rather than pass silently.
        eprintln!("SKIPPED: `unshare -m` with a bind mount is not permitted here");
        return;
    }
    let dir = TempDir::new("boot-unreadable");
    let path = dir.join("a.lock");
    let lock = FairLock::open(&path).unwrap();
    let held = lock.lock().unwrap();
    let out = worker_without_boot_id(TEST, &path).output().unwrap();
    assert!(
        out.status.success(),
        "worker: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(held.check().is_ok(), "the holder must keep the lock");
    held.unlock().unwrap();
}

#[test]
fn a_file_used_by_a_process_without_a_boot_id_is_not_re_initialised_by_one_with() {
    // Second review: a process that cannot read its boot id takes a file stamped with an
    // earlier boot's id as current and locks it; a process that can read its own then took
    // the file as stale and re-initialised it under the live holder. A file really left over
    // from an earlier boot has no live participant, and now that is checked first.
    const TEST: &str =
        "a_file_used_by_a_process_without_a_boot_id_is_not_re_initialised_by_one_with";
    if role().is_some() {
        assert_eq!(std::fs::read_to_string(BOOT_ID).unwrap_or_default(), "");
        let lock = FairLock::open(common::env("FL_LOCK")).expect("open");
        let g = lock.lock().expect("lock");
        println!("held");
        std::io::stdout().flush().unwrap();
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).unwrap();
        assert!(
            g.check().is_ok(),
            "the holder lost the lock: {:?}",
            g.check()
        );
        g.unlock().expect("unlock");
        return;
    }
    if !unshare_mount_works() {
        eprintln!("SKIPPED: `unshare -m` with a bind mount is not permitted here");
        return;
    }
    let dir = TempDir::new("boot-mixed");
    let path = dir.join("a.lock");
    drop(FairLock::open(&path).unwrap());
    stamp(&path, [0xAB; 16]); // as if from an earlier boot
    let mut child = worker_without_boot_id(TEST, &path)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("held") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "worker ended early");
    }
    let lock = FairLock::open(&path).expect("open with a known boot id");
    let r = lock.try_lock().map(drop);
    assert!(matches!(r, Err(Error::WouldBlock { .. })), "{r:?}");
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    assert!(child.wait().unwrap().success(), "worker failed");
}
