//! An engine's life: open, then closing (every operation dispatched after
//! the close is rejected), whether pending work is cancelled, and the
//! first failure a `wait_all` reports.

use crate::base::error::EngineError;
use crate::graph::wait::FirstError;
use crate::sync::{AtomicBool, Ordering};
use std::sync::atomic as std_atomic;

/// See the module docs. The two flags are read by every dispatch and run
/// and written once: the core keeps this part away from lines that change
/// on every operation.
#[derive(Default)]
pub(crate) struct Lifecycle {
    /// Set once, by the close (as the combiner, `Core::close`): every
    /// operation dispatched after it is rejected.
    pub(crate) shutting_down: AtomicBool,
    /// Set when a drop cancels the work not yet started.
    pub(crate) cancelling: AtomicBool,
    /// The first failure since the last `wait_all`.
    pub(crate) first_error: FirstError,
    /// Set by the one shutdown that stops the executor.
    executor_stopped: std_atomic::AtomicBool,
    /// Values left to the engine while it shut down (typed data whose last
    /// handle was dropped then): dropped with the engine, when no thread of
    /// it runs any more. Touched only then: the mutex is never on the hot
    /// path.
    graveyard: std::sync::Mutex<Vec<Box<dyn Send>>>,
}

impl Lifecycle {
    /// `ShutDown` once the engine has begun shutting down: every call that
    /// would add work checks this before it changes anything.
    #[inline]
    pub(crate) fn check_open(&self) -> Result<(), EngineError> {
        if self.is_closing() {
            return Err(EngineError::ShutDown);
        }
        Ok(())
    }

    /// Whether the engine has begun shutting down (a relaxed read: the
    /// dispatcher orders the close against every dispatch).
    #[inline(always)]
    pub(crate) fn is_closing(&self) -> bool {
        self.shutting_down.load(Ordering::Relaxed)
    }

    /// Whether pending work not yet started is to be skipped.
    #[inline]
    pub(crate) fn is_cancelling(&self) -> bool {
        self.cancelling.load(Ordering::Relaxed)
    }

    /// Keeps `value` until the engine is dropped (see the field).
    pub(crate) fn bury(&self, value: Box<dyn Send>) {
        self.graveyard.lock().unwrap_or_else(|p| p.into_inner()).push(value);
    }

    /// Whether the calling shutdown is the one to stop the executor.
    pub(crate) fn take_executor_stop(&self) -> bool {
        !self.executor_stopped.swap(true, std_atomic::Ordering::AcqRel)
    }
}

impl Drop for Lifecycle {
    fn drop(&mut self) {
        let buried = std::mem::take(self.graveyard.get_mut().unwrap_or_else(|p| p.into_inner()));
        for value in buried {
            // Their `Drop` is user code (`unwind.rs`).
            crate::base::unwind::drop_quietly(value);
        }
    }
}
