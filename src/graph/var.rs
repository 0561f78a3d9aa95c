//! Variables: the user's [`Var`] handle and the pooled [`VarSlot`] behind it.
//!
//! A handle names a slot by index plus the slot's *generation*. Deleting a
//! variable first marks the slot `DELETE_REQUESTED` (so later pushes through
//! the handle fail at once), the dispatcher marks it `DELETE_DISPATCHED` when
//! it dispatches the deletion (so operations linearized after it are
//! rejected), and the deletion's completion gives the slot back with the
//! generation bumped, so any stale handle is recognised forever after.
//!
//! The dispatcher counts the deletions it has dispatched, after marking
//! each. A push notes the count before it checks its variables; its
//! dispatch finds it unchanged unless a deletion came in between, and only
//! then looks at each variable's `life` again (`Core::dispatch`).
//!
//! # `life` word
//!
//! `generation << 32 | 1 << (8 + shard) | flags`, one atomic so that a
//! reader sees the generation, the dispatch shard and the flags of the
//! same incarnation. The shard is 0 (none) until the first push or wait
//! places the variable, which then keeps it until it is deleted
//! ([`Variables::shard_of`]).

use crate::base::error::{EngineError, OpError};
use crate::graph::var_queue::{QueueHead, QueueTail, VarBlock, VarQueue};
use crate::mem::pool::{Pool, Pooled};
use crate::sync::{AtomicBool, AtomicU32, AtomicU64, Ordering, UnsafeCell};
use std::sync::Arc;

/// Deletion was requested through the handle (`delete_var` returned).
pub(crate) const DELETE_REQUESTED: u64 = 1;
/// The dispatcher has linearized the deletion.
pub(crate) const DELETE_DISPATCHED: u64 = 2;
/// Where `life` keeps the variable's dispatch shard, as its bit in a mask
/// of shards (0: none yet; `dispatch.rs`, "Shards"), above the flags: a
/// push ors it into its shards as it stands.
const SHARD_SHIFT: u32 = 8;
const SHARD_MASK: u64 = ((1 << crate::base::tuning::SHARDS) - 1) << SHARD_SHIFT;
const _: () =
    assert!(SHARD_SHIFT as usize + crate::base::tuning::SHARDS <= 32, "the shard bits stay under the generation");

/// The shard bit a `life` word holds (0: not placed).
#[inline(always)]
fn placed_bit(life: u64) -> u32 {
    ((life & SHARD_MASK) >> SHARD_SHIFT) as u32
}

/// A variable: a tag for some resource, cheap to create, copy and delete.
///
/// Operations name the variables they read and write; the engine orders
/// conflicting operations by push order. A `Var` is only meaningful to the
/// engine that created it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Var {
    pub(crate) engine: u32,
    pub(crate) slot: u32,
    pub(crate) gen: u32,
}

/// The engine-side state of one variable, in two cache lines: the first
/// holds what pushing reads and writes (the handle check, the queue's
/// appender half), the second what completing writes (the queue's granter
/// half, the version, the failure). A pusher running ahead of a worker on
/// the same variable then touches only its own line, and the worker only
/// its own, while the queue is not empty.
#[derive(Debug, Default)]
#[repr(C, align(64))]
pub(crate) struct VarSlot {
    pub(crate) life: AtomicU64,
    free_link: AtomicU32,
    tail: QueueTail,
    done: CompletionSide,
}

/// The completing side of a variable's state (its slot's second line).
#[derive(Debug, Default)]
#[repr(C, align(64))]
pub(crate) struct CompletionSide {
    head: QueueHead,
    /// Completed writes since creation.
    version: AtomicU64,
    /// The failure the current value holds. Read only by operations granted
    /// a read, written only by the operation granted the write, so the
    /// scheduling rule itself protects it.
    error: UnsafeCell<Option<Arc<OpError>>>,
    /// The GPU work a later operation on the variable waits for
    /// (`gpu/fence.rs`).
    #[cfg(feature = "cuda")]
    gpu: crate::graph::gpu::VarFence,
}

impl Pooled for VarSlot {
    fn free_link(&self) -> &AtomicU32 {
        &self.free_link
    }
}

// SAFETY: `error` is guarded by the scheduling rule itself (see the field);
// the queue carries its own proof.
unsafe impl Sync for VarSlot {}

impl VarSlot {
    /// The variable's access queue.
    #[inline(always)]
    pub(crate) fn queue(&self) -> VarQueue<'_> {
        VarQueue::new(&self.tail, &self.done.head)
    }

    /// Completed writes since creation (`Engine::var_version`).
    #[inline]
    pub(crate) fn version(&self) -> u64 {
        self.done.version.load(Ordering::Acquire)
    }

    /// The GPU work a later operation on the variable waits for.
    #[cfg(feature = "cuda")]
    #[inline]
    pub(crate) fn gpu_fence(&self) -> &crate::graph::gpu::VarFence {
        &self.done.gpu
    }

    /// Checks that `var`'s incarnation is alive and not being deleted;
    /// returns the `life` word it read.
    #[inline(always)]
    fn check(&self, var: Var) -> Result<u64, EngineError> {
        let life = self.life.load(Ordering::Acquire);
        if (life >> 32) as u32 != var.gen || life & DELETE_REQUESTED != 0 {
            return Err(EngineError::DeletedVar);
        }
        Ok(life)
    }

    /// Makes a slot just taken from the pool a fresh variable: version 0,
    /// no failure, an idle queue.
    ///
    /// # Safety
    /// The caller owns the slot exclusively.
    pub(crate) unsafe fn reset(&self, blocks: &Pool<VarBlock>) {
        self.done.version.store(0, Ordering::Relaxed);
        // SAFETY: exclusive ownership, forwarded from the caller.
        unsafe {
            self.done.error.with_mut(|e| *e = None);
            self.queue().reset(blocks);
        }
        #[cfg(feature = "cuda")]
        self.done.gpu.clear();
    }

    /// Drops the failure and gives the queue's sentinel back, before the
    /// slot goes back to the pool.
    ///
    /// # Safety
    /// The queue must be idle and the slot exclusively owned.
    pub(crate) unsafe fn release(&self, blocks: &Pool<VarBlock>) {
        // SAFETY: forwarded from the caller.
        unsafe {
            self.done.error.with_mut(|e| *e = None);
            self.queue().release(blocks);
        }
    }

    /// Whether the dispatcher may still append operations of `gen`.
    #[inline]
    pub(crate) fn dispatchable(&self, gen: u32) -> bool {
        let life = self.life.load(Ordering::Acquire);
        (life >> 32) as u32 == gen && life & DELETE_DISPATCHED == 0
    }

    /// The failure the current value holds.
    ///
    /// # Safety
    /// The caller must hold a granted access (read or write) on the variable.
    pub(crate) unsafe fn error(&self) -> Option<Arc<OpError>> {
        // SAFETY: per the contract no writer runs concurrently.
        unsafe { self.done.error.with(|p| (*p).clone()) }
    }

    /// Records the outcome of a completed write and bumps the version.
    ///
    /// # Safety
    /// The caller must hold the granted write on the variable.
    ///
    /// A failure sets `failures_held` (the engine's `Core::failures_held`)
    /// first: before the store, and so before the release of this write,
    /// which whoever reads the failure was granted after.
    pub(crate) unsafe fn finish_write(&self, failure: Option<&Arc<OpError>>, failures_held: &AtomicBool) {
        if failure.is_some() {
            failures_held.store(true, Ordering::Relaxed);
        }
        // SAFETY: per the contract we are the only accessor of `error`.
        unsafe { self.done.error.with_mut(|p| *p = failure.cloned()) };
        // Only the holder of the write writes the version (and the slot's
        // creation, before any access): a plain increment, no locked
        // instruction.
        let version = &self.done.version;
        version.store(version.load(Ordering::Relaxed) + 1, Ordering::Release);
    }
}

/// An engine's variables: their slots, and what the dispatcher and the
/// runners track of them all.
pub(crate) struct Variables {
    /// The engine's id, which its variables' handles carry.
    engine: u32,
    slots: Pool<VarSlot>,
    /// Set before the first failure is stored on a variable
    /// (`VarSlot::finish_write`), never cleared: while it is false no
    /// variable holds a failure, and a run need not look at the variables
    /// it reads (`Core::skip_failure`).
    pub(crate) failures_held: AtomicBool,
    /// Deletions dispatched so far (written by the combiners, after they
    /// mark the variable `DELETE_DISPATCHED`). A push notes it before it
    /// checks its variables (`Meta::deletions_seen`); its dispatch finds it
    /// unchanged in the common case and then knows every variable is still
    /// live without looking at each one again (`Core::dispatch`).
    deletions_dispatched: AtomicU64,
    /// Slots retired at the end of their generations ([`free`](Self::free)).
    retired: std::sync::atomic::AtomicU64,
}

impl Variables {
    /// No variables yet, for engine `engine`.
    pub(crate) fn new(engine: u32) -> Self {
        Variables {
            engine,
            slots: Pool::new(),
            failures_held: AtomicBool::new(false),
            deletions_dispatched: AtomicU64::new(0),
            retired: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The slot at index `slot`.
    #[inline(always)]
    pub(crate) fn get(&self, slot: u32) -> &VarSlot {
        self.slots.get(slot)
    }

    /// A new variable, its queue's sentinel taken from `blocks`.
    pub(crate) fn new_var(&self, blocks: &Pool<VarBlock>) -> Var {
        let slot = self.slots.take();
        assert!(slot < 1 << crate::graph::opr::SLOT_BITS, "depengine: more than 2^30 live variables");
        let v = self.slots.get(slot);
        // SAFETY: the slot was just taken, so nobody else touches it.
        unsafe { v.reset(blocks) };
        let gen = (v.life.load(Ordering::Acquire) >> 32) as u32;
        Var { engine: self.engine, slot, gen }
    }

    /// The slot of a live variable of this engine.
    #[inline]
    pub(crate) fn slot_of(&self, var: Var) -> Result<&VarSlot, EngineError> {
        if var.engine != self.engine {
            return Err(EngineError::ForeignVar);
        }
        let slot = self.slots.get(var.slot);
        slot.check(var)?;
        Ok(slot)
    }

    /// The slot of a live variable of this engine, and its dispatch shard
    /// as a mask bit ([`shard_of`](Self::shard_of), from the same look at
    /// `life` as the check).
    ///
    /// `home()` runs only when the variable is placed now, before it is
    /// (see [`shard_of`](Self::shard_of)).
    #[inline(always)]
    pub(crate) fn slot_and_shard(
        &self,
        var: Var,
        home: impl FnOnce() -> usize,
    ) -> Result<(&VarSlot, u32), EngineError> {
        if var.engine != self.engine {
            return Err(EngineError::ForeignVar);
        }
        let slot = self.slots.get(var.slot);
        let bit = placed_bit(slot.check(var)?);
        Ok((slot, if bit != 0 { bit } else { 1 << Self::place(slot, home()) }))
    }

    /// The dispatch shard of the variable in `slot` (`dispatch.rs`,
    /// "Shards"): the one it was placed in, or else `home()`, where it is
    /// placed now. Every push and wait on one incarnation of a variable
    /// gets the same answer: it is set once, by a CAS, and cleared only
    /// when the slot is given back. `home()` runs before the placement is
    /// published (release; the loads here acquire), so what it does (the
    /// core marks the shard active) happens before any push that finds
    /// the variable placed.
    #[inline(always)]
    pub(crate) fn shard_of(&self, slot: &VarSlot, home: impl FnOnce() -> usize) -> usize {
        let bit = placed_bit(slot.life.load(Ordering::Acquire));
        if bit != 0 {
            return bit.trailing_zeros() as usize;
        }
        Self::place(slot, home())
    }

    #[cold]
    #[inline(never)]
    fn place(slot: &VarSlot, home: usize) -> usize {
        let mut life = slot.life.load(Ordering::Acquire);
        loop {
            let bit = placed_bit(life);
            if bit != 0 {
                return bit.trailing_zeros() as usize;
            }
            let with = life | (1 << (SHARD_SHIFT as usize + home));
            match slot.life.compare_exchange_weak(life, with, Ordering::Release, Ordering::Acquire) {
                Ok(_) => return home,
                Err(actual) => life = actual,
            }
        }
    }

    /// Marks `var` as being deleted; a second call is an error.
    pub(crate) fn request_delete(&self, var: Var) -> Result<(), EngineError> {
        if var.engine != self.engine {
            return Err(EngineError::ForeignVar);
        }
        let slot = self.slots.get(var.slot);
        let mut life = slot.life.load(Ordering::Acquire);
        loop {
            if (life >> 32) as u32 != var.gen || life & DELETE_REQUESTED != 0 {
                return Err(EngineError::DeletedTwice);
            }
            match slot.life.compare_exchange_weak(life, life | DELETE_REQUESTED, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(()),
                Err(actual) => life = actual,
            }
        }
    }

    /// Gives a deleted variable's slot back, bumping its generation; its
    /// queue's blocks go back to `blocks`.
    ///
    /// A slot whose generation is the last (`u32::MAX`) is retired instead:
    /// never given back, its `life` marked deleted for good, so that no
    /// stale handle of any generation is ever taken for a new variable.
    /// The cost is one slot (two cache lines) per 2^32 deletions of it.
    #[cold]
    #[inline(never)]
    pub(crate) fn free(&self, slot_index: u32, blocks: &Pool<VarBlock>) {
        let slot = self.slots.get(slot_index);
        // SAFETY: the deletion held the last access and nothing can be
        // appended after a dispatched deletion, so the queue is idle and ours.
        unsafe { slot.release(blocks) };
        let gen = slot.life.load(Ordering::Acquire) >> 32;
        if gen == u64::from(u32::MAX) {
            slot.life.store(gen << 32 | DELETE_REQUESTED | DELETE_DISPATCHED, Ordering::Release);
            self.retired.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return;
        }
        slot.life.store((gen + 1) << 32, Ordering::Release);
        self.slots.give(slot_index);
    }

    /// Variables alive (created and not deleted), less the retired slots.
    pub(crate) fn live(&self) -> usize {
        self.slots.live() - self.retired() as usize
    }

    /// Variable slots retired at the end of their generations.
    pub(crate) fn retired(&self) -> u64 {
        self.retired.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Deletions dispatched so far (see the field).
    #[inline(always)]
    pub(crate) fn deletions_dispatched(&self) -> u64 {
        self.deletions_dispatched.load(Ordering::Acquire)
    }

    /// Counts a deletion a combiner dispatched (after marking its
    /// variable). The combiners of several shards may count at once: a
    /// locked add, on a path as rare as deletions.
    pub(crate) fn note_deletion_dispatched(&self) {
        self.deletions_dispatched.fetch_add(1, Ordering::Release);
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::*;

    /// A variable is placed in a dispatch shard by the first push or wait
    /// that asks, keeps it through its life (the deletion's request
    /// included, and the handle's checks still see its generation), and a
    /// new variable in the same slot is placed afresh.
    #[test]
    fn a_variable_keeps_the_shard_it_was_first_placed_in_until_it_is_freed() {
        let blocks = Pool::new();
        let vars = Variables::new(7);
        let v = vars.new_var(&blocks);
        let slot = vars.get(v.slot);
        let mut asked = 0;
        let mut home = |h| {
            asked += 1;
            h
        };
        assert_eq!(vars.shard_of(slot, || home(3)), 3, "placed in the asker's home");
        assert_eq!(vars.slot_and_shard(v, || home(5)).map(|(_, bit)| bit), Ok(1 << 3), "placed once");
        assert_eq!(asked, 1, "the home is asked for only to place");
        assert_eq!(slot.check(v).map(drop), Ok(()));
        vars.request_delete(v).unwrap();
        assert_eq!(vars.shard_of(slot, || 9), 3, "a deletion's request keeps the shard");
        assert!(vars.slot_and_shard(v, || 9).is_err(), "the handle is being deleted");
        vars.free(v.slot, &blocks);
        let w = vars.new_var(&blocks);
        assert_eq!((w.slot, w.gen), (v.slot, v.gen + 1), "the slot comes back, one generation on");
        assert_eq!(vars.shard_of(vars.get(w.slot), || 6), 6, "a new variable is placed afresh");
    }
}
