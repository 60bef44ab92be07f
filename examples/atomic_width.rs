//! What one uncontended lock + unlock costs when both are a single compare-and-swap on one
//! word in a shared file mapping, by word width: 64-bit `lock cmpxchg` against 128-bit
//! `lock cmpxchg16b` (x86_64). A measurement for the format-2 design (issue 15): the fast-path
//! word must hold the next ticket, the holder's identity and flags, and 64 bits are tight.
//!
//! ```sh
//! cargo run --release -p fairlock --example atomic_width
//! ```

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use memmap2::MmapRaw;

const N: u64 = 20_000_000;

#[cfg(target_arch = "x86_64")]
/// One `lock cmpxchg16b` (as a 128-bit lock word would use it).
///
/// # Safety
/// `p` must be valid, 16-aligned and only accessed atomically; the CPU must have
/// `cmpxchg16b`.
unsafe fn cas128(p: *mut u128, old: u128, new: u128) -> bool {
    let ok: u8;
    // SAFETY: forwarded from the caller. `rbx` cannot be an asm operand, so the low half of
    // `new` is swapped into it and back.
    unsafe {
        core::arch::asm!(
            "xchg {nl}, rbx",
            "lock cmpxchg16b [{p}]",
            "sete {ok}",
            "mov rbx, {nl}",
            p = in(reg) p,
            nl = inout(reg) new as u64 => _,
            ok = out(reg_byte) ok,
            inout("rax") old as u64 => _,
            inout("rdx") (old >> 64) as u64 => _,
            in("rcx") (new >> 64) as u64,
            options(nostack),
        );
    }
    ok != 0
}

fn main() {
    let f = tempfile();
    let map = MmapRaw::map_raw(&f).expect("map");
    let base = map.as_mut_ptr();
    // SAFETY: page-aligned mapping of 4096 bytes, used only atomically below.
    let w64 = unsafe { &*base.cast::<AtomicU64>() };
    let mut best64 = f64::MAX;
    let mut best128 = f64::MAX;
    for round in 0..5u64 {
        let t = Instant::now();
        for i in round * N..(round + 1) * N {
            let free = i << 8;
            let held = free | 0x5a;
            while w64
                .compare_exchange(free, held, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
            {}
            black_box(());
            while w64
                .compare_exchange(held, free + 256, Ordering::Release, Ordering::Relaxed)
                .is_err()
            {}
        }
        best64 = best64.min(t.elapsed().as_nanos() as f64 / N as f64);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("cmpxchg16b") {
            // SAFETY: offset 64 is 16-aligned inside the mapping.
            let p = unsafe { base.add(64).cast::<u128>() };
            let t = Instant::now();
            for i in u128::from(round * N)..u128::from((round + 1) * N) {
                let free = i << 64;
                let held = free | 0x5a;
                // SAFETY: `p` is valid, aligned and only accessed through cas128.
                unsafe {
                    while !cas128(p, free, held) {}
                    black_box(());
                    while !cas128(p, held, free + (1 << 64)) {}
                }
            }
            best128 = best128.min(t.elapsed().as_nanos() as f64 / N as f64);
        }
    }
    println!(
        "uncontended lock + unlock as two CAS on one word of a shared file mapping (best of 5 x {N}):"
    );
    println!("  64-bit  lock cmpxchg     {best64:.1} ns");
    println!(
        "  128-bit lock cmpxchg16b  {best128:.1} ns  ({:.2}x)",
        best128 / best64
    );
}

fn tempfile() -> std::fs::File {
    let path = std::env::temp_dir().join(format!("atomic-width-{}", std::process::id()));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .expect("open");
    f.set_len(4096).expect("size");
    let _ = std::fs::remove_file(&path);
    f
}
