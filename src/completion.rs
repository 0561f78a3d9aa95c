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
    /// Never null, and said so: `Option<Completion>` is then two words,
    /// passed in registers (a sync body's `None` crossed memory on every
    /// run, where a narrow store and a wide load stalled store forwarding).
    core: NonNull<Core>,
    op: u32,
}

// SAFETY: the core is `Sync` and outlives every pending operation (shutdown
// waits for them), so the pointer may be used from any thread.
unsafe impl Send for Completion {}

impl Completion {
    pub(crate) fn new(core: &Core, op: u32) -> Self {
        Completion { core: NonNull::from(core), op }
    }

    fn core(&self) -> &Core {
        // SAFETY: the engine waits for every pending operation, including
        // this one, before its core is dropped.
        unsafe { self.core.as_ref() }
    }

    /// The operation succeeded.
    pub fn signal(self) {
        let me = std::mem::ManuallyDrop::new(self);
        me.core().complete_async(me.op, None);
    }

    /// The operation failed with `message`: its written variables hold the
    /// failure and readers after it are skipped.
    pub fn fail(self, message: impl Display) {
        let me = std::mem::ManuallyDrop::new(self);
        me.core().complete_async(me.op, Some(message.to_string()));
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        self.core().completion_dropped(self.op);
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
