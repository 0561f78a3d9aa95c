//! The core's waits: blocking ones (a thread helps, spins, then sleeps on a
//! futex) and the pieces the futures of the API are made of (a waker in a
//! pooled wait slot). Both go through a marker operation on the variable,
//! or, for the whole engine, through the pending count.

use crate::base::context::PushOpts;
use crate::base::error::{EngineError, OpError};
use crate::core::Core;
use crate::graph::opr::{Body, OprKind};
use crate::graph::var::{Var, VarSlot};
use crate::graph::wait::Helper;
use crate::mem::completion::Completion;
use std::sync::Arc;
use std::task::Waker;

/// A granted access of a data guard: the failure its variable holds, and
/// the completion that ends the access.
pub(crate) type Granted = (Option<Arc<OpError>>, Completion);

impl Core {
    /// How a thread blocked in a wait helps run ready work.
    pub(crate) fn helper(&self) -> Helper<impl FnMut() -> bool + '_> {
        Helper { help: || self.help_once(), can_sleep: self.traits.waiters_can_sleep }
    }

    /// Blocks until everything pushed so far has finished.
    pub(crate) fn wait_all(&self) {
        self.wait_all_until(None);
    }

    /// [`wait_all`](Self::wait_all), giving up at `deadline` (if any);
    /// returns whether everything finished.
    pub(crate) fn wait_all_until(&self, deadline: Option<std::time::Instant>) -> bool {
        self.flush_dispatcher(|| {});
        let watched = self.observe.diag_wait_begin(None, false);
        let finished = self.pending.wait_zero_until(&self.dispatcher, self.helper(), deadline);
        self.observe.diag_wait_end(watched);
        crate::exec::park::note_waited();
        finished
    }

    /// Blocks until every operation pushed so far that `var`'s wait must
    /// follow has finished (the writes; for `write`, the reads too); returns
    /// the failure `var`'s value holds then.
    ///
    /// When `var` has nothing of the sort in flight — at once, or after
    /// this thread has helped run one ready operation (the one it just
    /// pushed, typically; when a peek at the queue says the first answer
    /// would be no, it helps before asking) — it answers without queuing
    /// anything; otherwise it pushes a marker reading (or writing) `var`
    /// and blocks until the marker runs.
    ///
    /// `slot` is `var`'s, as [`Variables::slot_of`](crate::graph::var::Variables::slot_of) found it valid; the
    /// ask checks again under the dispatcher.
    pub(crate) fn wait_var(&self, var: Var, slot: &VarSlot, write: bool) -> Result<(), EngineError> {
        // Keep this thread's order: its bulked pushes go first.
        self.flush_bulk()?;
        crate::exec::park::note_waited();
        // Right after a push to `var` an ask (which takes the dispatcher)
        // would answer no: when a peek says so, help first, then ask. The
        // peek is a racy hint (`VarQueue::looks_busy`).
        let busy = slot.queue().looks_busy(&self.blocks, write);
        let mut at_once = if busy { None } else { self.wait_var_at_once(var, slot, write) };
        if at_once.is_none() && (self.help_once() || busy) {
            at_once = self.wait_var_at_once(var, slot, write);
        }
        if let Some(answer) = at_once {
            self.observe.stats.waited_at_once();
            return answer;
        }
        let ws = self.push_marker(var, write, false)?;
        self.observe.stats.waited();
        let watched = self.observe.diag_wait_begin(Some(var), write);
        self.waits.get(ws).wait(self.helper());
        self.observe.diag_wait_end(watched);
        let (error, _) = self.waits.get(ws).take();
        self.let_go(ws);
        error.map_or(Ok(()), |e| Err(EngineError::OpFailed(e)))
    }

    /// `wait_var`'s answer if `var` has nothing in flight the wait must
    /// follow; `None` otherwise (and on any error, which the marker path
    /// reports the usual way).
    fn wait_var_at_once(&self, var: Var, slot: &VarSlot, write: bool) -> Option<Result<(), EngineError>> {
        let mut answer = None;
        // As the combiner: every push that returned before this call has
        // been appended (the drain), and nothing can be appended while we
        // look, so the queue's answer holds until we have read the value's
        // failure.
        // The variable's shard (placed now if nothing has placed it yet).
        let shard = self.vars.shard_of(slot, || self.placing(crate::mem::thread_slot::current()));
        self.flush_shards(1 << shard, |_| {
            if self.life.is_closing() || !slot.dispatchable(var.gen) {
                return;
            }
            // We hold the dispatcher (the appender's role): the answer holds.
            if slot.queue().grants_at_once(&self.blocks, write) {
                // SAFETY: no write is granted or queued, and none can be
                // queued while we hold the dispatcher, so nobody writes the
                // failure while we read it — what a granted read relies on.
                let error = unsafe { slot.error() };
                answer = Some(error.map_or(Ok(()), |e| Err(EngineError::OpFailed(e))));
            }
        });
        answer
    }

    /// Pushes a marker on `var` (reading it, or writing it for `write`)
    /// that answers a fresh wait slot, which it returns: a plain one, or
    /// for `hold` one that also hands over the access (`OprKind::Hold`)
    /// until its completion is signalled.
    pub(crate) fn push_marker(&self, var: Var, write: bool, hold: bool) -> Result<u32, EngineError> {
        let ws = self.waits.take();
        self.waits.get(ws).arm();
        let name = match (hold, write) {
            (false, false) => "wait_var",
            (false, true) => "wait_to_write",
            (true, false) => "Data::read",
            (true, true) => "Data::write",
        };
        let kind = if hold { OprKind::Hold(ws) } else { OprKind::Wait(ws) };
        let (reads, writes): (&[Var], &[Var]) = if write { (&[], &[var]) } else { (&[var], &[]) };
        if let Err(e) = self.push(Body::Empty, false, reads, writes, &PushOpts::new().name(name), kind) {
            self.waits.give(ws);
            return Err(e);
        }
        Ok(ws)
    }

    /// Drops the waiter's reference to wait slot `ws`.
    pub(crate) fn let_go(&self, ws: u32) {
        if self.waits.get(ws).release() {
            self.waits.give(ws);
        }
    }

    /// A future's poll of wait slot `ws`: whether it is answered (then
    /// `take` it); if not, `waker` is woken when it is. On an engine whose
    /// ready work only waiting threads run, the poll runs that work first,
    /// and asks to be polled again while the answer has not come.
    pub(crate) fn poll_slot(&self, ws: u32, waker: &Waker) -> bool {
        let slot = self.waits.get(ws);
        let helps = !self.traits.waiters_can_sleep;
        while helps && !slot.is_done() && self.help_once() {}
        let done = slot.poll_done(waker);
        if helps && !done {
            waker.wake_by_ref();
        }
        done
    }

    /// A future dropped while it waited on slot `ws`: takes its waker back
    /// and lets go (whoever lets go last gives back an access the marker
    /// handed over, `WaitSlot::release`). A marker not yet run still runs,
    /// and answers nobody.
    pub(crate) fn cancel_wait(&self, ws: u32) {
        self.waits.get(ws).cancel();
        self.let_go(ws);
    }

    /// `wait_var`'s answer without queuing anything or running any work on
    /// this thread, if `var` has nothing in flight the wait must follow.
    pub(crate) fn wait_var_now(&self, var: Var, write: bool) -> Option<Result<(), EngineError>> {
        let slot = match self.vars.slot_of(var) {
            Ok(slot) => slot,
            Err(e) => return Some(Err(e)),
        };
        if let Err(e) = self.flush_bulk() {
            return Some(Err(e));
        }
        if slot.queue().looks_busy(&self.blocks, write) {
            return None;
        }
        let answer = self.wait_var_at_once(var, slot, write);
        if answer.is_some() {
            self.observe.stats.waited_at_once();
        }
        answer
    }

    /// Whether every operation submitted so far has finished (after
    /// dispatching what was submitted).
    pub(crate) fn is_idle(&self) -> bool {
        self.flush_dispatcher(|| {});
        self.pending.is_idle(&self.dispatcher)
    }

    /// A `wait_all` future starts waiting: announces itself on the pending
    /// count and returns the slot the next idle moment answers.
    pub(crate) fn wait_idle(&self) -> u32 {
        let ws = self.waits.take();
        self.waits.get(ws).arm();
        self.pending.announce();
        self.all_waiters.push(&self.waits, ws);
        // Idle already (the protocol of `PendingCounter::announce`):
        // answer everyone now.
        if self.pending.is_idle(&self.dispatcher) {
            self.all_waiters.wake_all(&self.waits);
        }
        ws
    }

    /// A `wait_all` future is done with slot `ws` (answered or dropped).
    pub(crate) fn end_wait_idle(&self, ws: u32, cancelled: bool) {
        if cancelled {
            self.waits.get(ws).cancel();
        }
        self.pending.withdraw();
        self.let_go(ws);
    }

    /// The first failure recorded since the last `wait_all`, and what a
    /// GPU stream reports: `wait_all`'s answer once the engine is idle.
    pub(crate) fn wait_all_answer(&self) -> Result<(), EngineError> {
        #[cfg(feature = "cuda")]
        self.gpu.synchronize(self)?;
        self.life.first_error.take().map_or(Ok(()), |e| Err(EngineError::OpFailed(e)))
    }

    /// After a marker on `var` answered: waits for the GPU work on `var`
    /// (a no-op without GPU operations), and turns the answer into the
    /// waiter's result.
    pub(crate) fn wait_answer(&self, var: Var, write: bool, error: Option<Arc<OpError>>) -> Result<(), EngineError> {
        #[cfg(feature = "cuda")]
        self.gpu.wait_var(self, var.slot, write)?;
        let _ = (var, write);
        error.map_or(Ok(()), |e| Err(EngineError::OpFailed(e)))
    }

    /// Blocks for a data guard's access to `var`: pushes a hold marker,
    /// waits for it, and returns the variable's failure and the completion
    /// that ends the access.
    pub(crate) fn hold(&self, var: Var, write: bool) -> Result<Granted, EngineError> {
        let ws = self.push_marker(var, write, true)?;
        self.waits.get(ws).wait(self.helper());
        self.take_hold(ws, var, write)
    }

    /// A hold marker's answer on `var`, once slot `ws` is answered; lets go
    /// of the slot and waits for the GPU work on `var` (giving the access
    /// back if that fails). A marker rejected at dispatch (the engine was
    /// closing, or the variable's deletion came first) hands over no access.
    pub(crate) fn take_hold(&self, ws: u32, var: Var, write: bool) -> Result<Granted, EngineError> {
        let (error, done) = self.waits.get(ws).take();
        self.let_go(ws);
        let done = match done {
            Some(done) => done,
            None if self.life.is_closing() => return Err(EngineError::ShutDown),
            None => return Err(EngineError::DeletedVar),
        };
        if let Err(e) = self.wait_answer(var, write, None) {
            done.signal();
            return Err(e);
        }
        Ok((error, done))
    }
}
