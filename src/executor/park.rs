//! Spin-then-park for idle workers (atomic-wait futexes).
//!
//! # States of a worker
//!
//! `RUNNING` (has work) → `SPINNING` (idle, polling the ring; at most one
//! worker of a pool at a time) → `PARKED` (asleep on the futex). A worker
//! that runs out of work becomes the spinner if there is none, else parks at
//! once: one spinner is enough to pick up the next operation quickly, and on
//! a machine with as many workers as cores a second spinner would only take
//! the core the pushing thread needs.
//!
//! # Protocol (no lost wake-up)
//!
//! A producer publishes work, issues a SeqCst fence, and then: if a worker
//! is spinning it does nothing more (the spinner will see the work); else,
//! if one is parked, it bumps `epoch` and wakes one. A worker going to sleep
//! leaves `spinning` and enters `sleepers` with SeqCst RMWs, then re-checks
//! for work, then sleeps on `epoch` with the value it read *before*
//! announcing itself. By the SeqCst total order, either the worker's re-check
//! sees the work or the producer sees it spinning or asleep; and a bump
//! between the worker's read of `epoch` and its sleep makes the futex return
//! at once. When a worker is spinning a producer pays one fence and one load;
//! a syscall only when it must wake a sleeper.

use crate::sync::{fence, futex_wait, futex_wake_all, futex_wake_one, AtomicU32, Ordering};
use crossbeam_utils::CachePadded;

/// The sleep/wake rendezvous of one worker pool.
pub(crate) struct Sleep {
    epoch: CachePadded<AtomicU32>,
    sleepers: CachePadded<AtomicU32>,
    spinning: CachePadded<AtomicU32>,
}

impl Default for Sleep {
    fn default() -> Self {
        Sleep {
            epoch: CachePadded::new(AtomicU32::new(0)),
            sleepers: CachePadded::new(AtomicU32::new(0)),
            spinning: CachePadded::new(AtomicU32::new(0)),
        }
    }
}

impl Sleep {
    /// **running → spinning**: succeeds for at most one worker at a time.
    pub(crate) fn try_start_spinning(&self) -> bool {
        self.spinning.load(Ordering::Relaxed) == 0
            && self.spinning.compare_exchange(0, 1, Ordering::SeqCst, Ordering::Relaxed).is_ok()
    }

    /// **spinning → running / parking**.
    pub(crate) fn stop_spinning(&self) {
        self.spinning.fetch_sub(1, Ordering::SeqCst);
    }

    /// **→ parked**: sleeps unless `has_work()` says otherwise once the
    /// worker has announced itself. Returns after a wake-up (or a spurious
    /// return).
    pub(crate) fn park(&self, has_work: impl Fn() -> bool) {
        let epoch = self.epoch.load(Ordering::Acquire);
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        if !has_work() {
            futex_wait(&self.epoch, epoch);
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Work was published: wakes one parked worker unless one is spinning.
    #[inline]
    pub(crate) fn notify_one(&self) {
        fence(Ordering::SeqCst);
        if self.spinning.load(Ordering::Relaxed) == 0 && self.sleepers.load(Ordering::Relaxed) > 0 {
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
