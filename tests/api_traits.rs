//! Compile-time checks of the API's auto traits: lock handles can be shared between threads.

use fairlock::{
    ArcLockGuard, Error, FairLock, FairMutex, FairRLock, OpenOptions, Status, TicketInfo,
};

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
