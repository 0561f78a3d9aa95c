//! Policy: where and when work runs, as opposed to the mechanism that keeps
//! the scheduling rule. Checked by benchmarks; any choice here only picks
//! among orders the mechanism allows.

pub(crate) mod inline_pace;
pub(crate) mod pusher_runs;

use crate::base::tuning::UNQUEUED_DOWN_TO_DIVISOR;
use crate::policy::pusher_runs::PusherRuns;
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

/// Where an engine's pushes run: the pending cap, and whether pushes run
/// bodies on their own thread (unqueued runs below the cap, stints). The
/// core asks it (`Core::unqueued_ticket`, `Core::submit`, `throttle.rs`);
/// it owns every estimate those decisions read. None of it orders
/// anything: std atomics, which loom does not explore.
pub(crate) struct PushPolicy {
    /// The pending-operation cap (0: none); see `throttle.rs`.
    pub(crate) max_pending: u64,
    /// [`EngineBuilder::run_on_pusher`](crate::EngineBuilder::run_on_pusher):
    /// whether pushes may run bodies on their thread below the cap.
    run_on_pusher: bool,
    /// [`EngineBuilder::inline_pace`](crate::EngineBuilder::inline_pace)
    /// in nanoseconds (0: off, as whenever `run_on_pusher` is off).
    inline_pace_ns: u64,
    /// Set when a push at the cap ran its body unqueued (with running on
    /// the pusher on); cleared when a push finds the pending count down to
    /// [`UNQUEUED_DOWN_TO_DIVISOR`] of the cap and its thread's pace of
    /// such runs not quicker than the inline pace. Read by every push with
    /// no variables and written only by pushers, and rarely: on a line of
    /// its own, so that those reads stay in the pushers' caches.
    unqueued_to_low_water: CachePadded<AtomicBool>,
    /// Stints: whether pushers run what their pushes make ready
    /// (`pusher_runs.rs`).
    pub(crate) runs: PusherRuns,
}

/// How a push with no variables may run unqueued now
/// ([`PushPolicy::unqueued_limit`]).
#[derive(Clone, Copy)]
pub(crate) struct UnqueuedLimit {
    /// It runs unqueued if the pending count has reached this.
    pub(crate) limit: u64,
    /// The pushes run unqueued down to the low water (after one ran at the cap).
    pub(crate) to_low_water: bool,
}

impl PushPolicy {
    /// For an engine with this cap; `inline_pace` applies only with
    /// `run_on_pusher` (below the cap, bodies run on pushers only when
    /// asked for).
    pub(crate) fn new(max_pending: u64, run_on_pusher: bool, inline_pace: Duration) -> Self {
        let pace = if run_on_pusher { inline_pace } else { Duration::ZERO };
        PushPolicy {
            max_pending,
            run_on_pusher,
            inline_pace_ns: u64::try_from(pace.as_nanos()).unwrap_or(u64::MAX),
            unqueued_to_low_water: CachePadded::new(AtomicBool::new(false)),
            runs: PusherRuns::new(max_pending, pace),
        }
    }

    /// The pending count at which a push with no variables runs unqueued:
    /// the cap, or, with running on the pusher and once one ran at the
    /// cap, the cap over [`UNQUEUED_DOWN_TO_DIVISOR`]. The caller checks
    /// first that there is a cap.
    #[inline]
    pub(crate) fn unqueued_limit(&self) -> UnqueuedLimit {
        let to_low_water = self.run_on_pusher && self.unqueued_to_low_water.load(Relaxed);
        let limit = if to_low_water {
            (self.max_pending / UNQUEUED_DOWN_TO_DIVISOR).min(self.max_pending - 1)
        } else {
            self.max_pending - 1
        };
        UnqueuedLimit { limit, to_low_water }
    }

    /// Below the limit: whether the push runs unqueued anyway, because
    /// this thread's runs come quicker than the inline pace or a stint is
    /// on. Ends the spell down to the low water when the pace is not quick.
    #[inline]
    pub(crate) fn unqueued_below_limit(&self, at: UnqueuedLimit) -> bool {
        let quick = at.to_low_water && crate::policy::inline_pace::quicker_than(self.inline_pace_ns);
        if at.to_low_water && !quick {
            self.unqueued_to_low_water.store(false, Relaxed);
        }
        // In a stint the pusher runs what its pushes make ready
        // (`pusher_runs.rs`); one with no variables, with no block.
        quick || self.runs.is_on()
    }

    /// A push with no variables took its ticket to run unqueued: at the
    /// cap, with running on the pusher, that starts a spell down to the
    /// low water.
    #[inline]
    pub(crate) fn note_unqueued(&self, at: UnqueuedLimit) {
        if !at.to_low_water && self.run_on_pusher {
            self.unqueued_to_low_water.store(true, Relaxed);
        }
    }
}
