//! Bulking: fusion, order, flush triggers and failure granularity.

mod common;

use common::engines;
use depengine::{Context, PushOpts};
use std::sync::{Arc, Mutex};

#[test]
fn consecutive_pushes_fuse_and_run_in_order() {
    for engine in engines() {
        let v = engine.new_var();
        let seen = Arc::new(Mutex::new(Vec::new()));
        engine.set_bulk_size(8).unwrap();
        for i in 0..64 {
            let s = seen.clone();
            engine.push_sync(move |_| s.lock().unwrap().push(i), &[], &[v]).unwrap();
        }
        engine.wait_var(v).unwrap();
        assert_eq!(engine.set_bulk_size(0).unwrap(), 8);
        assert_eq!(*seen.lock().unwrap(), (0..64).collect::<Vec<_>>(), "{:?}", engine.kind());
        assert_eq!(engine.var_version(v).unwrap(), 8, "64 pushes in bulks of 8 are 8 writes");
    }
}

#[test]
fn waits_other_pushes_and_context_changes_flush() {
    for engine in engines() {
        let v = engine.new_var();
        let seen = Arc::new(Mutex::new(Vec::new()));
        engine.set_bulk_size(100).unwrap();
        let s = seen.clone();
        engine.push_sync(move |_| s.lock().unwrap().push("bulked"), &[], &[v]).unwrap();
        // A push that cannot join (asynchronous) flushes first: order kept.
        let s = seen.clone();
        engine
            .push_async(
                move |_, done| {
                    s.lock().unwrap().push("async");
                    done.signal()
                },
                &[],
                &[v],
            )
            .unwrap();
        let s = seen.clone();
        engine
            .push_sync_with(move |_| s.lock().unwrap().push("cpu0"), &[], &[v], PushOpts::new().ctx(Context::Cpu(0)))
            .unwrap();
        let s = seen.clone();
        engine
            .push_sync_with(move |_| s.lock().unwrap().push("any"), &[], &[v], PushOpts::new().ctx(Context::cpu()))
            .unwrap();
        engine.wait_var(v).unwrap();
        engine.set_bulk_size(1).unwrap();
        engine.wait_all().unwrap();
        assert_eq!(*seen.lock().unwrap(), vec!["bulked", "async", "cpu0", "any"]);
        assert_eq!(engine.var_version(v).unwrap(), 4, "bulk, async, and one bulk per context");
    }
}

#[test]
fn explicit_flush_pushes_the_open_bulk() {
    for engine in engines() {
        let v = engine.new_var();
        engine.set_bulk_size(1000).unwrap();
        engine.push_sync(|_| {}, &[], &[v]).unwrap();
        engine.flush_bulk().unwrap();
        engine.set_bulk_size(0).unwrap();
        engine.wait_all().unwrap();
        assert_eq!(engine.var_version(v).unwrap(), 1);
    }
}

#[test]
fn a_failing_member_fails_the_bulk() {
    for engine in engines() {
        let (a, b) = (engine.new_var(), engine.new_var());
        let ran = Arc::new(Mutex::new(Vec::new()));
        engine.set_bulk_size(4).unwrap();
        let r = ran.clone();
        engine.push_sync(move |_| r.lock().unwrap().push(1), &[], &[a]).unwrap();
        engine.push_sync_with(|_| Err::<(), _>("bad member"), &[], &[a], PushOpts::new()).unwrap();
        let r = ran.clone();
        engine.push_sync(move |_| r.lock().unwrap().push(3), &[], &[b]).unwrap();
        engine.flush_bulk().unwrap();
        engine.set_bulk_size(0).unwrap();
        assert!(engine.wait_var(b).is_err(), "every variable the bulk writes records the failure");
        assert_eq!(*ran.lock().unwrap(), vec![1], "members after the failure do not run");
        let _ = engine.wait_all();
    }
}

/// Found by `fuzz/` (schedule target): deleting a variable that this
/// thread's open bulk uses refused the deletion, because the variable was
/// marked deleted before the bulk was pushed.
#[test]
fn deleting_a_variable_the_open_bulk_uses_runs_the_bulk_first() {
    for engine in engines() {
        let v = engine.new_var();
        let ran = Arc::new(Mutex::new(Vec::new()));
        engine.set_bulk_size(4).unwrap();
        let r = ran.clone();
        engine.push_sync(move |_| r.lock().unwrap().push("read"), &[v], &[]).unwrap();
        let r = ran.clone();
        engine.delete_var(v, move || r.lock().unwrap().push("deleted")).expect("the deletion is accepted");
        engine.set_bulk_size(0).unwrap();
        engine.wait_all().unwrap();
        assert_eq!(*ran.lock().unwrap(), vec!["read", "deleted"]);
        assert_eq!(engine.pool_stats().live_vars, 0);
    }
}
