//! Bounded memory: what a pusher does above the pending cap.
//!
//! A push that leaves more than `max_pending` operations pending (dispatched
//! and not finished) is *throttled*: before it returns, its thread waits
//! until the count is back under the cap.
//!
//! - **Helping or waiting.** Executors whose ready work only waiting threads
//!   run (`naive`, random-order mode) make it help: it runs ready operations
//!   meanwhile. Those whose workers take one core each make it wait
//!   (`ExecutorTraits::throttled_pushers_help`): a helping pusher only takes turns
//!   with a worker.
//! - **Yielding or sleeping.** A waiting pusher yields its core. A yield that
//!   comes back at once (under [`ALONE_YIELD`]) found no other thread
//!   wanting the core, so yielding on would keep that core busy for nothing.
//!   Where the workers are free to move (pooled's, per_device's unpinned)
//!   and as many of them are awake as the process has CPUs
//!   (`WorkerState::movable_workers_fill_cpus`), two of them then share a
//!   CPU, and the scheduler, which sees no idle CPU to move one to, can
//!   keep them so for the rest of a run. (Until 2026-11-27 the sign was
//!   ready work in pooled's ring, which says nothing of unpinned per_device,
//!   whose work waits in deques.) Then, if the workers drain
//!   slowly enough that a sleep pays (`graph::wait::DrainRate`, `SLEEP_PAYS`), the
//!   pusher sleeps on the finished count until a quarter of the cap has
//!   drained: the completion that gets there wakes it
//!   (`PendingCounter::sleep_until_finished`), and [`SLEEP_LIMIT`] bounds a
//!   sleep that no completion ends.
//! - **Where the pusher runs.** Each hold first tells the executor
//!   (`WorkerState::note_throttled_pusher`): per_device's worker on the
//!   pusher's CPU hands dependency chains to an idle worker, and which CPU
//!   that is follows the pusher when the OS moves it.
//! - **Never stuck.** A program may hold completions on purpose and signal
//!   them only after pushing more. The wait therefore gives up after
//!   [`IDLE_LIMIT`] yields during which the count did not fall and the
//!   thread ran nothing, and a pusher sleeps only while operations are
//!   finishing (the drain rate has an estimate; after a sleep that ended
//!   with none finished it only yields). A body's pushes are never
//!   throttled: its own operation is pending.
//! - **Stints** (`pusher_runs.rs`). At the cap, a push may go on to probe:
//!   it waits (up to `PROBE_WAIT`) until nothing is pending, and a stint
//!   starts if it got there. During a stint a push waits under the low
//!   water (a sixteenth of the cap) instead of the cap, and a wait there
//!   that gives up ends the stint.

use crate::base::tuning::{ALONE_YIELD, IDLE_LIMIT, PROBE_WAIT, SLEEP_DRAIN_DIVISOR, SLEEP_LIMIT, SLEEP_PAYS};
use crate::core::Core;
use std::time::Instant;

impl Core {
    /// What a push does when it takes the pending count to the cap (or,
    /// while pushers run ready operations themselves, to the low water):
    /// waits until the count is back under it (see the module docs), and
    /// at the cap probes whether running them here pays
    /// (`pusher_runs.rs`).
    #[cold]
    pub(crate) fn throttle(&self, shard: usize) {
        if self.in_own_body() {
            return;
        }
        let runs = &self.policy.runs;
        if runs.is_on() {
            if !self.hold_under(shard, runs.low_water(), None) {
                runs.stop(0);
            }
            return;
        }
        self.hold_under(shard, self.policy.max_pending, None);
        if runs.probe_due() {
            self.probe_running_here(shard);
        }
    }

    /// A probe (`pusher_runs.rs`): waits until the workers have drained
    /// everything pending, so that the next pushes find their variables
    /// free, and starts a stint with this thread's pace of queued pushes
    /// as its limit.
    #[cold]
    pub(crate) fn probe_running_here(&self, shard: usize) {
        if !self.policy.runs.worth_a_probe() || !self.may_run_ready_here() {
            return;
        }
        // Held completions, or other threads' pushes, may keep the count
        // up: then there is no stint to start.
        if self.hold_under(shard, 1, Some(Instant::now() + PROBE_WAIT)) && self.policy.runs.start() {
            self.observe.stats.stint_started();
        } else {
            self.policy.runs.stop(0);
        }
    }

    /// Waits until the pending count is under `cap`, or gives up (see the
    /// module docs; and at `until`, if given); returns whether it got
    /// there.
    fn hold_under(&self, shard: usize, cap: u64, until: Option<Instant>) -> bool {
        self.observe.stats.throttled();
        self.traits.note_throttled_pusher();
        let helps = self.traits.throttled_pushers_help;
        let quarter = (cap / SLEEP_DRAIN_DIVISOR).max(1);
        let mut sleep_pays = self
            .pending
            .drain_rate
            .time_per_op(self.pending.finished_in(self.dispatcher.active_mask()))
            .is_some_and(|per_op| per_op.saturating_mul(quarter.min(u32::MAX as u64) as u32) >= SLEEP_PAYS);
        let mut idle = 0u32;
        let mut last = self.pending_in(shard);
        while last >= cap && idle < IDLE_LIMIT && until.is_none_or(|t| Instant::now() < t) {
            let mut slept = false;
            if helps && self.help_once() {
                idle = 0;
            } else {
                idle += 1;
                let yielded = Instant::now();
                std::thread::yield_now();
                if sleep_pays && yielded.elapsed() < ALONE_YIELD && self.traits.movable_workers_fill_cpus() {
                    slept = self.sleep_to_low_water(shard, cap, quarter);
                }
            }
            let now = self.pending_in(shard);
            if now < last {
                idle = 0;
            } else if slept {
                // Timed out with nothing finished: the workers stopped
                // draining (held on purpose?). Yield from now on.
                sleep_pays = false;
            }
            last = now;
        }
        last < cap
    }

    /// Sleeps until the pending count is a quarter of `cap` under it;
    /// returns whether it slept (not if the count is there already).
    fn sleep_to_low_water(&self, shard: usize, cap: u64, quarter: u64) -> bool {
        let low_water = cap - quarter;
        // Finished first: `pending`, read after, already counts what
        // finished in between as done, so the target is at most `pending`
        // completions away (reachable) and is reached at the low water or
        // sooner (pushes from other threads aside).
        let finished = self.pending.finished(shard);
        let pending = self.pending_in(shard);
        if pending <= low_water {
            return false;
        }
        self.observe.stats.throttle_slept();
        self.pending.sleep_until_finished(shard, finished + (pending - low_water), SLEEP_LIMIT);
        true
    }
}
