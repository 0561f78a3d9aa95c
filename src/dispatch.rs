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
//! - No submission is stranded: releasing is `busy = 0`, SeqCst fence, look at
//!   the stack; a delegated push is link, SeqCst fence, look at `busy`. One of
//!   the two sees the other (Dekker), and whoever sees work takes `busy`.
//!
//! The combiner runs no user code: operations it finds ready are returned to
//! the caller, which schedules them after releasing (`core.rs`). So a body
//! may push and wait freely, and a combiner never blocks.

use crate::opr::OprBlock;
use crate::pool::{Pool, NIL};
use crate::sync::{fence, AtomicU32, Ordering, UnsafeCell};
use crossbeam_utils::CachePadded;

/// The combining dispatcher (see the module docs).
pub(crate) struct Dispatcher {
    busy: CachePadded<AtomicU32>,
    stack: CachePadded<AtomicU32>,
    /// Combiner-owned: the next ticket to stamp.
    next_ticket: UnsafeCell<u64>,
}

// SAFETY: `next_ticket` is touched only by the holder of `busy`.
unsafe impl Sync for Dispatcher {}

impl Default for Dispatcher {
    fn default() -> Self {
        Dispatcher {
            busy: CachePadded::new(AtomicU32::new(0)),
            stack: CachePadded::new(AtomicU32::new(NIL)),
            next_ticket: UnsafeCell::new(0),
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
        let block = oprs.get(op);
        let mut head = self.stack.load(Ordering::Relaxed);
        loop {
            block.link.store(head, Ordering::Relaxed);
            match self.stack.compare_exchange_weak(head, op, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => break,
                Err(actual) => head = actual,
            }
        }
        fence(Ordering::SeqCst);
        if self.busy.load(Ordering::Relaxed) == 0
            && self.busy.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_ok()
        {
            self.release(oprs, &mut dispatch);
        }
    }

    #[inline(always)]
    fn stamp(&self, op: u32, dispatch: &mut impl FnMut(u32, u64)) {
        // SAFETY: only the combiner (holder of `busy`) touches the counter,
        // and `busy`'s acquire/release orders successive combiners.
        let ticket = unsafe {
            self.next_ticket.with_mut(|t| {
                let ticket = *t;
                *t += 1;
                ticket
            })
        };
        dispatch(op, ticket);
    }

    /// Dispatches everything on the stack, oldest first. Combiner only.
    fn drain(&self, oprs: &Pool<OprBlock>, dispatch: &mut impl FnMut(u32, u64)) -> bool {
        if self.stack.load(Ordering::Relaxed) == NIL {
            return false;
        }
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
        while fifo != NIL {
            let next = oprs.get(fifo).link.load(Ordering::Relaxed);
            self.stamp(fifo, dispatch);
            fifo = next;
        }
        true
    }

    /// Drains until the stack is empty, then gives up `busy` without
    /// stranding a concurrent submission.
    fn release(&self, oprs: &Pool<OprBlock>, dispatch: &mut impl FnMut(u32, u64)) {
        loop {
            while self.drain(oprs, dispatch) {}
            self.busy.store(0, Ordering::Release);
            fence(Ordering::SeqCst);
            if self.stack.load(Ordering::Relaxed) == NIL
                || self.busy.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_err()
            {
                return;
            }
        }
    }
}
