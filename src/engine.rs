//! The public handle: [`Engine`].

use crate::base::context::{Context, FnProperty, PushOpts, RunContext};
use crate::base::error::{EngineError, OpOutput};
use crate::base::topology::Topology;
use crate::config::{EngineBuilder, EngineKind};
use crate::core::direct_run::DirectGrant;
use crate::core::route::Route;
use crate::core::Core;
use crate::exec::naive::NaiveExecutor;
use crate::exec::per_device::PerDeviceExecutor;
use crate::exec::pooled::PooledExecutor;
use crate::exec::shuffle::ShuffleExecutor;
use crate::exec::Executor;
use crate::graph::operator::{Operator, OperatorBody, OperatorInner};
use crate::graph::opr::{Body, Dep, DepList, OprKind, READ, WRITE};
use crate::graph::var::Var;
use crate::mem::completion::Completion;
use crate::mem::inline_fn::InlineFn;
use crate::observe::diagnose::HangReport;
use crate::observe::profile::Profile;
use crate::observe::stats::{EngineStats, PoolStats};
use crate::sync::Ordering;
use std::sync::{Arc, OnceLock};

/// A dependency engine (see the crate docs for the model).
///
/// Dropping it finishes every pushed operation (or cancels the ones not yet
/// started, see [`EngineBuilder::cancel_on_drop`]), joins its threads and
/// frees everything.
///
/// Dropped inside one of its own bodies (a body that held the last handle),
/// it cannot wait there for that body: the shutdown is handed to a
/// background thread (`depengine-reaper`) that finishes it once the pending
/// work is done, joins the workers and frees the engine. Engine code that
/// runs on any thread (a worker, a thread signalling a [`Completion`])
/// keeps the engine's core alive for as long as it runs.
///
/// Drop waits for every pending operation, so an asynchronous operation
/// whose [`Completion`] is never signalled nor dropped (kept, or
/// `mem::forget`) makes it wait forever; [`Engine::shutdown_timeout`]
/// bounds that wait and says what is still pending.
pub struct Engine {
    core: Arc<Core>,
    kind: EngineKind,
    cancel_on_drop: bool,
    shuffle_seed: Option<u64>,
    /// Where to write the profile when dropped (`EngineBuilder::profile`),
    /// until it is written ([`Engine::write_profile`]). Touched at build,
    /// that call and drop only: the mutex is never on the hot path.
    profile_path: std::sync::Mutex<Option<std::path::PathBuf>>,
    /// The hang-diagnosis watchdog thread, when on.
    watchdog: Option<std::thread::JoinHandle<()>>,
    /// per_device: the topology and the CPU each worker is pinned to.
    placement: Option<(Topology, Vec<Option<usize>>)>,
}

impl Engine {
    /// A builder with the defaults.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::new()
    }

    /// An engine configured from the `DEPENGINE_*` environment variables.
    pub fn from_env() -> Result<Engine, EngineError> {
        EngineBuilder::from_env()?.build()
    }

    /// The process-wide engine, created on first use from the environment.
    ///
    /// # Panics
    /// If a `DEPENGINE_*` variable is invalid or unknown (the message names
    /// it), or the engine's threads cannot be started.
    pub fn global() -> &'static Engine {
        static GLOBAL: OnceLock<Engine> = OnceLock::new();
        GLOBAL.get_or_init(|| Engine::from_env().unwrap_or_else(|e| panic!("depengine: {e}")))
    }

    pub(crate) fn start(b: EngineBuilder) -> Result<Engine, EngineError> {
        let mut placement = None;
        let executor: Box<dyn Executor<Core>> = match (b.shuffle_seed, b.kind) {
            (Some(seed), _) => Box::new(ShuffleExecutor::new(seed, b.shuffle_workers)),
            (None, EngineKind::Naive) => Box::new(NaiveExecutor),
            (None, EngineKind::Pooled) => {
                Box::new(PooledExecutor::new(b.resolved_cpu_workers(), b.copy_workers, b.spin))
            }
            (None, EngineKind::PerDevice) => {
                let topology = Topology::detect();
                let workers = b.cpu_workers.unwrap_or(topology.cpus.len());
                let executor = PerDeviceExecutor::new(topology.clone(), workers, b.priority_workers, b.pin, b.spin);
                placement = Some((topology, executor.pinned()));
                Box::new(executor)
            }
        };
        #[cfg(feature = "cuda")]
        let (executor, gpu) = {
            let sizes = crate::exec::gpu::RingSizes {
                compute: b.gpu_compute_workers,
                priority: b.gpu_priority_workers,
                copy: b.gpu_copy_workers,
            };
            let rings = Arc::new(crate::exec::gpu::GpuRings::new(sizes, b.spin, executor.traits().worker_threads));
            let executor: Box<dyn Executor<Core>> = if rings.devices() > 0 {
                Box::new(crate::exec::gpu::GpuExecutor::new(executor, rings.clone()))
            } else {
                executor
            };
            (executor, rings)
        };
        let core = Arc::new(Core::new(
            executor,
            b.settings(),
            #[cfg(feature = "cuda")]
            gpu,
        ));
        if let Some((topology, _)) = &placement {
            core.set_cpu_nodes(topology.nodes);
        }
        if b.profile.is_some() {
            core.observe.profiler.start();
        }
        if let Err(e) = core.executor.start(&core) {
            // The threads that did start hold the core; stopping joins them.
            core.executor.stop();
            return Err(EngineError::Spawn(e.to_string()));
        }
        let watchdog = match core.observe.diagnosis.as_ref().map(|diag| {
            let (core, period) = (core.clone(), diag.period());
            std::thread::Builder::new().name("depengine-watchdog".into()).spawn(move || loop {
                std::thread::park_timeout(period);
                if core.observe.diagnosis.as_ref().is_none_or(|d| d.stop.load(Ordering::Acquire)) {
                    break;
                }
                core.watchdog_pass();
            })
        }) {
            None => None,
            Some(Ok(handle)) => Some(handle),
            Some(Err(e)) => {
                core.executor.stop();
                return Err(EngineError::Spawn(e.to_string()));
            }
        };
        Ok(Engine {
            core,
            kind: b.kind,
            cancel_on_drop: b.cancel_on_drop,
            shuffle_seed: b.shuffle_seed,
            profile_path: std::sync::Mutex::new(b.profile),
            watchdog,
            placement,
        })
    }

    /// The seed of the random-order mode, if the engine runs in it
    /// ([`EngineBuilder::shuffle_seed`](crate::EngineBuilder::shuffle_seed)).
    pub fn shuffle_seed(&self) -> Option<u64> {
        self.shuffle_seed
    }

    /// Which engine this is.
    pub fn kind(&self) -> EngineKind {
        self.kind
    }

    /// The topology the per_device engine laid its workers out on (`None`
    /// for the other engines). Its `Display` is the engine's start-up
    /// line: how many CPUs and nodes, and whether hwloc or `core_affinity`
    /// found them.
    pub fn topology(&self) -> Option<&Topology> {
        self.placement.as_ref().map(|(t, _)| t)
    }

    /// The CPU each per_device worker is pinned to, by worker id (`None`
    /// entries: pinning is off; empty for the other engines).
    pub fn pinned_cpus(&self) -> &[Option<usize>] {
        self.placement.as_ref().map_or(&[], |(_, p)| p)
    }

    /// The GPUs this engine has rings for (feature `cuda`): one line per
    /// device with its streams, or why there are none.
    #[cfg(feature = "cuda")]
    pub fn gpu_info(&self) -> String {
        self.core.gpu.describe()
    }

    /// GPUs this engine has rings for (0 without the `cuda` feature, a
    /// CUDA driver or a device); `Context::Gpu(id)` is valid below it.
    pub fn gpus(&self) -> usize {
        #[cfg(feature = "cuda")]
        return self.core.gpu.devices();
        #[cfg(not(feature = "cuda"))]
        0
    }

    /// Worker threads serving CPU operations (0 for `naive`).
    pub fn cpu_workers(&self) -> usize {
        self.core.traits.cpu_workers
    }

    // ----- variables -------------------------------------------------------

    /// Creates a variable (version 0).
    pub fn new_var(&self) -> Var {
        self.core.vars.new_var(&self.core.blocks)
    }

    /// Deletes `var` once every operation already pushed on it has finished,
    /// then calls `on_deleted` (on an engine thread). Any use of `var` after
    /// this returns is an error, forever: a variable's slot is reused with
    /// a new generation, and retired instead once its generations (2^32)
    /// are spent, so a stale handle is never taken for a later variable.
    pub fn delete_var(&self, var: Var, on_deleted: impl FnOnce() + Send + 'static) -> Result<(), EngineError> {
        delete_var_on(&self.core, var, on_deleted)
    }

    /// The engine's core (typed data keeps it).
    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// Completed writes of `var` so far (reads leave it unchanged).
    pub fn var_version(&self, var: Var) -> Result<u64, EngineError> {
        Ok(self.core.vars.slot_of(var)?.version())
    }

    // ----- pushes ----------------------------------------------------------

    /// Pushes `body`, which reads `reads` and writes `writes`, with default
    /// options. It returns without running the body, unless the pending cap
    /// holds the pushing thread (at the cap a body with no variables may
    /// run inside the push, [`EngineBuilder::max_pending`](crate::EngineBuilder::max_pending)),
    /// or running on the pusher was asked for
    /// ([`EngineBuilder::run_on_pusher`](crate::EngineBuilder::run_on_pusher),
    /// whose hazard that method states).
    /// The body may return `()` or a `Result`.
    ///
    /// ```
    /// let engine = depengine::Engine::builder().build().unwrap();
    /// let (a, b) = (engine.new_var(), engine.new_var());
    /// engine.push_sync(|_| println!("writes a"), &[], &[a]).unwrap();
    /// engine.push_sync(|_| println!("reads a, writes b"), &[a], &[b]).unwrap();
    /// engine.wait_all().unwrap();
    /// ```
    pub fn push_sync<F, R>(&self, body: F, reads: &[Var], writes: &[Var]) -> Result<(), EngineError>
    where
        F: FnOnce(&RunContext) -> R + Send + 'static,
        R: OpOutput,
    {
        self.push_sync_with(body, reads, writes, PushOpts::new())
    }

    /// [`push_sync`](Self::push_sync) with explicit options. A body whose
    /// captures exceed [`INLINE_FN_BYTES`](crate::INLINE_FN_BYTES) is boxed
    /// (one allocation per push); [`push_sync_inline`](Self::push_sync_inline)
    /// refuses such a body at compile time instead.
    pub fn push_sync_with<F, R>(
        &self,
        body: F,
        reads: &[Var],
        writes: &[Var],
        opts: PushOpts,
    ) -> Result<(), EngineError>
    where
        F: FnOnce(&RunContext) -> R + Send + 'static,
        R: OpOutput,
    {
        // Before any route: a push run inside itself or bulked checks it too.
        if let Err(e) = self.core.check_ctx(opts.ctx) {
            self.core.drop_user_value(body);
            return Err(e);
        }
        // Filled only by a direct route: a push that runs no stint does not
        // set the grant up.
        let mut grant: Option<DirectGrant<'_>> = None;
        let route = match self.core.route(reads, writes, &opts, &mut grant) {
            Ok(route) => route,
            Err(e) => {
                self.core.drop_user_value(body);
                return Err(e);
            }
        };
        let body = match route {
            Route::Unqueued(at) => {
                self.core.run_unqueued(at, &opts, |ctx| body(ctx).into_outcome());
                return Ok(());
            }
            Route::Direct => {
                let grant = grant.as_ref().expect("a direct route fills its grant");
                self.core.run_direct(grant, &opts, |ctx| body(ctx).into_outcome());
                return Ok(());
            }
            Route::Bulk => match crate::core::bulk::add(&self.core, InlineFn::new_sync(body), reads, writes, &opts)? {
                Some(unbulked) => unbulked,
                None => return Ok(()),
            },
            Route::Queue => InlineFn::new_sync(body),
        };
        self.core.queue(Body::OneShot(body), false, reads, writes, &opts, OprKind::User)
    }

    /// [`push_sync_with`](Self::push_sync_with) for a body that must not
    /// allocate: its captures must fit the operation block's inline store
    /// ([`INLINE_FN_BYTES`](crate::INLINE_FN_BYTES), 48 bytes, aligned to at
    /// most 16), or the call does not compile. `push_sync_with` takes any
    /// body, and boxes one that does not fit (one allocation per push).
    ///
    /// ```
    /// let engine = depengine::Engine::builder().build().unwrap();
    /// let v = engine.new_var();
    /// let small = [0u64; 4];
    /// engine.push_sync_inline(move |_| assert_eq!(small.len(), 4), &[], &[v], Default::default()).unwrap();
    /// engine.wait_var(v).unwrap();
    /// ```
    ///
    /// A body that captures more does not compile:
    ///
    /// ```compile_fail
    /// let engine = depengine::Engine::builder().build().unwrap();
    /// let v = engine.new_var();
    /// let big = [0u64; 16];
    /// engine.push_sync_inline(move |_| assert_eq!(big.len(), 16), &[], &[v], Default::default()).unwrap();
    /// ```
    pub fn push_sync_inline<F, R>(
        &self,
        body: F,
        reads: &[Var],
        writes: &[Var],
        opts: PushOpts,
    ) -> Result<(), EngineError>
    where
        F: FnOnce(&RunContext) -> R + Send + 'static,
        R: OpOutput,
    {
        const {
            assert!(
                crate::mem::inline_fn::fits_inline::<F>(),
                "depengine: this body's captures do not fit INLINE_FN_BYTES (48 bytes, alignment 16); push_sync_with would box it"
            )
        };
        self.push_sync_with(body, reads, writes, opts)
    }

    /// Sets this thread's bulk size for this engine (MXNet's
    /// `set_bulk_size`; other engines and other threads keep their own):
    /// from now on up to `size` consecutive synchronous `Normal` CPU pushes
    /// from this thread to this engine are fused into one operation (see [`flush_bulk`](Self::flush_bulk)
    /// for when a bulk is pushed). `0` or `1` turns bulking off. Returns the
    /// previous size.
    ///
    /// A fused operation fails, or is skipped, as a whole; each member's
    /// closure still runs once, in push order.
    ///
    /// ```
    /// let engine = depengine::Engine::builder().build().unwrap();
    /// let v = engine.new_var();
    /// engine.set_bulk_size(16).unwrap();
    /// for _ in 0..100 {
    ///     engine.push_sync(|_| {}, &[], &[v]).unwrap();
    /// }
    /// engine.wait_var(v).unwrap(); // a wait flushes the open bulk
    /// engine.set_bulk_size(0).unwrap();
    /// assert_eq!(engine.var_version(v).unwrap(), 7); // 6 full bulks + 1 partial
    /// ```
    pub fn set_bulk_size(&self, size: usize) -> Result<usize, EngineError> {
        crate::core::bulk::set_size(&self.core, size)
    }

    /// Pushes this thread's open bulk now. A bulk is also pushed when it
    /// reaches the bulk size, on any wait or other push to this engine from
    /// this thread, on a context change, and when the size changes.
    pub fn flush_bulk(&self) -> Result<(), EngineError> {
        crate::core::bulk::flush_for(&self.core)
    }

    /// Pushes an asynchronous `body`: it receives a [`Completion`] and the
    /// operation finishes when that is signalled, from any thread.
    pub fn push_async<F>(&self, body: F, reads: &[Var], writes: &[Var]) -> Result<(), EngineError>
    where
        F: FnOnce(&RunContext, Completion) + Send + 'static,
    {
        self.push_async_with(body, reads, writes, PushOpts::new())
    }

    /// [`push_async`](Self::push_async) with explicit options.
    pub fn push_async_with<F>(&self, body: F, reads: &[Var], writes: &[Var], opts: PushOpts) -> Result<(), EngineError>
    where
        F: FnOnce(&RunContext, Completion) + Send + 'static,
    {
        push_async_on(&self.core, body, reads, writes, opts)
    }

    // ----- prebuilt operators ------------------------------------------------

    fn new_operator_inner(
        &self,
        body: OperatorBody,
        reads: &[Var],
        writes: &[Var],
        prop: FnProperty,
        name: &'static str,
    ) -> Result<Operator, EngineError> {
        let mut deps = DepList::default();
        for (vars, mode) in [(writes, WRITE), (reads, READ)] {
            for &v in vars {
                if let Err(e) = self.core.vars.slot_of(v) {
                    // Refused: the user's closure is dropped unrun (`unwind.rs`).
                    self.core.drop_user_value(body);
                    return Err(e);
                }
                deps.add(Dep::new(v.slot, v.gen, mode));
            }
        }
        Ok(Operator { inner: Arc::new(OperatorInner { engine: self.core.id, body, deps, prop, name }) })
    }

    /// Builds a synchronous operator to push many times with [`push_op`](Self::push_op).
    ///
    /// ```
    /// let engine = depengine::Engine::builder().build().unwrap();
    /// let v = engine.new_var();
    /// let op = engine
    ///     .new_operator(|_| {}, &[], &[v], depengine::FnProperty::Normal, "bump")
    ///     .unwrap();
    /// for _ in 0..3 {
    ///     engine.push_op(&op, depengine::Context::cpu(), 0).unwrap();
    /// }
    /// engine.delete_operator(op);
    /// engine.wait_all().unwrap();
    /// assert_eq!(engine.var_version(v).unwrap(), 3);
    /// ```
    pub fn new_operator<F, R>(
        &self,
        body: F,
        reads: &[Var],
        writes: &[Var],
        prop: FnProperty,
        name: &'static str,
    ) -> Result<Operator, EngineError>
    where
        F: Fn(&RunContext) -> R + Send + Sync + 'static,
        R: OpOutput,
    {
        let body = OperatorBody::Sync(Box::new(move |ctx: &RunContext| body(ctx).into_outcome()));
        self.new_operator_inner(body, reads, writes, prop, name)
    }

    /// Builds an asynchronous operator (its body gets a [`Completion`]).
    pub fn new_async_operator<F>(
        &self,
        body: F,
        reads: &[Var],
        writes: &[Var],
        prop: FnProperty,
        name: &'static str,
    ) -> Result<Operator, EngineError>
    where
        F: Fn(&RunContext, Completion) + Send + Sync + 'static,
    {
        self.new_operator_inner(OperatorBody::Async(Box::new(body)), reads, writes, prop, name)
    }

    /// Pushes a prebuilt operator; neither its closure nor its variable list
    /// is copied.
    pub fn push_op(&self, op: &Operator, ctx: Context, priority: i32) -> Result<(), EngineError> {
        if op.inner.engine != self.core.id {
            return Err(EngineError::ForeignVar);
        }
        let opts = PushOpts { ctx, prop: op.inner.prop, priority, name: op.inner.name, no_skip: false };
        let is_async = matches!(op.inner.body, OperatorBody::Async(_));
        self.core.push(Body::Prebuilt(op.inner.clone()), is_async, &[], &[], &opts, OprKind::User)
    }

    /// Deletes an operator; deferred until the pushes already made have run.
    pub fn delete_operator(&self, op: Operator) {
        // The last reference drops the user's closure.
        self.core.drop_user_value(op);
    }

    // ----- waits -------------------------------------------------------------

    /// Blocks until every write pushed so far on `var` has finished (MXNet's
    /// `WaitForVar`); returns the failure `var`'s value then holds, if any.
    pub fn wait_var(&self, var: Var) -> Result<(), EngineError> {
        self.wait_on(var, false)
    }

    /// Like [`wait_var`](Self::wait_var), and also waits for every read
    /// pushed so far: afterwards nothing uses `var`.
    pub fn wait_to_write(&self, var: Var) -> Result<(), EngineError> {
        self.wait_on(var, true)
    }

    fn wait_on(&self, var: Var, write: bool) -> Result<(), EngineError> {
        let slot = self.core.vars.slot_of(var)?;
        if self.core.would_deadlock(Some(var)) {
            return Err(EngineError::WaitWouldDeadlock);
        }
        let waited = self.core.wait_var(var, slot, write);
        #[cfg(feature = "cuda")]
        self.core.gpu.wait_var(&*self.core, var.slot, write)?;
        waited
    }

    /// Blocks until the engine is idle: everything pushed so far, and
    /// whatever other threads push meanwhile, has finished. Returns the
    /// first failure recorded since the previous `wait_all`.
    ///
    /// A thread that keeps pushing keeps this waiting for as long as it
    /// pushes. To wait for particular operations while other threads push,
    /// wait on their variables ([`wait_var`](Self::wait_var),
    /// [`wait_to_write`](Self::wait_to_write)).
    pub fn wait_all(&self) -> Result<(), EngineError> {
        if self.core.would_deadlock(None) {
            return Err(EngineError::WaitWouldDeadlock);
        }
        self.flush_bulk()?;
        self.core.wait_all();
        #[cfg(feature = "cuda")]
        self.core.gpu.synchronize(&*self.core)?;
        self.core.life.first_error.take().map_or(Ok(()), |e| Err(EngineError::OpFailed(e)))
    }

    // ----- lifecycle -----------------------------------------------------------

    /// Operations pushed and not yet finished.
    pub fn pending(&self) -> u64 {
        self.core.pending()
    }

    /// Pool occupancy (exact when idle): live blocks are the leak check.
    pub fn pool_stats(&self) -> PoolStats {
        self.core.return_spare_blocks();
        PoolStats {
            live_ops: self.core.op_caches.live(&self.core.oprs),
            live_var_blocks: self.core.blocks.live(),
            live_vars: self.core.vars.live(),
            retired_var_slots: self.core.vars.retired() as usize,
            op_blocks_created: self.core.oprs.capacity_used(),
        }
    }

    /// The engine's counters (see [`EngineStats`]); cheap enough to call
    /// often, exact when the engine is idle.
    pub fn stats(&self) -> EngineStats {
        let mut s = EngineStats::default();
        self.core.observe.stats.read_into(&mut s);
        self.core.executor.add_stats(&mut s);
        // Tickets count every dispatched operation, wait markers included
        // (a wait that returned at once dispatched none), and every
        // operation run inside its push (never pending).
        let tickets = self.core.dispatcher.tickets();
        let markers = s.waits - s.waits_at_once;
        s.pushed = tickets.saturating_sub(markers);
        s.finished = (tickets - self.core.pending().min(tickets)).saturating_sub(markers);
        s.ran_elsewhere = s.finished.saturating_sub(s.ran_on_workers);
        s.pools = self.pool_stats();
        s.membarrier = crate::sync::barrier::membarrier_in_use();
        s
    }

    // ----- profiling -----------------------------------------------------------

    /// Starts recording every operation pushed from now on;
    /// [`stop_profiling`](Self::stop_profiling) returns what was recorded.
    /// The first start allocates the profiler's rings; recording itself
    /// allocates nothing and takes no lock. Starting again discards the
    /// current session.
    pub fn start_profiling(&self) {
        self.core.observe.profiler.start();
    }

    /// Whether a profiling session is open.
    pub fn is_profiling(&self) -> bool {
        self.core.observe.profiler.session() != 0
    }

    /// Ends the session and returns the operations it saw finish (empty if
    /// none was open). Operations pushed during the session that finish
    /// after this call are not recorded: call [`wait_all`](Self::wait_all)
    /// first to include them.
    pub fn stop_profiling(&self) -> Profile {
        self.core.observe.profiler.stop(|lane| self.core.lane_name(lane))
    }

    /// Ends the profiling session that [`EngineBuilder::profile`](crate::EngineBuilder::profile)
    /// (or `DEPENGINE_PROFILE`) started and writes its Chrome trace and
    /// summary now, instead of when the engine is dropped; returns where,
    /// or `None` when no such session is open (never started, or written
    /// already). Operations still pending are left out, as at drop after
    /// the wait. [`Engine::global`] is never dropped: a program that
    /// profiles it with `DEPENGINE_PROFILE` calls this before it exits.
    ///
    /// ```
    /// let path = std::env::temp_dir().join("depengine-doc-profile.json");
    /// let engine = depengine::Engine::builder().profile(&path).build().unwrap();
    /// let v = engine.new_var();
    /// engine.push_sync(|_| {}, &[], &[v]).unwrap();
    /// engine.wait_all().unwrap();
    /// assert_eq!(engine.write_profile().as_deref(), Some(path.as_path()));
    /// assert_eq!(engine.write_profile(), None, "written once");
    /// ```
    pub fn write_profile(&self) -> Option<std::path::PathBuf> {
        let path = self.take_profile_path()?;
        self.write_profile_to(&path);
        Some(path)
    }

    fn take_profile_path(&self) -> Option<std::path::PathBuf> {
        self.profile_path.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Writes the profile of a builder-started session (`DEPENGINE_PROFILE`).
    fn write_profile_to(&self, path: &std::path::Path) {
        let profile = self.stop_profiling();
        let summary = path.with_extension("summary.txt");
        let written = profile.save(path).and_then(|()| std::fs::write(&summary, profile.summary_table()));
        match written {
            Ok(()) => eprintln!(
                "depengine: profile of {} operations written to {} (summary: {})",
                profile.events.len(),
                path.display(),
                summary.display()
            ),
            Err(e) => eprintln!("depengine: cannot write the profile to {}: {e}", path.display()),
        }
    }

    /// What is in flight now (on `var`, or everything): each operation's
    /// state, what a queued one waits for, which are running where — the
    /// report a stuck wait prints after
    /// [`EngineBuilder::hang_report`](crate::EngineBuilder::hang_report).
    /// Needs hang diagnosis on (else [`EngineError::Config`]); call it from
    /// any thread, e.g. a signal handler's thread or a debugger.
    pub fn pending_report(&self, var: Option<Var>) -> Result<HangReport, EngineError> {
        if self.core.observe.diagnosis.is_none() {
            return Err(EngineError::Config(
                "pending_report needs hang diagnosis: build with hang_report(..) or DEPENGINE_HANG_REPORT_MS".into(),
            ));
        }
        if let Some(v) = var {
            self.core.vars.slot_of(v)?;
        }
        Ok(self.core.pending_report(var))
    }

    /// Finishes every pushed operation, then refuses further pushes
    /// ([`EngineError::ShutDown`]) and stops the workers. Idempotent; `Drop`
    /// calls it. From inside an operation it would wait for itself, so it
    /// returns [`EngineError::WaitWouldDeadlock`] there.
    ///
    /// It waits for every pending operation, however long: an
    /// asynchronous operation whose [`Completion`] is kept unsignalled (or
    /// forgotten with `mem::forget`) makes it wait forever. Use
    /// [`shutdown_timeout`](Self::shutdown_timeout) where that must not
    /// happen.
    pub fn shutdown(&self) -> Result<(), EngineError> {
        self.shutdown_inner(false, None)
    }

    /// Skips every operation not yet started (they complete with a
    /// "cancelled" failure), waits for running ones, then shuts down.
    pub fn shutdown_cancel(&self) -> Result<(), EngineError> {
        self.shutdown_inner(true, None)
    }

    /// [`shutdown`](Self::shutdown), waiting at most `timeout` for the
    /// pending operations. If they have not all finished by then it returns
    /// [`EngineError::Timeout`] with their count and a report of what each
    /// waits for, and leaves the engine as it was (it may have been closed
    /// to new pushes): call it again, or [`shutdown`](Self::shutdown), once
    /// the cause is dealt with. A `Completion` that was forgotten can
    /// never be dealt with; the engine then cannot be shut down, and
    /// `Drop` would wait forever: `mem::forget` the engine instead.
    ///
    /// ```
    /// use std::time::Duration;
    /// let engine = depengine::Engine::builder().build().unwrap();
    /// let v = engine.new_var();
    /// engine.push_async(|_, done| std::mem::forget(done), &[], &[v]).unwrap();
    /// let err = engine.shutdown_timeout(Duration::from_millis(10)).unwrap_err();
    /// assert!(matches!(err, depengine::EngineError::Timeout { pending: 1, .. }));
    /// # std::mem::forget(engine);
    /// ```
    pub fn shutdown_timeout(&self, timeout: std::time::Duration) -> Result<(), EngineError> {
        self.shutdown_inner(false, Some(std::time::Instant::now().checked_add(timeout)).flatten())
    }

    fn shutdown_inner(&self, cancel: bool, deadline: Option<std::time::Instant>) -> Result<(), EngineError> {
        if self.core.would_deadlock(None) {
            return Err(EngineError::WaitWouldDeadlock);
        }
        let _ = self.flush_bulk();
        if cancel {
            self.core.life.cancelling.store(true, Ordering::SeqCst);
        }
        // Let running work push its continuations, then close the door
        // (between two dispatches) and drain what was dispatched before it.
        let timed_out = || {
            let pending = self.core.pending();
            EngineError::Timeout { pending, report: self.core.pending_report(None).to_string() }
        };
        if !self.core.wait_all_until(deadline) {
            return Err(timed_out());
        }
        self.core.close();
        if !self.core.wait_all_until(deadline) {
            return Err(timed_out());
        }
        if self.core.life.take_executor_stop() {
            // Buffers an application frees after the engine must be idle
            // on the device too.
            #[cfg(feature = "cuda")]
            let _ = self.core.gpu.synchronize(&*self.core);
            self.core.executor.stop();
        }
        Ok(())
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if self.core.would_deadlock(None) {
            self.hand_drop_to_reaper();
            return;
        }
        let _ = self.shutdown_inner(self.cancel_on_drop, None);
        if let (Some(diag), Some(watchdog)) = (&self.core.observe.diagnosis, self.watchdog.take()) {
            diag.stop.store(true, Ordering::Release);
            watchdog.thread().unpark();
            let _ = watchdog.join();
        }
        self.write_profile();
    }
}

impl Engine {
    /// Dropped inside one of its own bodies: nothing can be waited for on
    /// this thread, so the rest of the drop goes to a thread of its own.
    /// If that thread cannot be started, the engine is leaked (its workers
    /// keep running until the process ends): never freed under a body.
    #[cold]
    fn hand_drop_to_reaper(&mut self) {
        let _ = self.flush_bulk();
        let rest = Engine {
            core: self.core.clone(),
            kind: self.kind,
            cancel_on_drop: self.cancel_on_drop,
            shuffle_seed: self.shuffle_seed,
            profile_path: std::sync::Mutex::new(self.take_profile_path()),
            watchdog: self.watchdog.take(),
            placement: self.placement.take(),
        };
        // A spawn that fails drops the closure: `ManuallyDrop` leaks the
        // engine then, instead of dropping it again on this thread.
        let rest = std::mem::ManuallyDrop::new(rest);
        let _ = std::thread::Builder::new()
            .name("depengine-reaper".into())
            .spawn(move || drop(std::mem::ManuallyDrop::into_inner(rest)));
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("kind", &self.kind).field("pending", &self.pending()).finish()
    }
}

/// [`Engine::delete_var`] on `core` (typed data deletes its variable with
/// no `Engine` at hand).
pub(crate) fn delete_var_on(
    core: &Core,
    var: Var,
    on_deleted: impl FnOnce() + Send + 'static,
) -> Result<(), EngineError> {
    // Stored first: refused, it is dropped as any unrun body is.
    let body = Body::OneShot(InlineFn::new_sync(move |_: &RunContext| on_deleted()));
    // This thread's open bulk may use `var`: it was pushed first, so it
    // must reach the engine before `var` is marked deleted.
    if let Err(e) = crate::core::bulk::flush_for(core)
        .and_then(|()| core.life.check_open())
        .and_then(|()| core.vars.request_delete(var))
    {
        // Refused before the variable is marked: a failed call changes nothing.
        core.drop_user_value(body);
        return Err(e);
    }
    let opts = PushOpts::new().name("delete_var").prop(FnProperty::DeleteVar);
    core.push(body, false, &[], &[var], &opts, OprKind::DeleteVar)
}

/// [`Engine::push_async_with`] on `core`.
pub(crate) fn push_async_on<F>(
    core: &Core,
    body: F,
    reads: &[Var],
    writes: &[Var],
    opts: PushOpts,
) -> Result<(), EngineError>
where
    F: FnOnce(&RunContext, Completion) + Send + 'static,
{
    core.push(Body::OneShot(InlineFn::new_async(body)), true, reads, writes, &opts, OprKind::User)
}
