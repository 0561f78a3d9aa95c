//! Fuzzes pushes from several threads at once: the input decodes into two
//! or three programs, one per pushing thread, of pushes (read and write sets
//! over variables that all the threads share; sync, async completed in the
//! body, or async completed on a foreign thread; `Normal` or
//! `CpuPrioritized`) and waits (`wait_var`, `wait_to_write`, `wait_all`),
//! and the threads run them at the same time on every engine. Each thread
//! is a dispatch shard's home, so their pushes meet in one shard's
//! combiner, cross shards, or neither, as the variables fall.
//!
//! Which thread's push goes first is the engines' and the scheduler's
//! choice, so nothing is compared across engines. What must hold on each:
//! every operation runs exactly once; replaying them sequentially in
//! ticket order reproduces every value each read and every final value
//! (the tickets are the engine's linearization of all pushes); along
//! every variable, each thread's operations are stamped in its push order;
//! no wait fails; and afterwards no operation block or variable is live.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use depengine::{Engine, FnProperty, PushOpts, Var};
use depengine_fuzz::{engines, mix, on_foreign_thread};
use libfuzzer_sys::fuzz_target;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Variables, shared by every thread's program.
const VARS: usize = 6;
/// Steps decoded for one thread at most.
const MAX_STEPS: usize = 40;

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Runs {
    Sync,
    /// Asynchronous, completed inside the body.
    AsyncInBody,
    /// Asynchronous, its effect and completion on a foreign thread.
    AsyncForeign,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Step {
    /// Bit masks over the variables (a variable in both is written).
    Push {
        reads: u8,
        writes: u8,
        runs: Runs,
        prioritized: bool,
    },
    WaitVar(u8),
    WaitToWrite(u8),
    WaitAll,
}

/// One operation's run: who pushed it, where in that thread's program,
/// its ticket, and what it read.
#[derive(Debug)]
struct Record {
    thread: usize,
    step: usize,
    ticket: u64,
    reads: Vec<usize>,
    writes: Vec<usize>,
    read: Vec<u64>,
}

struct Run {
    cells: Vec<AtomicU64>,
    log: Mutex<Vec<Record>>,
    pushed: AtomicU64,
}

/// Reads the operation's variables (a written one too: its access is
/// exclusive), then writes values derived from all it read; returns what
/// it read.
fn effect(cells: &[AtomicU64], id: u64, reads: &[usize], writes: &[usize]) -> Vec<u64> {
    let read: Vec<u64> = reads.iter().chain(writes).map(|&c| cells[c].load(Relaxed)).collect();
    let h = read.iter().fold(id, |h, &v| mix(h, v));
    for &w in writes {
        cells[w].store(mix(h, w as u64), Relaxed);
    }
    read
}

fn id_of(thread: usize, step: usize) -> u64 {
    (thread as u64) << 16 | step as u64
}

fn push(engine: &Engine, run: &Arc<Run>, vars: &[Var], thread: usize, step: usize, spec: (u8, u8, Runs, bool)) {
    let (reads, writes, runs, prioritized) = spec;
    let written: Vec<usize> = (0..VARS).filter(|v| writes >> v & 1 != 0).collect();
    let read: Vec<usize> = (0..VARS).filter(|v| reads >> v & 1 != 0 && writes >> v & 1 == 0).collect();
    let (read_vars, write_vars): (Vec<Var>, Vec<Var>) =
        (read.iter().map(|&v| vars[v]).collect(), written.iter().map(|&v| vars[v]).collect());
    let prop = if prioritized { FnProperty::CpuPrioritized } else { FnProperty::Normal };
    let opts = PushOpts::new().prop(prop);
    let id = id_of(thread, step);
    let r = run.clone();
    let done = move |ticket: u64, read: Vec<usize>, written: Vec<usize>| {
        let values = effect(&r.cells, id, &read, &written);
        r.log.lock().unwrap().push(Record { thread, step, ticket, reads: read, writes: written, read: values });
    };
    run.pushed.fetch_add(1, Relaxed);
    let pushed = match runs {
        Runs::Sync => {
            engine.push_sync_with(move |ctx| done(ctx.ticket(), read, written), &read_vars, &write_vars, opts)
        }
        Runs::AsyncInBody => engine.push_async_with(
            move |ctx, completion| {
                done(ctx.ticket(), read, written);
                completion.signal();
            },
            &read_vars,
            &write_vars,
            opts,
        ),
        Runs::AsyncForeign => engine.push_async_with(
            move |ctx, completion| {
                let ticket = ctx.ticket();
                on_foreign_thread(Box::new(move || {
                    done(ticket, read, written);
                    completion.signal();
                }));
            },
            &read_vars,
            &write_vars,
            opts,
        ),
    };
    pushed.unwrap_or_else(|e| panic!("thread {thread}, step {step}: push refused: {e}"));
}

/// Runs one thread's program.
fn run_thread(kind: &str, engine: &Engine, run: &Arc<Run>, vars: &[Var], thread: usize, steps: &[Step]) {
    for (step, s) in steps.iter().enumerate() {
        let waited = match *s {
            Step::Push { reads, writes, runs, prioritized } => {
                push(engine, run, vars, thread, step, (reads, writes, runs, prioritized));
                Ok(())
            }
            Step::WaitVar(v) => engine.wait_var(vars[v as usize % VARS]),
            Step::WaitToWrite(v) => engine.wait_to_write(vars[v as usize % VARS]),
            Step::WaitAll => engine.wait_all(),
        };
        waited.unwrap_or_else(|e| panic!("{kind}: thread {thread}, step {step}: a wait failed: {e}"));
    }
}

fn run_programs(kind: &str, engine: &Arc<Engine>, programs: &[Vec<Step>]) {
    let vars: Vec<Var> = (0..VARS).map(|_| engine.new_var()).collect();
    let run = Arc::new(Run {
        cells: (0..VARS as u64).map(AtomicU64::new).collect(),
        log: Mutex::new(Vec::new()),
        pushed: AtomicU64::new(0),
    });
    let start = std::sync::Barrier::new(programs.len());
    std::thread::scope(|s| {
        for (thread, steps) in programs.iter().enumerate().skip(1) {
            let (run, vars, start) = (&run, &vars, &start);
            s.spawn(move || {
                start.wait();
                run_thread(kind, engine, run, vars, thread, steps);
            });
        }
        start.wait();
        run_thread(kind, engine, &run, &vars, 0, &programs[0]);
    });
    engine.wait_all().unwrap_or_else(|e| panic!("{kind}: the last wait_all failed: {e}"));

    let mut log = std::mem::take(&mut *run.log.lock().unwrap());
    assert_eq!(log.len() as u64, run.pushed.load(Relaxed), "{kind}: an operation was lost or ran twice");
    log.sort_by_key(|r| r.ticket);
    assert!(log.windows(2).all(|w| w[0].ticket < w[1].ticket), "{kind}: two operations with one ticket");
    let replay: Vec<AtomicU64> = (0..VARS as u64).map(AtomicU64::new).collect();
    for r in &log {
        let read = effect(&replay, id_of(r.thread, r.step), &r.reads, &r.writes);
        assert_eq!(
            read, r.read,
            "{kind}: thread {} step {} (ticket {}) read other values than the replay in ticket order",
            r.thread, r.step, r.ticket
        );
    }
    for (v, (want, got)) in replay.iter().zip(&run.cells).enumerate() {
        assert_eq!(want.load(Relaxed), got.load(Relaxed), "{kind}: final value of variable {v}");
    }
    // Along every variable, each thread's operations in its push order.
    for thread in 0..programs.len() {
        for v in 0..VARS {
            let mut along: Vec<(usize, u64)> = log
                .iter()
                .filter(|r| r.thread == thread && (r.reads.contains(&v) || r.writes.contains(&v)))
                .map(|r| (r.step, r.ticket))
                .collect();
            along.sort_unstable();
            assert!(
                along.windows(2).all(|w| w[0].1 < w[1].1),
                "{kind}: thread {thread}'s tickets out of its push order on variable {v}: {along:?}"
            );
        }
    }

    for v in vars {
        engine.delete_var(v, || {}).expect("delete at the end");
    }
    engine.wait_all().expect("deletions do not fail");
    let stats = engine.pool_stats();
    assert_eq!((stats.live_ops, stats.live_vars), (0, 0), "{kind}: pools not empty after the programs: {stats:?}");
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(threads) = u.int_in_range(2..=3usize) else { return };
    let mut programs: Vec<Vec<Step>> = vec![Vec::new(); threads];
    // Interleaved, so that every thread gets steps from a short input.
    'decode: for _ in 0..MAX_STEPS {
        for program in &mut programs {
            match Step::arbitrary(&mut u) {
                Ok(step) => program.push(step),
                Err(_) => break 'decode,
            }
        }
    }
    if programs.iter().all(|p| p.is_empty()) {
        return;
    }
    for (kind, engine) in engines() {
        run_programs(kind, engine, &programs);
    }
});
