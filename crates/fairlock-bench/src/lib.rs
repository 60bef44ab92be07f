//! fairlock's benchmarks, in a crate of their own so that they use the library exactly as a
//! user's crate does (public API only, the user's inlining and code layout):
//!
//! * `examples/lockbench/` — every competitor interleaved: uncontended, contended throughput
//!   and fairness, hand-off latency, crash recovery (`docs/BENCHMARKS.md`);
//! * `examples/uncontended_user.rs` — the uncontended loop written as users write it, with and
//!   without `black_box` on the guard;
//! * `benches/uncontended.rs` — the criterion microbenchmark;
//! * `examples/waiterbench/` — the designs an asynchronous wait could be woken by;
//! * `examples/etcdbench.rs` — fairlock-etcd against etcd's own Go mutex.
//!
//! This library holds only what the harnesses share: raw futex calls ([`futex`]) for their
//! floors and waiter designs.

pub mod futex;
