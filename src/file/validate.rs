//! Header validation over a copy of the file's first bytes: pure, total, never panics.

use crate::core::Geometry;
use crate::core::layout::{HEADER_SIZE, MAGIC, MAGIC_PENDING, VERSION};

/// What the first bytes of a file say about it.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Empty: ours to initialise.
    Empty,
    /// Left half-initialised by a creator that died (pending magic): ours to initialise again.
    Pending,
    /// A valid fairlock file of this format.
    Valid {
        /// Its layout.
        geometry: Geometry,
        /// The boot id it was initialised in.
        boot_id: [u64; 2],
        /// Its next ticket (kept when a stale file is re-initialised).
        next_ticket: u64,
    },
    /// Not a fairlock file at all: never to be written.
    Foreign,
    /// A fairlock file we must not use, and why.
    Incompatible(String),
    /// A fairlock file whose header is inconsistent, and why.
    Corrupt(String),
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// Judges a file of `len` bytes whose first bytes are `head` (up to [`HEADER_SIZE`] of them).
pub fn validate_header(head: &[u8], len: u64) -> Verdict {
    if len == 0 {
        return Verdict::Empty;
    }
    if head.len() < 8 {
        return Verdict::Foreign;
    }
    let magic = u64_at(head, 0);
    if magic == MAGIC_PENDING {
        return Verdict::Pending;
    }
    if magic != MAGIC {
        return Verdict::Foreign;
    }
    if head.len() < 16 {
        return Verdict::Corrupt(format!(
            "truncated: {len} bytes, header needs {HEADER_SIZE}"
        ));
    }
    let version = u32_at(head, 8);
    if version != VERSION {
        return Verdict::Incompatible(format!(
            "format version {version}, this fairlock reads version {VERSION}"
        ));
    }
    if head.len() < HEADER_SIZE {
        return Verdict::Corrupt(format!(
            "truncated: {len} bytes, header needs {HEADER_SIZE}"
        ));
    }
    let header_size = u32_at(head, 12);
    if header_size as usize != HEADER_SIZE {
        return Verdict::Corrupt(format!("header size {header_size}, expected {HEADER_SIZE}"));
    }
    let slots = u32_at(head, 24);
    let participants = u32_at(head, 28);
    let Some(geometry) = Geometry::new(slots, participants) else {
        return Verdict::Corrupt(format!(
            "bad geometry: {slots} slots (must be a power of two), {participants} participants"
        ));
    };
    let file_size = u64_at(head, 16);
    if u32_at(head, 32) as usize != geometry.participants_offset
        || u32_at(head, 36) as usize != geometry.slots_offset
        || file_size != geometry.file_size as u64
    {
        return Verdict::Corrupt("offsets or size do not match the geometry".into());
    }
    if len < file_size {
        return Verdict::Corrupt(format!("truncated: {len} bytes of {file_size}"));
    }
    if len > file_size {
        return Verdict::Corrupt(format!("{len} bytes, expected {file_size}"));
    }
    Verdict::Valid {
        geometry,
        boot_id: [u64_at(head, 48), u64_at(head, 56)],
        next_ticket: u64_at(head, 64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::image::initial_image;

    fn image() -> (Vec<u8>, Geometry) {
        let g = Geometry::new(8, 4).unwrap();
        let mut img = initial_image(g, [1, 2], 0);
        img[..8].copy_from_slice(&MAGIC.to_le_bytes());
        (img, g)
    }

    #[test]
    fn valid_image_validates() {
        let (img, g) = image();
        assert_eq!(
            validate_header(&img[..HEADER_SIZE], img.len() as u64),
            Verdict::Valid {
                geometry: g,
                boot_id: [1, 2],
                next_ticket: 0
            }
        );
    }

    #[test]
    fn every_prefix_and_size_is_judged_without_panic() {
        let (img, _) = image();
        for cut in 0..HEADER_SIZE {
            let v = validate_header(&img[..cut], cut as u64);
            assert!(
                !matches!(v, Verdict::Valid { .. }),
                "prefix {cut} judged valid"
            );
        }
        for len in [1u64, 100, img.len() as u64 - 1, img.len() as u64 + 1] {
            assert!(!matches!(
                validate_header(&img[..HEADER_SIZE], len),
                Verdict::Valid { .. }
            ));
        }
    }

    #[test]
    fn foreign_newer_and_pending() {
        assert_eq!(
            validate_header(b"hello world, not a lock", 23),
            Verdict::Foreign
        );
        let (mut img, _) = image();
        img[8..12].copy_from_slice(&2u32.to_le_bytes());
        assert!(matches!(
            validate_header(&img[..HEADER_SIZE], img.len() as u64),
            Verdict::Incompatible(_)
        ));
        img[..8].copy_from_slice(&MAGIC_PENDING.to_le_bytes());
        assert_eq!(
            validate_header(&img[..HEADER_SIZE], img.len() as u64),
            Verdict::Pending
        );
    }
}
