//! The second half of an operation's life: run the body, then complete —
//! record the outcome on the written variables, release every variable
//! (granting whoever waits next) and give the block back.
//!
//! # Failures
//!
//! Before running a body the runner looks at the variables it reads: if one
//! holds a failure (and the push did not ask for `no_skip`), the body is
//! skipped and the operation completes with that same failure, so it flows
//! down the graph naming the operation that failed first. A completed write
//! replaces the variable's failure with its own outcome: a successful blind
//! write makes the value good again.
//!
//! # Asynchronous bodies
//!
//! The block is shared by the runner (the body may still be running or
//! unwinding) and the [`Completion`], so it carries two references and is
//! given back by whoever lets go last. `run_state` settles one race: a
//! `Completion` dropped *while the body panics* does not complete the
//! operation itself but defers to the runner, which has the panic message.

use crate::base::context::PushOpts;
use crate::base::context::RunContext;
use crate::base::error::OpError;
use crate::core::{Core, UnqueuedTicket, CURRENT_OP, PUSHED_AT_SHUTDOWN, UNQUEUED};
use crate::graph::dispatch::shard_of_ticket;
use crate::graph::operator::OperatorBody;
use crate::graph::opr::{Body, Dep, Meta, OprBlock, OprKind};
use crate::graph::var::VarSlot;
use crate::mem::completion::{Completion, CompletionSink};
use crate::mem::inline_fn::{InlineFn, Outcome};
use crate::mem::sweep::SweepBatch;
use crate::sync::Ordering;
use std::mem::offset_of;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::Arc;

/// The body is not running.
const BODY_IDLE: u8 = 0;
/// The body of an asynchronous operation is running.
const BODY_RUNNING: u8 = 1;
/// Its `Completion` was dropped during a panic; the runner must complete.
const BODY_DEFERRED: u8 = 2;

impl Core {
    /// Runs a ready operation (phase 3) and, for a synchronous body,
    /// completes it.
    pub(crate) fn run(&self, op: u32, worker: Option<usize>) {
        let block = self.oprs.get(op);
        #[cfg(debug_assertions)]
        block.transition(op, crate::graph::opr::phase::DISPATCHED, crate::graph::opr::phase::RUNNING);
        // SAFETY: a scheduled block belongs to its runner; nobody writes
        // `meta` until it is given back.
        let meta = unsafe { block.meta() };
        match meta.kind {
            OprKind::Wait(ws) => {
                // SAFETY: the marker holds an access to its single variable.
                let error = unsafe { self.vars.get(block.dep_slice()[0].slot()).error() };
                if self.waits.get(ws).deliver(error, None) {
                    self.waits.give(ws);
                }
                self.complete_and_finish(op, block, None);
                return;
            }
            OprKind::Hold(ws) => return self.run_hold(op, ws),
            _ => {}
        }
        self.observe.stats.ran(worker);
        let profiled = meta.profile_session != 0;
        if profiled {
            self.observe.profiler.stamp_start(block, worker);
        }
        if self.observe.diagnosis.is_some() {
            self.observe.diag_running(block, worker);
        }
        if let Some(failure) = self.inherited_failure(block, meta) {
            self.observe.stats.skipped();
            self.complete_and_finish(op, block, Some(&failure));
            return;
        }
        let name = meta.opts.name;
        #[cfg(feature = "cuda")]
        let stream = match self.gpu_used.load(Ordering::Relaxed) {
            false => None,
            true => match self.gpu.before_body(self, block, meta) {
                Ok(stream) => stream,
                Err(e) => {
                    self.complete_and_finish(
                        op,
                        block,
                        Some(&OpError::new(name, format!("waiting for GPU work: {e}"))),
                    );
                    return;
                }
            },
        };
        let ctx = RunContext {
            ctx: meta.opts.ctx,
            worker,
            ticket: meta.ticket,
            priority: meta.opts.priority,
            #[cfg(feature = "cuda")]
            stream,
        };
        let outer = CURRENT_OP.with(|c| c.replace((self, op)));
        if !meta.is_async {
            let outcome = catch_unwind(AssertUnwindSafe(|| self.invoke(block, &ctx, None)));
            CURRENT_OP.with(|c| c.set(outer));
            // `complete_and_finish` in line: this is every synchronous
            // operation's end, where the call cost about 20 instructions
            // (`WORKER=1 perf/instructions.sh`).
            let freed = self.complete(block, failure_of(name, outcome).as_ref());
            self.finish(op, block, freed);
            return;
        }
        block.refs.store(2, Ordering::Relaxed);
        block.run_state.store(BODY_RUNNING, Ordering::Relaxed);
        let outcome = catch_unwind(AssertUnwindSafe(|| self.invoke(block, &ctx, Some(self.completion(op)))));
        CURRENT_OP.with(|c| c.set(outer));
        if profiled {
            self.observe.profiler.stamp_body_end(block);
        }
        if self.observe.diagnosis.is_some() {
            self.observe.diag_body_returned(block);
        }
        let state = block.run_state.swap(BODY_IDLE, Ordering::AcqRel);
        let panic = outcome.err().map(crate::base::unwind::message_of);
        if state == BODY_DEFERRED {
            let message = panic.unwrap_or_else(|| "its Completion was dropped during a panic".to_owned());
            self.complete_and_retire(op, Some(&OpError::new(name, message)));
            self.release(op); // the deferring Completion's reference
        } else if let Some(message) = panic {
            // The Completion was handed off before the panic and will still
            // complete the operation; the panic is reported by `wait_all`.
            self.life.first_error.record(&OpError::new(name, message));
        }
        self.release(op);
    }

    /// Runs a data guard's access marker: hands the waiter its variable's
    /// failure and the completion that ends the access (an asynchronous
    /// operation whose body is the guard's life).
    fn run_hold(&self, op: u32, ws: u32) {
        let block = self.oprs.get(op);
        // SAFETY: the runner owns the block (phase 3).
        let meta = unsafe { block.meta() };
        if let Some(rejected) = &meta.rejected {
            let rejected = rejected.clone();
            if self.waits.get(ws).deliver(Some(rejected.clone()), None) {
                self.waits.give(ws);
            }
            self.complete_and_finish(op, block, Some(&rejected));
            return;
        }
        // SAFETY: the marker holds an access to its single variable.
        let error = unsafe { self.vars.get(block.dep_slice()[0].slot()).error() };
        block.refs.store(2, Ordering::Relaxed);
        if self.waits.get(ws).deliver(error, Some(self.completion(op))) {
            self.waits.give(ws);
        }
        self.release(op);
    }

    /// Runs a synchronous body with no variables on the pushing thread,
    /// inside its push, with no block and no queue: the operation holds
    /// `at.ticket` (from `Core::unqueued_ticket`) and is never pending. A
    /// failure is recorded for `wait_all` as a queued one's would be; if
    /// the engine's closing came before the ticket, the body does not run
    /// and the operation fails, as a queued one dispatched then is rejected.
    #[inline(always)]
    pub(crate) fn run_unqueued(&self, at: UnqueuedTicket, opts: &PushOpts, body: impl FnOnce(&RunContext) -> Outcome) {
        let UnqueuedTicket { ticket, after_close } = at;
        let failure = if after_close {
            self.drop_user_value(body);
            Some(OpError::new(opts.name, PUSHED_AT_SHUTDOWN))
        } else {
            let ctx = RunContext { ticket, priority: opts.priority, ..RunContext::on_host(opts.ctx) };
            let outer = CURRENT_OP.with(|c| c.replace((self, UNQUEUED)));
            let outcome = catch_unwind(AssertUnwindSafe(|| body(&ctx)));
            CURRENT_OP.with(|c| c.set(outer));
            if self.policy.runs.is_on() {
                // It counts towards the stint's pace (`pusher_runs.rs`).
                self.policy.runs.note_run();
            } else {
                crate::policy::inline_pace::note_run();
            }
            failure_of(opts.name, outcome)
        };
        if let Some(failure) = failure {
            self.record_failure(&failure);
        }
    }

    /// Counts a failed operation and keeps its failure for `wait_all`.
    #[inline]
    pub(crate) fn record_failure(&self, failure: &Arc<OpError>) {
        self.observe.stats.failed();
        self.life.first_error.record(failure);
    }

    /// The failure that makes `block` skip its body, if any.
    fn inherited_failure(&self, block: &OprBlock, meta: &Meta) -> Option<Arc<OpError>> {
        if let Some(rejected) = &meta.rejected {
            return Some(rejected.clone());
        }
        let user = matches!(meta.kind, OprKind::User);
        // SAFETY: the runner owns the block, and its operation holds every
        // access of its variable list.
        unsafe { self.skip_failure(user, &meta.opts, block.dep_slice()) }
    }

    /// The failure that makes an operation pushed with `opts`, holding the
    /// accesses `deps`, skip its body: the engine's cancelling (for a
    /// `user` operation), or a failure held by a variable it reads (unless
    /// `no_skip`).
    ///
    /// # Safety
    /// The caller's operation holds the granted accesses `deps`: no writer
    /// changes the failures of the variables it reads meanwhile.
    #[inline]
    pub(crate) unsafe fn skip_failure(&self, user: bool, opts: &PushOpts, deps: &[Dep]) -> Option<Arc<OpError>> {
        if user && self.life.is_cancelling() {
            return Some(OpError::new(opts.name, "cancelled: the engine shut down before it ran"));
        }
        // No variable holds a failure before the flag is set; a write that
        // stored one set it before its release, which granted us after
        // (`VarSlot::finish_write`), so this relaxed load sees it.
        if opts.no_skip || !self.vars.failures_held.load(Ordering::Relaxed) {
            return None;
        }
        // SAFETY: per the contract.
        unsafe { deps.iter().filter(|d| d.reads()).find_map(|d| self.vars.get(d.slot()).error()) }
    }

    fn invoke(&self, block: &OprBlock, ctx: &RunContext, completion: Option<Completion>) -> Outcome {
        // SAFETY: the runner owns `body`. A one-shot closure is called in
        // place through a raw pointer (the `&mut` ends with the match) and
        // is moved out of the block before it runs, before the body can
        // hand its completion to anyone; so a concurrent completion reading
        // the block's variables (through `dep_slice`) aliases no `&mut`.
        let one_shot = unsafe {
            block.body.with_mut(|b| match &mut *b {
                Body::OneShot(f) => Some(f as *mut InlineFn),
                _ => None,
            })
        };
        if let Some(f) = one_shot {
            // SAFETY: as above; `f` is the block's, and only ours until the
            // body has been moved out. (`finish` drops the emptied shell.)
            return unsafe { InlineFn::invoke_in_place(f, ctx, completion) };
        }
        // SAFETY: as above; a prebuilt body is only borrowed.
        match unsafe { &*block.body.with(|b| b) } {
            Body::Prebuilt(inner) => match &inner.body {
                OperatorBody::Sync(f) => f(ctx),
                OperatorBody::Async(f) => {
                    f(ctx, completion.expect("asynchronous operator run without its completion"));
                    Ok(())
                }
            },
            // Internal operations with nothing to run (a deletion without a
            // callback): an async one completes at once.
            _ => {
                if let Some(c) = completion {
                    c.signal();
                }
                Ok(())
            }
        }
    }

    /// A completion of operation `op`, which owns a strong reference to
    /// this core.
    pub(crate) fn completion(&self, op: u32) -> Completion {
        // SAFETY: every `Core` lives in the `Arc` that `Engine::start`
        // makes, and the caller runs one of its operations, so it is
        // alive; the completion owns the count added here (`sink_release`).
        unsafe { Arc::increment_strong_count(self as *const Core) };
        // A pointer with the whole core's provenance: the sink's functions
        // find the core from it.
        let sink = NonNull::from(self).cast::<u8>();
        // SAFETY: the field's offset lies inside the core; the completion
        // owns the reference taken above.
        unsafe { Completion::new(sink.add(offset_of!(Core, completion_sink)).cast(), op) }
    }

    /// The core that holds `sink` (its `completion_sink`).
    ///
    /// # Safety
    ///
    /// `sink` was made by [`completion`](Self::completion) and its
    /// completion still owns its reference to the core.
    unsafe fn of_sink<'a>(sink: NonNull<CompletionSink>) -> &'a Core {
        // SAFETY: `completion` derived `sink` from a pointer to the whole
        // core at the field's offset, and the reference keeps it alive.
        unsafe { sink.cast::<u8>().sub(offset_of!(Core, completion_sink)).cast::<Core>().as_ref() }
    }

    /// `CompletionSink::complete`.
    ///
    /// # Safety
    ///
    /// As for [`of_sink`](Self::of_sink).
    pub(crate) unsafe fn sink_complete(sink: NonNull<CompletionSink>, op: u32, failure: Option<String>) {
        // SAFETY: the caller's contract.
        unsafe { Self::of_sink(sink) }.complete_async(op, failure);
    }

    /// `CompletionSink::dropped`.
    ///
    /// # Safety
    ///
    /// As for [`of_sink`](Self::of_sink).
    pub(crate) unsafe fn sink_dropped(sink: NonNull<CompletionSink>, op: u32) {
        // SAFETY: the caller's contract.
        unsafe { Self::of_sink(sink) }.completion_dropped(op);
    }

    /// `CompletionSink::release`: gives back the strong reference a
    /// completion owned.
    ///
    /// # Safety
    ///
    /// As for [`of_sink`](Self::of_sink); the caller does not use the sink
    /// after this.
    pub(crate) unsafe fn sink_release(sink: NonNull<CompletionSink>) {
        // SAFETY: the core lives in an `Arc` (`completion`), whose count
        // the completion owned and gives back once.
        unsafe { Arc::decrement_strong_count(Self::of_sink(sink) as *const Core) };
    }

    /// A `Completion` was signalled (`failure` is `None`) or failed.
    pub(crate) fn complete_async(&self, op: u32, failure: Option<String>) {
        // SAFETY: `meta` is read-only until the block is given back, which
        // needs this completion's reference.
        let name = unsafe { self.oprs.get(op).meta().opts.name };
        let failure = failure.map(|message| OpError::new(name, message));
        self.complete_and_retire(op, failure.as_ref());
        self.release(op);
    }

    /// A `Completion` was dropped without being signalled.
    pub(crate) fn completion_dropped(&self, op: u32) {
        let block = self.oprs.get(op);
        if std::thread::panicking()
            && block
                .run_state
                .compare_exchange(BODY_RUNNING, BODY_DEFERRED, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            return; // the runner completes it with the panic message
        }
        self.complete_async(op, Some("its Completion was dropped without being signalled".to_owned()));
    }

    /// A synchronous end of `op` (its block `block`): complete, then
    /// finish, retiring the block and the variable blocks the completion
    /// freed together. Out of line, for the rarer ends; a body's end in
    /// `run` does the same in line.
    #[inline(never)]
    fn complete_and_finish(&self, op: u32, block: &OprBlock, failure: Option<&Arc<OpError>>) {
        let freed = self.complete(block, failure);
        self.finish(op, block, freed);
    }

    /// An asynchronous operation's completion (its block is finished by
    /// whoever lets go of it last): complete, and retire the variable
    /// blocks the completion freed.
    #[inline(never)]
    fn complete_and_retire(&self, op: u32, failure: Option<&Arc<OpError>>) {
        let freed = self.complete(self.oprs.get(op), failure);
        self.retire_var_blocks(freed);
    }

    /// Phase 4, for the operation in `block`: records the outcome on the
    /// written variables and releases every variable, granting (and
    /// scheduling) the operations next in line. Returns the variable
    /// blocks it freed, for the caller to retire.
    #[inline(always)]
    fn complete(&self, block: &OprBlock, failure: Option<&Arc<OpError>>) -> SweepBatch {
        // SAFETY: the completer owns the block until `finish`; `meta` and
        // the variables are not written by anyone else meanwhile.
        let (meta, deps) = unsafe { (block.meta(), block.dep_slice()) };
        #[cfg(feature = "cuda")]
        let gpu_failure;
        #[cfg(feature = "cuda")]
        let failure = match meta.opts.ctx.is_gpu() {
            false => failure,
            true => match self.gpu.on_complete(self, block) {
                Err(e) if failure.is_none() => {
                    gpu_failure = OpError::new(meta.opts.name, format!("recording its GPU work: {e}"));
                    Some(&gpu_failure)
                }
                _ => failure,
            },
        };
        if meta.profile_session != 0 {
            self.observe.profiler.stamp_end(block, failure.is_some());
        }
        if let Some(failure) = failure {
            if !matches!(meta.kind, OprKind::Wait(_)) {
                self.record_failure(failure);
            }
        }
        if meta.rejected.is_some() {
            return SweepBatch::EMPTY; // never appended to any queue
        }
        let changes_values = matches!(meta.kind, OprKind::User | OprKind::DeleteVar | OprKind::Hold(_));
        // SAFETY: this operation holds exactly these accesses and completes
        // them once, here.
        unsafe {
            let deletes = matches!(meta.kind, OprKind::DeleteVar);
            self.release_vars(deps.iter().copied(), changes_values, deletes, failure, meta.ticket)
        }
    }

    /// Releases the accesses `deps` of the operation with ticket `ticket`,
    /// recording `failure` (or success) on the written variables first when
    /// the operation `changes_values`, and granting whoever waits next. A
    /// `deletes` operation held each variable's last access and frees it.
    /// Returns the variable blocks it freed, for the caller to retire.
    ///
    /// # Safety
    /// The caller holds exactly these granted accesses and releases each
    /// once.
    #[inline(always)]
    pub(crate) unsafe fn release_vars(
        &self,
        deps: impl Iterator<Item = Dep>,
        changes_values: bool,
        deletes: bool,
        failure: Option<&Arc<OpError>>,
        ticket: u64,
    ) -> SweepBatch {
        // SAFETY: the caller's contract.
        unsafe {
            self.release_slots(deps.map(|d| (d, self.vars.get(d.slot()))), changes_values, deletes, failure, ticket)
        }
    }

    /// [`release_vars`](Self::release_vars) for accesses whose slots the
    /// caller has resolved: each `(dep, slot)` names `dep`'s variable's
    /// slot.
    ///
    /// # Safety
    /// As for [`release_vars`](Self::release_vars).
    #[inline(always)]
    pub(crate) unsafe fn release_slots<'a>(
        &'a self,
        deps: impl Iterator<Item = (Dep, &'a VarSlot)>,
        changes_values: bool,
        deletes: bool,
        failure: Option<&Arc<OpError>>,
        ticket: u64,
    ) -> SweepBatch {
        let mut freed = SweepBatch::EMPTY;
        for (d, slot) in deps {
            // SAFETY: the caller holds exactly this access (so the write
            // grant while recording) and releases it once. Whoever is
            // granted next on this variable sees the recorded outcome; an
            // operation also waiting on a later variable of ours is not
            // granted that one before its outcome is recorded too.
            let mut granted = unsafe {
                if d.writes() && changes_values {
                    slot.finish_write(failure, &self.vars.failures_held);
                }
                if d.writes() {
                    slot.queue().complete_write(&self.blocks)
                } else {
                    slot.queue().complete_read(&self.blocks)
                }
            };
            granted.gather_into(std::mem::take(&mut freed));
            for next in granted.by_ref() {
                self.grant(next, ticket);
            }
            // What this variable's next completion grants, most often on
            // this thread an operation from now: its block's lines, which
            // the pusher wrote, start on their way here, a whole operation
            // before `grant`'s decrement would wait for them.
            self.oprs.prefetch(granted.behind());
            freed = granted.take_freed();
            if deletes {
                // The deletion held the variable's last access.
                self.vars.free(d.slot(), &self.blocks);
            }
        }
        freed
    }

    /// Drops an asynchronous block's reference; the last one finishes it.
    fn release(&self, op: u32) {
        let block = self.oprs.get(op);
        if block.refs.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.finish(op, block, SweepBatch::EMPTY);
        }
    }

    /// Gives `op`'s block `block` (and the variable blocks its completion
    /// `freed`) back and counts the operation as finished.
    #[inline(always)]
    fn finish(&self, op: u32, block: &OprBlock, freed: SweepBatch) {
        #[cfg(debug_assertions)]
        block.transition(op, crate::graph::opr::phase::RUNNING, crate::graph::opr::phase::FREE);
        if self.observe.diagnosis.is_some() {
            block.diag.finished();
        }
        // SAFETY: completed and unreferenced: exclusively ours until given back.
        unsafe {
            let meta = block.meta_mut();
            if meta.profile_session != 0 {
                self.observe.profiler.record_finished(block, meta);
                meta.profile_session = 0;
            }
            meta.rejected = None;
            // A body that did not run (skipped, cancelled) still holds the
            // user's captures, and a prebuilt one may hold its operator's
            // last reference: their `Drop` is user code (`unwind.rs`).
            let body = block.body.with_mut(|b| std::mem::replace(&mut *b, Body::Empty));
            if body.holds_user_value() {
                self.drop_user_value(body);
            }
            // The variable list stays: the next push clears it, and leaving
            // it spares a write to a line that pusher writes next anyway.
        }
        // SAFETY: as above: ours until given back.
        let shard = shard_of_ticket(unsafe { block.meta() }.ticket);
        self.retire(op, shard, freed);
    }
}

/// The failure a synchronous body's outcome (or panic) stands for.
/// Inlined: on every worker's run, the `Ok` case must stay a test.
#[inline(always)]
pub(crate) fn failure_of(name: &'static str, outcome: std::thread::Result<Outcome>) -> Option<Arc<OpError>> {
    match outcome {
        Ok(Ok(())) => None,
        Ok(Err(message)) => Some(OpError::new(name, message)),
        // A payload's own `Drop` may panic too (`unwind.rs`).
        Err(payload) => Some(OpError::new(name, crate::base::unwind::message_of(payload))),
    }
}
