//! Executors: what runs an operation once all its variables have granted it.
//!
//! The core (`core.rs`) decides *when* an operation is ready; an executor
//! decides *where* it runs. Engines are a core plus an executor, so a new
//! executor (the per-device one, a GPU ring) plugs in behind the same API:
//!
//! - [`naive`]: runs every ready operation at once on the thread that made
//!   it ready (the reference the others are checked against);
//! - [`pooled`]: a shared worker pool with one ready queue, plus a separate
//!   queue and pool for copy operations;
//! - [`per_device`]: pinned per-CPU workers with work-stealing deques,
//!   per-NUMA-node injectors and a priority pool (the production engine);
//! - [`shuffle`]: no workers; threads that wait run ready operations in a
//!   seeded random order (a debugging mode that replaces any engine's
//!   executor when a shuffle seed is set).

pub(crate) mod deque;
#[cfg(feature = "cuda")]
pub(crate) mod gpu;
pub(crate) mod inline;
pub(crate) mod naive;
pub(crate) mod park;
pub(crate) mod per_device;
pub(crate) mod pooled;
pub(crate) mod priority;
pub(crate) mod ready_ring;
pub(crate) mod shuffle;

use crate::base::context::FnProperty;
use crate::graph::opr::OprBlock;
use crate::mem::pool::Pool;
use crate::observe::profiler::Profiler;
use crate::observe::stats::EngineStats;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Held by every worker thread: user panics are caught around each body,
/// so one unwinding through a worker is an engine bug. Abort loudly rather
/// than leave every waiter hanging.
pub(crate) struct AbortOnUnwind;

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("depengine: internal error in a worker thread; aborting");
            std::process::abort();
        }
    }
}

/// The join handles of an executor's worker threads. Touched at start and
/// stop only: the mutex is never on the hot path.
#[derive(Default)]
pub(crate) struct WorkerThreads(Mutex<Vec<JoinHandle<()>>>);

impl WorkerThreads {
    /// Starts a worker thread named `name` running `work`; the OS's error
    /// if it cannot (the caller then stops the executor).
    pub(crate) fn spawn(&self, name: String, work: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
        let handle = std::thread::Builder::new().name(name).spawn(work)?;
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(handle);
        Ok(())
    }

    /// Joins every worker started so far (they must have been told to stop).
    pub(crate) fn join_all(&self) {
        let threads = std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }
}

/// What an executor is, as the rest of the engine needs to know it: told
/// once, when the engine is built ([`Executor::traits`]), and kept by the
/// core as plain data. A wrapper (the GPU executor) takes its inner
/// executor's traits and changes only what it adds, so no answer can fall
/// back to a default that the inner executor does not have.
#[derive(Clone)]
pub(crate) struct ExecutorTraits {
    /// Worker threads serving CPU operations.
    pub(crate) cpu_workers: usize,
    /// All the executor's worker threads; they run operations as
    /// `Runner::run(op, Some(id))` with `id` below this.
    pub(crate) worker_threads: usize,
    /// Whether a waiting thread may sleep when `help` finds nothing. An
    /// executor whose ready work only waiting threads run must say no:
    /// work made ready by a completion signalled on another thread wakes
    /// nobody, so its waiters poll (yielding) instead.
    pub(crate) waiters_can_sleep: bool,
    /// Whether an `Async` or `DeleteVar` operation found ready when it is
    /// dispatched runs at once on the dispatching thread (the kAsync
    /// inline path) instead of being scheduled.
    pub(crate) runs_async_inline: bool,
    /// Whether pushers may run operations on their own thread: a push
    /// with no variables at the pending cap (`Core::unqueued_ticket`), and
    /// the runs of a stint (`pusher_runs.rs`).
    pub(crate) runs_on_pushers: bool,
    /// Whether a pusher held at the pending cap runs ready work itself.
    /// Executors whose workers take one core each say no: the pusher is
    /// then a thread beyond the cores, and running bodies it only takes
    /// turns with a worker whose operation it preempts; waiting for the
    /// workers to bring the count down is faster (`throttle.rs`).
    /// Executors whose ready work only a waiting thread runs must say yes.
    pub(crate) throttled_pushers_help: bool,
    /// What a throttled pusher asks of the workers (`None`: no workers).
    pub(crate) workers: Option<Arc<dyn WorkerState>>,
}

/// The workers' state that a throttled pusher consults (`throttle.rs`).
/// Neither method has a default: an executor with workers answers both.
pub(crate) trait WorkerState: Send + Sync {
    /// Whether workers that the OS may move between CPUs are awake
    /// (running or spinning) in at least the number of CPUs this process
    /// may use. A thread whose yield comes back at once has a CPU that no
    /// one else wants, so two of those workers then share another CPU,
    /// and a CPU the calling thread leaves idle would get one of them (a
    /// throttled pusher sleeps rather than yields only then). Pinned
    /// workers cannot move: no.
    fn movable_workers_fill_cpus(&self) -> bool;

    /// A pusher is held at the pending cap (called on its thread, once per
    /// hold, before it waits): per_device looks where it runs now
    /// (`Shared::follow_throttled_pusher`).
    fn note_throttled_pusher(&self);
}

impl ExecutorTraits {
    /// The traits of an executor without worker threads whose ready work
    /// the threads that wait run (`naive`, random order without workers).
    pub(crate) fn run_by_waiters() -> Self {
        ExecutorTraits {
            cpu_workers: 0,
            worker_threads: 0,
            waiters_can_sleep: true,
            runs_async_inline: false,
            runs_on_pushers: false,
            throttled_pushers_help: true,
            workers: None,
        }
    }

    /// Whether workers that may move between CPUs fill them
    /// ([`WorkerState::movable_workers_fill_cpus`]; no workers: no).
    pub(crate) fn movable_workers_fill_cpus(&self) -> bool {
        self.workers.as_ref().is_some_and(|w| w.movable_workers_fill_cpus())
    }

    /// Tells the workers that a pusher is held at the cap
    /// ([`WorkerState::note_throttled_pusher`]).
    pub(crate) fn note_throttled_pusher(&self) {
        if let Some(w) = &self.workers {
            w.note_throttled_pusher();
        }
    }
}

/// What an executor needs of the engine it runs operations for: the core,
/// which is above this layer, implements it (`core/mod.rs`). Executors are
/// generic over it, so each call is a direct, inlinable one.
pub(crate) trait Runner: Send + Sync + 'static {
    /// Runs ready operation `op` on the calling thread, which is worker
    /// `worker` of the executor (or none); exactly once per scheduling.
    fn run(&self, op: u32, worker: Option<usize>);

    /// The calling thread starts serving as a worker: it batches what it
    /// gives back ([`flush_worker_batch`](Self::flush_worker_batch) and
    /// [`leave_worker`](Self::leave_worker) publish it).
    fn enter_worker(&self);

    /// Publishes the calling worker's batch (before it idles).
    fn flush_worker_batch(&self);

    /// Publishes the batch and stops batching on the calling thread.
    fn leave_worker(&self);

    /// Whether the calling thread is running a body of this engine.
    fn in_own_body(&self) -> bool;

    /// The operation blocks (a ready block's options are read-only to
    /// whoever schedules it).
    fn oprs(&self) -> &Pool<OprBlock>;

    /// The profiler, whose lanes workers bind to.
    fn profiler(&self) -> &Profiler;

    /// The variables' slots (their GPU fences).
    #[cfg(feature = "cuda")]
    fn vars(&self) -> &crate::graph::var::Variables;

    /// Set when the first GPU operation is scheduled.
    #[cfg(feature = "cuda")]
    fn gpu_used(&self) -> &crate::sync::AtomicBool;
}

/// Where ready operations run. Every method is required: what the rest of
/// the engine must know of an executor is data ([`ExecutorTraits`]), not
/// questions with default answers.
pub(crate) trait Executor<R: Runner>: Send + Sync {
    /// Starts the executor's threads (each holds the core). On an error
    /// (a thread the OS would not start) the threads started so far keep
    /// running: the caller stops the executor with [`stop`](Self::stop).
    fn start(&self, core: &Arc<R>) -> std::io::Result<()>;

    /// `op` is ready; the executor must eventually call `core.run(op, …)`
    /// exactly once.
    fn schedule(&self, core: &R, op: u32, prop: FnProperty);

    /// Runs one ready operation on the calling (waiting) thread if the
    /// executor has one it may run here; returns whether it ran one.
    fn help(&self, core: &R) -> bool;

    /// Stops and joins the executor's threads. Called once, with no work left.
    fn stop(&self);

    /// What the executor is (see [`ExecutorTraits`]); asked once.
    fn traits(&self) -> ExecutorTraits;

    /// The name of worker `id` (below `worker_threads`), for profiles and
    /// hang reports.
    fn worker_name(&self, id: usize) -> String;

    /// Adds the executor's own counters (parks, wake-ups, queue depth).
    fn add_stats(&self, stats: &mut EngineStats);
}
