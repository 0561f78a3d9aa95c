//! What the observers keep on each operation block: the profiler's
//! timestamps and hang diagnosis's copy. Defined here, with the block;
//! filled and read by `observe/profiler.rs` and `observe/diagnose.rs`.

use crate::base::tuning::INLINE_VARS;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8};

/// A profiled operation's timestamps, kept on its block. Plain atomics
/// (relaxed): the engine's own hand-offs order them, and an asynchronous
/// body may stamp `body_end` while its completion stamps `end`.
#[derive(Default)]
pub(crate) struct ProfStamps {
    pub(crate) pushed: AtomicU64,
    pub(crate) ready: AtomicU64,
    pub(crate) start: AtomicU64,
    pub(crate) body_end: AtomicU64,
    pub(crate) end: AtomicU64,
    /// Ticket + 1 of the operation that made this one ready (0: none).
    pub(crate) made_ready_by: AtomicU64,
    /// Lane of the running thread (low 16 bits) and [`FAILED`](crate::observe::profiler::FAILED).
    pub(crate) lane_flags: AtomicU32,
}

/// One block's diagnostic copy (`observe/diagnose.rs` fills and reads it).
#[derive(Default)]
pub(crate) struct DiagSlot {
    /// Ticket + 1 while the operation is in flight, 0 otherwise.
    pub(crate) ticket: AtomicU64,
    pub(crate) state: AtomicU8,
    /// Lane (as the profiler numbers threads) of the running thread.
    pub(crate) lane: AtomicU64,
    /// When the operation entered its state (ns since the engine started).
    pub(crate) since: AtomicU64,
    pub(crate) name: AtomicU64,
    pub(crate) name_len: AtomicU64,
    /// Variables: `slot | mode << 30` (as `Dep`) and generation << 32.
    pub(crate) deps: [AtomicU64; INLINE_VARS],
    /// Number of variables (only the first `INLINE_VARS` are copied).
    pub(crate) ndeps: AtomicU64,
}
