//! Push-then-wait round trips back to back, as a program that waits for
//! each result before its next push runs them: no clock is read between
//! two round trips (`depengine-perf`'s pingpong times each one, which
//! leaves a gap of some 40 ns between them). Prints, for each engine and
//! each of three runs of 1,000,000 round trips after a warm-up, the mean
//! time of one and how many of its operations the workers ran (the rest
//! the waiting thread ran itself, `Executor::help`).
//!
//! ```text
//! cargo run --release --example round_trips -- [naive,pooled,per_device] [flag]
//! ```
//!
//! With `flag`, the program waits for each result outside the engine: the
//! body sets a flag that the pushing thread spins on, so a worker runs
//! every operation and the round trip crosses cores twice. This is the
//! pattern a worker that holds back to let work pile up would hurt: to
//! the engine it looks like a pusher streaming one operation ahead
//! (perf/journal/2026-11-26.md, "2026-11-26, second session: a worker that holds back").
//! The `DEPENGINE_*` variables apply.

use depengine::{EngineBuilder, EngineKind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

const ROUND_TRIPS: u64 = 1_000_000;

fn main() {
    let kinds: Vec<EngineKind> = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "naive,pooled,per_device".into())
        .split(',')
        .map(|k| EngineKind::parse(k).expect("an engine: naive, pooled or per_device"))
        .collect();
    let flag = std::env::args().nth(2).as_deref() == Some("flag");
    for kind in kinds {
        let engine = EngineBuilder::from_env().expect("the DEPENGINE_* variables").kind(kind).build().unwrap();
        let v = engine.new_var();
        let done = Arc::new(AtomicU64::new(0));
        let mut sent = 0;
        let mut round_trip = || {
            if flag {
                sent += 1;
                let d = done.clone();
                engine.push_sync(move |_| d.store(sent, Ordering::Release), &[], &[v]).unwrap();
                while done.load(Ordering::Acquire) != sent {
                    std::hint::spin_loop();
                }
            } else {
                engine.push_sync(|_| {}, &[], &[v]).unwrap();
                engine.wait_var(v).unwrap();
            }
        };
        (0..ROUND_TRIPS / 10).for_each(|_| round_trip());
        let waits = if flag { "spinning on a flag" } else { "wait_var" };
        for _ in 0..3 {
            let on_workers = engine.stats().ran_on_workers;
            let start = Instant::now();
            (0..ROUND_TRIPS).for_each(|_| round_trip());
            engine.wait_all().unwrap();
            let mean = start.elapsed().as_nanos() as f64 / ROUND_TRIPS as f64;
            let ran = engine.stats().ran_on_workers - on_workers;
            println!("{:<10} {mean:6.1} ns a round trip ({waits}), {ran} of {ROUND_TRIPS} run on workers", kind.name());
        }
    }
}
