//! Typed data (`Data<T>`): the scheduling rule through the types (values
//! read, order of writes), aliasing refused, guards that hold the engine's
//! access, failures reported on access, and when values are dropped.

mod common;

use common::engines;
use depengine::{Engine, EngineError, EngineKind, PushOpts};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Writes in push order, reads between them: every body sees exactly the
/// value its predecessors left, on every engine (a chain of read-modify-
/// writes and readers that record what they saw).
#[test]
fn bodies_see_the_writes_before_them_in_push_order() {
    for engine in engines() {
        let x = engine.data(0u64);
        let seen = engine.data(Vec::new());
        for i in 1..=500u64 {
            engine.push_data((), &x, move |_, (), x| *x = *x * 3 % 1_000_003 + i).unwrap();
            if i % 50 == 0 {
                engine.push_data(&x, &seen, |_, x, seen| seen.push(*x)).unwrap();
            }
        }
        let mut expected = (0u64, Vec::new());
        for i in 1..=500u64 {
            expected.0 = expected.0 * 3 % 1_000_003 + i;
            if i % 50 == 0 {
                expected.1.push(expected.0);
            }
        }
        assert_eq!(*x.read().unwrap(), expected.0, "{:?}", engine.kind());
        assert_eq!(*seen.read().unwrap(), expected.1, "{:?}", engine.kind());
    }
}

/// Operations on disjoint data run in parallel, and a tuple of reads and
/// writes gets the right value in each place.
#[test]
fn tuples_hand_each_value_to_its_place() {
    for engine in engines() {
        let (a, b, c) = (engine.data(2u32), engine.data(String::from("x")), engine.data(1.5f64));
        let (p, q) = (engine.data(0u32), engine.data(Vec::<String>::new()));
        engine
            .push_data((&a, &b, &c), (&p, &q), |_, (a, b, c), (p, q)| {
                *p = *a * 10;
                q.push(format!("{b}{c}"));
            })
            .unwrap();
        engine.push_data((&p,), (&a,), |_, (p,), (a,)| *a += *p).unwrap();
        assert_eq!(*a.read().unwrap(), 22);
        assert_eq!(*q.read().unwrap(), ["x1.5"]);
    }
}

/// The same data twice among the writes, or in the reads and the writes,
/// is refused at push time with the body dropped unrun; the same data
/// twice among the reads is two shared references, allowed.
#[test]
fn aliased_data_is_refused_at_push_time() {
    for engine in engines() {
        let (x, y) = (engine.data(1u8), engine.data(0u8));
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        let twice = engine.push_data((), (&x, &x), move |_, (), _| r.store(true, Ordering::SeqCst));
        assert_eq!(twice, Err(EngineError::AliasedData));
        let r = ran.clone();
        let both = engine.push_data((&x, &y), (&y,), move |_, _, _| r.store(true, Ordering::SeqCst));
        assert_eq!(both, Err(EngineError::AliasedData));
        engine.push_data((&x, &x), &y, |_, (a, b), y| *y = *a + *b).unwrap();
        assert_eq!(*y.read().unwrap(), 2);
        assert!(!ran.load(Ordering::SeqCst), "a refused body ran");
    }
}

/// A write guard holds the engine's write: an operation pushed while it
/// lives runs only after it is dropped, and sees what it wrote.
#[test]
fn a_write_guard_holds_later_operations_back() {
    for engine in common::parallel_engines() {
        let x = engine.data(0u32);
        let seen = engine.data(0u32);
        let mut guard = x.write().unwrap();
        engine.push_data(&x, &seen, |_, x, seen| *seen = *x).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        *guard = 7;
        drop(guard);
        assert_eq!(*seen.read().unwrap(), 7, "{:?}", engine.kind());
    }
}

/// A read guard waits for the writes pushed before it, and reports the
/// failure a failed writer left, naming it.
#[test]
fn a_read_reports_the_failure_of_the_last_writer() {
    for engine in engines() {
        let x = engine.data(1u32);
        engine
            .push_data_with((), &x, PushOpts::new().name("breaks x"), |_, (), _x| -> Result<(), String> {
                Err("no luck".into())
            })
            .unwrap();
        match x.read() {
            Err(EngineError::OpFailed(e)) => {
                assert_eq!((e.op_name(), e.message()), ("breaks x", "no luck"), "{:?}", engine.kind())
            }
            other => panic!("{:?}: {:?}", engine.kind(), other.map(|g| *g)),
        }
        // A write overwrites and heals, as a blind write does.
        *x.write().unwrap() = 5;
        assert_eq!(*x.read().unwrap(), 5);
        let _ = engine.wait_all();
    }
}

/// A value is dropped after every operation pushed on it, never before,
/// even when its last handle goes first.
#[test]
fn a_value_outlives_its_operations() {
    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    for engine in engines() {
        let dropped = Arc::new(AtomicBool::new(false));
        let d = engine.data(Flag(dropped.clone()));
        let alive = engine.data(false);
        engine
            .push_data(&d, &alive, |_, d, alive| {
                std::thread::sleep(Duration::from_millis(10));
                *alive = !d.0.load(Ordering::SeqCst);
            })
            .unwrap();
        drop(d);
        engine.wait_all().unwrap();
        assert!(dropped.load(Ordering::SeqCst), "{:?}: never dropped", engine.kind());
        assert!(*alive.read().unwrap(), "{:?}: dropped before its operation ran", engine.kind());
    }
}

/// Handles dropped after the engine is gone, or while it shuts down, leave
/// their values to the engine, which drops each once.
#[test]
fn values_outliving_their_engine_are_dropped_once() {
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    struct Counted;
    impl Drop for Counted {
        fn drop(&mut self) {
            DROPS.fetch_add(1, Ordering::SeqCst);
        }
    }
    for kind in EngineKind::ALL {
        DROPS.store(0, Ordering::SeqCst);
        let engine = Engine::builder().kind(kind).cpu_workers(2).build().unwrap();
        let kept: Vec<_> = (0..3).map(|_| engine.data(Counted)).collect();
        engine.push_data(&kept[0], (), |_, _, ()| {}).unwrap();
        drop(engine);
        assert_eq!(DROPS.load(Ordering::SeqCst), 0, "{kind:?}: dropped while handles live");
        drop(kept);
        assert_eq!(DROPS.load(Ordering::SeqCst), 3, "{kind:?}: not each dropped once");
    }
}

/// A guard requested from inside a body that holds the data would wait for
/// itself: refused at once.
#[test]
fn a_guard_inside_a_body_holding_the_data_is_refused() {
    for engine in engines() {
        let x = engine.data(0u32);
        let x2 = x.clone();
        let refused = engine.data(false);
        engine
            .push_data((), &refused, move |_, (), refused| {
                // This body holds only `refused`: a read of `x` may wait.
                assert_eq!(*x2.read().unwrap(), 0);
                *refused = true;
            })
            .unwrap();
        assert!(*refused.read().unwrap());
        let x4 = x.clone();
        let verdict = engine.data(None);
        engine
            .push_data((), (&x, &verdict), move |_, (), (_x, verdict)| {
                *verdict = Some(x4.read().err());
            })
            .unwrap();
        assert_eq!(*verdict.read().unwrap(), Some(Some(EngineError::WaitWouldDeadlock)));
    }
}

/// A struct holding data handles: the body moves the fields it uses (here
/// a name) while the push names the struct's data, with no copy of the
/// variables first; the body gets the values, not the handles.
#[test]
fn a_body_moves_a_struct_field_while_the_push_names_its_data() {
    struct Layer {
        weights: depengine::Data<Vec<f32>>,
        out: depengine::Data<Vec<f32>>,
        name: String,
    }
    let engine = Engine::builder().build().unwrap();
    let layer = Layer { weights: engine.data(vec![2.0; 4]), out: engine.data(Vec::new()), name: "fc1".into() };
    let log = engine.data(Vec::<String>::new());
    engine
        .push_data(&layer.weights, (&layer.out, &log), move |_, w, (out, log)| {
            out.extend(w.iter().map(|x| x * 3.0));
            log.push(layer.name);
        })
        .unwrap();
    assert_eq!(*layer.out.read().unwrap(), [6.0; 4]);
    assert_eq!(*log.read().unwrap(), ["fc1"]);
}

/// Plain variables mix with typed data in one operation, for untyped
/// resources: ordered with the others, received as `()`.
#[test]
fn plain_variables_mix_with_typed_data() {
    let engine = Engine::builder().build().unwrap();
    let (device, x) = (engine.new_var(), engine.data(0u32));
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let o = order.clone();
    engine
        .push_sync(
            move |_| {
                std::thread::sleep(std::time::Duration::from_millis(10));
                o.lock().unwrap().push("untyped");
            },
            &[],
            &[device],
        )
        .unwrap();
    let o = order.clone();
    engine
        .push_data(device, (&x,), move |_, (), (x,)| {
            *x = 1;
            o.lock().unwrap().push("typed");
        })
        .unwrap();
    engine.push_data((&x, device), (), |_, (x, ()), ()| assert_eq!(*x, 1)).unwrap();
    engine.wait_all().unwrap();
    assert_eq!(*order.lock().unwrap(), ["untyped", "typed"]);
    // The same variable twice is refused, typed or not.
    assert!(matches!(engine.push_data(device, device, |_, (), ()| {}), Err(depengine::EngineError::AliasedData)));
}
