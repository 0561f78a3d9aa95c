//! The seeded random-order executor, for users fuzzing their own code's
//! dependency interleavings (`EngineBuilder::shuffle_seed`,
//! `DEPENGINE_SHUFFLE_SEED`).
//!
//! Ready operations are not run when they become ready: they wait on a
//! ring until a thread *waits* (`wait_var`, `wait_to_write`, `wait_all`,
//! shutdown, a pusher throttled by the pending cap). The waiting thread then
//! picks one at random among all that are ready — a seeded splitmix64 draw
//! — runs it, and repeats until its wait is over. The scheduling rule still
//! holds (only ready operations are picked), but among independent
//! operations any order can come up, push order included, so code whose
//! correctness silently relies on push order (a missing dependency) fails
//! within a few seeds.
//!
//! There are no worker threads, so with one pushing thread and no
//! completions from outside the engine, the whole execution is a function
//! of the program and the seed: rerunning with the same seed replays it.
//!
//! The random pick is lock-free: the picker rotates a random number of
//! operations from the head of the ring to its tail, then takes the head.
//! Several waiting threads may pick at once; each pick is still a draw
//! among ready operations, only the replay guarantee needs one thread.
//!
//! Operations run only inside waits: a program that pushes and then blocks
//! on something other than the engine (a channel an operation fills) would
//! wait forever, so such programs must wait on the engine first.
//!
//! # With workers
//!
//! `EngineBuilder::shuffle_workers(n)` adds `n` worker threads that pick
//! the same way, so operations also run in parallel and in the background
//! (data races between operations that should conflict can then show, and
//! programs that block outside the engine make progress). The order then
//! also depends on thread timing: a seed no longer replays a run exactly.

use super::inline::{run_inline, run_queued_one};
use super::park::Sleep;
use super::ready_ring::ReadyRing;
use super::{Executor, ExecutorTraits, Runner, WorkerThreads};
use crate::base::context::FnProperty;
use crate::observe::stats::EngineStats;
use crate::sync::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Ready operations the ring holds before the thread that made one ready
/// runs it itself.
const RING_CAPACITY: usize = 1 << 14;

/// The ready set and the generator, shared with the worker threads.
struct Shuffle {
    ready: ReadyRing,
    /// splitmix64 state: each draw adds the golden-ratio increment.
    rng: AtomicU64,
    sleep: Sleep,
    stop: AtomicBool,
}

pub(crate) struct ShuffleExecutor {
    shared: Arc<Shuffle>,
    /// Worker threads (0: only waiting threads run operations).
    workers: usize,
    threads: WorkerThreads,
}

impl Shuffle {
    /// One splitmix64 draw (WORKLOADS.md's generator).
    fn draw(&self) -> u64 {
        const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut z = self.rng.fetch_add(GOLDEN, Ordering::Relaxed).wrapping_add(GOLDEN);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Takes a ready operation chosen at random, if any.
    fn pick(&self) -> Option<u32> {
        let ready = self.ready.len();
        if ready == 0 {
            return None;
        }
        for _ in 0..self.draw() % ready as u64 {
            let Some(op) = self.ready.pop() else { break };
            if let Err(op) = self.ready.push(op) {
                // Refilled meanwhile by other threads: take this one.
                return Some(op);
            }
        }
        self.ready.pop()
    }

    /// A worker: runs random picks until stopped, parking when none is ready.
    fn work<R: Runner>(&self, core: &R, id: usize) {
        core.profiler().bind_worker(id);
        loop {
            if let Some(op) = self.pick() {
                core.run(op, Some(id));
            } else if self.stop.load(Ordering::Acquire) {
                break;
            } else {
                self.sleep.park(|| !self.ready.is_empty() || self.stop.load(Ordering::SeqCst));
            }
        }
    }
}

impl ShuffleExecutor {
    pub(crate) fn new(seed: u64, workers: usize) -> Self {
        ShuffleExecutor {
            shared: Arc::new(Shuffle {
                ready: ReadyRing::new(RING_CAPACITY),
                rng: AtomicU64::new(seed),
                sleep: Sleep::new(workers, false),
                stop: AtomicBool::new(false),
            }),
            workers,
            threads: WorkerThreads::default(),
        }
    }
}

impl<R: Runner> Executor<R> for ShuffleExecutor {
    fn start(&self, core: &Arc<R>) -> std::io::Result<()> {
        for id in 0..self.workers {
            let (core, shared) = (core.clone(), self.shared.clone());
            self.threads.spawn(format!("depengine-shuffle-{id}"), move || shared.work(&*core, id))?;
        }
        Ok(())
    }

    fn schedule(&self, core: &R, op: u32, _prop: FnProperty) {
        match self.shared.ready.push(op) {
            Ok(()) if self.workers > 0 => {
                self.shared.sleep.notify_one(false);
            }
            Ok(()) => {}
            Err(op) => run_inline(core, op),
        }
    }

    fn help(&self, core: &R) -> bool {
        if run_queued_one() {
            return true;
        }
        match self.shared.pick() {
            Some(op) => {
                core.run(op, None);
                true
            }
            None => false,
        }
    }

    fn stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.sleep.notify_all();
        self.threads.join_all();
    }

    fn traits(&self) -> ExecutorTraits {
        ExecutorTraits {
            cpu_workers: self.workers,
            worker_threads: self.workers,
            // Workers run what a foreign completion makes ready; without
            // them only waiting threads do, so they must keep looking.
            waiters_can_sleep: self.workers > 0,
            // Its workers are not pinned, but the mode is for finding
            // ordering bugs, not speed: a throttled pusher only yields.
            workers: None,
            ..ExecutorTraits::run_by_waiters()
        }
    }

    fn worker_name(&self, id: usize) -> String {
        format!("shuffle worker {id}")
    }

    fn add_stats(&self, _stats: &mut EngineStats) {}
}
