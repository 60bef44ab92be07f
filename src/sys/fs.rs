//! What filesystem a file lives on (`fstatfs(2)`), to refuse the virtual ones.
//!
//! A lock file must be a regular file on a filesystem that stores what is written to it:
//! procfs, sysfs and their kind show "regular files" (often of length 0, like `/proc/version`)
//! whose writes mean something else entirely — as root, initialising one could change a
//! kernel setting. tmpfs (`/dev/shm`, `/run`, `/tmp` on many systems) and ramfs are real
//! filesystems in memory and are fine.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// The virtual filesystems a lock file is refused on, by `f_type` (from `linux/magic.h`).
const VIRTUAL: &[(u64, &str)] = &[
    (0x9fa0, "procfs"),
    (0x6265_6572, "sysfs"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0x0027_e0eb, "cgroupfs"),
    (0x6367_7270, "cgroup2fs"),
    (0x6165_676c, "pstore"),
    (0xde5e_81e4, "efivarfs"),
    (0xcafe_4a11, "bpffs"),
    (0x6265_6570, "configfs"),
    (0x6573_5543, "fusectl"),
    (0xf97c_ff8c, "selinuxfs"),
    (0x4341_5d53, "smackfs"),
    (0x1cd1, "devpts"),
    (0x4249_4e4d, "binfmt_misc"),
    (0x6e73_6673, "nsfs"),
    (0x9584_58f6, "hugetlbfs"),
    (0x0187, "autofs"),
    (0x1980_0202, "mqueue"),
    (0x6759_6969, "rpc_pipefs"),
    (0x6e66_7364, "nfsd"),
];

/// The name of the virtual filesystem `fd` lives on, or `None` for a real one.
pub fn virtual_filesystem(fd: BorrowedFd<'_>) -> io::Result<Option<&'static str>> {
    // SAFETY: a zeroed statfs is a valid buffer for fstatfs to fill.
    let mut sfs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open for the duration of the borrow; `sfs` is valid for writing.
    if unsafe { libc::fstatfs(fd.as_raw_fd(), &mut sfs) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let kind = sfs.f_type as u64 & 0xFFFF_FFFF;
    Ok(VIRTUAL
        .iter()
        .find(|(m, _)| *m == kind)
        .map(|(_, name)| *name))
}
