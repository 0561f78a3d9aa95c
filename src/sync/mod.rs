//! The one place that imports atomics, cells, thread-locals and futex calls.
//!
//! Under `--cfg depengine_loom` every primitive is swapped for its loom twin so
//! that the lock-free parts of the engine can be model-checked (see
//! `loom_tests/README.md`). `atomic-wait` has no loom twin: under loom, a
//! futex is modelled by one model-wide mutex and condition variable — a
//! waiter re-checks its word under the mutex and blocks, a waker takes the
//! mutex and wakes everyone. A wake-up the engine forgets to send therefore
//! leaves the waiter blocked for good, which loom reports as a deadlock.

pub(crate) mod barrier;

#[cfg(depengine_loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
#[cfg(not(depengine_loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};

/// loom's `thread_local!`, taking (and dropping) the `const { }` initialisers
/// that the std build uses.
#[cfg(depengine_loom)]
macro_rules! loom_thread_local {
    () => {};
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = const { $init:expr }; $($rest:tt)*) => {
        loom::thread_local!($(#[$attr])* $vis static $name: $t = $init;);
        $crate::sync::thread_local!($($rest)*);
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr; $($rest:tt)*) => {
        loom::thread_local!($(#[$attr])* $vis static $name: $t = $init;);
        $crate::sync::thread_local!($($rest)*);
    };
}
#[cfg(depengine_loom)]
pub(crate) use loom_thread_local as thread_local;
#[cfg(not(depengine_loom))]
pub(crate) use std::thread_local;

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
    loom_futex::wait(word, expected);
}

/// Blocks while `word` holds `expected`, for at most `timeout` (spurious
/// and timed-out returns are allowed: callers re-check). Woken by
/// [`futex_wake_one`] and [`futex_wake_all`] like [`futex_wait`].
pub(crate) fn futex_wait_for(word: &AtomicU32, expected: u32, timeout: std::time::Duration) {
    #[cfg(all(not(depengine_loom), target_os = "linux"))]
    {
        let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as _ };
        // SAFETY: FUTEX_WAIT reads the aligned 32-bit word behind `word`,
        // which lives for the whole call, and the timespec on this stack;
        // it writes neither. The private flag matches atomic-wait's wakes.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
                expected,
                &ts as *const libc::timespec,
            );
        }
    }
    #[cfg(all(not(depengine_loom), not(target_os = "linux")))]
    {
        let _ = (word, expected);
        std::thread::sleep(timeout.min(std::time::Duration::from_micros(50)));
    }
    // Under loom a timed wait blocks like an untimed one: a model then
    // shows that the wake-up its caller relies on comes (a lost one is a
    // deadlock, which loom reports). The timeout is the real build's
    // safety net only.
    #[cfg(depengine_loom)]
    {
        let _ = timeout;
        loom_futex::wait(word, expected);
    }
}

/// Wakes one thread blocked in [`futex_wait`] on `word`.
#[inline]
pub(crate) fn futex_wake_one(word: &AtomicU32) {
    #[cfg(not(depengine_loom))]
    atomic_wait::wake_one(word);
    #[cfg(depengine_loom)]
    loom_futex::wake(word);
}

/// Wakes every thread blocked in [`futex_wait`] on `word`.
#[inline]
pub(crate) fn futex_wake_all(word: &AtomicU32) {
    #[cfg(not(depengine_loom))]
    atomic_wait::wake_all(word);
    #[cfg(depengine_loom)]
    loom_futex::wake(word);
}

/// The futex model used under loom (see the module docs).
#[cfg(depengine_loom)]
mod loom_futex {
    use super::{AtomicU32, Ordering};
    use loom::sync::{Condvar, Mutex};

    loom::lazy_static! {
        static ref FUTEX: (Mutex<()>, Condvar) = (Mutex::new(()), Condvar::new());
    }

    pub(super) fn wait(word: &AtomicU32, expected: u32) {
        let guard = FUTEX.0.lock().unwrap();
        // Checked under the mutex, as the kernel checks under its bucket
        // lock: a waker that changed the word first is seen here, one that
        // changes it later must take the mutex, so it finds us waiting.
        if word.load(Ordering::SeqCst) == expected {
            drop(FUTEX.1.wait(guard).unwrap());
        }
    }

    pub(super) fn wake(_word: &AtomicU32) {
        drop(FUTEX.0.lock().unwrap());
        // Waking every waiter is allowed: futex waiters tolerate spurious
        // returns and re-check their word.
        FUTEX.1.notify_all();
    }
}

/// Makes a SeqCst read-modify-write and the SeqCst loads after it one
/// ordered step, for loom only.
///
/// In real builds this is nothing: SeqCst operations already form one total
/// order (C++20 [atomics.order]), and on x86 the locked RMW is a full
/// barrier. loom models SeqCst accesses as AcqRel and only SeqCst fences
/// as SeqCst (loom's README, "Unsupported features"), so without this fence
/// it reports store-buffering outcomes of the sleep/wake protocols ("a
/// sleeper announces itself, then re-checks; a waker changes the condition,
/// then looks for sleepers") that cannot happen.
#[inline(always)]
pub(crate) fn loom_sc_fence() {
    #[cfg(depengine_loom)]
    fence(Ordering::SeqCst);
}

/// Asks the CPU to bring the `lines` cache lines from `addr` into this
/// core's cache in a writable state (`prefetchw`), without waiting for them.
/// A hint only: no effect on what any thread reads or writes, nothing under
/// loom or off x86-64.
#[inline(always)]
pub(crate) fn prefetch_for_write(addr: *const u8, lines: usize) {
    on_each_line(addr, lines, |_line| {
        #[cfg(all(target_arch = "x86_64", not(depengine_loom), not(miri)))]
        // SAFETY: `prefetchw` never faults, whatever the address, and
        // changes nothing but which lines this core caches (a CPU without
        // it executes the opcode as a NOP).
        unsafe {
            std::arch::asm!("prefetchw [{0}]", in(reg) _line, options(nostack, preserves_flags, readonly));
        }
    });
}

/// Asks the CPU to move the `lines` cache lines from `addr` out of this
/// core's private caches into the shared last-level cache (`cldemote`), so
/// that another core's next access is served from there rather than by a
/// snoop of this core. A hint only: no effect on what any thread reads or
/// writes, nothing under loom or off x86-64.
#[inline(always)]
pub(crate) fn demote(addr: *const u8, lines: usize) {
    on_each_line(addr, lines, |_line| {
        #[cfg(all(target_arch = "x86_64", not(depengine_loom), not(miri)))]
        // SAFETY: `cldemote` never faults, whatever the address, and
        // changes nothing but where the line is cached (a CPU without it,
        // AMD's included, executes the opcode as a NOP).
        unsafe {
            std::arch::asm!("cldemote [{0}]", in(reg) _line, options(nostack, preserves_flags, readonly));
        }
    });
}

/// Calls `hint` with the address of each of the `lines` cache lines from
/// `addr`: on x86-64 outside loom, the only builds with cache hints.
#[inline(always)]
fn on_each_line(addr: *const u8, lines: usize, hint: impl Fn(*const u8)) {
    #[cfg(all(target_arch = "x86_64", not(depengine_loom), not(miri)))]
    for line in 0..lines {
        hint(addr.wrapping_add(line * 64));
    }
    #[cfg(not(all(target_arch = "x86_64", not(depengine_loom), not(miri))))]
    let _ = (addr, lines, hint);
}

/// A hint to the CPU that we are in a spin loop (a model-checker yield under loom).
#[inline(always)]
pub(crate) fn spin_hint() {
    #[cfg(not(depengine_loom))]
    std::hint::spin_loop();
    #[cfg(depengine_loom)]
    loom::thread::yield_now();
}
