//! [`Completion`]: how an asynchronous operation says it has finished.

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
    /// The sink of the engine whose operation this is, which this handle
    /// keeps alive: it owns a strong reference to the engine's `Arc` (a
    /// raw pointer so that it is never null, and said so:
    /// `Option<Completion>` is then two words, passed in registers; a sync
    /// body's `None` crossed memory on every run, where a narrow store and
    /// a wide load stalled store forwarding). Owning it keeps the engine
    /// alive while the completion's thread runs engine code, even when a
    /// body that this completion makes ready drops the last `Engine`.
    sink: NonNull<CompletionSink>,
    op: u32,
}

// SAFETY: the sink is part of the engine's core, which is `Sync`, and this
// handle owns a strong reference to it, so the pointer may be used (and the
// reference given back) on any thread.
unsafe impl Send for Completion {}

/// What a [`Completion`] calls when it is signalled, failed or dropped:
/// the engine's core holds one (the core is above this layer; its functions
/// find the core from the sink's address).
pub(crate) struct CompletionSink {
    /// Completes operation `op`: `None` on success, else the failure.
    pub(crate) complete: unsafe fn(NonNull<CompletionSink>, u32, Option<String>),
    /// Operation `op`'s completion was dropped unsignalled.
    pub(crate) dropped: unsafe fn(NonNull<CompletionSink>, u32),
    /// Gives back the strong reference a completion owned.
    pub(crate) release: unsafe fn(NonNull<CompletionSink>),
}

// Each function's safety condition: the pointer is the sink a live
// completion was made with ([`Completion::new`]), which still owns its
// strong reference; for `release`, it gives that reference back and does
// not use the sink after.

impl Completion {
    /// A completion of operation `op`, reporting to `sink`.
    ///
    /// # Safety
    ///
    /// `sink` points to the sink of a live engine core (with the
    /// provenance of the whole core: its functions find the core from
    /// it), and the caller has taken a strong reference to that core,
    /// which this handle then owns and gives back through `release` once,
    /// after its last use of the sink.
    pub(crate) unsafe fn new(sink: NonNull<CompletionSink>, op: u32) -> Self {
        Completion { sink, op }
    }

    fn sink(&self) -> &CompletionSink {
        // SAFETY: this handle owns a strong reference to the sink's engine
        // (see `new`).
        unsafe { self.sink.as_ref() }
    }

    /// Gives back the strong reference of a handle that will not be
    /// dropped (`signal`, `fail`): after the completion, which may have
    /// run bodies that dropped every other reference.
    fn release(sink: NonNull<CompletionSink>) {
        // SAFETY: the reference `new` was given, given back once: the
        // handle is forgotten (`ManuallyDrop`) or being dropped, and does
        // not use the sink after this.
        unsafe {
            let release = sink.as_ref().release;
            release(sink)
        };
    }

    /// The operation succeeded.
    pub fn signal(self) {
        let me = std::mem::ManuallyDrop::new(self);
        // SAFETY: this handle still owns its reference (`new`).
        unsafe { (me.sink().complete)(me.sink, me.op, None) };
        Self::release(me.sink);
    }

    /// The operation failed with `message`: its written variables hold the
    /// failure and readers after it are skipped.
    pub fn fail(self, message: impl Display) {
        let me = std::mem::ManuallyDrop::new(self);
        let text = crate::base::unwind::display_or(&message, "failed (and its message's Display panicked)");
        crate::base::unwind::drop_quietly(message);
        // SAFETY: this handle still owns its reference (`new`).
        unsafe { (me.sink().complete)(me.sink, me.op, Some(text)) };
        Self::release(me.sink);
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        // SAFETY: this handle still owns its reference (`new`).
        unsafe { (self.sink().dropped)(self.sink, self.op) };
        Self::release(self.sink);
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
