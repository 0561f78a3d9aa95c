//! Where per_device runs a dependency chain: off the CPU the pusher runs
//! on when another worker idles. In a test binary of its own, so that no
//! other test's threads share the two workers' CPUs while it runs.

mod common;

use common::{busy_for, eventually};
use depengine::{Engine, EngineKind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A dependency chain on the worker pinned to the pusher's CPU moves to
/// another worker once that one idles (`shed_to_idle`), rather than take
/// turns with the pusher for one core. Both workers are held while the
/// pusher, pinned to worker 0's CPU, queues a whole chain. Worker 0 is let
/// go first and starts the chain (its completions keep each successor for
/// themselves, where no thief can take it); worker 1 lets itself go once
/// worker 0 has run a hundred links, finds nothing and spins: the chain
/// must go on there.
#[test]
fn a_chain_leaves_the_pushers_cpu_for_an_idle_worker() {
    const CHAIN: usize = 20_000;
    let engine = Engine::builder()
        .kind(EngineKind::PerDevice)
        .cpu_workers(2)
        .max_pending(0)
        .spin(Duration::from_millis(200))
        .build()
        .unwrap();
    let (Some(pusher_cpu), Some(other)) = (engine.pinned_cpus()[0], engine.pinned_cpus()[1]) else {
        panic!("pinning is on by default")
    };
    if pusher_cpu == other {
        eprintln!("one CPU for both workers: no chain is handed over; skipped");
        return;
    }
    if !core_affinity::set_for_current(core_affinity::CoreId { id: pusher_cpu }) {
        eprintln!("cannot pin the test thread to CPU {pusher_cpu}: skipped");
        return;
    }
    let go = Arc::new(AtomicBool::new(false));
    let ran: Arc<[AtomicUsize; 2]> = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let holding = Arc::new(AtomicUsize::new(0));
    for _ in 0..2 {
        let (go, ran, holding) = (go.clone(), ran.clone(), holding.clone());
        // Spinning on its own CPU, each hold sees its release at once.
        let hold = move |ctx: &depengine::RunContext| {
            let w = ctx.worker().expect("run by a worker");
            holding.fetch_add(1, Ordering::SeqCst);
            let released = || if w == 0 { go.load(Ordering::Acquire) } else { ran[0].load(Ordering::Relaxed) >= 100 };
            while !released() {
                std::hint::spin_loop();
            }
        };
        engine.push_sync(hold, &[], &[]).unwrap();
    }
    assert!(eventually(Duration::from_secs(20), || holding.load(Ordering::SeqCst) == 2), "both workers held");
    let v = engine.new_var();
    for _ in 0..CHAIN {
        let ran = ran.clone();
        // About 5 µs each, so that the chain lasts long enough (about a
        // tenth of a second) for worker 1 to be back on a loaded machine.
        let link = move |ctx: &depengine::RunContext| {
            busy_for(Duration::from_micros(5));
            ran[ctx.worker().expect("run by a worker")].fetch_add(1, Ordering::Relaxed);
        };
        engine.push_sync(link, &[], &[v]).unwrap();
    }
    go.store(true, Ordering::Release);
    // No engine call until the chain is done: a waiting thread would help
    // run it.
    let done = || ran.iter().map(|r| r.load(Ordering::Relaxed)).sum::<usize>() == CHAIN;
    assert!(eventually(Duration::from_secs(60), done), "the chain finished");
    engine.wait_all().unwrap();
    let (on_0, on_1) = (ran[0].load(Ordering::Relaxed), ran[1].load(Ordering::Relaxed));
    assert!(on_1 >= CHAIN / 2, "the chain stayed on the pusher's CPU: worker 0 ran {on_0}, worker 1 {on_1}");
}
