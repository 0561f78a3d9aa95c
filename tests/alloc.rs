//! Zero heap allocations per operation in steady state (SPEC §5), proven
//! with a counting global allocator: after warm-up, 100,000 push → run →
//! complete cycles of synchronous, asynchronous and prebuilt operations on
//! the pooled engine allocate nothing, on any thread.

use depengine::{Context, Engine, EngineKind, FnProperty, Var};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const BATCH: usize = 1_000;
const CYCLES: usize = 100_000;

static SINK: AtomicU64 = AtomicU64::new(0);
static GATE: AtomicBool = AtomicBool::new(false);

/// One batch: sync, async and prebuilt pushes over a few vars, then waits.
fn batch(engine: &Engine, vars: &[Var], op: &depengine::Operator) {
    for i in 0..BATCH {
        let (r, w) = (vars[i % vars.len()], vars[(i + 1) % vars.len()]);
        match i % 3 {
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
            _ => engine.push_op(op, Context::cpu(), 0).unwrap(),
        }
    }
    engine.wait_var(vars[0]).unwrap();
    engine.wait_all().unwrap();
}

#[test]
fn steady_state_push_run_complete_allocates_nothing() {
    let engine = Engine::builder().kind(EngineKind::Pooled).cpu_workers(2).build().unwrap();
    let vars: Vec<Var> = (0..4).map(|_| engine.new_var()).collect();
    let gate = engine.new_var();
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
        batch(&engine, &vars, &op);
    }

    let before = ALLOCATIONS.load(Ordering::SeqCst);
    for _ in 0..CYCLES / BATCH {
        batch(&engine, &vars, &op);
    }
    let allocations = ALLOCATIONS.load(Ordering::SeqCst) - before;
    assert_eq!(allocations, 0, "{allocations} heap allocations in {CYCLES} steady-state cycles");
    assert!(engine.var_version(vars[1]).unwrap() > CYCLES as u64 / 8);
}
