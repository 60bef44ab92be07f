use std::sync::Arc;
use std::time::{Duration, Instant};
use fairlock::*;

#[test]
fn smoke() {
    let dir = std::env::temp_dir().join(format!("fl-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let lock = Arc::new(FairLock::open(dir.join("a.lock")).unwrap());
    let g = lock.lock().unwrap();
    assert_eq!(g.token(), 1);
    assert!(matches!(lock.lock(), Err(Error::WouldDeadlock)));
    drop(g);
    let g = lock.try_lock().unwrap();
    assert_eq!(g.token(), 2);
    drop(g);
    let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let t0 = Instant::now();
    let hs: Vec<_> = (0..4).map(|_| { let l = lock.clone(); let c = counter.clone(); std::thread::spawn(move || {
        let mut last = 0;
        for _ in 0..20000 { let g = l.lock().unwrap(); assert!(g.token() > last); last = g.token();
            let v = c.load(std::sync::atomic::Ordering::Relaxed); c.store(v+1, std::sync::atomic::Ordering::Relaxed); }
    })}).collect();
    for h in hs { h.join().unwrap(); }
    assert_eq!(counter.load(std::sync::atomic::Ordering::Relaxed), 80000);
    eprintln!("80k contended in {:?}", t0.elapsed());
    let t0 = Instant::now();
    for _ in 0..1_000_000 { drop(lock.lock().unwrap()); }
    eprintln!("uncontended {:?}/op", t0.elapsed() / 1_000_000);
    let g = lock.lock().unwrap();
    let l2 = lock.clone();
    let h = std::thread::spawn(move || { let t = Instant::now(); let r = l2.lock_timeout(Duration::from_millis(50)); (r.is_err(), t.elapsed()) });
    let (e, el) = h.join().unwrap();
    assert!(e); eprintln!("timeout after {el:?}");
    drop(g);
    let st = inspect(dir.join("a.lock")).unwrap();
    eprintln!("{st:?}");
}
