//! Loom models of the engine through its public API, on the `naive` engine
//! (its executor runs operations on the thread that made them ready, so
//! every thread in a model is a loom thread). What races here is the core:
//! the variable queues, the dispatcher, the pending counter, the wait slots
//! and their futex sleeps, the completion hand-off and deferred deletion.
//!
//! Each model asserts the rule it protects. A wait that misses its wake-up
//! leaves its thread blocked, which loom reports as a deadlock.
#![cfg(depengine_loom)]

use depengine::{Completion, Engine, EngineError, EngineKind, Var};
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;

fn naive() -> Engine {
    Engine::builder().kind(EngineKind::Naive).build().expect("a naive engine")
}

/// Pushes an asynchronous write of `var` whose body hands its completion to
/// a new loom thread; that thread runs `finish` with the completion.
fn push_foreign_write(
    engine: &Engine,
    var: Var,
    finish: impl FnOnce(Completion) + Send + 'static,
) -> loom::thread::JoinHandle<()> {
    let (tx, rx) = loom::sync::mpsc::channel();
    engine
        .push_async(
            move |_, done| {
                tx.send(done).unwrap();
            },
            &[],
            &[var],
        )
        .expect("push");
    // The naive engine ran the body inside the push: the completion is here.
    let done = rx.recv().unwrap();
    loom::thread::spawn(move || finish(done))
}

/// [`push_foreign_write`] whose completion thread stores `value` into
/// `cell` and then signals.
fn push_foreign_store(engine: &Engine, var: Var, cell: &Arc<AtomicU64>, value: u64) -> loom::thread::JoinHandle<()> {
    let cell = cell.clone();
    push_foreign_write(engine, var, move |done| {
        cell.store(value, Ordering::Relaxed);
        done.signal();
    })
}

/// `wait_var` against a completion signalled on another thread: the wait
/// returns only after the operation's effect, and sees it.
#[test]
fn wait_var_sees_a_foreign_completion() {
    loom::model(|| {
        let engine = naive();
        let v = engine.new_var();
        let cell = Arc::new(AtomicU64::new(0));
        let t = push_foreign_store(&engine, v, &cell, 7);
        engine.wait_var(v).expect("the write succeeded");
        assert_eq!(cell.load(Ordering::Relaxed), 7, "wait_var returned before the write finished");
        assert_eq!(engine.var_version(v).unwrap(), 1);
        t.join().unwrap();
    });
}

/// `wait_all` against two completions on two threads: it returns after
/// both operations finished.
#[test]
fn wait_all_sees_every_foreign_completion() {
    loom::model(|| {
        let engine = naive();
        let cells = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
        let threads: Vec<_> = cells.iter().map(|cell| push_foreign_store(&engine, engine.new_var(), cell, 1)).collect();
        engine.wait_all().expect("both succeeded");
        assert!(cells.iter().all(|c| c.load(Ordering::Relaxed) == 1), "wait_all returned early");
        assert_eq!(engine.pending(), 0);
        threads.into_iter().for_each(|t| t.join().unwrap());
    });
}

/// A completion dropped on another thread fails its operation: the wait
/// reports the failure (never hangs), and a reader pushed behind it is
/// skipped.
#[test]
fn a_dropped_foreign_completion_fails_the_operation() {
    loom::model(|| {
        let engine = naive();
        let v = engine.new_var();
        let t = push_foreign_write(&engine, v, drop);
        let ran = Arc::new(AtomicU64::new(0));
        let r = ran.clone();
        engine.push_sync(move |_| r.store(1, Ordering::Relaxed), &[v], &[]).unwrap();
        match engine.wait_var(v) {
            Err(EngineError::OpFailed(e)) => assert!(e.message().contains("dropped"), "{e}"),
            other => panic!("expected the dropped completion's failure, got {other:?}"),
        }
        assert_eq!(ran.load(Ordering::Relaxed), 0, "a reader of a failed write ran");
        t.join().unwrap();
    });
}

/// `delete_var` while an operation on the variable is pending on another
/// thread: the deletion waits for it, its callback runs after the write,
/// and the variable's slot is given back.
#[test]
fn delete_var_waits_for_a_pending_operation() {
    loom::model(|| {
        let engine = naive();
        let v = engine.new_var();
        let cell = Arc::new(AtomicU64::new(0));
        let t = push_foreign_store(&engine, v, &cell, 1);
        let c = cell.clone();
        engine.delete_var(v, move || assert_eq!(c.swap(2, Ordering::Relaxed), 1, "deleted before the write")).unwrap();
        assert!(matches!(engine.delete_var(v, || {}), Err(EngineError::DeletedTwice)));
        engine.wait_all().unwrap();
        assert_eq!(cell.load(Ordering::Relaxed), 2, "the delete callback ran");
        assert_eq!(engine.pool_stats().live_vars, 0, "the slot was given back");
        t.join().unwrap();
    });
}

/// Two threads push a write of the same variable at once: the engine
/// linearizes the pushes (tickets) and runs the writes in that order, so
/// the write with the smaller ticket reads the initial value.
#[test]
fn concurrent_pushes_run_in_ticket_order() {
    loom::model(|| {
        let engine = Arc::new(naive());
        let v = engine.new_var();
        let cell = Arc::new(AtomicU64::new(0));
        // (ticket, value read) of each write.
        let seen = Arc::new([AtomicU64::new(u64::MAX), AtomicU64::new(u64::MAX)]);
        let push = |i: usize| {
            let (engine, cell, seen) = (engine.clone(), cell.clone(), seen.clone());
            move || {
                engine
                    .push_sync(
                        move |ctx| {
                            let read = cell.fetch_add(1, Ordering::Relaxed);
                            seen[i].store(ctx.ticket() << 8 | read, Ordering::Relaxed);
                        },
                        &[],
                        &[v],
                    )
                    .unwrap();
            }
        };
        let other = loom::thread::spawn(push(1));
        push(0)();
        other.join().unwrap();
        engine.wait_all().unwrap();
        let mut runs: Vec<u64> = seen.iter().map(|s| s.load(Ordering::Relaxed)).collect();
        runs.sort_unstable();
        assert_eq!(runs.iter().map(|r| r & 0xFF).collect::<Vec<_>>(), vec![0, 1], "writes ran out of ticket order");
        assert_eq!(engine.var_version(v).unwrap(), 2);
    });
}

/// `wait_all` against an operation pushed from another thread while a
/// third thread is dispatching (the push is delegated to it): an
/// asynchronous operation's completion thread pushes a child and then
/// signals; since the child's push returned before its parent finished,
/// `wait_all` (which waits for the parent) must wait for the child too.
/// Found by the schedule fuzz target: the child was not counted until the
/// combiner dispatched it, so `wait_all` could return before it ran.
#[test]
fn wait_all_waits_for_a_delegated_child_push() {
    loom::model(|| {
        let engine = Arc::new(naive());
        let (parent_var, child_var, other_var) = (engine.new_var(), engine.new_var(), engine.new_var());
        let child_ran = Arc::new(AtomicU64::new(0));
        let (e, ran) = (engine.clone(), child_ran.clone());
        let completer = push_foreign_write(&engine, parent_var, move |done| {
            e.push_sync(move |_| ran.store(1, Ordering::Relaxed), &[], &[child_var]).unwrap();
            done.signal();
        });
        let e = engine.clone();
        let other = loom::thread::spawn(move || e.push_sync(|_| {}, &[], &[other_var]).unwrap());
        engine.wait_all().unwrap();
        assert_eq!(child_ran.load(Ordering::Relaxed), 1, "wait_all returned before the child ran");
        completer.join().unwrap();
        other.join().unwrap();
    });
}

/// Operations whose variables are granted partly at once and partly by a
/// completion on another thread racing their dispatch. The first writes
/// `a` (queued behind a foreign write) and `b` (idle: granted at once);
/// the second writes `a` alone (queued behind the first, or granted at once
/// if the first already ran). The dispatcher takes off its at-once grants
/// only after its last append, and with none at once leaves the
/// operation to the granters: each runs once, after the write it follows.
#[test]
fn grants_racing_a_dispatch_run_each_operation_once_in_order() {
    loom::model(|| {
        let engine = naive();
        let (a, b) = (engine.new_var(), engine.new_var());
        let cell = Arc::new(AtomicU64::new(0));
        let t = push_foreign_store(&engine, a, &cell, 7);
        let runs = Arc::new(AtomicU64::new(0));
        for (k, writes) in [&[a, b][..], &[a][..]].into_iter().enumerate() {
            let (cell, runs) = (cell.clone(), runs.clone());
            engine
                .push_sync(
                    move |_| {
                        assert_eq!(cell.load(Ordering::Relaxed), 7, "ran before the foreign write");
                        assert_eq!(runs.fetch_add(1, Ordering::Relaxed), k as u64, "ran out of push order");
                    },
                    &[],
                    writes,
                )
                .expect("push");
        }
        t.join().unwrap();
        engine.wait_all().expect("all succeeded");
        assert_eq!(runs.load(Ordering::Relaxed), 2);
        assert_eq!(engine.var_version(a).unwrap(), 3);
        assert_eq!(engine.var_version(b).unwrap(), 1);
    });
}

/// A push on another thread racing the deletion of its variable. Each
/// outcome keeps the rule that nothing uses a variable after its deletion:
/// the push fails at once (its check saw the deletion requested), or its
/// operation is rejected at dispatch (the deletion was dispatched first),
/// or it runs before the deletion's callback. The dispatch looks at the
/// variables again only when a deletion was dispatched since the push
/// checked them (`Core::dispatch`); this model has the interleavings
/// where one was.
#[test]
fn a_push_racing_a_deletion_never_runs_after_it() {
    loom::model(|| {
        let engine = Arc::new(naive());
        let v = engine.new_var();
        let deleted = Arc::new(AtomicU64::new(0));
        let (e, d) = (engine.clone(), deleted.clone());
        let pusher = loom::thread::spawn(move || {
            let write = move |_: &depengine::RunContext| {
                assert_eq!(d.load(Ordering::Relaxed), 0, "ran after its variable's deletion");
            };
            match e.push_sync(write, &[], &[v]) {
                Ok(()) | Err(EngineError::DeletedVar) => {}
                Err(other) => panic!("the push failed with {other:?}"),
            }
        });
        let d = deleted.clone();
        engine.delete_var(v, move || d.store(1, Ordering::Relaxed)).unwrap();
        pusher.join().unwrap();
        match engine.wait_all() {
            Ok(()) => {}
            Err(EngineError::OpFailed(e)) => assert!(e.message().contains("uses a deleted variable"), "{e}"),
            Err(other) => panic!("wait_all failed with {other:?}"),
        }
        assert_eq!(deleted.load(Ordering::Relaxed), 1, "the deletion's callback ran");
    });
}

/// Plain data that operations share without a lock, as the crate docs' memory
/// guarantee allows: a loom `UnsafeCell`, whose every access loom checks
/// for a data race (an access not ordered by happens-before with a write
/// is reported).
struct Plain(loom::cell::UnsafeCell<u64>);

// SAFETY: every access below is ordered by the engine's scheduling rule;
// that it is, is what these models check (loom reports any unordered pair
// of accesses as a race).
unsafe impl Sync for Plain {}

impl Plain {
    fn new() -> Arc<Plain> {
        Arc::new(Plain(loom::cell::UnsafeCell::new(0)))
    }

    fn set(&self, value: u64) {
        // SAFETY: see the `Sync` impl.
        self.0.with_mut(|p| unsafe { *p = value })
    }

    fn get(&self) -> u64 {
        // SAFETY: see the `Sync` impl.
        self.0.with(|p| unsafe { *p })
    }
}

/// The memory guarantee: everything a write operation did
/// happens-before every later operation on its variable, and before a
/// `wait_var` that covers it returns. A write on one thread (its
/// completion signalled there) stores into plain memory; a read pushed
/// after it, run wherever the engine runs it, and a `wait_var` on the
/// main thread, both load it: loom reports a data race if either access
/// is not ordered after the store.
#[test]
fn a_write_happens_before_later_readers_and_the_wait() {
    loom::model(|| {
        let engine = naive();
        let v = engine.new_var();
        let data = Plain::new();
        let d = data.clone();
        let t = push_foreign_write(&engine, v, move |done| {
            d.set(7);
            done.signal();
        });
        let (d, seen) = (data.clone(), Arc::new(AtomicU64::new(0)));
        let s = seen.clone();
        engine.push_sync(move |_| s.store(d.get(), Ordering::Relaxed), &[v], &[]).expect("push the reader");
        engine.wait_var(v).expect("the write succeeded");
        assert_eq!(data.get(), 7, "the wait sees the write");
        // The completion made the reader ready, and the naive engine ran
        // it on the completion's thread, before the signal returned.
        t.join().unwrap();
        assert_eq!(seen.load(Ordering::Relaxed), 7, "the reader saw the write");
    });
}

/// The same for `wait_all` and for a write after reads: a read on another
/// thread, then a write pushed behind it (which must not run before the
/// read's load is done), then `wait_all`.
#[test]
fn reads_happen_before_the_next_write_and_wait_all() {
    loom::model(|| {
        let engine = naive();
        let v = engine.new_var();
        let data = Plain::new();
        let seen = Arc::new(AtomicU64::new(u64::MAX));
        let (d, s) = (data.clone(), seen.clone());
        let (tx, rx) = loom::sync::mpsc::channel::<Completion>();
        engine.push_async(move |_, done| tx.send(done).unwrap(), &[v], &[]).expect("push the read");
        let done = rx.recv().unwrap();
        let reader = loom::thread::spawn(move || {
            s.store(d.get(), Ordering::Relaxed);
            done.signal();
        });
        let d = data.clone();
        engine.push_sync(move |_| d.set(9), &[], &[v]).expect("push the write");
        engine.wait_all().expect("both succeeded");
        assert_eq!(data.get(), 9, "wait_all sees the write");
        assert_eq!(seen.load(Ordering::Relaxed), 0, "the read ran before the write");
        reader.join().unwrap();
    });
}
