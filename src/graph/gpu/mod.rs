//! GPU rings (feature `cuda`): CUDA streams fed by the engine, with
//! the scheduling rule kept on the device by CUDA events.
//!
//! An operation pushed with `Context::Gpu(d)` runs on a worker of one of
//! device `d`'s rings (`rings.rs`), and its body enqueues its work on the
//! worker's stream, which `RunContext::stream` gives it. The operation
//! *completes* — releasing its variables to the operations behind it — as
//! soon as its body returned (an asynchronous one: and its `Completion` was
//! signalled); no thread waits for the device. Instead:
//!
//! 1. On completion the worker records a CUDA event on its stream
//!    (`lane.rs`: a ring of reusable events numbered by a per-stream seq)
//!    and notes `(stream, seq)` on each variable the operation used
//!    (`fence.rs`).
//! 2. The next operation granted a variable waits for that work before its
//!    body runs: a GPU operation on another stream with
//!    `cuStreamWaitEvent` (on the device; its host thread goes straight on),
//!    one on the same stream not at all (streams run in order), a CPU
//!    operation with `cuEventSynchronize`. Reads of one variable on
//!    different streams still overlap; a write waits for them all.
//! 3. `wait_var` / `wait_to_write` wait for the variable's GPU work too,
//!    `wait_all` and shutdown for every stream.
//!
//! Without a CUDA driver (or with no device) the engine has no rings, and a
//! push naming a GPU context fails with `EngineError::NoSuchDevice`
//! saying why. The driver is loaded at run time, so the feature builds
//! and every test passes on a machine with no CUDA at all.
//!
//! Operations that write GPU memory through other means (another library's
//! stream, cudarc's own stream tracking) are outside what the engine
//! orders: a program that lets the engine order its streams should create
//! its buffers with cudarc's event tracking off
//! (`CudaContext::disable_event_tracking`), or it pays for both.

pub(crate) mod fence;
pub(crate) mod lane;

pub(crate) use fence::VarFence;
