//! Stints: operations with variables run by the pushers themselves.
//!
//! When bodies are tiny, handing an operation to a worker costs more than
//! running it: its operation block, its variable blocks and each
//! variable's lines cross cores, while the pusher, running it inside the
//! push, finds them all in its own cache (`random` at W=0 about twice as
//! fast run on the pusher; perf/journal/2026-11-27.md, "stints, tiny
//! operations with variables run by their pushers").
//! The engine therefore switches between two
//! ways of treating a ready operation, measuring both as the pushing
//! thread sees them: how often its pushes come (`inline_pace.rs`, one
//! clock read per window of 64).
//!
//! - **Queuing** (the start): a `Normal` CPU operation that its push made
//!   ready goes to the executor, as any other. Each thread counts the pace
//!   of its pushes meanwhile (throttled waits at the cap included).
//! - **A probe**, by a push that reaches the pending cap, or by one in
//!   [`LOOK_EVERY`] of a thread's pushes (the pusher may be the bound
//!   without ever meeting the cap), once a probe is due and only where the
//!   thread's queued pushes come quicker than [`PROBE_PACES`] times the
//!   inline pace: it waits (up to [`PROBE_WAIT`](crate::base::tuning::PROBE_WAIT)) until the workers have
//!   drained everything pending, so that the next pushes find their
//!   variables free. If they did, a *stint* starts, under a new *epoch*,
//!   with the thread's pace of queued pushes less a [`MARGIN`]-th as its
//!   *limit*.
//! - **In a stint**, a synchronous `Normal` CPU push whose variables are
//!   all free runs *directly*: granted at once, run and released inside
//!   the push, with no operation block (`direct_run.rs`). Any other
//!   `Normal` CPU operation that its push's dispatch found ready (it
//!   conflicts with nothing pending) runs on the pushing thread, inside
//!   the push, as an `Async` one does (`executor::inline`), and a push
//!   with no variables runs unqueued (`Core::unqueued_ticket`);
//!   each run counts in the thread's pace, its windows started afresh by
//!   the epoch. An operation that is not ready is queued behind what it
//!   waits for, and a push that takes the pending count to the *low
//!   water* (a sixteenth of the cap, at least 1) waits until it is under
//!   it again: the conflicting operations then drain, and the next pushes
//!   find their variables free.
//! - **Back to queuing** when the pace of the runs has been no quicker
//!   than the limit at [`SLOW_ENDS`] window ends in a row, or is
//!   [`LOSING`] times the limit (the bodies, or the program between the
//!   pushes, got slower: at W=1000 a run on the pusher takes longer than
//!   a queued push costs it), or when a wait at the low water gives
//!   up (nothing drains: completions held on purpose). The next probe is
//!   due after a pause, which doubles each time a stint (or a probe) ends
//!   within its first [`PROBATION`] windows, up to [`MAX_PAUSE`], and is
//!   back to [`MIN_PAUSE`] after a longer one. A probe that loses by far
//!   costs two windows of runs on one thread, one that loses narrowly up
//!   to ten.
//!
//! Running an operation that its push found ready, before older queued
//! ones, breaks no rule: it conflicts with none of them, as an `Async`
//! operation run inside its push does not. A body's own pushes never run
//! so (its operation holds its variables, and it would recurse), nor do
//! they probe; nor any push while the profiler or hang diagnosis watches
//! the queues, or on an executor whose ready work only waiting threads run
//! (`ExecutorTraits::runs_on_pushers`). `EngineBuilder::inline_pace(0)`
//! turns stints off with the pushes without variables that run unqueued.
//!
//! The stint is the engine's, the paces are each thread's: with several
//! pushers, each runs what its own pushes make ready (and what its
//! combining pass makes ready for others, `dispatch.rs`), and any of them
//! whose pace falls behind ends the stint for all.
//!
//! Every field is an estimate that orders nothing (the operations' own
//! queues order them): std atomics, which loom does not explore, as for
//! the drain rate.

use crate::base::tuning::{
    LOOK_EVERY, LOSING, LOW_WATER_DIVISOR, MARGIN, MAX_PAUSE, MIN_PAUSE, PROBATION, PROBE_PACES, SLOW_ENDS, WINDOW,
};
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// Epochs of every engine, so that a thread pushing to two tells their
/// stints apart (`inline_pace::note_run_in`); 0 is no epoch.
static NEXT_EPOCH: AtomicU64 = AtomicU64::new(1);

/// What every ready operation's scheduling reads: set only when a stint
/// starts or ends, so the line stays in the pushers' caches.
#[derive(Default)]
struct Stint {
    on: AtomicBool,
    epoch: AtomicU64,
    /// Nanoseconds a run the stint must beat: the prober's pace of queued
    /// pushes less a [`MARGIN`]-th.
    limit_ns: AtomicU64,
}

/// Whether, and until when, an engine's pushers run ready operations
/// themselves (see the module docs).
pub(crate) struct PusherRuns {
    stint: CachePadded<Stint>,
    /// The pending count a push waits under during a stint.
    low_water: u64,
    origin: Instant,
    /// When the next probe is due, in nanoseconds since `origin`.
    probe_due_ns: AtomicU64,
    pause_ns: AtomicU64,
    /// Probes only where queued pushes come quicker ([`PROBE_PACES`]).
    probe_below_ns: u64,
    /// `false`: never (the inline pace is off, or there is no cap).
    enabled: bool,
}

impl PusherRuns {
    /// For an engine with this cap and inline pace (no stints with either
    /// off).
    pub(crate) fn new(max_pending: u64, inline_pace: Duration) -> Self {
        PusherRuns {
            stint: CachePadded::default(),
            low_water: (max_pending / LOW_WATER_DIVISOR).max(1),
            origin: Instant::now(),
            probe_due_ns: AtomicU64::new(0),
            pause_ns: AtomicU64::new(MIN_PAUSE.as_nanos() as u64),
            probe_below_ns: u64::try_from(inline_pace.saturating_mul(PROBE_PACES).as_nanos()).unwrap_or(u64::MAX),
            enabled: !inline_pace.is_zero() && max_pending != 0,
        }
    }

    /// Whether a stint is on: pushers run what their pushes make ready.
    #[inline(always)]
    pub(crate) fn is_on(&self) -> bool {
        self.stint.on.load(Relaxed)
    }

    /// The pending count a push waits under while a stint is on.
    #[inline]
    pub(crate) fn low_water(&self) -> u64 {
        self.low_water
    }

    /// Whether a probe is due now (none during a stint).
    pub(crate) fn probe_due(&self) -> bool {
        self.enabled && !self.is_on() && self.now_ns() >= self.probe_due_ns.load(Relaxed)
    }

    /// Whether the calling thread's queued pushes come quick enough for a
    /// probe ([`PROBE_PACES`]).
    pub(crate) fn worth_a_probe(&self) -> bool {
        crate::policy::inline_pace::queued_pace_ns() < self.probe_below_ns
    }

    /// Starts a stint, if the calling thread's pushes have a pace while
    /// queuing: that is its limit. Returns whether it started one.
    pub(crate) fn start(&self) -> bool {
        let queued = crate::policy::inline_pace::queued_pace_ns();
        if queued == u64::MAX {
            return false;
        }
        let limit = queued - queued / MARGIN;
        let stint = &*self.stint;
        stint.limit_ns.store(limit, Relaxed);
        stint.epoch.store(NEXT_EPOCH.fetch_add(1, Relaxed), Relaxed);
        stint.on.store(true, Relaxed);
        true
    }

    /// Counts a run inside a push of the stint on; ends the stint once
    /// the calling thread's pace has been no quicker than the limit at
    /// [`SLOW_ENDS`] window ends in a row, or is [`LOSING`] times the
    /// limit.
    #[inline]
    pub(crate) fn note_run(&self) {
        let stint = &*self.stint;
        let (epoch, limit) = (stint.epoch.load(Relaxed), stint.limit_ns.load(Relaxed));
        if let Some(end) = crate::policy::inline_pace::note_run_in(epoch, limit) {
            if end.slow_in_a_row >= SLOW_ENDS || (end.pace_ns != u64::MAX && end.pace_ns / LOSING >= limit) {
                self.stop(end.windows);
            }
        }
    }

    /// Counts a push of the calling thread that queued its operation
    /// while no stint was on (its pace is the limit of the next stint);
    /// every [`LOOK_EVERY`]-th returns whether a probe is due.
    #[inline]
    pub(crate) fn note_queued_push(&self) -> bool {
        self.enabled
            && crate::policy::inline_pace::note_queued_push()
                .is_some_and(|end| end.windows % (LOOK_EVERY / WINDOW) == 0)
            && self.probe_due()
    }

    /// Ends the stint (or a probe that did not start one), `windows`
    /// windows after its start, and sets when the next probe is due.
    #[cold]
    pub(crate) fn stop(&self, windows: u32) {
        self.stint.on.store(false, Relaxed);
        let min = MIN_PAUSE.as_nanos() as u64;
        let pause = if windows < PROBATION {
            (self.pause_ns.load(Relaxed).saturating_mul(2)).min(MAX_PAUSE.as_nanos() as u64)
        } else {
            min
        };
        self.pause_ns.store(pause, Relaxed);
        self.probe_due_ns.store(self.now_ns().saturating_add(pause), Relaxed);
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::*;

    #[test]
    fn short_stints_lengthen_the_pause_and_a_long_one_resets_it() {
        let runs = PusherRuns::new(1024, Duration::from_secs(1));
        assert_eq!(runs.low_water(), 64);
        assert!(runs.probe_due(), "no probe due at the start");
        assert!(!runs.start(), "a stint with no pace of queued pushes to beat");
        for _ in 0..2 * WINDOW {
            crate::policy::inline_pace::note_queued_push();
        }
        assert!(runs.start(), "no stint with a pace of queued pushes");
        let queued = crate::policy::inline_pace::queued_pace_ns();
        assert_eq!(runs.stint.limit_ns.load(Relaxed), queued - queued / MARGIN);
        assert!(runs.is_on() && !runs.probe_due(), "a probe due during a stint");
        let mut pause = MIN_PAUSE.as_nanos() as u64;
        for _ in 0..10 {
            runs.stop(PROBATION - 1);
            pause = (pause * 2).min(MAX_PAUSE.as_nanos() as u64);
            assert_eq!(runs.pause_ns.load(Relaxed), pause);
            assert!(!runs.is_on() && !runs.probe_due(), "a probe due at once after a short stint");
        }
        assert_eq!(pause, MAX_PAUSE.as_nanos() as u64, "the pause did not reach its longest");
        runs.stop(PROBATION);
        assert_eq!(runs.pause_ns.load(Relaxed), MIN_PAUSE.as_nanos() as u64);
        std::thread::sleep(MIN_PAUSE * 2);
        assert!(runs.probe_due(), "no probe due after the pause");
        assert!(!PusherRuns::new(0, Duration::from_secs(1)).probe_due(), "a probe with no cap");
        assert!(!PusherRuns::new(1024, Duration::ZERO).probe_due(), "a probe with the pace off");
    }
}
