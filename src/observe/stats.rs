//! Engine statistics: always on, cheap enough to leave on.
//!
//! The counter on the hot path — operations run — lives in one cache line
//! per worker thread that only that worker writes (a plain load and store,
//! no locked instruction, no line shared with another core). Operations run
//! on other threads (inline runs, waiters helping, the naive engine) are
//! not counted as they run: they are the finished operations the workers
//! did not run. The counters of a waiting thread's fast path (waits,
//! waits answered at once, helping runs) live in one line per
//! [thread slot](crate::mem::thread_slot), written the same way by the slot's
//! holder; a thread without a slot bumps a shared copy with a locked
//! instruction. Everything else is counted where the
//! engine is already slow (a park, a futex wake-up, a failure, a throttled
//! push) or read from state the engine keeps anyway (the dispatcher's ticket
//! count, the pools). [`Engine::stats`](crate::Engine::stats) sums it all.
//!
//! High-water marks use a load before any write, so while a mark is not
//! being raised its line stays shared in every core's cache.
//!
//! The counters are plain `std` atomics even under loom: they order nothing,
//! and modelling them would only multiply the interleavings loom explores.

use crate::mem::thread_slot;
use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// A snapshot of an engine's counters ([`Engine::stats`](crate::Engine::stats)).
/// Counters only grow; read two snapshots and subtract to measure a region.
///
/// ```
/// let engine = depengine::Engine::builder().cpu_workers(2).build().unwrap();
/// let v = engine.new_var();
/// for _ in 0..100 {
///     engine.push_sync(|_| {}, &[], &[v]).unwrap();
/// }
/// engine.wait_all().unwrap();
/// let s = engine.stats();
/// assert_eq!(s.pushed, 100);
/// assert_eq!(s.ran_on_workers + s.ran_elsewhere, 100);
/// println!("{s}");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EngineStats {
    /// Operations pushed: user operations and variable deletions (bulked
    /// pushes count once per fused operation).
    pub pushed: u64,
    /// `wait_var` / `wait_to_write` calls that reached the engine.
    pub waits: u64,
    /// Of `waits`: those that returned at once, without queuing behind
    /// anything (the variable had nothing in flight they wait for).
    pub waits_at_once: u64,
    /// Operations finished (pushed ones, not waits).
    pub finished: u64,
    /// Operations run (or skipped) by the engine's worker threads.
    pub ran_on_workers: u64,
    /// Operations run on other threads: inline in a push (the naive engine,
    /// a full ready queue), by a completing thread, or by a waiting thread.
    pub ran_elsewhere: u64,
    /// Of `ran_on_workers + ran_elsewhere`: those run by a thread blocked in
    /// a wait (or a throttled push) that helped instead of sleeping.
    pub helped_by_waiters: u64,
    /// Operations a worker took from another worker's queue. The naive and
    /// pooled engines have no per-worker queues, so nothing to steal: 0.
    pub stolen: u64,
    /// Operations whose body was skipped because an input had failed (or
    /// the engine was cancelling).
    pub skipped: u64,
    /// Operations that failed (error, panic, dropped completion, skipped).
    pub failed: u64,
    /// Times a worker went to sleep on its futex.
    pub parks: u64,
    /// Futex wake-ups issued to sleeping workers.
    pub wakeups: u64,
    /// Pushes held back by the pending cap ([`EngineBuilder::max_pending`](crate::EngineBuilder::max_pending)),
    /// by a stint's low water, or by a probe's drain (see `stints`).
    pub throttled: u64,
    /// Of `throttled`: the times a held pusher slept until the workers had
    /// drained a quarter of the cap, instead of yielding (`throttle.rs`).
    pub throttle_sleeps: u64,
    /// Stints begun: times the pushers took to running the operations
    /// with variables that their pushes make ready themselves, inside the
    /// pushes, having measured that queuing them was slower
    /// ([`EngineBuilder::inline_pace`](crate::EngineBuilder::inline_pace)).
    /// Their runs count in `ran_elsewhere`.
    pub stints: u64,
    /// Most operations pushed and not finished at once in one dispatch
    /// shard (all of one pushing thread's, when it pushes to variables of
    /// its own), as seen by pushes (tracked while the pending cap is on,
    /// the default). See [`EngineBuilder::max_pending`](crate::EngineBuilder::max_pending).
    pub pending_high_water: u64,
    /// Most operations waiting in a ready queue at once (sampled by the
    /// workers every 64 operations).
    pub ready_high_water: u64,
    /// Operations run per worker thread (CPU workers, then copy workers).
    pub per_worker: Vec<u64>,
    /// Pool occupancy.
    pub pools: PoolStats,
    /// Whether the push path's handshakes pair a compiler fence with
    /// Linux's `membarrier` on their rare side (`true`), or use a SeqCst
    /// fence on both sides (`false`: `DEPENGINE_MEMBARRIER=0`, or a kernel
    /// without it). Chosen once per process, at the first engine's build.
    pub membarrier: bool,
}

/// Workers sample their ready queue's depth once per this many operations.
pub(crate) const READY_SAMPLE: u64 = 64;

/// Counters only their worker writes.
#[derive(Default)]
struct WorkerShard {
    ran: AtomicU64,
}

/// The counters of a waiting thread's fast path: one copy per thread
/// slot, which only the slot's holder writes, and a shared one.
#[derive(Default)]
struct WaiterShard {
    helped: AtomicU64,
    waits: AtomicU64,
    waits_at_once: AtomicU64,
}

/// Counters any thread may write.
#[derive(Default)]
struct SharedShard {
    /// For threads without a slot.
    waiters: WaiterShard,
    skipped: AtomicU64,
    failed: AtomicU64,
    throttled: AtomicU64,
    throttle_sleeps: AtomicU64,
    stints: AtomicU64,
}

/// An engine's live counters (see the module docs).
pub(crate) struct Stats {
    workers: Box<[CachePadded<WorkerShard>]>,
    /// Indexed by thread slot.
    waiters: Box<[CachePadded<WaiterShard>]>,
    shared: CachePadded<SharedShard>,
    pending_high_water: CachePadded<HighWater>,
}

/// A maximum that is cheap to keep when it rarely moves.
#[derive(Default)]
pub(crate) struct HighWater(AtomicU64);

impl HighWater {
    #[inline]
    pub(crate) fn note(&self, value: u64) {
        if value > self.0.load(Relaxed) {
            self.0.fetch_max(value, Relaxed);
        }
    }

    pub(crate) fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

impl Stats {
    /// Counters for `workers` worker threads (ids `0..workers`).
    pub(crate) fn new(workers: usize) -> Self {
        Stats {
            workers: (0..workers).map(|_| CachePadded::new(WorkerShard::default())).collect(),
            waiters: (0..thread_slot::SLOTS).map(|_| CachePadded::new(WaiterShard::default())).collect(),
            shared: CachePadded::new(SharedShard::default()),
            pending_high_water: CachePadded::new(HighWater::default()),
        }
    }

    /// An operation ran on worker `worker` (`None`: another thread, counted
    /// by difference). The caller is that worker's own thread.
    #[inline]
    pub(crate) fn ran(&self, worker: Option<usize>) {
        if let Some(shard) = worker.and_then(|w| self.workers.get(w)) {
            // Only this worker writes its shard: no locked instruction.
            shard.ran.store(shard.ran.load(Relaxed) + 1, Relaxed);
        }
    }

    /// Adds one to each waiter counter `picks` chooses: in this thread's
    /// slot without a locked instruction (one slot look-up for all), else
    /// in the shared copy.
    #[inline(always)]
    fn count_waiter<const N: usize>(&self, picks: [fn(&WaiterShard) -> &AtomicU64; N]) {
        match thread_slot::current() {
            Some(slot) => {
                for pick in picks {
                    // Only this slot's holder writes its copy.
                    let c = pick(&self.waiters[slot]);
                    c.store(c.load(Relaxed) + 1, Relaxed);
                }
            }
            None => {
                for pick in picks {
                    pick(&self.shared.waiters).fetch_add(1, Relaxed);
                }
            }
        }
    }

    pub(crate) fn helped(&self) {
        self.count_waiter([|w| &w.helped]);
    }

    pub(crate) fn skipped(&self) {
        self.shared.skipped.fetch_add(1, Relaxed);
    }

    pub(crate) fn failed(&self) {
        self.shared.failed.fetch_add(1, Relaxed);
    }

    pub(crate) fn waited(&self) {
        self.count_waiter([|w| &w.waits]);
    }

    pub(crate) fn waited_at_once(&self) {
        self.count_waiter([|w| &w.waits_at_once, |w| &w.waits]);
    }

    pub(crate) fn throttled(&self) {
        self.shared.throttled.fetch_add(1, Relaxed);
    }

    pub(crate) fn throttle_slept(&self) {
        self.shared.throttle_sleeps.fetch_add(1, Relaxed);
    }

    pub(crate) fn stint_started(&self) {
        self.shared.stints.fetch_add(1, Relaxed);
    }

    #[inline]
    pub(crate) fn note_pending(&self, pending: u64) {
        self.pending_high_water.note(pending);
    }

    /// The pending high-water mark so far.
    #[inline]
    pub(crate) fn pending_high_water(&self) -> u64 {
        self.pending_high_water.get()
    }

    /// Fills the counters kept here into `s`.
    pub(crate) fn read_into(&self, s: &mut EngineStats) {
        s.per_worker = self.workers.iter().map(|w| w.ran.load(Relaxed)).collect();
        s.ran_on_workers = s.per_worker.iter().sum();
        let waiters = || self.waiters.iter().map(|w| &**w).chain([&self.shared.waiters]);
        s.helped_by_waiters = waiters().map(|w| w.helped.load(Relaxed)).sum();
        s.waits = waiters().map(|w| w.waits.load(Relaxed)).sum();
        s.waits_at_once = waiters().map(|w| w.waits_at_once.load(Relaxed)).sum();
        s.skipped = self.shared.skipped.load(Relaxed);
        s.failed = self.shared.failed.load(Relaxed);
        s.throttled = self.shared.throttled.load(Relaxed);
        s.throttle_sleeps = self.shared.throttle_sleeps.load(Relaxed);
        s.stints = self.shared.stints.load(Relaxed);
        s.pending_high_water = self.pending_high_water.get();
    }
}

/// Pool occupancy, for leak checks and tuning. Exact when the engine is idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct PoolStats {
    /// Operation blocks in use.
    pub live_ops: usize,
    /// Variable queue blocks in use: one sentinel per live variable, plus
    /// accesses queued and spares the dispatcher holds.
    pub live_var_blocks: usize,
    /// Variables alive (created and not yet deleted), not counting the
    /// retired slots.
    pub live_vars: usize,
    /// Variable slots retired after their last generation (each was
    /// deleted 2^32 times; see [`Engine::delete_var`](crate::Engine::delete_var)).
    pub retired_var_slots: usize,
    /// Operation blocks ever created (the pool's high-water mark).
    pub op_blocks_created: usize,
}

/// Counters an executor keeps (parks, wake-ups, ready-queue depth); the
/// counting around the sleep protocol is in `exec/park.rs`.
#[derive(Default)]
pub(crate) struct ExecutorCounters {
    pub(crate) parks: AtomicU64,
    pub(crate) wakeups: AtomicU64,
    pub(crate) ready_high_water: HighWater,
}

impl ExecutorCounters {
    pub(crate) fn add_into(&self, s: &mut EngineStats) {
        s.parks += self.parks.load(Relaxed);
        s.wakeups += self.wakeups.load(Relaxed);
        s.ready_high_water = s.ready_high_water.max(self.ready_high_water.get());
    }
}

impl std::fmt::Display for EngineStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = &self.pools;
        writeln!(
            f,
            "ops: {} pushed, {} finished, {} waits ({} at once); ran {} on workers {:?}, {} elsewhere \
             ({} by waiters); {} stolen, {} skipped, {} failed",
            self.pushed,
            self.finished,
            self.waits,
            self.waits_at_once,
            self.ran_on_workers,
            self.per_worker,
            self.ran_elsewhere,
            self.helped_by_waiters,
            self.stolen,
            self.skipped,
            self.failed
        )?;
        write!(
            f,
            "workers: {} parks, {} wake-ups; {} pushes throttled ({} slept); {} stints on pushers; \
             high water: {} pending, {} ready; \
             pools: {} op blocks ({} live), {} var blocks live, {} vars live",
            self.parks,
            self.wakeups,
            self.throttled,
            self.throttle_sleeps,
            self.stints,
            self.pending_high_water,
            self.ready_high_water,
            p.op_blocks_created,
            p.live_ops,
            p.live_var_blocks,
            p.live_vars
        )
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::*;

    /// Threads bumping the waiter counters at the same time lose no count:
    /// each live thread writes only its own slot's copy (or the shared,
    /// locked one), and a read sums them all.
    #[test]
    fn concurrent_waiters_lose_no_count() {
        const THREADS: u64 = 8;
        const EACH: u64 = 20_000;
        let stats = Stats::new(1);
        std::thread::scope(|s| {
            for _ in 0..THREADS {
                s.spawn(|| {
                    for _ in 0..EACH {
                        stats.waited_at_once();
                        stats.helped();
                    }
                });
            }
        });
        stats.waited();
        let mut read = EngineStats::default();
        stats.read_into(&mut read);
        assert_eq!(read.waits_at_once, THREADS * EACH);
        assert_eq!(read.waits, THREADS * EACH + 1);
        assert_eq!(read.helped_by_waiters, THREADS * EACH);
    }
}
