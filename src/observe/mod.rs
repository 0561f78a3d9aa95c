//! Observation: statistics, the profiler and its profiles, hang diagnosis.
//! Off the hot path unless asked for.

pub(crate) mod diagnose;
pub(crate) mod profile;
pub(crate) mod profiler;
pub(crate) mod stats;
