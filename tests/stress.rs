//! Several threads push concurrently over shared variables, bodies push
//! nested operations, and asynchronous operations complete on foreign
//! threads. Every body records its ticket (the engine's linearization of
//! all pushes) and the values it read; replaying the records sequentially in
//! ticket order must reproduce every value read and every final value.

mod common;

use common::{engine_of, mix, on_one_cpu, stint_engine_of, SplitMix};
use depengine::{Engine, EngineKind, Var};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};

const VARS: usize = 24;
const PER_THREAD: usize = if cfg!(debug_assertions) { 1_500 } else { 10_000 };

#[derive(Debug, Clone)]
struct Def {
    id: u64,
    reads: Vec<usize>,
    writes: Vec<usize>,
}

#[derive(Debug)]
struct Record {
    ticket: u64,
    def: Def,
    read: Vec<u64>,
}

fn random_def(id: u64) -> Def {
    let mut rng = SplitMix(id.wrapping_mul(0x51_7CC1_B727_220A));
    let reads = (0..rng.below(4)).map(|_| rng.below(VARS as u64) as usize).collect();
    let writes = (0..1 + rng.below(2)).map(|_| rng.below(VARS as u64) as usize).collect();
    Def { id, reads, writes }
}

/// Reads, then writes values derived from what was read; returns the reads.
fn effect(def: &Def, cells: &[AtomicU64]) -> Vec<u64> {
    let read: Vec<u64> = def.reads.iter().map(|&r| cells[r].load(Ordering::Relaxed)).collect();
    let h = read.iter().fold(def.id, |h, &v| mix(h, v));
    for &w in &def.writes {
        cells[w].store(mix(h, w as u64), Ordering::Relaxed);
    }
    read
}

type Job = Box<dyn FnOnce() + Send>;

struct Shared {
    engine: Engine,
    vars: Vec<Var>,
    cells: Vec<AtomicU64>,
    log: Mutex<Vec<Record>>,
    foreign: Mutex<mpsc::Sender<Job>>,
}

fn push(shared: &Arc<Shared>, def: Def, depth: u32) {
    let reads: Vec<Var> = def.reads.iter().map(|&r| shared.vars[r]).collect();
    let writes: Vec<Var> = def.writes.iter().map(|&w| shared.vars[w]).collect();
    let s = shared.clone();
    if def.id % 7 == 3 {
        let tx = shared.foreign.lock().unwrap().clone();
        shared
            .engine
            .push_async(
                move |ctx, done| {
                    let ticket = ctx.ticket();
                    let job: Job = Box::new(move || {
                        let read = effect(&def, &s.cells);
                        s.log.lock().unwrap().push(Record { ticket, def, read });
                        done.signal();
                    });
                    tx.send(job).unwrap();
                },
                &reads,
                &writes,
            )
            .unwrap();
        return;
    }
    shared
        .engine
        .push_sync(
            move |ctx| {
                let read = effect(&def, &s.cells);
                if def.id % 5 == 1 && depth == 0 {
                    push(&s, random_def(def.id | 1 << 40), depth + 1);
                }
                s.log.lock().unwrap().push(Record { ticket: ctx.ticket(), def, read });
            },
            &reads,
            &writes,
        )
        .unwrap();
}

/// Every engine, and the threaded ones with stints
/// (`common::stint_engine_of`), each with `workers` CPU workers
/// (`None`: the default, one per CPU the calling thread may use), under
/// `threads` pushing threads; `place` ends each engine's label.
fn stress_every_engine(threads: u64, workers: Option<usize>, place: &str) {
    for kind in EngineKind::ALL {
        stress_on(engine_of(kind, workers), threads, &format!("{kind:?}{place}"));
    }
    for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
        stress_on(stint_engine_of(kind, workers), threads, &format!("{kind:?} with stints{place}"));
    }
}

fn stress_on(engine: Engine, threads: u64, kind: &str) {
    let (tx, rx) = mpsc::channel::<Job>();
    let foreign = std::thread::spawn(move || rx.into_iter().for_each(|job| job()));
    let shared = Arc::new(Shared {
        vars: (0..VARS).map(|_| engine.new_var()).collect(),
        engine,
        cells: (0..VARS as u64).map(AtomicU64::new).collect(),
        log: Mutex::new(Vec::new()),
        foreign: Mutex::new(tx),
    });
    std::thread::scope(|scope| {
        for t in 0..threads {
            let shared = shared.clone();
            scope.spawn(move || {
                for i in 0..PER_THREAD as u64 {
                    push(&shared, random_def(t << 32 | i), 0);
                }
            });
        }
    });
    shared.engine.wait_all().unwrap();
    drop(std::mem::replace(&mut *shared.foreign.lock().unwrap(), mpsc::channel().0));
    foreign.join().unwrap();

    let mut log = std::mem::take(&mut *shared.log.lock().unwrap());
    let nested = log.iter().filter(|r| r.def.id >> 40 != 0).count();
    assert!(nested > 0, "the run must include nested pushes");
    log.sort_by_key(|r| r.ticket);
    assert!(log.windows(2).all(|w| w[0].ticket < w[1].ticket), "{kind}: duplicate tickets");
    let replay: Vec<AtomicU64> = (0..VARS as u64).map(AtomicU64::new).collect();
    for r in &log {
        let read = effect(&r.def, &replay);
        assert_eq!(
            read, r.read,
            "{kind}, {threads} threads: op {:#x} (ticket {}) read other values than the sequential replay",
            r.def.id, r.ticket
        );
    }
    for (v, (want, got)) in replay.iter().zip(&shared.cells).enumerate() {
        assert_eq!(want.load(Ordering::Relaxed), got.load(Ordering::Relaxed), "{kind}: final value of var {v}");
    }
}

#[test]
fn two_pushing_threads() {
    stress_every_engine(2, Some(2), "");
}

#[test]
fn four_pushing_threads() {
    stress_every_engine(4, Some(2), "");
}

/// As on a one-vCPU container: two pushing threads, the workers and the
/// helper that completes asynchronous operations all share one CPU.
#[test]
fn two_pushing_threads_on_one_cpu() {
    on_one_cpu(|| stress_every_engine(2, None, " on one CPU"));
}
