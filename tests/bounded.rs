//! Bounded memory: a pusher racing ahead of the workers is held
//! near the pending-operation cap, and the cap never deadlocks a program that
//! keeps completions outstanding on purpose.

mod common;

use depengine::{Completion, Engine, EngineKind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

const CAP: u64 = 1_000;

#[test]
fn a_racing_pusher_stays_near_the_cap() {
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        let engine = Engine::builder().kind(kind).cpu_workers(2).max_pending(CAP).build().unwrap();
        let v = engine.new_var();
        let mut highest = 0;
        for _ in 0..50_000 {
            engine.push_sync(|_| (0..50).for_each(|_| std::hint::spin_loop()), &[], &[v]).unwrap();
            highest = highest.max(engine.pending());
        }
        engine.wait_all().unwrap();
        assert!(highest <= 4 * CAP, "{kind:?}: pending reached {highest} with a cap of {CAP}");
        assert!(engine.pool_stats().op_blocks_created as u64 <= 8 * CAP, "{kind:?}: {:?}", engine.pool_stats());
    }
}

#[test]
fn held_completions_do_not_deadlock_the_cap() {
    for kind in EngineKind::ALL {
        let engine = Engine::builder().kind(kind).cpu_workers(2).max_pending(CAP).build().unwrap();
        let held: Arc<Mutex<Vec<Completion>>> = Arc::default();
        for _ in 0..3 * CAP {
            let h = held.clone();
            engine.push_async(move |_, done| h.lock().unwrap().push(done), &[], &[]).unwrap();
        }
        assert_eq!(engine.pending(), 3 * CAP, "{kind:?}: every push returned with its completion held");
        // Only now does anyone signal: another thread, for as long as bodies
        // that ran late (the random-order engine runs them inside the wait)
        // hand it completions.
        let done = Arc::new(AtomicBool::new(false));
        let signaller = {
            let (held, done) = (held.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Acquire) {
                    let batch = std::mem::take(&mut *held.lock().unwrap());
                    batch.into_iter().for_each(Completion::signal);
                    std::thread::yield_now();
                }
            })
        };
        engine.wait_all().unwrap();
        done.store(true, Ordering::Release);
        signaller.join().unwrap();
        assert_eq!(engine.pending(), 0, "{kind:?}");
    }
}

/// At the cap, an operation with no variables runs on its pushing thread,
/// inside the push (libgomp's undeferred task), and an older ready one
/// stays for the worker; with no cap both wait for the (busy) worker.
#[test]
fn above_the_cap_a_push_runs_what_it_made_ready() {
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        for (cap, in_push) in [(3, true), (0, false)] {
            let engine = Engine::builder().kind(kind).cpu_workers(1).max_pending(cap).build().unwrap();
            // Two pending operations, below a cap of 3: the blocker on the
            // worker, the older one ready behind it.
            let gate = common::occupy_a_worker(&engine, &[]);
            let ran_on: Arc<Mutex<Vec<(&str, ThreadId)>>> = Arc::default();
            for name in ["older", "pushed above the cap"] {
                let r = ran_on.clone();
                engine
                    .push_sync(move |_| r.lock().unwrap().push((name, std::thread::current().id())), &[], &[])
                    .unwrap();
            }
            let in_pushes = ran_on.lock().unwrap().clone();
            // Open before asserting: a failing test must not hang in the
            // engine's drop behind its blocker.
            gate.store(true, Ordering::Release);
            let pusher = std::thread::current().id();
            let expected: &[(&str, ThreadId)] = if in_push { &[("pushed above the cap", pusher)] } else { &[] };
            assert_eq!(in_pushes, expected, "{kind:?}, cap {cap}: what ran inside the pushes");
            assert!(common::eventually(Duration::from_secs(10), || ran_on.lock().unwrap().len() == 2), "{kind:?}");
            engine.wait_all().unwrap();
        }
    }
}

/// On the engines with one worker per core, a pusher held at the cap waits
/// for the workers instead of running their ready work: with the only
/// worker held and the cap reached, the ready operations queued behind it
/// all run on the worker once it is free, none on the pusher.
#[test]
fn a_held_pusher_leaves_ready_work_to_the_workers() {
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        let engine = Engine::builder().kind(kind).cpu_workers(1).max_pending(3).build().unwrap();
        let gate = common::occupy_a_worker(&engine, &[]);
        let ran_on: Arc<Mutex<Vec<ThreadId>>> = Arc::default();
        // Each writes a variable of its own: ready at once, but not
        // eligible for the pusher's inline run at the cap.
        for _ in 0..4 {
            let (r, v) = (ran_on.clone(), engine.new_var());
            engine.push_sync(move |_| r.lock().unwrap().push(std::thread::current().id()), &[], &[v]).unwrap();
        }
        let in_pushes = ran_on.lock().unwrap().len();
        gate.store(true, Ordering::Release);
        assert_eq!(in_pushes, 0, "{kind:?}: the held pusher ran queued work");
        assert!(common::eventually(Duration::from_secs(10), || ran_on.lock().unwrap().len() == 4), "{kind:?}");
        let pusher = std::thread::current().id();
        assert!(ran_on.lock().unwrap().iter().all(|&t| t != pusher), "{kind:?}: ran on the pusher");
        assert!(engine.stats().throttled >= 1, "{kind:?}: the cap held the pusher");
        engine.wait_all().unwrap();
    }
}

/// A body's name, ticket and worker.
type Ran = (&'static str, u64, Option<usize>);

/// What runs inside its push at the cap takes no operation block, and is
/// still an operation of the engine: it takes its place in the ticket
/// order, its failure reaches `wait_all` under its name, a `wait_all`
/// inside it is refused as inside any body, a wait on a variable it does
/// not hold is not, and the statistics count it as pushed, finished and
/// run off the workers.
#[test]
fn an_operation_run_inside_its_push_keeps_its_ticket_and_its_failure() {
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        let engine = Arc::new(Engine::builder().kind(kind).cpu_workers(1).max_pending(3).build().unwrap());
        let v = engine.new_var();
        let gate = common::occupy_a_worker(&engine, &[]);
        let seen: Arc<Mutex<Vec<Ran>>> = Arc::default();
        let record = |name: &'static str| {
            let seen = seen.clone();
            move |ctx: &depengine::RunContext| seen.lock().unwrap().push((name, ctx.ticket(), ctx.worker()))
        };
        // Below the cap: queued behind the blocker.
        engine.push_sync(record("older"), &[], &[]).unwrap();
        // At the cap: each runs inside its push.
        engine.push_sync(record("first inside"), &[], &[]).unwrap();
        let e = engine.clone();
        let waits = Arc::new(Mutex::new(None));
        let w = waits.clone();
        engine
            .push_sync_with(
                move |_| {
                    *w.lock().unwrap() = Some((e.wait_all(), e.wait_var(v)));
                    Err::<(), _>("failed on purpose")
                },
                &[],
                &[],
                depengine::PushOpts::new().name("failing inside"),
            )
            .unwrap();
        engine.push_sync(record("last inside"), &[], &[]).unwrap();
        let in_pushes = seen.lock().unwrap().clone();
        let waits = waits.lock().unwrap().take();
        let blocks = engine.pool_stats().op_blocks_created;
        gate.store(true, Ordering::Release);
        assert_eq!(blocks, 2, "{kind:?}: only the blocker and the older one took an operation block");
        let names: Vec<_> = in_pushes.iter().map(|&(name, _, worker)| (name, worker)).collect();
        assert_eq!(names, [("first inside", None), ("last inside", None)], "{kind:?}: run inside the pushes");
        let (wait_all, wait_var) = waits.expect("the failing body ran inside its push");
        assert!(
            matches!(wait_all, Err(depengine::EngineError::WaitWouldDeadlock)),
            "{kind:?}: wait_all inside: {wait_all:?}"
        );
        assert!(wait_var.is_ok(), "{kind:?}: a wait on a variable it does not hold: {wait_var:?}");
        let failure = engine.wait_all().expect_err("the failure reaches wait_all").to_string();
        assert!(failure.contains("failing inside") && failure.contains("failed on purpose"), "{kind:?}: {failure}");
        // One thread's pushes with no variables share its dispatch shard,
        // whose tickets are evenly spaced: the blocker's, the older one's,
        // then those run inside the pushes, the failing one's among them.
        let older = seen.lock().unwrap()[2];
        assert_eq!(older.0, "older", "{kind:?}: the older one ran later");
        let (first, last) = (in_pushes[0].1, in_pushes[1].1);
        assert!(older.1 < first && first < last, "{kind:?}: tickets in push order: {older:?} {in_pushes:?}");
        assert_eq!(last - first, 2 * (first - older.1), "{kind:?}: the failing one took the ticket between");
        let s = engine.stats();
        assert_eq!((s.pushed, s.finished, s.failed), (5, 5, 1), "{kind:?}: {s:?}");
        assert!(s.ran_elsewhere >= 3, "{kind:?}: {s:?}");
    }
}

/// The thread each named body with no variables ran on.
#[derive(Default)]
struct RanOn(Arc<Mutex<Vec<(&'static str, ThreadId)>>>);

impl RanOn {
    /// Pushes a body named `name` with no variables; returns whether it ran
    /// on the pushing thread, inside its push.
    fn inside(&self, engine: &Engine, name: &'static str) -> bool {
        let r = self.0.clone();
        engine.push_sync(move |_| r.lock().unwrap().push((name, std::thread::current().id())), &[], &[]).unwrap();
        self.0.lock().unwrap().contains(&(name, std::thread::current().id()))
    }

    /// Bodies that ran so far.
    fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }
}

/// Asynchronous operations with no variables whose completions the test
/// keeps: they hold the pending count where the test sets it.
struct Held<'a> {
    engine: &'a Engine,
    kind: EngineKind,
    completions: Arc<Mutex<Vec<Completion>>>,
}

impl<'a> Held<'a> {
    fn new(engine: &'a Engine, kind: EngineKind) -> Self {
        Held { engine, kind, completions: Arc::default() }
    }

    /// Pushes `n` of them and waits until their bodies have handed over
    /// their completions.
    fn hold(&self, n: usize) {
        let before = self.completions.lock().unwrap().len();
        for _ in 0..n {
            let h = self.completions.clone();
            self.engine.push_async(move |_, done| h.lock().unwrap().push(done), &[], &[]).unwrap();
        }
        assert!(common::eventually(Duration::from_secs(10), || self.completions.lock().unwrap().len() == before + n));
    }

    /// Signals the `n` held last.
    fn release(&self, n: usize) {
        let batch: Vec<Completion> = {
            let mut h = self.completions.lock().unwrap();
            let at = h.len() - n;
            h.drain(at..).collect()
        };
        batch.into_iter().for_each(Completion::signal);
    }

    fn release_all(&self) {
        let n = self.completions.lock().unwrap().len();
        self.release(n);
    }

    /// Waits until the engine counts `pending` operations pending.
    fn settle(&self, pending: u64) {
        let (engine, kind) = (self.engine, self.kind);
        assert!(
            common::eventually(Duration::from_secs(10), || engine.pending() == pending),
            "{kind:?}: {} pending, waiting for {pending}",
            engine.pending()
        );
    }
}

/// Once a push at the cap has run its body inside the push, pushes with no
/// variables go on doing so until the pending count is down to half the
/// cap, not only while it is at the cap; below half they are queued again,
/// and from then on only the cap itself sends them inside their pushes.
/// Operations whose completions the test holds set the count exactly.
#[test]
fn pushes_run_inside_until_half_the_cap_has_drained() {
    const SMALL_CAP: u64 = 8;
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        // Running on the pusher asked for, the inline pace off: this is the
        // rule without the pace.
        let engine = Engine::builder()
            .kind(kind)
            .cpu_workers(1)
            .max_pending(SMALL_CAP)
            .run_on_pusher(true)
            .inline_pace(Duration::ZERO)
            .build()
            .unwrap();
        let held = Held::new(&engine, kind);
        let ran_on = RanOn::default();
        let inside = |name: &'static str| ran_on.inside(&engine, name);
        held.hold(SMALL_CAP as usize - 1);
        held.settle(SMALL_CAP - 1);
        assert!(inside("at the cap"), "{kind:?}");
        held.release(2);
        held.settle(SMALL_CAP - 3);
        assert!(inside("drained, but not to half"), "{kind:?}: queued at {} pending", SMALL_CAP - 3);
        held.release(2);
        held.settle(SMALL_CAP - 5);
        assert!(!inside("under half"), "{kind:?}: ran inside at {} pending", SMALL_CAP - 5);
        // The queued one finishes on the worker.
        held.settle(SMALL_CAP - 5);
        held.hold(2);
        held.settle(SMALL_CAP - 3);
        assert!(!inside("under the cap, after the drain"), "{kind:?}: ran inside at {} pending", SMALL_CAP - 3);
        held.release_all();
        engine.wait_all().unwrap();
        assert_eq!(ran_on.len(), 4, "{kind:?}");
    }
}

/// The default contract: below the pending cap a push never runs its body
/// on the pushing thread. At the cap a push with no variables may (the
/// pusher would wait there anyway); once the count is below the cap again,
/// even right after such a run, pushes are queued.
#[test]
fn by_default_a_push_below_the_cap_never_runs_its_body_inside() {
    const SMALL_CAP: u64 = 8;
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        let engine = Engine::builder().kind(kind).cpu_workers(1).max_pending(SMALL_CAP).build().unwrap();
        let held = Held::new(&engine, kind);
        let ran_on = RanOn::default();
        let inside = |name: &'static str| ran_on.inside(&engine, name);
        held.hold(SMALL_CAP as usize - 1);
        held.settle(SMALL_CAP - 1);
        assert!(inside("at the cap"), "{kind:?}: at the cap the pusher helps");
        for (released, name) in [(2, "just below the cap"), (2, "at half the cap"), (2, "far below")] {
            held.release(released);
            let pending = engine.pending();
            assert!(!inside(name), "{kind:?}: ran on the pusher {name} ({pending} pending)");
        }
        held.release_all();
        engine.wait_all().unwrap();
        assert_eq!(ran_on.len(), 4, "{kind:?}");
    }
}

/// Below half the cap, a thread whose runs inside its pushes come faster
/// than the inline pace goes on running its pushes with no variables inside
/// them, even with nothing pending; once two windows of its runs
/// (`inline_pace.rs`) came slower than the pace, the next such push with
/// the count under half the cap is queued again.
#[test]
fn a_quick_pusher_goes_on_running_inside_below_half_the_cap() {
    const SMALL_CAP: u64 = 8;
    /// Runs per window of the pace (`inline_pace.rs`).
    const WINDOW: usize = 64;
    const PACE: Duration = Duration::from_millis(2);
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        // A thread of its own: the pace is the thread's, counted from its
        // first run inside a push.
        std::thread::spawn(move || {
            let engine = Engine::builder()
                .kind(kind)
                .cpu_workers(1)
                .max_pending(SMALL_CAP)
                .inline_pace(PACE)
                .run_on_pusher(true)
                .build()
                .unwrap();
            let held = Held::new(&engine, kind);
            held.hold(SMALL_CAP as usize - 1);
            held.settle(SMALL_CAP - 1);
            let pusher = std::thread::current().id();
            // Whether a push ran its body here, inside itself; the body
            // sleeps `slow` (a body run by the worker does not report).
            let inside = |slow: Duration| {
                let here = Arc::new(AtomicBool::new(false));
                let h = here.clone();
                let body = move |_: &depengine::RunContext| {
                    if std::thread::current().id() == pusher {
                        h.store(true, Ordering::Relaxed);
                    }
                    if !slow.is_zero() {
                        std::thread::sleep(slow);
                    }
                };
                engine.push_sync(body, &[], &[]).unwrap();
                here.load(Ordering::Relaxed)
            };
            // Two windows at the cap, each run far quicker than the pace.
            for i in 0..2 * WINDOW {
                assert!(inside(Duration::ZERO), "{kind:?}: run {i} at the cap was queued");
            }
            held.release_all();
            held.settle(0);
            assert!(inside(Duration::ZERO), "{kind:?}: queued with nothing pending at a quick pace");
            // Runs slower than the pace: the rest of the third window and
            // the whole fourth still run inside (a sleep of twice the pace
            // makes the third window slow although one of its runs was quick).
            for i in 0..2 * WINDOW - 1 {
                assert!(inside(2 * PACE), "{kind:?}: slow run {i} queued before two windows were slow");
            }
            assert!(!inside(Duration::ZERO), "{kind:?}: ran inside with nothing pending after two slow windows");
            engine.wait_all().unwrap();
        })
        .join()
        .unwrap();
    }
}

/// Several threads at once, each past the cap and each at a pace quick
/// enough to go on running its bodies inside its pushes: every body runs
/// exactly once, the engine counts each, and nothing stays pending.
#[test]
fn quick_pushers_on_several_threads_lose_no_body() {
    const THREADS: usize = 3;
    const PUSHES: usize = 20_000;
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        let engine = Engine::builder()
            .kind(kind)
            .cpu_workers(2)
            .max_pending(64)
            .inline_pace(Duration::from_millis(1))
            .run_on_pusher(true)
            .build()
            .unwrap();
        let counts: Arc<Vec<std::sync::atomic::AtomicUsize>> =
            Arc::new((0..THREADS * PUSHES).map(|_| Default::default()).collect());
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (engine, counts) = (&engine, counts.clone());
                s.spawn(move || {
                    for i in 0..PUSHES {
                        let c = counts.clone();
                        engine
                            .push_sync(
                                move |_| {
                                    c[t * PUSHES + i].fetch_add(1, Ordering::Relaxed);
                                },
                                &[],
                                &[],
                            )
                            .unwrap();
                    }
                });
            }
        });
        engine.wait_all().unwrap();
        let wrong: Vec<usize> = (0..THREADS * PUSHES).filter(|&k| counts[k].load(Ordering::Relaxed) != 1).collect();
        assert!(
            wrong.is_empty(),
            "{kind:?}: {} bodies ran other than once, the first {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        );
        let s = engine.stats();
        assert_eq!(s.pushed, (THREADS * PUSHES) as u64, "{kind:?}: {s:?}");
        assert_eq!(s.ran_on_workers + s.ran_elsewhere, (THREADS * PUSHES) as u64, "{kind:?}: {s:?}");
        assert_eq!(engine.pending(), 0, "{kind:?}");
        // The path this test is for: most bodies ran inside their pushes
        // (52,000–59,900 of the 60,000 in runs here).
        assert!(s.ran_elsewhere > 0, "{kind:?}: no body ran inside its push: {s:?}");
    }
}
