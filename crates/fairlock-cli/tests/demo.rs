//! `fairlock demo` — README's first command — run the way a new user runs it: it finishes,
//! shows each step with its pictures, and what it shows of fairlock is what fairlock promises
//! (flock's figures are measured, not asserted: the point of the demo is that they vary).

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fairlock");

#[test]
fn quick_demo_shows_every_step_and_draws_the_picture() {
    let dir = std::env::temp_dir().join(format!("fairlock-demo-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plot = dir.join("demo.svg");
    let out = Command::new(BIN)
        .args(["demo", "--quick", "--plot"])
        .arg(&plot)
        .output()
        .expect("run fairlock demo");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needle in [
        "1. A worker that re-locks at once",
        "2. Contention",
        "share of the grants",
        "how long the requests waited",
        "The trade-off:",
        "3. Crash",
        "owner_died() = true",
        "Summary:",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    // Step 1: fairlock's waiters get in before w1's next turns (one at most, for a waiter
    // preempted between reading the clock and taking its ticket).
    let fair_rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("fairlock  w2"))
        .take_while(|l| !l.trim_start().starts_with("flock(2)"))
        .collect();
    assert_eq!(fair_rows.len(), 3, "{text}");
    for row in fair_rows {
        let n: u32 = row
            .rsplit("re-locked ")
            .next()
            .and_then(|t| t.trim_end_matches('x').trim().parse().ok())
            .unwrap_or_else(|| panic!("no count in {row:?}"));
        assert!(
            n <= 1,
            "a fairlock waiter waited behind {n} re-locks: {row}"
        );
    }
    // Bars are drawn with block characters.
    assert!(text.contains('█'), "{text}");
    let svg = std::fs::read_to_string(&plot).expect("the picture was written");
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("fairlock") && svg.contains("flock(2)"));
    std::fs::remove_dir_all(&dir).unwrap();
}
