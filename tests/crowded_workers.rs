//! A pusher held at the pending cap while its workers crowd one CPU
//! (`throttle.rs`): a yield that comes back at once says that the pusher's
//! own CPU has nothing else to run, and with as many workers awake as the
//! process has CPUs, two of them then share another. Yielding on keeps the
//! pusher's CPU busy, so the scheduler never sees an idle CPU to move one
//! of them to; the pusher sleeps until the workers have drained a quarter
//! of the cap instead. Its own binary: another test's threads on the
//! pusher's CPU would make its yields slow.
//!
//! The test confines itself to two CPUs, as on the two-core hosts CI runs
//! on. With one worker per CPU of a bigger machine crowded onto one (16 on
//! the H100 machine), the few that get the chains keep them and the rest
//! park, so fewer workers than CPUs are awake, the pusher rightly keeps
//! yielding, and the scene the test sets up does not happen: it failed
//! there in 7 of 24 runs, before and after the changes of 2026-11-28.

mod common;

use common::{busy_for, confine_to};
use depengine::{Engine, EngineKind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn a_held_pusher_sleeps_while_its_workers_crowd_another_cpu() {
    let all = core_affinity::get_core_ids().unwrap_or_default();
    if all.len() < 2 {
        eprintln!("skipped: needs two CPUs, has {}", all.len());
        return;
    }
    // The engines count the CPUs this thread may use, and their workers
    // inherit its mask (module docs).
    let cpus = &all[..2];
    confine_to(cpus);
    assert_eq!(std::thread::available_parallelism().map(|n| n.get()).ok(), Some(2), "confined to two CPUs");
    // Workers the scheduler may move: pooled's, and per_device's unpinned.
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        // One worker per CPU the process may use: all awake, they need
        // every CPU.
        let workers = cpus.len();
        let engine = Engine::builder().kind(kind).cpu_workers(workers).pin(false).max_pending(64).build().unwrap();
        // Each worker moves itself to the first CPU inside an operation that
        // waits for all of them, so each runs exactly one.
        let (home, arrived) = (cpus[0], Arc::new(AtomicUsize::new(0)));
        for _ in 0..workers {
            let (arrived, v) = (arrived.clone(), engine.new_var());
            engine
                .push_sync(
                    move |_| {
                        assert!(core_affinity::set_for_current(home), "could not move a worker to {home:?}");
                        arrived.fetch_add(1, Ordering::SeqCst);
                        while arrived.load(Ordering::SeqCst) < workers {
                            std::thread::yield_now();
                        }
                    },
                    &[],
                    &[v],
                )
                .unwrap();
        }
        // Not through the engine: a waiting thread may run operations itself.
        while arrived.load(Ordering::SeqCst) < workers {
            std::thread::yield_now();
        }
        assert!(core_affinity::set_for_current(cpus[1]), "could not move the pusher to {:?}", cpus[1]);
        // A chain of 20-µs bodies per worker, so that none has cause to
        // park, pushed in turn, far past the cap.
        let chains: Vec<_> = (0..workers).map(|_| engine.new_var()).collect();
        for i in 0..4_000 {
            engine.push_sync(|_| busy_for(Duration::from_micros(20)), &[], &[chains[i % workers]]).unwrap();
        }
        engine.wait_all().unwrap();
        let stats = engine.stats();
        assert!(stats.throttled > 0, "{kind:?}: the pusher was never held at the cap: {stats:?}");
        assert!(
            stats.throttle_sleeps > 0,
            "{kind:?}: the held pusher yielded on its idle CPU and never slept while {workers} workers \
             shared another: {stats:?}"
        );
    }
}
