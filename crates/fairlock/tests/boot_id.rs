//! The boot id decides whether a file is left over from an earlier boot (and so re-initialised).
//! It must never make a process re-initialise a file that live processes are using: not when
//! the file was stamped by a process that could not read its boot id, and not when the opener
//! cannot read its own (no `/proc` in a sandbox or chroot, a seccomp filter). Review finding:
//! both used to count as "another boot", so the opener rewrote the lock state under a holder.

mod common;

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
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            &format!("mount --bind /dev/null {BOOT_ID} && exec \"$0\" \"$@\""),
        ])
        .arg(&exe)
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(common::ROLE, "worker")
        .env("FL_LOCK", &path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "worker: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(held.check().is_ok(), "the holder must keep the lock");
    held.unlock().unwrap();
}
