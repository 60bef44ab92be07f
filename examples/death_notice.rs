//! How fast can a waiter learn that a lock holder in another process died? A measurement of
//! the kernel mechanisms issue 15 weighs for timer-free waiting (docs/BENCHMARKS.md, "death
//! notice"), each over the same trial: a child process takes the lock (or the beacon) and
//! reports ready, a parked waiter in this process waits, the parent SIGKILLs the child, and the
//! waiter records when it woke (CLOCK_MONOTONIC, the kill's timestamp taken just before
//! `kill`).
//!
//! * `robust` — a robust, process-shared pthread mutex in a mapped file; the waiter is blocked
//!   in `pthread_mutex_lock` and returns `EOWNERDEAD` (the peer to beat).
//! * `beacon` — the same robust mutex used only as a *death beacon*: the child holds it, the
//!   waiter sets `FUTEX_WAITERS` in its word and sleeps in `futex_waitv` on it *and* on a
//!   second word (standing for its slot word), untimed; the kernel's robust-list walk at the
//!   child's exit marks the word `FUTEX_OWNER_DIED` and wakes it.
//! * `pidfd` — `pidfd_open` of the child, `poll` for it to exit (no futex alongside).
//! * `fairlock` — the current lock: a `FairLock` holder child, a waiter parked in `lock()`
//!   (its liveness poll decides).
//!
//! ```sh
//! cargo run --release -p fairlock --example death_notice -- 200
//! ```

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use memmap2::MmapRaw;

const FUTEX_WAITERS: u32 = 0x8000_0000;
const FUTEX_OWNER_DIED: u32 = 0x4000_0000;

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A file of one page, mapped shared: the robust mutex at 0, a second futex word at 64.
fn map(path: &Path) -> MmapRaw {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .expect("open");
    f.set_len(4096).expect("size");
    MmapRaw::map_raw(&f).expect("map")
}

fn mutex(m: &MmapRaw) -> *mut libc::pthread_mutex_t {
    m.as_mut_ptr().cast()
}

fn word(m: &MmapRaw, off: usize) -> &AtomicU32 {
    // SAFETY: in bounds (4096 bytes), 4-aligned, the mapping outlives the reference, and the
    // word is only accessed atomically (the kernel's writes are atomic too).
    unsafe { &*m.as_mut_ptr().add(off).cast::<AtomicU32>() }
}

/// Initialises a robust, process-shared mutex at the start of a fresh mapping.
fn init_robust(m: &MmapRaw) {
    // SAFETY: standard initialisation of a mutex in memory we own exclusively right now.
    unsafe {
        let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
        libc::pthread_mutexattr_init(&mut attr);
        libc::pthread_mutexattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED);
        libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST);
        libc::pthread_mutex_init(mutex(m), &attr);
        libc::pthread_mutexattr_destroy(&mut attr);
    }
}

/// The child: take what `kind` says, say "ready", wait to be killed.
fn child(kind: &str, path: &Path) {
    let _keep: Box<dyn std::any::Any> = if kind == "fairlock" {
        let lock = Box::leak(Box::new(fairlock::FairLock::open(path).expect("open")));
        Box::new(lock.lock().expect("lock"))
    } else {
        let m = map(path);
        // SAFETY: the parent initialised the mutex before starting us.
        let r = unsafe { libc::pthread_mutex_lock(mutex(&m)) };
        assert_eq!(r, 0, "child lock");
        Box::new(m)
    };
    println!("ready");
    std::io::stdout().flush().unwrap();
    std::thread::sleep(Duration::from_secs(60));
}

/// `futex_waitv` on two 32-bit shared futex words, untimed.
fn futex_waitv2(a: &AtomicU32, va: u32, b: &AtomicU32, vb: u32) -> i64 {
    #[repr(C)]
    struct FutexWaitv {
        val: u64,
        uaddr: u64,
        flags: u32,
        reserved: u32,
    }
    const FUTEX2_SIZE_U32: u32 = 0x02;
    let w = [
        FutexWaitv {
            val: u64::from(va),
            uaddr: a.as_ptr() as u64,
            flags: FUTEX2_SIZE_U32,
            reserved: 0,
        },
        FutexWaitv {
            val: u64::from(vb),
            uaddr: b.as_ptr() as u64,
            flags: FUTEX2_SIZE_U32,
            reserved: 0,
        },
    ];
    // SAFETY: two valid waitv entries for words that stay mapped during the call; no timeout.
    unsafe {
        libc::syscall(
            libc::SYS_futex_waitv,
            w.as_ptr(),
            2u32,
            0u32,
            std::ptr::null::<libc::timespec>(),
            libc::CLOCK_MONOTONIC,
        )
    }
}

/// One trial of `kind`: the wake-up latency after SIGKILL in ns.
fn trial(kind: &str, dir: &Path, n: usize) -> u64 {
    let path = dir.join(format!("{kind}-{n}"));
    let m = (kind != "fairlock").then(|| {
        let m = map(&path);
        init_robust(&m);
        m
    });
    let mut c = Command::new(std::env::current_exe().unwrap())
        .args(["--child", kind])
        .arg(&path)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let mut line = String::new();
    BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    let pid = c.id() as i32;
    let woke = std::thread::scope(|s| {
        let waiter = s.spawn(|| match kind {
            "robust" => {
                let m = m.as_ref().unwrap();
                // SAFETY: an initialised robust mutex in a live mapping.
                let r = unsafe { libc::pthread_mutex_lock(mutex(m)) };
                let t = now_ns();
                assert_eq!(r, libc::EOWNERDEAD);
                // SAFETY: we own it now; make it consistent and release.
                unsafe {
                    libc::pthread_mutex_consistent(mutex(m));
                    libc::pthread_mutex_unlock(mutex(m));
                }
                t
            }
            "beacon" => {
                let m = m.as_ref().unwrap();
                let (beacon, slot) = (word(m, 0), word(m, 64));
                loop {
                    let v = beacon.load(Ordering::Acquire);
                    if v & FUTEX_OWNER_DIED != 0 {
                        return now_ns();
                    }
                    // Ask for a wake at the owner's death (the robust-list walk wakes one
                    // waiter only if this bit is set), then sleep on both words.
                    if v & FUTEX_WAITERS == 0
                        && beacon
                            .compare_exchange(
                                v,
                                v | FUTEX_WAITERS,
                                Ordering::AcqRel,
                                Ordering::Acquire,
                            )
                            .is_err()
                    {
                        continue;
                    }
                    futex_waitv2(
                        beacon,
                        v | FUTEX_WAITERS,
                        slot,
                        slot.load(Ordering::Acquire),
                    );
                }
            }
            "pidfd" => {
                // SAFETY: pidfd_open on our own child's pid, then poll it.
                let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as i32;
                assert!(fd >= 0, "pidfd_open");
                let mut p = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                while unsafe { libc::poll(&mut p, 1, -1) } != 1 {}
                let t = now_ns();
                // SAFETY: our own descriptor.
                unsafe { libc::close(fd) };
                t
            }
            _ => {
                let lock = fairlock::FairLock::open(&path).expect("open");
                let g = lock.lock().expect("lock");
                let t = now_ns();
                assert!(g.owner_died());
                t
            }
        });
        // Let the waiter park (a pthread waiter sleeps in the kernel well before this).
        std::thread::sleep(Duration::from_millis(20));
        let t0 = now_ns();
        // SAFETY: our own child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let woke = waiter.join().unwrap();
        woke.saturating_sub(t0)
    });
    let _ = c.wait();
    drop(m);
    let _ = std::fs::remove_file(&path);
    woke
}

fn pct(v: &[u64], p: f64) -> f64 {
    v[((v.len() - 1) as f64 * p).round() as usize] as f64 / 1e3
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        return child(&args[2], Path::new(&args[3]));
    }
    let trials: usize = args.get(1).map_or(200, |s| s.parse().expect("trials"));
    let dir = std::env::temp_dir().join(format!("death-notice-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kinds = ["robust", "beacon", "pidfd", "fairlock"];
    let mut res: Vec<Vec<u64>> = vec![Vec::new(); kinds.len()];
    // Interleaved: one trial of each in turn, so that load changes hit all alike.
    for n in 0..trials {
        for (i, k) in kinds.iter().enumerate() {
            res[i].push(trial(k, &dir, n));
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "SIGKILL of the holder -> parked waiter awake, {trials} interleaved trials each (load {})",
        load.trim()
    );
    println!("| mechanism | p50 | p90 | p99 | max |\n|---|---:|---:|---:|---:|");
    for (k, v) in kinds.iter().zip(&mut res) {
        v.sort_unstable();
        println!(
            "| {k} | {:.0} µs | {:.0} µs | {:.0} µs | {:.0} µs |",
            pct(v, 0.5),
            pct(v, 0.9),
            pct(v, 0.99),
            *v.last().unwrap() as f64 / 1e3
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
