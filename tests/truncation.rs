//! A lock file truncated by another user while processes use it: every access to the mapping
//! past the new end faults (`SIGBUS`), which would kill each of them. Another writer may deny
//! service, never crash us: the holder and the waiter live on, each call after the truncation
//! fails with a typed error, and nothing else is touched.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Worker, role, wait_all};
use fairlock::{Error, FairLock};

/// A directory every user may traverse (the run's own temporary directory may be private to
/// its user), removed on drop.
struct SharedDir(PathBuf);

impl SharedDir {
    fn new(name: &str) -> SharedDir {
        let d = PathBuf::from(format!("/tmp/fairlock-it-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        SharedDir(d)
    }
}

impl Drop for SharedDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn wait_for(path: &Path, what: &str) {
    let t0 = Instant::now();
    while !path.exists() {
        assert!(t0.elapsed() < Duration::from_secs(30), "{what} never came");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Truncates `path` to `len` bytes as another user (nobody, when we are root); panics if that
/// fails.
fn truncate_as_another_user(path: &Path, len: u64) {
    let code = common::as_another_user(|| {
        let truncated = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|f| f.set_len(len));
        if truncated.is_ok() { 0 } else { 3 }
    });
    assert_eq!(code, 0, "the truncation failed");
}

fn is_truncation(e: &Error) -> bool {
    matches!(e, Error::Corrupt { what, .. } if what.contains("truncated"))
}

#[test]
fn a_file_truncated_under_a_holder_and_a_waiter_crashes_neither() {
    if let Some(r) = role() {
        let dir = PathBuf::from(common::env("FL_DIR"));
        let lock = FairLock::open(dir.join("l")).unwrap();
        match r.as_str() {
            "holder" => {
                let grant = lock.lock_process().unwrap();
                std::fs::write(dir.join("held"), b"").unwrap();
                wait_for(&dir.join("truncated"), "the truncation");
                // The next calls: typed errors, and the process lives on.
                let e = grant.check().unwrap_err();
                assert!(matches!(e, Error::LockLost { .. }), "check: {e:?}");
                let e = grant.unlock().unwrap_err();
                assert!(matches!(e, Error::LockLost { .. }), "unlock: {e:?}");
                let e = lock.try_lock().map(drop).unwrap_err();
                assert!(is_truncation(&e), "try_lock: {e:?}");
                let e = lock.lock().map(drop).unwrap_err();
                assert!(is_truncation(&e), "lock: {e:?}");
                assert!(e.to_string().contains("truncated"), "{e}");
            }
            "waiter" => {
                std::fs::write(dir.join("waiting"), b"").unwrap();
                let t0 = Instant::now();
                let e = lock
                    .lock_timeout(Duration::from_secs(60))
                    .map(drop)
                    .unwrap_err();
                assert!(is_truncation(&e), "the wait: {e:?}");
                // It noticed at its next poll, not at its deadline.
                assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
                let e = lock.try_lock().map(drop).unwrap_err();
                assert!(is_truncation(&e), "the next call: {e:?}");
            }
            other => panic!("unknown role {other}"),
        }
        return;
    }
    let dir = SharedDir::new("truncation");
    let path = dir.0.join("l");
    drop(FairLock::options().mode(0o666).open(&path).unwrap());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let envs = [("FL_DIR", dir.0.display().to_string())];
    let test = "a_file_truncated_under_a_holder_and_a_waiter_crashes_neither";
    let holder = Worker::spawn(&dir.0, test, "holder", "holder", &envs);
    wait_for(&dir.0.join("held"), "the holder");
    let waiter = Worker::spawn(&dir.0, test, "waiter", "waiter", &envs);
    wait_for(&dir.0.join("waiting"), "the waiter");
    let t0 = Instant::now();
    while fairlock::inspect(&path).unwrap().waiters.is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the waiter never queued"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    truncate_as_another_user(&path, 0);
    std::fs::write(dir.0.join("truncated"), b"").unwrap();
    // Both end normally (a SIGBUS would have killed them: `wait_all` fails on a signal).
    wait_all(&mut [holder, waiter], Duration::from_secs(60));
    // The file is empty: the next opener makes it a lock again.
    let lock = FairLock::open(&path).expect("an empty file is initialised");
    drop(lock.try_lock().expect("a new lock, free"));
}

/// A fault in memory that is not a lock file's still kills as before (the handler passes it
/// on): a process with a lock file open maps another file, truncates it and reads past its
/// end.
#[test]
fn a_sigbus_elsewhere_is_not_swallowed() {
    if role().is_some() {
        // Take the handler in (a lock file mapped), then fault on a mapping of our own.
        let dir = PathBuf::from(common::env("FL_DIR"));
        let _lock = FairLock::open(dir.join("l")).unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("other"))
            .unwrap();
        f.set_len(4096).unwrap();
        // SAFETY: a fresh shared mapping of a file of one page, read once after the file
        // was emptied: the read faults (SIGBUS), which must end this process.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&f),
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            f.set_len(0).unwrap();
            let v = std::ptr::read_volatile(p.cast::<u8>());
            std::fs::write(dir.join("survived"), [v]).unwrap();
        }
        return;
    }
    let dir = SharedDir::new("sigbus-elsewhere");
    let mut w = Worker::spawn(
        &dir.0,
        "a_sigbus_elsewhere_is_not_swallowed",
        "faulter",
        "faulter",
        &[("FL_DIR", dir.0.display().to_string())],
    );
    let status = w.child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(libc::SIGBUS),
        "{status}: {}",
        w.stderr()
    );
    assert!(!dir.0.join("survived").exists());
}

/// In one process, for a lock of its own file and a named one: after the truncation the old
/// handles fail with the typed error, and opening the path again gives a working lock (a new
/// view: the broken one is never joined).
#[test]
fn after_a_truncation_the_path_opens_anew() {
    let dir = SharedDir::new("truncation-reopen");
    for named in [false, true] {
        let path = dir.0.join(if named { "names" } else { "one" });
        let open = || {
            let mut o = FairLock::options();
            o.mode(0o666);
            if named {
                o.name("job");
            }
            o.open(&path)
        };
        let lock = open().unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let grant = lock.lock_process().unwrap();
        truncate_as_another_user(&path, 0);
        let e = grant.check().unwrap_err();
        assert!(matches!(e, Error::LockLost { .. }), "named={named}: {e:?}");
        drop(grant);
        let e = lock.try_lock().map(drop).unwrap_err();
        assert!(is_truncation(&e), "named={named}: {e:?}");
        let again = open().expect("the emptied file is a lock again");
        let g = again.try_lock().expect("free");
        assert!(!g.owner_died());
        drop(g);
        // The old handle stays broken.
        assert!(is_truncation(&lock.lock().map(drop).unwrap_err()));
    }
}

fn truncate_here(path: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

/// The first access after the truncation is the uncontended `lock`'s own CAS: it faults, the
/// handler maps the zero pages, and the CAS made again finds a free lock word there. That is no
/// grant: `lock` fails, while a new handle on the path (made anew) gets the real lock.
#[test]
fn a_lock_whose_cas_finds_the_truncation_is_refused() {
    let dir = common::TempDir::new("truncation-fast-path");
    let path = dir.join("l");
    let lock = FairLock::open(&path).unwrap();
    drop(lock.try_lock().unwrap());
    truncate_here(&path, 0);
    let stale = lock.lock().map(|g| g.token());
    let other = FairLock::open(&path).unwrap();
    let real = other.try_lock().expect("the lock made anew is free");
    match stale {
        Ok(token) => panic!("lock() after the truncation granted token {token}"),
        Err(e) => assert!(is_truncation(&e), "{e:?}"),
    }
    drop(real);
}

/// A `SIGBUS` sent with `kill` is no fault: a program that ignores `SIGBUS` keeps ignoring it,
/// and one whose earlier handler (Rust's own) resets the disposition keeps our handler: a
/// truncation afterwards is still survived.
#[test]
fn a_sigbus_sent_with_kill_is_not_taken_for_a_fault() {
    if let Some(r) = role() {
        let path = PathBuf::from(common::env("FL_PATH"));
        if r == "ignores" {
            // SAFETY: setting a disposition before any lock file is mapped.
            unsafe { libc::signal(libc::SIGBUS, libc::SIG_IGN) };
        }
        let lock = FairLock::open(&path).unwrap();
        // SAFETY: sending ourselves a signal.
        unsafe { libc::kill(libc::getpid(), libc::SIGBUS) };
        std::thread::sleep(Duration::from_millis(50));
        if r == "stray" {
            truncate_here(&path, 0);
            let e = lock.try_lock().map(drop).unwrap_err();
            assert!(is_truncation(&e), "{e:?}");
        }
        return;
    }
    for r in ["ignores", "stray"] {
        let dir = common::TempDir::new("truncation-kill-bus");
        let mut w = Worker::spawn(
            dir.path(),
            "a_sigbus_sent_with_kill_is_not_taken_for_a_fault",
            r,
            r,
            &[("FL_PATH", dir.join("l").display().to_string())],
        );
        let status = w.child.wait().unwrap();
        assert!(status.success(), "{r}: {status}\n{}", w.stderr());
    }
}

/// A file emptied and made anew by another open of this process before the old view touched
/// it (so nothing faulted): the grant from before is no grant of the new state, even though
/// its ticket (0) is the new state's first.
#[test]
fn a_grant_from_before_the_file_was_made_anew_is_lost() {
    let dir = common::TempDir::new("truncation-reinit");
    let path = dir.join("l");
    let lock = FairLock::open(&path).unwrap();
    let old = lock.lock().unwrap();
    truncate_here(&path, 0);
    let again = FairLock::open(&path).unwrap(); // makes the emptied file anew
    let new = again.lock().expect("the new lock is free");
    assert!(matches!(old.check(), Err(Error::LockLost { .. })));
    assert!(matches!(old.unlock(), Err(Error::LockLost { .. })));
    // The new holder still holds: another thread cannot get in.
    let third = std::thread::scope(|s| s.spawn(|| again.try_lock().map(drop)).join().unwrap());
    assert!(matches!(third, Err(Error::WouldBlock { .. })), "{third:?}");
    new.check().expect("still the new holder's");
    assert!(is_truncation(&lock.try_lock().map(drop).unwrap_err()));
}
