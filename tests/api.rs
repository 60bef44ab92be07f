//! The API as a user's code meets it: handles move and are shared between threads (the auto
//! traits, checked at compile time), and errors as an error reporter sees them — each names its
//! file, says what failed and why once (the OS reason in `Display`, as `std::io::Error` does), and
//! converts into `io::Error`.

mod common;

use std::error::Error as _;
use std::io;
use std::time::{Duration, Instant};

use common::TempDir;
use fairlock::{
    ArcLockGuard, Error, FairLock, FairMutex, FairRLock, OpenOptions, Status, TicketInfo,
};

// ---------------------------------------------------------------------------------------------
// Auto traits: lock handles can be shared between threads
// ---------------------------------------------------------------------------------------------

const fn assert_send_sync<T: Send + Sync>() {}
const fn assert_send<T: Send>() {}
/// Owned guards have no lifetime: they can be kept in a `'static` struct.
const fn assert_static<T: 'static>() {}

const _: () = {
    assert_send_sync::<FairLock>();
    assert_send_sync::<FairRLock>();
    assert_send_sync::<FairMutex<u64>>();
    assert_send_sync::<FairMutex<[u8; 64]>>();
    assert_send_sync::<std::sync::Arc<FairLock>>();
    assert_send_sync::<OpenOptions>();
    assert_send_sync::<Status>();
    assert_send_sync::<TicketInfo>();
    // Errors can cross threads and be boxed as `dyn Error + Send + Sync`.
    assert_send_sync::<Error>();
    assert_send::<Box<dyn std::error::Error + Send + Sync>>();
    assert_static::<ArcLockGuard>();
};

// That guards are not `Send` is checked by compile_fail doctests in src/lib.rs.

#[test]
fn handles_move_between_threads() {
    let path = std::env::temp_dir().join(format!("fairlock-it-traits-{}.lock", std::process::id()));
    let lock = FairLock::open(&path).expect("open");
    // Moved into a thread and back.
    let lock = std::thread::spawn(move || {
        drop(lock.lock().expect("lock in thread"));
        lock
    })
    .join()
    .unwrap();
    drop(lock.lock().expect("lock back home"));
    let r = FairRLock::open(&path).expect("open rlock");
    std::thread::scope(|s| {
        s.spawn(|| drop(r.lock().expect("rlock by reference in a scoped thread")));
    });
    let e = lock.lock().map(drop).and_then(|()| {
        let _g = lock.lock()?;
        lock.try_lock().map(drop)
    });
    let e: Box<dyn std::error::Error + Send + Sync> = Box::new(e.unwrap_err());
    assert!(e.to_string().contains(path.to_str().unwrap()), "{e}");
    std::fs::remove_file(&path).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

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
fn an_os_error_is_said_once_in_the_message() {
    let dir = TempDir::new("errors-os");
    let path = dir.join("missing-dir/x.lock");
    let e = FairLock::open(&path).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e:?}");
    // `{}` says what failed and why, as `std::io::Error` does: the OS reason is in it...
    let shown = e.to_string();
    assert!(shown.contains("No such file"), "{shown}");
    assert_eq!(shown.matches(path.to_str().unwrap()).count(), 1, "{shown}");
    // ...once, whoever prints the chain (anyhow's `{:#}`, the command).
    assert!(e.source().is_none());
    let full = chain(&e);
    assert_eq!(full.matches("No such file").count(), 1, "{full}");
    // The io::Error itself stays at hand, and converting keeps its kind.
    let Error::Io { source, .. } = &e else {
        unreachable!()
    };
    assert_eq!(source.kind(), io::ErrorKind::NotFound);
    assert_eq!(io::Error::from(e).kind(), io::ErrorKind::NotFound);
    assert_eq!(
        FairLock::open(&path).unwrap_err().path(),
        Some(path.as_path())
    );
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

/// Each kind's `options()` opens that kind, with the settings it takes: a reader/writer lock's
/// builder gives a `FairRwLock` (its file then holds a reader/writer lock), a semaphore's a
/// `FairSemaphore` of the permits asked, a mutex's a `FairMutex<T>`, a re-entrant lock's a
/// `FairRLock`. (A builder that was a plain `OpenOptions` opened an exclusive lock from
/// `FairRwLock::options().lease(..).open(p)`, and the file was then unusable as a
/// reader/writer lock.)
#[test]
fn each_kind_s_builder_opens_that_kind() {
    let dir = TempDir::new("kind-builders");
    let rw: fairlock::FairRwLock = fairlock::FairRwLock::options()
        .lease(Duration::from_secs(30))
        .mode(0o640)
        .open(dir.join("rw.lock"))
        .expect("open rw");
    let r1 = rw.read().expect("read");
    // Readers hold together: another thread's read is granted at once.
    std::thread::scope(|s| {
        s.spawn(|| drop(rw.try_read().expect("a second reader")));
    });
    drop(r1);
    assert_eq!(
        fairlock::inspect(dir.join("rw.lock"))
            .expect("inspect")
            .kind,
        fairlock::LockKind::RwLock
    );
    let sem: fairlock::FairSemaphore = fairlock::FairSemaphore::options()
        .slots(8)
        .open(dir.join("sem.lock"), 3)
        .expect("open semaphore");
    assert_eq!(sem.permits(), 3);
    assert_eq!(
        fairlock::inspect(dir.join("sem.lock"))
            .expect("inspect")
            .kind,
        fairlock::LockKind::Semaphore { permits: 3 }
    );
    let m: fairlock::FairMutex<u64> = fairlock::FairMutex::options()
        .fairness(fairlock::Fairness::Bounded(4))
        .open(dir.join("m.lock"))
        .expect("open mutex");
    *m.lock().expect("lock") = 7;
    assert_eq!(*m.lock().expect("lock"), 7);
    let r: fairlock::FairRLock = fairlock::FairRLock::options()
        .lease(Duration::from_secs(30))
        .open(dir.join("r.lock"))
        .expect("open rlock");
    let outer = r.lock().expect("lock");
    let inner = r.lock().expect("nested lock");
    assert_eq!(outer.token(), inner.token());
}
