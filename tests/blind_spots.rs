//! Real-thread tests for the bugs that every wait hides.
//!
//! Every wait starts by flushing the dispatcher and helping run ready work,
//! which rescues a stranded push or a worker that slept through a wake-up.
//! So each test here observes the engine's effects *without* waiting on the
//! engine (side effects polled against a deadline), or makes a body need
//! another worker, or a wait race a read that is known to be running.
//! `scripts/mutants.py` plants the bugs these catch (the mutants named in
//! each test's doc) and checks that they do.

mod common;

use depengine::{Engine, EngineKind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a side effect may take to appear before the test calls it lost:
/// far beyond any scheduling delay, so that only a lost operation (or a
/// wake-up lost for good) reaches it.
const DEADLINE: Duration = Duration::from_secs(5);

/// Polls `done` until it holds or the deadline passes, without calling the
/// engine.
fn within_deadline(done: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > DEADLINE {
            return false;
        }
        std::thread::yield_now();
    }
    true
}

/// Threaded engines whose idle workers park at once (no spin), so that
/// every push meets the park/wake protocol.
fn parking_engines(workers: usize) -> Vec<(EngineKind, Engine)> {
    [EngineKind::Pooled, EngineKind::PerDevice]
        .into_iter()
        .map(|k| (k, Engine::builder().kind(k).cpu_workers(workers).spin(Duration::ZERO).build().unwrap()))
        .collect()
}

/// A push made while the workers go to sleep runs without anyone waiting
/// for it: a worker that parks re-checks for work after announcing itself
/// (mutant `park_without_recheck`).
#[test]
fn a_push_while_workers_park_runs_without_a_wait() {
    for (kind, engine) in parking_engines(1) {
        let v = engine.new_var();
        let ran = Arc::new(AtomicU64::new(0));
        for i in 1..=3_000u64 {
            let r = ran.clone();
            engine.push_sync(move |_| r.store(i, Ordering::Release), &[], &[v]).unwrap();
            assert!(within_deadline(|| ran.load(Ordering::Acquire) == i), "{kind:?}: push {i} never ran");
            // Let the worker reach its park at a different moment each time.
            for _ in 0..(i % 64) * 16 {
                std::hint::spin_loop();
            }
        }
    }
}

/// Two threads pushing at once hand pushes to each other through the
/// dispatcher's stack: each push runs without anyone waiting for it. The
/// combiner that lets go re-checks the stack after a barrier that pairs
/// with the delegating push's (mutants `dispatcher_release_without_recheck`,
/// `dispatcher_delegation_without_heavy_barrier`).
#[test]
fn pushes_delegated_between_threads_run_without_a_wait() {
    for (kind, engine) in parking_engines(2) {
        let engine = &engine;
        std::thread::scope(|s| {
            for t in 0..2u64 {
                s.spawn(move || {
                    let v = engine.new_var();
                    let ran = Arc::new(AtomicU64::new(0));
                    for i in 1..=5_000u64 {
                        let r = ran.clone();
                        engine.push_sync(move |_| r.store(i, Ordering::Release), &[], &[v]).unwrap();
                        if i % 8 == 0 {
                            assert!(
                                within_deadline(|| ran.load(Ordering::Acquire) == i),
                                "{kind:?}: thread {t}'s push {i} never ran (stranded on the dispatcher)"
                            );
                        }
                    }
                });
            }
        });
    }
}

/// A body that blocks its worker until its own child has run: the child,
/// pushed from the body onto that worker's deque, must wake another worker
/// to steal it (mutant `nested_push_wakes_nobody`).
#[test]
fn a_child_pushed_by_a_blocking_body_runs_on_another_worker() {
    for (kind, engine) in parking_engines(2) {
        let engine = Arc::new(engine);
        for round in 0..50 {
            let child_ran = Arc::new(AtomicBool::new(false));
            let parent_saw = Arc::new(AtomicBool::new(false));
            let (e, c, p) = (engine.clone(), child_ran.clone(), parent_saw.clone());
            // Let the other worker park first.
            std::thread::sleep(Duration::from_millis(1));
            engine
                .push_sync(
                    move |_| {
                        let c2 = c.clone();
                        e.push_sync(move |_| c2.store(true, Ordering::Release), &[], &[]).unwrap();
                        p.store(within_deadline(|| c.load(Ordering::Acquire)), Ordering::Release);
                    },
                    &[],
                    &[],
                )
                .unwrap();
            engine.wait_all().unwrap();
            assert!(
                parent_saw.load(Ordering::Acquire),
                "{kind:?} round {round}: the child waited for its parent's worker"
            );
        }
        // The engine holds itself through the bodies only while they run.
        drop(Arc::try_unwrap(engine).ok());
    }
}

/// `wait_all` covers every push that returned before it was called, even
/// one another thread's combiner has not dispatched yet (mutant
/// `wait_all_ignores_delegated_pushes`).
#[test]
fn wait_all_covers_pushes_still_on_the_dispatchers_stack() {
    for kind in [EngineKind::Naive, EngineKind::Pooled, EngineKind::PerDevice] {
        let engine = common::engine(kind);
        let engine = &engine;
        let stop = AtomicBool::new(false);
        let pushed = AtomicUsize::new(0);
        let ran = Arc::new(AtomicUsize::new(0));
        std::thread::scope(|s| {
            // Two threads keep the dispatcher busy, so that pushes are
            // delegated to whichever combines.
            for _ in 0..2 {
                let (stop, pushed, ran) = (&stop, &pushed, ran.clone());
                s.spawn(move || {
                    let v = engine.new_var();
                    while !stop.load(Ordering::Relaxed) {
                        let r = ran.clone();
                        engine
                            .push_sync(
                                move |_| {
                                    r.fetch_add(1, Ordering::AcqRel);
                                },
                                &[],
                                &[v],
                            )
                            .unwrap();
                        pushed.fetch_add(1, Ordering::AcqRel);
                    }
                });
            }
            for _ in 0..2_000 {
                let returned = pushed.load(Ordering::Acquire);
                engine.wait_all().unwrap();
                let seen = ran.load(Ordering::Acquire);
                assert!(seen >= returned, "{kind:?}: wait_all returned with {returned} pushes returned but {seen} run");
            }
            stop.store(true, Ordering::Relaxed);
        });
    }
}

/// `wait_to_write` waits for reads that are running, not only for queued
/// ones: the read signals that it started, then sleeps (mutant
/// `wait_to_write_ignores_reads`).
#[test]
fn wait_to_write_waits_for_a_running_read() {
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        let engine = common::engine(kind);
        let v = engine.new_var();
        for _ in 0..5 {
            let (started, finished) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
            let (s, f) = (started.clone(), finished.clone());
            engine
                .push_sync(
                    move |_| {
                        s.store(true, Ordering::Release);
                        std::thread::sleep(Duration::from_millis(20));
                        f.store(true, Ordering::Release);
                    },
                    &[v],
                    &[],
                )
                .unwrap();
            assert!(within_deadline(|| started.load(Ordering::Acquire)), "{kind:?}: the read never started");
            engine.wait_to_write(v).unwrap();
            assert!(finished.load(Ordering::Acquire), "{kind:?}: wait_to_write returned while the read ran");
        }
    }
}
