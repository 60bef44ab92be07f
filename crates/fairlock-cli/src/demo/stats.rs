//! The demo's statistics: overtakes, wait percentiles, shares.

/// One grant, as a worker saw it.
#[derive(Clone, Copy, Debug)]
pub struct Grant {
    /// Index of the worker.
    pub worker: usize,
    /// CLOCK_MONOTONIC ns just before the lock call.
    pub req: u64,
    /// CLOCK_MONOTONIC ns just after it returned.
    pub grant: u64,
    /// The fencing token (0 for flock).
    pub token: u64,
    /// The guard's `owner_died()`.
    pub died: bool,
}

/// For each grant (in the given order): how many requests made after it were granted before it.
pub fn overtakes(grants: &[Grant]) -> Vec<usize> {
    let n = grants.len();
    let mut by_req: Vec<usize> = (0..n).collect();
    by_req.sort_by_key(|&i| (grants[i].req, grants[i].grant));
    let mut by_grant: Vec<usize> = (0..n).collect();
    by_grant.sort_by_key(|&i| (grants[i].grant, grants[i].req));
    let mut rank = vec![0; n];
    for (r, &i) in by_grant.iter().enumerate() {
        rank[i] = r;
    }
    // Fenwick tree over grant ranks of the requests seen so far (latest first).
    let mut tree = vec![0usize; n + 1];
    let mut result = vec![0; n];
    for &i in by_req.iter().rev() {
        let mut r = rank[i];
        let mut count = 0;
        while r > 0 {
            count += tree[r];
            r &= r - 1;
        }
        result[i] = count;
        let mut r = rank[i] + 1;
        while r <= n {
            tree[r] += 1;
            r += r & r.wrapping_neg();
        }
    }
    result
}

pub fn fmt_ns(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.2}s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.1}ms", ns as f64 / 1e6)
    } else {
        format!("{:.0}us", ns as f64 / 1e3)
    }
}

/// One table row of step 2, and a sentence for the summary (`label`: the lock's, as
/// "fairlock" or "flock(2)").
pub fn stats(
    label: &str,
    grants: &[Grant],
    workers: usize,
    all_present: u64,
    end: u64,
) -> (String, String) {
    if grants.is_empty() {
        return (
            format!("{:<9} no grants", label),
            format!("{}: no grants", label),
        );
    }
    let ov = overtakes(grants);
    let late = ov.iter().filter(|o| **o > 0).count();
    let max_ov = ov.iter().max().copied().unwrap_or(0);
    let mut waits: Vec<u64> = grants
        .iter()
        .map(|g| g.grant.saturating_sub(g.req))
        .collect();
    waits.sort_unstable();
    let pct = |p: f64| waits[((waits.len() - 1) as f64 * p).round() as usize];
    let mean = waits.iter().sum::<u64>() / waits.len() as u64;
    let mut share = vec![0u64; workers];
    for g in grants
        .iter()
        .filter(|g| g.req >= all_present && g.req < end)
    {
        share[g.worker] += 1;
    }
    let (max, min) = (
        share.iter().max().copied().unwrap_or(0),
        share.iter().min().copied().unwrap_or(0),
    );
    let ratio = if min == 0 {
        "inf".to_string()
    } else {
        format!("{:.2}", max as f64 / min as f64)
    };
    let summary = if late == 0 {
        format!(
            "{}: {} grants, none overtaken by a later request, longest wait {}, busiest/least busy worker {ratio}",
            label,
            grants.len(),
            fmt_ns(*waits.last().unwrap_or(&0)),
        )
    } else {
        format!(
            "{}: {} grants, {late} overtaken by later requests (worst: by {max_ov}), longest wait {}, busiest/least busy worker {ratio}",
            label,
            grants.len(),
            fmt_ns(*waits.last().unwrap_or(&0)),
        )
    };
    let row = format!(
        "{:<9} {:>8} {:>20} {:>8} {:>8} {:>8} {:>8}  {max}/{min} = {ratio}",
        label,
        grants.len(),
        format!(
            "{late} ({:.1}%, {max_ov})",
            100.0 * late as f64 / grants.len() as f64
        ),
        fmt_ns(pct(0.5)),
        fmt_ns(pct(0.99)),
        fmt_ns(*waits.last().unwrap_or(&0)),
        fmt_ns(mean),
    );
    (row, summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(req: u64, grant: u64) -> Grant {
        Grant {
            worker: 0,
            req,
            grant,
            token: 0,
            died: false,
        }
    }

    #[test]
    fn counts_overtakes() {
        // requests 1,2,3 granted in order 3,1,2: the first two were overtaken once each.
        assert_eq!(overtakes(&[g(1, 20), g(2, 30), g(3, 10)]), vec![1, 1, 0]);
        assert_eq!(overtakes(&[g(1, 10), g(2, 20), g(3, 30)]), vec![0, 0, 0]);
    }
}
