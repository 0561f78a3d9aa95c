//! What a push says about an operation besides its variables: where it runs
//! ([`Context`]), what kind it is ([`FnProperty`]), its priority and name
//! ([`PushOpts`]); and what the body sees when it runs ([`RunContext`]).

/// An execution context: a device kind and its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Context {
    /// A CPU context; the id selects a NUMA node on engines that have them
    /// ([`Context::ANY_NODE`] for no preference).
    Cpu(u32),
    /// GPU `id` (needs the `cuda` feature and the device).
    Gpu(u32),
}

impl Context {
    /// A CPU id meaning "any NUMA node".
    pub const ANY_NODE: u32 = u32::MAX;

    /// The default CPU context.
    pub const fn cpu() -> Self {
        Context::Cpu(Self::ANY_NODE)
    }

    /// Whether this is a GPU context.
    pub const fn is_gpu(self) -> bool {
        matches!(self, Context::Gpu(_))
    }
}

impl Default for Context {
    fn default() -> Self {
        Context::cpu()
    }
}

/// The kind of an operation (MXNet's `FnProperty`); engines route by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum FnProperty {
    /// Ordinary computation.
    #[default]
    Normal,
    /// A copy from host to GPU (the copy pool / ring).
    CopyToGpu,
    /// A copy from GPU to host (the copy pool / ring).
    CopyFromGpu,
    /// CPU work served before normal work.
    CpuPrioritized,
    /// GPU work on the priority ring.
    GpuPrioritized,
    /// Asynchronous work: the body only starts it (may run inline on the
    /// pushing thread where the engine supports it).
    Async,
    /// The deletion of a variable (pushed by `delete_var`).
    DeleteVar,
}

impl FnProperty {
    /// Every property, in declaration order (`prop as u8` indexes it).
    pub const ALL: [FnProperty; 7] = [
        FnProperty::Normal,
        FnProperty::CopyToGpu,
        FnProperty::CopyFromGpu,
        FnProperty::CpuPrioritized,
        FnProperty::GpuPrioritized,
        FnProperty::Async,
        FnProperty::DeleteVar,
    ];

    /// The property `p as u8` came from (`Normal` for anything else).
    pub(crate) fn from_u8(p: u8) -> Self {
        Self::ALL.get(p as usize).copied().unwrap_or_default()
    }

    /// Whether the copy pool serves this property.
    pub const fn is_copy(self) -> bool {
        matches!(self, FnProperty::CopyToGpu | FnProperty::CopyFromGpu)
    }
}

/// Everything a push takes besides the body and the variables.
///
/// ```
/// use depengine::{Context, FnProperty, PushOpts};
/// let opts = PushOpts::new().name("matmul").priority(2).prop(FnProperty::CpuPrioritized);
/// assert_eq!(opts.ctx, Context::cpu());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PushOpts {
    /// Where the operation runs.
    pub ctx: Context,
    /// Its kind.
    pub prop: FnProperty,
    /// Higher runs first among ready operations of the same queue.
    pub priority: i32,
    /// For errors and the profiler.
    pub name: &'static str,
    /// Run the body even when a variable it reads holds a failure
    /// (MXNet's `kNoSkip`), e.g. for clean-up.
    pub no_skip: bool,
}

impl PushOpts {
    /// CPU, `Normal`, priority 0, unnamed.
    pub const fn new() -> Self {
        PushOpts { ctx: Context::cpu(), prop: FnProperty::Normal, priority: 0, name: "<unnamed>", no_skip: false }
    }
    /// Sets the context.
    pub const fn ctx(mut self, ctx: Context) -> Self {
        self.ctx = ctx;
        self
    }
    /// Sets the property.
    pub const fn prop(mut self, prop: FnProperty) -> Self {
        self.prop = prop;
        self
    }
    /// Sets the priority.
    pub const fn priority(mut self, priority: i32) -> Self {
        self.priority = priority;
        self
    }
    /// Sets the name (profiles, hang reports and failures show it).
    ///
    /// A name is a `&'static str`: the options are `Copy` and travel with
    /// every push, and a name borrowed for the whole operation or owned by
    /// it would cost a reference count or an allocation per push. A name
    /// made at run time (`format!`) is therefore interned once and reused:
    /// the set of distinct names is what leaks, not one string per push.
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use std::sync::{Mutex, OnceLock};
    ///
    /// /// The `&'static` copy of `name`, made once per distinct name.
    /// fn intern(name: String) -> &'static str {
    ///     static NAMES: OnceLock<Mutex<HashMap<String, &'static str>>> = OnceLock::new();
    ///     let mut names = NAMES.get_or_init(Default::default).lock().unwrap();
    ///     if let Some(&s) = names.get(&name) {
    ///         return s;
    ///     }
    ///     let s: &'static str = Box::leak(name.clone().into_boxed_str());
    ///     names.insert(name, s);
    ///     s
    /// }
    ///
    /// let engine = depengine::Engine::builder().build().unwrap();
    /// let v = engine.new_var();
    /// for layer in 0..3 {
    ///     let opts = depengine::PushOpts::new().name(intern(format!("layer {layer}")));
    ///     engine.push_sync_with(|_| {}, &[], &[v], opts).unwrap();
    /// }
    /// engine.wait_all().unwrap();
    /// ```
    pub const fn name(mut self, name: &'static str) -> Self {
        self.name = name;
        self
    }
    /// Runs the body even when its inputs failed.
    pub const fn no_skip(mut self) -> Self {
        self.no_skip = true;
        self
    }
}

impl Default for PushOpts {
    fn default() -> Self {
        Self::new()
    }
}

/// What a running body can see about its own execution.
#[derive(Debug)]
pub struct RunContext {
    pub(crate) ctx: Context,
    pub(crate) worker: Option<usize>,
    pub(crate) ticket: u64,
    pub(crate) priority: i32,
    #[cfg(feature = "cuda")]
    pub(crate) stream: Option<std::sync::Arc<cudarc::driver::CudaStream>>,
}

impl RunContext {
    /// A context for a body run outside any worker, ticket and priority 0
    /// (an operation run inside its push sets both; tests, benchmarks).
    pub(crate) fn on_host(ctx: Context) -> RunContext {
        RunContext {
            ctx,
            worker: None,
            ticket: 0,
            priority: 0,
            #[cfg(feature = "cuda")]
            stream: None,
        }
    }

    /// The CUDA stream of the GPU ring worker running the body (feature
    /// `cuda`; `None` for CPU operations). Enqueue the operation's work on
    /// it and return: the engine records an event behind it and makes
    /// every later operation on the same variables wait for that event
    /// (on the device when it runs on another stream), so the body need
    /// not synchronize.
    #[cfg(feature = "cuda")]
    pub fn stream(&self) -> Option<&std::sync::Arc<cudarc::driver::CudaStream>> {
        self.stream.as_ref()
    }

    /// The context the operation was pushed with.
    pub fn ctx(&self) -> Context {
        self.ctx
    }

    /// The engine worker running the body, `None` for a thread outside the
    /// engine's pools (inline runs, the naive engine).
    pub fn worker(&self) -> Option<usize> {
        self.worker
    }

    /// The operation's place in the engine's order of pushes: unique, and
    /// rising along every variable in push order. Conflicting operations
    /// run in ticket order, so a test can replay a concurrent run
    /// sequentially by sorting on it. Tickets are not consecutive: the
    /// engine's dispatchers, one per shard of the variables, each keep a
    /// clock, and an operation's ticket is one past the clocks of the
    /// shards its variables lie in.
    pub fn ticket(&self) -> u64 {
        self.ticket
    }

    /// The priority the operation was pushed with.
    pub fn priority(&self) -> i32 {
        self.priority
    }
}
