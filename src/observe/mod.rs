//! Observation: statistics, the profiler and its profiles, hang diagnosis.
//! Off the hot path unless asked for.

pub(crate) mod diagnose;
pub(crate) mod profile;
pub(crate) mod profiler;
pub(crate) mod stats;

use crate::graph::opr::{Dep, Meta, OprBlock};
use crate::graph::var::Var;
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

    /// At dispatch (the combiner owns the block): publishes its copy.
    pub(crate) fn diag_dispatched(&self, block: &OprBlock, meta: &Meta, deps: &[Dep]) {
        block.diag.dispatched(meta, deps, self.profiler.now());
    }

    /// Before the body runs, on the running thread.
    pub(crate) fn diag_running(&self, block: &OprBlock, worker: Option<usize>) {
        block.diag.running(self.profiler.lane(worker), self.profiler.now());
    }

    /// The body returned.
    pub(crate) fn diag_body_returned(&self, block: &OprBlock) {
        block.diag.body_returned(self.profiler.now());
    }

    /// Every variable granted the operation (profiling or diagnosing).
    #[cold]
    #[inline(never)]
    pub(crate) fn observe_ready(&self, block: &OprBlock, meta: &Meta) {
        if meta.profile_session != 0 {
            self.profiler.stamp_ready(block);
        }
        if self.diagnosis.is_some() {
            block.diag.ready(self.profiler.now());
        }
    }

    /// Registers a wait that is about to block (on `var`, or on everything);
    /// returns its entry for [`diag_wait_end`](Self::diag_wait_end).
    pub(crate) fn diag_wait_begin(&self, var: Option<Var>, write: bool) -> Option<usize> {
        self.diagnosis.as_ref()?.wait_begin(var, write, self.profiler.now())
    }

    /// The wait registered as `entry` returned.
    pub(crate) fn diag_wait_end(&self, entry: Option<usize>) {
        if let Some(diag) = &self.diagnosis {
            diag.wait_end(entry);
        }
    }
}
