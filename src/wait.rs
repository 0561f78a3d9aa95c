//! The blocking side of the engine: waiting for variables and for all work,
//! and the engine-wide record of failures that `wait_all` reports.
//!
//! Waits block on futexes (atomic-wait), never on an OS mutex. A waiting
//! thread first *helps*: while the executor has ready work it can run, it
//! runs it instead of sleeping, so a push-then-wait round trip need not cross
//! cores and a wait inside an operation body cannot starve the work it waits
//! for. Only when there is nothing to help with does it spin briefly and
//! then sleep.
//!
//! # Sleep protocol (no lost wake-up)
//!
//! A sleeper announces itself (SeqCst) and re-checks its condition before it
//! sleeps; a waker changes the condition (SeqCst) and then looks for
//! announced sleepers. By the SeqCst total order, either the sleeper's
//! re-check sees the change or the waker sees the sleeper.

use crate::dispatch::Dispatcher;
use crate::error::OpError;
use crate::pool::Pooled;
use crate::sync::{
    futex_wait, futex_wake_all, loom_sc_fence, spin_hint, AtomicPtr, AtomicU32, AtomicU64, Ordering, UnsafeCell,
};
use crossbeam_utils::CachePadded;
use std::sync::Arc;

/// Spin iterations a waiter tries (helping or pausing) before it sleeps.
const WAIT_SPINS: u32 = if cfg!(depengine_loom) { 1 } else { 2_000 };

/// How a waiting thread helps: `help` runs one ready operation if it finds
/// one; `can_sleep` says whether the thread may sleep when it finds none
/// (see `Executor::waiters_can_sleep`).
pub(crate) struct Helper<H> {
    pub(crate) help: H,
    pub(crate) can_sleep: bool,
}

/// The shape of every blocking wait: until `done()`, run work while the
/// helper finds some, else spin a little, else `sleep` (which announces
/// itself, re-checks and parks on a futex, per the protocol above) — or,
/// where waiters may not sleep, yield and look again.
fn help_spin_sleep(mut done: impl FnMut() -> bool, mut helper: Helper<impl FnMut() -> bool>, mut sleep: impl FnMut()) {
    let mut spins = 0;
    while !done() {
        if (helper.help)() {
            spins = 0;
        } else if spins < WAIT_SPINS {
            spins += 1;
            spin_hint();
        } else {
            if helper.can_sleep {
                sleep();
            } else {
                std::thread::yield_now();
            }
            spins = 0;
        }
    }
}

/// Counts finished operations; pending = dispatched (the dispatcher's
/// ticket count) − finished. The pushing thread never writes here, so a push
/// costs no locked instruction for the count; `wait_all` sleeps on it.
pub(crate) struct PendingCounter {
    finished: CachePadded<AtomicU64>,
    epoch: AtomicU32,
    sleepers: AtomicU32,
}

impl Default for PendingCounter {
    fn default() -> Self {
        PendingCounter {
            finished: CachePadded::new(AtomicU64::new(0)),
            epoch: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
        }
    }
}

impl PendingCounter {
    /// `n` operations finished; wakes `wait_all` sleepers when that leaves
    /// none of the `dispatched()` ones pending.
    #[inline]
    pub(crate) fn done(&self, n: u64, dispatched: impl FnOnce() -> u64) {
        let finished = self.finished.fetch_add(n, Ordering::SeqCst) + n;
        loom_sc_fence();
        if self.sleepers.load(Ordering::SeqCst) > 0 && finished == dispatched() {
            self.epoch.fetch_add(1, Ordering::Release);
            futex_wake_all(&self.epoch);
        }
    }

    /// Operations dispatched and not finished.
    #[inline]
    pub(crate) fn pending(&self, dispatched: u64) -> u64 {
        dispatched.saturating_sub(self.finished.load(Ordering::SeqCst))
    }

    /// Whether every operation submitted so far has finished.
    ///
    /// The order of the reads matters: an operation pushed from a body is
    /// submitted before that body's operation finishes, so once `finished`
    /// counts the parent, the child is either still undispatched (counted
    /// there) or dispatched (counted in `dispatched`, read last).
    fn all_finished(&self, dispatcher: &Dispatcher) -> bool {
        let finished = self.finished.load(Ordering::SeqCst);
        dispatcher.undispatched() == 0 && dispatcher.dispatched() == finished
    }

    /// Blocks until every operation submitted so far has finished, running
    /// `help` while it finds work.
    pub(crate) fn wait_zero(&self, dispatcher: &Dispatcher, helper: Helper<impl FnMut() -> bool>) {
        help_spin_sleep(
            || self.all_finished(dispatcher),
            helper,
            || {
                let epoch = self.epoch.load(Ordering::Acquire);
                self.sleepers.fetch_add(1, Ordering::SeqCst);
                loom_sc_fence();
                // Whoever finishes the last pending operation wakes us; an
                // undispatched one will be dispatched and finish too.
                if !self.all_finished(dispatcher) {
                    futex_wait(&self.epoch, epoch);
                }
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
            },
        );
    }
}

/// The rendezvous between a `wait_var` caller and its marker operation.
/// Pooled; shared by the two until both have let go (`refs`).
#[derive(Debug, Default)]
pub(crate) struct WaitSlot {
    /// `WAITING`, `SLEEPING` (the waiter is in the futex) or `DONE`.
    state: AtomicU32,
    refs: AtomicU32,
    /// Written by the marker before `DONE`, read by the waiter after.
    error: UnsafeCell<Option<Arc<OpError>>>,
    free_link: AtomicU32,
}

impl Pooled for WaitSlot {
    fn free_link(&self) -> &AtomicU32 {
        &self.free_link
    }
}

// SAFETY: `error` is written by the marker before it publishes `DONE` and
// read by the waiter after it observes `DONE` (release/acquire).
unsafe impl Sync for WaitSlot {}

const WAITING: u32 = 0;
const SLEEPING: u32 = 1;
const DONE: u32 = 2;

impl WaitSlot {
    /// Prepares a freshly taken slot: two references, not done.
    pub(crate) fn arm(&self) {
        self.state.store(WAITING, Ordering::Relaxed);
        self.refs.store(2, Ordering::Relaxed);
    }

    /// The marker ran: hands the variable's failure (if any) to the waiter.
    /// Returns whether the caller dropped the last reference.
    pub(crate) fn deliver(&self, error: Option<Arc<OpError>>) -> bool {
        // SAFETY: until `DONE` is published only the marker touches `error`.
        unsafe { self.error.with_mut(|p| *p = error) };
        if self.state.swap(DONE, Ordering::AcqRel) == SLEEPING {
            futex_wake_all(&self.state);
        }
        self.release()
    }

    /// Blocks until delivered, running `help` while it finds work; returns
    /// the delivered failure. Returns whether the caller dropped the last
    /// reference alongside.
    pub(crate) fn wait(&self, helper: Helper<impl FnMut() -> bool>) -> (Option<Arc<OpError>>, bool) {
        help_spin_sleep(
            || self.state.load(Ordering::Acquire) == DONE,
            helper,
            || match self.state.compare_exchange(WAITING, SLEEPING, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) | Err(SLEEPING) => futex_wait(&self.state, SLEEPING),
                Err(_) => {} // DONE meanwhile
            },
        );
        // SAFETY: `DONE` was published with release after the marker's
        // last write, and the marker never touches `error` again.
        let error = unsafe { self.error.with_mut(|p| (*p).take()) };
        (error, self.release())
    }

    fn release(&self) -> bool {
        self.refs.fetch_sub(1, Ordering::AcqRel) == 1
    }
}

/// The first failure since the last `wait_all` (lock-free, set once).
pub(crate) struct FirstError(AtomicPtr<OpError>);

impl Default for FirstError {
    fn default() -> Self {
        FirstError(AtomicPtr::new(std::ptr::null_mut()))
    }
}

impl FirstError {
    /// Records `error` unless an earlier one is already held.
    pub(crate) fn record(&self, error: &Arc<OpError>) {
        if !self.0.load(Ordering::Acquire).is_null() {
            return;
        }
        let raw = Arc::into_raw(error.clone()) as *mut OpError;
        if self.0.compare_exchange(std::ptr::null_mut(), raw, Ordering::AcqRel, Ordering::Acquire).is_err() {
            // SAFETY: `raw` came from `Arc::into_raw` above and was not published.
            drop(unsafe { Arc::from_raw(raw) });
        }
    }

    /// Takes the recorded failure, leaving none.
    pub(crate) fn take(&self) -> Option<Arc<OpError>> {
        let raw = self.0.swap(std::ptr::null_mut(), Ordering::AcqRel);
        // SAFETY: a non-null pointer was published by `record` from
        // `Arc::into_raw`, and the swap gave us its only copy.
        (!raw.is_null()).then(|| unsafe { Arc::from_raw(raw) })
    }
}

impl Drop for FirstError {
    fn drop(&mut self) {
        drop(self.take());
    }
}
