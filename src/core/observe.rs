//! What the core tells its observers at each step of an operation: the
//! profiler's stamps (`observe/profiler.rs`) and hang diagnosis's copies
//! and watched waits (`observe/diagnose.rs`). Each caller checks first
//! that the observer is on; these only pass the core's parts along.

use crate::core::Core;
use crate::graph::var::Var;
use crate::observe::diagnose::{Diagnosis, HangReport};
use crate::observe::profiler::OTHER_LANES;

impl Core {
    /// One watchdog pass: reports every wait older than the threshold that
    /// was not reported yet.
    pub(crate) fn watchdog_pass(&self) {
        if let Some(diag) = &self.observe.diagnosis {
            diag.watchdog_pass(self.id, self.observe.profiler.now(), |var| self.pending_report(var));
        }
    }

    /// Everything in flight (on `var`, if given), from the blocks' copies
    /// (none without hang diagnosis).
    pub(crate) fn pending_report(&self, var: Option<Var>) -> HangReport {
        let used = if self.observe.diagnosis.is_some() { self.oprs.capacity_used() as u32 } else { 0 };
        let slots = (0..used).map(|i| &self.oprs.get(i).diag);
        let lanes = (0..self.traits.worker_threads + OTHER_LANES).map(|l| self.lane_name(l)).collect();
        Diagnosis::pending_report(slots, self.id, self.observe.profiler.now(), var, lanes)
    }

    /// The name of profiler lane `lane` (as traces and hang reports show it).
    pub(crate) fn lane_name(&self, lane: usize) -> String {
        match lane.checked_sub(self.traits.worker_threads) {
            None => self.executor.worker_name(lane),
            Some(other) => format!("other threads {other} (push, wait, complete)"),
        }
    }
}
