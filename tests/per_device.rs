//! The per_device engine's own rules: pinning, work stealing, the priority
//! pool and the inline path for ready `Async` operations. (Everything the
//! other engines must do, it is also checked for by the tests that loop
//! over `EngineKind::ALL`.)

mod common;

use common::{busy_for, eventually, occupy_a_worker, until_open};
use depengine::{Engine, EngineKind, FnProperty, PushOpts, Topology, TopologySource};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn per_device(workers: usize) -> Engine {
    Engine::builder().kind(EngineKind::PerDevice).cpu_workers(workers).build().unwrap()
}

#[test]
fn it_is_the_default_engine() {
    assert_eq!(Engine::builder().build().unwrap().kind(), EngineKind::PerDevice);
}

#[test]
fn the_topology_lists_the_allowed_cpus() {
    let engine = per_device(2);
    let topology = engine.topology().expect("per_device has a topology");
    let allowed = std::thread::available_parallelism().unwrap().get();
    assert_eq!(topology.cpus.len(), allowed, "{topology}");
    assert!(topology.nodes >= 1 && topology.cpus.iter().all(|c| c.node < topology.nodes));
    if cfg!(feature = "hwloc") {
        assert_eq!(topology.source, TopologySource::Hwloc, "{topology}");
    }
    let fallback = Topology::from_core_affinity();
    assert_eq!((fallback.nodes, fallback.source), (1, TopologySource::CoreAffinity));
    assert_eq!(fallback.cpus.len(), allowed);
    assert!(Engine::builder().kind(EngineKind::Pooled).build().unwrap().topology().is_none());
}

#[test]
fn each_worker_runs_on_the_cpu_it_is_pinned_to() {
    let engine = per_device(2);
    let pinned = engine.pinned_cpus().to_vec();
    assert_eq!(pinned.len(), 2);
    assert!(pinned.iter().all(Option::is_some), "pinning is on by default: {pinned:?}");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let vars: Vec<_> = (0..8).map(|_| engine.new_var()).collect();
    // On a busy machine the pusher's wait_all (which helps) may run a
    // whole round itself before a worker thread is scheduled: push rounds
    // until the workers have run something, for a bounded time.
    eventually(Duration::from_secs(20), || {
        for i in 0..2_000 {
            let s = seen.clone();
            let body = move |ctx: &depengine::RunContext| {
                // SAFETY: `sched_getcpu` has no preconditions.
                let cpu = unsafe { libc::sched_getcpu() };
                if let Some(w) = ctx.worker() {
                    s.lock().unwrap().push((w, cpu as usize));
                }
            };
            engine.push_sync(body, &[], &[vars[i % 8]]).unwrap();
        }
        engine.wait_all().unwrap();
        !seen.lock().unwrap().is_empty()
    });
    let seen = seen.lock().unwrap();
    assert!(!seen.is_empty(), "the workers ran something");
    for &(worker, cpu) in seen.iter() {
        assert_eq!(Some(cpu), pinned[worker], "worker {worker} ran on CPU {cpu}");
    }
    let unpinned = Engine::builder().kind(EngineKind::PerDevice).cpu_workers(2).pin(false).build().unwrap();
    assert_eq!(unpinned.pinned_cpus(), [None, None]);
}

#[test]
fn idle_workers_steal_from_a_blocked_one() {
    let engine = Arc::new(per_device(2));
    let v = engine.new_var();
    let gate = Arc::new(AtomicBool::new(false));
    let children_ran = Arc::new(AtomicUsize::new(0));
    let (e, g, ran) = (engine.clone(), gate.clone(), children_ran.clone());
    // The parent pushes its children from its body (onto its own worker's
    // deque), then blocks that worker until they have all run: only another
    // worker stealing them can let it finish.
    let parent = move |_: &depengine::RunContext| {
        for _ in 0..50 {
            let r = ran.clone();
            e.push_sync(
                move |_| {
                    r.fetch_add(1, Ordering::SeqCst);
                },
                &[],
                &[],
            )
            .unwrap();
        }
        while !g.load(Ordering::Acquire) && ran.load(Ordering::SeqCst) < 50 {
            std::thread::sleep(Duration::from_micros(200));
        }
    };
    engine.push_sync(parent, &[], &[v]).unwrap();
    let drained = eventually(Duration::from_secs(20), || children_ran.load(Ordering::SeqCst) == 50);
    gate.store(true, Ordering::Release);
    engine.wait_all().unwrap();
    assert!(drained, "the other worker did not drain the blocked worker's deque");
    assert!(engine.stats().stolen >= 1, "{}", engine.stats());
}

/// With more than two workers, what a completion releases past its
/// successor slot goes to the injector while a worker spins, where the
/// idle workers take it from one ring: none of it is stolen from the
/// releasing worker's deque, where it would otherwise wait for thieves.
/// Three workers first meet inside three operations at once (so every
/// worker thread runs and then idles, spinning for the rest of the
/// test); one then holds a write of `v` while eight reads queue behind
/// it, each long enough for an idle worker to steal the next from a
/// deque.
#[test]
fn a_completions_surplus_goes_to_the_injector_while_a_worker_spins() {
    let engine = Engine::builder()
        .kind(EngineKind::PerDevice)
        .cpu_workers(3)
        .pin(false)
        .spin(Duration::from_secs(60))
        .build()
        .unwrap();
    let met = Arc::new(AtomicUsize::new(0));
    for _ in 0..3 {
        let met = met.clone();
        let meet = move |_: &depengine::RunContext| {
            met.fetch_add(1, Ordering::SeqCst);
            while met.load(Ordering::SeqCst) < 3 {
                std::hint::spin_loop();
            }
        };
        engine.push_sync(meet, &[], &[]).unwrap();
    }
    assert!(eventually(Duration::from_secs(20), || met.load(Ordering::SeqCst) == 3), "the three workers met");
    let v = engine.new_var();
    let gate = occupy_a_worker(&engine, &[v]);
    let reads = Arc::new(AtomicUsize::new(0));
    for _ in 0..8 {
        let reads = reads.clone();
        let read = move |_: &depengine::RunContext| {
            busy_for(Duration::from_millis(2));
            reads.fetch_add(1, Ordering::SeqCst);
        };
        engine.push_sync(read, &[v], &[]).unwrap();
    }
    // Time for the idle workers to be spinning (for a minute, unless the
    // engine is dropped first: a spin ends at shutdown).
    std::thread::sleep(Duration::from_millis(100));
    gate.store(true, Ordering::Release);
    engine.wait_all().unwrap();
    let stats = engine.stats();
    assert_eq!(reads.load(Ordering::SeqCst), 8);
    assert_eq!(stats.stolen, 0, "the released reads went to a deque: {stats}");
}

#[test]
fn work_pushed_behind_a_blocked_worker_still_drains() {
    let engine = per_device(2);
    let (blocked, free) = (engine.new_var(), engine.new_var());
    let gate = Arc::new(AtomicBool::new(false));
    engine.push_sync(until_open(&gate), &[], &[blocked]).unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    for _ in 0..500 {
        let r = ran.clone();
        engine
            .push_sync(
                move |_| {
                    r.fetch_add(1, Ordering::SeqCst);
                },
                &[],
                &[free],
            )
            .unwrap();
    }
    let drained = eventually(Duration::from_secs(20), || ran.load(Ordering::SeqCst) == 500);
    gate.store(true, Ordering::Release);
    engine.wait_all().unwrap();
    assert!(drained, "ran {} of 500 while one worker was blocked", ran.load(Ordering::SeqCst));
}

/// A thread that has just waited skips the check that a spinning worker
/// really runs (`park.rs`, `note_waited`) on its next push; when it then
/// does not wait again, a worker must still run what it pushed. Each round
/// waits, pushes, and watches for the body without calling the engine
/// (which would help run it): a push left unpublished fails the round.
#[test]
fn a_push_right_after_a_wait_runs_without_another_wait() {
    let engine = per_device(2);
    let v = engine.new_var();
    let last = Arc::new(AtomicUsize::new(0));
    for round in 1..=2_000 {
        engine.wait_var(v).unwrap();
        let l = last.clone();
        engine.push_sync(move |_| l.store(round, Ordering::SeqCst), &[], &[v]).unwrap();
        let ran = eventually(Duration::from_secs(20), || last.load(Ordering::SeqCst) == round);
        assert!(ran, "round {round}: the push after a wait did not run");
    }
    engine.wait_all().unwrap();
}

#[test]
fn prioritized_operations_start_first_in_priority_order() {
    let engine = per_device(1);
    // The only worker is inside the blocker: everything below queues.
    let gate = occupy_a_worker(&engine, &[]);
    let started = Arc::new(Mutex::new(Vec::new()));
    let push = |label: &'static str, priority: i32, prioritized: bool| {
        let s = started.clone();
        let prop = if prioritized { FnProperty::CpuPrioritized } else { FnProperty::Normal };
        let opts = PushOpts::new().name(label).priority(priority).prop(prop);
        engine.push_sync_with(move |_| s.lock().unwrap().push(label), &[], &[], opts).unwrap();
    };
    push("normal-a", 100, false);
    push("prio-1", 1, true);
    push("normal-b", 0, false);
    push("prio-5", 5, true);
    push("prio-3a", 3, true);
    push("prio-3b", 3, true);
    push("normal-c", 0, false);
    gate.store(true, Ordering::Release);
    // Not `wait_all`: a waiting thread would help and run some itself.
    assert!(eventually(Duration::from_secs(20), || started.lock().unwrap().len() == 7));
    engine.wait_all().unwrap();
    assert_eq!(
        *started.lock().unwrap(),
        ["prio-5", "prio-3a", "prio-3b", "prio-1", "normal-a", "normal-b", "normal-c"],
        "prioritized first, highest first, equal ones in push order; then the rest in push order"
    );
}

#[test]
fn a_ready_async_operation_runs_inside_its_push() {
    let engine = per_device(2);
    let v = engine.new_var();
    let pusher = std::thread::current().id();
    let ran_on = Arc::new(Mutex::new(None));
    let r = ran_on.clone();
    let opts = PushOpts::new().prop(FnProperty::Async);
    let body = move |_: &depengine::RunContext, done: depengine::Completion| {
        *r.lock().unwrap() = Some(std::thread::current().id());
        done.signal();
    };
    engine.push_async_with(body, &[], &[v], opts).unwrap();
    assert_eq!(*ran_on.lock().unwrap(), Some(pusher), "ran on the pushing thread, before the push returned");

    // Behind a blocked write of `v` it is not ready: it runs later, on a worker.
    let gate = Arc::new(AtomicBool::new(false));
    engine.push_sync(until_open(&gate), &[], &[v]).unwrap();
    let later = Arc::new(Mutex::new(None));
    let l = later.clone();
    let body = move |ctx: &depengine::RunContext, done: depengine::Completion| {
        *l.lock().unwrap() = Some((std::thread::current().id(), ctx.worker()));
        done.signal();
    };
    engine.push_async_with(body, &[v], &[], opts).unwrap();
    assert!(later.lock().unwrap().is_none(), "not run inside the push");
    gate.store(true, Ordering::Release);
    assert!(eventually(Duration::from_secs(20), || later.lock().unwrap().is_some()));
    let (thread, worker) = later.lock().unwrap().unwrap();
    assert_ne!(thread, pusher);
    assert!(worker.is_some(), "a worker ran it");
    engine.wait_all().unwrap();

    // A deletion whose variable is idle also completes inside the call.
    let w = engine.new_var();
    let deleted = Arc::new(AtomicBool::new(false));
    let d = deleted.clone();
    engine.delete_var(w, move || d.store(true, Ordering::SeqCst)).unwrap();
    assert!(deleted.load(Ordering::SeqCst), "the deletion ran inside delete_var");
}

#[test]
fn priority_workers_run_prioritized_work_while_every_cpu_worker_is_busy() {
    let engine = Engine::builder().kind(EngineKind::PerDevice).cpu_workers(1).priority_workers(1).build().unwrap();
    let gpu_workers = 4 * engine.gpus(); // each GPU's rings (feature `cuda`): 2 compute, 1 priority, 1 copy
    assert_eq!(engine.stats().per_worker.len(), 2 + gpu_workers, "one CPU worker and one priority worker");
    let gate = occupy_a_worker(&engine, &[]);
    let ran_on = Arc::new(Mutex::new(None));
    let r = ran_on.clone();
    let opts = PushOpts::new().prop(FnProperty::CpuPrioritized).priority(1);
    engine.push_sync_with(move |ctx| *r.lock().unwrap() = Some(ctx.worker()), &[], &[], opts).unwrap();
    let ran = eventually(Duration::from_secs(20), || ran_on.lock().unwrap().is_some());
    gate.store(true, Ordering::Release);
    engine.wait_all().unwrap();
    assert!(ran, "the prioritized operation waited for the busy CPU worker");
    assert_eq!(*ran_on.lock().unwrap(), Some(Some(1)), "it ran on the priority worker (id 1)");
}
