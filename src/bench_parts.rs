//! Criterion benchmarks of the engine's parts (feature `bench-internals`),
//! called from `benches/*.rs`. They live inside the crate because the parts
//! are private; each function registers one family of benchmarks.
//!
//! Run: `cargo bench -p depengine --features bench-internals --bench '*'`
//! (about a minute; `-- --quick` after it for a smoke run: `--bench '*'`
//! keeps the library's own test harness, which has no such flag, out).

use crate::base::context::{Context, RunContext};
use crate::exec::park::Sleep;
use crate::exec::ready_ring::ReadyRing;
use crate::graph::var_queue::{QueueHalves, VarBlock};
use crate::mem::inline_fn::InlineFn;
use crate::mem::pool::{Pool, Tagged};
use crate::mem::sweep::SweepCache;
use criterion::{BenchmarkId, Criterion};
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

/// The variable queue's four transitions, one thread (the uncontended
/// floor): a write appended to an idle queue (granted at once) and
/// completed with nobody waiting; a write appended behind it (queued) and
/// granted by that completion; reads joining reads; a read completing and
/// granting a queued write.
pub fn var_queue(c: &mut Criterion) {
    let blocks: Pool<VarBlock> = Pool::new();
    let halves = QueueHalves::default();
    let q = halves.queue();
    let mut spares = SweepCache::default();
    // One thread plays both the appender and the granter throughout, so the
    // queue's single-appender and single-granter contracts hold; every
    // completion below completes an access this thread holds, and every
    // benchmark leaves the queue idle for the next.
    // SAFETY: the queue is new and only this thread touches it.
    unsafe { q.reset(&blocks) };
    let mut g = c.benchmark_group("var_queue");
    g.bench_function("append write (granted) + complete write (grants none)", |b| {
        // SAFETY: the write appended here is the one completed.
        b.iter(|| unsafe {
            assert!(q.append(&blocks, &mut spares, 1, true));
            black_box(q.complete_write(&blocks).count());
        })
    });
    g.bench_function("append write (queued) + complete write (grants it)", |b| {
        // SAFETY: the queue is idle; this write is granted and held.
        unsafe { assert!(q.append(&blocks, &mut spares, 1, true)) };
        // SAFETY: a write is held; completing it grants the one appended,
        // which is then held for the next round.
        b.iter(|| unsafe {
            assert!(!q.append(&blocks, &mut spares, 2, true));
            assert_eq!(q.complete_write(&blocks).count(), 1);
        });
        // SAFETY: completes the write still held, leaving the queue idle.
        unsafe { black_box(q.complete_write(&blocks).count()) };
    });
    g.bench_function("append read (joins reads) + complete read", |b| {
        // SAFETY: the queue is idle; this read is granted and held.
        unsafe { assert!(q.append(&blocks, &mut spares, 1, false)) };
        // SAFETY: a read is held; the appended read joins it and one read
        // is completed, so one stays held.
        b.iter(|| unsafe {
            assert!(q.append(&blocks, &mut spares, 2, false));
            black_box(q.complete_read(&blocks).count());
        });
        // SAFETY: completes the read still held, leaving the queue idle.
        unsafe { black_box(q.complete_read(&blocks).count()) };
    });
    g.bench_function("append read + write (queued) + complete read (grants the write) + complete write", |b| {
        // SAFETY: from an idle queue: the read is granted, the write queues
        // behind it and is granted by the read's completion, then completed.
        b.iter(|| unsafe {
            assert!(q.append(&blocks, &mut spares, 1, false));
            assert!(!q.append(&blocks, &mut spares, 2, true));
            assert_eq!(q.complete_read(&blocks).count(), 1);
            black_box(q.complete_write(&blocks).count());
        })
    });
    g.finish();
}

/// Pool take and give back: on one thread, and taken on one thread while
/// another gives back (each index crosses cores twice).
pub fn pool(c: &mut Criterion) {
    let mut g = c.benchmark_group("pool");
    let pool: Pool<Tagged> = Pool::new();
    g.bench_function("take + give, same thread", |b| {
        b.iter(|| {
            let i = pool.take();
            pool.give(black_box(i));
        })
    });
    let pool = Arc::new(pool);
    let ring = Arc::new(ReadyRing::new(1024));
    let stop = Arc::new(AtomicBool::new(false));
    let giver = {
        let (pool, ring, stop) = (pool.clone(), ring.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match ring.pop() {
                    Some(i) => pool.give(i),
                    None => std::hint::spin_loop(),
                }
            }
        })
    };
    g.bench_function("take here, give on another thread", |b| {
        b.iter(|| {
            let mut i = pool.take();
            while let Err(back) = ring.push(i) {
                i = back;
                std::hint::spin_loop();
            }
        })
    });
    stop.store(true, Ordering::Relaxed);
    giver.join().unwrap();
    g.finish();
}

/// Storing a closure inline in an operation block and calling it.
pub fn inline_fn(c: &mut Criterion) {
    let ctx = RunContext::on_host(Context::cpu());
    let mut g = c.benchmark_group("inline_fn");
    for captured in [8usize, 48] {
        g.bench_with_input(BenchmarkId::new("store + invoke, captured bytes", captured), &captured, |b, &n| {
            let bytes = [7u8; 48];
            b.iter(|| {
                let data = black_box(bytes);
                let mut f = InlineFn::new_sync(move |_: &RunContext| {
                    black_box(&data[..n]);
                });
                // Opaque to the optimizer, as a block in the pool is: the
                // call goes through the stored vtable (with fat LTO the
                // direct version folded to nothing, 0.3 ns).
                black_box(black_box(&mut f).invoke(&ctx, None)).ok();
            })
        });
    }
    g.finish();
}

/// The per_device engine's queues: its work-stealing deque (crossbeam) and
/// the bounded ready ring used as injector (and by the pooled engine).
pub fn queues(c: &mut Criterion) {
    let mut g = c.benchmark_group("queues");
    let deque = crossbeam_deque::Worker::<u32>::new_lifo();
    let stealer = deque.stealer();
    g.bench_function("deque push + pop (owner)", |b| {
        b.iter(|| {
            deque.push(black_box(1));
            black_box(deque.pop());
        })
    });
    g.bench_function("deque push + steal", |b| {
        b.iter(|| {
            deque.push(black_box(1));
            black_box(stealer.steal().success());
        })
    });
    let ring = ReadyRing::new(1024);
    g.bench_function("ready ring push + pop", |b| {
        b.iter(|| {
            ring.push(black_box(1)).unwrap();
            black_box(ring.pop());
        })
    });
    g.finish();
}

/// A parked thread woken and answering: the futex round trip a parked
/// worker costs (`park.rs`).
pub fn park_wake(c: &mut Criterion) {
    let sleep = Arc::new(Sleep::new(1, false));
    let flag = Arc::new(AtomicU32::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sleeper = {
        let (sleep, flag, stop) = (sleep.clone(), flag.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                if flag.load(Ordering::SeqCst) == 1 {
                    flag.store(2, Ordering::SeqCst);
                } else {
                    sleep.park(|| flag.load(Ordering::SeqCst) == 1 || stop.load(Ordering::SeqCst));
                }
            }
        })
    };
    c.bench_function("park/wake round trip", |b| {
        b.iter(|| {
            flag.store(1, Ordering::SeqCst);
            sleep.notify_one(false);
            while flag.load(Ordering::SeqCst) != 2 {
                std::hint::spin_loop();
            }
            flag.store(0, Ordering::SeqCst);
        })
    });
    stop.store(true, Ordering::SeqCst);
    sleep.notify_all();
    sleeper.join().unwrap();
}

/// A push → run → complete round trip on each engine, from the pushing
/// thread's point of view: push a write of one variable and wait for it.
pub fn round_trip(c: &mut Criterion) {
    let mut g = c.benchmark_group("push + wait_var round trip");
    for kind in crate::EngineKind::ALL {
        let engine = crate::Engine::builder().kind(kind).build().expect("engine");
        let v = engine.new_var();
        g.bench_function(kind.name(), |b| {
            b.iter(|| {
                engine.push_sync(|_| {}, &[], &[v]).unwrap();
                engine.wait_var(v).unwrap();
            })
        });
    }
    g.finish();
}

/// What typed data adds to a push: one push of an operation that reads one
/// variable and writes another, run at once on the `naive` engine (push,
/// dispatch, run and complete on this thread), untyped and typed.
pub fn typed_push(c: &mut Criterion) {
    let mut g = c.benchmark_group("push, read one and write one (naive)");
    let engine = crate::Engine::builder().kind(crate::EngineKind::Naive).build().expect("engine");
    static SINK: AtomicU32 = AtomicU32::new(0);
    let (a, b) = (engine.new_var(), engine.new_var());
    g.bench_function("untyped", |bench| {
        bench.iter(|| {
            engine
                .push_sync(
                    |_| {
                        SINK.fetch_add(1, Ordering::Relaxed);
                    },
                    &[a],
                    &[b],
                )
                .unwrap()
        })
    });
    let (x, y) = (engine.data(1u32), engine.data(0u32));
    g.bench_function("typed", |bench| bench.iter(|| engine.push_data(&x, &y, |_, x, y| *y += *x).unwrap()));
    g.finish();
}

/// The settings that keep the whole suite within a few minutes on a
/// 2-core machine.
pub fn config() -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(1))
        .without_plots()
}
