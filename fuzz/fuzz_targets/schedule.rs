//! Fuzzes schedules: the input decodes into a program of pushes (read and
//! write sets over a few variables, two of them placed in another
//! thread's dispatch shard so that pushes cross shards, sync / async
//! completed in the body / async completed on a foreign thread, property,
//! priority, no-skip, succeeding or failing four ways, sometimes pushing a
//! nested operation),
//! waits, deletions and bulking, and runs it on every engine.
//!
//! What the pushing thread observes — the values each top-level operation
//! read (or that it was skipped), every wait's result, the value each
//! deletion saw, the final values and versions — must be identical on every
//! engine to what the `naive` engine (the reference) gives. Nested
//! operations are pushed from bodies on whatever thread runs them, so their
//! place in the order is the engine's choice: they are checked against a
//! sequential replay in the order of their tickets, and each must run
//! exactly once. Afterwards every pool must be empty again.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use depengine::{Completion, Engine, EngineError, FnProperty, PushOpts, RunContext, Var};
use depengine_fuzz::{engines, mix, on_foreign_thread, PanicsWhenDropped, INTENDED_PANIC};
use libfuzzer_sys::fuzz_target;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Variables the top-level program uses.
const SHARED: usize = 5;
/// Variables only nested operations use (so that the top-level results do
/// not depend on when a body pushed).
const NESTED: usize = 2;
/// Steps decoded from one input at most.
const MAX_STEPS: usize = 48;
/// Value cells: every incarnation of a shared variable (a deleted one is
/// replaced by a new variable with a new cell), then the nested ones.
const CELLS: usize = SHARED + MAX_STEPS + NESTED;
const FIRST_NESTED_CELL: usize = SHARED + MAX_STEPS;

/// Operation names: a failure is reported by name, so each top-level step has one.
static NAMES: [&str; MAX_STEPS] = [
    "t00", "t01", "t02", "t03", "t04", "t05", "t06", "t07", "t08", "t09", "t10", "t11", "t12", "t13", "t14", "t15",
    "t16", "t17", "t18", "t19", "t20", "t21", "t22", "t23", "t24", "t25", "t26", "t27", "t28", "t29", "t30", "t31",
    "t32", "t33", "t34", "t35", "t36", "t37", "t38", "t39", "t40", "t41", "t42", "t43", "t44", "t45", "t46", "t47",
];

const PROPS: [FnProperty; 5] =
    [FnProperty::Normal, FnProperty::CopyToGpu, FnProperty::CopyFromGpu, FnProperty::CpuPrioritized, FnProperty::Async];

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Runs {
    Sync,
    /// Asynchronous, completed inside the body.
    AsyncInBody,
    /// Asynchronous, its effect and completion on a foreign thread.
    AsyncForeign,
}

#[derive(Arbitrary, Debug, Clone)]
struct OpSpec {
    /// Bit masks over the shared variables (a variable in both is written).
    reads: u8,
    writes: u8,
    runs: Runs,
    /// Mostly success; see [`Outcome::of`].
    outcome: u8,
    prop: u8,
    priority: i8,
    no_skip: bool,
    /// A nested push from the body: bit masks over the nested variables.
    nested: Option<(u8, u8)>,
    /// Bit 0: a synchronous body captures a [`PanicsWhenDropped`] (dropped
    /// when the body ends, or unrun when skipped or cancelled); bit 1: a
    /// panicking body panics with one as its payload.
    bomb: u8,
}

#[derive(Arbitrary, Debug, Clone)]
enum Step {
    Push(OpSpec),
    WaitVar(u8),
    WaitToWrite(u8),
    WaitAll,
    Delete(u8),
    BulkSize(u8),
    FlushBulk,
}

#[derive(Debug, Clone, Copy)]
enum Outcome {
    Succeed,
    ReturnErr,
    Panic,
    DropCompletion,
}

impl Outcome {
    fn of(byte: u8) -> Outcome {
        match byte {
            0..=199 => Outcome::Succeed,
            200..=219 => Outcome::ReturnErr,
            220..=239 => Outcome::Panic,
            _ => Outcome::DropCompletion,
        }
    }
}

/// A wait's result as the program sees it: the failing operation's name
/// and message, or success.
type WaitResult = Result<(), (String, String)>;

/// What the pushing thread observes; equal on every engine.
#[derive(Debug, PartialEq, Default)]
struct Observed {
    /// Per step: the values a top-level operation read (`None`: skipped or no push).
    reads: Vec<Option<Vec<u64>>>,
    waits: Vec<(usize, WaitResult)>,
    /// Per `wait_all` (and the final one): whether it reported a failure.
    wait_alls: Vec<(usize, bool)>,
    /// Per deletion: the value its callback saw.
    deleted: Vec<(usize, u64)>,
    /// Per shared variable at the end: value and version.
    finals: Vec<(u64, u64)>,
}

/// One nested operation's run.
#[derive(Debug)]
struct NestedRun {
    ticket: u64,
    id: u64,
    reads: Vec<usize>,
    writes: Vec<usize>,
    read: Vec<u64>,
}

/// State shared with the bodies of one program run.
struct Run {
    engine: Arc<Engine>,
    cells: Vec<AtomicU64>,
    nested_vars: Vec<Var>,
    reads: Mutex<Vec<Option<Vec<u64>>>>,
    /// Each top-level step's ticket and the cells it touched.
    tickets: Mutex<Vec<Option<Stamped>>>,
    nested: Mutex<Vec<NestedRun>>,
    nested_pushed: AtomicU64,
    deleted: Mutex<Vec<(usize, u64)>>,
    /// Engine misbehaviour seen inside bodies, reported by the main thread.
    findings: Mutex<Vec<String>>,
}

/// Reads the cells `reads`, then writes a value derived from them and
/// `id` into each of `writes`; returns what it read.
fn effect(cells: &[AtomicU64], id: u64, reads: &[usize], writes: &[usize]) -> Vec<u64> {
    let read: Vec<u64> = reads.iter().map(|&c| cells[c].load(Relaxed)).collect();
    let h = read.iter().fold(id, |h, &v| mix(h, v));
    for &c in writes {
        cells[c].store(mix(h, c as u64), Relaxed);
    }
    read
}

/// A top-level step's ticket and the cells it touched.
type Stamped = (u64, Vec<usize>);

/// The indices below `count` whose bit is set in `mask`.
fn members(mask: u8, count: usize) -> impl Iterator<Item = usize> {
    (0..count).filter(move |i| mask & (1 << i) != 0)
}

impl Run {
    /// A top-level body's work: effect, record, nested push.
    fn top_work(
        self: &Arc<Self>,
        step: usize,
        ticket: u64,
        reads: &[usize],
        writes: &[usize],
        nested: Option<(u8, u8)>,
    ) {
        let read = effect(&self.cells, step as u64, reads, writes);
        self.reads.lock().unwrap()[step] = Some(read);
        self.tickets.lock().unwrap()[step] = Some((ticket, reads.iter().chain(writes).copied().collect()));
        if let Some((r, w)) = nested {
            self.push_nested(r & !w, w);
        }
    }

    /// Pushes a nested operation over the nested variables. Not bulkable
    /// (`CpuPrioritized`), so it never joins or closes the pusher's bulk.
    fn push_nested(self: &Arc<Self>, reads: u8, writes: u8) {
        let id = 1000 + self.nested_pushed.fetch_add(1, Relaxed);
        let cells = |mask| members(mask, NESTED).map(|i| FIRST_NESTED_CELL + i).collect::<Vec<_>>();
        let vars = |mask| members(mask, NESTED).map(|i| self.nested_vars[i]).collect::<Vec<_>>();
        let (read_cells, write_cells) = (cells(reads), cells(writes));
        let run = self.clone();
        let pushed = self.engine.push_sync_with(
            move |ctx: &RunContext| {
                let read = effect(&run.cells, id, &read_cells, &write_cells);
                let record = NestedRun { ticket: ctx.ticket(), id, reads: read_cells, writes: write_cells, read };
                run.nested.lock().unwrap().push(record);
            },
            &vars(reads),
            &vars(writes),
            PushOpts::new().name("nested").prop(FnProperty::CpuPrioritized),
        );
        if let Err(e) = pushed {
            self.findings.lock().unwrap().push(format!("nested push refused: {e}"));
        }
    }

    fn fail_message(step: usize) -> String {
        format!("fail #{step}")
    }

    /// Ends an asynchronous operation as `outcome` says.
    fn complete(step: usize, outcome: Outcome, done: Completion) {
        match outcome {
            Outcome::Succeed => done.signal(),
            Outcome::ReturnErr => done.fail(Self::fail_message(step)),
            Outcome::DropCompletion => drop(done),
            Outcome::Panic => {
                let _held = done; // dropped while unwinding: the op fails with the panic
                panic!("{INTENDED_PANIC} #{step}");
            }
        }
    }

    fn push(self: &Arc<Self>, step: usize, spec: &OpSpec, vars: &[Var], cell_of: &[usize]) -> Result<(), EngineError> {
        let writes: Vec<usize> = members(spec.writes, SHARED).collect();
        let reads: Vec<usize> = members(spec.reads & !spec.writes, SHARED).collect();
        let (read_vars, write_vars): (Vec<Var>, Vec<Var>) =
            (reads.iter().map(|&s| vars[s]).collect(), writes.iter().map(|&s| vars[s]).collect());
        let (read_cells, write_cells): (Vec<usize>, Vec<usize>) =
            (reads.iter().map(|&s| cell_of[s]).collect(), writes.iter().map(|&s| cell_of[s]).collect());
        let mut opts = PushOpts::new()
            .name(NAMES[step])
            .prop(PROPS[spec.prop as usize % PROPS.len()])
            .priority(i32::from(spec.priority));
        if spec.no_skip {
            opts = opts.no_skip();
        }
        let (run, outcome, nested) = (self.clone(), Outcome::of(spec.outcome), spec.nested);
        // Not in a body that panics: dropped while it unwinds, it would
        // panic during a panic, which aborts any Rust program.
        let captured = spec.bomb & 1 != 0 && !matches!(outcome, Outcome::Panic);
        let panic_payload = spec.bomb & 2 != 0;
        match spec.runs {
            Runs::Sync => {
                let bomb = captured.then(|| PanicsWhenDropped(1));
                self.engine.push_sync_with(
                    move |ctx: &RunContext| {
                        let _dropped_at_the_end = bomb;
                        run.top_work(step, ctx.ticket(), &read_cells, &write_cells, nested);
                        match outcome {
                            Outcome::Succeed | Outcome::DropCompletion => Ok(()),
                            Outcome::ReturnErr => Err(Self::fail_message(step)),
                            Outcome::Panic if panic_payload => std::panic::panic_any(PanicsWhenDropped(1)),
                            Outcome::Panic => panic!("{INTENDED_PANIC} #{step}"),
                        }
                    },
                    &read_vars,
                    &write_vars,
                    opts,
                )
            }
            Runs::AsyncInBody => self.engine.push_async_with(
                move |ctx, done| {
                    run.top_work(step, ctx.ticket(), &read_cells, &write_cells, nested);
                    Self::complete(step, outcome, done);
                },
                &read_vars,
                &write_vars,
                opts,
            ),
            Runs::AsyncForeign => self.engine.push_async_with(
                move |ctx, done| {
                    let ticket = ctx.ticket();
                    on_foreign_thread(Box::new(move || {
                        run.top_work(step, ticket, &read_cells, &write_cells, nested);
                        // A panic would kill the foreign thread: fail instead.
                        let outcome = if let Outcome::Panic = outcome { Outcome::ReturnErr } else { outcome };
                        Self::complete(step, outcome, done);
                    }));
                },
                &read_vars,
                &write_vars,
                opts,
            ),
        }
    }
}

fn wait_result(kind: &str, step: usize, result: Result<(), EngineError>) -> WaitResult {
    match result {
        Ok(()) => Ok(()),
        Err(EngineError::OpFailed(e)) => Err((e.op_name().to_owned(), e.message().to_owned())),
        Err(other) => panic!("{kind}: step {step}: a wait failed with {other:?}"),
    }
}

/// Runs `steps` on `engine` and checks what only depends on this engine;
/// returns what must match the reference.
fn run_program(kind: &str, engine: &Arc<Engine>, steps: &[Step]) -> Observed {
    let run = Arc::new(Run {
        engine: engine.clone(),
        cells: (0..CELLS as u64).map(AtomicU64::new).collect(),
        nested_vars: (0..NESTED).map(|_| engine.new_var()).collect(),
        reads: Mutex::new(vec![None; steps.len()]),
        tickets: Mutex::new(vec![None; steps.len()]),
        nested: Mutex::new(Vec::new()),
        nested_pushed: AtomicU64::new(0),
        deleted: Mutex::new(Vec::new()),
        findings: Mutex::new(Vec::new()),
    });
    let mut vars: Vec<Var> = (0..SHARED).map(|_| engine.new_var()).collect();
    // A variable lives in the dispatch shard of the first thread that
    // pushes to it or waits on it: one shared and one nested variable are
    // placed from another thread here, so that pushes over several
    // variables cross shards (the top-level ones from this thread, the
    // nested ones from bodies on the workers).
    let elsewhere = [vars[SHARED - 1], run.nested_vars[NESTED - 1]];
    std::thread::scope(|s| {
        s.spawn(|| elsewhere.iter().for_each(|&v| drop(engine.wait_var(v))));
    });
    let mut cell_of: Vec<usize> = (0..SHARED).collect();
    let mut next_cell = SHARED;
    let mut seen = Observed::default();
    for (i, step) in steps.iter().enumerate() {
        match step {
            Step::Push(spec) => {
                run.push(i, spec, &vars, &cell_of).unwrap_or_else(|e| panic!("{kind}: step {i}: push refused: {e}"))
            }
            Step::WaitVar(s) => seen.waits.push((i, wait_result(kind, i, engine.wait_var(vars[*s as usize % SHARED])))),
            Step::WaitToWrite(s) => {
                seen.waits.push((i, wait_result(kind, i, engine.wait_to_write(vars[*s as usize % SHARED]))))
            }
            Step::WaitAll => seen.wait_alls.push((i, engine.wait_all().is_err())),
            Step::Delete(s) => {
                let slot = *s as usize % SHARED;
                let (r, cell) = (run.clone(), cell_of[slot]);
                engine
                    .delete_var(vars[slot], move || r.deleted.lock().unwrap().push((i, r.cells[cell].load(Relaxed))))
                    .unwrap_or_else(|e| panic!("{kind}: step {i}: delete refused: {e}"));
                vars[slot] = engine.new_var();
                cell_of[slot] = next_cell;
                next_cell += 1;
            }
            Step::BulkSize(n) => {
                engine.set_bulk_size(1 + *n as usize % 8).unwrap();
            }
            Step::FlushBulk => engine.flush_bulk().unwrap(),
        }
    }
    seen.wait_alls.push((steps.len(), engine.wait_all().is_err()));
    engine.set_bulk_size(1).unwrap();
    seen.finals = (0..SHARED)
        .map(|s| (run.cells[cell_of[s]].load(Relaxed), engine.var_version(vars[s]).expect("a live variable")))
        .collect();
    seen.reads = std::mem::take(&mut *run.reads.lock().unwrap());
    seen.deleted = std::mem::take(&mut *run.deleted.lock().unwrap());
    seen.deleted.sort_unstable();

    let findings = run.findings.lock().unwrap();
    assert!(findings.is_empty(), "{kind}: {findings:?}");
    // Top-level pushes come from one thread: along every variable (cell),
    // their tickets follow push order (bulk members share their fused
    // operation's ticket). Pushes that share no variable may be stamped
    // in either order: each dispatch shard keeps its own clock.
    let tickets = run.tickets.lock().unwrap();
    for cell in 0..CELLS {
        let along: Vec<u64> = tickets.iter().flatten().filter(|(_, c)| c.contains(&cell)).map(|&(t, _)| t).collect();
        assert!(along.windows(2).all(|w| w[0] <= w[1]), "{kind}: tickets out of push order on cell {cell}: {along:?}");
    }
    drop(tickets);
    check_nested(kind, &run);

    for v in vars.into_iter().chain(run.nested_vars.iter().copied()) {
        engine.delete_var(v, || {}).expect("delete at the end");
    }
    engine.wait_all().expect("deletions do not fail");
    let stats = engine.pool_stats();
    assert_eq!((stats.live_ops, stats.live_vars), (0, 0), "{kind}: pools not empty after the program: {stats:?}");
    seen
}

/// Nested operations: each ran exactly once, and replaying them
/// sequentially in ticket order reproduces what each read and the final
/// values.
fn check_nested(kind: &str, run: &Run) {
    let mut runs = std::mem::take(&mut *run.nested.lock().unwrap());
    assert_eq!(runs.len() as u64, run.nested_pushed.load(Relaxed), "{kind}: a nested operation was lost or repeated");
    runs.sort_by_key(|r| (r.ticket, r.id));
    let replay: Vec<AtomicU64> = (0..CELLS as u64).map(AtomicU64::new).collect();
    for r in &runs {
        let read = effect(&replay, r.id, &r.reads, &r.writes);
        assert_eq!(read, r.read, "{kind}: nested op {} (ticket {}) read other values than the replay", r.id, r.ticket);
    }
    for (c, (want, got)) in replay.iter().zip(&run.cells).enumerate().skip(FIRST_NESTED_CELL) {
        assert_eq!(want.load(Relaxed), got.load(Relaxed), "{kind}: final value of nested cell {c}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(steps) = Vec::<Step>::arbitrary_take_rest(Unstructured::new(data)) else { return };
    let steps = &steps[..steps.len().min(MAX_STEPS)];
    // The random-order mode, seeded from the input: among the operations
    // ready at each moment, a different one runs first for each seed.
    let seed = data.iter().fold(0xCBF2_9CE4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3));
    let shuffled = Arc::new(Engine::builder().shuffle_seed(seed).build().expect("engine"));
    let mut reference: Option<Observed> = None;
    let all = engines().iter().map(|(name, engine)| (*name, engine)).chain([("shuffle", &shuffled)]);
    for (kind, engine) in all {
        let seen = run_program(kind, engine, steps);
        match &reference {
            None => reference = Some(seen),
            Some(want) => assert_eq!(&seen, want, "{kind} differs from naive on {steps:?}"),
        }
    }
});
