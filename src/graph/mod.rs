//! The dependency graph's mechanism: variables and their queues, operation
//! blocks, the dispatcher that orders pushes, the waits and the pending
//! count, and (feature `cuda`) each variable's GPU fences.

pub(crate) mod dispatch;
#[cfg(feature = "cuda")]
pub(crate) mod gpu;
pub(crate) mod operator;
pub(crate) mod opr;
pub(crate) mod var;
pub(crate) mod var_queue;
pub(crate) mod wait;
