//! `DEPENGINE_MEMBARRIER=0`: the push path's handshakes fall back to a
//! SeqCst fence on each side (`src/sync/barrier.rs`). In a test binary of its
//! own with a single test, which sets the variable before anything in the
//! process builds an engine (the choice is made once per process).

use depengine::{Engine, EngineKind, Var};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const PUSHERS: usize = 4;
const PUSHES: usize = 5_000;
const VARS: usize = 8;

/// Each variable's log of (pusher, sequence number), in run order.
type Logs = Arc<Vec<Mutex<Vec<(usize, usize)>>>>;

/// Several threads push writes to a few shared variables at once (so
/// pushes are delegated to a combiner) with a short spin (so workers park
/// and are woken): every operation runs once, and the writes of one
/// thread to one variable run in that thread's push order.
#[test]
fn with_fences_on_both_sides_pushes_keep_their_order() {
    // The only test here: no other thread reads the environment.
    std::env::set_var("DEPENGINE_MEMBARRIER", "0");
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        let engine =
            Arc::new(Engine::builder().kind(kind).cpu_workers(2).spin(Duration::from_micros(1)).build().unwrap());
        assert!(!engine.stats().membarrier, "DEPENGINE_MEMBARRIER=0 must turn membarrier off");
        let vars: Arc<Vec<Var>> = Arc::new((0..VARS).map(|_| engine.new_var()).collect());
        let logs: Logs = Arc::new((0..VARS).map(|_| Mutex::new(Vec::new())).collect());
        let pushers: Vec<_> = (0..PUSHERS)
            .map(|t| {
                let (engine, vars, logs) = (engine.clone(), vars.clone(), logs.clone());
                std::thread::spawn(move || {
                    for seq in 0..PUSHES {
                        let v = (seq * 7 + t) % VARS;
                        let logs = logs.clone();
                        engine.push_sync(move |_| logs[v].lock().unwrap().push((t, seq)), &[], &[vars[v]]).unwrap();
                        if seq % 500 == 0 {
                            // Let the workers run dry and park now and then.
                            std::thread::sleep(Duration::from_micros(50));
                        }
                    }
                })
            })
            .collect();
        for p in pushers {
            p.join().unwrap();
        }
        engine.wait_all().unwrap();
        let mut total = 0;
        for (v, log) in logs.iter().enumerate() {
            let log = log.lock().unwrap();
            total += log.len();
            let mut last = [None::<usize>; PUSHERS];
            for &(t, seq) in log.iter() {
                assert!(last[t] < Some(seq), "{kind:?}: var {v} ran pusher {t}'s push {seq} after {:?}", last[t]);
                last[t] = Some(seq);
            }
        }
        assert_eq!(total, PUSHERS * PUSHES, "{kind:?}: every operation runs once");
    }
}
