//! Zero heap allocations per operation in steady state, proven
//! with a counting global allocator: after warm-up, 100,000 push → run →
//! complete cycles of synchronous, asynchronous, prebuilt and typed
//! operations, and the futures that await them, on
//! the pooled and per_device engines allocate nothing, on any thread — with
//! the profiler off, with it recording every operation, and with the
//! pusher running the operations itself in stints (`pusher_runs.rs`). (Up to three
//! such windows are taken, for a thread's one-time set-up that lands late
//! when all threads share one core; one must allocate nothing.)

use alloc_count::{allocations, CountingAlloc};
use depengine::{Context, Data, Engine, EngineKind, FnProperty, Var};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const BATCH: usize = 1_000;
const CYCLES: usize = 100_000;
/// Measured windows of `CYCLES` at most (see `steady_state`).
const WINDOWS: usize = 3;

static SINK: AtomicU64 = AtomicU64::new(0);
static GATE: AtomicBool = AtomicBool::new(false);

/// One batch: sync, async and prebuilt pushes over a few vars, then waits.
fn batch(engine: &Engine, vars: &[Var], op: &depengine::Operator, data: &[Data<u64>; 2]) {
    for i in 0..BATCH {
        let (r, w) = (vars[i % vars.len()], vars[(i + 1) % vars.len()]);
        match i % 5 {
            0 => engine
                .push_sync(
                    move |_| {
                        SINK.fetch_add(i as u64, Ordering::Relaxed);
                    },
                    &[r],
                    &[w],
                )
                .unwrap(),
            1 => engine
                .push_async(
                    move |_, done| {
                        SINK.fetch_add(1, Ordering::Relaxed);
                        done.signal()
                    },
                    &[r],
                    &[w],
                )
                .unwrap(),
            2 => engine.push_op(op, Context::cpu(), 0).unwrap(),
            // Typed data: the body gets the values, and the push stores raw
            // pointers to them, not reference counts.
            3 => engine.push_data(&data[0], &data[1], |_, a, b| *b = b.wrapping_add(*a)).unwrap(),
            // An asynchronous typed operation: its access owns the completion.
            _ => engine
                .push_data_async(&data[1], &data[0], |_, mut access| {
                    let (b, a) = access.get();
                    *a = a.wrapping_add(*b & 1);
                    access.signal();
                })
                .unwrap(),
        }
    }
    engine.wait_var(vars[0]).unwrap();
    // The futures: each pushes a marker answered through a pooled wait slot.
    poll_to_end(engine.wait_var_async(vars[1])).unwrap();
    drop(poll_to_end(data[1].read_async()).unwrap());
    poll_to_end(engine.wait_all_async()).unwrap();
    engine.wait_all().unwrap();
}

/// Polls `future` with a waker that allocates nothing until it resolves.
fn poll_to_end<F: std::future::Future>(future: F) -> F::Output {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::hint::spin_loop();
    }
}

/// One test for both cases: the allocation counter is process-wide, so two
/// tests running at once would count each other's allocations.
#[test]
fn steady_state_push_run_complete_allocates_nothing() {
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        steady_state(kind, false, false);
        steady_state(kind, true, false);
        steady_state(kind, false, true);
    }
}

/// With `stints`, a long inline pace makes the pusher probe early, and its
/// stints run the batches' operations inside their pushes; without, the
/// pace is off, and so are stints.
fn steady_state(kind: EngineKind, profile: bool, stints: bool) {
    // The warm-up holds 2 × BATCH operations behind a body that spins until
    // this thread opens it. Above the pending cap this thread would help run
    // ready work, the blocker included, and spin in it for ever: the cap
    // must leave room for the whole warm-up.
    let builder = Engine::builder().kind(kind).cpu_workers(2).max_pending(4 * BATCH as u64);
    let pace = if stints { Duration::from_secs(1) } else { Duration::ZERO };
    let engine = builder.inline_pace(pace).run_on_pusher(stints).build().unwrap();
    if profile {
        engine.start_profiling();
    }
    GATE.store(false, Ordering::Release);
    let vars: Vec<Var> = (0..4).map(|_| engine.new_var()).collect();
    let gate = engine.new_var();
    let data = [engine.data(1u64), engine.data(0u64)];
    let op = engine
        .new_operator(
            |_| {
                SINK.fetch_add(1, Ordering::Relaxed);
            },
            &[vars[2]],
            &[vars[3]],
            FnProperty::Normal,
            "op",
        )
        .unwrap();

    // Warm-up: hold a whole batch (and more) behind a gate so that every
    // pool reaches the high-water mark a batch can need, then run batches
    // until every worker has touched its thread-locals.
    engine
        .push_sync(
            |_| {
                while !GATE.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
            },
            &[],
            &[gate],
        )
        .unwrap();
    for _ in 0..2 * BATCH {
        engine.push_sync(|_| {}, &[gate], &[vars[0], vars[1]]).unwrap();
    }
    GATE.store(true, Ordering::Release);
    engine.wait_all().unwrap();
    for _ in 0..5 {
        batch(&engine, &vars, &op, &data);
    }

    // A thread's one-time set-up (std's thread record when a worker first
    // runs, crossbeam-epoch's registration at a thread's first steal) lands
    // late when every thread shares one core, but only once: so the test
    // takes up to WINDOWS windows and needs one that allocates nothing. An
    // allocation per operation, or one that recurs, shows in every window.
    let mut counts = Vec::new();
    for window in 0..WINDOWS {
        // In the last window, an allocation prints where it happened (the
        // trace's own allocations then add to that window's count).
        alloc_count::trace_next_allocation(window + 1 == WINDOWS);
        let before = allocations();
        for _ in 0..CYCLES / BATCH {
            batch(&engine, &vars, &op, &data);
        }
        counts.push(allocations() - before);
        alloc_count::trace_next_allocation(false);
        if counts.last() == Some(&0) {
            break;
        }
    }
    assert_eq!(
        counts.last(),
        Some(&0),
        "{kind:?}: heap allocations in successive windows of {CYCLES} steady-state cycles: {counts:?} \
         (profiling: {profile}, stints: {stints})"
    );
    assert_eq!(engine.stats().stints > 0, stints, "{kind:?}: stints while asked for {stints}");
    // A tenth of the operations write vars[1] (i % 4 == 0, i % 5 < 2).
    assert!(engine.var_version(vars[1]).unwrap() > CYCLES as u64 / 16);
    if profile {
        let recorded = engine.stop_profiling();
        assert!(recorded.events.len() + recorded.dropped as usize >= CYCLES, "every operation was recorded");
    }
}
