//! Uncontended lock + unlock: fairlock against std, parking_lot, a robust process-shared
//! pthread mutex, `flock` and an OFD lock. The competitors are the very ones the
//! `lockbench` example measures (same source file).
//!
//! `CARGO_TARGET_DIR=/work/target-bench cargo bench -p fairlock-bench --bench uncontended`

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};

#[allow(dead_code)]
#[path = "../examples/lockbench/competitors.rs"]
mod competitors;

use competitors::{Competitor, Fair, FairR, Flock, Ofd, PlMutex, Pthread, StdMutex};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fairlock-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir.join(name)
}

fn one<C: Competitor>(c: &mut Criterion, file: &str) {
    let path = scratch(file);
    let lock = C::create(&path);
    c.bench_function(&format!("uncontended/{}", C::NAME), |b| {
        b.iter(|| lock.with(black_box));
    });
    drop(lock);
    let _ = std::fs::remove_file(&path);
}

fn uncontended(c: &mut Criterion) {
    one::<Fair>(c, "fair.lock");
    one::<FairR>(c, "fair-r.lock");
    one::<Pthread>(c, "pthread.mutex");
    one::<StdMutex>(c, "std");
    one::<PlMutex>(c, "parking_lot");
    one::<Flock>(c, "flock.lock");
    one::<Ofd>(c, "ofd.lock");
    if let Some(dir) = scratch("x").parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = uncontended
}
criterion_main!(benches);
