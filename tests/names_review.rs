//! Adversarial review of files of named locks (commit ae8ab68): each test states the contract
//! it checks and fails on that commit.

mod common;

use std::fs::OpenOptions as FsOpen;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use common::{TempDir, Worker, role, wait_all};
use fairlock::{Error, FairLock};

// ---------------------------------------------------------------------------------------------
// Raw access to a file of named locks (docs/FILE_FORMAT.md, "Files of named locks").

const BEACON_BASE: u64 = 1 << 40;

fn u32_at(f: &std::fs::File, off: u64) -> u32 {
    let mut b = [0u8; 4];
    f.read_exact_at(&mut b, off).unwrap();
    u32::from_le_bytes(b)
}

fn u64_at(f: &std::fs::File, off: u64) -> u64 {
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, off).unwrap();
    u64::from_le_bytes(b)
}

struct Layout {
    record_size: u64,
    records: u32,
    processes: u32,
    records_offset: u64,
    image_offset: u64,
    participants: u32,
}

fn layout(f: &std::fs::File) -> Layout {
    Layout {
        participants: u32_at(f, 28),
        record_size: u64::from(u32_at(f, 32)),
        records: u32_at(f, 36),
        processes: u32_at(f, 44),
        records_offset: u64_at(f, 88),
        image_offset: u64_at(f, 96),
    }
}

/// The record holding `key` (state `Used`), if any.
fn record_of(f: &std::fs::File, l: &Layout, key: &str) -> Option<u64> {
    (0..u64::from(l.records)).find(|&r| {
        let e = l.records_offset + r * l.record_size;
        let state = u64_at(f, e);
        let len = u32_at(f, e + 16) as usize;
        if state & 0xFF != 2 || len != key.len() {
            return false;
        }
        let mut k = vec![0u8; len];
        f.read_exact_at(&mut k, e + 24).unwrap();
        k == key.as_bytes()
    })
}

/// The non-zero owner words of record `r`'s participant entries (their `claim` field, a u64 at
/// offset 16): (entry, word).
fn owner_words(f: &std::fs::File, l: &Layout, r: u64) -> Vec<(u32, u64)> {
    let image = l.records_offset + r * l.record_size + l.image_offset;
    (0..l.participants)
        .map(|i| (i, u64_at(f, image + 192 + u64::from(i) * 32 + 16)))
        .filter(|&(_, w)| w != 0)
        .collect()
}

/// Takes OFD write locks on `[start, start + len)` through `f` (its own open file
/// description).
fn ofd_lock(f: &std::fs::File, start: u64, len: u64) {
    if len == 0 {
        return;
    }
    // SAFETY: all-zero is a valid flock.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = start as libc::off_t;
    fl.l_len = len as libc::off_t;
    // SAFETY: valid descriptor and flock.
    let r = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_OFD_SETLK, &mut fl) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
}

fn wait_for(path: &Path) {
    common::wait_until(Duration::from_secs(30), &path.display().to_string(), || {
        path.exists()
    });
}

// ---------------------------------------------------------------------------------------------
// Finding: a dead process's owner word is taken for one's own after 2^20 claims of its
// file-wide entry (the owner word keeps 20 bits of the generation): the name's dead holder is
// then never recovered while the wrapping process lives.

#[test]
fn a_dead_holder_is_recovered_whatever_its_entry_s_generation() {
    if role().is_some() {
        // The victim: holds "job" and is killed.
        let path = common::env("FL_LOCK");
        let l = FairLock::options().name("job").open(&path).unwrap();
        let g = l.lock().unwrap();
        std::fs::write(common::env("FL_MARK"), b"").unwrap();
        std::thread::sleep(Duration::from_secs(600));
        drop(g);
        return;
    }
    let dir = TempDir::new("review-wrap");
    let path = dir.join("names.lock");
    let mark = dir.join("mark");
    let mut w = Worker::spawn(
        dir.path(),
        "a_dead_holder_is_recovered_whatever_its_entry_s_generation",
        "victim",
        "victim",
        &[
            ("FL_LOCK", path.display().to_string()),
            ("FL_MARK", mark.display().to_string()),
        ],
    );
    wait_for(&mark);
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(w.pid() as i32, libc::SIGKILL) };
    w.status = Some(w.child.wait().unwrap());

    let f = FsOpen::new().read(true).write(true).open(&path).unwrap();
    let l = layout(&f);
    let r = record_of(&f, &l, "job").expect("the record of job");
    let owners = owner_words(&f, &l, r);
    assert_eq!(owners.len(), 1, "{owners:?}");
    let word = owners[0].1;
    let j = ((word & 0xFFF) - 1) as u32;
    // Entry j is claimed 2^20 - 1 more times by processes that never open "job" (short-lived
    // `fairlock run --name other` jobs whose pid maps to j, say): fast-forwarded here. (The
    // owner word kept 20 bits of the generation when this was found; it keeps 52 now.)
    let at = 192 + u64::from(j) * 32;
    let g = u64_at(&f, at);
    assert_eq!(g & 0xF_FFFF, (word >> 12) & 0xF_FFFF);
    f.write_all_at(&(g + (1 << 20) - 1).to_le_bytes(), at)
        .unwrap();
    // The next process to claim entry j (here: us, every other entry being busy) ...
    let busy = FsOpen::new().read(true).write(true).open(&path).unwrap();
    ofd_lock(&busy, BEACON_BASE, u64::from(j));
    ofd_lock(
        &busy,
        BEACON_BASE + u64::from(j) + 1,
        u64::from(l.processes - j - 1),
    );
    // ... opens "job", whose holder is dead: it must be recovered.
    let job = FairLock::options().name("job").open(&path).unwrap();
    match job.lock_timeout(Duration::from_secs(3)) {
        Ok(g) => assert!(g.owner_died()),
        Err(e) => panic!("the dead holder of job was never recovered: {e}"),
    }
    drop(busy);
}

// ---------------------------------------------------------------------------------------------
// Finding: a named FairMutex<T> loses its value when its name is reclaimed (zeroed by the next
// creation), unlike a FairMutex of a file of its own, which keeps it for good (even across a
// reboot).

#[test]
fn a_named_mutex_keeps_its_value_like_a_file_of_its_own() {
    let dir = TempDir::new("review-mutex-value");
    let path = dir.join("mutexes.lock");
    let open = |key: &str| {
        FairLock::options()
            .name(key)
            .name_capacity(2)
            .open_mutex::<u64>(&path)
    };
    let m = open("balance").unwrap();
    *m.lock().unwrap() = 42;
    drop(m);
    // Other names come and go: the fix keeps every name of a file of named FairMutexes (its
    // value is the user's data), so the two records fill up and the third name is refused.
    let other = open("other-0").unwrap();
    *other.lock().unwrap() += 1;
    drop(other);
    assert!(matches!(
        open("other-1"),
        Err(Error::TooManyNames { capacity: 2, .. })
    ));
    let m = open("balance").unwrap();
    assert_eq!(*m.lock().unwrap(), 42, "the value of \"balance\" was lost");
}

// ---------------------------------------------------------------------------------------------
// Finding: a forked child's handle re-opens its name without the kind check of the first open:
// if the name was reclaimed meanwhile and created again as another kind (here: a semaphore of 2
// permits instead of 1), the child uses it as that kind.

fn fork() -> libc::pid_t {
    // SAFETY: the worker is single-threaded (--test-threads=1); the child only uses the lock,
    // allocates and leaves with `_exit`.
    unsafe { libc::fork() }
}

fn child_exit(code: i32) -> ! {
    // SAFETY: `_exit` never returns.
    unsafe { libc::_exit(code) }
}

fn wait_child(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a valid out-pointer.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    }
}

#[test]
fn a_forked_child_never_uses_a_name_as_another_kind() {
    if role().is_some() {
        let dir = common::env("FL_DIR");
        let path = format!("{dir}/names.lock");
        let go = format!("{dir}/go");
        let open = |key: &str, permits: u32| {
            FairLock::options()
                .name(key)
                .name_capacity(2)
                .open_semaphore(&path, permits)
                .unwrap()
        };
        // A semaphore of one permit: at most one holder.
        let sem = open("job", 1);
        let pid = fork();
        if pid == 0 {
            while !Path::new(&go).exists() {
                std::thread::sleep(Duration::from_millis(1));
            }
            child_exit(match sem.try_acquire() {
                Err(Error::KindMismatch { .. }) => 0,
                Ok(_) => 1,
                Err(Error::WouldBlock { .. }) => 2,
                Err(_) => 3,
            });
        }
        // The parent closes the name; it is reclaimed and created again, with 2 permits, one
        // of which the parent takes.
        drop(sem);
        drop(open("other", 1));
        let two = open("job", 2);
        let _p = two.try_acquire().unwrap();
        std::fs::write(&go, b"").unwrap();
        let code = wait_child(pid);
        assert_eq!(
            code, 0,
            "the child's semaphore of 1 permit (exit 1: it got a permit while another process \
             holds one; 2: refused as busy; 3: another error) — it should be KindMismatch"
        );
        return;
    }
    let dir = TempDir::new("review-fork-kind");
    let mut w = vec![Worker::spawn(
        dir.path(),
        "a_forked_child_never_uses_a_name_as_another_kind",
        "forker",
        "forker",
        &[("FL_DIR", dir.path().display().to_string())],
    )];
    wait_all(&mut w, Duration::from_secs(60));
}

// ---------------------------------------------------------------------------------------------
// Finding: a FairMutex<U> opener re-initialises a stale file of named FairMutex<T> before it
// checks the data area, then refuses it: "every check of the data area happens before anything
// is written, also for a file that is to be re-initialised" (docs/FILE_FORMAT.md) holds for a
// file of one lock only.

#[test]
fn a_mismatched_mutex_refuses_a_stale_file_of_names_without_writing_it() {
    let dir = TempDir::new("review-stale-data");
    let live = dir.join("live");
    let bytes = {
        let m = FairLock::options()
            .name("count")
            .open_mutex::<u64>(&live)
            .unwrap();
        *m.lock().unwrap() = 41;
        std::fs::read(&live).unwrap()
    };
    let mut stale = bytes.clone();
    for x in &mut stale[48..64] {
        *x ^= 0x5a;
    }
    let path = dir.join("stale");
    std::fs::write(&path, &stale).unwrap();
    let r = FairLock::options().name("count").open_mutex::<u32>(&path);
    assert!(matches!(r, Err(Error::DataMismatch { .. })), "{r:?}");
    assert!(
        std::fs::read(&path).unwrap() == stale,
        "the refused file was written (re-initialised) before the data check"
    );
}

// ---------------------------------------------------------------------------------------------
// Finding (debug builds, fuzzing): garbage in the names header's `occupied` makes a creation
// panic with an arithmetic overflow (`(occupied + 1) * 4` in `find_or_create`); everything else
// reading the file uses wrapping arithmetic. Fails under `cargo test` (overflow checks on);
// passes with `--release`.

#[test]
fn garbage_in_the_names_header_never_panics() {
    let dir = TempDir::new("review-garbage-occupied");
    let path = dir.join("names.lock");
    drop(
        FairLock::options()
            .name("first")
            .name_capacity(4)
            .open(&path)
            .unwrap(),
    );
    let f = FsOpen::new().read(true).write(true).open(&path).unwrap();
    f.write_all_at(&u64::MAX.to_le_bytes(), 72).unwrap(); // occupied
    drop(f);
    let p = path.clone();
    let r = std::thread::spawn(move || {
        FairLock::options()
            .name("second")
            .name_capacity(4)
            .open(&p)
            .map(drop)
    })
    .join();
    assert!(r.is_ok(), "opening a name panicked on a garbage header");
}

// ---------------------------------------------------------------------------------------------
// Finding: `name_capacity(n)` above 2^31 wraps (`u32::next_power_of_two` gives 0 in release
// builds, then `.max(2)`): a file of 2 records is created instead of the refusal any other
// out-of-range capacity gets (a panic in debug builds).

#[test]
fn an_impossible_name_capacity_is_refused() {
    let dir = TempDir::new("review-capacity");
    let path = dir.join("names.lock");
    let r = FairLock::options()
        .name("a")
        .name_capacity(u32::MAX)
        .open(&path);
    assert!(
        matches!(r, Err(Error::InvalidOption { .. })),
        "name_capacity(u32::MAX): {:?}, file of {:?} bytes",
        r.map(|_| ()),
        std::fs::metadata(&path).map(|m| m.len())
    );
}
