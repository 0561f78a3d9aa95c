//! Stints (`pusher_runs.rs`): a pusher whose pushes come quicker than the
//! engine's inline pace allows probes; a probe drains what is pending and
//! the pusher then runs the operations with variables that its pushes make
//! ready itself, inside the pushes, for as long as that beats the pace its
//! queued pushes had. The order of conflicting operations is kept
//! throughout; bodies that got slow end the stint; held completions keep
//! one from starting and never hang a push.

mod common;

use depengine::{Completion, Engine, EngineKind, Var};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Runs per window of a thread's pace (`inline_pace.rs`): a stint is not
/// judged before two windows of its runs have ended.
const WINDOW: usize = 64;

/// A pace so long that every pusher of a test is quick enough to probe.
const PACE: Duration = Duration::from_secs(1);

/// More pushes than a thread makes between two looks at whether a probe
/// is due (`pusher_runs::LOOK_EVERY`, 4,096), so that a probe comes even
/// where the pusher never meets the cap.
const ENOUGH: usize = 20_000;

/// How long a test pushes quick operations, at most, waiting for a probe
/// that starts a stint. A probe gives up if the workers do not drain what
/// is pending in time, and the next one comes only after a pause (up to
/// 128 ms): on a machine crowded with other tests' threads, the first
/// few may fail.
const PATIENCE: Duration = Duration::from_secs(20);

const VARS: usize = 4;

std::thread_local! {
    /// Set on the test's pushing thread while it is inside a push.
    static IN_PUSH: Cell<bool> = const { Cell::new(false) };
}

/// An engine's variables and their values, and what each push did.
struct Run {
    engine: Engine,
    vars: Vec<Var>,
    cells: Arc<Vec<AtomicU64>>,
    /// The operations that wrote each variable, in the order they ran.
    writers: Arc<Vec<Mutex<Vec<usize>>>>,
    /// Per push: whether its body ran inside it, on the pushing thread.
    inside: Vec<bool>,
}

impl Run {
    fn new(kind: EngineKind, pace: Duration) -> Self {
        let engine = Engine::builder().kind(kind).cpu_workers(2).max_pending(64).inline_pace(pace).build().unwrap();
        let vars = (0..VARS).map(|_| engine.new_var()).collect();
        Run {
            engine,
            vars,
            cells: Arc::new((0..VARS as u64).map(AtomicU64::new).collect()),
            writers: Arc::new((0..VARS).map(|_| Mutex::default()).collect()),
            inside: Vec::new(),
        }
    }

    /// Pushes operation `i`: it reads one variable and writes the next,
    /// after sleeping `slow`; returns whether it ran inside its push.
    fn push(&mut self, slow: Duration) -> bool {
        let i = self.inside.len();
        let (r, w) = (i % VARS, (i + 1) % VARS);
        let (cells, writers) = (self.cells.clone(), self.writers.clone());
        let ran_inside = Arc::new(AtomicU64::new(0));
        let seen = ran_inside.clone();
        let body = move |_: &depengine::RunContext| {
            if IN_PUSH.with(Cell::get) {
                seen.store(1, Ordering::Relaxed);
            }
            if !slow.is_zero() {
                std::thread::sleep(slow);
            }
            let read = cells[r].load(Ordering::Relaxed);
            cells[w].store(common::mix(i as u64, read), Ordering::Relaxed);
            writers[w].lock().unwrap().push(i);
        };
        IN_PUSH.with(|p| p.set(true));
        self.engine.push_sync(body, &[self.vars[r]], &[self.vars[w]]).unwrap();
        IN_PUSH.with(|p| p.set(false));
        let inside = ran_inside.load(Ordering::Relaxed) == 1;
        self.inside.push(inside);
        inside
    }

    /// Pushes quick operations until one runs inside its push; returns
    /// its index.
    fn until_inside(&mut self, kind: EngineKind) -> usize {
        let start = Instant::now();
        let mut pushes = 0;
        while pushes < ENOUGH || start.elapsed() < PATIENCE {
            if self.push(Duration::ZERO) {
                return self.inside.len() - 1;
            }
            pushes += 1;
        }
        let stats = self.engine.stats();
        panic!("{kind:?}: no push ran its operation inside itself in {pushes} quick pushes over {PATIENCE:?}: {stats}");
    }

    /// Waits for everything, then checks the values and the order of the
    /// writes against a sequential run of the same pushes.
    fn check(&self, kind: EngineKind) {
        self.engine.wait_all().unwrap();
        let mut replay: Vec<u64> = (0..VARS as u64).collect();
        let mut writers: Vec<Vec<usize>> = vec![Vec::new(); VARS];
        for i in 0..self.inside.len() {
            let (r, w) = (i % VARS, (i + 1) % VARS);
            replay[w] = common::mix(i as u64, replay[r]);
            writers[w].push(i);
        }
        for v in 0..VARS {
            assert_eq!(*self.writers[v].lock().unwrap(), writers[v], "{kind:?}: the writes of var {v} out of order");
            assert_eq!(self.cells[v].load(Ordering::Relaxed), replay[v], "{kind:?}: var {v}'s value");
        }
    }
}

/// Runs `test` on a thread of its own for each threaded engine: a pace is
/// its thread's, counted from that thread's first push.
fn on_each_engine(test: fn(EngineKind)) {
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        std::thread::spawn(move || test(kind)).join().unwrap();
    }
}

/// A probe comes, and from it on each push runs its operation inside
/// itself, on the pushing thread, for at least the two windows before the
/// stint is first judged; every value and the order of the writes are
/// those of a sequential run.
#[test]
fn a_quick_pusher_runs_its_ready_operations_itself() {
    on_each_engine(|kind| {
        let mut run = Run::new(kind, PACE);
        let first = run.until_inside(kind);
        for _ in 0..2 * WINDOW {
            run.push(Duration::ZERO);
        }
        let queued = (first..first + 2 * WINDOW).filter(|&i| !run.inside[i]).collect::<Vec<_>>();
        assert!(queued.is_empty(), "{kind:?}: pushes {queued:?} queued within a stint's first two windows");
        assert!(run.engine.stats().stints >= 1, "{kind:?}: no stint counted");
        run.check(kind);
    });
}

/// Bodies that got slow end a stint: once two windows of them have ended
/// (their pace is far over eight times that of the queued pushes), the
/// next push is queued again.
#[test]
fn a_stint_ends_when_the_bodies_get_slow() {
    on_each_engine(|kind| {
        let mut run = Run::new(kind, PACE);
        run.until_inside(kind);
        let slow = Duration::from_millis(1);
        let queued = (0..3 * WINDOW).position(|_| !run.push(slow));
        let at = queued.unwrap_or_else(|| panic!("{kind:?}: {} slow pushes all ran inside", 3 * WINDOW));
        assert!(at >= WINDOW, "{kind:?}: slow push {at} queued before two windows had ended");
        run.check(kind);
    });
}

/// With the inline pace off there are no stints: no push with variables
/// runs its operation inside itself.
#[test]
fn no_stints_with_the_inline_pace_off() {
    on_each_engine(|kind| {
        let mut run = Run::new(kind, Duration::ZERO);
        for _ in 0..ENOUGH {
            run.push(Duration::ZERO);
        }
        let inside = run.inside.iter().filter(|&&i| i).count();
        assert_eq!(inside, 0, "{kind:?}: {inside} pushes ran inside with the pace off");
        assert_eq!(run.engine.stats().stints, 0, "{kind:?}");
        run.check(kind);
    });
}

/// A completion held on purpose keeps the pending count above zero, so a
/// probe cannot drain it: no stint starts, and the pushes go on (no hang).
/// Once it is signalled, a stint can start (after the pause that failed
/// probes leave).
#[test]
fn a_held_completion_keeps_a_stint_from_starting() {
    on_each_engine(|kind| {
        let mut run = Run::new(kind, PACE);
        let held: Arc<Mutex<Option<Completion>>> = Arc::default();
        let h = held.clone();
        run.engine.push_async(move |_, done| *h.lock().unwrap() = Some(done), &[], &[]).unwrap();
        assert!(common::eventually(Duration::from_secs(10), || held.lock().unwrap().is_some()));
        for _ in 0..ENOUGH {
            run.push(Duration::ZERO);
        }
        let inside = run.inside.iter().filter(|&&i| i).count();
        assert_eq!(inside, 0, "{kind:?}: {inside} pushes ran inside with a completion held");
        assert_eq!(run.engine.stats().stints, 0, "{kind:?}: a stint with a completion held");
        held.lock().unwrap().take().unwrap().signal();
        // The failed probes have lengthened the pause before the next one,
        // up to its longest (`pusher_runs::MAX_PAUSE`, 128 ms).
        std::thread::sleep(Duration::from_millis(150));
        run.until_inside(kind);
        run.check(kind);
    });
}
