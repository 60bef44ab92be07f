//! Clock, busy-waiting, a shared mapping of atomics, statistics and table formatting.

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::atomic::AtomicU64;

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every thread and process.
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Busy-spins on the clock until `until` (the critical section and the holder's delays).
#[inline]
pub fn busy_until(until: u64) {
    while now_ns() < until {
        std::hint::spin_loop();
    }
}

/// Waits until `f` is true or `timeout_ns` passes; true if `f`. Polls a few times, then sleeps
/// 20 µs between polls: the harness must not burn a CPU that the locks under test need (two
/// CPUs only).
pub fn wait_for(timeout_ns: u64, mut f: impl FnMut() -> bool) -> bool {
    let until = now_ns().saturating_add(timeout_ns);
    let mut i = 0u32;
    loop {
        if f() {
            return true;
        }
        i = i.wrapping_add(1);
        if i > 16 {
            if now_ns() >= until {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_micros(20));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// A `MAP_SHARED` mapping of a small file, seen as an array of `AtomicU64`: shared between
/// the harness and its worker processes (start gate, crash-trial records, futex words).
pub struct Shm {
    map: memmap2::MmapMut,
}

impl Shm {
    /// Creates (or truncates) `path` with `n` zeroed words and maps it.
    pub fn create(path: &Path, n: usize) -> Shm {
        let _ = std::fs::remove_file(path);
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .expect("shm create");
        f.set_len((n * 8).max(4096) as u64).expect("shm size");
        Self::map(&f)
    }

    /// Maps an existing `path`.
    pub fn open(path: &Path) -> Shm {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .expect("shm open");
        Self::map(&f)
    }

    fn map(f: &std::fs::File) -> Shm {
        // SAFETY: the file is only ever accessed through atomics in this mapping by the
        // harness's own processes; nobody truncates it while mapped.
        let map = unsafe { memmap2::MmapMut::map_mut(f) }.expect("shm map");
        Shm { map }
    }

    /// Word `i`.
    pub fn at(&self, i: usize) -> &AtomicU64 {
        assert!((i + 1) * 8 <= self.map.len(), "shm index {i} out of range");
        // SAFETY: in bounds (checked), 8-aligned (the mapping is page-aligned), and the
        // memory is only accessed atomically.
        unsafe { &*self.map.as_ptr().cast::<AtomicU64>().add(i) }
    }
}

/// `q`-quantile (0..=1) of sorted data.
pub fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Median of unsorted floats.
pub fn median(v: &[f64]) -> f64 {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Human-readable nanoseconds.
pub fn ns(x: f64) -> String {
    if !x.is_finite() {
        "–".into()
    } else if x < 1_000.0 {
        format!("{x:.0} ns")
    } else if x < 1_000_000.0 {
        format!("{:.1} µs", x / 1e3)
    } else {
        format!("{:.2} ms", x / 1e6)
    }
}

/// Human-readable rate.
pub fn rate(x: f64) -> String {
    if !x.is_finite() {
        "–".into()
    } else if x >= 1e6 {
        format!("{:.2} M/s", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} k/s", x / 1e3)
    } else {
        format!("{x:.0} /s")
    }
}

/// A ratio cell.
pub fn ratio(a: f64, b: f64) -> String {
    if !a.is_finite() || !b.is_finite() || b == 0.0 {
        "–".into()
    } else {
        format!("{:.2}×", a / b)
    }
}

/// A markdown table.
pub fn table(head: &[String], rows: &[Vec<String>]) -> String {
    let mut s = String::new();
    s += &format!("| {} |\n", head.join(" | "));
    s += &format!(
        "|{}\n",
        head.iter()
            .enumerate()
            .map(|(i, _)| if i == 0 { "---|" } else { "---:|" })
            .collect::<String>()
    );
    for r in rows {
        s += &format!("| {} |\n", r.join(" | "));
    }
    s
}

/// A ratio matrix: row competitor's `value` divided by each column peer's.
pub fn ratio_table(names: &[&str], values: &[f64], what: &str) -> String {
    let mut head = vec![format!("{what}: row ÷ column")];
    head.extend(names.iter().map(|n| n.to_string()));
    let rows: Vec<Vec<String>> = names
        .iter()
        .zip(values)
        .map(|(n, &v)| {
            let mut r = vec![n.to_string()];
            r.extend(values.iter().map(|&p| ratio(v, p)));
            r
        })
        .collect();
    table(&head, &rows)
}
