//! [`Completion`]: how an asynchronous operation says it has finished.

use crate::core::Core;
use std::fmt::Display;

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
    core: *const Core,
    op: u32,
}

// SAFETY: the core is `Sync` and outlives every pending operation (shutdown
// waits for them), so the pointer may be used from any thread.
unsafe impl Send for Completion {}

impl Completion {
    pub(crate) fn new(core: &Core, op: u32) -> Self {
        Completion { core, op }
    }

    fn core(&self) -> &Core {
        // SAFETY: the engine waits for every pending operation, including
        // this one, before its core is dropped.
        unsafe { &*self.core }
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
