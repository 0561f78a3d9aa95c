//! The dispatcher: linearizes pushes from every thread without blocking any.
//!
//! An operation touches several variable queues, and two threads appending
//! two operations to the same pair of queues in opposite orders would
//! deadlock them (each waits for the other on one variable; MXNet has this
//! hazard). So appends are *delegated*: at most one thread at a time — the
//! **combiner** — appends operations to queues, in one global order, the
//! *ticket* order. A push never waits for the combiner:
//!
//! - **fast path**: `busy` is 0 → the pusher CASes it to 1, becomes the
//!   combiner, drains anything queued earlier, dispatches its own operation,
//!   drains again and releases;
//! - **delegated**: `busy` is 1 → the pusher links its operation onto the
//!   lock-free submission stack and returns; the combiner picks it up before
//!   it releases.
//!
//! # Invariants
//!
//! - Only the thread holding `busy` reads the stack's contents, stamps
//!   tickets and appends to variable queues (the queues rely on one appender).
//! - Operations from one thread are dispatched in that thread's push order:
//!   the stack is reversed on each drain, and a fast-path combiner drains
//!   the stack before dispatching its own operation.
//! - No submission is stranded: releasing is `busy = 0`, light barrier, look
//!   at the stack; a delegated push is link, heavy barrier, look at `busy`
//!   (`barrier.rs`: the pair acts as a SeqCst fence on each side, the light
//!   one costing nothing on the push path). One of the two sees the other
//!   (Dekker), and whoever sees work takes `busy`. Before its heavy barrier
//!   a delegated push polls a few times: a stack found empty was swapped
//!   out by a combiner (with the operation: nothing to do), and `busy`
//!   found 0 is taken; only a combiner still at work after the polls
//!   costs the barrier.
//!
//! The combiner runs no user code: operations it finds ready are returned to
//! the caller, which schedules them after releasing (`core.rs`). So a body
//! may push and wait freely, and a combiner never blocks.
//!
//! # Tickets without a queue
//!
//! An operation with no variables that runs inside its own push (`core.rs`,
//! `unqueued_ticket`) still takes its place in the ticket order, through
//! [`take_ticket`](Dispatcher::take_ticket): the fast path above, with a
//! ticket stamped but nothing dispatched. So the ticket counter and the
//! dispatched count (what `pending` and `wait_all` count against) are two
//! words, both written only by the combiner.

use crate::barrier;
use crate::opr::OprBlock;
use crate::pool::{Pool, NIL};
use crate::sync::{spin_hint, AtomicU32, AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

/// Polls of a delegated push for the combiner to take its operation or
/// let go, before it pays for a heavy barrier (`barrier.rs`).
const HANDOVER_POLLS: u32 = if cfg!(depengine_loom) { 1 } else { 64 };

/// The combining dispatcher (see the module docs).
pub(crate) struct Dispatcher {
    busy: CachePadded<AtomicU32>,
    stack: CachePadded<AtomicU32>,
    /// The next ticket to stamp and the number of operations dispatched so
    /// far. Written only by the combiner (plain loads and stores: no locked
    /// instruction), read by anyone.
    counts: CachePadded<Counts>,
    /// Delegated submissions not yet stamped: counted by the pusher before
    /// it links the operation, uncounted by the combiner after stamping.
    /// Lets `wait_all` see an operation whose push has returned but which
    /// no combiner has dispatched yet (only the delegated path pays it).
    undispatched: CachePadded<AtomicU64>,
}

/// The combiner's two counters, on one line: every stamp writes both.
#[derive(Default)]
struct Counts {
    /// The next ticket: operations dispatched plus tickets taken alone.
    next_ticket: AtomicU64,
    /// Operations dispatched (appended to their queues) so far.
    dispatched: AtomicU64,
}

impl Default for Dispatcher {
    fn default() -> Self {
        Dispatcher {
            busy: CachePadded::new(AtomicU32::new(0)),
            stack: CachePadded::new(AtomicU32::new(NIL)),
            counts: CachePadded::new(Counts::default()),
            undispatched: CachePadded::new(AtomicU64::new(0)),
        }
    }
}

impl Dispatcher {
    /// Submits `op`. If this thread becomes the combiner, `dispatch(op,
    /// ticket)` is called for `op` and for every operation submitted
    /// meanwhile, in ticket order; otherwise the current combiner will.
    #[inline]
    pub(crate) fn submit(&self, oprs: &Pool<OprBlock>, op: u32, mut dispatch: impl FnMut(u32, u64)) {
        if self.busy.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            self.drain(oprs, &mut dispatch);
            self.stamp(op, &mut dispatch);
            self.release(oprs, &mut dispatch);
            return;
        }
        self.undispatched.fetch_add(1, Ordering::SeqCst);
        let block = oprs.get(op);
        let mut head = self.stack.load(Ordering::Relaxed);
        loop {
            block.link.store(head, Ordering::Relaxed);
            match self.stack.compare_exchange_weak(head, op, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => break,
                Err(actual) => head = actual,
            }
        }
        // The combiner usually drains the stack or lets go within a few
        // polls: then there is no handshake to pay for. Only a combiner
        // still at work after them costs the heavy barrier.
        for _ in 0..HANDOVER_POLLS {
            if self.stack.load(Ordering::Relaxed) == NIL {
                // Only a drain's swap writes NIL, and this load comes after
                // our link in the stack's modification order (coherence):
                // a drain after our link swapped out a chain holding our
                // operation, and dispatches it.
                return;
            }
            if self.take_if_idle() {
                self.release(oprs, &mut dispatch);
                return;
            }
            spin_hint();
        }
        barrier::heavy();
        if self.take_if_idle() {
            self.release(oprs, &mut dispatch);
        }
    }

    /// A delegated push's look at `busy`: takes it if no thread combines
    /// (a plain load first, so that a busy combiner's line is not asked for
    /// exclusively).
    #[inline]
    fn take_if_idle(&self) -> bool {
        self.busy.load(Ordering::Relaxed) == 0
            && self.busy.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    /// Takes the next ticket for an operation that is not queued (it runs
    /// inside its push), if this thread can become the combiner at once:
    /// operations submitted meanwhile are dispatched as usual, and the
    /// ticket is not counted as dispatched; `then` runs while still
    /// combining, right after (so that it sees exactly what was linearized
    /// before the ticket, such as the engine's closing). `None`: another
    /// thread is combining (the caller queues its operation instead of
    /// waiting), and `then` did not run.
    #[inline]
    pub(crate) fn take_ticket(
        &self,
        oprs: &Pool<OprBlock>,
        mut dispatch: impl FnMut(u32, u64),
        then: impl FnOnce(),
    ) -> Option<u64> {
        if self.busy.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return None;
        }
        self.drain(oprs, &mut dispatch);
        let ticket = self.next_ticket();
        then();
        self.release(oprs, &mut dispatch);
        Some(ticket)
    }

    /// Stamps the next ticket. Combiner only.
    #[inline(always)]
    fn next_ticket(&self) -> u64 {
        // Only the combiner writes the counters, and `busy`'s
        // acquire/release orders successive combiners, so load + store
        // cannot lose a count.
        let ticket = self.counts.next_ticket.load(Ordering::Relaxed);
        self.counts.next_ticket.store(ticket + 1, Ordering::Relaxed);
        ticket
    }

    #[inline(always)]
    fn stamp(&self, op: u32, dispatch: &mut impl FnMut(u32, u64)) {
        let ticket = self.next_ticket();
        let dispatched = self.counts.dispatched.load(Ordering::Relaxed);
        self.counts.dispatched.store(dispatched + 1, Ordering::Release);
        dispatch(op, ticket);
    }

    /// Operations dispatched so far (every operation submitted before this
    /// call, once [`flush`](Self::flush) has returned).
    #[inline]
    pub(crate) fn dispatched(&self) -> u64 {
        self.counts.dispatched.load(Ordering::SeqCst)
    }

    /// Tickets stamped so far: the operations dispatched and those run
    /// inside their push ([`take_ticket`](Self::take_ticket)).
    #[inline]
    pub(crate) fn tickets(&self) -> u64 {
        self.counts.next_ticket.load(Ordering::SeqCst)
    }

    /// Delegated submissions not yet dispatched. Read after the
    /// finished count and before [`dispatched`](Self::dispatched), a zero
    /// here means every push that returned before the finished operations
    /// did is counted as dispatched.
    #[inline]
    pub(crate) fn undispatched(&self) -> u64 {
        self.undispatched.load(Ordering::SeqCst)
    }

    /// Becomes the combiner (waiting for the current one, which runs no user
    /// code and so finishes soon) and dispatches everything submitted so
    /// far; then `then` runs while still combining (used to close the
    /// engine between two dispatches).
    pub(crate) fn flush(&self, oprs: &Pool<OprBlock>, mut dispatch: impl FnMut(u32, u64), then: impl FnOnce()) {
        let mut spins = 0u32;
        while self.busy.compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
            spins += 1;
            if spins % 64 == 0 {
                std::thread::yield_now();
            } else {
                spin_hint();
            }
        }
        self.drain(oprs, &mut dispatch);
        then();
        self.release(oprs, &mut dispatch);
    }

    /// Dispatches everything on the stack, oldest first; returns whether
    /// there was anything. Combiner only.
    #[inline(always)]
    fn drain(&self, oprs: &Pool<OprBlock>, dispatch: &mut impl FnMut(u32, u64)) -> bool {
        // The stack is empty on almost every call: one load, no call.
        if self.stack.load(Ordering::Relaxed) == NIL {
            return false;
        }
        self.drain_stack(oprs, dispatch);
        true
    }

    #[inline(never)]
    fn drain_stack(&self, oprs: &Pool<OprBlock>, dispatch: &mut impl FnMut(u32, u64)) {
        let mut top = self.stack.swap(NIL, Ordering::Acquire);
        // Reverse the LIFO chain into push order.
        let mut fifo = NIL;
        while top != NIL {
            let link = &oprs.get(top).link;
            let below = link.load(Ordering::Relaxed);
            link.store(fifo, Ordering::Relaxed);
            fifo = top;
            top = below;
        }
        let mut stamped = 0;
        while fifo != NIL {
            let next = oprs.get(fifo).link.load(Ordering::Relaxed);
            self.stamp(fifo, dispatch);
            stamped += 1;
            fifo = next;
        }
        self.undispatched.fetch_sub(stamped, Ordering::SeqCst);
    }

    /// Drains until the stack is empty, then gives up `busy` without
    /// stranding a concurrent submission.
    fn release(&self, oprs: &Pool<OprBlock>, dispatch: &mut impl FnMut(u32, u64)) {
        loop {
            while self.drain(oprs, dispatch) {}
            self.busy.store(0, Ordering::Release);
            // The hot side of the handshake with a delegated push's
            // `barrier::heavy` (`barrier.rs`): on every push, so light.
            barrier::light();
            if self.stack.load(Ordering::Relaxed) == NIL
                || self.busy.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_err()
            {
                return;
            }
        }
    }
}

/// Loom model of the combiner (`--cfg depengine_loom`): no submission is
/// stranded, each is dispatched once, tickets are dense and each thread's
/// order is kept.
#[cfg(all(test, depengine_loom))]
mod loom_models {
    use super::*;
    use loom::sync::{Arc, Mutex};

    #[test]
    fn concurrent_submissions_are_each_dispatched_once_in_thread_order() {
        loom::model(|| {
            let oprs: Arc<Pool<OprBlock>> = Arc::new(Pool::new());
            let d = Arc::new(Dispatcher::default());
            let log = Arc::new(Mutex::new(Vec::new()));
            let ops: Vec<u32> = (0..3).map(|_| oprs.take()).collect();
            let submit = |op: u32, oprs: &Pool<OprBlock>, d: &Dispatcher, log: &Mutex<Vec<(u32, u64)>>| {
                d.submit(oprs, op, |op, ticket| log.lock().unwrap().push((op, ticket)));
            };
            let t = {
                let (oprs, d, log) = (oprs.clone(), d.clone(), log.clone());
                let (a, b) = (ops[0], ops[1]);
                loom::thread::spawn(move || {
                    submit(a, &oprs, &d, &log);
                    submit(b, &oprs, &d, &log);
                })
            };
            submit(ops[2], &oprs, &d, &log);
            t.join().unwrap();
            let log = log.lock().unwrap().clone();
            let mut seen: Vec<u32> = log.iter().map(|&(op, _)| op).collect();
            let tickets: Vec<u64> = log.iter().map(|&(_, t)| t).collect();
            assert_eq!(tickets, vec![0, 1, 2], "dense tickets in dispatch order");
            let pos = |op| seen.iter().position(|&o| o == op).unwrap();
            assert!(pos(ops[0]) < pos(ops[1]), "one thread's pushes keep their order");
            seen.sort_unstable();
            let mut all = ops.clone();
            all.sort_unstable();
            assert_eq!(seen, all, "every submission dispatched exactly once: {log:?}");
            assert_eq!(d.dispatched(), 3);
        });
    }

    /// A ticket taken alone, racing a submission: never waits, never
    /// strands the submission, and shares the dense ticket order without
    /// counting as dispatched.
    #[test]
    fn a_ticket_taken_alone_shares_the_order_and_strands_nothing() {
        loom::model(|| {
            let oprs: Arc<Pool<OprBlock>> = Arc::new(Pool::new());
            let d = Arc::new(Dispatcher::default());
            let log = Arc::new(Mutex::new(Vec::new()));
            let op = oprs.take();
            let t = {
                let (oprs, d, log) = (oprs.clone(), d.clone(), log.clone());
                loom::thread::spawn(move || d.submit(&oprs, op, |op, ticket| log.lock().unwrap().push((op, ticket))))
            };
            let alone = d.take_ticket(&oprs, |op, ticket| log.lock().unwrap().push((op, ticket)), || {});
            t.join().unwrap();
            let log = log.lock().unwrap().clone();
            assert_eq!(log.len(), 1, "the submission is dispatched once: {log:?}");
            assert_eq!(d.dispatched(), 1, "a ticket taken alone is not dispatched");
            let mut tickets: Vec<u64> = log.iter().map(|&(_, t)| t).chain(alone).collect();
            tickets.sort_unstable();
            let want: Vec<u64> = (0..tickets.len() as u64).collect();
            assert_eq!(tickets, want, "dense tickets");
            assert_eq!(d.tickets(), want.len() as u64);
        });
    }

    /// What a ticket taken alone sees in its `then` (the engine's closing,
    /// in `Core`) is exactly what was linearized before the ticket: a
    /// flush's `then` (`Core::close`) either ran before the ticket was
    /// stamped and is seen, or after and is not.
    #[test]
    fn a_ticket_taken_alone_sees_exactly_what_came_before_it() {
        loom::model(|| {
            let oprs: Arc<Pool<OprBlock>> = Arc::new(Pool::new());
            let d = Arc::new(Dispatcher::default());
            let closed = Arc::new(loom::sync::atomic::AtomicBool::new(false));
            let t = {
                let (oprs, d, closed) = (oprs.clone(), d.clone(), closed.clone());
                loom::thread::spawn(move || {
                    let mut tickets_before_close = 0;
                    d.flush(
                        &oprs,
                        |_, _| {},
                        || {
                            tickets_before_close = d.tickets();
                            closed.store(true, Ordering::Relaxed);
                        },
                    );
                    tickets_before_close
                })
            };
            let mut seen = None;
            let ticket = d.take_ticket(&oprs, |_, _| {}, || seen = Some(closed.load(Ordering::Relaxed)));
            let tickets_before_close = t.join().unwrap();
            match ticket {
                Some(_) => assert_eq!(seen, Some(tickets_before_close == 0), "closed before the ticket: seen"),
                None => assert_eq!(seen, None, "then ran without a ticket"),
            }
        });
    }
}
