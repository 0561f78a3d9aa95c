//! The pooled executor: one shared pool of CPU workers
//! fed by one ready ring, plus a separate ring and pool for copy operations.
//!
//! Two refinements keep it cheap:
//!
//! - **successor slot**: an operation made ready by a worker (a completion
//!   releasing the next link of a chain, a nested push) goes to that worker's
//!   one-entry `NEXT` slot when it is free, so a chain stays on one core with
//!   no ring round trip and no cross-core hop; further ones go to the ring
//!   where idle workers find them;
//! - **overflow runs inline**: when the ring is full the thread that made the
//!   operation ready runs it itself, which throttles a pusher racing ahead;
//! - **at the pending cap**, a synchronous `Normal` push with no variables
//!   runs its body on the pusher, inside the push, with no block and no
//!   queue, and so do those after it until half the cap has drained, and
//!   past that while the pusher's runs come faster than the inline pace
//!   (`Core::unqueued_ticket`, `inline_pace.rs`);
//! - **in a stint** (`pusher_runs.rs`), a `Normal` CPU operation that its
//!   push made ready runs on the pusher, inside the push, while that beats
//!   the pusher's pace of queued pushes (with no block at all where its
//!   variables are all free, `direct_run.rs`).
//!
//! Idle workers spin for the configured time, then park (`park.rs`). A
//! push from a thread that has just waited on the engine (`wait_var`,
//! `wait_all`) is marked on the ring: that thread most likely waits for it
//! next and runs it itself (`help`), so a spinner leaves such an operation
//! alone for [`WAITER_GRACE`](crate::base::tuning::WAITER_GRACE) while it
//! is the only one ready, and the round trip stays on one core (pingpong,
//! perf/journal/). Anything else is taken at once: a grace on every lone
//! operation would delay any thread's single push by the grace, and in
//! pingpong it let the spinners run out and park, so that p99.9 grew
//! tenfold.

use super::inline::{run_inline, run_queued_one};
use super::park::{push_and_wake, Sleep, Spun};
use super::ready_ring::ReadyRing;
use super::AbortOnUnwind;
use super::{Executor, ExecutorTraits, Runner, WorkerState, WorkerThreads};
use crate::base::context::FnProperty;
use crate::base::tuning::{MISSES_BEFORE_NAP, READY_CAPACITY};
use crate::mem::pool::NIL;
use crate::observe::stats::{EngineStats, ExecutorCounters, READY_SAMPLE};
use crate::sync::{AtomicBool, Ordering};
use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

/// One pool of workers and the ring they serve.
pub(crate) struct WorkerPool {
    ring: ReadyRing,
    sleep: Sleep,
    stop: AtomicBool,
    spin: Duration,
    workers: usize,
    first_worker_id: usize,
    counters: ExecutorCounters,
}

crate::sync::thread_local! {
    /// The pool this thread works for (null for other threads).
    static POOL: Cell<*const WorkerPool> = const { Cell::new(std::ptr::null()) };
    /// This worker's successor slot (`NIL` when empty).
    static NEXT: Cell<u32> = const { Cell::new(NIL) };
    /// This worker's id, for `RunContext::worker`.
    static WORKER_ID: Cell<Option<usize>> = const { Cell::new(None) };
}

impl WorkerPool {
    fn new(workers: usize, first_worker_id: usize, spin: Duration) -> Self {
        Self::with_capacity(workers, first_worker_id, spin, READY_CAPACITY)
    }

    /// A pool whose ring holds `capacity` ready operations.
    pub(crate) fn with_capacity(workers: usize, first_worker_id: usize, spin: Duration, capacity: usize) -> Self {
        WorkerPool {
            ring: ReadyRing::new(capacity),
            sleep: Sleep::new(workers, false),
            stop: AtomicBool::new(false),
            spin,
            workers,
            first_worker_id,
            counters: ExecutorCounters::default(),
        }
    }

    fn is_current(&self) -> bool {
        POOL.with(|p| std::ptr::eq(p.get(), self))
    }

    /// A worker of this pool keeps `op` in its free successor slot;
    /// returns whether it did. Not an operation pushed from a body of
    /// `core`: the slot is this worker's alone, and the body may block its
    /// worker until that operation has run (on another worker, which the
    /// ring wakes).
    fn keep_as_successor<R: Runner>(&self, core: &R, op: u32) -> bool {
        if self.is_current() && NEXT.with(|n| n.get()) == NIL && !core.in_own_body() {
            NEXT.with(|n| n.set(op));
            return true;
        }
        false
    }

    fn schedule<R: Runner>(&self, core: &R, op: u32) {
        if self.keep_as_successor(core, op) {
            return;
        }
        if let Err(op) = push_and_wake(&self.ring, op, |for_waiter| self.counters.wake_one(&self.sleep, for_waiter)) {
            run_inline(core, op);
        }
    }

    /// Like `schedule`, for work that must run on this pool's threads (a GPU
    /// ring: its workers own the streams). When the ring is full, a worker
    /// of the pool runs `op` itself and any other thread waits for room.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn schedule_here<R: Runner>(&self, core: &R, op: u32) {
        if self.keep_as_successor(core, op) {
            return;
        }
        let mut op = op;
        loop {
            match self.publish(op) {
                Ok(()) => return,
                Err(back) if self.is_current() => return core.run(back, current_worker()),
                Err(back) => {
                    op = back;
                    std::thread::yield_now();
                }
            }
        }
    }

    /// Puts `op` on the ring and wakes a worker for it (unless one is
    /// spinning); hands `op` back when the ring is full.
    fn publish(&self, op: u32) -> Result<(), u32> {
        self.ring.push(op)?;
        self.wake_one();
        Ok(())
    }

    /// Wakes a parked worker (unless one is spinning), counting it.
    #[inline]
    fn wake_one(&self) {
        self.counters.wake_one(&self.sleep, false);
    }

    /// Whether the ring holds work a spinner must not leave to a waiter
    /// (anything but one marked operation alone).
    fn has_work_to_take(&self) -> bool {
        !self.ring.is_empty() && !self.ring.only_marked()
    }

    /// A spinner whose spin left its work to the threads that pushed it
    /// naps, then hands the watch on when more than one operation is
    /// ready (`ExecutorCounters::nap_and_hand_on`). Returns `false` when
    /// the pool is stopping.
    fn nap_then_hand_on(&self) -> bool {
        self.counters.nap_and_hand_on(&self.sleep, || self.has_work_to_take(), &self.stop, || self.ring.len() > 1)
    }

    fn next_ready(&self) -> Option<u32> {
        let next = NEXT.with(|n| n.replace(NIL));
        if next != NIL {
            return Some(next);
        }
        self.ring.pop()
    }

    /// A worker found nothing to run: spins (if no other worker is
    /// spinning), then parks until work is published. Returns `false` when
    /// the pool is stopping.
    ///
    /// `missed` counts the spins in a row that found work which was gone
    /// when this worker went to take it (the worker loop resets it when it
    /// runs something): with a waiter running its own round trips, what a
    /// spinner finds after the grace is mostly that waiter's next
    /// operation, taken first by the waiter.
    fn idle(&self, missed: &mut u32) -> bool {
        if self.sleep.try_start_spinning() {
            // A lone operation marked by its publisher as one it is about
            // to wait for and run itself (`help`) is left alone for
            // `WAITER_GRACE` first, so that such a round trip stays on one
            // core; anything else is taken at once.
            let ring = &self.ring;
            let spun = self.sleep.spin_with_grace(self.spin, || false, || !ring.is_empty(), || ring.only_marked());
            if spun == Spun::LeftToWaiters || (spun == Spun::Found && *missed >= MISSES_BEFORE_NAP) {
                *missed = 0;
                // A thread is running its own round trips: stay off the
                // ring's lines, counted as spinning, until other work
                // comes (`Sleep::nap`).
                return self.nap_then_hand_on();
            }
            self.sleep.stop_spinning();
            if spun == Spun::Found {
                *missed += 1;
                // More than the one we will take: another worker may help.
                if self.ring.len() > 1 {
                    self.wake_one();
                }
                return true;
            }
        }
        if self.stop.load(Ordering::Acquire) {
            return false;
        }
        self.counters.park_and_hand_on(
            &self.sleep,
            || !self.ring.is_empty() || self.stop.load(Ordering::SeqCst),
            || self.ring.len() > 1,
        );
        true
    }

    /// The worker loop of worker `id` (the calling thread) until the pool
    /// stops.
    pub(crate) fn work<R: Runner>(&self, core: &R, id: usize) {
        let _guard = AbortOnUnwind;
        POOL.with(|p| p.set(self));
        WORKER_ID.with(|w| w.set(Some(id)));
        core.enter_worker();
        core.profiler().bind_worker(id);
        let mut ran = 0u64;
        let mut missed = 0;
        loop {
            if let Some(op) = self.next_ready() {
                missed = 0;
                core.run(op, Some(id));
                ran += 1;
                if ran.is_multiple_of(READY_SAMPLE) {
                    self.counters.ready_high_water.note(self.ring.len() as u64);
                }
                continue;
            }
            core.flush_worker_batch();
            if !self.idle(&mut missed) {
                break;
            }
        }
        core.leave_worker();
        POOL.with(|p| p.set(std::ptr::null()));
    }

    /// Its worker threads.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn workers(&self) -> usize {
        self.workers
    }

    /// Tells the workers to stop once the ring is empty (then join them).
    pub(crate) fn tell_stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.sleep.notify_all();
    }

    /// Adds its counters to `s`.
    pub(crate) fn add_stats(&self, s: &mut EngineStats) {
        self.counters.add_into(s);
    }
}

/// The id of the pooled worker running on this thread, if any.
pub(crate) fn current_worker() -> Option<usize> {
    WORKER_ID.with(|w| w.get())
}

/// A shared CPU pool and a copy pool (see the module docs).
pub(crate) struct PooledExecutor {
    normal: Arc<WorkerPool>,
    copy: Arc<WorkerPool>,
    threads: WorkerThreads,
    /// The CPUs this process may use, when it was built.
    cpus: usize,
}

impl PooledExecutor {
    pub(crate) fn new(cpu_workers: usize, copy_workers: usize, spin: Duration) -> Self {
        PooledExecutor {
            normal: Arc::new(WorkerPool::new(cpu_workers, 0, spin)),
            copy: Arc::new(WorkerPool::new(copy_workers, cpu_workers, spin)),
            threads: WorkerThreads::default(),
            cpus: crate::base::topology::available_cpus(),
        }
    }
}

/// The CPU pool's state, as a throttled pusher consults it.
struct PooledWorkers {
    pool: Arc<WorkerPool>,
    cpus: usize,
}

impl WorkerState for PooledWorkers {
    fn movable_workers_fill_cpus(&self) -> bool {
        self.pool.sleep.movable_workers_fill(self.cpus)
    }

    fn note_throttled_pusher(&self) {}
}

impl<R: Runner> Executor<R> for PooledExecutor {
    fn start(&self, core: &Arc<R>) -> std::io::Result<()> {
        for (kind, pool) in [("cpu", &self.normal), ("copy", &self.copy)] {
            for i in 0..pool.workers {
                let (core, pool) = (core.clone(), pool.clone());
                let id = pool.first_worker_id + i;
                self.threads.spawn(format!("depengine-{kind}-{i}"), move || pool.work(&*core, id))?;
            }
        }
        Ok(())
    }

    fn schedule(&self, core: &R, op: u32, prop: FnProperty) {
        let pool = if prop.is_copy() { &self.copy } else { &self.normal };
        pool.schedule(core, op);
    }

    fn help(&self, core: &R) -> bool {
        if run_queued_one() {
            return true;
        }
        let mine = POOL.with(|p| p.get());
        let pool: &WorkerPool = if mine.is_null() {
            &self.normal
        } else {
            // SAFETY: a worker's pool outlives the worker's thread.
            unsafe { &*mine }
        };
        match pool.next_ready() {
            Some(op) => {
                core.run(op, current_worker());
                true
            }
            None => false,
        }
    }

    fn stop(&self) {
        for pool in [&self.normal, &self.copy] {
            pool.tell_stop();
        }
        self.threads.join_all();
    }

    fn traits(&self) -> ExecutorTraits {
        ExecutorTraits {
            cpu_workers: self.normal.workers,
            worker_threads: self.normal.workers + self.copy.workers,
            waiters_can_sleep: true,
            runs_async_inline: false,
            runs_on_pushers: true,
            throttled_pushers_help: false,
            workers: Some(Arc::new(PooledWorkers { pool: self.normal.clone(), cpus: self.cpus })),
        }
    }

    fn worker_name(&self, id: usize) -> String {
        match id.checked_sub(self.normal.workers) {
            None => format!("cpu worker {id}"),
            Some(c) => format!("copy worker {c}"),
        }
    }

    fn add_stats(&self, s: &mut EngineStats) {
        self.normal.add_stats(s);
        self.copy.add_stats(s);
    }
}

/// Loom model of the hand-off from a publisher to idle workers
/// (`--cfg depengine_loom`; see `loom_tests/README.md`).
#[cfg(all(test, depengine_loom))]
mod loom_models {
    use super::*;
    use crate::sync::{futex_wait, futex_wake_all, AtomicU32};
    use loom::sync::Arc;

    /// The worker loop (`WorkerPool::work`'s, with `take` for running an
    /// operation) until the pool stops.
    fn work(pool: &WorkerPool, mut take: impl FnMut(u32)) {
        let mut missed = 0;
        loop {
            if let Some(op) = pool.next_ready() {
                missed = 0;
                take(op);
            } else if !pool.idle(&mut missed) {
                break;
            }
        }
    }

    /// Blocks on the futex word `count` while `blocked()` holds (the
    /// models bump `count` and wake it whenever an operation is taken).
    fn wait_while(count: &AtomicU32, blocked: impl Fn() -> bool) {
        let mut seen = count.load(Ordering::SeqCst);
        while blocked() {
            futex_wait(count, seen);
            seen = count.load(Ordering::SeqCst);
        }
    }

    /// `workers` workers look for work (spinning, `max_spinners` at most) and park;
    /// the publisher puts `ops` operations on the ring (the first marked
    /// for a waiter, as `schedule` does after a wait) and then blocks
    /// until all were taken. Each operation must be taken exactly once,
    /// and no wake-up may be lost: a worker sleeping through a publish
    /// would leave every thread blocked, which loom reports as a deadlock.
    fn hand_off(workers: usize, ops: u32) {
        loom::model(move || {
            let pool = Arc::new(WorkerPool::new(workers, 0, Duration::ZERO));
            let taken: Arc<Vec<AtomicU32>> = Arc::new((0..=ops).map(|_| AtomicU32::new(0)).collect());
            let threads: Vec<_> = (0..workers)
                .map(|_| {
                    let (pool, taken) = (pool.clone(), taken.clone());
                    loom::thread::spawn(move || {
                        work(&pool, |op| {
                            taken[op as usize].fetch_add(1, Ordering::SeqCst);
                            taken[ops as usize].fetch_add(1, Ordering::SeqCst);
                            futex_wake_all(&taken[ops as usize]);
                        })
                    })
                })
                .collect();
            // The first one marked as its publisher's to run (a spinner
            // leaves it alone for a while), the others not.
            for op in 0..ops {
                if op == 0 {
                    crate::exec::park::note_waited();
                }
                push_and_wake(&pool.ring, op, |for_waiter| pool.counters.wake_one(&pool.sleep, for_waiter))
                    .expect("the ring has room");
            }
            let total = &taken[ops as usize];
            wait_while(total, || total.load(Ordering::SeqCst) < ops);
            pool.stop.store(true, Ordering::SeqCst);
            pool.sleep.notify_all();
            threads.into_iter().for_each(|t| t.join().unwrap());
            for op in 0..ops {
                assert_eq!(taken[op as usize].load(Ordering::SeqCst), 1, "op {op} taken once");
            }
        });
    }

    /// One worker, spinning and then parking, against two publishes (the
    /// publisher skips the wake-up while the worker spins).
    #[test]
    fn one_worker_never_sleeps_through_a_publish() {
        hand_off(1, 2);
    }

    /// A spinner napping (`Sleep::nap`, still counted as spinning) against
    /// a publish no waiter will run: either the publisher sees the nap
    /// announced and wakes it, or the napper sees the work before it
    /// sleeps, and it then takes it. Under loom the nap's timeout never
    /// fires, so a lost wake-up is a deadlock.
    #[test]
    fn a_napping_spinner_never_sleeps_through_an_unmarked_publish() {
        loom::model(|| {
            let pool = Arc::new(WorkerPool::new(1, 0, Duration::ZERO));
            assert!(pool.sleep.try_start_spinning());
            let napper = {
                let pool = pool.clone();
                loom::thread::spawn(move || {
                    pool.sleep.nap(Duration::ZERO, || pool.has_work_to_take());
                    pool.sleep.stop_spinning();
                    assert_eq!(pool.next_ready(), Some(7), "the nap ended without the work");
                })
            };
            push_and_wake(&pool.ring, 7, |for_waiter| pool.counters.wake_one(&pool.sleep, for_waiter))
                .expect("the ring has room");
            napper.join().unwrap();
        });
    }

    /// A napping spinner (its spin left work to a waiter; still counted
    /// as spinning) and a worker that looks, spins and parks, against two
    /// unmarked publishes; the napper's first operation waits until the
    /// second is taken. Both publishes rely on the napper (the first
    /// wakes it), so it must wake the other worker when it wakes to two
    /// operations (`WorkerPool::nap_then_hand_on`): without that, this
    /// model deadlocks.
    #[test]
    #[ignore = "heavy: about 10 seconds at LOOM_MAX_PREEMPTIONS=2, over 6 minutes at 3; loom_tests/run.sh runs it"]
    fn a_napper_woken_to_two_operations_wakes_a_sleeper() {
        loom::model(|| {
            let pool = Arc::new(WorkerPool::new(2, 0, Duration::ZERO));
            let taken: Arc<Vec<AtomicU32>> = Arc::new((0..3).map(|_| AtomicU32::new(0)).collect());
            assert!(pool.sleep.try_start_spinning());
            let take = |taken: &[AtomicU32], op: u32| {
                taken[op as usize].fetch_add(1, Ordering::SeqCst);
                taken[2].fetch_add(1, Ordering::SeqCst);
                futex_wake_all(&taken[2]);
                if op == 0 {
                    // The body of operation 0 waits until 1 is taken.
                    wait_while(&taken[2], || taken[1].load(Ordering::SeqCst) == 0);
                }
            };
            // The other worker first, parked before the napper starts and
            // the operations are published: the state in which both
            // publishes rely on the napper.
            let other = {
                let (pool, taken) = (pool.clone(), taken.clone());
                loom::thread::spawn(move || work(&pool, |op| take(&taken, op)))
            };
            while pool.sleep.sleepers() == 0 {
                loom::thread::yield_now();
            }
            let napper = {
                let (pool, taken) = (pool.clone(), taken.clone());
                loom::thread::spawn(move || {
                    if pool.nap_then_hand_on() {
                        work(&pool, |op| take(&taken, op));
                    }
                })
            };
            for op in 0..2 {
                push_and_wake(&pool.ring, op, |for_waiter| pool.counters.wake_one(&pool.sleep, for_waiter))
                    .expect("the ring has room");
            }
            wait_while(&taken[2], || taken[2].load(Ordering::SeqCst) < 2);
            pool.stop.store(true, Ordering::SeqCst);
            pool.sleep.notify_all();
            napper.join().unwrap();
            other.join().unwrap();
            assert_eq!(taken[0].load(Ordering::SeqCst) + taken[1].load(Ordering::SeqCst), 2);
        });
    }

    /// Two workers (both may spin, then park) against one publish.
    #[test]
    #[ignore = "heavy: about 2 minutes at LOOM_MAX_PREEMPTIONS=2; loom_tests/run.sh runs it"]
    fn two_workers_never_sleep_through_a_publish() {
        hand_off(2, 1);
    }
}
