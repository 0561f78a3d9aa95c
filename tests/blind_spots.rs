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

use depengine::Completion;
use depengine::{Engine, EngineKind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::time::Duration;

/// How long a side effect may take to appear before the test calls it lost:
/// far beyond any scheduling delay, so that only a lost operation (or a
/// wake-up lost for good) reaches it.
const DEADLINE: Duration = Duration::from_secs(5);

/// Polls `done` until it holds or the deadline passes, without calling the
/// engine.
fn within_deadline(done: impl Fn() -> bool) -> bool {
    common::eventually(DEADLINE, done)
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
        for i in 1..=20_000u64 {
            let r = ran.clone();
            engine.push_sync(move |_| r.store(i, Ordering::Release), &[], &[v]).unwrap();
            assert!(within_deadline(|| ran.load(Ordering::Acquire) == i), "{kind:?}: push {i} never ran");
            // Push the next one at a different moment of the worker's way
            // to its park each time (a sweep of about 0 to 10 µs).
            for _ in 0..i % 512 {
                std::hint::spin_loop();
            }
        }
    }
}

/// Threads pushing at once to variables of one dispatch shard hand pushes
/// to each other through that shard's stack. In each round every thread
/// pushes one operation at the same moment and then, pushing nothing more,
/// polls for its own operation's effect: a push left on the stack would
/// stay there, since only a later push or a wait would drain it. The
/// combiner that lets go re-checks the stack after a barrier that pairs
/// with the delegating push's (mutants `dispatcher_release_without_recheck`,
/// `dispatcher_delegation_without_heavy_barrier`; their windows are a few
/// instructions wide, and the loom models of `dispatch.rs` are what catch
/// them).
#[test]
fn pushes_delegated_between_threads_run_without_a_wait() {
    const THREADS: usize = 3;
    const ROUNDS: u64 = 4_000;
    for (kind, engine) in parking_engines(2) {
        // One variable per thread, all placed in this thread's dispatch
        // shard by a first push from here, so that the threads' pushes
        // meet one combiner (each thread's own first push would place its
        // variable in a shard of its own).
        let vars: Vec<_> = (0..THREADS).map(|_| engine.new_var()).collect();
        engine.push_sync(|_| {}, &[], &vars).unwrap();
        engine.wait_all().unwrap();
        let (engine, start) = (&engine, Barrier::new(THREADS));
        std::thread::scope(|s| {
            for (t, &v) in vars.iter().enumerate() {
                let start = &start;
                s.spawn(move || {
                    let ran = Arc::new(AtomicU64::new(0));
                    for i in 1..=ROUNDS {
                        start.wait();
                        let r = ran.clone();
                        engine.push_sync(move |_| r.store(i, Ordering::Release), &[], &[v]).unwrap();
                        assert!(
                            within_deadline(|| ran.load(Ordering::Acquire) == i),
                            "{kind:?}: thread {t}'s push {i} never ran (stranded on the dispatcher)"
                        );
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
            // Not a wait on the engine: a waiting thread would run the child.
            let parent_done = within_deadline(|| Arc::strong_count(&child_ran) == 1);
            assert!(
                parent_done && parent_saw.load(Ordering::Acquire),
                "{kind:?} round {round}: the child waited for its parent's worker"
            );
        }
        // The engine holds itself through the bodies only while they run.
        drop(Arc::try_unwrap(engine).ok());
    }
}

/// `wait_all` covers a push made by a completion's thread just before it
/// signals, even while that push is still on its dispatch shard's stack
/// (a third thread combining that shard): `wait_all` began before the push, so its
/// flush of the dispatcher did not see it, and the parent's completion
/// may bring the pending count to zero before the child is dispatched
/// (mutant `wait_all_ignores_delegated_pushes`; the loom model
/// `wait_all_waits_for_a_delegated_child_push` is its exhaustive twin).
#[test]
fn wait_all_covers_a_child_pushed_just_before_its_parent_completes() {
    const ROUNDS: usize = 3_000;
    for kind in [EngineKind::Naive, EngineKind::Pooled, EngineKind::PerDevice] {
        let engine = Arc::new(common::engine(kind));
        let stop = Arc::new(AtomicBool::new(false));
        // The child's variable. The busy thread pushes to it first, which
        // places it in that thread's dispatch shard, so that the child's
        // pushes meet the busy thread's combiner.
        let child_var = engine.new_var();
        let (placed, is_placed) = mpsc::channel::<()>();
        // Keeps the shard's combiner busy, so that the child's push is
        // often delegated to it: each of its pushes writes many variables,
        // so its dispatch (the window in which a push waits on the stack)
        // is long.
        let (e, st) = (engine.clone(), stop.clone());
        let busy = std::thread::spawn(move || {
            e.push_sync(|_| {}, &[], &[child_var]).unwrap();
            placed.send(()).unwrap();
            let vars: Vec<_> = (0..32).map(|_| e.new_var()).collect();
            while !st.load(Ordering::Relaxed) {
                e.push_sync(|_| {}, &[], &vars).unwrap();
                // `wait_all` returns once nothing at all is pending: a
                // thread pushing without pause held it off for seconds
                // at a time. Waiting here lets the count reach zero
                // between these pushes (and takes the combiner too).
                e.wait_var(vars[0]).unwrap();
            }
        });
        is_placed.recv().unwrap();
        let (to_signaller, jobs) = mpsc::channel::<(Completion, usize)>();
        let child_ran = Arc::new(AtomicUsize::new(0));
        let (e, c) = (engine.clone(), child_ran.clone());
        let signaller = std::thread::spawn(move || {
            let v = child_var;
            for (done, round) in jobs {
                let c = c.clone();
                e.push_sync(move |_| c.store(round, Ordering::Release), &[], &[v]).unwrap();
                done.signal();
            }
        });
        for round in 1..=ROUNDS {
            let tx = to_signaller.clone();
            engine.push_async(move |_, done| tx.send((done, round)).unwrap(), &[], &[]).unwrap();
            engine.wait_all().unwrap();
            assert_eq!(child_ran.load(Ordering::Acquire), round, "{kind:?}: wait_all returned before the child ran");
        }
        drop(to_signaller);
        signaller.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        busy.join().unwrap();
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
