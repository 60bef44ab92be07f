//! The initial contents of a lock file, built in memory and written in one go.

use crate::core::Geometry;
use crate::core::state::lock_word::{COUNTER_BITS, LockWord};
use crate::core::state::slot_word::{State, Word, lap_of};
use crate::core::state::{HEADER_SIZE, SLOT_SIZE, VERSION};

/// The bytes of a freshly initialised lock state — header, participants, slots; not the data
/// area, which the caller keeps or zeroes — with `magic` as its magic: `MAGIC_PENDING`, or
/// `MAGIC_REINIT` when the data is kept (the caller writes the real magic last). `next_ticket` is where tickets continue: 0 for a new file, the
/// old value when a file from a previous boot is re-initialised, so fencing tokens keep rising.
pub fn initial_image(g: Geometry, boot_id: [u64; 2], next_ticket: u64, magic: u64) -> Vec<u8> {
    let mut img = vec![0u8; g.state_size()];
    let put32 = |img: &mut Vec<u8>, off: usize, v: u32| {
        img[off..off + 4].copy_from_slice(&v.to_le_bytes());
    };
    put32(&mut img, 8, VERSION);
    put32(&mut img, 12, HEADER_SIZE as u32);
    put32(&mut img, 24, g.slots);
    put32(&mut img, 28, g.participants);
    put32(&mut img, 32, g.participants_offset as u32);
    put32(&mut img, 36, g.slots_offset as u32);
    put32(&mut img, 40, g.kind.code());
    put32(&mut img, 44, g.kind.permits);
    let put64 = |img: &mut Vec<u8>, off: usize, v: u64| {
        img[off..off + 8].copy_from_slice(&v.to_le_bytes());
    };
    put64(&mut img, 0, magic);
    put64(&mut img, 16, g.file_size as u64);
    put64(&mut img, 48, boot_id[0]);
    put64(&mut img, 56, boot_id[1]);
    // The lock word: free (an exclusive lock takes its first ticket the fast way), or queued
    // for good (a weighted kind); the epoch after it.
    let word = LockWord::initial(next_ticket, g.kind.is_weighted());
    put64(&mut img, 64, word.0);
    put64(&mut img, 72, next_ticket >> COUNTER_BITS);
    put64(&mut img, 128, next_ticket);
    put64(&mut img, 136, g.data_offset as u64);
    put64(&mut img, 144, g.data.size);
    put32(&mut img, 152, g.data.align);
    put64(&mut img, 160, g.data.tag);
    // Each slot is "free for" the first ticket at or after `next_ticket` that maps to it: it
    // shows that ticket's previous lap, state Done. For next_ticket = 0 this is all zeros.
    let shift = g.slot_shift();
    let n = u64::from(g.slots);
    for s in 0..n {
        let t = next_ticket.wrapping_add(s.wrapping_sub(next_ticket) & (n - 1));
        let prev_lap = lap_of(t, shift).wrapping_sub(1);
        let w = Word::new(prev_lap, 0, State::Done, false);
        put64(&mut img, g.slots_offset + s as usize * SLOT_SIZE, w.0);
    }
    img
}
