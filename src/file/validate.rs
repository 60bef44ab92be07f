//! Header validation over a copy of the file's first bytes: pure, total, never panics.

use crate::core::Geometry;
use crate::core::state::{
    DataShape, HEADER_SIZE, MAGIC, MAGIC_PENDING, MAGIC_REINIT, RecordKind, VERSION,
};
use crate::names::layout::{KIND_NAMES, NamesGeometry};

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
    /// A valid file whose lock state a process was rewriting (after a reboot) when it died:
    /// to be initialised again with this geometry, keeping the data area.
    Reinit {
        /// Its layout.
        geometry: Geometry,
        /// Its next ticket.
        next_ticket: u64,
    },
    /// A valid file of named locks (of this boot or another, as `Valid`).
    Names {
        /// Its layout.
        geometry: NamesGeometry,
        /// The boot id it was initialised in.
        boot_id: [u64; 2],
    },
    /// A file of named locks whose re-initialisation after a reboot was interrupted: to be
    /// done again (keeping names, tickets and data).
    NamesReinit {
        /// Its layout.
        geometry: NamesGeometry,
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
    if magic != MAGIC && magic != MAGIC_REINIT {
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
    if u32_at(head, 40) == KIND_NAMES {
        return validate_names(head, len, magic);
    }
    let slots = u32_at(head, 24);
    let participants = u32_at(head, 28);
    if Geometry::new(slots, participants).is_none() {
        return Verdict::Corrupt(format!(
            "bad geometry: {slots} slots (must be a power of two), {participants} participants"
        ));
    }
    let data = DataShape {
        size: u64_at(head, 144),
        align: u32_at(head, 152),
        tag: u64_at(head, 160),
    };
    let Some(geometry) = Geometry::with_data(slots, participants, data) else {
        return Verdict::Corrupt(format!(
            "bad data area: {} bytes, alignment {}, tag {:#x}",
            data.size, data.align, data.tag
        ));
    };
    let (code, permits) = (u32_at(head, 40), u32_at(head, 44));
    let Some(geometry) = RecordKind::decode(code, permits).and_then(|k| geometry.of_kind(k)) else {
        return Verdict::Corrupt(format!(
            "bad lock kind: code {code}, {permits} permits, {slots} slots"
        ));
    };
    let file_size = u64_at(head, 16);
    if u32_at(head, 32) as usize != geometry.participants_offset
        || u32_at(head, 36) as usize != geometry.slots_offset
        || u64_at(head, 136) != geometry.data_offset as u64
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
    if magic == MAGIC_REINIT {
        return Verdict::Reinit {
            geometry,
            next_ticket: next_ticket_at(head),
        };
    }
    Verdict::Valid {
        geometry,
        boot_id: [u64_at(head, 48), u64_at(head, 56)],
        next_ticket: next_ticket_at(head),
    }
}

/// The rest of [`validate_header`] for a file of named locks (magic, version and header size
/// already checked).
fn validate_names(head: &[u8], len: u64, magic: u64) -> Verdict {
    let slots = u32_at(head, 24);
    let participants = u32_at(head, 28);
    let data = DataShape {
        size: u64_at(head, 144),
        align: u32_at(head, 152),
        tag: u64_at(head, 160),
    };
    let Some(record) = Geometry::with_data(slots, participants, data) else {
        return Verdict::Corrupt(format!(
            "bad geometry of named locks: {slots} slots, {participants} participants, data of {} bytes aligned {}",
            data.size, data.align
        ));
    };
    let (records, processes) = (u32_at(head, 36), u32_at(head, 44));
    let Some(geometry) = NamesGeometry::new(record, records, processes) else {
        return Verdict::Corrupt(format!(
            "bad table of named locks: {records} records (must be a power of two, 2..=2^20), {processes} process entries (1..=4094)"
        ));
    };
    if u32_at(head, 32) as usize != geometry.record_size
        || u64_at(head, 88) != geometry.records_offset as u64
        || u64_at(head, 96) != geometry.image_offset as u64
        || u64_at(head, 16) != geometry.file_size as u64
    {
        return Verdict::Corrupt("offsets or size do not match the geometry".into());
    }
    let file_size = geometry.file_size as u64;
    if len != file_size {
        return Verdict::Corrupt(format!("{len} bytes, expected {file_size}"));
    }
    if magic == MAGIC_REINIT {
        return Verdict::NamesReinit { geometry };
    }
    Verdict::Names {
        geometry,
        boot_id: [u64_at(head, 48), u64_at(head, 56)],
    }
}

/// The next ticket a header's lock word (offset 64) and epoch (offset 72) name.
fn next_ticket_at(head: &[u8]) -> u64 {
    crate::core::state::lock_word::full_ticket(
        crate::core::state::lock_word::LockWord(u64_at(head, 64)),
        u64_at(head, 72),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::image::initial_image;

    fn image() -> (Vec<u8>, Geometry) {
        let g = Geometry::new(8, 4).unwrap();
        let mut img = initial_image(g, [1, 2], 0, MAGIC_PENDING);
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
    fn kinds_validate_and_bad_kinds_are_corrupt() {
        use crate::core::state::RecordKind;
        let g = Geometry::new(8, 4).unwrap();
        for kind in [
            RecordKind::RWLOCK,
            RecordKind::semaphore(3),
            RecordKind::bounded(5),
        ] {
            let gk = g.of_kind(kind).unwrap();
            let mut img = initial_image(gk, [1, 2], 0, MAGIC_PENDING);
            img[..8].copy_from_slice(&MAGIC.to_le_bytes());
            match validate_header(&img[..HEADER_SIZE], img.len() as u64) {
                Verdict::Valid { geometry, .. } => assert_eq!(geometry.kind, kind),
                v => panic!("{v:?}"),
            }
            // (An exclusive lock's "permits" are its bypass bound, at most 511.)
            for (code, permits) in [(3u32, 0u32), (2, 0), (2, 5), (1, 2), (0, 512), (0, 1 << 20)] {
                let mut bad = img.clone();
                bad[40..44].copy_from_slice(&code.to_le_bytes());
                bad[44..48].copy_from_slice(&permits.to_le_bytes());
                assert!(
                    matches!(
                        validate_header(&bad[..HEADER_SIZE], bad.len() as u64),
                        Verdict::Corrupt(_)
                    ),
                    "kind {code}, {permits} permits"
                );
            }
        }
    }

    #[test]
    fn data_area_validates_and_bad_shapes_are_corrupt() {
        let shape = DataShape {
            size: 24,
            align: 8,
            tag: DataShape::tag_of("[u64; 3]"),
        };
        let g = Geometry::with_data(8, 4, shape).unwrap();
        assert_eq!(g.data_offset % 64, 0);
        assert!(g.data_offset >= g.state_size());
        assert_eq!(g.file_size, g.data_offset + 24);
        let mut img = initial_image(g, [1, 2], 0, MAGIC_PENDING);
        img[..8].copy_from_slice(&MAGIC.to_le_bytes());
        img.resize(g.file_size, 0);
        assert!(matches!(
            validate_header(&img[..HEADER_SIZE], img.len() as u64),
            Verdict::Valid { geometry, .. } if geometry == g
        ));
        // A non-power-of-two alignment, a zero tag, a moved offset: corrupt, not valid.
        for (off, bytes) in [
            (152usize, 3u64.to_le_bytes()[..4].to_vec()),
            (160, 0u64.to_le_bytes().to_vec()),
            (136, (g.data_offset as u64 + 64).to_le_bytes().to_vec()),
        ] {
            let mut bad = img.clone();
            bad[off..off + bytes.len()].copy_from_slice(&bytes);
            assert!(
                matches!(
                    validate_header(&bad[..HEADER_SIZE], bad.len() as u64),
                    Verdict::Corrupt(_)
                ),
                "field at {off}"
            );
        }
    }

    #[test]
    fn foreign_newer_and_pending() {
        assert_eq!(
            validate_header(b"hello world, not a lock", 23),
            Verdict::Foreign
        );
        let (mut img, _) = image();
        for other in [1u32, VERSION + 1] {
            img[8..12].copy_from_slice(&other.to_le_bytes());
            assert!(matches!(
                validate_header(&img[..HEADER_SIZE], img.len() as u64),
                Verdict::Incompatible(_)
            ));
        }
        img[..8].copy_from_slice(&MAGIC_PENDING.to_le_bytes());
        assert_eq!(
            validate_header(&img[..HEADER_SIZE], img.len() as u64),
            Verdict::Pending
        );
    }
}
