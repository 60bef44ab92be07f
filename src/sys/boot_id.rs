//! The kernel's boot id (`/proc/sys/kernel/random/boot_id`), to recognise lock files left by
//! an earlier boot.

/// The boot id written into a file by a process that cannot read its own.
pub const UNKNOWN: [u64; 2] = [0, 0];

/// The boot id as two little-endian u64 halves, or `None` if it cannot be read (no `/proc`
/// in a sandbox or chroot, a seccomp filter, no descriptor left).
pub fn read() -> Option<[u64; 2]> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .and_then(|s| parse(&s))
        .filter(|id| *id != UNKNOWN)
}

/// Whether a file stamped with boot id `file` is from an earlier boot, as seen by a process
/// whose boot id is `ours`: only if both are known and differ. An unknown id on either side
/// says nothing, and re-initialising a file that live processes use would break the lock, so
/// such a file is never taken as stale.
pub fn is_stale(file: [u64; 2], ours: Option<[u64; 2]>) -> bool {
    matches!(ours, Some(ours) if file != UNKNOWN && file != ours)
}

/// Parses a UUID (`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`) into 16 bytes.
pub fn parse(s: &str) -> Option<[u64; 2]> {
    let hex: Vec<u8> = s.trim().bytes().filter(|b| *b != b'-').collect();
    if hex.len() != 32 {
        return None;
    }
    let mut bytes = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        let text = std::str::from_utf8(pair).ok()?;
        bytes[i] = u8::from_str_radix(text, 16).ok()?;
    }
    let lo = u64::from_le_bytes(bytes[..8].try_into().ok()?);
    let hi = u64::from_le_bytes(bytes[8..].try_into().ok()?);
    Some([lo, hi])
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_uuid() {
        let id = super::parse("8c0e2d44-7d3a-4c8b-9f0e-0123456789ab\n").unwrap();
        assert_ne!(id, [0, 0]);
        assert_eq!(super::parse("nonsense"), None);
    }

    #[test]
    #[cfg_attr(miri, ignore = "reads /proc, which Miri isolates")]
    fn reads_this_boot() {
        assert_eq!(super::read(), super::read());
        assert!(super::read().is_some(), "this machine has /proc");
    }

    #[test]
    fn only_two_known_different_ids_make_a_file_stale() {
        use super::{UNKNOWN, is_stale};
        assert!(is_stale([1, 2], Some([3, 4])));
        assert!(!is_stale([1, 2], Some([1, 2])));
        assert!(!is_stale([1, 2], None), "we cannot read ours: never stale");
        assert!(
            !is_stale(UNKNOWN, Some([3, 4])),
            "written by one that could not read its own"
        );
    }
}
