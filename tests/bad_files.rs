//! Opening files that are not (valid) lock files: refused with the right error and left
//! byte-for-byte untouched; empty and half-initialised files are initialised; options and
//! paths are checked; concurrent creation of one file by many processes is safe.
//!
//! And files of an earlier boot: the boot id decides whether a file is left over from an
//! earlier boot (and so re-initialised). It never makes a process re-initialise a file that live
//! processes are using: not when the file was stamped by a process that could not read its boot
//! id, and not when the opener cannot read its own (no `/proc` in a sandbox or chroot, a seccomp
//! filter) — neither counts as "another boot".

mod common;

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Gate, Shm, TempDir, Worker, racy_increment, role, wait_all};
use fairlock::{Error, FairLock, FairRLock};

const MAGIC: &[u8; 8] = b"FAIRLOCK";
const MAGIC_PENDING: &[u8; 8] = b"FAIRLOC?";
const HEADER_SIZE: usize = 192;

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap())
}

/// Creates a valid lock file at `path` (used once, then closed) and returns its bytes.
fn valid_file(path: &Path) -> Vec<u8> {
    {
        let lock = FairLock::open(path).expect("create lock file");
        drop(lock.lock().expect("lock"));
    }
    fs::read(path).expect("read lock file")
}

/// Checks the header of a freshly initialised file with default geometry.
fn assert_initialised(path: &Path, slots: u32, participants: u32) {
    let b = fs::read(path).expect("read");
    assert!(b.len() >= HEADER_SIZE, "{} bytes", b.len());
    assert_eq!(&b[0..8], MAGIC, "magic");
    assert_eq!(u32_at(&b, 8), 2, "version");
    assert_eq!(u32_at(&b, 40), 0, "kind: exclusive");
    assert_eq!(u32_at(&b, 12), HEADER_SIZE as u32, "header_size");
    assert_eq!(u64_at(&b, 16), b.len() as u64, "file_size field vs length");
    assert_eq!(u32_at(&b, 24), slots, "slot_count");
    assert_eq!(u32_at(&b, 28), participants, "participant_count");
    // Participant table right after the header, slots 64-aligned after it.
    let slots_offset = (HEADER_SIZE + participants as usize * 32).div_ceil(64) * 64;
    assert_eq!(b.len(), slots_offset + slots as usize * 64, "file size");
}

/// Opening `path` must fail with an error `check` accepts, and the file must be unchanged;
/// `inspect` too.
fn assert_refused(path: &Path, what: &str, check: impl Fn(&Error) -> bool) {
    let before = fs::read(path).expect("read before");
    let before_mode = fs::metadata(path).unwrap().permissions().mode();
    match FairLock::open(path) {
        Ok(_) => panic!("{what}: opened"),
        Err(e) => {
            assert!(check(&e), "{what}: wrong error {e:?}");
            let msg = e.to_string();
            assert!(
                msg.contains(&path.display().to_string()),
                "{what}: message does not name the file: {msg}"
            );
        }
    }
    match FairRLock::open(path) {
        Ok(_) => panic!("{what}: opened as FairRLock"),
        Err(e) => assert!(check(&e), "{what}: FairRLock: wrong error {e:?}"),
    }
    match fairlock::inspect(path) {
        Ok(st) => panic!("{what}: inspect succeeded: {st:?}"),
        Err(e) => assert!(check(&e), "{what}: inspect: wrong error {e:?}"),
    }
    let after = fs::read(path).expect("read after");
    assert_eq!(before.len(), after.len(), "{what}: length changed");
    assert!(before == after, "{what}: contents changed");
    assert_eq!(
        fs::metadata(path).unwrap().permissions().mode(),
        before_mode,
        "{what}: mode changed"
    );
}

fn is_not_a_lock_file(path: &Path) -> impl Fn(&Error) -> bool + '_ {
    move |e| matches!(e, Error::NotALockFile { path: p } if p == path)
}

fn is_corrupt(path: &Path) -> impl Fn(&Error) -> bool + '_ {
    move |e| matches!(e, Error::Corrupt { path: p, .. } if p == path)
}

/// A small deterministic pseudo-random generator (xorshift64*).
fn random_bytes(n: usize, mut seed: u64) -> Vec<u8> {
    (0..n)
        .map(|_| {
            seed ^= seed >> 12;
            seed ^= seed << 25;
            seed ^= seed >> 27;
            (seed.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

#[test]
fn foreign_files_are_refused_untouched() {
    let dir = TempDir::new("bad-foreign");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("text", b"hello, this is not a lock file\n".to_vec()),
        ("random-200", random_bytes(200, 0x1234_5678_9abc_def1)),
        ("zeros-1MiB", vec![0u8; 1 << 20]),
        ("one-byte", vec![b'F']),
        ("near-magic", {
            let mut v = b"FAIRLOCX".to_vec();
            v.extend(random_bytes(300, 7));
            v
        }),
    ];
    for (name, bytes) in cases {
        assert!(bytes.len() < 8 || &bytes[..8] != MAGIC);
        let path = dir.join(name);
        fs::write(&path, &bytes).unwrap();
        assert_refused(&path, name, is_not_a_lock_file(&path));
        assert_eq!(fs::read(&path).unwrap(), bytes, "{name}");
    }
}

#[test]
fn empty_file_is_initialised_and_usable() {
    let dir = TempDir::new("bad-empty");
    let path = dir.join("empty");
    fs::write(&path, b"").unwrap();
    let lock = FairLock::open(&path).expect("open empty file");
    assert_initialised(
        &path,
        fairlock::DEFAULT_SLOTS,
        fairlock::DEFAULT_PARTICIPANTS,
    );
    let g = lock.lock().expect("lock");
    assert!(g.token() >= 1);
    assert!(!g.owner_died());
    let st = fairlock::inspect(&path).expect("inspect");
    assert_eq!(st.holder.as_ref().map(|h| h.token), Some(g.token()));
    drop(g);
    // A newly created file looks the same.
    let fresh = dir.join("fresh");
    drop(FairLock::open(&fresh).expect("create"));
    assert_initialised(
        &fresh,
        fairlock::DEFAULT_SLOTS,
        fairlock::DEFAULT_PARTICIPANTS,
    );
    // Non-default geometry is honoured on creation.
    let small = dir.join("small");
    drop(
        FairLock::options()
            .slots(4)
            .participants(8)
            .open(&small)
            .expect("create small"),
    );
    assert_initialised(&small, 4, 8);
    // ...and an existing file keeps its own geometry.
    drop(
        FairLock::options()
            .slots(16)
            .open(&small)
            .expect("reopen small"),
    );
    assert_initialised(&small, 4, 8);
}

#[test]
fn truncated_or_extended_lock_file_is_corrupt_and_untouched() {
    let dir = TempDir::new("bad-truncated");
    let model = dir.join("model");
    let bytes = valid_file(&model);
    let len = bytes.len();
    let slots_offset = u32_at(&bytes, 36) as usize;
    assert!(slots_offset > HEADER_SIZE && slots_offset < len);
    // Fewer than 8 bytes cannot even carry the magic: not recognisable as ours.
    for cut in [1usize, 7] {
        let path = dir.join(&format!("cut-{cut}"));
        fs::write(&path, &bytes).unwrap();
        fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(cut as u64)
            .unwrap();
        assert_refused(&path, &format!("cut {cut}"), |e| {
            matches!(e, Error::NotALockFile { .. } | Error::Corrupt { .. })
        });
    }
    for cut in [
        8,
        12,
        16,
        100,
        HEADER_SIZE - 1,
        HEADER_SIZE,
        HEADER_SIZE + 40,
        slots_offset - 1,
        slots_offset,
        slots_offset + 100,
        len - 64,
        len - 1,
    ] {
        let path = dir.join(&format!("cut-{cut}"));
        fs::write(&path, &bytes).unwrap();
        fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(cut as u64)
            .unwrap();
        assert_refused(&path, &format!("cut {cut} of {len}"), is_corrupt(&path));
    }
    for extra in [1usize, 4096] {
        let path = dir.join(&format!("extended-{extra}"));
        let mut b = bytes.clone();
        b.extend(std::iter::repeat_n(0u8, extra));
        fs::write(&path, &b).unwrap();
        assert_refused(&path, &format!("{extra} bytes too long"), is_corrupt(&path));
    }
}

#[test]
fn bad_geometry_is_corrupt_and_untouched() {
    let dir = TempDir::new("bad-geometry");
    let bytes = valid_file(&dir.join("model"));
    let patch = |name: &str, off: usize, val: &[u8]| {
        let path = dir.join(name);
        let mut b = bytes.clone();
        b[off..off + val.len()].copy_from_slice(val);
        fs::write(&path, &b).unwrap();
        assert_refused(&path, name, is_corrupt(&path));
    };
    patch("slots-3", 24, &3u32.to_le_bytes());
    patch("slots-0", 24, &0u32.to_le_bytes());
    patch("slots-512", 24, &512u32.to_le_bytes()); // valid count, but not this file's size
    patch("participants-0", 28, &0u32.to_le_bytes());
    patch("header-size-100", 12, &100u32.to_le_bytes());
    patch("file-size", 16, &(bytes.len() as u64 + 64).to_le_bytes());
    patch("slots-offset", 36, &0u32.to_le_bytes());
}

#[test]
fn newer_version_is_incompatible_and_untouched() {
    let dir = TempDir::new("bad-version");
    let bytes = valid_file(&dir.join("model"));
    for v in [0u32, 1, 3, u32::MAX] {
        let path = dir.join(&format!("v{v}"));
        let mut b = bytes.clone();
        b[8..12].copy_from_slice(&v.to_le_bytes());
        fs::write(&path, &b).unwrap();
        assert_refused(
            &path,
            &format!("version {v}"),
            |e| matches!(e, Error::Incompatible { path: p, .. } if p == &path),
        );
    }
}

#[test]
fn invalid_paths() {
    let dir = TempDir::new("bad-paths");
    let is_invalid_path = |p: &Path| {
        let p = p.to_path_buf();
        move |e: &Error| matches!(e, Error::InvalidPath { path, .. } if *path == p)
    };
    // A directory.
    let d = dir.join("a-directory");
    fs::create_dir(&d).unwrap();
    let e = FairLock::open(&d).expect_err("directory");
    assert!(is_invalid_path(&d)(&e), "{e:?}");
    assert!(e.to_string().contains(&d.display().to_string()), "{e}");
    assert!(d.is_dir());
    // A symbolic link to a valid lock file.
    let target = dir.join("target");
    let bytes = valid_file(&target);
    let link = dir.join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let e = FairLock::open(&link).expect_err("symlink");
    assert!(is_invalid_path(&link)(&e), "{e:?}");
    assert!(e.to_string().contains(&link.display().to_string()), "{e}");
    let e = fairlock::inspect(&link).expect_err("inspect symlink");
    assert!(is_invalid_path(&link)(&e), "{e:?}");
    assert_eq!(fs::read(&target).unwrap(), bytes);
    // A dangling symbolic link: nothing is created at its target.
    let dangling = dir.join("dangling");
    let nowhere = dir.join("nowhere");
    std::os::unix::fs::symlink(&nowhere, &dangling).unwrap();
    let e = FairLock::open(&dangling).expect_err("dangling symlink");
    assert!(is_invalid_path(&dangling)(&e), "{e:?}");
    assert!(!nowhere.exists(), "created the link's target");
    // A device.
    let null = Path::new("/dev/null");
    let e = FairLock::open(null).expect_err("/dev/null");
    assert!(is_invalid_path(null)(&e), "{e:?}");
    assert!(e.to_string().contains("/dev/null"), "{e}");
}

#[test]
fn pending_magic_file_is_reinitialised() {
    let dir = TempDir::new("bad-pending");
    // A full-size file whose creator died before writing the real magic.
    let path = dir.join("pending-full");
    let mut bytes = valid_file(&path);
    bytes[..8].copy_from_slice(MAGIC_PENDING);
    fs::write(&path, &bytes).unwrap();
    let lock = FairLock::open(&path).expect("open pending file");
    assert_initialised(
        &path,
        fairlock::DEFAULT_SLOTS,
        fairlock::DEFAULT_PARTICIPANTS,
    );
    drop(lock.lock().expect("lock"));
    drop(lock.try_lock().expect("try_lock"));
    // A creator that died after writing only part of the image.
    let path = dir.join("pending-short");
    let mut short = MAGIC_PENDING.to_vec();
    short.extend(random_bytes(92, 99));
    fs::write(&path, &short).unwrap();
    let lock = FairLock::open(&path).expect("open short pending file");
    assert_initialised(
        &path,
        fairlock::DEFAULT_SLOTS,
        fairlock::DEFAULT_PARTICIPANTS,
    );
    let g = lock.lock().expect("lock");
    assert!(fairlock::inspect(&path).unwrap().holder.is_some());
    drop(g);
    // Pending with garbage all over the (full-size) state.
    let path = dir.join("pending-garbage");
    let mut garbage = random_bytes(bytes.len(), 5);
    garbage[..8].copy_from_slice(MAGIC_PENDING);
    fs::write(&path, &garbage).unwrap();
    let lock = FairLock::open(&path).expect("open garbage pending file");
    assert_initialised(
        &path,
        fairlock::DEFAULT_SLOTS,
        fairlock::DEFAULT_PARTICIPANTS,
    );
    let g = lock.lock_timeout(Duration::from_secs(5)).expect("lock");
    drop(g);
}

#[test]
fn create_false_on_missing_file_is_not_found() {
    let dir = TempDir::new("bad-missing");
    let path = dir.join("missing");
    let e = FairLock::options()
        .create(false)
        .open(&path)
        .expect_err("missing file");
    match &e {
        Error::Io {
            path: p, source, ..
        } => {
            assert_eq!(p, &path);
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound, "{e:?}");
        }
        other => panic!("expected Io/NotFound, got {other:?}"),
    }
    assert!(e.to_string().contains(&path.display().to_string()), "{e}");
    // The OS reason is in the message (once), not behind `source()`.
    assert!(e.to_string().contains("No such file"), "{e}");
    assert!(std::error::Error::source(&e).is_none());
    assert!(!path.exists(), "created despite create(false)");
    // A missing directory is NotFound too, even with create(true).
    let deep = dir.join("no-such-dir").join("lock");
    match FairLock::open(&deep) {
        Err(Error::Io { source, .. }) => assert_eq!(source.kind(), std::io::ErrorKind::NotFound),
        other => panic!("missing directory: {other:?}"),
    }
    // inspect never creates either.
    assert!(matches!(fairlock::inspect(&path), Err(Error::Io { .. })));
    assert!(!path.exists());
    // create(false) on an existing lock file works.
    valid_file(&path);
    drop(
        FairLock::options()
            .create(false)
            .open(&path)
            .expect("existing"),
    );
}

#[test]
fn permissions_of_created_files() {
    let dir = TempDir::new("bad-mode");
    let umask = common::umask();
    let path = dir.join("default");
    drop(FairLock::open(&path).expect("create"));
    let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600 & !umask, "default mode (umask {umask:o})");
    assert_eq!(
        mode & 0o077,
        0,
        "group/other bits on a default lock file: {mode:o}"
    );
    let path = dir.join("mode-640");
    drop(
        FairLock::options()
            .mode(0o640)
            .open(&path)
            .expect("create 640"),
    );
    let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640 & !umask, "mode(0o640) (umask {umask:o})");
    // The mode applies to creation only.
    fs::set_permissions(&path, fs::Permissions::from_mode(0o604)).unwrap();
    drop(FairLock::options().mode(0o600).open(&path).expect("reopen"));
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o604
    );
}

#[test]
fn invalid_options() {
    let dir = TempDir::new("bad-options");
    let invalid = |r: fairlock::Result<FairLock>, what: &str| match r {
        Err(Error::InvalidOption { what: w }) => {
            assert!(!w.is_empty());
            let msg = Error::InvalidOption { what: w }.to_string();
            assert!(msg.contains("invalid option"), "{msg}");
        }
        other => panic!("{what}: expected InvalidOption, got {other:?}"),
    };
    invalid(
        FairLock::options().slots(3).open(dir.join("s3")),
        "slots(3)",
    );
    invalid(
        FairLock::options().slots(0).open(dir.join("s0")),
        "slots(0)",
    );
    invalid(
        FairLock::options().slots(1).open(dir.join("s1")),
        "slots(1)",
    );
    invalid(
        FairLock::options().participants(0).open(dir.join("p0")),
        "participants(0)",
    );
    invalid(
        FairLock::options()
            .participants(5000)
            .open(dir.join("p5000")),
        "participants(5000)",
    );
    invalid(
        FairLock::options()
            .lease(Duration::ZERO)
            .open(dir.join("lease0")),
        "lease(0)",
    );
    assert!(matches!(
        FairLock::options()
            .lease(Duration::ZERO)
            .open_rlock(dir.join("rlease0")),
        Err(Error::InvalidOption { .. })
    ));
    // A refused creation leaves nothing that breaks a later, valid open.
    let lock = FairLock::open(dir.join("s3")).expect("open after refused creation");
    drop(lock.lock().expect("lock"));
    assert_initialised(
        &dir.join("s3"),
        fairlock::DEFAULT_SLOTS,
        fairlock::DEFAULT_PARTICIPANTS,
    );
}

#[test]
fn concurrent_creation_by_many_processes() {
    const PROCS: usize = 8;
    const ITERS: u64 = 200;
    if role().is_some() {
        let gate = Gate::open(common::env("FL_GATE").as_ref());
        let shm = Shm::open(common::env("FL_SHM").as_ref());
        gate.arrive_and_wait();
        let lock = FairLock::open(common::env("FL_LOCK")).expect("concurrent open");
        for _ in 0..ITERS {
            let _g = lock.lock().expect("lock");
            racy_increment(&shm, 0, 10);
        }
        return;
    }
    for round in 0..3 {
        let dir = TempDir::new("bad-concurrent-create");
        let path = dir.join("new.lock");
        let shm_path = dir.join("shm");
        let gate_path = dir.join("gate");
        let shm = Shm::create(&shm_path, 1);
        let gate = Gate::create(&gate_path);
        let env = [
            ("FL_LOCK", path.display().to_string()),
            ("FL_SHM", shm_path.display().to_string()),
            ("FL_GATE", gate_path.display().to_string()),
        ];
        let mut workers: Vec<Worker> = (0..PROCS)
            .map(|i| {
                Worker::spawn(
                    dir.path(),
                    "concurrent_creation_by_many_processes",
                    "create",
                    &format!("r{round}w{i}"),
                    &env,
                )
            })
            .collect();
        assert!(!path.exists());
        gate.open_when_arrived(PROCS as u64, &mut workers);
        wait_all(&mut workers, Duration::from_secs(60));
        assert_eq!(shm.read(0), PROCS as u64 * ITERS, "round {round}");
        assert_initialised(
            &path,
            fairlock::DEFAULT_SLOTS,
            fairlock::DEFAULT_PARTICIPANTS,
        );
        let st = fairlock::inspect(&path).expect("inspect");
        assert!(st.holder.is_none() && st.waiters.is_empty(), "{st:?}");
    }
}

#[test]
fn file_from_another_boot_is_reinitialised_keeping_tokens() {
    let dir = TempDir::new("bad-other-boot");
    let live = dir.join("live");
    // Snapshot a file while it is held with several grants behind it.
    let (bytes, held) = {
        let lock = FairLock::options()
            .slots(8)
            .participants(16)
            .open(&live)
            .expect("open");
        for _ in 0..20 {
            drop(lock.lock().expect("lock"));
        }
        let g = lock.lock().expect("lock");
        (fs::read(&live).unwrap(), g.token())
    };
    assert_eq!(&bytes[..8], MAGIC);
    // The same state, as if left over from an earlier boot (a different boot id).
    let path = dir.join("stale");
    let mut b = bytes.clone();
    for x in &mut b[48..64] {
        *x ^= 0x5a;
    }
    fs::write(&path, &b).unwrap();
    let lock = FairLock::open(&path).expect("open a file from another boot");
    // Re-initialised with its own geometry, free, and tokens keep rising.
    assert_initialised(&path, 8, 16);
    let after = fs::read(&path).unwrap();
    assert_eq!(
        &after[48..64],
        &bytes[48..64],
        "boot id of this boot written"
    );
    let st = fairlock::inspect(&path).expect("inspect");
    assert!(st.holder.is_none() && st.waiters.is_empty(), "{st:?}");
    let g = lock
        .lock_timeout(Duration::from_secs(5))
        .expect("the previous boot's holder does not block");
    assert!(
        g.token() > held,
        "token {} repeats a previous boot's {held}",
        g.token()
    );
}

#[test]
fn inspect_refuses_empty_and_pending_files() {
    let dir = TempDir::new("bad-inspect-empty");
    let path = dir.join("empty");
    fs::write(&path, b"").unwrap();
    assert!(
        matches!(fairlock::inspect(&path), Err(Error::Corrupt { .. })),
        "inspect of an empty file"
    );
    assert_eq!(
        fs::metadata(&path).unwrap().len(),
        0,
        "inspect wrote to the file"
    );
    let path = dir.join("pending");
    let mut b = valid_file(&path);
    b[..8].copy_from_slice(MAGIC_PENDING);
    fs::write(&path, &b).unwrap();
    assert!(matches!(
        fairlock::inspect(&path),
        Err(Error::Corrupt { .. })
    ));
    assert_eq!(fs::read(&path).unwrap(), b, "inspect wrote to the file");
}

// ---------------------------------------------------------------------------------------------
// Files of an earlier boot, and processes that cannot read their boot id
// ---------------------------------------------------------------------------------------------

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
    // A process that cannot read its boot id takes a file stamped with an earlier boot's id
    // as current and locks it; a process that can read its own must not take the file as
    // stale and re-initialise it under the live holder. A file really left over from an
    // earlier boot has no live participant, and that is checked first.
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

/// A user without write access to a lock file (or, to create one, to its directory) gets
/// `NoWriteAccess`, whose message says why every user needs it; `inspect` (read-only) still
/// works. Run as another user (nobody) in a forked child when this test runs as root;
/// otherwise the files' modes alone refuse us.
#[test]
fn no_write_access_is_said_plainly() {
    // Under /tmp, which every user may traverse (the test run's own temporary directory may
    // be private to its user, and refuse nobody for that reason instead).
    struct Removed(std::path::PathBuf);
    impl Drop for Removed {
        fn drop(&mut self) {
            let _ =
                std::fs::set_permissions(self.0.join("ro"), std::fs::Permissions::from_mode(0o755));
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let dir = Removed(std::path::PathBuf::from(format!(
        "/tmp/fairlock-it-no-write-access-{}",
        std::process::id()
    )));
    std::fs::create_dir_all(&dir.0).unwrap();
    let file = dir.0.join("l");
    drop(FairLock::open(&file).unwrap());
    let sub = dir.0.join("ro");
    std::fs::create_dir(&sub).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o555)).unwrap();
    let check = || -> i32 {
        let existing = match FairLock::open(&file) {
            Err(
                e @ Error::NoWriteAccess {
                    in_directory: false,
                    ..
                },
            ) => e,
            other => return if other.is_ok() { 10 } else { 11 },
        };
        let msg = existing.to_string();
        if !(msg.contains("no write access")
            && msg.contains("Permission denied")
            && msg.contains("flock(1) needs only read access")
            && msg.contains(&file.display().to_string()))
        {
            return 12;
        }
        if existing.kind() != std::io::ErrorKind::PermissionDenied {
            return 13;
        }
        match FairLock::open(sub.join("new")) {
            Err(Error::NoWriteAccess {
                in_directory: true, ..
            }) => {}
            _ => return 14,
        }
        if fairlock::inspect(&file).is_err() {
            return 15;
        }
        0
    };
    assert_eq!(
        common::as_another_user(check),
        0,
        "step failed (see the codes in `check`)"
    );
}
