//! `cargo bench -p depengine --features bench-internals --bench park_wake`
//! (see `src/bench_parts.rs`).

use criterion::{criterion_group, criterion_main};

criterion_group! {
    name = benches;
    config = depengine::bench_parts::config();
    targets = depengine::bench_parts::park_wake
}
criterion_main!(benches);
