//! The seeded random-order mode (`EngineBuilder::shuffle_seed`): the same
//! seed replays the same execution, other seeds give other orders, the
//! scheduling rule holds (the differential test runs it too), and it finds
//! a missing dependency that push order hides.

mod common;

use common::SplitMix;
use depengine::{Engine, EngineKind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

fn shuffled(seed: u64) -> Engine {
    Engine::builder().kind(EngineKind::Pooled).shuffle_seed(seed).build().unwrap()
}

/// A fixed program of 400 operations over 6 variables, with a few waits in
/// between; returns the order in which the bodies ran.
fn execution_order(engine: &Engine) -> Vec<u64> {
    let vars: Vec<_> = (0..6).map(|_| engine.new_var()).collect();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut rng = SplitMix(99);
    for i in 0..400u64 {
        let pick = |rng: &mut SplitMix| (0..rng.below(3)).map(|_| vars[rng.below(6) as usize]).collect::<Vec<_>>();
        let (reads, writes) = (pick(&mut rng), pick(&mut rng));
        let o = order.clone();
        engine.push_sync(move |_| o.lock().unwrap().push(i), &reads, &writes).unwrap();
        if i % 97 == 0 {
            engine.wait_var(vars[(i % 6) as usize]).unwrap();
        }
    }
    engine.wait_all().unwrap();
    let order = order.lock().unwrap().clone();
    order
}

#[test]
fn the_same_seed_replays_the_same_order() {
    let first = execution_order(&shuffled(1));
    assert_eq!(first.len(), 400);
    assert_eq!(execution_order(&shuffled(1)), first, "seed 1 twice");
    assert_ne!(execution_order(&shuffled(2)), first, "seeds 1 and 2");
    let push_order: Vec<u64> = (0..400).collect();
    assert_ne!(first, push_order, "the order is shuffled");
    assert_eq!(execution_order(&common::engine(EngineKind::Naive)), push_order, "naive runs in push order");
}

#[test]
fn operations_run_on_the_waiting_thread_only_when_it_waits() {
    let engine = shuffled(3);
    let v = engine.new_var();
    let ran = Arc::new(AtomicU64::new(0));
    let r = ran.clone();
    engine
        .push_sync(
            move |_| {
                r.fetch_add(1, Ordering::SeqCst);
            },
            &[],
            &[v],
        )
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(ran.load(Ordering::SeqCst), 0, "nothing runs before a wait");
    engine.wait_var(v).unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}

/// The user program of `examples/missing_dependency.rs`: `bump` changes
/// the data that `v` guards but declares only a read of `v`, so `report`
/// may overtake it; push order (and so the naive engine, and usually the
/// others) hides the bug.
#[path = "../examples/missing_dependency.rs"]
#[allow(dead_code)] // its `main`
mod example;
use example::program as buggy_program;

#[test]
fn random_order_finds_a_missing_dependency_within_a_few_seeds() {
    assert_eq!(buggy_program(&common::engine(EngineKind::Naive)), 11, "push order hides the bug");
    let found = (0..16u64).find(|&seed| buggy_program(&shuffled(seed)) != 11);
    let seed = found.expect("16 seeds and the missing dependency never showed");
    println!("the missing dependency shows with DEPENGINE_SHUFFLE_SEED={seed}");
    assert_ne!(buggy_program(&shuffled(seed)), 11, "the seed reproduces it");
}

#[test]
fn with_workers_operations_run_in_the_background_in_random_order() {
    let engine = Engine::builder().shuffle_seed(5).shuffle_workers(2).build().unwrap();
    assert_eq!(engine.cpu_workers(), 2);
    // A program that blocks on a channel, not on the engine, still makes
    // progress: the workers run its operations.
    let (tx, rx) = std::sync::mpsc::channel();
    let v = engine.new_var();
    engine.push_sync(move |_| tx.send(7).unwrap(), &[], &[v]).unwrap();
    assert_eq!(rx.recv_timeout(std::time::Duration::from_secs(10)), Ok(7));
    assert!(engine.stats().ran_on_workers > 0);
    // Independent operations held behind a gate become ready together and
    // then run in an order other than push order; the rule still holds for
    // the chain through `v`. One worker, and nobody waiting meanwhile: the
    // worker that opens the gate makes all of them ready before it picks
    // (with two, the other could take each as it became ready, in order).
    let engine = Engine::builder().shuffle_seed(5).shuffle_workers(1).build().unwrap();
    let v = engine.new_var();
    let gate = engine.new_var();
    let open = Arc::new(std::sync::atomic::AtomicBool::new(false));
    engine.push_sync(common::until_open(&open), &[], &[gate]).unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    for i in 0..64u64 {
        let order = order.clone();
        engine.push_sync(move |_| order.lock().unwrap().push(i), &[gate], &[]).unwrap();
    }
    let chain = Arc::new(AtomicU64::new(0));
    for i in 0..64u64 {
        let c = chain.clone();
        engine
            .push_sync(move |_| assert_eq!(c.swap(i + 1, Ordering::SeqCst), i, "chain out of order"), &[gate], &[v])
            .unwrap();
    }
    open.store(true, Ordering::Release);
    let all_ran = common::eventually(std::time::Duration::from_secs(20), || {
        order.lock().unwrap().len() == 64 && chain.load(Ordering::SeqCst) == 64
    });
    engine.wait_all().unwrap();
    assert!(all_ran, "the worker ran everything");
    let order = order.lock().unwrap();
    assert_ne!(*order, (0..64).collect::<Vec<_>>(), "independent operations ran in push order");
}
