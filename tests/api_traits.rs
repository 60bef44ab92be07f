//! Compile-time checks of the API's auto traits: lock handles can be shared between threads.

use fairlock::{Error, FairLock, FairRLock, OpenOptions, Status, TicketInfo};

const fn assert_send_sync<T: Send + Sync>() {}
const fn assert_send<T: Send>() {}

const _: () = {
    assert_send_sync::<FairLock>();
    assert_send_sync::<FairRLock>();
    assert_send_sync::<std::sync::Arc<FairLock>>();
    assert_send_sync::<OpenOptions>();
    assert_send_sync::<Status>();
    assert_send_sync::<TicketInfo>();
    // Errors can cross threads and be boxed as `dyn Error + Send + Sync`.
    assert_send_sync::<Error>();
    assert_send::<Box<dyn std::error::Error + Send + Sync>>();
};

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
    let e: Box<dyn std::error::Error + Send + Sync> = Box::new(Error::WouldBlock);
    assert!(!e.to_string().is_empty());
    std::fs::remove_file(&path).unwrap();
}
