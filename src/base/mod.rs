//! The lowest layer: plain types every other layer uses (errors, contexts,
//! the machine's topology), the guard for dropping user values, and the
//! tuning constants. Imports nothing from the crate.

pub(crate) mod context;
pub(crate) mod error;
pub(crate) mod topology;
pub(crate) mod tuning;
pub(crate) mod unwind;
