//! The engine core: the pools, the dispatcher and the executor, and the
//! first half of an operation's life — push, dispatch, grant, schedule.
//! (`run.rs` has the second half: run and complete.)
//!
//! ```text
//! push ─► validate vars, fill pooled OprBlock ─► Dispatcher::submit
//!        ─► dispatch: stamp ticket, append to each var queue
//!        ─► every var granted? ─► Executor::schedule ─► Core::run (run.rs)
//! ```

pub(crate) mod bulk;
pub(crate) mod direct_run;
pub(crate) mod observe;
pub(crate) mod route;
pub(crate) mod run;
pub(crate) mod throttle;
pub(crate) mod wait;
pub(crate) mod worker_batch;

use crate::base::context::{Context, FnProperty, PushOpts};
use crate::base::error::{EngineError, OpError};
use crate::base::tuning::{SHARDS, SWEEP_ROUND};
use crate::exec::{Executor, ExecutorTraits, Runner};
use crate::graph::bulk_buf::BulkBuf;
use crate::graph::dispatch::{home_shard, shards_in, Dispatcher, ALL_SHARDS};
use crate::graph::lifecycle::Lifecycle;
use crate::graph::opr::{Body, Dep, OprBlock, OprKind, LOOK_AT_EACH_VAR, READ, WRITE};
use crate::graph::var::{Var, Variables, DELETE_DISPATCHED};
use crate::graph::var_queue::VarBlock;
use crate::graph::wait::{AllWaiters, PendingCounter, WaitSlot};
use crate::mem::completion::CompletionSink;
use crate::mem::pool::{Pool, PusherCaches, NIL};
use crate::mem::sweep::SweepCache;
use crate::observe::diagnose::HangHandler;
use crate::observe::profiler::Profiler;
use crate::observe::Observers;
use crate::policy::PushPolicy;
#[cfg(feature = "cuda")]
use crate::sync::AtomicBool;
use crate::sync::{Ordering, UnsafeCell};
use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::sync::atomic as std_atomic;
#[cfg(feature = "cuda")]
use std::sync::Arc;

/// Engine ids, so that a variable of one engine is recognised by another.
static NEXT_ENGINE_ID: std_atomic::AtomicU32 = std_atomic::AtomicU32::new(1);

crate::sync::thread_local! {
    /// The operation whose body this thread is running (core, op; op is
    /// [`UNQUEUED`] for one run inside its push), for the
    /// wait-inside-an-operation deadlock check.
    pub(crate) static CURRENT_OP: Cell<(*const Core, u32)> = const { Cell::new((std::ptr::null(), NIL)) };
}

/// `CURRENT_OP`'s operation while a body runs inside its push, with no
/// block (`Core::run_unqueued`). No pool hands out this index.
pub(crate) const UNQUEUED: u32 = NIL - 1;

/// `CURRENT_OP`'s operation while a body runs directly (`direct_run.rs`):
/// the variables it holds are in `DIRECT_DEPS`. No pool hands out this
/// index.
pub(crate) const DIRECT: u32 = NIL - 2;

crate::sync::thread_local! {
    /// The variables held by the direct run whose body this thread runs
    /// (valid while `CURRENT_OP` names [`DIRECT`]).
    pub(crate) static DIRECT_DEPS: Cell<*const [Dep]> = const { Cell::new(&[] as *const [Dep]) };
}

/// `CURRENT_OP`'s operation while the engine drops a value of the user's
/// ([`Core::drop_user_value`]). No pool hands out this index.
pub(crate) const DROPPING: u32 = NIL - 3;

/// The place an operation run inside its push took in the ticket order
/// (`Core::unqueued_ticket`).
pub(crate) struct UnqueuedTicket {
    pub(crate) ticket: u64,
    /// The engine's closing was linearized before the ticket: the operation
    /// fails unrun, as a queued one dispatched then is rejected.
    pub(crate) after_close: bool,
}

/// The failure of an operation the engine's closing was linearized before.
pub(crate) const PUSHED_AT_SHUTDOWN: &str = "pushed while the engine shut down";

/// Operations made ready while dispatching, threaded through their `link`
/// and scheduled once the combiner has let go.
struct ReadyList {
    head: u32,
    tail: u32,
}

/// A dispatch shard's free variable blocks (see `sweep::SweepCache`).
struct SpareBlocks(UnsafeCell<SweepCache>);

// SAFETY: only the thread holding the shard touches its cache (in
// `dispatch` and `return_spare_blocks`, both run as the shard's combiner),
// and the dispatcher orders a shard's successive combiners (its `busy`
// flag's acquire and release, or an owner's flag and its revoker:
// `dispatch.rs`).
unsafe impl Sync for SpareBlocks {}

/// What the core takes from the builder: the settings it acts on, resolved
/// into plain values (`EngineBuilder::settings`).
pub(crate) struct Settings {
    /// The pending-operation cap (0: none).
    pub(crate) max_pending: u64,
    /// Whether pushes may run bodies on their thread below the cap.
    pub(crate) run_on_pusher: bool,
    /// The inline pace (used only with `run_on_pusher`).
    pub(crate) inline_pace: std::time::Duration,
    /// Operations each profiler lane keeps.
    pub(crate) profile_events: usize,
    /// Hang diagnosis: report a wait still blocked after this long, to
    /// this handler (`None`: off).
    pub(crate) hang_report: Option<(std::time::Duration, HangHandler)>,
}

/// Everything an engine is, shared by its handle, workers and completions.
pub(crate) struct Core {
    pub(crate) id: u32,
    pub(crate) oprs: Pool<OprBlock>,
    /// The free operation blocks pushing threads take (`PusherCaches`).
    pub(crate) op_caches: PusherCaches,
    pub(crate) blocks: Pool<VarBlock>,
    /// The variables' slots and what the dispatcher tracks of them
    /// (`graph/var.rs`).
    pub(crate) vars: Variables,
    pub(crate) waits: Pool<WaitSlot>,
    /// The futures waiting for the engine to be idle.
    pub(crate) all_waiters: AllWaiters,
    pub(crate) bulks: Pool<BulkBuf>,
    pub(crate) dispatcher: Dispatcher,
    /// Free variable blocks held by each dispatch shard's combiner for its
    /// appends (touched only while holding that shard; see
    /// `sweep::SweepCache`). Written on most appends, so each has a cache
    /// line of its own: next to the read-mostly flags that every run
    /// checks it cost a line transfer per operation.
    spare_blocks: [CachePadded<SpareBlocks>; SHARDS],
    pub(crate) executor: Box<dyn Executor<Core>>,
    /// What this core's completions call back (`run.rs`).
    pub(crate) completion_sink: CompletionSink,
    /// What the executor is, asked once (read on every direct run and
    /// every push run unqueued, where a virtual call showed in profiles).
    pub(crate) traits: ExecutorTraits,
    pub(crate) pending: PendingCounter,
    /// Open or closing, cancelling, the first failure (`graph/lifecycle.rs`).
    pub(crate) life: Lifecycle,
    /// Statistics, the profiler and hang diagnosis (`observe/`).
    pub(crate) observe: Observers,
    /// The pending cap and where pushes run (`policy/`).
    pub(crate) policy: PushPolicy,
    /// NUMA nodes a `Context::Cpu(n)` may name: the per_device engine's
    /// topology, or the machine's, read when first needed.
    cpu_nodes: std::sync::OnceLock<u32>,
    /// The GPU rings (none without a device) and the fences' lanes.
    #[cfg(feature = "cuda")]
    pub(crate) gpu: Arc<crate::exec::gpu::GpuRings>,
    /// Set when the first GPU operation is scheduled: until then no
    /// variable has GPU work to wait for, and a run does not look (one
    /// load of this read-mostly flag).
    #[cfg(feature = "cuda")]
    pub(crate) gpu_used: AtomicBool,
}

impl Core {
    pub(crate) fn new(
        executor: Box<dyn Executor<Core>>,
        b: Settings,
        #[cfg(feature = "cuda")] gpu: Arc<crate::exec::gpu::GpuRings>,
    ) -> Self {
        let traits = executor.traits();
        let workers = traits.worker_threads;
        // Below the cap, bodies run on pushers only when asked for.
        let id = NEXT_ENGINE_ID.fetch_add(1, std_atomic::Ordering::Relaxed);
        Core {
            id,
            // Blocks are given back on workers and taken on pushers.
            oprs: Pool::new().prefetching(workers > 0),
            op_caches: PusherCaches::default(),
            // Blocks die on workers too: swept in rounds (`sweep.rs`).
            blocks: Pool::new().prefetching(workers > 0).sweeping_from(if workers > 0 { SWEEP_ROUND } else { 0 }),
            vars: Variables::new(id),
            waits: Pool::with_first_segment(),
            all_waiters: AllWaiters::default(),
            bulks: Pool::new(),
            dispatcher: Dispatcher::default(),
            spare_blocks: std::array::from_fn(|_| {
                CachePadded::new(SpareBlocks(UnsafeCell::new(SweepCache::default())))
            }),
            completion_sink: CompletionSink {
                complete: Core::sink_complete,
                dropped: Core::sink_dropped,
                release: Core::sink_release,
            },
            traits,
            executor,
            pending: PendingCounter::default(),
            life: Lifecycle::default(),
            observe: Observers::new(workers, b.profile_events, b.hang_report),
            policy: PushPolicy::new(b.max_pending, b.run_on_pusher, b.inline_pace),
            cpu_nodes: std::sync::OnceLock::new(),
            #[cfg(feature = "cuda")]
            gpu,
            #[cfg(feature = "cuda")]
            gpu_used: AtomicBool::new(false),
        }
    }

    // ----- push ------------------------------------------------------------

    #[inline]
    pub(crate) fn check_ctx(&self, ctx: Context) -> Result<(), EngineError> {
        match ctx {
            // Node 0 exists on every machine.
            Context::Cpu(n) if n == Context::ANY_NODE || n == 0 => Ok(()),
            Context::Cpu(n) => self.check_cpu_node(n),
            #[cfg(feature = "cuda")]
            Context::Gpu(id) => self.gpu.check_device(id),
            #[cfg(not(feature = "cuda"))]
            Context::Gpu(id) => Err(EngineError::NoSuchDevice(format!(
                "gpu({id}): this build has no GPU support (build depengine with the `cuda` feature)"
            ))),
        }
    }

    /// Sets the NUMA nodes a CPU context may name (the per_device
    /// engine's topology), before any push.
    pub(crate) fn set_cpu_nodes(&self, nodes: usize) {
        let _ = self.cpu_nodes.set(u32::try_from(nodes).unwrap_or(u32::MAX));
    }

    #[cold]
    fn check_cpu_node(&self, n: u32) -> Result<(), EngineError> {
        let nodes = *self
            .cpu_nodes
            .get_or_init(|| u32::try_from(crate::base::topology::Topology::detect().nodes).unwrap_or(u32::MAX));
        if n < nodes {
            return Ok(());
        }
        Err(EngineError::NoSuchDevice(format!(
            "cpu({n}): this machine has {nodes} NUMA node(s), 0 to {} (Context::cpu() is any)",
            nodes - 1
        )))
    }

    /// Pushes an operation: validates, fills a block, submits it.
    pub(crate) fn push(
        &self,
        body: Body,
        is_async: bool,
        reads: &[Var],
        writes: &[Var],
        opts: &PushOpts,
        kind: OprKind,
    ) -> Result<(), EngineError> {
        if let Err(e) = self.check_ctx(opts.ctx) {
            // Refused: the body is dropped unrun.
            self.drop_user_value(body);
            return Err(e);
        }
        self.queue(body, is_async, reads, writes, opts, kind)
    }

    /// Queues an operation whose context the caller has checked: fills a
    /// block (checking its variables) and submits it (`route.rs`).
    pub(crate) fn queue(
        &self,
        body: Body,
        is_async: bool,
        reads: &[Var],
        writes: &[Var],
        opts: &PushOpts,
        kind: OprKind,
    ) -> Result<(), EngineError> {
        // Keep this thread's order: its bulked pushes go first.
        if let Err(e) = self.flush_bulk() {
            // Refused: the body is dropped unrun.
            self.drop_user_value(body);
            return Err(e);
        }
        // The block cache and the dispatcher's bias both go by this.
        let me = crate::mem::thread_slot::current();
        let op = self.op_caches.take(&self.oprs, me);
        let block = self.oprs.get(op);
        #[cfg(debug_assertions)]
        block.transition(op, crate::graph::opr::phase::FREE, crate::graph::opr::phase::FILLED);
        // Noted before the variables are checked: if the count is the same
        // at dispatch, no deletion was dispatched since the checks passed
        // (`Meta::deletions_seen`). A deletion's own variable is marked
        // requested already and skips the check: its dispatch always looks.
        let deletions_seen = match kind {
            OprKind::DeleteVar => LOOK_AT_EACH_VAR,
            _ => self.vars.deletions_dispatched(),
        };
        // The dispatch shards of the variables (`dispatch.rs`, "Shards");
        // a variable no push has placed yet is placed in this thread's.
        let place = || self.placing(me);
        let mut shards = 0u32;
        // SAFETY: the block was just taken: the pusher owns it (phase 1).
        let filled = unsafe {
            block.deps.with_mut(|deps| {
                let deps = &mut *deps;
                deps.clear();
                if let Body::Prebuilt(inner) = &body {
                    // The operator owns its variables; only re-check them.
                    return inner.deps.as_slice().iter().try_for_each(|d| {
                        let v = Var { engine: self.id, slot: d.slot(), gen: d.gen };
                        shards |= self.vars.slot_and_shard(v, place)?.1;
                        Ok(())
                    });
                }
                if matches!(kind, OprKind::DeleteVar) {
                    // The deletion itself passes its own request. (It
                    // names its variable as written, and nothing else.)
                    debug_assert!(reads.is_empty());
                    for &v in writes {
                        if v.engine != self.id {
                            return Err(EngineError::ForeignVar);
                        }
                        shards |= 1 << self.vars.shard_of(self.vars.get(v.slot), place);
                        deps.add(Dep::new(v.slot, v.gen, WRITE));
                    }
                    return Ok(());
                }
                // Two loops, not one over both lists: the compiler keeps
                // each tight (perf/instructions.sh). Each variable's
                // append lines start on their way here now, while the
                // block is filled (`VarQueue::prefetch_for_append`).
                for &v in writes {
                    let (slot, shard) = self.vars.slot_and_shard(v, place)?;
                    slot.queue().prefetch_for_append(&self.blocks, true);
                    shards |= shard;
                    deps.add(Dep::new(v.slot, v.gen, WRITE));
                }
                for &v in reads {
                    let (slot, shard) = self.vars.slot_and_shard(v, place)?;
                    slot.queue().prefetch_for_append(&self.blocks, false);
                    shards |= shard;
                    deps.add(Dep::new(v.slot, v.gen, READ));
                }
                Ok(())
            })
        };
        if let Err(e) = filled {
            #[cfg(debug_assertions)]
            block.transition(op, crate::graph::opr::phase::FILLED, crate::graph::opr::phase::FREE);
            self.oprs.give(op);
            // Refused: the body is dropped unrun.
            self.drop_user_value(body);
            return Err(e);
        }
        // SAFETY: still phase 1: exclusively ours.
        unsafe {
            block.body.with_mut(|b| {
                // A free block's body is `Empty` (`finish` and `discard`
                // leave it so): nothing to drop, so no drop check.
                debug_assert!(matches!(*b, Body::Empty));
                std::ptr::write(b, body)
            });
            let meta = block.meta_mut();
            meta.opts = *opts;
            meta.kind = kind;
            meta.is_async = is_async;
            meta.deletions_seen = deletions_seen;
            meta.rejected = None;
            // Off: one load and one branch. (`finish` leaves the field 0.)
            let session = self.observe.profiler.session();
            if session != 0 && !matches!(kind, OprKind::Wait(_) | OprKind::Hold(_)) {
                meta.profile_session = session;
                self.observe.profiler.stamp_push(block);
            }
        }
        // An operation with no variables goes to the pusher's home shard.
        if shards == 0 {
            shards = 1 << place();
        }
        self.submit(op, shards, me)
    }

    /// Marks the home shard of the thread holding slot `me` active, for a
    /// variable placed in it or an operation with no variables sent to it;
    /// returns it. The dispatcher's sums read only the active shards
    /// (`dispatch.rs`).
    #[inline(always)]
    pub(crate) fn placing(&self, me: Option<usize>) -> usize {
        let home = home_shard(me);
        self.dispatcher.activate(1 << home);
        home
    }

    /// Hands the operation, whose variables lie in the dispatch shards
    /// `shards` (not 0), to the dispatcher (which counts it as pending when it
    /// stamps its ticket), from the calling thread, which holds thread
    /// slot `me`.
    fn submit(&self, op: u32, shards: u32, me: Option<usize>) -> Result<(), EngineError> {
        if let Err(e) = self.life.check_open() {
            self.discard(op);
            return Err(e);
        }
        let mut ready = ReadyList { head: NIL, tail: NIL };
        self.dispatcher
            .submit(&self.oprs, op, shards, me, |op, ticket, shard| self.dispatch(op, ticket, shard, &mut ready));
        self.schedule_list(ready);
        if self.policy.max_pending != 0 {
            // The shard the operation counts in: its lowest.
            let shard = shards.trailing_zeros() as usize;
            if self.policy.runs.is_on() {
                if self.pending_reached(shard, self.policy.runs.low_water()) {
                    self.throttle(shard);
                }
            } else {
                let look = self.policy.runs.note_queued_push();
                if self.pending_reached(shard, self.policy.max_pending) {
                    self.throttle(shard);
                } else if look {
                    self.probe_running_here(shard);
                }
            }
        }
        Ok(())
    }

    /// Drops a value of the user's (a closure that did not run, an
    /// operator's last reference, a bulk's members) from engine code: its
    /// `Drop` runs as a body would, marked in `CURRENT_OP`, so that a last
    /// `Engine` handle dropped there hands the engine's shutdown to the
    /// reaper instead of waiting on this stack for the operation this
    /// thread is finishing; and a panic there is caught (`unwind.rs`).
    #[inline]
    pub(crate) fn drop_user_value<T>(&self, value: T) {
        if !std::mem::needs_drop::<T>() {
            return;
        }
        let outer = CURRENT_OP.with(|c| c.replace((self, DROPPING)));
        crate::base::unwind::drop_quietly(value);
        CURRENT_OP.with(|c| c.set(outer));
    }

    /// Whether the calling thread is running a body of this engine.
    pub(crate) fn in_own_body(&self) -> bool {
        std::ptr::eq(CURRENT_OP.with(|c| c.get()).0, self)
    }

    /// A synchronous push with no variables that would take the engine to
    /// the pending cap runs its body on the pusher, inside the push, with
    /// no block and no queue (`Core::run_unqueued`), as libgomp runs an
    /// undeferred task: the workers are behind, so queuing it would only
    /// cost a block's trip to another core and a wait at the cap. It
    /// conflicts with nothing, so running it before older queued work
    /// breaks no rule. Returns its ticket when it is to run so: a `Normal`
    /// CPU operation, on an executor that allows it, outside any body of
    /// this engine (a body's own operation is pending: it must not hold on
    /// to the cap), with the profiler and diagnosis off (they watch queued
    /// operations), and only when no other thread is combining (taking the
    /// ticket never waits). `None`: push it the usual way.
    ///
    /// Once one has run so, such pushes go on running unqueued until the
    /// pending count is down to half the cap, not only while it is at the
    /// cap: at the cap every other one of them would be queued as soon as
    /// a completion made room, paying the hand-off (several times what a
    /// run inside the push costs the pusher) only to meet the cap again at
    /// the next push. Half the cap still queued keeps the workers busy
    /// meanwhile ([`UNQUEUED_DOWN_TO_DIVISOR`](crate::base::tuning::UNQUEUED_DOWN_TO_DIVISOR)).
    ///
    /// Below half the cap they go on running unqueued while this thread's
    /// runs come faster than the inline pace (`inline_pace.rs`): bodies that
    /// short cost the pusher less to run than to hand over, and the workers
    /// they would keep busy pay nothing back (perf/journal/2026-11-27.md,
    /// "tiny bodies with no variables stay on the pusher").
    ///
    /// While pushers run the operations that their pushes make ready
    /// (`pusher_runs.rs`), such pushes run unqueued at any pending count.
    #[inline]
    pub(crate) fn unqueued_ticket(&self, opts: &PushOpts) -> Result<Option<UnqueuedTicket>, EngineError> {
        if self.policy.max_pending == 0 || opts.prop != FnProperty::Normal || opts.ctx.is_gpu() {
            return Ok(None);
        }
        // Past the cap (on down to half of it, only when running on the
        // pusher was asked for: by default a push below the cap never runs
        // a body on its thread).
        let at = self.policy.unqueued_limit();
        // It would be queued in this thread's home shard.
        let me = crate::mem::thread_slot::current();
        if !self.pending_reached(home_shard(me), at.limit) && !self.policy.unqueued_below_limit(at) {
            return Ok(None);
        }
        let ticket = self.unqueued_ticket_now(me)?;
        if ticket.is_some() {
            self.policy.note_unqueued(at);
        }
        Ok(ticket)
    }

    /// The ticket of a push that [`unqueued_ticket`](Self::unqueued_ticket)
    /// sends inside itself, if this engine and thread allow that now.
    #[inline(never)]
    fn unqueued_ticket_now(&self, me: Option<usize>) -> Result<Option<UnqueuedTicket>, EngineError> {
        if !self.may_run_ready_here() {
            return Ok(None);
        }
        // Keep this thread's order: its bulked pushes go first.
        self.flush_bulk()?;
        self.life.check_open()?;
        let mut after_close = false;
        let ticket = self.take_ticket(me, 1 << self.placing(me), || {
            after_close = self.life.is_closing();
            true
        });
        Ok(ticket.map(|ticket| UnqueuedTicket { ticket, after_close }))
    }

    /// The next ticket, for an operation that runs inside its push and
    /// whose variables lie in the dispatch shards `shards` (for one with
    /// none, the pusher's home shard), if
    /// this thread (holding slot `me`) can become their combiner at once
    /// (`Dispatcher::take_ticket`): what was submitted meanwhile is
    /// dispatched, and scheduled once the combiner has let go. `then` runs
    /// while combining and says whether the ticket is taken.
    ///
    /// In line, with the dispatcher's half: every direct run takes one or
    /// two tickets, and out of line each cost a call, its arguments and
    /// the call of `then` (`DIRECT=1 perf/instructions.sh`: `chain` 614 →
    /// 582 instructions an operation).
    #[inline(always)]
    pub(crate) fn take_ticket(&self, me: Option<usize>, shards: u32, then: impl FnOnce() -> bool) -> Option<u64> {
        let mut ready = ReadyList { head: NIL, tail: NIL };
        let ticket = self.dispatcher.take_ticket(
            &self.oprs,
            shards,
            me,
            |op, ticket, shard| self.dispatch(op, ticket, shard, &mut ready),
            then,
        );
        self.schedule_list(ready);
        ticket
    }

    /// Whether a stint is on and takes an operation pushed with `opts`
    /// onto its pusher: a `Normal` CPU one (`pusher_runs.rs`). The cheap
    /// half of the rule, for the hot path; [`may_run_ready_here`](Self::may_run_ready_here)
    /// is the other.
    #[inline(always)]
    pub(crate) fn stint_takes(&self, opts: &PushOpts) -> bool {
        self.policy.runs.is_on() && opts.prop == FnProperty::Normal && !opts.ctx.is_gpu()
    }

    /// Whether a push from this thread may run operations inside itself
    /// on this engine now: the executor allows it, no profiler or hang
    /// diagnosis watches the queues, and the thread is not in a body of
    /// this engine (whose own operation is pending, and holds its
    /// variables).
    pub(crate) fn may_run_ready_here(&self) -> bool {
        self.traits.runs_on_pushers && !self.observe.watch_queues() && !self.in_own_body()
    }

    /// Schedules what a combining pass found ready (after it let go).
    /// Inlined into each caller: `submit`'s copy is on every push.
    #[inline(always)]
    fn schedule_list(&self, ready: ReadyList) {
        let mut op = ready.head;
        while op != NIL {
            let block = self.oprs.get(op);
            let next = block.link.load(Ordering::Relaxed);
            self.schedule_ready(op, block, true);
            op = next;
        }
    }

    /// Dispatches everything submitted so far; `then` runs while combining
    /// every active shard, between two dispatches.
    pub(crate) fn flush_dispatcher(&self, then: impl FnOnce()) {
        self.flush_shards(ALL_SHARDS, |_| then());
    }

    /// Dispatches everything submitted so far to the dispatch shards
    /// `shards`; `then` runs while combining those of them that are
    /// active, which it is told.
    pub(crate) fn flush_shards(&self, shards: u32, then: impl FnOnce(u32)) {
        let mut ready = ReadyList { head: NIL, tail: NIL };
        let me = crate::mem::thread_slot::current();
        self.dispatcher.flush(
            &self.oprs,
            shards,
            me,
            |op, ticket, shard| self.dispatch(op, ticket, shard, &mut ready),
            then,
        );
        self.schedule_list(ready);
    }

    /// Closes the engine to new work: every operation dispatched after this
    /// is rejected. Returns whether this call closed it.
    pub(crate) fn close(&self) -> bool {
        let mut closed_now = false;
        self.flush_dispatcher(|| closed_now = !self.life.shutting_down.swap(true, Ordering::SeqCst));
        closed_now
    }

    /// Returns the shared caches' free blocks, the pushers' operation
    /// blocks and the combiner's variable blocks, to their pools, so that
    /// the pools' live counts are exact (pool statistics; the slot caches'
    /// blocks are counted apart, `live_op_blocks`).
    pub(crate) fn return_spare_blocks(&self) {
        self.op_caches.give_back_shared(&self.oprs);
        self.flush_shards(ALL_SHARDS, |held| {
            for s in shards_in(held) {
                // SAFETY: we hold shard `s`, so none of its appends runs
                // meanwhile.
                self.spare_blocks[s].0.with_mut(|spares| unsafe { (*spares).give_back(&self.blocks) })
            }
        });
    }

    /// Operations dispatched and not finished, in every shard.
    pub(crate) fn pending(&self) -> u64 {
        let active = self.dispatcher.active_mask();
        let dispatched = self.dispatcher.dispatched();
        dispatched.saturating_sub(self.pending.finished_in(active))
    }

    /// Operations dispatched and not finished in dispatch shard `shard`.
    pub(crate) fn pending_in(&self, shard: usize) -> u64 {
        self.pending.pending(shard, self.dispatcher.dispatched_in(shard))
    }

    /// Whether the pending count of dispatch shard `shard` (the one a
    /// push's operation counts in) has reached `limit`, for a push: the
    /// bound `PendingCounter::pending_at_most` answers most pushes
    /// without reading the finished count, which the workers keep
    /// writing (one cache-line transfer a push in a pipeline). The exact
    /// count is read when the bound reaches `limit` or passes the
    /// pending high-water mark, so the mark (`EngineStats`) stays exact:
    /// every push that raises it reads the count.
    #[inline]
    pub(crate) fn pending_reached(&self, shard: usize, limit: u64) -> bool {
        let dispatched = self.dispatcher.dispatched_in(shard);
        let bound = self.pending.pending_at_most(shard, dispatched);
        if bound < limit && bound <= self.observe.stats.pending_high_water() {
            return false;
        }
        let pending = self.pending.pending_seen(shard, dispatched, limit);
        self.observe.stats.note_pending(pending);
        pending >= limit
    }

    /// Counts `n` operations of dispatch shard `shard` as finished.
    #[inline]
    pub(crate) fn count_finished(&self, shard: usize, n: u64) {
        if self.pending.done(shard, n, || self.pending.all_finished(&self.dispatcher)) {
            self.all_waiters.wake_all(&self.waits);
        }
    }

    /// Gives back a block that was filled but never dispatched.
    fn discard(&self, op: u32) {
        let block = self.oprs.get(op);
        // SAFETY: never published, still exclusively ours.
        let body = unsafe { block.body.with_mut(|b| std::mem::replace(&mut *b, Body::Empty)) };
        self.drop_user_value(body);
        #[cfg(debug_assertions)]
        block.transition(op, crate::graph::opr::phase::FILLED, crate::graph::opr::phase::FREE);
        self.oprs.give(op);
    }

    // ----- dispatch (combiner only) ----------------------------------------

    /// Stamps `op`'s ticket and appends it to its variables' queues, as the
    /// combiner of its shards, `shard` its lowest; adds it to `ready` if
    /// every variable granted it at once.
    fn dispatch(&self, op: u32, ticket: u64, shard: usize, ready: &mut ReadyList) {
        let block = self.oprs.get(op);
        #[cfg(debug_assertions)]
        block.transition(op, crate::graph::opr::phase::FILLED, crate::graph::opr::phase::DISPATCHED);
        // SAFETY: phase 2: the combiner owns meta and reads deps; granters
        // touch only `wait` until it reaches zero, which cannot happen
        // before the last append (see below), after which nothing here
        // touches the block unless the grants came at once.
        unsafe {
            let meta = block.meta_mut();
            meta.ticket = ticket;
            let deps = block.dep_slice();
            // The push checked every variable after it noted the count of
            // dispatched deletions; each deletion's dispatch (combiner,
            // so ordered before this one) marks its variable before it
            // adds one. The same count here: none has been dispatched
            // since, and the checks still hold. Otherwise look at each.
            let live = self.vars.deletions_dispatched() == meta.deletions_seen
                || deps.iter().all(|d| self.vars.get(d.slot()).dispatchable(d.gen));
            if !live || self.life.is_closing() {
                // A variable's deletion, or the engine's closing, was
                // linearized before this operation.
                let why = if live { PUSHED_AT_SHUTDOWN } else { "uses a deleted variable" };
                meta.rejected = Some(OpError::new(meta.opts.name, why));
                block.wait.store(0, Ordering::Relaxed);
                ready.push(&self.oprs, op);
                return;
            }
            if matches!(meta.kind, OprKind::DeleteVar) {
                for d in deps {
                    self.vars.get(d.slot()).life.fetch_or(DELETE_DISPATCHED, Ordering::AcqRel);
                }
                self.vars.note_deletion_dispatched();
            }
            if self.observe.diagnosis.is_some() {
                self.observe.diag_dispatched(block, meta, deps);
            }
            // `wait` counts every variable; the grants the appends make at
            // once are taken off after the last append. Granters can take
            // off only the others, so `wait` cannot reach zero before then
            // unless no grant came at once: then the last append hands the
            // block over, and nothing here touches it after that append.
            let n = deps.len() as u32;
            block.wait.store(n, Ordering::Relaxed);
            let mut at_once = 0;
            let mut waits_for_read = false;
            self.spare_blocks[shard].0.with_mut(|spares| {
                // SAFETY: the shard's combiner alone touches its spares
                // (field docs).
                let spares = &mut *spares;
                for d in deps {
                    // Read before the append: the last one may hand the
                    // block over, and `d` lies in it.
                    let writes = d.writes();
                    if self.vars.get(d.slot()).queue().append(&self.blocks, spares, op, writes) {
                        at_once += 1;
                    } else if !writes {
                        waits_for_read = true;
                    }
                }
            });
            // Granted by every variable at once: no granter can touch `wait`,
            // so the operation is ready without a locked instruction; by
            // none: the granters count it down alone (no locked instruction
            // here either).
            if at_once == n || (at_once > 0 && block.wait.fetch_sub(at_once, Ordering::AcqRel) == at_once) {
                ready.push(&self.oprs, op);
            } else if waits_for_read && self.pending.drain_rate.ops_are_short() {
                // A read that waits is queued behind a write, whose
                // completion grants every read behind it, one locked
                // decrement of `wait` after another, each on this line,
                // written here. Served from this core's cache each is a
                // snoop; from the shared cache, where this sends the line,
                // about half of that. Only while operations are short: with
                // long ones it measured 1-3 % slower (not explained; perhaps
                // the worker that shares this core, which would have found
                // the line in its own cache). The block may be another
                // thread's already; the hint changes no value.
                crate::sync::demote(std::ptr::from_ref(block).cast(), 1);
            }
        }
    }

    // ----- grant and schedule ----------------------------------------------

    /// One of `op`'s variables granted it (on completing the operation
    /// with ticket `by`); schedules it when it was the last.
    #[inline]
    pub(crate) fn grant(&self, op: u32, by: u64) {
        let block = self.oprs.get(op);
        // The pusher wrote the block last. Whoever takes `wait` to zero runs
        // it (most often this thread, next): start all its lines on their
        // way before the locked decrement waits for the first.
        self.oprs.prefetch_value(block);
        if block.wait.fetch_sub(1, Ordering::AcqRel) == 1 {
            // SAFETY: taking `wait` to zero made us the block's owner.
            if unsafe { block.meta() }.profile_session != 0 {
                self.observe.profiler.stamp_made_ready_by(block, by);
            }
            self.schedule_ready(op, block, false);
        }
    }

    /// `op` (its block `block`) is ready: wait markers and rejected
    /// operations complete on the spot (engine code only, and the executor
    /// may be stopping). An `Async` or `DeleteVar` operation found ready
    /// `at_dispatch` runs here, on the dispatching thread, on executors
    /// with the kAsync inline path. Everything else goes to the executor.
    #[inline]
    fn schedule_ready(&self, op: u32, block: &OprBlock, at_dispatch: bool) {
        // SAFETY: a ready block is owned by whoever schedules it (phase 3).
        let meta = unsafe { block.meta() };
        if meta.profile_session != 0 || self.observe.diagnosis.is_some() {
            self.observe.observe_ready(block, meta);
        }
        if matches!(meta.kind, OprKind::Wait(_) | OprKind::Hold(_)) || meta.rejected.is_some() {
            self.run(op, None);
        } else if at_dispatch
            && matches!(meta.opts.prop, FnProperty::Async | FnProperty::DeleteVar)
            && !meta.opts.ctx.is_gpu()
            && self.traits.runs_async_inline
        {
            crate::exec::inline::run_inline(self, op);
        } else if at_dispatch && self.stint_takes(&meta.opts) && self.may_run_ready_here() {
            crate::exec::inline::run_inline(self, op);
            self.policy.runs.note_run();
        } else {
            self.executor.schedule(self, op, meta.opts.prop);
        }
    }

    /// Whether the calling thread is inside a body of this engine that holds
    /// `var` (or any body of this engine, for `var == None`).
    pub(crate) fn would_deadlock(&self, var: Option<Var>) -> bool {
        let (core, op) = CURRENT_OP.with(|c| c.get());
        if !std::ptr::eq(core, self) || op == NIL {
            return false;
        }
        match var {
            None => true,
            // An operation run inside its push holds no variable, nor does
            // a value being dropped.
            Some(_) if op == UNQUEUED || op == DROPPING => false,
            // SAFETY: a direct run's variables live in its push's frame,
            // below this call, until its body has returned.
            Some(v) if op == DIRECT => unsafe { &*DIRECT_DEPS.with(|c| c.get()) }.iter().any(|d| d.slot() == v.slot),
            // SAFETY: the running body's block is alive (its runner holds
            // it) and its deps are not written while it runs.
            Some(v) => unsafe { self.oprs.get(op).dep_slice().iter().any(|d| d.slot() == v.slot) },
        }
    }
}

impl Runner for Core {
    #[inline(always)]
    fn run(&self, op: u32, worker: Option<usize>) {
        Core::run(self, op, worker);
    }

    fn enter_worker(&self) {
        Core::enter_worker(self);
    }

    #[inline]
    fn flush_worker_batch(&self) {
        Core::flush_worker_batch(self);
    }

    fn leave_worker(&self) {
        Core::leave_worker(self);
    }

    #[inline]
    fn in_own_body(&self) -> bool {
        Core::in_own_body(self)
    }

    #[inline(always)]
    fn oprs(&self) -> &Pool<OprBlock> {
        &self.oprs
    }

    fn profiler(&self) -> &Profiler {
        &self.observe.profiler
    }

    #[cfg(feature = "cuda")]
    #[inline]
    fn vars(&self) -> &Variables {
        &self.vars
    }

    #[cfg(feature = "cuda")]
    #[inline]
    fn gpu_used(&self) -> &AtomicBool {
        &self.gpu_used
    }
}

impl ReadyList {
    fn push(&mut self, oprs: &Pool<OprBlock>, op: u32) {
        oprs.get(op).link.store(NIL, Ordering::Relaxed);
        if self.tail == NIL {
            self.head = op;
        } else {
            oprs.get(self.tail).link.store(op, Ordering::Relaxed);
        }
        self.tail = op;
    }
}

#[cfg(test)]
mod tests {
    use super::Core;
    use std::mem::offset_of;

    /// A slot is retired when its last generation is deleted, so that no
    /// handle of any of its generations is ever taken for a later variable
    /// (the slot is started near the wrap by hand: 2^32 deletions would
    /// take hours).
    #[cfg(not(depengine_loom))]
    #[test]
    fn a_slot_is_retired_at_its_last_generation_never_reused() {
        use crate::{Engine, EngineError, EngineKind, Var};
        for kind in EngineKind::ALL {
            let engine = Engine::builder().kind(kind).cpu_workers(1).build().unwrap();
            let core = engine.core();
            let first = engine.new_var();
            let aged = Var { gen: u32::MAX - 2, ..first };
            core.vars.get(first.slot).life.store(u64::from(aged.gen) << 32, crate::sync::Ordering::Release);
            assert_eq!(engine.var_version(first), Err(EngineError::DeletedVar));
            let mut stale = vec![first];
            let mut live = aged;
            for gen in [u32::MAX - 2, u32::MAX - 1, u32::MAX] {
                assert_eq!(
                    (live.slot, live.gen),
                    (first.slot, gen),
                    "{kind:?}: the slot is reused up to its last generation"
                );
                engine.push_sync(|_| {}, &[], &[live]).unwrap();
                engine.delete_var(live, || {}).unwrap();
                engine.wait_all().unwrap();
                stale.push(live);
                live = engine.new_var();
            }
            assert_ne!(live.slot, first.slot, "{kind:?}: the retired slot was handed out again");
            assert_eq!(core.vars.retired(), 1);
            for s in stale {
                assert_eq!(engine.push_sync(|_| {}, &[], &[s]), Err(EngineError::DeletedVar), "{kind:?} {s:?}");
                assert_eq!(engine.delete_var(s, || {}), Err(EngineError::DeletedTwice), "{kind:?} {s:?}");
            }
            engine.push_sync(|_| {}, &[], &[live]).unwrap();
            engine.wait_var(live).unwrap();
        }
    }

    /// The combiner's spare blocks change on most appends; the flags every
    /// run reads must not share their cache line.
    #[test]
    fn the_spare_blocks_have_a_line_of_their_own() {
        let line = |offset: usize| offset / 64;
        let spares = offset_of!(Core, spare_blocks);
        assert_eq!(spares % 64, 0);
        for (name, offset) in [
            ("shutting_down", offset_of!(Core, life.shutting_down)),
            ("cancelling", offset_of!(Core, life.cancelling)),
            ("profiler", offset_of!(Core, observe.profiler)),
            ("diagnosis", offset_of!(Core, observe.diagnosis)),
            ("executor", offset_of!(Core, executor)),
        ] {
            assert_ne!(line(offset), line(spares), "{name} shares the spare blocks' cache line");
        }
    }
}
