//! `cargo bench -p depengine --features bench-internals --bench round_trip`
//! (see `src/bench_parts.rs`).

use criterion::{criterion_group, criterion_main};

criterion_group! {
    name = benches;
    config = depengine::bench_parts::config();
    targets = depengine::bench_parts::round_trip, depengine::bench_parts::typed_push
}
criterion_main!(benches);
