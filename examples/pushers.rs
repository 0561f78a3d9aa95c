//! Several threads pushing at once: the push path under contention (the
//! dispatcher's delegated pushes, `src/graph/dispatch.rs`). Each pusher pushes
//! 200,000 empty operations that write its own variable (or, with
//! `shared`, all the same one); prints the best of four runs in ns per
//! operation, with whether `membarrier` was in use (`src/sync/barrier.rs`).
//! An engine named with `+pusher` runs on the pusher
//! (`EngineBuilder::run_on_pusher`), as the harness's engines of that name.
//!
//! ```text
//! cargo run --release --example pushers -- [per_device|pooled][+pusher] [PUSHERS] [shared]
//! DEPENGINE_MEMBARRIER=0 cargo run --release --example pushers -- pooled 4
//! cargo run --release --example pushers -- per_device+pusher 2 shared
//! ```

use depengine::{Engine, EngineKind};
use std::sync::Arc;
use std::time::Instant;

const PUSHES: usize = 200_000;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let name = args.first().map_or("per_device", String::as_str);
    let (name, on_pusher) = name.strip_suffix("+pusher").map_or((name, false), |n| (n, true));
    let kind = match name {
        "pooled" => EngineKind::Pooled,
        "naive" => EngineKind::Naive,
        _ => EngineKind::PerDevice,
    };
    let pushers: usize = args.get(1).map_or(2, |s| s.parse().expect("PUSHERS: a number"));
    let shared = args.get(2).is_some_and(|s| s == "shared");
    let engine = Arc::new(Engine::builder().kind(kind).run_on_pusher(on_pusher).build().unwrap());
    let vars: Vec<_> = (0..pushers).map(|_| engine.new_var()).collect();
    let mut best = f64::MAX;
    for _ in 0..4 {
        let start = Instant::now();
        std::thread::scope(|s| {
            for p in 0..pushers {
                let (engine, var) = (&engine, if shared { vars[0] } else { vars[p] });
                s.spawn(move || {
                    for _ in 0..PUSHES {
                        engine.push_sync(|_| {}, &[], &[var]).unwrap();
                    }
                });
            }
        });
        engine.wait_all().unwrap();
        best = best.min(start.elapsed().as_nanos() as f64 / (PUSHES * pushers) as f64);
    }
    println!(
        "{kind:?}{}: {pushers} pushers, {} variables, membarrier {}: {best:.1} ns/op (best of 4)",
        if on_pusher { " running on the pusher" } else { "" },
        if shared { "one shared" } else { "their own" },
        if engine.stats().membarrier { "on" } else { "off" },
    );
}
