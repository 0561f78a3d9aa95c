//! # depengine
//!
//! A dependency engine: the scheduler at the heart of MXNet, rebuilt
//! lock-free and allocation-free.
//!
//! ## The model
//!
//! A [`Var`] is a tag for some resource (an array, a file, a GPU buffer). An
//! operation is a function plus the variables it **reads** and the ones it
//! **writes**. The one rule: *two operations that touch the same variable,
//! where at least one writes it, run in the order they were pushed.*
//! Everything else may run in parallel. A push returns without running
//! its body: by default a push never runs a synchronous body on the pushing
//! thread below the pending cap, so a body may wait for something its
//! pusher does after the push ([`EngineBuilder::run_on_pusher`] is the
//! opt-in that trades this for speed on tiny bodies).
//!
//! **Memory.** Everything an operation did happens-before every later
//! operation that conflicts with it (the same variable, one of them
//! writing), and before a [`Engine::wait_var`], [`Engine::wait_to_write`]
//! or [`Engine::wait_all`] that covers it returns. So bodies may share plain
//! data guarded by a variable without a lock or atomics of their own: the
//! engine's ordering is the synchronisation (checked with loom models,
//! `loom_tests/tests/engine.rs`).
//!
//! ```
//! use depengine::{Engine, EngineKind};
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::sync::Arc;
//!
//! let engine = Engine::builder().kind(EngineKind::Pooled).build()?;
//! let x = engine.new_var();
//! let cell = Arc::new(AtomicU64::new(1));
//!
//! for _ in 0..10 {
//!     let c = cell.clone();
//!     // Each push writes `x`, so the ten bodies run one after another.
//!     engine.push_sync(move |_| { c.fetch_add(c.load(Ordering::Relaxed), Ordering::Relaxed); }, &[], &[x])?;
//! }
//! engine.wait_var(x)?;
//! assert_eq!(cell.load(Ordering::Relaxed), 1024);
//! assert_eq!(engine.var_version(x)?, 10);
//! # Ok::<(), depengine::EngineError>(())
//! ```
//!
//! ## Engines
//!
//! - [`EngineKind::Naive`]: each operation runs on the thread that made it
//!   ready — inside its push when its dependencies are met. The reference.
//! - [`EngineKind::Pooled`]: a shared worker pool and ready queue, plus a
//!   copy pool.
//! - [`EngineKind::PerDevice`] (the default): one pinned worker per CPU,
//!   grouped by NUMA node, with work-stealing deques, a priority pool and
//!   the inline path for ready `Async` operations.
//!
//! With the `cuda` feature every engine also has **GPU rings** (on cudarc):
//! operations pushed with [`Context::Gpu`] run on a stream-owning worker of
//! the device's compute, priority (`GpuPrioritized`) or copy ring, get the
//! stream from `RunContext::stream`, and complete once their work is
//! enqueued; later operations wait for it with CUDA events, on the device
//! when they run on another stream (`docs/gpu-rings.md`). Without a CUDA
//! driver or device a GPU context is a clear [`EngineError::NoSuchDevice`].
//!
//! Choose with [`EngineBuilder::kind`] or `DEPENGINE_ENGINE_TYPE`;
//! [`Engine::global`] is a process-wide engine configured from the
//! environment (see [`EngineBuilder`] for every variable).
//!
//! ## Failures
//!
//! A body that panics or returns `Err` fails its operation: the failure is
//! recorded on every variable it writes, operations reading those are
//! skipped and inherit it, a later blind write clears it, and
//! [`Engine::wait_var`] / [`Engine::wait_all`] report it with the name of the
//! operation that failed first. See [`EngineError`] for bad input.
//!
//! ## Costs
//!
//! After warm-up a push → run → complete cycle allocates nothing as long as
//! the closure fits in [`INLINE_FN_BYTES`] bytes (larger closures are boxed:
//! one allocation per push) and the operation names at most [`INLINE_VARS`]
//! distinct variables (more spill into a vector that the pooled block keeps,
//! so each block allocates for them at most once). No OS mutex or condition
//! variable is taken on the push → run → complete path; waits sleep on
//! futexes. Memory is bounded: a pusher more than
//! [`EngineBuilder::max_pending`] operations ahead of the workers waits for
//! them before its push returns. See `ARCHITECTURE.md` for one operation's
//! walk through the code.
//!
//! A thread that helps (one blocked in a wait, or on some engines a pusher
//! at the cap) may run any ready operation, so a body must not wait for
//! something its pushing thread only does later while that thread waits
//! on the engine; [`EngineBuilder::max_pending`] says more.
//!
//! ## Robustness
//!
//! No safe program can cause undefined behaviour or abort the process
//! through the engine: a body, a deletion callback or an operator that
//! panics fails its operation; a panic payload or a captured value whose
//! `Drop` panics is dropped inside the engine's guard; a body may drop the
//! last handle of its own engine (the shutdown then finishes on a thread of
//! its own); a builder value out of range is an [`EngineError::Config`], a
//! thread the OS will not start an [`EngineError::Spawn`].
//! `tests/hardening.rs` holds a test for each, and CI runs the suite under
//! AddressSanitizer, ThreadSanitizer and Miri (`.ci/run`).
//!
//! ## Seeing what it did
//!
//! - [`Engine::stats`]: always-on counters ([`EngineStats`]).
//! - [`Engine::start_profiling`] / [`Engine::stop_profiling`],
//!   [`EngineBuilder::profile`] or `DEPENGINE_PROFILE=path`: a [`Profile`]
//!   of every operation, as a Chrome trace and a per-name summary.
//! - [`EngineBuilder::hang_report`] or `DEPENGINE_HANG_REPORT_MS`: a wait
//!   stuck past a threshold reports what it is behind ([`HangReport`]).
//! - [`EngineBuilder::shuffle_seed`] or `DEPENGINE_SHUFFLE_SEED`: ready
//!   operations run in a seeded random order, to shake out missing
//!   dependencies.
//!
//! Misuse the compiler rejects — a body that is not `Send`:
//!
//! ```compile_fail
//! let engine = depengine::Engine::builder().build().unwrap();
//! let not_send = std::rc::Rc::new(1);
//! engine.push_sync(move |_| drop(not_send), &[], &[]).unwrap();
//! ```
//!
//! — or one that borrows from the pushing stack frame:
//!
//! ```compile_fail
//! let engine = depengine::Engine::builder().build().unwrap();
//! let local = vec![1, 2, 3];
//! engine.push_sync(|_| println!("{:?}", &local), &[], &[]).unwrap();
//! ```

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

// The layers, lowest first; each imports only from itself and those below
// (ARCHITECTURE.md, "Layers"; `scripts/layers.py` checks it).
mod base;
mod core;
mod exec;
mod graph;
mod mem;
mod observe;
mod policy;
mod sync;
// The API.
#[cfg(feature = "bench-internals")]
#[doc(hidden)]
pub mod bench_parts;
mod config;
mod data;
mod engine;
pub mod future;
#[cfg(feature = "cuda")]
pub use cudarc;

pub use crate::base::context::{Context, FnProperty, PushOpts, RunContext};
pub use crate::base::error::{EngineError, OpError, OpOutput};
pub use crate::base::topology::{Cpu, Topology, TopologySource};
pub use crate::base::tuning::INLINE_VARS;
pub use crate::config::{
    EngineBuilder, EngineKind, DEFAULT_INLINE_PACE, DEFAULT_MAX_PENDING, ENV_VARS, MAX_POOL_THREADS, MAX_PROFILE_EVENTS,
};
pub use crate::data::{Access, Data, Muts, ReadAsync, ReadGuard, Reads, Refs, WriteAsync, WriteGuard, Writes};
pub use crate::engine::Engine;
pub use crate::graph::operator::Operator;
pub use crate::graph::var::Var;
pub use crate::mem::completion::Completion;
pub use crate::mem::inline_fn::INLINE_FN_BYTES;
pub use crate::observe::diagnose::{HangReport, PendingOp, PendingState};
pub use crate::observe::profile::{LaneSummary, NameSummary, Profile, ProfileEvent};
pub use crate::observe::stats::{EngineStats, PoolStats};
