//! Memory: index-addressed pools and their reservations, the sweep of
//! variable blocks, thread slots, closures stored inline, and the
//! `Completion` handle they carry. No allocation in steady state.

pub(crate) mod completion;
pub(crate) mod inline_fn;
pub(crate) mod pool;
pub(crate) mod reservation;
pub(crate) mod sweep;
pub(crate) mod thread_slot;
