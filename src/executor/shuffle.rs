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

use super::inline::{run_inline, run_queued_one};
use super::ready_ring::ReadyRing;
use super::Executor;
use crate::context::FnProperty;
use crate::core::Core;
use crate::sync::{AtomicU64, Ordering};
use std::sync::Arc;

/// Ready operations the ring holds before the thread that made one ready
/// runs it itself.
const RING_CAPACITY: usize = 1 << 14;

pub(crate) struct ShuffleExecutor {
    ready: ReadyRing,
    /// splitmix64 state: each draw adds the golden-ratio increment.
    rng: AtomicU64,
}

impl ShuffleExecutor {
    pub(crate) fn new(seed: u64) -> Self {
        ShuffleExecutor { ready: ReadyRing::new(RING_CAPACITY), rng: AtomicU64::new(seed) }
    }

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
}

impl Executor for ShuffleExecutor {
    fn start(&self, _core: &Arc<Core>) {}

    fn schedule(&self, core: &Core, op: u32, _prop: FnProperty) {
        if let Err(op) = self.ready.push(op) {
            run_inline(core, op);
        }
    }

    fn help(&self, core: &Core) -> bool {
        if run_queued_one() {
            return true;
        }
        match self.pick() {
            Some(op) => {
                core.run(op, None);
                true
            }
            None => false,
        }
    }

    fn waiters_can_sleep(&self) -> bool {
        false
    }

    fn stop(&self) {}

    fn cpu_workers(&self) -> usize {
        0
    }
}
