//! The clock, the shared page the clients of one run stamp, the latency histogram and the
//! formatting of the tables.

use std::fs::OpenOptions;
use std::path::Path;
use std::sync::atomic::AtomicU64;

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process of the machine (the Go
/// peer reads the same clock).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The words of the shared page (a 4 KiB file mapped `MAP_SHARED` by every client of one
/// run; `peers/etcd-mutex/main.go` uses the same layout).
pub mod word {
    /// `CLOCK_MONOTONIC` ns at which the last holder called unlock (0: nobody yet).
    pub const LAST_RELEASE: usize = 0;
    /// The fencing token (create revision) of the last grant.
    pub const LAST_TOKEN: usize = 1;
    /// 1 while somebody holds the lock.
    pub const INSIDE: usize = 2;
    /// Grants that found `INSIDE` set: mutual exclusion broken.
    pub const OVERLAPS: usize = 3;
    /// Grants whose token was not larger than the previous grant's: FIFO broken.
    pub const OUT_OF_ORDER: usize = 4;
    /// Start and end of the measured window (`CLOCK_MONOTONIC` ns), set before the start.
    pub const START: usize = 6;
    pub const END: usize = 7;
}

/// A `MAP_SHARED` mapping of a 4 KiB file, as `AtomicU64` words.
pub struct Shm {
    map: memmap2::MmapMut,
}

impl Shm {
    /// Creates `path`, zeroed.
    pub fn create(path: &Path) -> Shm {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .expect("create the shared page");
        f.set_len(4096).expect("size the shared page");
        Shm::map(&f)
    }

    /// Maps the existing `path`.
    pub fn open(path: &Path) -> Shm {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .expect("open the shared page");
        Shm::map(&f)
    }

    fn map(f: &std::fs::File) -> Shm {
        // SAFETY: the file is 4 KiB, never truncated while mapped, and only ever accessed
        // through atomics by the bench's own processes.
        let map = unsafe { memmap2::MmapMut::map_mut(f) }.expect("map the shared page");
        Shm { map }
    }

    /// Word `i`.
    pub fn at(&self, i: usize) -> &AtomicU64 {
        assert!((i + 1) * 8 <= self.map.len(), "word {i} out of range");
        // SAFETY: in bounds (checked), 8-aligned (the mapping is page-aligned), only ever
        // accessed atomically.
        unsafe { &*self.map.as_ptr().cast::<AtomicU64>().add(i) }
    }
}

/// Sub-buckets per power of two: values are kept within 1/128 (< 0.8 %).
const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS;
const BUCKETS: usize = ((64 - SUB_BITS as usize) + 1) * SUB as usize;

/// A log-linear histogram of nanoseconds, with the exact count and maximum.
#[derive(Clone)]
pub struct Hist {
    counts: Vec<u64>,
    n: u64,
    max: u64,
}

impl Default for Hist {
    fn default() -> Self {
        Hist {
            counts: vec![0; BUCKETS],
            n: 0,
            max: 0,
        }
    }
}

fn bucket(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let e = 63 - v.leading_zeros(); // >= SUB_BITS
    let sub = (v >> (e - SUB_BITS)) & (SUB - 1);
    ((e - SUB_BITS + 1) as u64 * SUB + sub) as usize
}

/// The middle of bucket `b`'s range.
fn value(b: usize) -> u64 {
    let b = b as u64;
    if b < SUB {
        return b;
    }
    let e = b / SUB + SUB_BITS as u64 - 1;
    let sub = b % SUB;
    let width = 1u64 << (e - SUB_BITS as u64);
    ((SUB + sub) << (e - SUB_BITS as u64)) + width / 2
}

impl Hist {
    pub fn add(&mut self, v: u64) {
        self.counts[bucket(v)] += 1;
        self.n += 1;
        self.max = self.max.max(v);
    }

    pub fn merge(&mut self, o: &Hist) {
        for (a, b) in self.counts.iter_mut().zip(&o.counts) {
            *a += b;
        }
        self.n += o.n;
        self.max = self.max.max(o.max);
    }

    /// The `q`-quantile (nearest rank), `None` if empty; the maximum is exact.
    pub fn quantile(&self, q: f64) -> Option<u64> {
        if self.n == 0 {
            return None;
        }
        if q >= 1.0 {
            return Some(self.max);
        }
        let rank = ((q * self.n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(value(b).min(self.max));
            }
        }
        Some(self.max)
    }

    /// One line: `max n b:c b:c ...` (non-empty buckets only).
    pub fn serialize(&self) -> String {
        let mut s = format!("{} {}", self.max, self.n);
        for (b, &c) in self.counts.iter().enumerate() {
            if c != 0 {
                s += &format!(" {b}:{c}");
            }
        }
        s
    }

    pub fn parse(words: &[&str]) -> Hist {
        let mut h = Hist::default();
        let mut it = words.iter();
        h.max = it
            .next()
            .and_then(|w| w.parse().ok())
            .expect("histogram max");
        h.n = it
            .next()
            .and_then(|w| w.parse().ok())
            .expect("histogram count");
        for w in it {
            let (b, c) = w.split_once(':').expect("bucket:count");
            h.counts[b.parse::<usize>().expect("bucket")] = c.parse().expect("count");
        }
        h
    }
}

/// Human-readable nanoseconds.
pub fn ns(x: Option<u64>) -> String {
    let Some(x) = x else {
        return "–".into();
    };
    let x = x as f64;
    if x < 1_000.0 {
        format!("{x:.0} ns")
    } else if x < 1_000_000.0 {
        format!("{:.1} µs", x / 1e3)
    } else if x < 1_000_000_000.0 {
        format!("{:.2} ms", x / 1e6)
    } else {
        format!("{:.2} s", x / 1e9)
    }
}

/// Human-readable rate.
pub fn rate(x: f64) -> String {
    if !x.is_finite() {
        "–".into()
    } else if x >= 1e6 {
        format!("{:.2} M/s", x / 1e6)
    } else if x >= 1e4 {
        format!("{:.1} k/s", x / 1e3)
    } else {
        format!("{x:.0} /s")
    }
}

/// A markdown table, first column left-aligned.
pub fn table(head: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = format!("| {} |\n|", head.join(" | "));
    for i in 0..head.len() {
        s += if i == 0 { "---|" } else { "---:|" };
    }
    s.push('\n');
    for r in rows {
        s += &format!("| {} |\n", r.join(" | "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_round_trip_within_a_percent() {
        for v in [
            0,
            1,
            127,
            128,
            129,
            255,
            256,
            1000,
            123_456,
            9_999_999_999,
            u64::MAX / 3,
        ] {
            let b = bucket(v);
            assert!(b < BUCKETS);
            let m = value(b) as f64;
            assert!(
                (m - v as f64).abs() <= (v as f64) / 100.0 + 1.0,
                "{v} -> {b} -> {m}"
            );
        }
    }
}
