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

use crate::base::error::OpError;
use crate::base::tuning::{RATE_SPAN_MIN, RATE_SPAN_RESTART, SHORT_OP};
use crate::base::tuning::{SHARDS, WAIT_SPINS};
use crate::graph::dispatch::{shards_in, Dispatcher};
use crate::mem::completion::Completion;
use crate::mem::pool::{Pool, Pooled};
use crate::sync::{
    futex_wait, futex_wait_for, futex_wake_all, loom_sc_fence, spin_hint, AtomicPtr, AtomicU32, AtomicU64, Ordering,
    UnsafeCell,
};
use crossbeam_utils::CachePadded;
use std::sync::atomic as std_atomic;
use std::sync::Arc;
use std::task::Waker;

/// How a waiting thread helps: `help` runs one ready operation if it finds
/// one; `can_sleep` says whether the thread may sleep when it finds none
/// (see `ExecutorTraits::waiters_can_sleep`).
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

/// Counts finished operations, per dispatch shard (`dispatch.rs`,
/// "Shards"): an operation counts in the shard that counted it dispatched,
/// and a shard's pending count is its dispatched count less its finished
/// count. So a pusher, which checks its own shard's count against the cap
/// on every push, reads nothing another pusher writes, and a completion
/// writes the line of its operation's shard only. The engine's pending
/// count sums the shards.
///
/// A push costs no locked instruction for the count: pushers only read
/// `finished`, and keep a copy of it on a line of their own
/// (`finished_seen`, a plain store now and then), which bounds the pending
/// count without reading the workers' line at every push
/// ([`pending_at_most`](Self::pending_at_most)); `wait_all` sleeps on
/// `epoch`.
#[repr(C)]
pub(crate) struct PendingCounter {
    /// Bumped by each wake-up; sleepers (waits for all, throttled
    /// pushers) sleep on it. On the first line, with `sleepers`, which
    /// every `done` reads, and the drain rate (read-mostly).
    epoch: AtomicU32,
    sleepers: AtomicU32,
    /// How fast the count rises, as throttled pushers see it.
    pub(crate) drain_rate: DrainRate,
    shards: [ShardCount; SHARDS],
}

/// One dispatch shard's finished count.
#[derive(Default)]
struct ShardCount {
    /// Written by whoever finishes the shard's operations.
    line: CachePadded<Finished>,
    /// A finished count the shard's pushers saw earlier
    /// ([`pending_at_most`](PendingCounter::pending_at_most)): on a line of
    /// its own that only pushers write (and rarely), so reading it on every
    /// push costs no transfer from the workers, which write `finished`.
    ///
    /// An estimate that orders nothing (any count once read from
    /// `finished` bounds the pending count): a std atomic, which loom does
    /// not explore, as for the statistics and the drain rate.
    finished_seen: CachePadded<std_atomic::AtomicU64>,
}

#[derive(Default)]
struct Finished {
    finished: AtomicU64,
    /// The finished count a throttled pusher of this shard sleeps for (0:
    /// none asleep); see [`sleep_until_finished`](PendingCounter::sleep_until_finished).
    /// Beside `finished`: every `done` reads it.
    wake_at: AtomicU64,
}

impl Default for PendingCounter {
    fn default() -> Self {
        PendingCounter {
            shards: std::array::from_fn(|_| ShardCount::default()),
            epoch: AtomicU32::new(0),
            sleepers: AtomicU32::new(0),
            drain_rate: DrainRate::default(),
        }
    }
}

impl PendingCounter {
    /// `n` operations of dispatch shard `shard` finished; wakes `wait_all`
    /// sleepers when `idle()` says that leaves nothing pending, and a
    /// throttled pusher of the shard when its count reaches the one it
    /// sleeps for. Returns whether it woke the waits for all (the caller
    /// then answers the futures among them, [`AllWaiters`]).
    ///
    /// `idle` sums every shard: by the SeqCst order of the adds, the last
    /// completion sees all the others.
    #[inline]
    pub(crate) fn done(&self, shard: usize, n: u64, idle: impl FnOnce() -> bool) -> bool {
        let line = &self.shards[shard].line;
        let finished = line.finished.fetch_add(n, Ordering::SeqCst) + n;
        loom_sc_fence();
        if self.sleepers.load(Ordering::SeqCst) > 0 && idle() {
            self.wake_all();
            return true;
        }
        let wake_at = line.wake_at.load(Ordering::SeqCst);
        if wake_at != 0
            && finished >= wake_at
            && line.wake_at.compare_exchange(wake_at, 0, Ordering::SeqCst, Ordering::Relaxed).is_ok()
        {
            self.wake_all();
        }
        false
    }

    /// A future waiting for all announces itself, as a sleeper does,
    /// before it registers and re-checks [`is_idle`](Self::is_idle): by
    /// the SeqCst order, either its re-check sees the last completion, or
    /// that completion sees it and wakes the registered futures.
    pub(crate) fn announce(&self) {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
    }

    /// Undoes [`announce`](Self::announce).
    pub(crate) fn withdraw(&self) {
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether every operation submitted so far has finished.
    pub(crate) fn is_idle(&self, dispatcher: &Dispatcher) -> bool {
        loom_sc_fence();
        self.all_finished(dispatcher)
    }

    /// Wakes every thread asleep on the count (waits for all, throttled
    /// pushers); each re-checks its own condition.
    fn wake_all(&self) {
        self.epoch.fetch_add(1, Ordering::Release);
        futex_wake_all(&self.epoch);
    }

    /// Operations of dispatch shard `shard` finished so far.
    #[inline]
    pub(crate) fn finished(&self, shard: usize) -> u64 {
        self.shards[shard].line.finished.load(Ordering::SeqCst)
    }

    /// Operations of the dispatch shards of `mask` finished so far.
    pub(crate) fn finished_in(&self, mask: u32) -> u64 {
        shards_in(mask).map(|s| self.finished(s)).sum()
    }

    /// A throttled pusher sleeps until `target` operations have finished
    /// or `timeout` has passed, whichever comes first (spurious returns
    /// are possible: the caller re-checks). Several may sleep at once: the
    /// lowest target is armed, and each woken pusher re-arms its own.
    ///
    /// The protocol is the module's: the pusher arms `wake_at` (SeqCst),
    /// then re-checks `finished`; `done` adds to `finished` (SeqCst), then
    /// reads `wake_at`. Whichever comes second sees the other, so the
    /// pusher either does not sleep or is woken (the disarming CAS admits
    /// one waker per arming).
    pub(crate) fn sleep_until_finished(&self, shard: usize, target: u64, timeout: std::time::Duration) {
        debug_assert!(target != 0);
        let line = &self.shards[shard].line;
        let epoch = self.epoch.load(Ordering::Acquire);
        let mut armed = line.wake_at.load(Ordering::Relaxed);
        while armed == 0 || armed > target {
            match line.wake_at.compare_exchange_weak(armed, target, Ordering::SeqCst, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => armed = now,
            }
        }
        loom_sc_fence();
        if line.finished.load(Ordering::SeqCst) < target {
            futex_wait_for(&self.epoch, epoch, timeout);
        }
        // Disarm what is still ours (timed out, or woken for another
        // sleeper's lower target); a later sleeper re-arms its own.
        let _ = line.wake_at.compare_exchange(target, 0, Ordering::SeqCst, Ordering::Relaxed);
    }

    /// Operations of dispatch shard `shard` dispatched (`dispatched` of
    /// them) and not finished.
    #[inline]
    pub(crate) fn pending(&self, shard: usize, dispatched: u64) -> u64 {
        dispatched.saturating_sub(self.finished(shard))
    }

    /// A bound the pending count cannot exceed, read without touching the
    /// workers' line: `dispatched` less a finished count seen earlier
    /// ([`pending_seen`](Self::pending_seen)), which can only have grown
    /// since. A push compares this with its limits and reads the exact
    /// count only when the bound reaches one.
    #[inline]
    pub(crate) fn pending_at_most(&self, shard: usize, dispatched: u64) -> u64 {
        dispatched.saturating_sub(self.shards[shard].finished_seen.load(std_atomic::Ordering::Relaxed))
    }

    /// [`pending`](Self::pending); when that is under `limit`, keeps the
    /// finished count it read for [`pending_at_most`](Self::pending_at_most)
    /// (at the limit the bound would be read and passed over at the next
    /// push anyway). Racing pushers may store their counts out of order;
    /// an older count only loosens the bound.
    #[inline]
    pub(crate) fn pending_seen(&self, shard: usize, dispatched: u64, limit: u64) -> u64 {
        let finished = self.finished(shard);
        let pending = dispatched.saturating_sub(finished);
        if pending < limit {
            self.shards[shard].finished_seen.store(finished, std_atomic::Ordering::Relaxed);
        }
        pending
    }

    /// Whether every operation submitted so far has finished.
    ///
    /// The order of the reads matters: an operation pushed from a body is
    /// submitted before that body's operation finishes, so once `finished`
    /// counts the parent, the child is either still undispatched (counted
    /// there) or dispatched (counted in `dispatched`, read last).
    ///
    /// The shards read are those active before the finished counts: one
    /// activated since holds only operations pushed during this call.
    pub(crate) fn all_finished(&self, dispatcher: &Dispatcher) -> bool {
        let finished = self.finished_in(dispatcher.active_mask());
        dispatcher.undispatched() == 0 && dispatcher.dispatched() == finished
    }

    /// Blocks until every operation submitted so far has finished, running
    /// `help` while it finds work. Gives up at `deadline`, if any; returns whether every operation
    /// finished.
    pub(crate) fn wait_zero_until(
        &self,
        dispatcher: &Dispatcher,
        helper: Helper<impl FnMut() -> bool>,
        deadline: Option<std::time::Instant>,
    ) -> bool {
        let left = || deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
        // The answer is the look that ended the wait: a second look could
        // see work another thread pushed since, and report a timeout that
        // never happened.
        let mut finished = false;
        help_spin_sleep(
            || {
                finished = self.all_finished(dispatcher);
                finished || left().is_some_and(|l| l.is_zero())
            },
            helper,
            || {
                let epoch = self.epoch.load(Ordering::Acquire);
                self.sleepers.fetch_add(1, Ordering::SeqCst);
                loom_sc_fence();
                // Whoever finishes the last pending operation wakes us; an
                // undispatched one will be dispatched and finish too.
                if !self.all_finished(dispatcher) {
                    match left() {
                        None => futex_wait(&self.epoch, epoch),
                        Some(left) => crate::sync::futex_wait_for(&self.epoch, epoch, left),
                    }
                }
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
            },
        );
        finished
    }
}

/// The rendezvous between a waiter and the marker operation that answers
/// it: a blocking `wait_var` (a futex), a future (a [`Waker`]), or a data
/// guard (which also receives the marker's [`Completion`]). Pooled; shared
/// by the two until both have let go (`refs`).
///
/// # Protocol
///
/// `state` holds flags. The marker writes its answer (`error`,
/// `completion`), then sets `DONE` (release); the waiter reads the answer
/// after it sees `DONE` (acquire). A blocking waiter sets `SLEEPING`
/// before it sleeps on the futex; the marker wakes it if it saw the flag.
/// A future stores its waker under `LOCKED`, a lock only the waiter ever
/// takes, and only while `DONE` is unset; it releases it with `WAKER` set.
/// The marker's `fetch_or(DONE)` then decides who owns the waker cell from
/// the flags it replaced: `WAKER` without `LOCKED`, the marker (it takes
/// the waker and wakes it; the waiter can no longer lock); `LOCKED`, the
/// waiter (its unlocking CAS fails on `DONE`, and it empties the cell).
#[derive(Debug, Default)]
pub(crate) struct WaitSlot {
    state: AtomicU32,
    refs: AtomicU32,
    /// Written by the marker before `DONE`, read by the waiter after.
    error: UnsafeCell<Option<Arc<OpError>>>,
    /// An access marker's completion (data guards); as `error`.
    completion: UnsafeCell<Option<Completion>>,
    /// A future's waker, owned as the protocol above says.
    waker: UnsafeCell<Option<Waker>>,
    /// The next slot of [`AllWaiters`]' list.
    next: AtomicU32,
    free_link: AtomicU32,
}

impl Pooled for WaitSlot {
    fn free_link(&self) -> &AtomicU32 {
        &self.free_link
    }
}

// SAFETY: `error` and `completion` are written by the marker before it
// publishes `DONE` and read by the waiter after it observes `DONE`
// (release/acquire); `waker` is reached by one side at a time, as the
// protocol on the type says. `Completion` and `Waker` are `Send`.
unsafe impl Sync for WaitSlot {}

/// A blocking waiter sleeps on the futex.
const SLEEPING: u32 = 1;
/// The marker has answered.
const DONE: u32 = 2;
/// The waiter is storing its waker.
const LOCKED: u32 = 4;
/// A waker is stored.
const WAKER: u32 = 8;

impl WaitSlot {
    /// Prepares a freshly taken slot: two references, not done.
    pub(crate) fn arm(&self) {
        self.state.store(0, Ordering::Relaxed);
        self.refs.store(2, Ordering::Relaxed);
    }

    /// The marker ran: hands the variable's failure (if any) and, for an
    /// access, its completion to the waiter, and wakes it. Returns whether
    /// the caller dropped the last reference.
    pub(crate) fn deliver(&self, error: Option<Arc<OpError>>, completion: Option<Completion>) -> bool {
        // SAFETY: until `DONE` is published only the marker touches these.
        unsafe {
            self.error.with_mut(|p| *p = error);
            self.completion.with_mut(|p| *p = completion);
        }
        let before = self.state.fetch_or(DONE, Ordering::AcqRel);
        if before & SLEEPING != 0 {
            futex_wake_all(&self.state);
        }
        if before & (WAKER | LOCKED) == WAKER {
            // SAFETY: the waker cell is ours (the protocol on the type).
            if let Some(waker) = unsafe { self.waker.with_mut(|p| (*p).take()) } {
                waker.wake();
            }
        }
        self.release()
    }

    /// Whether the marker has answered (then [`take`](Self::take) may be
    /// called).
    pub(crate) fn is_done(&self) -> bool {
        self.state.load(Ordering::Acquire) & DONE != 0
    }

    /// The marker's answer, once [`is_done`](Self::is_done): the failure and
    /// the completion it delivered. By the waiter only.
    pub(crate) fn take(&self) -> (Option<Arc<OpError>>, Option<Completion>) {
        debug_assert!(self.is_done());
        // SAFETY: `DONE` was published with release after the marker's
        // last write of these, and the marker never touches them again.
        unsafe { (self.error.with_mut(|p| (*p).take()), self.completion.with_mut(|p| (*p).take())) }
    }

    /// Blocks until delivered, running `help` while it finds work.
    pub(crate) fn wait(&self, helper: Helper<impl FnMut() -> bool>) {
        help_spin_sleep(
            || self.is_done(),
            helper,
            || {
                let now = self.state.load(Ordering::Acquire);
                if now & DONE == 0
                    && (now & SLEEPING != 0
                        || self
                            .state
                            .compare_exchange(now, now | SLEEPING, Ordering::AcqRel, Ordering::Acquire)
                            .is_ok())
                {
                    futex_wait(&self.state, now | SLEEPING);
                }
            },
        );
    }

    /// For a future: whether the marker has answered; if not, leaves
    /// `waker` to be woken when it does.
    pub(crate) fn poll_done(&self, waker: &Waker) -> bool {
        let now = self.state.load(Ordering::Acquire);
        if now & DONE != 0 {
            return true;
        }
        if self.state.compare_exchange(now, now | LOCKED, Ordering::Acquire, Ordering::Acquire).is_err() {
            return true; // only the marker changes the state meanwhile: DONE
        }
        // SAFETY: we hold `LOCKED`, so the cell is ours.
        unsafe {
            self.waker.with_mut(|p| match &mut *p {
                Some(old) if old.will_wake(waker) => {}
                slot => *slot = Some(waker.clone()),
            })
        };
        let unlocked = (now & !LOCKED) | WAKER;
        if self.state.compare_exchange(now | LOCKED, unlocked, Ordering::AcqRel, Ordering::Acquire).is_err() {
            // DONE came while we held the lock: the marker left the cell
            // to us, and we are being polled, so no wake-up is needed.
            // SAFETY: as above (the marker saw `LOCKED`).
            drop(unsafe { self.waker.with_mut(|p| (*p).take()) });
            return true;
        }
        false
    }

    /// For a future dropped before its answer: takes its waker back, so
    /// that nothing of the waiter's stays behind.
    pub(crate) fn cancel(&self) {
        let now = self.state.load(Ordering::Acquire);
        if now & DONE != 0
            || self.state.compare_exchange(now, now | LOCKED, Ordering::Acquire, Ordering::Acquire).is_err()
        {
            return; // answered: the marker took (or never had) the waker
        }
        // SAFETY: we hold `LOCKED`.
        let waker = unsafe { self.waker.with_mut(|p| (*p).take()) };
        // On failure DONE came meanwhile; the cell is empty either way.
        let _ = self.state.compare_exchange(now | LOCKED, now & !WAKER, Ordering::AcqRel, Ordering::Relaxed);
        drop(waker);
    }

    /// Drops one of the two references; returns whether it was the last.
    /// Whoever lets go last (both sides have, so the marker has answered)
    /// gives back an access the waiter never took: a future dropped before
    /// or after the answer, but before it took it.
    pub(crate) fn release(&self) -> bool {
        let last = self.refs.fetch_sub(1, Ordering::AcqRel) == 1;
        if last {
            // SAFETY: the other side has let go (AcqRel above): nobody else
            // touches the slot until it is given back.
            if let Some(done) = unsafe { self.completion.with_mut(|p| (*p).take()) } {
                done.signal();
            }
        }
        last
    }
}

/// The futures waiting for the whole engine to be idle (`wait_all`): a
/// lock-free stack of their wait slots. A waiter pushes its slot; whoever
/// sees the engine idle with waiters announced takes the whole stack at
/// once (a swap, so no ABA) and answers every slot on it.
pub(crate) struct AllWaiters {
    head: AtomicU32,
}

/// The empty stack.
const NO_SLOT: u32 = u32::MAX;

impl Default for AllWaiters {
    fn default() -> Self {
        AllWaiters { head: AtomicU32::new(NO_SLOT) }
    }
}

impl AllWaiters {
    /// Adds slot `ws` (armed: one reference is the stack's).
    pub(crate) fn push(&self, slots: &Pool<WaitSlot>, ws: u32) {
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            slots.get(ws).next.store(head, Ordering::Relaxed);
            match self.head.compare_exchange_weak(head, ws, Ordering::SeqCst, Ordering::Relaxed) {
                Ok(_) => return,
                Err(now) => head = now,
            }
        }
    }

    /// Answers every slot on the stack, giving back those whose waiter
    /// has let go already.
    pub(crate) fn wake_all(&self, slots: &Pool<WaitSlot>) {
        let mut ws = self.head.swap(NO_SLOT, Ordering::SeqCst);
        while ws != NO_SLOT {
            let slot = slots.get(ws);
            let next = slot.next.load(Ordering::Relaxed);
            if slot.deliver(None, None) {
                slots.give(ws);
            }
            ws = next;
        }
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

// DrainRate is an estimate that orders nothing: std atomics, which loom
// does not explore (as for the statistics).
/// How fast the workers finish operations, as throttled pushers see it: the
/// finished count and the time at the start of the current span, and
/// whether the last measured span was one of short operations. Written
/// only by throttled pushers (relaxed: an estimate, and two racing pushers
/// at worst mix two recent spans).
pub(crate) struct DrainRate {
    origin: std::time::Instant,
    span_finished: std_atomic::AtomicU64,
    span_nanos: std_atomic::AtomicU64,
    /// The last measured time per operation was under [`SHORT_OP`]
    /// (written only when it changes: dispatchers read it).
    short: std_atomic::AtomicBool,
}

impl Default for DrainRate {
    fn default() -> Self {
        DrainRate {
            origin: std::time::Instant::now(),
            span_finished: std_atomic::AtomicU64::new(0),
            span_nanos: std_atomic::AtomicU64::new(0),
            short: std_atomic::AtomicBool::new(false),
        }
    }
}

impl DrainRate {
    /// With `finished` operations finished now: the time the workers took
    /// per operation over the current span, if the span is long enough and
    /// any finished in it (none: they are not draining, or are held). A
    /// time measured also decides [`ops_are_short`](Self::ops_are_short).
    pub(crate) fn time_per_op(&self, finished: u64) -> Option<std::time::Duration> {
        let now = self.origin.elapsed().as_nanos() as u64;
        let (then, start) = (
            self.span_finished.load(std_atomic::Ordering::Relaxed),
            self.span_nanos.load(std_atomic::Ordering::Relaxed),
        );
        let (done, took) = (finished.saturating_sub(then), now.saturating_sub(start));
        if took >= RATE_SPAN_RESTART.as_nanos() as u64 {
            self.span_finished.store(finished, std_atomic::Ordering::Relaxed);
            self.span_nanos.store(now, std_atomic::Ordering::Relaxed);
        }
        if done == 0 || took < RATE_SPAN_MIN.as_nanos() as u64 {
            return None;
        }
        let per_op = std::time::Duration::from_nanos(took / done);
        let short = per_op < SHORT_OP;
        if self.short.load(std_atomic::Ordering::Relaxed) != short {
            self.short.store(short, std_atomic::Ordering::Relaxed);
        }
        Some(per_op)
    }

    /// Whether the workers' last measured drain was one of short
    /// operations ([`SHORT_OP`]); `false` until a throttled pusher has
    /// measured one.
    #[inline]
    pub(crate) fn ops_are_short(&self) -> bool {
        self.short.load(std_atomic::Ordering::Relaxed)
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::PendingCounter;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// Long enough that only a lost wake-up reaches it.
    const NEVER: Duration = Duration::from_secs(60);

    /// The pushers' bound never falls below the exact count, tightens only
    /// when an exact read under the limit refreshes it, and never goes
    /// back to the workers' line by itself.
    #[test]
    fn the_pushers_bound_is_never_below_the_pending_count() {
        let counter = PendingCounter::default();
        assert_eq!(counter.pending_at_most(0, 10), 10);
        counter.done(0, 4, || false);
        // Finished moved on; the bound keeps the count it last saw.
        assert_eq!((counter.pending(0, 10), counter.pending_at_most(0, 10)), (6, 10));
        // An exact read at the limit leaves the bound alone ...
        assert_eq!(counter.pending_seen(0, 10, 6), 6);
        assert_eq!(counter.pending_at_most(0, 10), 10);
        // ... one under it refreshes the bound.
        assert_eq!(counter.pending_seen(0, 10, 7), 6);
        assert_eq!(counter.pending_at_most(0, 12), 8);
        counter.done(0, 8, || false);
        assert_eq!(counter.pending(0, 12), 0);
        assert!(counter.pending_at_most(0, 12) >= counter.pending(0, 12));
    }

    /// A throttled pusher's sleep ends when the count reaches its target,
    /// not at its timeout; the target it armed is disarmed after.
    #[test]
    fn a_sleeping_pusher_is_woken_by_the_completion_that_reaches_its_target() {
        let counter = Arc::new(PendingCounter::default());
        let sleeper = {
            let counter = counter.clone();
            std::thread::spawn(move || {
                let start = Instant::now();
                // (A futex may return spuriously: the caller re-checks.)
                while counter.finished(0) < 3 {
                    counter.sleep_until_finished(0, 3, NEVER);
                }
                start.elapsed()
            })
        };
        // Finish one at a time, giving the sleeper time to arm and sleep.
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(20));
            counter.done(0, 1, || false);
        }
        let slept = sleeper.join().unwrap();
        assert!(slept < NEVER / 2, "woken only by the timeout after {slept:?}");
        assert_eq!(counter.shards[0].line.wake_at.load(std::sync::atomic::Ordering::SeqCst), 0, "left armed");
    }

    /// A target already reached: no sleep at all. A target never reached:
    /// the timeout ends the sleep, which disarms it (so later completions
    /// do not issue wake-ups for nobody).
    #[test]
    fn a_reached_target_returns_at_once_and_a_timed_out_one_disarms() {
        let counter = PendingCounter::default();
        counter.done(0, 2, || false);
        let start = Instant::now();
        counter.sleep_until_finished(0, 2, NEVER);
        assert!(start.elapsed() < NEVER / 2);
        counter.sleep_until_finished(0, 5, Duration::from_millis(5));
        assert_eq!(counter.shards[0].line.wake_at.load(std::sync::atomic::Ordering::SeqCst), 0, "left armed");
        assert_eq!(counter.finished(0), 2);
    }

    /// A waker that counts its wake-ups; its strong count tells whether a
    /// slot still holds a clone.
    struct Counted(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for Counted {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// The wait slot's waker protocol in each order (Miri checks the cells):
    /// a registered waker is woken once by the answer and released; one
    /// cancelled first is released at the cancel and never woken; an answer
    /// before any poll needs no waker.
    #[test]
    fn a_wait_slot_wakes_or_releases_its_waker_in_every_order() {
        use super::WaitSlot;
        let counted = Arc::new(Counted(Default::default()));
        let waker = std::task::Waker::from(counted.clone());
        let wakes = || counted.0.load(std::sync::atomic::Ordering::SeqCst);

        let slot = WaitSlot::default();
        slot.arm();
        assert!(!slot.poll_done(&waker));
        assert!(!slot.poll_done(&waker), "a second poll keeps one waker");
        // (Held by `counted`, `waker` and the slot's clone.)
        assert_eq!(Arc::strong_count(&counted), 3);
        assert!(!slot.deliver(None, None));
        assert_eq!((wakes(), Arc::strong_count(&counted)), (1, 2));
        assert!(slot.poll_done(&waker) && slot.is_done());
        assert!(slot.release(), "the waiter lets go last");

        slot.arm();
        assert!(!slot.poll_done(&waker));
        slot.cancel();
        assert_eq!(Arc::strong_count(&counted), 2, "a cancelled waiter's waker stayed");
        assert!(!slot.release());
        assert!(slot.deliver(None, None), "the marker lets go last");
        assert_eq!(wakes(), 1, "a cancelled waiter was woken");

        slot.arm();
        assert!(!slot.deliver(None, None));
        assert!(slot.poll_done(&waker));
        assert_eq!((wakes(), Arc::strong_count(&counted)), (1, 2));
        assert!(slot.release());
    }

    /// The answer from another thread while the waiter polls and parks.
    #[test]
    fn a_wait_slot_answered_from_another_thread_wakes_its_waiter() {
        use super::WaitSlot;
        struct Unpark(std::thread::Thread);
        impl std::task::Wake for Unpark {
            fn wake(self: Arc<Self>) {
                self.0.unpark();
            }
        }
        let slot = Arc::new(WaitSlot::default());
        slot.arm();
        let marker = {
            let slot = slot.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(5));
                slot.deliver(None, None);
            })
        };
        let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
        let start = Instant::now();
        while !slot.poll_done(&waker) {
            std::thread::park_timeout(NEVER / 10);
            assert!(start.elapsed() < NEVER / 2, "not woken");
        }
        marker.join().unwrap();
    }

    /// The waiters' fields and the drain rate fit one line pair; each
    /// shard takes two more, the workers' `finished` and the pushers'
    /// `finished_seen`.
    #[test]
    fn the_counter_takes_one_line_pair_and_two_per_shard() {
        assert_eq!(std::mem::size_of::<PendingCounter>(), (1 + 2 * crate::base::tuning::SHARDS) * 128);
    }
}

/// Loom model of the throttled pusher's sleep (`--cfg depengine_loom`,
/// where a timed futex wait blocks like an untimed one): the completion
/// that reaches the target always wakes the sleeper.
#[cfg(all(test, depengine_loom))]
mod loom_models {
    use super::PendingCounter;
    use loom::sync::Arc;

    #[test]
    fn a_throttled_pusher_never_sleeps_through_its_target() {
        loom::model(|| {
            let counter = Arc::new(PendingCounter::default());
            let finisher = {
                let counter = counter.clone();
                loom::thread::spawn(move || {
                    counter.done(0, 1, || false);
                    counter.done(0, 1, || false);
                })
            };
            counter.sleep_until_finished(0, 2, std::time::Duration::from_secs(1));
            finisher.join().unwrap();
            assert_eq!(counter.finished(0), 2);
        });
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod drain_rate_tests {
    use super::DrainRate;
    use crate::base::tuning::RATE_SPAN_RESTART;
    use std::thread::sleep;

    /// A measured span decides whether operations are short, both ways.
    #[test]
    fn a_measured_drain_decides_whether_operations_are_short() {
        let rate = DrainRate::default();
        assert!(!rate.ops_are_short(), "short before anything was measured");
        // A hundred million operations in a little over a span: short
        // unless this thread stalls for 40 s.
        sleep(RATE_SPAN_RESTART * 2);
        let per_op = rate.time_per_op(100_000_000).expect("a span long enough to measure");
        assert!(rate.ops_are_short(), "{per_op:?} per operation is not short");
        // One operation in the next span: at least two milliseconds.
        sleep(RATE_SPAN_RESTART * 2);
        let per_op = rate.time_per_op(100_000_001).expect("a span long enough to measure");
        assert!(!rate.ops_are_short(), "{per_op:?} per operation is short");
    }
}

/// Loom models of the wait slot's waker protocol: the marker's answer
/// always wakes a registered future (a lost wake-up deadlocks the model's
/// `block_on`), and a future dropped while the answer comes leaves no
/// waker behind, whichever side goes first.
#[cfg(all(test, depengine_loom))]
mod waker_models {
    use super::WaitSlot;
    use loom::sync::Arc;
    use std::task::{Poll, Wake, Waker};

    /// A waker whose clones are counted (a std `Arc`, outside the model).
    struct Counted;
    impl Wake for Counted {
        fn wake(self: std::sync::Arc<Self>) {}
    }

    #[test]
    fn the_answer_wakes_a_registered_future() {
        loom::model(|| {
            let slot = Arc::new(WaitSlot::default());
            slot.arm();
            let marker = {
                let slot = slot.clone();
                loom::thread::spawn(move || {
                    slot.deliver(None, None);
                })
            };
            loom::future::block_on(std::future::poll_fn(|cx| match slot.poll_done(cx.waker()) {
                true => Poll::Ready(()),
                false => Poll::Pending,
            }));
            assert!(slot.is_done());
            marker.join().unwrap();
        });
    }

    #[test]
    fn a_cancelled_future_leaves_no_waker() {
        loom::model(|| {
            let slot = Arc::new(WaitSlot::default());
            slot.arm();
            let counted = std::sync::Arc::new(Counted);
            let waker = Waker::from(counted.clone());
            let marker = {
                let slot = slot.clone();
                loom::thread::spawn(move || {
                    slot.deliver(None, None);
                })
            };
            if !slot.poll_done(&waker) {
                slot.cancel();
            }
            slot.release();
            marker.join().unwrap();
            drop(waker);
            assert_eq!(std::sync::Arc::strong_count(&counted), 1, "a waker stayed in the slot");
        });
    }
}
