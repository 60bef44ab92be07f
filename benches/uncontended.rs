//! Placeholder replaced by the benchmark work (issue 5).
fn main() {}
