//! Errors as a user's error reporter sees them: each names its file, says the problem once
//! (the OS error is `source()`, not repeated in `Display`), and converts into `io::Error`.

mod common;

use std::error::Error as _;
use std::io;
use std::time::{Duration, Instant};

use common::TempDir;
use fairlock::{Error, FairLock};

/// What `anyhow`'s `{:#}` prints: the error and each cause, joined by ": ".
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s = format!("{s}: {c}");
        cause = c.source();
    }
    s
}

#[test]
fn an_os_error_is_said_once_through_source() {
    let dir = TempDir::new("errors-os");
    let path = dir.join("missing-dir/x.lock");
    let e = FairLock::open(&path).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    let io_cause = e.source().expect("the OS error is the source").to_string();
    assert!(io_cause.contains("No such file"), "{io_cause}");
    assert!(
        !e.to_string().contains("No such file"),
        "Display repeats the cause: {e}"
    );
    let full = chain(&e);
    assert_eq!(full.matches("No such file").count(), 1, "{full}");
    assert_eq!(full.matches(path.to_str().unwrap()).count(), 1, "{full}");
    assert_eq!(e.path(), Some(path.as_path()));
}

#[test]
fn every_lock_error_names_its_file() {
    let dir = TempDir::new("errors-path");
    let path = dir.join("a.lock");
    let lock = FairLock::open(&path).unwrap();
    let g = lock.lock().unwrap();
    let shown = path.to_str().unwrap();
    let errors = [
        lock.lock().unwrap_err(), // WouldDeadlock: this thread holds it
        std::thread::scope(|s| s.spawn(|| lock.try_lock().unwrap_err()).join().unwrap()),
        std::thread::scope(|s| {
            s.spawn(|| lock.lock_timeout(Duration::from_millis(20)).unwrap_err())
                .join()
                .unwrap()
        }),
        std::thread::scope(|s| {
            s.spawn(|| {
                lock.lock_until(Instant::now() + Duration::from_millis(20))
                    .unwrap_err()
            })
            .join()
            .unwrap()
        }),
    ];
    drop(g);
    let kinds: Vec<&str> = errors
        .iter()
        .map(|e| match e {
            Error::WouldDeadlock { .. } => "deadlock",
            Error::WouldBlock { .. } => "busy",
            Error::Timeout { .. } => "timeout",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        ["deadlock", "busy", "timeout", "timeout"],
        "{errors:?}"
    );
    for e in &errors {
        assert!(e.to_string().starts_with(shown), "{e}");
        assert_eq!(e.path(), Some(path.as_path()));
        assert!(e.source().is_none());
    }
    std::fs::write(dir.join("foreign"), b"not a lock").unwrap();
    let e = FairLock::open(dir.join("foreign")).unwrap_err();
    assert!(e.to_string().contains("foreign"), "{e}");
}

#[test]
fn converts_into_io_error_with_a_matching_kind() {
    let dir = TempDir::new("errors-io");
    let path = dir.join("a.lock");
    let lock = FairLock::open(&path).unwrap();
    let g = lock.lock().unwrap();
    let busy = std::thread::scope(|s| s.spawn(|| lock.try_lock().unwrap_err()).join().unwrap());
    let deadlock = lock.lock().unwrap_err();
    drop(g);
    let missing = FairLock::open(dir.join("no/such.lock")).unwrap_err();
    std::fs::write(dir.join("foreign"), b"not a lock").unwrap();
    let foreign = FairLock::open(dir.join("foreign")).unwrap_err();
    let cases = [
        (busy, io::ErrorKind::WouldBlock),
        (deadlock, io::ErrorKind::Deadlock),
        (missing, io::ErrorKind::NotFound),
        (foreign, io::ErrorKind::InvalidData),
    ];
    for (e, kind) in cases {
        let msg = e.to_string();
        // What a function returning io::Result<()> does with `?`.
        let io_err: io::Error = (|| -> io::Result<()> { Err(e)? })().unwrap_err();
        assert_eq!(io_err.kind(), kind, "{msg}");
        assert_eq!(io_err.to_string(), msg);
        let inner = io_err.get_ref().and_then(|r| r.downcast_ref::<Error>());
        assert!(inner.is_some(), "the fairlock error is kept inside");
    }
}
