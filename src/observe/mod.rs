//! Observation: statistics, the profiler and its profiles, hang diagnosis.
//! Off the hot path unless asked for.

pub(crate) mod diagnose;
pub(crate) mod profile;
pub(crate) mod profiler;
pub(crate) mod stats;

use crate::observe::diagnose::{Diagnosis, HangHandler};
use crate::observe::profiler::Profiler;
use crate::observe::stats::Stats;

/// An engine's observers: the statistics (always on), the profiler and
/// hang diagnosis (when asked for). The core tells them what happens
/// (`core/observe.rs`); they own what they record.
pub(crate) struct Observers {
    pub(crate) stats: Stats,
    pub(crate) profiler: Profiler,
    /// Hang diagnosis, when on.
    pub(crate) diagnosis: Option<Diagnosis>,
}

impl Observers {
    /// For an engine with `workers` worker threads; the profiler keeps
    /// `profile_events` operations a lane; `hang_report` turns diagnosis on.
    pub(crate) fn new(
        workers: usize,
        profile_events: usize,
        hang_report: Option<(std::time::Duration, HangHandler)>,
    ) -> Self {
        Observers {
            stats: Stats::new(workers),
            profiler: Profiler::new(workers, profile_events),
            diagnosis: hang_report.map(|(after, handler)| Diagnosis::new(after, handler)),
        }
    }

    /// Whether an observer watches the queues (a profiling session, or
    /// hang diagnosis): then every operation takes the queued path.
    #[inline]
    pub(crate) fn watch_queues(&self) -> bool {
        self.profiler.session() != 0 || self.diagnosis.is_some()
    }
}
