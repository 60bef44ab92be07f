//! `FairMutex<T>`: a value in the lock file, shared by processes and threads, that survives
//! reopening, its writer's death and a reboot's re-initialisation; and what is refused.
//!
//! The counting tests: 4 processes × 2 threads incrementing one
//! `FairMutex<u64>` 5,000 times each get exactly 40,000, also when one process is SIGKILLed
//! while it holds the lock (the next holder is told `owner_died()`, and the count is the
//! survivors' plus the dead process's completed increments).

mod common;

use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{Gate, Shm, TempDir, Worker, role, wait_all, wait_until};
use fairlock::{Error, FairLock, FairMutex, OpenOptions};

const PROCS: usize = 4;
const THREADS: usize = 2;
const ITERS: u64 = 5_000;
/// The victim's first thread stops (holding the lock) after this many of its own increments.
const KILL_AT: u64 = 1_500;

// Words of the shared-memory area the workers report through.
/// Holders that saw `owner_died()`.
const DIED_SEEN: usize = 0;
/// The victim's completed increments (both threads), written while it holds the lock.
const VICTIM_DONE: usize = 1;
/// Set by the victim once it holds the lock for good, waiting to be killed.
const VICTIM_READY: usize = 2;

/// One increment as a read, a pause and a write: two holders at once would lose updates.
fn increment(g: &mut fairlock::MutexGuard<'_, u64>) {
    let v = **g;
    for _ in 0..20 {
        std::hint::spin_loop();
    }
    **g = std::hint::black_box(v) + 1;
}

fn worker() {
    let path = common::env("FL_LOCK");
    let shm = Arc::new(Shm::open(common::env("FL_SHM").as_ref()));
    let gate = Arc::new(Gate::open(common::env("FL_GATE").as_ref()));
    let victim = role().as_deref() == Some("victim");
    let m = Arc::new(FairMutex::<u64>::open(&path).expect("worker open"));
    let done = Arc::new(AtomicU64::new(0)); // this process's completed increments
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (m, shm, gate, done) = (m.clone(), shm.clone(), gate.clone(), done.clone());
            std::thread::spawn(move || {
                gate.arrive_and_wait();
                for i in 0..ITERS {
                    let mut g = m.lock().expect("lock");
                    if g.owner_died() {
                        shm.atomic(DIED_SEEN).fetch_add(1, Ordering::SeqCst);
                    }
                    increment(&mut g);
                    // Under the lock, so it always equals this process's share of the value.
                    done.fetch_add(1, Ordering::Relaxed);
                    if victim && t == 0 && i + 1 == KILL_AT {
                        shm.write(VICTIM_DONE, done.load(Ordering::Relaxed));
                        shm.write(VICTIM_READY, 1);
                        loop {
                            std::thread::sleep(Duration::from_secs(1)); // holding, until killed
                        }
                    }
                    drop(g);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("worker thread panicked");
    }
}

/// Runs `PROCS` workers (the first as `first_role`) on a fresh `FairMutex<u64>`; returns the
/// directory, the lock's path, the report area and the workers.
fn start(name: &str, first_role: &str) -> (TempDir, std::path::PathBuf, Shm, Vec<Worker>) {
    let dir = TempDir::new(name);
    let path = dir.join("counter.lock");
    let shm_path = dir.join("shm");
    let shm = Shm::create(&shm_path, 4);
    let gate_path = dir.join("gate");
    let gate = Gate::create(&gate_path);
    let parent = FairMutex::<u64>::open(&path).expect("create");
    assert_eq!(*parent.lock().expect("lock"), 0, "a new file starts zeroed");
    let env = [
        ("FL_LOCK", path.display().to_string()),
        ("FL_SHM", shm_path.display().to_string()),
        ("FL_GATE", gate_path.display().to_string()),
    ];
    let mut workers: Vec<Worker> = (0..PROCS)
        .map(|i| {
            let r = if i == 0 { first_role } else { "counter" };
            Worker::spawn(dir.path(), name, r, &format!("{r}-{i}"), &env)
        })
        .collect();
    gate.open_when_arrived((PROCS * THREADS) as u64, &mut workers);
    (dir, path, shm, workers)
}

#[test]
fn four_processes_two_threads_count_to_40000() {
    if role().is_some() {
        return worker();
    }
    let (_dir, path, shm, mut workers) =
        start("four_processes_two_threads_count_to_40000", "counter");
    wait_all(&mut workers, Duration::from_secs(120));
    // Reopened from scratch (a new handle; this process's old view is gone): the value is
    // the file's.
    let m = FairMutex::<u64>::open(&path).expect("reopen");
    let g = m.lock().expect("lock");
    assert_eq!(*g, (PROCS * THREADS) as u64 * ITERS);
    assert!(!g.owner_died());
    assert_eq!(shm.read(DIED_SEEN), 0, "nobody died, nobody was told so");
}

#[test]
fn a_holder_killed_mid_way_leaves_the_exact_count_and_owner_died() {
    if role().is_some() {
        return worker();
    }
    let name = "a_holder_killed_mid_way_leaves_the_exact_count_and_owner_died";
    let (_dir, path, shm, mut workers) = start(name, "victim");
    wait_until(
        Duration::from_secs(60),
        "the victim to hold the lock",
        || shm.read(VICTIM_READY) == 1,
    );
    let victim_done = shm.read(VICTIM_DONE);
    common::chaos::signal(workers[0].pid(), libc::SIGKILL);
    wait_until(Duration::from_secs(10), "the victim to exit", || {
        workers[0].poll()
    });
    wait_all(&mut workers[1..], Duration::from_secs(120));
    let m = FairMutex::<u64>::open(&path).expect("reopen");
    let g = m.lock().expect("lock");
    // One holder (a survivor, or this one if the survivors had finished) is told.
    let told = shm.read(DIED_SEEN) + u64::from(g.owner_died());
    assert_eq!(told, 1, "owner_died() seen {told} times");
    let survivors = (PROCS as u64 - 1) * THREADS as u64 * ITERS;
    assert!(victim_done >= KILL_AT && victim_done < THREADS as u64 * ITERS);
    assert_eq!(
        *g,
        survivors + victim_done,
        "victim completed {victim_done}"
    );
}

#[test]
fn a_guard_dropped_while_panicking_tells_the_next_holder() {
    let dir = TempDir::new("mutex-panic");
    let path = dir.join("m.lock");
    let m = FairMutex::<[u32; 2]>::open(&path).unwrap();
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            let mut g = m.lock().unwrap();
            g[0] = 7; // half an update
            panic!("mid-update");
        })
        .join()
    });
    assert!(r.is_err());
    let g = m.lock().unwrap();
    assert!(g.owner_died(), "a panic while holding is a death");
    assert_eq!(*g, [7, 0], "the half update is there to repair");
}

#[test]
fn another_type_a_plain_lock_file_and_a_lease_are_refused() {
    let dir = TempDir::new("mutex-refused");
    let path = dir.join("m.lock");
    {
        let m = FairMutex::<u64>::open(&path).unwrap();
        *m.lock().unwrap() = 42;
    }
    let before = std::fs::read(&path).unwrap();
    for e in [
        FairMutex::<u32>::open(&path).map(drop).unwrap_err(),
        FairMutex::<[u8; 8]>::open(&path).map(drop).unwrap_err(), // same size, other alignment
        FairMutex::<u64>::options()
            .schema("counter/2")
            .open(&path)
            .map(drop)
            .unwrap_err(), // same layout, another schema
    ] {
        let Error::DataMismatch { path: p, what, .. } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(p, &path);
        assert!(what.contains("8 bytes"), "{what}");
        assert!(e.to_string().contains(path.to_str().unwrap()), "{e}");
    }
    assert!(
        std::fs::read(&path).unwrap() == before,
        "a refusal writes nothing"
    );
    // A plain lock may use a FairMutex's file (it ignores the data)...
    drop(FairLock::open(&path).unwrap().lock().unwrap());
    // ...but a FairMutex refuses a plain lock's file.
    let plain = dir.join("plain.lock");
    FairLock::open(&plain).unwrap();
    let e = FairMutex::<u64>::open(&plain).map(drop).unwrap_err();
    assert!(
        matches!(&e, Error::DataMismatch { what, .. } if what.contains("no data area")),
        "{e:?}"
    );
    // No leases: a taken-over holder would still hold `&mut T`. `FairMutex::options()` has no
    // `lease` at all; the general builder refuses one at open.
    let e = OpenOptions::default()
        .lease(Duration::from_secs(5))
        .open_mutex::<u64>(&path)
        .map(drop)
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidOption { what } if what.contains("no lease")),
        "{e:?}"
    );
    assert_eq!(*FairMutex::<u64>::open(&path).unwrap().lock().unwrap(), 42);
}

/// The boot id is header bytes 48..64, the magic 0..8 (docs/FILE_FORMAT.md).
fn poke(path: &std::path::Path, offset: u64, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, offset).unwrap();
}

#[test]
fn the_value_survives_re_initialisation_after_a_reboot() {
    let dir = TempDir::new("mutex-reboot");
    let path = dir.join("m.lock");
    let token = {
        let m = FairMutex::<[u64; 3]>::open(&path).unwrap();
        let mut g = m.lock().unwrap();
        *g = [1, 2, 3];
        g.token()
    };
    // As if written in another boot: the lock state is re-initialised, the data kept.
    poke(&path, 48, &[0xAB; 16]);
    let m = FairMutex::<[u64; 3]>::open(&path).unwrap();
    let g = m.lock().unwrap();
    assert_eq!(*g, [1, 2, 3]);
    assert!(
        g.token() > token,
        "tokens keep rising across re-initialisation"
    );
    drop(g);
    drop(m);
    // As if the re-initialising process died half-way (the magic it writes first): the next
    // opener initialises again, still keeping the data.
    poke(&path, 0, b"FAIRLOC!");
    let m = FairMutex::<[u64; 3]>::open(&path).unwrap();
    assert_eq!(*m.lock().unwrap(), [1, 2, 3]);
    // A creator that died initialising a new file (the other pending magic): data zeroed.
    drop(m);
    poke(&path, 0, b"FAIRLOC?");
    let m = FairMutex::<[u64; 3]>::open(&path).unwrap();
    assert_eq!(*m.lock().unwrap(), [0, 0, 0]);
}

#[test]
fn zero_sized_and_page_aligned_values() {
    #[derive(Clone, Copy, bytemuck::Zeroable, bytemuck::Pod)]
    #[repr(C, align(4096))]
    struct Page([u8; 4096]);
    let dir = TempDir::new("mutex-shapes");
    let m = FairMutex::<Page>::open(dir.join("page.lock")).unwrap();
    {
        let mut g = m.lock().unwrap();
        assert_eq!(
            (&*g as *const Page as usize) % 4096,
            0,
            "aligned in the mapping"
        );
        g.0[4095] = 9;
    }
    assert_eq!(m.lock().unwrap().0[4095], 9);
    let z = FairMutex::<()>::open(dir.join("unit.lock")).unwrap();
    let g = z.lock().unwrap();
    assert_eq!(*g, ());
}

#[test]
fn a_guard_inherited_through_fork_gives_no_access() {
    // Forked from a worker process of its own, with no other test running in it.
    if role().is_none() {
        let dir = TempDir::new("mutex-fork");
        let env = [("FL_LOCK", dir.join("m.lock").display().to_string())];
        let name = "a_guard_inherited_through_fork_gives_no_access";
        let mut w = [Worker::spawn(dir.path(), name, "fork", "fork", &env)];
        return wait_all(&mut w, Duration::from_secs(60));
    }
    let m = FairMutex::<u64>::open(common::env("FL_LOCK")).unwrap();
    let g = m.lock().unwrap();
    // SAFETY: the child checks the guard, dereferences it once (which must panic; the hook is
    // silenced first so nothing is printed) and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let lost = matches!(g.check(), Err(Error::LockLost { .. }));
        std::panic::set_hook(Box::new(|_| {}));
        let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| *g)).is_err();
        std::mem::forget(g);
        // SAFETY: leaving the child at once.
        unsafe { libc::_exit(if lost && refused { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child: {status:#x}"
    );
    drop(g);
    assert!(
        !m.lock().unwrap().owner_died(),
        "the child released nothing"
    );
}

#[test]
fn a_refusal_of_a_file_from_another_boot_writes_nothing() {
    // The type check comes before any re-initialisation of a stale file.
    let dir = TempDir::new("mutex-refused-stale");
    let path = dir.join("m.lock");
    *FairMutex::<u64>::open(&path).unwrap().lock().unwrap() = 5;
    for magic in [&b"FAIRLOCK"[..], b"FAIRLOC!"] {
        poke(&path, 0, magic);
        poke(&path, 48, &[0xAB; 16]); // another boot
        let before = std::fs::read(&path).unwrap();
        let e = FairMutex::<u32>::open(&path).map(drop).unwrap_err();
        assert!(matches!(e, Error::DataMismatch { .. }), "{e:?}");
        assert!(
            std::fs::read(&path).unwrap() == before,
            "refusal wrote ({magic:?})"
        );
    }
    assert_eq!(*FairMutex::<u64>::open(&path).unwrap().lock().unwrap(), 5);
}

static LEAKY: std::sync::OnceLock<FairMutex<u64>> = std::sync::OnceLock::new();

#[test]
fn a_leaked_guard_keeps_the_lock_after_its_thread_exits() {
    // The thread-exit watch never gives a leaked guard's grant to the next holder: the leaked
    // `&'static mut u64` is still usable (two `&mut` to one value).
    let dir = TempDir::new("mutex-leak");
    let m = LEAKY.get_or_init(|| FairMutex::<u64>::open(dir.join("m.lock")).unwrap());
    let leaked: &'static mut u64 = std::thread::spawn(|| {
        let g = Box::leak(Box::new(LEAKY.get().unwrap().lock().unwrap()));
        &mut **g
    })
    .join()
    .unwrap();
    *leaked = 1;
    let r = m.lock_timeout(Duration::from_millis(100)).map(drop);
    assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    assert!(matches!(
        m.try_lock().map(drop),
        Err(Error::WouldBlock { .. })
    ));
}

static TLS_MUTEX: std::sync::OnceLock<FairMutex<u64>> = std::sync::OnceLock::new();

/// A thread-local that holds a guard and writes through it in its destructor.
struct WritesOnExit(std::cell::RefCell<Option<fairlock::MutexGuard<'static, u64>>>);

impl Drop for WritesOnExit {
    fn drop(&mut self) {
        if let Some(mut g) = self.0.borrow_mut().take() {
            std::thread::sleep(Duration::from_millis(50));
            *g += 1;
        }
    }
}

thread_local! {
    static KEEPER: WritesOnExit = const { WritesOnExit(std::cell::RefCell::new(None)) };
}

#[test]
fn a_guard_in_a_thread_local_is_released_only_when_dropped() {
    // The exit watch, registered after this thread-local (at the first lock), runs first; it
    // must not give the lock away while the thread-local's destructor still writes.
    let dir = TempDir::new("mutex-tls");
    let m = TLS_MUTEX.get_or_init(|| FairMutex::<u64>::open(dir.join("m.lock")).unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        KEEPER.with(|_| ()); // registered before the first lock
        let g = TLS_MUTEX.get().unwrap().lock().unwrap();
        KEEPER.with(|k| *k.0.borrow_mut() = Some(g));
        tx.send(()).unwrap();
    });
    rx.recv().unwrap();
    let g = m.lock().unwrap();
    assert_eq!(*g, 1, "granted before the thread-local's write");
    assert!(!g.owner_died(), "released by its guard, not given up");
    drop(g);
    t.join().unwrap();
}

/// Two programs that declare the same `#[repr(C)]` struct each (different types, in different
/// crates or modules) share one file: the data is identified by its layout and the schema they
/// name, not by the type's name.
#[test]
fn the_same_layout_declared_twice_shares_the_file() {
    mod first_program {
        #[repr(C)]
        #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
        pub struct Stats {
            pub runs: u64,
            pub failures: u32,
            pub last_code: i32,
        }
    }
    mod second_program {
        #[repr(C)]
        #[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
        pub struct Counters {
            pub runs: u64,
            pub failures: u32,
            pub last_code: i32,
        }
    }
    let dir = TempDir::new("mutex-two-programs");
    let path = dir.join("stats.lock");
    {
        let m = FairMutex::<first_program::Stats>::options()
            .schema("stats/1")
            .open(&path)
            .unwrap();
        let mut g = m.lock().unwrap();
        g.runs = 3;
        g.failures = 1;
        g.last_code = -2;
    }
    let other = FairMutex::<second_program::Counters>::options()
        .schema("stats/1")
        .open(&path)
        .expect("the same layout and schema");
    let g = other.lock().unwrap();
    assert_eq!((g.runs, g.failures, g.last_code), (3, 1, -2));
    drop(g);
    // The schema changed with the meaning: refused, and the file untouched.
    let before = std::fs::read(&path).unwrap();
    let e = FairMutex::<second_program::Counters>::options()
        .schema("stats/2")
        .open(&path)
        .map(drop)
        .unwrap_err();
    assert!(matches!(e, Error::DataMismatch { .. }), "{e:?}");
    assert!(e.to_string().contains("schema tag"), "{e}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    // The crate's own re-export names the same trait.
    fn pod<T: fairlock::bytemuck::Pod>() {}
    pod::<first_program::Stats>();
}
