//! What the core tells its observers at each step of an operation: the
//! profiler's stamps (`observe/profiler.rs`) and hang diagnosis's copies
//! and watched waits (`observe/diagnose.rs`). Each caller checks first
//! that the observer is on; these only pass the core's parts along.

use crate::core::Core;
use crate::graph::opr::{Dep, Meta, OprBlock};
use crate::graph::var::Var;
use crate::observe::diagnose::{Diagnosis, HangReport};
use crate::observe::profiler::OTHER_LANES;

impl Core {
    /// At dispatch (the combiner owns the block): publishes its copy.
    pub(crate) fn diag_dispatched(&self, block: &OprBlock, meta: &Meta, deps: &[Dep]) {
        block.diag.dispatched(meta, deps, self.observe.profiler.now());
    }

    /// Before the body runs, on the running thread.
    pub(crate) fn diag_running(&self, block: &OprBlock, worker: Option<usize>) {
        block.diag.running(self.observe.profiler.lane(worker), self.observe.profiler.now());
    }

    /// The body returned.
    pub(crate) fn diag_body_returned(&self, block: &OprBlock) {
        block.diag.body_returned(self.observe.profiler.now());
    }

    /// Every variable granted the operation (profiling or diagnosing).
    #[cold]
    #[inline(never)]
    pub(crate) fn observe_ready(&self, block: &OprBlock, meta: &Meta) {
        if meta.profile_session != 0 {
            self.observe.profiler.stamp_ready(block);
        }
        if self.observe.diagnosis.is_some() {
            block.diag.ready(self.observe.profiler.now());
        }
    }

    /// Registers a wait that is about to block (on `var`, or on everything);
    /// returns its entry for [`diag_wait_end`](Self::diag_wait_end).
    pub(crate) fn diag_wait_begin(&self, var: Option<Var>, write: bool) -> Option<usize> {
        self.observe.diagnosis.as_ref()?.wait_begin(var, write, self.observe.profiler.now())
    }

    /// The wait registered as `entry` returned.
    pub(crate) fn diag_wait_end(&self, entry: Option<usize>) {
        if let Some(diag) = &self.observe.diagnosis {
            diag.wait_end(entry);
        }
    }

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
