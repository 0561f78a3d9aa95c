//! Operation blocks (MXNet's `OprBlock`): one pooled record per pushed
//! operation, holding its body, its variables and its bookkeeping.
//!
//! # Ownership phases
//!
//! A block's plain (`UnsafeCell`) fields are owned by one party at a time,
//! each hand-off being an acquire/release atomic:
//!
//! 1. **pusher**: takes the block from the pool and fills it;
//! 2. **dispatcher**: receives it through the submission stack
//!    (`dispatch.rs`), stamps the ticket and appends it to its variables'
//!    queues. Meanwhile granters touch only [`OprBlock::wait`];
//! 3. **runner**: whoever takes `wait` to zero owns the block and runs it;
//! 4. **completer**: the runner (synchronous body) or the
//!    [`Completion`](crate::Completion) (asynchronous body) releases the
//!    variables and gives the block back to the pool.
//!
//! Asynchronous blocks are shared by phases 3 and 4 (the body may still be
//! unwinding when the completion fires), so they carry a reference count.

use crate::base::context::PushOpts;
use crate::base::error::OpError;
use crate::graph::operator::OperatorInner;
use crate::graph::stamps::{DiagSlot, ProfStamps};
use crate::mem::inline_fn::InlineFn;
use crate::mem::pool::Pooled;
use crate::sync::{AtomicU32, AtomicU8, UnsafeCell};
use std::sync::Arc;

pub(crate) use crate::base::tuning::INLINE_VARS;

/// The dependency reads the variable.
pub(crate) const READ: u8 = 1;
/// The dependency writes the variable (a variable both read and written is
/// one write dependency that also counts as read for failure propagation).
pub(crate) const WRITE: u8 = 2;

/// `Meta::deletions_seen` of an operation whose dispatch must check each
/// variable (a deletion, whose variable skipped the push's check). The
/// count of dispatched deletions never gets there.
pub(crate) const LOOK_AT_EACH_VAR: u64 = u64::MAX;

/// Bits of [`Dep::slot_mode`] that hold the slot index; the two above hold
/// the mode. Variable slots stay below this (checked in `Core::new_var`).
pub(crate) const SLOT_BITS: u32 = 30;
const SLOT_MASK: u32 = (1 << SLOT_BITS) - 1;

/// One variable of an operation, already validated and de-duplicated.
/// Eight bytes, so that an operation's inline variables fit in 48.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Dep {
    /// The variable's slot index (low bits) and `READ | WRITE` (high bits).
    slot_mode: u32,
    /// The variable's generation when pushed (see `var.rs`).
    pub(crate) gen: u32,
}

impl Dep {
    #[inline(always)]
    pub(crate) fn new(slot: u32, gen: u32, mode: u8) -> Self {
        debug_assert!(slot <= SLOT_MASK);
        Dep { slot_mode: slot | (mode as u32) << SLOT_BITS, gen }
    }

    /// The packed slot and mode (for copies outside the block).
    #[inline(always)]
    pub(crate) fn slot_mode(self) -> u32 {
        self.slot_mode
    }

    /// A dependency from [`Dep::slot_mode`] and a generation.
    pub(crate) fn from_slot_mode(slot_mode: u32, gen: u32) -> Self {
        Dep { slot_mode, gen }
    }

    /// Index of the variable's slot.
    #[inline(always)]
    pub(crate) fn slot(self) -> u32 {
        self.slot_mode & SLOT_MASK
    }

    #[inline(always)]
    fn mode(self) -> u8 {
        (self.slot_mode >> SLOT_BITS) as u8
    }

    #[inline(always)]
    pub(crate) fn writes(self) -> bool {
        self.mode() & WRITE != 0
    }

    #[inline(always)]
    pub(crate) fn reads(self) -> bool {
        self.mode() & READ != 0
    }
}

/// Merges `dep`'s mode into the entry for the same variable, if `entries`
/// has one; returns whether it did.
#[inline]
pub(crate) fn merge(entries: &mut [Dep], dep: Dep) -> bool {
    match entries.iter_mut().find(|d| d.slot() == dep.slot()) {
        Some(d) => {
            d.slot_mode |= dep.slot_mode;
            true
        }
        None => false,
    }
}

/// An operation's variables: inline up to [`INLINE_VARS`], else in `spill`.
#[derive(Debug, Default)]
pub(crate) struct DepList {
    inline: [Dep; INLINE_VARS],
    len: u32,
    spill: Vec<Dep>,
}

impl DepList {
    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.spill.clear();
    }

    /// Adds `dep`, merging it with an earlier entry for the same variable.
    #[inline]
    pub(crate) fn add(&mut self, dep: Dep) {
        let len = self.len as usize;
        if len >= INLINE_VARS {
            return self.add_beyond_inline(dep);
        }
        if merge(&mut self.inline[..len], dep) {
            return;
        }
        self.inline[len] = dep;
        self.len += 1;
    }

    /// [`add`](Self::add) once the inline entries are full.
    #[cold]
    fn add_beyond_inline(&mut self, dep: Dep) {
        if merge(self.as_mut_slice(), dep) {
            return;
        }
        if self.spill.is_empty() {
            self.spill.extend_from_slice(&self.inline);
        }
        self.spill.push(dep);
        self.len += 1;
    }

    #[inline]
    pub(crate) fn as_slice(&self) -> &[Dep] {
        if self.len as usize <= INLINE_VARS {
            &self.inline[..self.len as usize]
        } else {
            &self.spill
        }
    }

    #[inline]
    fn as_mut_slice(&mut self) -> &mut [Dep] {
        if self.len as usize <= INLINE_VARS {
            &mut self.inline[..self.len as usize]
        } else {
            &mut self.spill
        }
    }
}

/// What the block runs.
#[derive(Default)]
pub(crate) enum Body {
    /// Nothing (a recycled block, or an internal operation).
    #[default]
    Empty,
    /// A closure pushed once (`push_sync`, `push_async`, a deletion callback).
    OneShot(InlineFn),
    /// A prebuilt operator pushed by reference; it also owns the variables.
    Prebuilt(Arc<OperatorInner>),
}

impl Body {
    /// Whether dropping it drops a value of the user's (a closure that did
    /// not run, an operator's reference), whose `Drop` may panic.
    #[inline]
    pub(crate) fn holds_user_value(&self) -> bool {
        match self {
            Body::Empty => false,
            Body::OneShot(f) => f.is_some(),
            Body::Prebuilt(_) => true,
        }
    }
}

/// Internal kinds of operation, each completed in its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum OprKind {
    /// A user's operation.
    #[default]
    User,
    /// A `wait_var`/`wait_to_write` marker; the index is its wait slot. It
    /// changes neither version nor failure state.
    Wait(u32),
    /// A data guard's access marker ([`Data::read`] and co.): hands the
    /// waiter its wait slot's answer and a `Completion`, which the guard
    /// signals when dropped. A write one changes version and failure state
    /// as a user's operation does.
    ///
    /// [`Data::read`]: crate::Data::read
    Hold(u32),
    /// A `delete_var`: runs the callback, then frees the variable.
    DeleteVar,
}

/// Everything about an operation besides body and variables.
#[derive(Debug, Default)]
pub(crate) struct Meta {
    pub(crate) opts: PushOpts,
    pub(crate) kind: OprKind,
    pub(crate) is_async: bool,
    /// Position in the linearization of all pushes (stamped by the
    /// dispatcher). Its low bits name the dispatch shard that counted it
    /// dispatched, where its completion counts it finished
    /// (`dispatch::shard_of_ticket`).
    pub(crate) ticket: u64,
    /// The engine's count of dispatched deletions, noted by the push
    /// before it checked the variables (`Core::dispatch` compares it);
    /// [`LOOK_AT_EACH_VAR`] makes the dispatch check each variable.
    pub(crate) deletions_seen: u64,
    /// The profiling session it was pushed in (0: not profiled).
    pub(crate) profile_session: u32,
    /// Set when the dispatcher rejected the operation (a variable was deleted
    /// between push and dispatch): it completes at once with this error.
    pub(crate) rejected: Option<Arc<OpError>>,
}

/// One pushed operation (see the module docs for who owns what when).
/// Cache-line aligned: the pusher fills one block while a worker finishes
/// its neighbour, and they must not share a line.
///
/// `repr(C)` so that the fields every operation touches come first and fill
/// the first four cache lines (the atomics, `deps`, `meta`, `body`: 240
/// bytes); `prof` and `diag`, touched only when profiling or diagnosing, sit
/// in the lines after them. Each line an operation touches crosses cores
/// twice per operation (pusher → worker, worker → next pusher).
#[derive(Default)]
#[repr(C, align(64))]
pub(crate) struct OprBlock {
    /// Variables not yet granted (those granted at once by the appends
    /// are taken off by the dispatcher after the last one). Whoever takes
    /// it to zero runs the block.
    pub(crate) wait: AtomicU32,
    /// Asynchronous blocks: runner + completion references. While the
    /// block is free: the pool's look-ahead hint (`Pooled::ahead_hint`).
    pub(crate) refs: AtomicU32,
    /// Asynchronous blocks: the body/completion hand-shake (`run.rs`).
    pub(crate) run_state: AtomicU8,
    /// Intrusive link: the submission stack, then the local run lists;
    /// while the block is free, the pool's free list (it is in no list of
    /// the engine's then).
    pub(crate) link: AtomicU32,
    /// Debug builds: the lifecycle phase, checked at every transition.
    #[cfg(debug_assertions)]
    pub(crate) phase: AtomicU8,
    pub(crate) deps: UnsafeCell<DepList>,
    pub(crate) meta: UnsafeCell<Meta>,
    pub(crate) body: UnsafeCell<Body>,
    /// Profiled operations' timestamps (untouched otherwise).
    pub(crate) prof: ProfStamps,
    /// Hang diagnosis' copy of the operation (untouched when it is off).
    pub(crate) diag: DiagSlot,
    /// A GPU operation running on a lane: the lane + 1 (0 otherwise); set
    /// before its body runs, taken when it completes (`gpu/rings.rs`).
    #[cfg(feature = "cuda")]
    pub(crate) gpu_lane: AtomicU32,
}

impl Pooled for OprBlock {
    /// `link`, in the first line: the taker and the giver write that line
    /// anyway.
    fn free_link(&self) -> &AtomicU32 {
        &self.link
    }

    const PREFETCH_LINES: usize = 4;

    /// `refs`, in the first line: used only while an asynchronous body
    /// runs.
    fn ahead_hint(&self) -> Option<&AtomicU32> {
        Some(&self.refs)
    }
}

// SAFETY: the `UnsafeCell` fields are accessed by one owner at a time, each
// hand-off being an acquire/release atomic (see "Ownership phases").
unsafe impl Sync for OprBlock {}

/// Debug-checked lifecycle phases of a block.
#[cfg(debug_assertions)]
pub(crate) mod phase {
    pub(crate) const FREE: u8 = 0;
    pub(crate) const FILLED: u8 = 1;
    pub(crate) const DISPATCHED: u8 = 2;
    pub(crate) const RUNNING: u8 = 3;
}

impl OprBlock {
    /// Debug builds: moves the block from phase `from` to `to`, panicking
    /// (with the block's index) if it was elsewhere: a block used twice.
    #[cfg(debug_assertions)]
    pub(crate) fn transition(&self, op: u32, from: u8, to: u8) {
        let was = self.phase.swap(to, crate::sync::Ordering::AcqRel);
        assert_eq!(was, from, "operation block {op} in phase {was}, expected {from} (moving to {to})");
    }

    /// The operation's variables.
    ///
    /// # Safety
    /// The caller must own the block in a phase where `deps` and `body` are
    /// not being written (any phase but the pusher's filling).
    #[inline]
    pub(crate) unsafe fn dep_slice(&self) -> &[Dep] {
        // SAFETY: per the contract nobody writes these fields meanwhile, and
        // a prebuilt operator outlives the block that holds its `Arc`.
        unsafe {
            match &*self.body.with(|p| p) {
                Body::Prebuilt(op) => op.deps.as_slice(),
                _ => (*self.deps.with(|p| p)).as_slice(),
            }
        }
    }

    /// The block's metadata.
    ///
    /// # Safety
    /// The caller must own the block and nobody may write `meta` meanwhile.
    #[inline]
    pub(crate) unsafe fn meta(&self) -> &Meta {
        // SAFETY: per the contract.
        unsafe { &*self.meta.with(|p| p) }
    }

    /// The block's metadata, mutably.
    ///
    /// # Safety
    /// The caller must own the block exclusively.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn meta_mut(&self) -> &mut Meta {
        // SAFETY: per the contract.
        unsafe { &mut *self.meta.with_mut(|p| p) }
    }
}

#[cfg(all(test, not(depengine_loom), not(debug_assertions)))]
mod layout {
    use super::*;
    use std::mem::offset_of;

    #[test]
    fn the_hot_fields_fill_the_first_four_lines() {
        assert!(offset_of!(OprBlock, body) + std::mem::size_of::<Body>() <= 256);
        assert!(offset_of!(OprBlock, prof) >= 240 && offset_of!(OprBlock, diag) > offset_of!(OprBlock, prof));
    }
}
