//! The kernel's boot id (`/proc/sys/kernel/random/boot_id`), to recognise lock files left by
//! an earlier boot.

/// The boot id as two little-endian u64 halves, or zeros if it cannot be read (then files are
/// never considered stale).
pub fn read() -> [u64; 2] {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .and_then(|s| parse(&s))
        .unwrap_or([0, 0])
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
    }
}
