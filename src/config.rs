//! Engine settings: the builder and the environment variables behind it
//! (the table is on [`EngineBuilder`]).

use crate::base::error::EngineError;
use crate::core::Settings;
use crate::engine::Engine;
use crate::observe::diagnose::{print_report, HangHandler, HangReport};
use std::sync::Arc;
use std::time::Duration;

/// Which engine to build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EngineKind {
    /// Runs each operation on the thread that made it ready (inside the push
    /// when its dependencies are met): for debugging, and the reference.
    Naive,
    /// One shared pool of workers with one ready queue, plus a copy pool.
    Pooled,
    /// The production engine: one worker per allowed CPU, pinned, grouped
    /// by NUMA node, with work-stealing deques, a priority pool and the
    /// inline path for ready `Async` operations.
    PerDevice,
}

impl EngineKind {
    /// The name used by `DEPENGINE_ENGINE_TYPE`.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Naive => "naive",
            EngineKind::Pooled => "pooled",
            EngineKind::PerDevice => "per_device",
        }
    }

    /// Parses a `DEPENGINE_ENGINE_TYPE` value.
    pub fn parse(s: &str) -> Result<Self, EngineError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "naive" => Ok(EngineKind::Naive),
            "pooled" => Ok(EngineKind::Pooled),
            "per_device" => Ok(EngineKind::PerDevice),
            other => Err(EngineError::Config(format!(
                "DEPENGINE_ENGINE_TYPE={other:?}: expected naive, pooled or per_device"
            ))),
        }
    }

    /// Every engine this build provides.
    pub const ALL: [EngineKind; 3] = [EngineKind::Naive, EngineKind::Pooled, EngineKind::PerDevice];
}

/// The default cap on operations pushed and not finished
/// ([`EngineBuilder::max_pending`]).
///
/// The cap bounds memory (an operation block takes 448 bytes in its pool:
/// 1,024 of them 448 KB) and also how long an operation's lines wait
/// between its push and its run. With a deep backlog a block is run
/// milliseconds after its pusher wrote it, by when its lines have left the
/// caches; with a shallow one they are still near. Against 16,384 it made
/// the parallel W=1000 workloads of both threaded engines 4–16 % faster,
/// and `fanout` at W=0 4–7 % slower (its pusher throttles on the backlog's
/// swings); 512 was no better.
pub const DEFAULT_MAX_PENDING: u64 = 1_024;

/// The default inline pace ([`EngineBuilder::inline_pace`]). Stints of
/// operations with variables are probed for below eight times it.
///
/// Handing an operation with no variables to a worker costs the pushing
/// thread some tens of ns, and running it inside the push about a tenth of
/// that plus its body. A run is worth handing over once the body (with
/// whatever the thread does between its pushes) takes about as long as
/// that difference: runs coming faster than one per 50 ns are not.
pub const DEFAULT_INLINE_PACE: Duration = Duration::from_nanos(50);

/// The most threads a builder may ask of one pool (CPU workers, copy or
/// priority workers, a GPU ring, the random-order mode's workers): beyond
/// any machine's CPU count, so that a larger value is taken for the
/// mistake it is (`usize::MAX`) instead of an attempt to start that many.
pub const MAX_POOL_THREADS: usize = 4_096;

/// The most operations a profiler lane may keep
/// ([`EngineBuilder::profile_events`]): 2^24 records are 1 GiB a lane.
pub const MAX_PROFILE_EVENTS: usize = 1 << 24;

/// Every variable [`EngineBuilder::from_env`] reads (and
/// `DEPENGINE_MEMBARRIER`, read once per process). Any other variable
/// named `DEPENGINE_*` is refused as a misspelling.
pub const ENV_VARS: [&str; 19] = [
    "DEPENGINE_ENGINE_TYPE",
    "DEPENGINE_CPU_WORKERS",
    "DEPENGINE_COPY_WORKERS",
    "DEPENGINE_SPIN_US",
    "DEPENGINE_PIN",
    "DEPENGINE_PRIORITY_WORKERS",
    "DEPENGINE_GPU_COMPUTE_WORKERS",
    "DEPENGINE_GPU_PRIORITY_WORKERS",
    "DEPENGINE_GPU_COPY_WORKERS",
    "DEPENGINE_CANCEL_ON_DROP",
    "DEPENGINE_MAX_PENDING",
    "DEPENGINE_RUN_ON_PUSHER",
    "DEPENGINE_INLINE_PACE_NS",
    "DEPENGINE_SHUFFLE_SEED",
    "DEPENGINE_SHUFFLE_WORKERS",
    "DEPENGINE_PROFILE",
    "DEPENGINE_PROFILE_EVENTS",
    "DEPENGINE_HANG_REPORT_MS",
    "DEPENGINE_MEMBARRIER",
];

/// Builds an [`Engine`]; every setting also has an environment variable
/// (the table below), read by [`EngineBuilder::from_env`].
///
/// ```
/// use depengine::{Engine, EngineKind};
/// let engine = Engine::builder().kind(EngineKind::Pooled).cpu_workers(2).build().unwrap();
/// assert_eq!(engine.cpu_workers(), 2);
/// ```
///
/// # The environment variables
///
/// | variable | builder method | default |
/// |---|---|---|
/// | `DEPENGINE_ENGINE_TYPE` | [`EngineBuilder::kind`] | `per_device` |
/// | `DEPENGINE_CPU_WORKERS` | [`EngineBuilder::cpu_workers`] | cores this process may use |
/// | `DEPENGINE_PIN` | [`EngineBuilder::pin`] | `1` (per_device) |
/// | `DEPENGINE_PRIORITY_WORKERS` | [`EngineBuilder::priority_workers`] | 0 (per_device) |
/// | `DEPENGINE_COPY_WORKERS` | [`EngineBuilder::copy_workers`] | 1 |
/// | `DEPENGINE_GPU_COMPUTE_WORKERS` | [`EngineBuilder::gpu_compute_workers`] | 2 per GPU (feature `cuda`) |
/// | `DEPENGINE_GPU_PRIORITY_WORKERS` | [`EngineBuilder::gpu_priority_workers`] | 1 per GPU (feature `cuda`) |
/// | `DEPENGINE_GPU_COPY_WORKERS` | [`EngineBuilder::gpu_copy_workers`] | 1 per GPU (feature `cuda`) |
/// | `DEPENGINE_SPIN_US` | [`EngineBuilder::spin`] | 50 µs |
/// | `DEPENGINE_CANCEL_ON_DROP` | [`EngineBuilder::cancel_on_drop`] | `0` |
/// | `DEPENGINE_MAX_PENDING` | [`EngineBuilder::max_pending`] | 1024 (`0`: no cap) |
/// | `DEPENGINE_RUN_ON_PUSHER` | [`EngineBuilder::run_on_pusher`] | `0` (off) |
/// | `DEPENGINE_INLINE_PACE_NS` | [`EngineBuilder::inline_pace`] (with running on the pusher on) | 50 ns (`0`: off) |
/// | `DEPENGINE_SHUFFLE_SEED` | [`EngineBuilder::shuffle_seed`] | unset (off) |
/// | `DEPENGINE_SHUFFLE_WORKERS` | [`EngineBuilder::shuffle_workers`] | 0 |
/// | `DEPENGINE_PROFILE` | [`EngineBuilder::profile`] | unset (off) |
/// | `DEPENGINE_PROFILE_EVENTS` | [`EngineBuilder::profile_events`] | 32768 per lane |
/// | `DEPENGINE_HANG_REPORT_MS` | [`EngineBuilder::hang_report`] | unset (off) |
/// | `DEPENGINE_MEMBARRIER` | none: read once per process, at the first engine's build ([`EngineStats::membarrier`](crate::EngineStats::membarrier)) | `1` where the kernel has it (`0`: SeqCst fences) |
///
/// Only [`EngineBuilder::from_env`] reads these (and so [`Engine::from_env`]
/// and [`Engine::global`], which start from it); [`Engine::builder`] starts
/// from the defaults. Any other variable named `DEPENGINE_*` is refused as
/// a misspelling. Every value, from a variable or a method, either builds a
/// working engine or is refused with [`EngineError::Config`].
#[derive(Debug, Clone)]
pub struct EngineBuilder {
    pub(crate) kind: EngineKind,
    pub(crate) cpu_workers: Option<usize>,
    pub(crate) copy_workers: usize,
    pub(crate) spin: Duration,
    pub(crate) pin: bool,
    pub(crate) priority_workers: usize,
    pub(crate) gpu_compute_workers: usize,
    pub(crate) gpu_priority_workers: usize,
    pub(crate) gpu_copy_workers: usize,
    pub(crate) cancel_on_drop: bool,
    pub(crate) max_pending: u64,
    pub(crate) inline_pace: Duration,
    pub(crate) run_on_pusher: bool,
    pub(crate) shuffle_seed: Option<u64>,
    pub(crate) shuffle_workers: usize,
    pub(crate) profile: Option<std::path::PathBuf>,
    pub(crate) profile_events: usize,
    pub(crate) hang_report: Option<Duration>,
    pub(crate) on_hang: Option<OnHang>,
}

/// A hang-report callback ([`EngineBuilder::on_hang`]).
#[derive(Clone)]
pub(crate) struct OnHang(pub(crate) HangHandler);

impl std::fmt::Debug for OnHang {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<hang report callback>")
    }
}

impl Default for EngineBuilder {
    fn default() -> Self {
        EngineBuilder {
            kind: EngineKind::PerDevice,
            cpu_workers: None,
            copy_workers: 1,
            spin: Duration::from_micros(50),
            pin: true,
            priority_workers: 0,
            gpu_compute_workers: 2,
            gpu_priority_workers: 1,
            gpu_copy_workers: 1,
            cancel_on_drop: false,
            max_pending: DEFAULT_MAX_PENDING,
            inline_pace: DEFAULT_INLINE_PACE,
            run_on_pusher: false,
            shuffle_seed: None,
            shuffle_workers: 0,
            profile: None,
            profile_events: crate::observe::profiler::DEFAULT_LANE_EVENTS,
            hang_report: None,
            on_hang: None,
        }
    }
}

fn env_parse<T: std::str::FromStr>(name: &str) -> Result<Option<T>, EngineError> {
    match std::env::var(name) {
        Ok(v) => {
            v.trim().parse().map(Some).map_err(|_| EngineError::Config(format!("{name}={v:?} is not a valid value")))
        }
        Err(_) => Ok(None),
    }
}

impl EngineBuilder {
    /// The defaults (see the table on [`EngineBuilder`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// The defaults overridden by every `DEPENGINE_*` variable that is set
    /// (the table on [`EngineBuilder`]). A variable named `DEPENGINE_*` that is not one
    /// of them ([`ENV_VARS`]) is refused with a [`EngineError::Config`]
    /// naming it: a misspelt setting would otherwise be ignored silently.
    ///
    /// [`Engine::from_env`] and [`Engine::global`] start from this;
    /// [`Engine::builder`] and [`EngineBuilder::new`] do not read the
    /// environment at all (start from `from_env()` for both).
    ///
    /// ```
    /// let engine = depengine::EngineBuilder::from_env()?.cpu_workers(2).build()?;
    /// # drop(engine);
    /// # Ok::<(), depengine::EngineError>(())
    /// ```
    pub fn from_env() -> Result<Self, EngineError> {
        for (key, _) in std::env::vars_os() {
            if let Some(key) = key.to_str().filter(|k| k.starts_with("DEPENGINE_")) {
                if !ENV_VARS.contains(&key) {
                    return Err(EngineError::Config(format!(
                        "unknown environment variable {key} (misspelt? depengine reads {})",
                        ENV_VARS.join(", ")
                    )));
                }
            }
        }
        let mut b = Self::default();
        if let Ok(kind) = std::env::var("DEPENGINE_ENGINE_TYPE") {
            b.kind = EngineKind::parse(&kind)?;
        }
        if let Some(n) = env_parse("DEPENGINE_CPU_WORKERS")? {
            b.cpu_workers = Some(n);
        }
        if let Some(n) = env_parse("DEPENGINE_COPY_WORKERS")? {
            b.copy_workers = n;
        }
        if let Some(us) = env_parse::<u64>("DEPENGINE_SPIN_US")? {
            b.spin = Duration::from_micros(us);
        }
        if let Some(p) = env_parse::<u8>("DEPENGINE_PIN")? {
            b.pin = p != 0;
        }
        if let Some(n) = env_parse("DEPENGINE_PRIORITY_WORKERS")? {
            b.priority_workers = n;
        }
        if let Some(n) = env_parse("DEPENGINE_GPU_COMPUTE_WORKERS")? {
            b.gpu_compute_workers = n;
        }
        if let Some(n) = env_parse("DEPENGINE_GPU_PRIORITY_WORKERS")? {
            b.gpu_priority_workers = n;
        }
        if let Some(n) = env_parse("DEPENGINE_GPU_COPY_WORKERS")? {
            b.gpu_copy_workers = n;
        }
        if let Some(c) = env_parse::<u8>("DEPENGINE_CANCEL_ON_DROP")? {
            b.cancel_on_drop = c != 0;
        }
        if let Some(n) = env_parse("DEPENGINE_MAX_PENDING")? {
            b.max_pending = n;
        }
        if let Some(on) = env_parse::<u8>("DEPENGINE_RUN_ON_PUSHER")? {
            b.run_on_pusher = on != 0;
        }
        if let Some(ns) = env_parse("DEPENGINE_INLINE_PACE_NS")? {
            b.inline_pace = Duration::from_nanos(ns);
        }
        if let Some(seed) = env_parse("DEPENGINE_SHUFFLE_SEED")? {
            b.shuffle_seed = Some(seed);
        }
        if let Some(n) = env_parse("DEPENGINE_SHUFFLE_WORKERS")? {
            b.shuffle_workers = n;
        }
        if let Some(path) = std::env::var_os("DEPENGINE_PROFILE").filter(|p| !p.is_empty()) {
            b.profile = Some(path.into());
        }
        if let Some(n) = env_parse("DEPENGINE_PROFILE_EVENTS")? {
            b.profile_events = n;
        }
        if let Some(ms) = env_parse::<u64>("DEPENGINE_HANG_REPORT_MS")? {
            b.hang_report = (ms > 0).then(|| Duration::from_millis(ms));
        }
        Ok(b)
    }

    /// Which engine.
    pub fn kind(mut self, kind: EngineKind) -> Self {
        self.kind = kind;
        self
    }

    /// CPU workers (pooled, per_device); at least 1.
    pub fn cpu_workers(mut self, n: usize) -> Self {
        self.cpu_workers = Some(n);
        self
    }

    /// Copy workers (pooled); at least 1.
    pub fn copy_workers(mut self, n: usize) -> Self {
        self.copy_workers = n;
        self
    }

    /// How long an idle worker spins before it parks.
    pub fn spin(mut self, spin: Duration) -> Self {
        self.spin = spin;
        self
    }

    /// Whether the per_device engine pins each worker to its CPU (default
    /// on; turn it off when the process shares its CPUs with other busy
    /// programs).
    pub fn pin(mut self, pin: bool) -> Self {
        self.pin = pin;
        self
    }

    /// Threads of the per_device engine that serve only `CpuPrioritized`
    /// operations, in addition to the CPU workers (which serve them first
    /// too). Default 0; one or more keep prioritized work moving while
    /// every CPU worker is inside a long body.
    pub fn priority_workers(mut self, n: usize) -> Self {
        self.priority_workers = n;
        self
    }

    /// Workers of each GPU's compute ring, each with its own CUDA stream
    /// (feature `cuda`; ignored without it); at least 1. Normal GPU
    /// operations of a device are spread over them.
    pub fn gpu_compute_workers(mut self, n: usize) -> Self {
        self.gpu_compute_workers = n;
        self
    }

    /// Workers of each GPU's priority ring, which serves `GpuPrioritized`
    /// operations on streams of the device's highest CUDA priority (feature
    /// `cuda`); at least 1.
    pub fn gpu_priority_workers(mut self, n: usize) -> Self {
        self.gpu_priority_workers = n;
        self
    }

    /// Workers of each GPU's copy ring, which serves `CopyToGpu` and
    /// `CopyFromGpu` operations on a GPU context (feature `cuda`); at least 1.
    pub fn gpu_copy_workers(mut self, n: usize) -> Self {
        self.gpu_copy_workers = n;
        self
    }

    /// Whether dropping the engine cancels queued work (bodies not yet
    /// started are skipped with a "cancelled" failure) instead of running it.
    pub fn cancel_on_drop(mut self, cancel: bool) -> Self {
        self.cancel_on_drop = cancel;
        self
    }

    /// Bounded memory: above this many operations pushed and not finished, a
    /// pushing thread waits before its push returns until the count is back
    /// under the cap, so a pusher racing ahead of the workers cannot exhaust
    /// memory. `0` removes the cap; the default is [`DEFAULT_MAX_PENDING`].
    /// The count is kept per dispatch shard, so that pushers on variables
    /// of their own never read each other's counts: a thread's pushes are
    /// held at this many of its shard's (one pushing thread: all of them),
    /// and with several threads pushing to variables of their own each may
    /// have this many in flight (a variable belongs to the shard of the
    /// first thread that pushed to it; threads share one of 16 shards when
    /// their thread slots are equal modulo 16).
    /// Pushes from inside an operation are never held back. A held pusher
    /// waits only while the count keeps falling: after a bounded time in
    /// which it did not (a few hundred µs) it goes on, so an application
    /// that keeps more than this many operations outstanding on purpose
    /// (asynchronous ones whose completions come later, or work queued
    /// behind a long operation) is slowed, never deadlocked.
    ///
    /// On the `pooled` and `per_device` engines the held pusher yields its
    /// core to the workers rather than running their work (one worker per
    /// core already uses every core). On `pooled`, whose workers the OS may move, a
    /// pusher whose yields come back at once while ready work waits sleeps
    /// instead until the workers have drained a quarter of the cap (when
    /// they drain slowly enough for a sleep to pay), so that its core can
    /// run a worker ([`EngineStats::throttle_sleeps`](crate::EngineStats::throttle_sleeps)).
    /// There is one exception to the waiting: a synchronous `Normal` CPU
    /// push with no variables that would take the engine to the cap runs
    /// its body on the pushing thread, inside the push, with no operation
    /// block and no queue, as libgomp runs an undeferred task: queuing it
    /// would only send it to another core and then wait (`nodeps` at W=0
    /// about 2.3 times as fast). With [`run_on_pusher`](Self::run_on_pusher) on (not the
    /// default), once one has run so, such pushes go on running inside
    /// themselves until the workers have drained the pending count to half
    /// the cap (`nodeps` at W=0 about a fifth faster again), and past that for as long as the
    /// pushing thread's runs come faster than the inline pace
    /// ([`inline_pace`](Self::inline_pace)). It still takes a ticket
    /// ([`RunContext::ticket`](crate::RunContext::ticket)) and
    /// fails like any operation. A push at the cap may also start a
    /// *stint* (see [`inline_pace`](Self::inline_pace)), in which a
    /// pusher's pushes keep the pending count under a sixteenth of the
    /// cap. On the `naive` engine and in
    /// random-order mode, a held pusher runs ready operations itself, like
    /// a thread blocked in a wait. A body that such a pusher may run must
    /// not wait for something the pushing thread will only do after its
    /// pushes (set a flag, signal a channel): it would wait on itself.
    /// Raise the cap above the work such a program queues, or set `0`.
    pub fn max_pending(mut self, n: u64) -> Self {
        self.max_pending = n;
        self
    }

    /// Lets a push run bodies on the pushing thread below the pending cap
    /// (off by default; also `DEPENGINE_RUN_ON_PUSHER=1`).
    ///
    /// By default a push never runs a synchronous body on the pushing
    /// thread while the engine is below its pending cap
    /// ([`max_pending`](Self::max_pending)): the body runs later on an
    /// engine thread, so it may wait for something its pusher does after
    /// the push, and a latency-critical pusher is never stalled by a body.
    /// (At the cap the pusher would wait anyway, and may run work there;
    /// waits may run ready work; `Async` and `DeleteVar` operations found
    /// ready may start inside their push on `per_device`; the `naive`
    /// engine runs everything on the thread that makes it ready.)
    ///
    /// With `true`, pushes of tiny bodies may run them inside the push
    /// below the cap too: runs with no variables at the
    /// [`inline_pace`](Self::inline_pace), and *stints* in which a pusher
    /// runs the operations its pushes make ready. That makes W=0 rows
    /// several times faster (PERF.md has the figures).
    ///
    /// **Hazard:** with it on, a body must not wait for anything its
    /// pushing thread does only after the push (set a flag, send on a
    /// channel, signal a condition): the push may run that body itself
    /// and then wait on its own thread forever. And a push may take as
    /// long as the bodies it runs.
    ///
    /// ```
    /// let engine = depengine::Engine::builder().run_on_pusher(true).build().unwrap();
    /// let v = engine.new_var();
    /// for _ in 0..1000 {
    ///     engine.push_sync(|_| {}, &[], &[v]).unwrap(); // may run here
    /// }
    /// engine.wait_var(v).unwrap();
    /// ```
    pub fn run_on_pusher(mut self, on: bool) -> Self {
        self.run_on_pusher = on;
        self
    }

    /// With [`run_on_pusher`](Self::run_on_pusher) on, how short bodies
    /// must be to run on the pusher (it has no effect otherwise).
    ///
    /// Tiny operations with no variables stay on the pushing thread: a
    /// thread that reached the pending cap runs its synchronous pushes with
    /// no variables inside themselves (see [`max_pending`](Self::max_pending))
    /// until the workers have drained half the cap, and past that for as
    /// long as those runs come faster than one per `pace`, the bodies
    /// together with the pushes and whatever the thread does between them.
    /// At that pace a worker's help costs the pusher more than it saves:
    /// the default, [`DEFAULT_INLINE_PACE`], runs `nodeps` at W=0 about
    /// twice as fast, and leaves longer bodies to the workers as before. Such a run still takes a ticket and fails like
    /// any operation; the other workers park meanwhile.
    ///
    /// The pace is measured per thread, over windows of 64 runs with one
    /// clock read each, as the median of the last three windows (so that
    /// one window stretched by an interrupt does not count). When the pace
    /// slows (longer bodies, a pause in the pushes), at most the rest of
    /// the window in progress and the next one run inside pushes before
    /// the pushes go back to the workers. `Duration::ZERO` turns
    /// this off (`DEPENGINE_INLINE_PACE_NS=0`), and stints with it; a cap
    /// of `0` turns off every run inside a push.
    ///
    /// **Stints: tiny operations with variables.** Where a thread's pushes
    /// that queue their operations come quicker than eight times `pace`
    /// (400 ns by default), the engine now and then *probes*: a push at
    /// the cap (or one in 4,096 that finds a probe due) waits until the
    /// workers have drained everything pending, and then the pushers run
    /// the `Normal` CPU operations that their pushes make ready (those
    /// that conflict with nothing pending) themselves, inside the pushes,
    /// for as long as the thread's pace of such runs beats the pace its
    /// queued pushes had by an eighth. An operation that is not ready is
    /// queued behind what it waits for, as ever, and the push waits while
    /// a sixteenth of the cap is pending. When the pace slows (longer
    /// bodies, a pause in the pushes, completions held), the stint ends
    /// and the pushes queue again; the next probe comes after a pause that
    /// doubles up to 128 ms while probes keep failing. In a stint a
    /// synchronous push whose variables are all free runs *directly*,
    /// with no operation block at all: granted, run and released inside
    /// the push. At W=0, `chain` then runs about twice as fast and
    /// `random`, `layered` and `fanout` about three times as fast as queued.
    /// [`EngineStats::stints`](crate::EngineStats::stints)
    /// counts the stints; a body's own pushes, and pushes while the
    /// profiler or hang diagnosis is on, never run so. As with a pusher at
    /// the cap, a body that a stint may run inside its push must not wait
    /// for something that the pushing thread will only do after the push
    /// (set a flag, signal a channel): it would wait on itself. A program
    /// whose bodies do so turns stints off with a pace of `0` (or pushes
    /// such bodies as `Async` operations, which complete later).
    ///
    /// ```
    /// use std::time::Duration;
    /// let engine = depengine::Engine::builder().inline_pace(Duration::ZERO).build().unwrap();
    /// # drop(engine);
    /// ```
    pub fn inline_pace(mut self, pace: Duration) -> Self {
        self.inline_pace = pace;
        self
    }

    /// Runs ready operations in a random order drawn from `seed` instead
    /// of on the engine's workers: a debugging mode for finding missing
    /// dependencies. Operations run only inside waits (on the waiting
    /// thread), so with one pushing thread the execution replays exactly
    /// from the seed. The scheduling rule still holds. Also set by
    /// `DEPENGINE_SHUFFLE_SEED`.
    ///
    /// ```
    /// let engine = depengine::Engine::builder().shuffle_seed(7).build().unwrap();
    /// let v = engine.new_var();
    /// engine.push_sync(|_| {}, &[], &[v]).unwrap();
    /// engine.wait_var(v).unwrap(); // runs it, here
    /// assert_eq!(engine.shuffle_seed(), Some(7));
    /// ```
    pub fn shuffle_seed(mut self, seed: u64) -> Self {
        self.shuffle_seed = Some(seed);
        self
    }

    /// Random-order mode with `n` worker threads that also pick ready
    /// operations at random, so they run in parallel and in the
    /// background (races between operations that should have conflicted
    /// can show). Thread timing then joins the seed in deciding the order,
    /// so a run no longer replays exactly; `0` (the default) keeps the
    /// reproducible mode where only waiting threads run operations. Also
    /// set by `DEPENGINE_SHUFFLE_WORKERS`.
    pub fn shuffle_workers(mut self, n: usize) -> Self {
        self.shuffle_workers = n;
        self
    }

    /// Profiles the engine from the start: when the engine is
    /// dropped, the Chrome trace of every operation it ran is written to
    /// `path` (open it in <https://ui.perfetto.dev> or `chrome://tracing`)
    /// and the per-name summary next to it (`trace.json` → `trace.summary.txt`). Also set by
    /// `DEPENGINE_PROFILE=path`. To profile a region instead, see
    /// [`Engine::start_profiling`].
    ///
    /// ```
    /// let path = std::env::temp_dir().join("depengine-doc-profile.json");
    /// {
    ///     let engine = depengine::Engine::builder().profile(&path).build().unwrap();
    ///     let v = engine.new_var();
    ///     engine.push_sync(|_| {}, &[], &[v]).unwrap();
    /// } // dropped: the trace is written
    /// assert!(std::fs::read_to_string(&path).unwrap().contains("traceEvents"));
    /// ```
    pub fn profile(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.profile = Some(path.into());
        self
    }

    /// Operations each profiler lane (one per worker thread, plus a few
    /// shared by other threads) keeps; older ones are overwritten and
    /// counted in [`Profile::dropped`](crate::Profile::dropped). Rounded up
    /// to a power of two; each costs 96 bytes, allocated when profiling
    /// first starts.
    pub fn profile_events(mut self, n: usize) -> Self {
        self.profile_events = n;
        self
    }

    /// Hang diagnosis: a wait (`wait_var`, `wait_to_write`, `wait_all`)
    /// still blocked after `after` is reported once — the operations in
    /// flight on its variable, what each waits for, and which are running
    /// where ([`HangReport`]) — to standard error, or to
    /// [`on_hang`](Self::on_hang). The wait itself goes on waiting. Also
    /// set by `DEPENGINE_HANG_REPORT_MS`. Off by default; when on, each
    /// operation keeps a small diagnostic copy of itself and a watchdog
    /// thread looks at the waits a few times per `after`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let engine = depengine::Engine::builder().hang_report(Duration::from_secs(5)).build().unwrap();
    /// let v = engine.new_var();
    /// engine.push_async(|_, done| drop(done.signal()), &[], &[v]).unwrap();
    /// engine.wait_var(v).unwrap(); // a report only if this took 5 s
    /// print!("{}", engine.pending_report(None).unwrap()); // on demand
    /// ```
    pub fn hang_report(mut self, after: Duration) -> Self {
        self.hang_report = Some(after);
        self
    }

    /// Where hang reports go (instead of standard error); called on the
    /// engine's watchdog thread.
    pub fn on_hang(mut self, f: impl Fn(&HangReport) + Send + Sync + 'static) -> Self {
        self.on_hang = Some(OnHang(std::sync::Arc::new(f)));
        self
    }

    /// The CPU worker count this builder resolves to.
    pub(crate) fn resolved_cpu_workers(&self) -> usize {
        self.cpu_workers.unwrap_or_else(crate::base::topology::available_cpus)
    }

    /// The settings the core acts on, resolved into plain values.
    pub(crate) fn settings(&self) -> Settings {
        Settings {
            max_pending: self.max_pending,
            run_on_pusher: self.run_on_pusher,
            inline_pace: self.inline_pace,
            profile_events: self.profile_events,
            hang_report: self.hang_report.map(|after| {
                let handler = self.on_hang.clone().map_or_else(|| Arc::new(print_report) as HangHandler, |h| h.0);
                (after, handler)
            }),
        }
    }

    /// Starts the engine.
    pub fn build(self) -> Result<Engine, EngineError> {
        // Before any thread of the engine runs either side of a handshake.
        crate::sync::barrier::ensure_chosen();
        for (n, name, least) in [
            (self.resolved_cpu_workers(), "cpu_workers", 1),
            (self.copy_workers, "copy_workers", 1),
            (self.priority_workers, "priority_workers", 0),
            (self.gpu_compute_workers, "gpu_compute_workers", 1),
            (self.gpu_priority_workers, "gpu_priority_workers", 1),
            (self.gpu_copy_workers, "gpu_copy_workers", 1),
            (self.shuffle_workers, "shuffle_workers", 0),
        ] {
            if n < least || n > MAX_POOL_THREADS {
                return Err(EngineError::Config(format!("{name} must be from {least} to {MAX_POOL_THREADS}, not {n}")));
            }
        }
        if self.profile_events > MAX_PROFILE_EVENTS {
            return Err(EngineError::Config(format!(
                "profile_events must be at most {MAX_PROFILE_EVENTS}, not {}",
                self.profile_events
            )));
        }

        Engine::start(self)
    }
}
