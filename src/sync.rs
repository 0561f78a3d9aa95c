//! The one place that imports atomics, cells and futex calls.
//!
//! Under `--cfg depengine_loom` every primitive is swapped for its loom twin so
//! that the lock-free parts of the engine can be model-checked (see
//! `loom_tests/`). `atomic-wait` has no loom twin: under loom, [`futex_wait`]
//! yields to the model scheduler until the word changes, which loom explores
//! exhaustively just like a real futex sleep.

#[cfg(depengine_loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
#[cfg(not(depengine_loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

/// An `UnsafeCell` with loom's closure-based access API, so that loom can
/// check that no two threads touch the cell at once.
#[cfg(depengine_loom)]
pub(crate) use loom::cell::UnsafeCell;

/// An `UnsafeCell` with loom's closure-based access API (std build).
#[cfg(not(depengine_loom))]
#[derive(Debug, Default)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(depengine_loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        UnsafeCell(std::cell::UnsafeCell::new(value))
    }

    /// Runs `f` with a shared raw pointer to the contents.
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Runs `f` with a mutable raw pointer to the contents.
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// Blocks while `word` holds `expected` (spurious returns are allowed).
#[inline]
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32) {
    #[cfg(not(depengine_loom))]
    atomic_wait::wait(word, expected);
    #[cfg(depengine_loom)]
    {
        if word.load(Ordering::SeqCst) == expected {
            loom::thread::yield_now();
        }
    }
}

/// Wakes one thread blocked in [`futex_wait`] on `word`.
#[inline]
pub(crate) fn futex_wake_one(word: &AtomicU32) {
    #[cfg(not(depengine_loom))]
    atomic_wait::wake_one(word);
    #[cfg(depengine_loom)]
    let _ = word;
}

/// Wakes every thread blocked in [`futex_wait`] on `word`.
#[inline]
pub(crate) fn futex_wake_all(word: &AtomicU32) {
    #[cfg(not(depengine_loom))]
    atomic_wait::wake_all(word);
    #[cfg(depengine_loom)]
    let _ = word;
}

/// A hint to the CPU that we are in a spin loop (a model-checker yield under loom).
#[inline(always)]
pub(crate) fn spin_hint() {
    #[cfg(not(depengine_loom))]
    std::hint::spin_loop();
    #[cfg(depengine_loom)]
    loom::thread::yield_now();
}
