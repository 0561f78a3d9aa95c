//! Running operations on the calling thread without recursing.
//!
//! Completing an operation can make others ready, and running those inline
//! could recurse as deep as the longest dependency chain. Instead, the first
//! inline run on a thread becomes the *trampoline*: nested requests are
//! queued in a thread-local list and run by the outermost frame, in order.
//! The list keeps its capacity, so steady state allocates nothing.

use super::Runner;
use std::cell::RefCell;
use std::collections::VecDeque;

#[derive(Default)]
struct Trampoline {
    active: bool,
    /// Each queued operation with its runner, type-erased.
    queue: VecDeque<(*const (), u32, RunErased)>,
}

/// [`run_erased`] for one runner type.
type RunErased = unsafe fn(*const (), u32);

/// Runs `op` on the runner `core` points to.
///
/// # Safety
///
/// `core` points to a live `R` (an engine's core outlives its pending
/// operations: shutdown waits for them, and `op` is pending).
unsafe fn run_erased<R: Runner>(core: *const (), op: u32) {
    // SAFETY: the caller's contract.
    unsafe { &*core.cast::<R>() }.run(op, None);
}

crate::sync::thread_local! {
    static TRAMPOLINE: RefCell<Trampoline> = RefCell::new(Trampoline::default());
}

/// Runs `op` on this thread now, or after the operation this thread is
/// already running inline returns.
pub(crate) fn run_inline<R: Runner>(core: &R, op: u32) {
    let nested = TRAMPOLINE.with(|t| {
        let mut t = t.borrow_mut();
        if t.active {
            t.queue.push_back((std::ptr::from_ref(core).cast(), op, run_erased::<R>));
        }
        std::mem::replace(&mut t.active, true)
    });
    if nested {
        return;
    }
    core.run(op, None);
    while run_queued_one() {}
    TRAMPOLINE.with(|t| t.borrow_mut().active = false);
}

/// Runs one operation queued by a nested [`run_inline`] (a waiting thread
/// helps this way); returns whether there was one.
pub(crate) fn run_queued_one() -> bool {
    let next = TRAMPOLINE.with(|t| t.borrow_mut().queue.pop_front());
    match next {
        Some((core, op, run)) => {
            // SAFETY: `run` is `run_erased` for `core`'s type, and an
            // engine's core outlives its pending operations (shutdown waits
            // for them), and this one is pending.
            unsafe { run(core, op) };
            true
        }
        None => false,
    }
}
