//! Per-worker batching of the shared bookkeeping that ends an operation.
//!
//! Finishing an operation gives its block and the variable blocks of the
//! operations it granted back to their pools (the variable blocks into the
//! pool's sweep set, `sweep.rs`) and decrements the engine's
//! pending count: writes to cache lines that the pushing thread also writes
//! for every push. A worker thread instead collects both
//! locally and publishes them every [`BATCH_LEN`] operations and whenever it
//! runs out of work, so those lines cross cores once per batch.
//!
//! Other threads give back and count at once. One that runs an operation
//! while helping a wait (or the pending cap) along ([`helping`]) keeps
//! that operation's block in its own cache for its next push
//! (`Core::give_op_block`), so a push-then-wait round trip reuses one
//! block without a locked instruction.
//!
//! Batching only delays: a block is given back and an operation counted as
//! finished later than it could be, never earlier, so `wait_all` still
//! returns only once everything has finished (a worker flushes before it
//! idles, so the delay is bounded by the work it is doing).

use crate::base::tuning::{BATCH_LEN, SHARDS};
use crate::core::Core;
use crate::graph::dispatch::shards_in;
use crate::mem::pool::GiveBatch;
use crate::mem::sweep::SweepBatch;
use std::cell::Cell;

#[derive(Clone, Copy)]
struct WorkerBatch {
    /// The core this thread works for (null: not a worker, no batching).
    core: *const Core,
    blocks: GiveBatch,
    var_blocks: SweepBatch,
    /// Operations finished, per dispatch shard, and the shards with any.
    done: [u32; SHARDS],
    done_in: u32,
}

impl WorkerBatch {
    /// An empty batch for `core` (null: not a worker).
    const fn empty(core: *const Core) -> Self {
        WorkerBatch { core, blocks: GiveBatch::EMPTY, var_blocks: SweepBatch::EMPTY, done: [0; SHARDS], done_in: 0 }
    }

    /// Gives the blocks back and counts the operations finished.
    fn publish(&mut self, core: &Core) {
        self.blocks.flush(&core.oprs);
        self.var_blocks.flush(&core.blocks);
        for s in shards_in(self.done_in) {
            core.count_finished(s, u64::from(self.done[s]));
            self.done[s] = 0;
        }
        self.done_in = 0;
    }
}

crate::sync::thread_local! {
    static BATCH: Cell<WorkerBatch> = const { Cell::new(WorkerBatch::empty(std::ptr::null())) };
    /// Set while this thread, not a worker, runs an operation to help a
    /// wait or the cap along (`helping`).
    static HELPING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `help` (one ready operation run by a waiting or throttled thread)
/// marked as helping: the block of an operation it finishes may stay in
/// the thread's own cache (`Core::give_op_block`), since the thread is
/// about to push again. Only there: a pusher that kept every block it
/// retired ran `naive` `random` and `layered` 8–11 % slower.
pub(crate) fn helping<R>(help: impl FnOnce() -> R) -> R {
    HELPING.with(|h| h.set(true));
    let ran = help();
    // (A panic out of `help` leaves the mark: blocks are then kept one at
    // a time, which only places them differently.)
    HELPING.with(|h| h.set(false));
    ran
}

impl Core {
    /// Runs one ready operation on this (non-worker, or waiting) thread if
    /// the executor has one, counting it; returns whether it ran one.
    pub(crate) fn help_once(&self) -> bool {
        let ran = helping(|| self.executor.help(self));
        if ran {
            self.observe.stats.helped();
        }
        ran
    }

    /// Makes the calling thread a batching worker of this core.
    pub(crate) fn enter_worker(&self) {
        BATCH.with(|b| b.set(WorkerBatch::empty(self)));
    }

    /// Runs `own` on this thread's batch if the thread is a batching
    /// worker of this core, `other` if it is not.
    #[inline(always)]
    fn with_own_batch(&self, own: impl FnOnce(&mut WorkerBatch), other: impl FnOnce()) {
        // Only the pointer is taken inside `with`: a closure that small is
        // inlined, where one holding `own` was a call per operation.
        let batch = BATCH.with(Cell::as_ptr);
        // SAFETY: the batch is this thread's (the thread-local outlives this
        // call) and nothing `own` does reaches `BATCH` again (publishing
        // only gives blocks back and counts), so this is the only
        // reference to it meanwhile.
        let b = unsafe { &mut *batch };
        if std::ptr::eq(b.core, self) {
            own(b)
        } else {
            other()
        }
    }

    /// Publishes this worker's batch (before it idles or exits).
    pub(crate) fn flush_worker_batch(&self) {
        let publish = |b: &mut WorkerBatch| {
            if b.done_in != 0 {
                b.publish(self);
            }
        };
        self.with_own_batch(publish, || {});
    }

    /// Publishes the batch and stops batching on this thread.
    pub(crate) fn leave_worker(&self) {
        self.flush_worker_batch();
        BATCH.with(|b| b.set(WorkerBatch::empty(std::ptr::null())));
    }

    /// Gives a finished operation's block back, with the variable blocks
    /// its completion freed, and counts it as finished in dispatch shard
    /// `shard` — batched on this core's workers, at once elsewhere.
    pub(crate) fn retire(&self, op: u32, shard: usize, freed: SweepBatch) {
        let batch = move |b: &mut WorkerBatch| {
            b.done[shard] += 1;
            b.done_in |= 1 << shard;
            b.var_blocks.append(&self.blocks, freed);
            if b.blocks.add(&self.oprs, op) >= BATCH_LEN {
                b.publish(self);
            }
        };
        let at_once = move || {
            if HELPING.with(Cell::get) {
                self.op_caches.give_back_one(&self.oprs, op);
            } else {
                self.oprs.give(op);
            }
            let mut freed = freed;
            freed.flush(&self.blocks);
            self.count_finished(shard, 1);
        };
        self.with_own_batch(batch, at_once);
    }

    /// Gives back the variable blocks a completion collected — batched on
    /// this core's workers (published with the next batch), at once elsewhere.
    #[inline(always)]
    pub(crate) fn retire_var_blocks(&self, freed: SweepBatch) {
        // Most completions free no block: no call for them.
        if !freed.is_empty() {
            self.retire_some_var_blocks(freed);
        }
    }

    #[inline(never)]
    fn retire_some_var_blocks(&self, freed: SweepBatch) {
        let batch = move |b: &mut WorkerBatch| b.var_blocks.append(&self.blocks, freed);
        let at_once = move || {
            let mut freed = freed;
            freed.flush(&self.blocks);
        };
        self.with_own_batch(batch, at_once);
    }
}
