//! Failures and bad input: each rule checked for the value or
//! error it must produce, on every engine.

mod common;

use common::engines;
use depengine::{Context, EngineError, EngineKind, FnProperty, PushOpts, RunContext};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A body that panics with `msg`.
fn boom(msg: &'static str) -> impl FnOnce(&RunContext) + Send + 'static {
    move |_| panic!("{msg}")
}

fn failed_op(err: EngineError) -> (String, String) {
    match err {
        EngineError::OpFailed(e) => (e.op_name().to_owned(), e.message().to_owned()),
        other => panic!("expected an operation failure, got {other:?}"),
    }
}

#[test]
fn panic_is_recorded_on_written_vars_and_the_engine_survives() {
    for engine in engines() {
        let (a, b) = (engine.new_var(), engine.new_var());
        engine.push_sync_with(boom("kaboom"), &[], &[a], PushOpts::new().name("bad")).unwrap();
        let (name, msg) = failed_op(engine.wait_var(a).unwrap_err());
        assert_eq!(name, "bad");
        assert!(msg.contains("kaboom"), "{msg}");
        // The engine keeps working, and b is unaffected.
        engine.push_sync(|_| {}, &[], &[b]).unwrap();
        engine.wait_var(b).unwrap();
        let _ = engine.wait_all();
    }
}

#[test]
fn returned_error_fails_like_a_panic() {
    for engine in engines() {
        let a = engine.new_var();
        engine.push_sync_with(|_| Err::<(), _>("disk full"), &[], &[a], PushOpts::new().name("save")).unwrap();
        assert_eq!(failed_op(engine.wait_var(a).unwrap_err()), ("save".into(), "disk full".into()));
        let _ = engine.wait_all();
    }
}

#[test]
fn readers_of_a_failed_var_are_skipped_and_pass_the_first_failure_on() {
    for engine in engines() {
        let (a, b, c) = (engine.new_var(), engine.new_var(), engine.new_var());
        let ran = Arc::new(AtomicUsize::new(0));
        engine.push_sync_with(|_| Err::<(), _>("root cause"), &[], &[a], PushOpts::new().name("first")).unwrap();
        let r = ran.clone();
        engine
            .push_sync_with(
                move |_| {
                    r.fetch_add(1, Ordering::SeqCst);
                },
                &[a],
                &[b],
                PushOpts::new().name("second"),
            )
            .unwrap();
        let r = ran.clone();
        engine
            .push_sync_with(
                move |_| {
                    r.fetch_add(1, Ordering::SeqCst);
                },
                &[b],
                &[c],
                PushOpts::new().name("third"),
            )
            .unwrap();
        let (name, msg) = failed_op(engine.wait_var(c).unwrap_err());
        assert_eq!((name.as_str(), msg.as_str()), ("first", "root cause"), "the first failure flows down");
        assert_eq!(ran.load(Ordering::SeqCst), 0, "{:?}: skipped bodies ran", engine.kind());
        let _ = engine.wait_all();
    }
}

#[test]
fn blind_write_clears_the_failure() {
    for engine in engines() {
        let a = engine.new_var();
        engine.push_sync(boom("x"), &[], &[a]).unwrap();
        assert!(engine.wait_var(a).is_err());
        engine.push_sync(|_| {}, &[], &[a]).unwrap();
        assert_eq!(engine.wait_var(a), Ok(()), "a successful blind write makes the value good again");
        let _ = engine.wait_all();
    }
}

#[test]
fn read_write_of_a_failed_var_is_skipped() {
    for engine in engines() {
        let a = engine.new_var();
        let ran = Arc::new(AtomicBool::new(false));
        engine.push_sync(boom("x"), &[], &[a]).unwrap();
        let r = ran.clone();
        engine.push_sync(move |_| r.store(true, Ordering::SeqCst), &[a], &[a]).unwrap();
        assert!(engine.wait_var(a).is_err(), "still failed");
        assert!(!ran.load(Ordering::SeqCst), "reading a failed var skips even when it also writes it");
        let _ = engine.wait_all();
    }
}

#[test]
fn no_skip_runs_despite_failed_inputs() {
    for engine in engines() {
        let (a, b) = (engine.new_var(), engine.new_var());
        let ran = Arc::new(AtomicBool::new(false));
        engine.push_sync(boom("x"), &[], &[a]).unwrap();
        let r = ran.clone();
        engine.push_sync_with(move |_| r.store(true, Ordering::SeqCst), &[a], &[b], PushOpts::new().no_skip()).unwrap();
        assert_eq!(engine.wait_var(b), Ok(()));
        assert!(ran.load(Ordering::SeqCst));
        let _ = engine.wait_all();
    }
}

#[test]
fn wait_all_reports_the_first_failure_once() {
    for engine in engines() {
        let (a, b) = (engine.new_var(), engine.new_var());
        engine.push_sync_with(boom("one"), &[], &[a], PushOpts::new().name("one")).unwrap();
        engine.wait_var(a).unwrap_err();
        engine.push_sync_with(boom("two"), &[], &[b], PushOpts::new().name("two")).unwrap();
        assert_eq!(failed_op(engine.wait_all().unwrap_err()).0, "one");
        assert_eq!(engine.wait_all(), Ok(()), "reported once, then cleared");
        // The variable itself still holds its failure.
        assert!(engine.wait_var(b).is_err());
    }
}

#[test]
fn dropped_completion_fails_the_operation_instead_of_hanging() {
    for engine in engines() {
        let a = engine.new_var();
        engine.push_async_with(|_, done| drop(done), &[], &[a], PushOpts::new().name("forgetful")).unwrap();
        let (name, msg) = failed_op(engine.wait_var(a).unwrap_err());
        assert_eq!(name, "forgetful");
        assert!(msg.contains("dropped"), "{msg}");
        let b = engine.new_var();
        engine.push_async_with(|_, _done| panic!("async boom"), &[], &[b], PushOpts::new().name("p")).unwrap();
        let (_, msg) = failed_op(engine.wait_var(b).unwrap_err());
        assert!(msg.contains("async boom"), "the panic message wins: {msg}");
        let c = engine.new_var();
        engine.push_async(|_, done| done.fail("device lost"), &[], &[c]).unwrap();
        assert_eq!(failed_op(engine.wait_var(c).unwrap_err()).1, "device lost");
        let _ = engine.wait_all();
    }
}

#[test]
fn deleted_foreign_and_twice_deleted_vars_are_errors() {
    let other = common::engine(EngineKind::Naive);
    for engine in engines() {
        let v = engine.new_var();
        engine.delete_var(v, || {}).unwrap();
        assert_eq!(engine.push_sync(|_| {}, &[v], &[]), Err(EngineError::DeletedVar));
        assert_eq!(engine.wait_var(v), Err(EngineError::DeletedVar));
        assert_eq!(engine.var_version(v), Err(EngineError::DeletedVar));
        assert_eq!(engine.delete_var(v, || {}), Err(EngineError::DeletedTwice));
        engine.wait_all().unwrap();
        assert_eq!(engine.delete_var(v, || {}), Err(EngineError::DeletedTwice), "after the slot was freed too");
        let foreign = other.new_var();
        assert_eq!(engine.push_sync(|_| {}, &[], &[foreign]), Err(EngineError::ForeignVar));
        assert_eq!(engine.wait_var(foreign), Err(EngineError::ForeignVar));
        assert_eq!(engine.pool_stats().live_ops, 0, "rejected pushes leave no block behind");
    }
}

#[test]
fn a_gpu_context_without_its_device_is_a_clear_error() {
    for engine in engines() {
        // gpu(0) on a machine without a GPU (or a build without `cuda`).
        let missing = engine.gpus() as u32;
        let v = engine.new_var();
        for prop in [FnProperty::Normal, FnProperty::CopyToGpu, FnProperty::GpuPrioritized] {
            let opts = PushOpts::new().ctx(Context::Gpu(missing)).prop(prop);
            match engine.push_sync_with(|_| {}, &[], &[v], opts) {
                Err(EngineError::NoSuchDevice(what)) => {
                    assert!(what.starts_with(&format!("gpu({missing}): ")), "{what}");
                    assert!(what.len() > 12, "the error says why: {what}");
                }
                other => panic!("{:?}: expected NoSuchDevice, got {other:?}", engine.kind()),
            }
        }
        // Refused, nothing lost: the variable is untouched and usable.
        assert_eq!(engine.var_version(v).unwrap(), 0);
        engine.push_sync(|_| {}, &[], &[v]).unwrap();
        engine.wait_all().unwrap();
        assert_eq!(engine.var_version(v).unwrap(), 1);
    }
}

#[test]
fn waiting_inside_an_operation_on_a_var_it_holds_is_an_error() {
    for engine in engines() {
        let engine = Arc::new(engine);
        let (a, b) = (engine.new_var(), engine.new_var());
        let got = Arc::new(Mutex::new(Vec::new()));
        let (e, g) = (engine.clone(), got.clone());
        engine
            .push_sync(
                move |_| {
                    let mut g = g.lock().unwrap();
                    g.push(e.wait_var(a));
                    g.push(e.wait_to_write(b));
                    g.push(e.wait_all());
                },
                &[b],
                &[a],
            )
            .unwrap();
        engine.wait_all().unwrap();
        assert_eq!(*got.lock().unwrap(), vec![Err(EngineError::WaitWouldDeadlock); 3]);
    }
}

#[test]
fn push_after_shutdown_is_refused_and_pending_work_still_ran() {
    for engine in engines() {
        let v = engine.new_var();
        let hits = Arc::new(AtomicUsize::new(0));
        for _ in 0..100 {
            let h = hits.clone();
            engine
                .push_sync(
                    move |_| {
                        std::thread::sleep(std::time::Duration::from_micros(50));
                        h.fetch_add(1, Ordering::SeqCst);
                    },
                    &[],
                    &[v],
                )
                .unwrap();
        }
        engine.shutdown().unwrap();
        assert_eq!(hits.load(Ordering::SeqCst), 100, "shutdown finishes pending work");
        assert_eq!(engine.push_sync(|_| {}, &[], &[]), Err(EngineError::ShutDown));
        assert_eq!(engine.pool_stats().live_ops, 0);
    }
}

/// Found by `fuzz/` (api_misuse target): with bulking on, a push after
/// shutdown joined a bulk instead of being refused.
#[test]
fn a_bulked_push_after_shutdown_is_refused() {
    for engine in engines() {
        let v = engine.new_var();
        engine.set_bulk_size(4).unwrap();
        engine.shutdown().unwrap();
        assert_eq!(engine.push_sync(|_| {}, &[], &[v]), Err(EngineError::ShutDown));
        assert_eq!(engine.flush_bulk(), Ok(()), "nothing was left in a bulk");
        engine.set_bulk_size(0).unwrap();
    }
}

/// Found by `fuzz/` (api_misuse target): `delete_var` after shutdown was
/// refused but still marked the variable deleted.
#[test]
fn a_refused_deletion_changes_nothing() {
    for engine in engines() {
        let v = engine.new_var();
        engine.push_sync(|_| {}, &[], &[v]).unwrap();
        engine.shutdown().unwrap();
        assert_eq!(engine.delete_var(v, || {}), Err(EngineError::ShutDown));
        assert_eq!(engine.var_version(v), Ok(1), "the variable is still there");
    }
}

#[test]
fn invalid_settings_are_reported() {
    let err = depengine::Engine::builder().cpu_workers(0).build().unwrap_err();
    assert!(matches!(err, EngineError::Config(_)));
    assert!(matches!(EngineKind::parse("fast"), Err(EngineError::Config(m)) if m.contains("fast")));
}

/// A body that only panics compiles (its return type is `!`, with no
/// annotation) and fails its operation with the panic's message.
#[test]
fn a_body_that_only_panics_compiles_and_fails_its_operation() {
    for engine in engines() {
        let v = engine.new_var();
        engine.push_sync(|_| panic!("only this"), &[], &[v]).unwrap();
        engine.push_sync_with(|_| unreachable!("nor this"), &[v], &[], PushOpts::new().no_skip()).unwrap();
        match engine.wait_var(v) {
            Err(EngineError::OpFailed(e)) => assert_eq!(e.message(), "panicked: only this"),
            other => panic!("{other:?}"),
        }
        match engine.wait_all() {
            Err(EngineError::OpFailed(e)) => assert_eq!(e.message(), "panicked: only this", "the first failure"),
            other => panic!("{other:?}"),
        }
    }
}
