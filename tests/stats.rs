//! Engine statistics: each counter counts what it says.

mod common;

use depengine::{Engine, EngineKind, EngineStats};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Workers each GPU's rings add (feature `cuda`, default sizes): 2 compute,
/// 1 priority, 1 copy.
const GPU_WORKERS: usize = 4;

fn pooled(workers: usize) -> Engine {
    Engine::builder().kind(EngineKind::Pooled).cpu_workers(workers).build().unwrap()
}

#[test]
fn pushes_runs_and_waits_are_counted() {
    for kind in EngineKind::ALL {
        let engine = Engine::builder().kind(kind).cpu_workers(2).build().unwrap();
        let v = engine.new_var();
        for _ in 0..500 {
            engine.push_sync(|_| {}, &[], &[v]).unwrap();
        }
        engine.wait_var(v).unwrap();
        engine.wait_to_write(v).unwrap();
        engine.wait_all().unwrap();
        let s = engine.stats();
        assert_eq!(s.pushed, 500, "{kind:?}: {s}");
        assert_eq!(s.finished, 500, "{kind:?}: {s}");
        assert_eq!(s.waits, 2, "{kind:?}: {s}");
        assert_eq!(s.ran_on_workers + s.ran_elsewhere, 500, "{kind:?}: {s}");
        assert_eq!(s.per_worker.iter().sum::<u64>(), s.ran_on_workers);
        assert_eq!((s.skipped, s.failed), (0, 0));
        if kind != EngineKind::PerDevice {
            assert_eq!(s.stolen, 0, "nothing to steal from");
        }
        assert_eq!(s.pools.live_ops, 0);
        assert_eq!(s.pools.live_vars, 1);
        match kind {
            EngineKind::Naive => assert_eq!(s.ran_on_workers, 0, "the naive engine has no workers"),
            EngineKind::Pooled => {
                assert_eq!(s.per_worker.len(), 3 + GPU_WORKERS * engine.gpus(), "two CPU workers and one copy worker")
            }
            EngineKind::PerDevice => assert_eq!(s.per_worker.len(), 2 + GPU_WORKERS * engine.gpus(), "two CPU workers"),
        }
    }
}

#[test]
fn failures_and_skips_are_counted() {
    let engine = pooled(2);
    let (a, b) = (engine.new_var(), engine.new_var());
    engine.push_sync(|_| -> Result<(), String> { Err("boom".into()) }, &[], &[a]).unwrap();
    engine.push_sync(|_| {}, &[a], &[b]).unwrap(); // skipped: reads a failure
    engine.push_sync(|_| {}, &[b], &[]).unwrap(); // skipped too
    assert!(engine.wait_all().is_err());
    let s = engine.stats();
    assert_eq!(s.skipped, 2, "{s}");
    assert_eq!(s.failed, 3, "{s}");
    assert_eq!(s.finished, 3, "{s}");
}

#[test]
fn parked_workers_and_their_wake_ups_are_counted() {
    // No spinning: an idle worker parks at once, and the next push wakes it.
    let engine = Engine::builder().cpu_workers(1).spin(std::time::Duration::ZERO).build().unwrap();
    let v = engine.new_var();
    let before = engine.stats();
    for _ in 0..20 {
        std::thread::sleep(std::time::Duration::from_millis(2));
        engine.push_sync(|_| {}, &[], &[v]).unwrap();
        // Waiting would let this thread run the operation itself; give the
        // worker the chance first.
        while engine.pending() > 0 {
            std::thread::yield_now();
        }
    }
    let s = engine.stats();
    assert!(s.parks > before.parks, "{s}");
    assert!(s.wakeups > before.wakeups, "{s}");
    assert!(s.ran_on_workers > 0, "{s}");
}

#[test]
fn the_pending_high_water_mark_sees_a_backlog() {
    let engine = pooled(1);
    let v = engine.new_var();
    let gate = Arc::new(AtomicBool::new(false));
    engine.push_sync(common::until_open(&gate), &[], &[v]).unwrap();
    for _ in 0..100 {
        engine.push_sync(|_| {}, &[], &[v]).unwrap();
    }
    gate.store(true, Ordering::Release);
    engine.wait_all().unwrap();
    let s = engine.stats();
    assert!(s.pending_high_water >= 100, "{s}");
    assert_eq!(s.throttled, 0, "{s}");
}

#[test]
fn the_pending_cap_counts_throttled_pushes() {
    // The writes queue behind a running blocker, so the backlog passes the
    // cap whatever the worker's speed; each push above it finds nothing to
    // help with and goes on after a bounded wait.
    let engine = Engine::builder().cpu_workers(1).max_pending(4).build().unwrap();
    let v = engine.new_var();
    let gate = common::occupy_a_worker(&engine, &[v]);
    for _ in 0..200 {
        engine.push_sync(|_| {}, &[], &[v]).unwrap();
    }
    let held = engine.stats();
    assert!(held.throttled >= 190, "{held}");
    gate.store(true, Ordering::Release);
    engine.wait_all().unwrap();
    let s: EngineStats = engine.stats();
    assert!(s.throttled >= 1, "{s}");
    assert!(s.pending_high_water >= 200, "{s}");
}

#[test]
fn waiters_that_help_are_counted() {
    // Random-order mode: only waiting threads run operations.
    let engine = Engine::builder().shuffle_seed(1).build().unwrap();
    let v = engine.new_var();
    for _ in 0..10 {
        engine.push_sync(|_| {}, &[v], &[]).unwrap();
    }
    engine.wait_all().unwrap();
    let s = engine.stats();
    assert_eq!(s.helped_by_waiters, 10, "{s}");
    assert_eq!(s.ran_elsewhere, 10, "{s}");
}

/// A wait that helps run one operation and must still queue behind the next
/// counts each operation it ran once.
#[test]
fn a_wait_that_helps_then_queues_counts_each_help_once() {
    // Random-order mode: only waiting threads run operations.
    let engine = Engine::builder().shuffle_seed(1).build().unwrap();
    let v = engine.new_var();
    for _ in 0..2 {
        engine.push_sync(|_| {}, &[], &[v]).unwrap();
    }
    engine.wait_var(v).unwrap();
    let s = engine.stats();
    assert_eq!(s.helped_by_waiters, 2, "{s}");
    assert_eq!(s.ran_elsewhere, 2, "{s}");
    assert_eq!((s.waits, s.waits_at_once), (1, 0), "{s}");
}

/// A wait whose variable has nothing in flight that it must follow answers
/// at once — with the value's failure, if it holds one — and queues nothing;
/// one behind a running writer still waits for it.
#[test]
fn waits_with_nothing_in_flight_answer_at_once() {
    for kind in EngineKind::ALL {
        let engine = Engine::builder().kind(kind).cpu_workers(2).build().unwrap();
        let (v, bad) = (engine.new_var(), engine.new_var());
        engine.push_sync(|_| {}, &[], &[v]).unwrap();
        engine
            .push_sync_with(
                |_| -> Result<(), String> { Err("broken".into()) },
                &[],
                &[bad],
                depengine::PushOpts::new().name("breaker"),
            )
            .unwrap();
        assert!(engine.wait_all().is_err());
        engine.wait_var(v).unwrap();
        engine.wait_to_write(v).unwrap();
        match engine.wait_var(bad) {
            Err(depengine::EngineError::OpFailed(e)) => assert_eq!(e.op_name(), "breaker", "{kind:?}"),
            other => panic!("{kind:?}: {other:?}"),
        }
        let s = engine.stats();
        assert_eq!((s.waits, s.waits_at_once), (3, 3), "{kind:?}: {s}");
        assert_eq!((s.pushed, s.finished), (2, 2), "{kind:?}: waits queued nothing: {s}");
        if kind == EngineKind::Naive {
            continue; // runs bodies inline: nothing is ever in flight
        }
        // A writer held by a gate: the wait must not answer before it ends.
        let gate = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let body = common::until_open(&gate);
        engine
            .push_sync(
                move |ctx| {
                    body(ctx);
                    d.store(true, Ordering::SeqCst);
                },
                &[],
                &[v],
            )
            .unwrap();
        let opener = {
            let gate = gate.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(20));
                gate.store(true, Ordering::Release);
            })
        };
        engine.wait_var(v).unwrap();
        assert!(done.load(Ordering::SeqCst), "{kind:?}: wait_var returned before the running write finished");
        opener.join().unwrap();
    }
}
