//! A program with a missing dependency, and the random-order mode finding
//! it. Run: `cargo run --example missing_dependency`.
//!
//! `bump` changes the data that `v` guards but declares only a read of `v`,
//! so nothing orders it against `report`, which also reads `v`. Push order
//! happens to run `bump` first, so the default engine almost always prints
//! 11; the random-order mode lets `report` overtake `bump` within a few
//! seeds and names the seed that replays it.

use depengine::{Engine, EngineKind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The program under test (`tests/shuffle.rs` runs it too).
pub(crate) fn program(engine: &Engine) -> u64 {
    let v = engine.new_var();
    let data = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(AtomicU64::new(0));
    let d = data.clone();
    engine.push_sync(move |_| d.store(10, Ordering::SeqCst), &[], &[v]).unwrap(); // init
    let d = data.clone();
    engine
        .push_sync(
            move |_| {
                d.fetch_add(1, Ordering::SeqCst); // bump: BUG, declared as a read
            },
            &[v],
            &[],
        )
        .unwrap();
    let (d, s) = (data.clone(), seen.clone());
    engine.push_sync(move |_| s.store(d.load(Ordering::SeqCst), Ordering::SeqCst), &[v], &[]).unwrap(); // report
    engine.wait_all().unwrap();
    seen.load(Ordering::SeqCst)
}

fn main() {
    let default = Engine::builder().kind(EngineKind::Pooled).build().unwrap();
    let wrong = (0..1000).filter(|_| program(&default) != 11).count();
    println!("default engine: {wrong} wrong results in 1000 runs");
    for seed in 0..16 {
        let got = program(&Engine::builder().shuffle_seed(seed).build().unwrap());
        if got != 11 {
            println!("random-order mode: seed {seed} gives {got} instead of 11");
            println!("replay it with DEPENGINE_SHUFFLE_SEED={seed} (or EngineBuilder::shuffle_seed({seed}))");
            return;
        }
    }
    println!("random-order mode: 16 seeds and no wrong result");
}
