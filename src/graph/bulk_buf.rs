//! The pooled storage of one bulk: its members' closures and variables
//! (`core/bulk.rs` fills and runs it).

use crate::graph::var::Var;
use crate::mem::inline_fn::InlineFn;
use crate::mem::pool::Pooled;
use crate::sync::{AtomicU32, UnsafeCell};

/// The pooled storage of one bulk.
#[derive(Default)]
pub(crate) struct BulkBuf {
    pub(crate) bodies: UnsafeCell<Vec<InlineFn>>,
    pub(crate) reads: UnsafeCell<Vec<Var>>,
    pub(crate) writes: UnsafeCell<Vec<Var>>,
    free_link: AtomicU32,
}

impl Pooled for BulkBuf {
    fn free_link(&self) -> &AtomicU32 {
        &self.free_link
    }
}

// SAFETY: a buffer has one owner at a time: the thread whose bulk is open,
// then (handed over by the push, a release/acquire hand-off) the fused
// operation's runner, until it gives the buffer back to the pool.
unsafe impl Sync for BulkBuf {}
