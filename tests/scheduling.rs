//! One test per scheduling rule, each asserting the observable
//! order or value, run on every engine unless the rule needs parallelism.

mod common;

use common::{engines, eventually, parallel_engines, Log};
use depengine::{Context, EngineKind, FnProperty, PushOpts};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(10);

#[test]
fn writes_run_in_push_order() {
    for engine in engines() {
        let v = engine.new_var();
        let seen = Arc::new(Mutex::new(Vec::new()));
        for i in 0..500 {
            let seen = seen.clone();
            engine.push_sync(move |_| seen.lock().unwrap().push(i), &[], &[v]).unwrap();
        }
        engine.wait_var(v).unwrap();
        assert_eq!(*seen.lock().unwrap(), (0..500).collect::<Vec<_>>(), "{:?}", engine.kind());
    }
}

#[test]
fn write_waits_for_every_earlier_read_and_read_for_earlier_write() {
    for engine in engines() {
        let v = engine.new_var();
        let log = Log::default();
        let l = log.clone();
        engine
            .push_sync(
                move |_| {
                    std::thread::sleep(Duration::from_millis(5));
                    l.mark("w1 end")
                },
                &[],
                &[v],
            )
            .unwrap();
        for r in ["r1", "r2"] {
            let l = log.clone();
            engine
                .push_sync(
                    move |_| {
                        l.mark(format!("{r} start"));
                        std::thread::sleep(Duration::from_millis(5));
                        l.mark(format!("{r} end"));
                    },
                    &[v],
                    &[],
                )
                .unwrap();
        }
        let l = log.clone();
        engine.push_sync(move |_| l.mark("w2 start"), &[], &[v]).unwrap();
        engine.wait_all().unwrap();
        let kind = engine.kind();
        assert!(log.at("r1 start") > log.at("w1 end"), "{kind:?}: read before the earlier write ended");
        assert!(log.at("r2 start") > log.at("w1 end"), "{kind:?}: read before the earlier write ended");
        assert!(log.at("w2 start") > log.at("r1 end"), "{kind:?}: write before an earlier read ended");
        assert!(log.at("w2 start") > log.at("r2 end"), "{kind:?}: write before an earlier read ended");
    }
}

#[test]
fn consecutive_reads_run_concurrently() {
    for engine in parallel_engines() {
        let v = engine.new_var();
        let started = Arc::new(AtomicUsize::new(0));
        let overlapped = Arc::new(AtomicBool::new(true));
        for _ in 0..2 {
            let (s, o) = (started.clone(), overlapped.clone());
            engine
                .push_sync(
                    move |_| {
                        s.fetch_add(1, Ordering::SeqCst);
                        // Each read waits (bounded) until the other has started.
                        if !eventually(LIMIT, || s.load(Ordering::SeqCst) == 2) {
                            o.store(false, Ordering::SeqCst);
                        }
                    },
                    &[v],
                    &[],
                )
                .unwrap();
        }
        engine.wait_all().unwrap();
        assert!(overlapped.load(Ordering::SeqCst), "{:?}: two reads did not overlap", engine.kind());
    }
}

#[test]
fn independent_operations_run_in_parallel() {
    for engine in parallel_engines() {
        let (a, b) = (engine.new_var(), engine.new_var());
        let gate = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicBool::new(false));
        let (g, o) = (gate.clone(), ok.clone());
        // The first body only ends once the second (on another var) ran.
        engine
            .push_sync(move |_| o.store(eventually(LIMIT, || g.load(Ordering::SeqCst)), Ordering::SeqCst), &[], &[a])
            .unwrap();
        let g = gate.clone();
        engine.push_sync(move |_| g.store(true, Ordering::SeqCst), &[], &[b]).unwrap();
        engine.wait_all().unwrap();
        assert!(ok.load(Ordering::SeqCst), "{:?}: independent ops serialized", engine.kind());
    }
}

#[test]
fn repeated_and_overlapping_vars_are_one_dependency() {
    for engine in engines() {
        let v = engine.new_var();
        // MXNet deadlocks on a var that is both read and written.
        engine.push_sync(|_| {}, &[v, v, v], &[v, v]).unwrap();
        engine.push_sync(|_| {}, &[v], &[v]).unwrap();
        engine.wait_to_write(v).unwrap();
        assert_eq!(engine.var_version(v).unwrap(), 2, "{:?}: one write each", engine.kind());
    }
}

#[test]
fn operation_without_vars_runs() {
    for engine in engines() {
        let hits = Arc::new(AtomicUsize::new(0));
        for _ in 0..100 {
            let h = hits.clone();
            engine
                .push_sync(
                    move |_| {
                        h.fetch_add(1, Ordering::SeqCst);
                    },
                    &[],
                    &[],
                )
                .unwrap();
        }
        engine.wait_all().unwrap();
        assert_eq!(hits.load(Ordering::SeqCst), 100);
    }
}

#[test]
fn version_counts_completed_writes_only() {
    for engine in engines() {
        let (v, w) = (engine.new_var(), engine.new_var());
        assert_eq!(engine.var_version(v).unwrap(), 0);
        for _ in 0..7 {
            engine.push_sync(|_| {}, &[v], &[w]).unwrap();
        }
        engine.push_sync(|_| {}, &[], &[v]).unwrap();
        engine.wait_all().unwrap();
        assert_eq!(engine.var_version(v).unwrap(), 1, "reads leave the version alone");
        assert_eq!(engine.var_version(w).unwrap(), 7);
    }
}

#[test]
fn wait_var_waits_for_writes_and_wait_to_write_for_reads_too() {
    for engine in engines() {
        let v = engine.new_var();
        let done = Arc::new(AtomicU64::new(0));
        let d = done.clone();
        engine
            .push_sync(
                move |_| {
                    std::thread::sleep(Duration::from_millis(20));
                    d.store(1, Ordering::SeqCst)
                },
                &[],
                &[v],
            )
            .unwrap();
        engine.wait_var(v).unwrap();
        assert_eq!(done.load(Ordering::SeqCst), 1, "{:?}: wait_var returned before the write", engine.kind());
        let d = done.clone();
        engine
            .push_sync(
                move |_| {
                    std::thread::sleep(Duration::from_millis(20));
                    d.store(2, Ordering::SeqCst)
                },
                &[v],
                &[],
            )
            .unwrap();
        engine.wait_to_write(v).unwrap();
        assert_eq!(done.load(Ordering::SeqCst), 2, "{:?}: wait_to_write returned before the read", engine.kind());
        assert_eq!(engine.var_version(v).unwrap(), 1, "waits are not writes");
    }
}

#[test]
fn wait_all_waits_for_everything_pushed() {
    for engine in engines() {
        let hits = Arc::new(AtomicUsize::new(0));
        let vars: Vec<_> = (0..8).map(|_| engine.new_var()).collect();
        for i in 0..400 {
            let h = hits.clone();
            engine
                .push_sync(
                    move |_| {
                        h.fetch_add(1, Ordering::SeqCst);
                    },
                    &[vars[i % 8]],
                    &[vars[(i + 1) % 8]],
                )
                .unwrap();
        }
        engine.wait_all().unwrap();
        assert_eq!(hits.load(Ordering::SeqCst), 400);
        assert_eq!(engine.pending(), 0);
    }
}

#[test]
fn nested_pushes_keep_order_and_may_wait() {
    for engine in engines() {
        let engine = Arc::new(engine);
        let (v, w) = (engine.new_var(), engine.new_var());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (e, s) = (engine.clone(), seen.clone());
        engine
            .push_sync(
                move |_| {
                    s.lock().unwrap().push("outer");
                    for i in 0..3 {
                        let s = s.clone();
                        e.push_sync(move |_| s.lock().unwrap().push(["n0", "n1", "n2"][i]), &[], &[v]).unwrap();
                    }
                    // A wait on a var this body does not hold is fine.
                    let s2 = s.clone();
                    e.push_sync(move |_| s2.lock().unwrap().push("w"), &[], &[w]).unwrap();
                    e.wait_var(w).unwrap();
                    s.lock().unwrap().push("after wait");
                },
                &[],
                &[v],
            )
            .unwrap();
        engine.wait_all().unwrap();
        let seen = seen.lock().unwrap().clone();
        let pos = |x: &str| seen.iter().position(|s| *s == x).unwrap();
        assert!(pos("outer") < pos("n0") && pos("n0") < pos("n1") && pos("n1") < pos("n2"), "{seen:?}");
        assert!(pos("w") < pos("after wait"), "{seen:?}");
        assert_eq!(engine.var_version(v).unwrap(), 4);
    }
}

#[test]
fn async_completion_from_another_thread_releases_the_var() {
    for engine in engines() {
        let v = engine.new_var();
        let value = Arc::new(AtomicU64::new(0));
        let val = value.clone();
        engine
            .push_async(
                move |_, done| {
                    std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_millis(10));
                        val.store(42, Ordering::SeqCst);
                        done.signal();
                    });
                },
                &[],
                &[v],
            )
            .unwrap();
        let (val, seen) = (value.clone(), Arc::new(AtomicU64::new(0)));
        let s = seen.clone();
        engine.push_sync(move |_| s.store(val.load(Ordering::SeqCst), Ordering::SeqCst), &[v], &[]).unwrap();
        engine.wait_all().unwrap();
        assert_eq!(seen.load(Ordering::SeqCst), 42, "{:?}: reader ran before the async write completed", engine.kind());
    }
}

#[test]
fn prebuilt_operator_pushes_share_one_closure_and_delete_is_deferred() {
    for engine in engines() {
        let v = engine.new_var();
        let count = Arc::new(AtomicU64::new(0));
        let c = count.clone();
        let op = engine
            .new_operator(
                move |_| {
                    c.fetch_add(1, Ordering::SeqCst);
                },
                &[],
                &[v],
                FnProperty::Normal,
                "count",
            )
            .unwrap();
        for _ in 0..50 {
            engine.push_op(&op, Context::cpu(), 0).unwrap();
        }
        engine.delete_operator(op);
        engine.wait_all().unwrap();
        assert_eq!(count.load(Ordering::SeqCst), 50);
        assert_eq!(engine.var_version(v).unwrap(), 50);
        assert_eq!(Arc::strong_count(&count), 1, "the deleted operator's closure was dropped");
    }
}

#[test]
fn async_operator_completes_through_its_completion() {
    for engine in engines() {
        let v = engine.new_var();
        let op = engine.new_async_operator(|_, done| done.signal(), &[], &[v], FnProperty::Async, "async-op").unwrap();
        for _ in 0..10 {
            engine.push_op(&op, Context::cpu(), 0).unwrap();
        }
        engine.wait_var(v).unwrap();
        assert_eq!(engine.var_version(v).unwrap(), 10);
    }
}

#[test]
fn delete_var_waits_for_pending_operations_then_calls_back() {
    for engine in engines() {
        let v = engine.new_var();
        let log = Log::default();
        for i in 0..3 {
            let l = log.clone();
            engine
                .push_sync(
                    move |_| {
                        std::thread::sleep(Duration::from_millis(3));
                        l.mark(format!("op{i}"))
                    },
                    &[v],
                    &[],
                )
                .unwrap();
        }
        let l = log.clone();
        engine.delete_var(v, move || l.mark("deleted")).unwrap();
        engine.wait_all().unwrap();
        for i in 0..3 {
            assert!(log.at("deleted") > log.at(&format!("op{i}")), "{:?}", log.names());
        }
        let before = engine.pool_stats();
        // The slot is reused by a new var; the stale handle stays dead.
        let fresh = engine.new_var();
        assert_eq!(engine.var_version(fresh).unwrap(), 0);
        assert!(engine.var_version(v).is_err());
        assert_eq!(engine.pool_stats().live_vars, before.live_vars + 1);
    }
}

#[test]
fn options_reach_the_body() {
    for engine in engines() {
        let got = Arc::new(Mutex::new(None));
        let g = got.clone();
        let opts = PushOpts::new().priority(7).name("probe").ctx(Context::Cpu(0)).prop(FnProperty::CpuPrioritized);
        engine
            .push_sync_with(move |ctx| *g.lock().unwrap() = Some((ctx.priority(), ctx.ctx())), &[], &[], opts)
            .unwrap();
        engine.wait_all().unwrap();
        assert_eq!(*got.lock().unwrap(), Some((7, Context::Cpu(0))));
    }
}

/// The pooled engine's copy pool (per_device runs CPU-context copies on its
/// CPU workers; its copy rings are per GPU).
#[test]
fn copy_operations_run_on_the_copy_pool() {
    let engine = common::engine(EngineKind::Pooled);
    let v = engine.new_var();
    let worker = Arc::new(Mutex::new(None));
    let w = worker.clone();
    let opts = PushOpts::new().prop(FnProperty::CopyToGpu);
    engine.push_sync_with(move |ctx| *w.lock().unwrap() = ctx.worker(), &[], &[v], opts).unwrap();
    engine.wait_all().unwrap();
    let id = worker.lock().unwrap().expect("ran on a worker");
    assert!(id >= engine.cpu_workers(), "copy op ran on cpu worker {id}");
}

#[test]
fn tickets_follow_push_order_from_one_thread() {
    for engine in engines() {
        let tickets = Arc::new(Mutex::new(Vec::new()));
        for _ in 0..200 {
            let t = tickets.clone();
            engine.push_sync(move |ctx| t.lock().unwrap().push(ctx.ticket()), &[], &[]).unwrap();
        }
        engine.wait_all().unwrap();
        let mut t = tickets.lock().unwrap().clone();
        t.sort_unstable();
        t.dedup();
        assert_eq!(t.len(), 200, "tickets are unique");
        assert!(t.windows(2).all(|w| w[0] < w[1]));
    }
}

/// After a long run of push-then-wait round trips, which the waiting
/// thread runs itself (pooled's spinners then nap, still counted as
/// spinning), work still runs without anyone waiting for it: an operation
/// pushed by that thread right after a wait, which spinners leave to it,
/// and one pushed by another thread.
#[test]
fn work_pushed_after_round_trips_runs_without_a_wait() {
    for engine in parallel_engines() {
        let v = engine.new_var();
        let round_trips = || {
            for _ in 0..20_000 {
                engine.push_sync(|_| {}, &[], &[v]).unwrap();
                engine.wait_var(v).unwrap();
            }
        };
        round_trips();
        // The first push after a wait is marked as this thread's own.
        let left = Arc::new(AtomicBool::new(false));
        let l = left.clone();
        engine.push_sync(move |_| l.store(true, Ordering::SeqCst), &[], &[v]).unwrap();
        assert!(
            eventually(LIMIT, || left.load(Ordering::SeqCst)),
            "{:?}: an operation its pusher did not wait for never ran",
            engine.kind()
        );
        round_trips();
        let other = Arc::new(AtomicBool::new(false));
        let o = other.clone();
        std::thread::scope(|s| {
            s.spawn(|| engine.push_sync(move |_| o.store(true, Ordering::SeqCst), &[], &[]).unwrap());
        });
        assert!(
            eventually(LIMIT, || other.load(Ordering::SeqCst)),
            "{:?}: another thread's operation never ran",
            engine.kind()
        );
        engine.wait_all().unwrap();
    }
}
