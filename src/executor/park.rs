//! Spin-then-park for idle workers (atomic-wait futexes).
//!
//! # Protocol (no lost wake-up)
//!
//! An idle worker reads `epoch`, announces itself in `sleepers` (SeqCst),
//! re-checks for work and only then sleeps on `epoch` with the value it
//! read. A producer publishes work, issues a SeqCst fence and, only if it
//! sees a sleeper, bumps `epoch` and wakes one. Either the worker's re-check
//! sees the work or the producer sees the sleeper (SeqCst total order); and
//! a bump between the worker's read of `epoch` and its sleep makes the futex
//! return at once. When nobody sleeps a producer pays one fence and one
//! load, never a syscall.

use crate::sync::{fence, futex_wait, futex_wake_all, futex_wake_one, AtomicU32, Ordering};
use crossbeam_utils::CachePadded;

/// The sleep/wake rendezvous of one worker pool.
pub(crate) struct Sleep {
    epoch: CachePadded<AtomicU32>,
    sleepers: CachePadded<AtomicU32>,
}

impl Default for Sleep {
    fn default() -> Self {
        Sleep { epoch: CachePadded::new(AtomicU32::new(0)), sleepers: CachePadded::new(AtomicU32::new(0)) }
    }
}

impl Sleep {
    /// Parks the calling worker unless `has_work()` says otherwise once it
    /// has announced itself. Returns after a wake-up (or a spurious return).
    pub(crate) fn park(&self, has_work: impl Fn() -> bool) {
        let epoch = self.epoch.load(Ordering::Acquire);
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        if !has_work() {
            futex_wait(&self.epoch, epoch);
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Work was published: wakes one parked worker, if any.
    #[inline]
    pub(crate) fn notify_one(&self) {
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::Relaxed) > 0 {
            self.epoch.fetch_add(1, Ordering::Release);
            futex_wake_one(&self.epoch);
        }
    }

    /// Wakes every parked worker (shutdown).
    pub(crate) fn notify_all(&self) {
        fence(Ordering::SeqCst);
        self.epoch.fetch_add(1, Ordering::Release);
        futex_wake_all(&self.epoch);
    }
}
