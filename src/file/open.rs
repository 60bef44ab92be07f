//! Opening a lock file: create it race-free, initialise it under an exclusive file lock,
//! refuse anything that is not ours without writing to it, re-initialise files from an
//! earlier boot, then map it.

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::core::Geometry;
use crate::core::state::{DataShape, HEADER_SIZE, MAGIC, MAGIC_PENDING, MAGIC_REINIT, RecordKind};
use crate::error::{Error, Result};
use crate::file::image::initial_image;
use crate::file::mapping::Mapping;
use crate::file::readonly::ReadOnlyView;
use crate::file::validate::{Verdict, validate_header};
use crate::sys::{boot_id, fs, ofd};

/// How to open or create a lock file.
#[derive(Clone, Copy, Debug)]
pub struct CreateOptions {
    /// Create the file if it does not exist.
    pub create: bool,
    /// Permission bits for a created file (before the umask).
    pub mode: u32,
    /// Slots of a new file.
    pub slots: u32,
    /// Participant entries of a new file.
    pub participants: u32,
    /// How long to wait for the initialisation lock (`None`: as long as it takes).
    pub init_wait: Option<Duration>,
    /// The data area of a new file (`DataShape::NONE` for a plain lock).
    pub data: DataShape,
    /// For a `FairMutex<T>`, `T`'s name: an existing file must then have exactly `data`, or
    /// it is refused before anything is written. Empty for a plain lock (which ignores the
    /// data area of any file).
    pub data_type: &'static str,
    /// The kind of lock the opener wants: a new file is created with it, an existing one of
    /// another kind (or, for a semaphore, another number of permits) is refused with
    /// [`Error::KindMismatch`] before anything is written.
    pub kind: RecordKind,
    /// Records of a new file of named locks (rounded up to a power of two); unused for a
    /// file of one lock.
    pub names: u32,
}

/// An open, validated, mapped lock file.
pub struct Opened {
    /// The file; its open file description holds our beacon.
    pub file: File,
    /// The mapping.
    pub mapping: Mapping,
    /// Device and inode, to share one mapping per file within a process.
    pub id: (u64, u64),
}

fn open_error(path: &Path, e: io::Error, for_writing: bool, create: bool) -> Error {
    // Refused for writing: the file exists and is not writable for us, or (creating) its
    // directory is not.
    let exists = std::fs::symlink_metadata(path).is_ok();
    let no_write = for_writing && (exists || create);
    match e.raw_os_error() {
        Some(libc::ELOOP) => Error::InvalidPath {
            path: path.to_path_buf(),
            what: "is a symbolic link (fairlock does not follow links)",
        },
        Some(libc::EISDIR) => Error::InvalidPath {
            path: path.to_path_buf(),
            what: "is a directory",
        },
        Some(libc::EACCES | libc::EPERM | libc::EROFS) if no_write => Error::NoWriteAccess {
            path: path.to_path_buf(),
            in_directory: !exists,
            source: e,
        },
        _ => Error::io(path, "open", e),
    }
}

/// `O_NOFOLLOW`, except for exactly `/proc/self/fd/N` or `/proc/thread-self/fd/N` (N digits,
/// nothing after): that "link" names a file this process has open (a lock held for a
/// descriptor, `fd_form.rs`, which then checks it is the descriptor's file), and following it
/// reaches exactly that file. Any longer path under it (`/proc/self/fd/DIRFD/name`) is an
/// ordinary path whose last component must not be a link.
fn nofollow(path: &Path) -> libc::c_int {
    let magic = path.to_str().is_some_and(|p| {
        ["/proc/self/fd/", "/proc/thread-self/fd/"]
            .iter()
            .any(|prefix| {
                p.strip_prefix(prefix)
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            })
    });
    if magic { 0 } else { libc::O_NOFOLLOW }
}

/// Opens the file for the lock (read-write), or for inspection (`read_only`).
pub(crate) fn open_file(path: &Path, o: &CreateOptions, read_only: bool) -> Result<File> {
    let mut oo = OpenOptions::new();
    oo.read(true)
        .write(!read_only)
        .create(o.create && !read_only)
        .mode(o.mode)
        // O_CLOEXEC: an exec'd program must not keep our beacon alive. O_NOFOLLOW: a link
        // planted in a shared directory must not redirect us. O_NOCTTY, O_NONBLOCK: opening a
        // terminal or a FIFO named by mistake neither adopts it nor blocks (for a regular
        // file, which is all we go on with, neither changes anything).
        .custom_flags(nofollow(path) | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK);
    let file = oo
        .open(path)
        .map_err(|e| open_error(path, e, !read_only, o.create))?;
    let meta = file.metadata().map_err(|e| Error::io(path, "stat", e))?;
    if !meta.file_type().is_file() {
        return Err(Error::InvalidPath {
            path: path.to_path_buf(),
            what: "is not a regular file",
        });
    }
    match fs::virtual_filesystem(file.as_fd()) {
        Ok(None) => Ok(file),
        Ok(Some(kind)) => Err(Error::InvalidPath {
            path: path.to_path_buf(),
            what: virtual_fs_message(kind),
        }),
        Err(e) => Err(Error::io(path, "statfs", e)),
    }
}

/// The message for a file on the virtual filesystem `kind`.
fn virtual_fs_message(kind: &str) -> &'static str {
    match kind {
        "procfs" => "is on procfs, a virtual filesystem (not a place for a lock file)",
        "sysfs" => "is on sysfs, a virtual filesystem (not a place for a lock file)",
        _ => {
            "is on a virtual filesystem (procfs, sysfs, cgroupfs and the like: not a place for a lock file)"
        }
    }
}

pub(crate) fn read_verdict(file: &File, path: &Path) -> Result<Verdict> {
    let len = file
        .metadata()
        .map_err(|e| Error::io(path, "stat", e))?
        .len();
    let want = HEADER_SIZE.min(len as usize);
    let mut head = vec![0u8; want];
    let mut got = 0;
    while got < want {
        match file.read_at(&mut head[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(path, "read header", e)),
        }
    }
    head.truncate(got);
    Ok(validate_header(&head, len))
}

fn judge(path: &Path, v: Verdict) -> Result<Geometry> {
    match v {
        Verdict::Valid { geometry, .. } => Ok(geometry),
        v => Err(judge_refusal(path, v)),
    }
}

/// The error for a verdict that is not a usable file of one lock.
pub(crate) fn judge_refusal(path: &Path, v: Verdict) -> Error {
    match v {
        Verdict::Foreign => Error::NotALockFile {
            path: path.to_path_buf(),
        },
        Verdict::Incompatible(what) => Error::incompatible(path, what),
        Verdict::Corrupt(what) => Error::corrupt(path, what),
        Verdict::Names { .. } | Verdict::NamesReinit { .. } => Error::KindMismatch {
            path: path.to_path_buf(),
            found: "file of named locks".into(),
            wanted: "lock without a name (open it with a name)".into(),
        },
        Verdict::Valid { .. } | Verdict::Empty | Verdict::Pending | Verdict::Reinit { .. } => {
            Error::corrupt(path, "not initialised (read-only open)")
        }
    }
}

/// What initialisation does with the data area of a `FairMutex<T>` file.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Data {
    /// Zero it: a new file, or one its creator died initialising (its data was never valid).
    Zero,
    /// Keep it: a valid file from an earlier boot. Its lock state is stale (everyone who
    /// used it died with that boot), its data is what they left — as a file's contents would
    /// be.
    Keep,
}

/// Writes a fresh lock state: everything with the pending magic first, then the real magic.
fn initialise(
    file: &File,
    path: &Path,
    g: Geometry,
    boot: Option<[u64; 2]>,
    next_ticket: u64,
    data: Data,
) -> Result<()> {
    let magic = match data {
        Data::Zero => MAGIC_PENDING,
        Data::Keep => MAGIC_REINIT,
    };
    let img = initial_image(g, boot.unwrap_or(boot_id::UNKNOWN), next_ticket, magic);
    file.write_all_at(&img, 0)
        .map_err(|e| Error::io(path, "initialise", e))?;
    if data == Data::Zero && g.data.size > 0 {
        // Shrinking to the state's end and growing again zeroes the data area without
        // writing it (a sparse, zero-filled tail), whatever a dead creator left there.
        file.set_len(g.state_size() as u64)
            .map_err(|e| Error::io(path, "initialise (set length)", e))?;
    }
    file.set_len(g.file_size as u64)
        .map_err(|e| Error::io(path, "initialise (set length)", e))?;
    file.write_all_at(&MAGIC.to_le_bytes(), 0)
        .map_err(|e| Error::io(path, "initialise (magic)", e))?;
    Ok(())
}

/// Opens (creating if asked) and maps the lock file at `path`.
pub fn open_lock_file(path: &Path, o: &CreateOptions) -> Result<Opened> {
    let file = open_file(path, o, false)?;
    let boot = boot_id::read();
    // Fast path, no file lock: a valid file from this boot is used as it is.
    let geometry = match read_verdict(&file, path)? {
        Verdict::Valid {
            geometry, boot_id, ..
        } if !boot_id::is_stale(boot_id, boot) => {
            check_data(path, o, geometry)?;
            geometry
        }
        // Refused without taking the lock: these are never written.
        v @ (Verdict::Foreign
        | Verdict::Incompatible(_)
        | Verdict::Names { .. }
        | Verdict::NamesReinit { .. }) => {
            return Err(judge(path, v).unwrap_err());
        }
        _ => initialise_locked(&file, path, o, boot)?,
    };
    let mapping = Mapping::new(&file, geometry).map_err(|e| Error::io(path, "mmap", e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, "stat", e))?;
    Ok(Opened {
        file,
        mapping,
        id: (meta.dev(), meta.ino()),
    })
}

/// Whether any participant entry of the file is claimed by a live process (its beacon held).
fn participants_alive(file: &File, path: &Path, g: Geometry) -> Result<bool> {
    ofd::any_held(file.as_fd(), 0, u64::from(g.participants))
        .map_err(|e| Error::io(path, "probe beacons", e))
}

/// For a `FairMutex` opener (`o.data_type` set): `Ok` only if the file's data area is exactly
/// the one asked for. Called on every valid file before anything is written to it.
fn check_data(path: &Path, o: &CreateOptions, g: Geometry) -> Result<()> {
    if g.kind != o.kind {
        return Err(Error::KindMismatch {
            path: path.to_path_buf(),
            found: g.kind.describe(),
            wanted: o.kind.describe(),
        });
    }
    if o.data_type.is_empty() || g.data == o.data {
        Ok(())
    } else {
        Err(data_mismatch(path, o, g.data))
    }
}

/// The refusal of a file whose data area is `found` for a `FairMutex` of `o.data_type`.
pub(crate) fn data_mismatch(path: &Path, o: &CreateOptions, found: DataShape) -> Error {
    let want = o.data;
    let what = if found == DataShape::NONE {
        "the file has no data area (it was created by FairLock, FairRLock or `fairlock run`)"
            .to_string()
    } else {
        format!(
            "the file holds {} bytes (alignment {}, schema tag {:#018x}), {} needs {} bytes (alignment {}, schema tag {:#018x})",
            found.size, found.align, found.tag, o.data_type, want.size, want.align, want.tag
        )
    };
    Error::DataMismatch {
        path: path.to_path_buf(),
        wanted: o.data_type,
        what,
    }
}

/// Takes the exclusive `flock` that initialisation happens under, waiting at most `wait`
/// (`None`: as long as it takes). Another fairlock holds it for the milliseconds an
/// initialisation takes; a foreign holder — `flock(1)` on the same, still empty, file — may
/// hold it for as long as it likes, hence the limit (`fairlock run -n` / `-w`).
pub(crate) fn lock_for_initialisation(
    file: &File,
    path: &Path,
    wait: Option<Duration>,
) -> Result<()> {
    let Some(wait) = wait else {
        return file
            .lock()
            .map_err(|e| Error::io(path, "lock for initialisation", e));
    };
    let deadline = Instant::now() + wait;
    let mut nap = Duration::from_micros(200);
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(e)) => {
                return Err(Error::io(path, "lock for initialisation", e));
            }
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(Error::InitLocked {
                path: path.to_path_buf(),
            });
        }
        std::thread::sleep(nap.min(deadline - now));
        nap = (nap * 2).min(Duration::from_millis(10));
    }
}

/// Under an exclusive `flock` (std's `File::lock`, which replaces the unmaintained `fs2`),
/// decide again and initialise if the file is empty, pending, or from another boot.
fn initialise_locked(
    file: &File,
    path: &Path,
    o: &CreateOptions,
    boot: Option<[u64; 2]>,
) -> Result<Geometry> {
    lock_for_initialisation(file, path, o.init_wait)?;
    let result = (|| match read_verdict(file, path)? {
        Verdict::Empty | Verdict::Pending => {
            let g = Geometry::with_data(o.slots, o.participants, o.data).ok_or_else(|| {
                Error::InvalidOption {
                    what: format!(
                        "{} slots / {} participants: slots must be a power of two in 2..=2^20, participants in 1..=4096",
                        o.slots, o.participants
                    ),
                }
            })?;
            let g = g.of_kind(o.kind).ok_or_else(|| Error::InvalidOption {
                what: format!(
                    "a {} in a file of {} slots: permits must be 1..={}, with at least twice as many slots",
                    o.kind.describe(),
                    o.slots,
                    crate::core::state::MAX_PERMITS
                ),
            })?;
            initialise(file, path, g, boot, 0, Data::Zero)?;
            Ok(g)
        }
        Verdict::Valid {
            geometry,
            boot_id,
            next_ticket,
        } => {
            check_data(path, o, geometry)?;
            // A file from an earlier boot has no live participant: everyone who used it died
            // with that boot. A held beacon means a live process uses it anyway — one that
            // could not read its boot id and so took the file as current —
            // and rewriting the lock state under it would break the lock.
            if boot_id::is_stale(boot_id, boot) && !participants_alive(file, path, geometry)? {
                // Everyone who used it died with the previous boot. Keep the tickets going
                // so fencing tokens never repeat.
                initialise(file, path, geometry, boot, next_ticket, Data::Keep)?;
            }
            Ok(geometry)
        }
        Verdict::Reinit {
            geometry,
            next_ticket,
        } => {
            check_data(path, o, geometry)?;
            initialise(file, path, geometry, boot, next_ticket, Data::Keep)?;
            Ok(geometry)
        }
        v => judge(path, v),
    })();
    let _ = file.unlock();
    result
}

/// Opens an existing lock file read-only, for inspection. Never writes, never locks.
pub fn open_read_only(path: &Path) -> Result<ReadOnlyView> {
    let o = CreateOptions {
        create: false,
        mode: 0,
        slots: 0,
        participants: 0,
        init_wait: Some(Duration::ZERO),
        data: DataShape::NONE,
        data_type: "",
        kind: RecordKind::EXCLUSIVE,
        names: 0,
    };
    let file = open_file(path, &o, true)?;
    match read_verdict(&file, path)? {
        Verdict::Names { geometry, .. } | Verdict::NamesReinit { geometry } => {
            ReadOnlyView::names(file, geometry).map_err(|e| Error::io(path, "mmap", e))
        }
        v => {
            let geometry = judge(path, v)?;
            ReadOnlyView::new(file, geometry).map_err(|e| Error::io(path, "mmap", e))
        }
    }
}
