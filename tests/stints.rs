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

/// Runs `push` with this thread marked as inside a push ([`IN_PUSH`]).
fn in_push<T>(push: impl FnOnce() -> T) -> T {
    IN_PUSH.with(|p| p.set(true));
    let pushed = push();
    IN_PUSH.with(|p| p.set(false));
    pushed
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
        let engine = Engine::builder()
            .kind(kind)
            .cpu_workers(2)
            .max_pending(64)
            .inline_pace(pace)
            .run_on_pusher(true)
            .build()
            .unwrap();
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
        in_push(|| self.engine.push_sync(body, &[self.vars[r]], &[self.vars[w]])).unwrap();
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

/// In a stint a push whose variables are all free runs directly, with no
/// operation block (`direct_run.rs`), under the failure rules:
/// a failed write marks its variable, a read of it is skipped and passes
/// the first failure on, a blind write clears it, and `no_skip` runs
/// anyway. Every body that runs, runs inside its push.
#[test]
fn a_stint_keeps_the_failure_rules() {
    on_each_engine(|kind| {
        let mut run = Run::new(kind, PACE);
        run.until_inside(kind);
        let (a, b, c) = (run.engine.new_var(), run.engine.new_var(), run.engine.new_var());
        let ran: Arc<Mutex<Vec<(&'static str, bool)>>> = Arc::default();
        let push = |name: &'static str, fail: bool, no_skip: bool, reads: &[Var], writes: &[Var]| {
            let ran = ran.clone();
            let body = move |_: &depengine::RunContext| {
                ran.lock().unwrap().push((name, IN_PUSH.with(Cell::get)));
                if fail {
                    Err("boom".to_owned())
                } else {
                    Ok(())
                }
            };
            let opts = depengine::PushOpts::new().name(name);
            let opts = if no_skip { opts.no_skip() } else { opts };
            in_push(|| run.engine.push_sync_with(body, reads, writes, opts)).unwrap();
        };
        push("fails", true, false, &[], &[a]);
        push("skipped", false, false, &[a], &[b]);
        push("runs anyway", false, true, &[a], &[c]);
        let failed_first = |r: Result<(), depengine::EngineError>| match r {
            Err(depengine::EngineError::OpFailed(e)) => e.op_name() == "fails",
            _ => false,
        };
        assert!(failed_first(run.engine.wait_var(b)), "{kind:?}: the skipped read did not pass the failure on");
        assert!(failed_first(run.engine.wait_var(a)), "{kind:?}: the failed write left no failure");
        assert_eq!(run.engine.wait_var(c), Ok(()), "{kind:?}: the no_skip read's own write failed");
        push("clears", false, false, &[], &[a]);
        push("reads a good value", false, false, &[a], &[b]);
        assert_eq!(run.engine.wait_var(b), Ok(()), "{kind:?}: a blind write did not clear the failure");
        let want = [("fails", true), ("runs anyway", true), ("clears", true), ("reads a good value", true)];
        assert_eq!(*ran.lock().unwrap(), want, "{kind:?}: the bodies that ran, and whether inside their push");
        assert!(run.engine.wait_all().is_err(), "{kind:?}: wait_all did not report the failure");
        let stats = run.engine.stats();
        assert_eq!((stats.failed, stats.skipped), (2, 1), "{kind:?}: failed (the write and the skip) and skipped");
    });
}

/// A body run directly in a stint holds its variables: a wait on one of
/// them inside the body is refused as a deadlock, one on another variable
/// is not; an operation the body pushes on a variable it writes runs only
/// after the body has returned, and reads what the body wrote last.
#[test]
fn a_body_run_in_a_stint_holds_its_variables() {
    on_each_engine(|kind| {
        let mut run = Run::new(kind, PACE);
        run.until_inside(kind);
        let engine = Arc::new(run.engine);
        let (held, other) = (engine.new_var(), engine.new_var());
        let cell = Arc::new(AtomicU64::new(0));
        let seen = Arc::new(AtomicU64::new(u64::MAX));
        let (e, c, s) = (engine.clone(), cell.clone(), seen.clone());
        let waits = Arc::new(Mutex::new(Vec::new()));
        let w = waits.clone();
        let body = move |_: &depengine::RunContext| {
            assert!(IN_PUSH.with(Cell::get), "the body did not run inside its push");
            w.lock().unwrap().push((e.wait_var(held), e.wait_var(other)));
            let (c2, s2) = (c.clone(), s.clone());
            e.push_sync(move |_| s2.store(c2.load(Ordering::SeqCst), Ordering::SeqCst), &[], &[held]).unwrap();
            // A worker would run the pushed operation now if it were not
            // held: give it the time to show that.
            std::thread::sleep(Duration::from_millis(20));
            c.store(7, Ordering::SeqCst);
        };
        in_push(|| engine.push_sync(body, &[], &[held])).unwrap();
        engine.wait_all().unwrap();
        let waits = waits.lock().unwrap();
        assert_eq!(
            *waits,
            [(Err(depengine::EngineError::WaitWouldDeadlock), Ok(()))],
            "{kind:?}: the waits inside the body"
        );
        assert_eq!(seen.load(Ordering::SeqCst), 7, "{kind:?}: the operation pushed from the body ran before it ended");
    });
}
