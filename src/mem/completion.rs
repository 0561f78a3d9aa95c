//! [`Completion`]: how an asynchronous operation says it has finished.

use crate::core::Core;
use std::fmt::Display;
use std::ptr::NonNull;

/// The handle an asynchronous body receives; the operation counts as finished
/// (its variables are released) only when this is signalled.
///
/// It may be moved to and signalled from any thread, long after the body
/// returned. Dropping it unsignalled completes the operation with an error,
/// so a lost completion never hangs the engine silently.
///
/// ```
/// let engine = depengine::Engine::builder().build().unwrap();
/// let v = engine.new_var();
/// engine
///     .push_async(|_, done| { std::thread::spawn(move || done.signal()); }, &[], &[v])
///     .unwrap();
/// engine.wait_var(v).unwrap();
/// assert_eq!(engine.var_version(v).unwrap(), 1);
/// ```
#[must_use = "an unsignalled Completion fails its operation when dropped"]
pub struct Completion {
    /// A strong reference to the core's `Arc`, owned by this handle (a
    /// raw pointer so that it is never null, and said so:
    /// `Option<Completion>` is then two words, passed in registers; a sync
    /// body's `None` crossed memory on every run, where a narrow store and
    /// a wide load stalled store forwarding). Owning it keeps the core
    /// alive while the completion's thread runs engine code, even when a
    /// body that this completion makes ready drops the last `Engine`.
    core: NonNull<Core>,
    op: u32,
}

// SAFETY: the core is `Sync` and this handle owns a strong reference to
// it, so the pointer may be used (and the reference dropped) on any thread.
unsafe impl Send for Completion {}

impl Completion {
    /// A completion of `core`'s operation `op`.
    ///
    /// Every `Core` lives in the `Arc` that `Engine::start` makes, and the
    /// caller is running one of its operations, so it is alive.
    pub(crate) fn new(core: &Core, op: u32) -> Self {
        // SAFETY: `core` points into a live `Arc<Core>` allocation (see
        // above); this handle owns the count it adds and gives it back in
        // `release_core`.
        unsafe { std::sync::Arc::increment_strong_count(core as *const Core) };
        Completion { core: NonNull::from(core), op }
    }

    fn core(&self) -> &Core {
        // SAFETY: this handle owns a strong reference (see `new`).
        unsafe { self.core.as_ref() }
    }

    /// Gives back the strong reference of a handle that will not be
    /// dropped (`signal`, `fail`): after the completion, which may have
    /// run bodies that dropped every other reference.
    fn release_core(core: NonNull<Core>) {
        // SAFETY: the reference `new` added, given back once: the handle
        // is forgotten (`ManuallyDrop`) or being dropped.
        unsafe { std::sync::Arc::decrement_strong_count(core.as_ptr() as *const Core) };
    }

    /// The operation succeeded.
    pub fn signal(self) {
        let me = std::mem::ManuallyDrop::new(self);
        me.core().complete_async(me.op, None);
        Self::release_core(me.core);
    }

    /// The operation failed with `message`: its written variables hold the
    /// failure and readers after it are skipped.
    pub fn fail(self, message: impl Display) {
        let me = std::mem::ManuallyDrop::new(self);
        let text = crate::base::unwind::display_or(&message, "failed (and its message's Display panicked)");
        crate::base::unwind::drop_quietly(message);
        me.core().complete_async(me.op, Some(text));
        Self::release_core(me.core);
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        self.core().completion_dropped(self.op);
        Self::release_core(self.core);
    }
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completion").field("op", &self.op).finish()
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    /// A sync body is invoked with `None` on every run: kept to two words,
    /// the option travels in registers.
    #[test]
    fn an_optional_completion_is_two_words() {
        assert_eq!(std::mem::size_of::<Option<super::Completion>>(), 2 * std::mem::size_of::<usize>());
    }
}
