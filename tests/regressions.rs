//! Regressions: each test reproduces a bug that was found and fixed.

use depengine::{Engine, EngineKind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// Long chains of writes with a pusher racing the workers: a completion
/// that granted nothing used to store the queue cursor again after releasing
/// the queue, which could roll it back onto freed blocks (a hang or a corrupt
/// queue, about once in 10⁷ operations here). The loom model
/// `var_queue::loom_models::writes_race_appends_and_completions` finds that
/// interleaving deterministically; this test keeps the engine-level path
/// (dispatcher, successor slots, batching) exercised on long chains.
#[test]
fn long_chains_keep_the_queue_cursor() {
    const ROUNDS: usize = if cfg!(debug_assertions) { 25 } else { 80 };
    const OPS: u64 = 50_000;
    for i in 0..ROUNDS {
        // Alternate the engines with workers (per_device: chains on one
        // worker's deque; pooled: the successor slot).
        let kind = if i % 2 == 0 { EngineKind::Pooled } else { EngineKind::PerDevice };
        let engine = Arc::new(Engine::builder().kind(kind).cpu_workers(4).build().unwrap());
        let v = engine.new_var();
        let count = Arc::new(AtomicU64::new(0));
        for round in 1..=3 {
            for _ in 0..OPS {
                let c = count.clone();
                engine
                    .push_sync(
                        move |_| {
                            c.fetch_add(1, Ordering::Relaxed);
                        },
                        &[],
                        &[v],
                    )
                    .unwrap();
            }
            let (tx, rx) = mpsc::channel();
            let e = engine.clone();
            std::thread::spawn(move || tx.send(e.wait_all()).unwrap());
            let waited = rx.recv_timeout(Duration::from_secs(60)).expect("the chain hung");
            assert_eq!(waited, Ok(()));
            assert_eq!(count.load(Ordering::Relaxed), round * OPS, "every link ran once");
            assert_eq!(engine.var_version(v).unwrap(), round * OPS);
        }
    }
}
