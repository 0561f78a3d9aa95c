//! Shutdown: dropping an engine finishes pending work (or cancels
//! it when asked), joins its threads, and leaves no block behind; it never
//! hangs, with busy or parked workers or completions still outstanding.

mod common;

use common::{engines, eventually};
use depengine::{Engine, EngineKind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// Drops `engine` on another thread; fails instead of hanging.
fn drop_within(engine: Engine, limit: Duration) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        drop(engine);
        tx.send(()).unwrap();
    });
    rx.recv_timeout(limit).expect("dropping the engine hung");
}

#[test]
fn drop_with_pending_work_runs_all_of_it() {
    for engine in engines() {
        let hits = Arc::new(AtomicUsize::new(0));
        let vars: Vec<_> = (0..4).map(|_| engine.new_var()).collect();
        for i in 0..2_000 {
            let h = hits.clone();
            engine
                .push_sync(
                    move |_| {
                        (0..200).for_each(|_| std::hint::spin_loop());
                        h.fetch_add(1, Ordering::SeqCst);
                    },
                    &[vars[i % 4]],
                    &[vars[(i + 1) % 4]],
                )
                .unwrap();
        }
        drop_within(engine, Duration::from_secs(30));
        assert_eq!(hits.load(Ordering::SeqCst), 2_000, "work was lost at drop");
    }
}

#[test]
fn drop_with_parked_workers_returns() {
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        drop_with_parked_workers_returns_on(kind);
    }
}

fn drop_with_parked_workers_returns_on(kind: EngineKind) {
    let engine = Engine::builder().kind(kind).cpu_workers(2).spin(Duration::from_micros(1)).build().unwrap();
    let v = engine.new_var();
    engine.push_sync(|_| {}, &[], &[v]).unwrap();
    engine.wait_all().unwrap();
    std::thread::sleep(Duration::from_millis(30)); // the workers park
                                                   // Work still reaches parked workers (no lost wake-up) ...
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    engine.push_sync(move |_| d.store(true, Ordering::SeqCst), &[], &[v]).unwrap();
    assert!(eventually(Duration::from_secs(10), || done.load(Ordering::SeqCst)), "a parked worker was not woken");
    std::thread::sleep(Duration::from_millis(30));
    // ... and dropping with every worker parked returns.
    drop_within(engine, Duration::from_secs(10));
}

/// Workers spinning when the engine is dropped stop at once instead of
/// spinning out their time: a long spin setting (ten minutes here) does
/// not hold up the drop.
#[test]
fn drop_with_spinning_workers_does_not_wait_out_the_spin() {
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        let engine = Engine::builder().kind(kind).cpu_workers(2).spin(Duration::from_secs(600)).build().unwrap();
        let v = engine.new_var();
        engine.push_sync(|_| {}, &[], &[v]).unwrap();
        engine.wait_all().unwrap();
        drop_within(engine, Duration::from_secs(60));
    }
}

#[test]
fn drop_waits_for_outstanding_completions() {
    for engine in engines() {
        let v = engine.new_var();
        let signalled = Arc::new(AtomicBool::new(false));
        let s = signalled.clone();
        engine
            .push_async(
                move |_, done| {
                    std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_millis(30));
                        s.store(true, Ordering::SeqCst);
                        done.signal();
                    });
                },
                &[],
                &[v],
            )
            .unwrap();
        drop_within(engine, Duration::from_secs(10));
        assert!(signalled.load(Ordering::SeqCst), "the engine went away before its completion");
    }
}

#[test]
fn no_block_is_left_behind() {
    for engine in engines() {
        let vars: Vec<_> = (0..16).map(|_| engine.new_var()).collect();
        for i in 0..5_000 {
            let (r, w) = (vars[i % 16], vars[(i * 7 + 3) % 16]);
            match i % 4 {
                0 => engine.push_async(|_, done| done.signal(), &[r], &[w]).unwrap(),
                1 => engine.push_sync(|_| Err::<(), _>("fail"), &[r], &[w]).unwrap(),
                _ => engine.push_sync(|_| {}, &[r], &[w]).unwrap(),
            }
        }
        let _ = engine.wait_all();
        let stats = engine.pool_stats();
        assert_eq!(stats.live_ops, 0, "{:?}: {stats:?}", engine.kind());
        assert_eq!(stats.live_vars, 16);
        assert!(stats.live_var_blocks <= 2 * 16, "only sentinels (and the dispatcher's spares) stay: {stats:?}");
        for v in vars {
            engine.delete_var(v, || {}).unwrap();
        }
        engine.wait_all().unwrap();
        let stats = engine.pool_stats();
        assert_eq!((stats.live_ops, stats.live_vars, stats.live_var_blocks), (0, 0, 0), "{stats:?}");
    }
}

#[test]
fn shutdown_cancel_skips_queued_work() {
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        shutdown_cancel_skips_queued_work_on(kind);
    }
}

fn shutdown_cancel_skips_queued_work_on(kind: EngineKind) {
    let engine = Arc::new(Engine::builder().kind(kind).cpu_workers(2).build().unwrap());
    let v = engine.new_var();
    let gate = Arc::new(AtomicBool::new(false));
    let ran = Arc::new(AtomicUsize::new(0));
    let g = gate.clone();
    engine
        .push_sync(
            move |_| {
                while !g.load(Ordering::SeqCst) {
                    std::thread::yield_now()
                }
            },
            &[],
            &[v],
        )
        .unwrap();
    for _ in 0..100 {
        let r = ran.clone();
        engine
            .push_sync(
                move |_| {
                    r.fetch_add(1, Ordering::SeqCst);
                },
                &[v],
                &[v],
            )
            .unwrap();
    }
    let e = engine.clone();
    let stopper = std::thread::spawn(move || e.shutdown_cancel());
    std::thread::sleep(Duration::from_millis(20));
    gate.store(true, Ordering::SeqCst);
    stopper.join().unwrap().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 0, "queued bodies ran after cancel");
    assert_eq!(engine.pool_stats().live_ops, 0);
}
