//! Direct runs: in a stint (`pusher_runs.rs`), a synchronous push whose
//! variables all grant it at once runs its body inside the push with no
//! operation block at all.
//!
//! A stint already runs such an operation on its pusher, through the
//! inline trampoline, once its dispatch finds it ready (`Core::
//! schedule_ready`). But it still takes the whole queued path to get
//! there: an operation block from the pool, the closure stored in it and
//! read back, the variable list written and read twice, the ready list,
//! the runner's checks and the block's return. On one thread that is most
//! of what an operation costs (`perf/instructions.sh`: about 1,100
//! instructions for a `chain` operation on `naive`).
//!
//! A direct run keeps only what the ordering rules need:
//!
//! 1. **Grant.** As the combiner (`Dispatcher::take_ticket`, which never
//!    waits for another combiner), each variable grants the access at
//!    once or not at all (`VarQueue::grant_at_once`: a parked queue, or a
//!    read joining running reads). If every variable grants it, the
//!    operation takes the next ticket, in order with every other push. If
//!    one does not, the grants taken so far are released (no other
//!    operation can have been queued behind them: appending is the
//!    combiner's alone, and we held it throughout), no ticket is taken,
//!    and the push goes the usual way. The same happens when the engine is
//!    closing or a variable is being deleted: the usual way rejects it.
//! 2. **Run.** The body runs in the push's own frame, after the combiner
//!    has let go, under the same failure rule as a queued operation's
//!    (a failure held by a variable it reads skips it, unless `no_skip`).
//! 3. **Release.** Its outcome is recorded on the written variables, and
//!    each variable is released the way a queued operation's completion
//!    releases it (`Core::release_vars`): whoever was queued behind it
//!    meanwhile is granted. Where that would take two locked instructions
//!    or more (a read takes two, its count and the park; a write one), the
//!    pusher first becomes the combiner again, if it can at once, and
//!    releases each access that nothing waits behind with plain stores
//!    (`VarQueue::release_at_once`): as the only appender it knows that
//!    nobody fills the queue's sentinel meanwhile, which is all the
//!    park's CAS guards against.
//!
//! A direct run is never pending, as for a run unqueued
//! (`Core::run_unqueued`): it ends before its push returns. The same
//! conditions as a stint's runs apply (`Core::may_run_ready_here`): never
//! inside a body of this engine, nor with the profiler or hang diagnosis
//! on. While its body runs, the thread's running operation names the
//! variables it holds (`DIRECT_DEPS`), so that a wait inside the body on
//! one of them is refused as a deadlock, as in a queued body.

use crate::base::context::{PushOpts, RunContext};
use crate::base::error::EngineError;
use crate::core::run::failure_of;
use crate::core::{Core, CURRENT_OP, DIRECT, DIRECT_DEPS};
use crate::graph::opr::{merge, Dep, INLINE_VARS, READ, WRITE};
use crate::graph::var::{Var, VarSlot};
use crate::mem::inline_fn::Outcome;
use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// A push granted by all its variables at once, with its place in the
/// ticket order: it runs with [`Core::run_direct`], which releases them.
/// The pusher keeps it in its own frame and [`Core::direct_grant`] fills
/// it in place (returned by value, its variable list, just written in
/// pieces, would be read back whole: a stalled load on every push).
///
/// Its variables are at most [`INLINE_VARS`] (`direct_grant` takes no
/// more), so they need none of a block's [`DepList`](crate::graph::opr::DepList)
/// but its inline array: nothing to spill, set up or drop on every push.
///
/// Each variable's slot is resolved once, by the push's check, and kept
/// beside its entry: the grant, the run's records and the release use it
/// instead of looking the variable up again.
///
/// Its arrays start uninitialised ([`EMPTY`](Self::EMPTY)): a default
/// grant wrote them all on every push (`DIRECT=1 perf/instructions.sh`:
/// `chain` 526.2 → 513.1 instructions, `layered` 1,108.6 → 1,081.6).
pub(crate) struct DirectGrant<'a> {
    ticket: u64,
    /// The dispatch shards of its variables.
    shards: u32,
    /// The pushing thread's slot.
    me: Option<usize>,
    /// Invariant: `deps[..len]` and `slots[..len]` are initialised, and
    /// `len <= INLINE_VARS` (only [`add`](Self::add) raises it, after
    /// writing entry `len` with a checked index).
    len: usize,
    deps: [MaybeUninit<Dep>; INLINE_VARS],
    /// `slots[i]`: the slot of `deps[i]`'s variable.
    slots: [MaybeUninit<&'a VarSlot>; INLINE_VARS],
}

impl<'a> DirectGrant<'a> {
    /// A grant with no variables, no shards and no ticket yet.
    pub(crate) const EMPTY: Self = DirectGrant {
        ticket: 0,
        shards: 0,
        me: None,
        len: 0,
        deps: [MaybeUninit::uninit(); INLINE_VARS],
        slots: [MaybeUninit::uninit(); INLINE_VARS],
    };

    /// Adds `dep`, whose variable's slot is `slot`, merged with an earlier
    /// entry for the same variable, as `DepList::add` does. The caller adds
    /// at most `INLINE_VARS` (one more panics on the index: never written
    /// past the arrays).
    #[inline(always)]
    fn add(&mut self, dep: Dep, slot: &'a VarSlot) {
        let len = self.len;
        // SAFETY: `deps[..len]` is initialised (the field's invariant);
        // `MaybeUninit<Dep>` has `Dep`'s layout.
        let added = unsafe { std::slice::from_raw_parts_mut(self.deps.as_mut_ptr().cast::<Dep>(), len) };
        if !merge(added, dep) {
            self.deps[len].write(dep);
            self.slots[len].write(slot);
            self.len = len + 1;
        }
    }

    /// The variables added, each once.
    #[inline(always)]
    fn deps(&self) -> &[Dep] {
        // SAFETY: as in `add`.
        unsafe { std::slice::from_raw_parts(self.deps.as_ptr().cast::<Dep>(), self.len) }
    }

    /// The variables added, each once, with their slots.
    #[inline(always)]
    fn deps_and_slots(&self) -> impl Iterator<Item = (Dep, &'a VarSlot)> + '_ {
        // SAFETY: `slots[..len]` is initialised (the field's invariant);
        // `len <= INLINE_VARS`, so the slice is in bounds.
        let slots = unsafe { self.slots.get_unchecked(..self.len) };
        // SAFETY: each of them is initialised, as above.
        self.deps().iter().zip(slots).map(|(&d, s)| (d, unsafe { s.assume_init() }))
    }
}

impl Core {
    /// Grants a synchronous push its variables at once and takes its
    /// ticket, into `grant` (set up here, only for a push a stint takes),
    /// if it may run directly now (module docs). `Ok(false)`: push it the
    /// usual way (which also reports an invalid variable).
    #[inline(always)]
    pub(crate) fn direct_grant<'a>(
        &'a self,
        grant: &mut Option<DirectGrant<'a>>,
        reads: &[Var],
        writes: &[Var],
        opts: &PushOpts,
    ) -> Result<bool, EngineError> {
        if !self.stint_takes(opts) || reads.len() + writes.len() > INLINE_VARS {
            return Ok(false);
        }
        self.direct_grant_now(grant.insert(DirectGrant::EMPTY), reads, writes)
    }

    /// [`direct_grant`](Self::direct_grant) past its first checks. In
    /// line: out of line, its call cost every direct run about 27
    /// instructions (`DIRECT=1 perf/instructions.sh`: `chain` 570 → 543);
    /// in line, the push's larger frame costs a push that no stint takes
    /// (every push of the default engine) 4–6 (`PUSHER=1`: `random`
    /// 1,006 → 1,012).
    #[inline(always)]
    fn direct_grant_now<'a>(
        &'a self,
        grant: &mut DirectGrant<'a>,
        reads: &[Var],
        writes: &[Var],
    ) -> Result<bool, EngineError> {
        if !self.may_run_ready_here() {
            return Ok(false);
        }
        // Once GPU work has been scheduled, a host body may first have to
        // wait for some (`Core::run`); only the usual runner does that.
        #[cfg(feature = "cuda")]
        if self.gpu_used.load(crate::sync::Ordering::Relaxed) {
            return Ok(false);
        }
        let me = crate::mem::thread_slot::current();
        grant.me = me;
        let home = || self.placing(me);
        for (vars, mode) in [(writes, WRITE), (reads, READ)] {
            for &v in vars {
                let Ok((slot, shard)) = self.vars.slot_and_shard(v, home) else {
                    return Ok(false);
                };
                grant.shards |= shard;
                grant.add(Dep::new(v.slot, v.gen, mode), slot);
            }
        }
        // Keep this thread's order: its bulked pushes go first.
        crate::core::bulk::flush_for(self)?;
        self.life.check_open()?;
        match self.take_ticket(me, grant.shards, || self.grant_at_once(grant)) {
            Some(ticket) => {
                grant.ticket = ticket;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Step 1 of the module docs, as the combiner: whether every variable
    /// granted its access at once (else none holds one).
    #[inline(always)]
    fn grant_at_once(&self, grant: &DirectGrant<'_>) -> bool {
        if self.life.is_closing() {
            return false;
        }
        for (i, (d, slot)) in grant.deps_and_slots().enumerate() {
            // SAFETY: we are the combiner, the queues' only appender.
            if !slot.dispatchable(d.gen) || !unsafe { slot.queue().grant_at_once(&self.blocks, d.writes()) } {
                // SAFETY: we hold exactly the accesses granted so far, and
                // nothing was queued behind them (we still append alone).
                unsafe { self.ungrant(&grant.deps()[..i]) };
                return false;
            }
        }
        true
    }

    /// Gives back the accesses `deps` of a grant that another variable
    /// refused. Out of line: in line, it made the grant's loop too large
    /// for its closure to be inlined into the combiner's pass (a call a
    /// direct run).
    ///
    /// # Safety
    /// The caller, as the combiner, holds exactly these accesses, with
    /// nothing queued behind them: releasing them unrecorded leaves each
    /// queue as it was found, and grants nobody.
    #[cold]
    #[inline(never)]
    unsafe fn ungrant(&self, deps: &[Dep]) {
        // SAFETY: per the contract.
        let freed = unsafe { self.release_vars(deps.iter().copied(), false, false, None, 0) };
        self.retire_var_blocks(freed);
    }

    /// As the combiner, if this thread can become it at once, releases
    /// each of `deps` that nothing waits behind with plain stores
    /// (`VarQueue::release_at_once`), setting bit `i` of `released` for
    /// `deps[i]`.
    fn release_at_once(&self, grant: &DirectGrant<'_>, released: &mut u32) {
        self.take_ticket(grant.me, grant.shards, || {
            for (i, (d, slot)) in grant.deps_and_slots().enumerate() {
                // SAFETY: we are the combiner (the queues' only appender),
                // and the caller's grant holds this access, not completed.
                if unsafe { slot.queue().release_at_once(&self.blocks, d.writes()) } {
                    *released |= 1 << i;
                }
            }
            false // no ticket
        });
    }

    /// Runs a push granted by [`direct_grant`](Self::direct_grant) (steps
    /// 2 and 3 of the module docs).
    #[inline(always)]
    pub(crate) fn run_direct(
        &self,
        grant: &DirectGrant<'_>,
        opts: &PushOpts,
        body: impl FnOnce(&RunContext) -> Outcome,
    ) {
        let (ticket, deps) = (grant.ticket, grant.deps());
        // SAFETY: the grant holds every access in `deps`.
        let skipped = unsafe { self.skip_failure(true, opts, deps) };
        let ran = skipped.is_none();
        let failure = match skipped {
            Some(inherited) => {
                self.observe.stats.skipped();
                self.drop_user_value(body);
                Some(inherited)
            }
            None => {
                let ctx = RunContext { ticket, priority: opts.priority, ..RunContext::on_host(opts.ctx) };
                let outer = CURRENT_OP.with(|c| c.replace((self, DIRECT)));
                let outer_deps = DIRECT_DEPS.with(|c| c.replace(deps));
                let outcome = catch_unwind(AssertUnwindSafe(|| body(&ctx)));
                DIRECT_DEPS.with(|c| c.set(outer_deps));
                CURRENT_OP.with(|c| c.set(outer));
                failure_of(opts.name, outcome)
            }
        };
        if let Some(failure) = &failure {
            self.record_failure(failure);
        }
        // As the combiner, release at once each access that nothing waits
        // behind: plain stores, where completing it the usual way takes a
        // locked instruction per write (the park) and two per read (the
        // count and the park), each waiting for every store before it, the
        // body's included. Taking the combiner again costs about one of
        // them: it pays from two on (perf/journal/2026-11-27.md, "direct
        // runs, a stint's operations with no block"; a lone write tried
        // again on 2026-11-30: 1.14). Two or more: more than one access,
        // or a read. (A match, not a sum over `deps`: 17-38 instructions
        // fewer a direct run, `DIRECT=1 perf/instructions.sh`.)
        let mut released = 0u32; // bit i: deps[i]
        let locked_twice = match deps {
            [] => false,
            [d] => !d.writes(),
            _ => true,
        };
        if locked_twice {
            // Each write's outcome is recorded before any access goes:
            // one released at once grants nobody, but the next access
            // granted at its sentinel reads it.
            for (_, slot) in grant.deps_and_slots().filter(|(d, _)| d.writes()) {
                // SAFETY: the grant holds this write.
                unsafe { slot.finish_write(failure.as_ref(), &self.vars.failures_held) };
            }
            self.release_at_once(grant, &mut released);
        }
        let rest = grant.deps_and_slots().enumerate().filter(|&(i, _)| released & (1 << i) == 0).map(|(_, d)| d);
        // SAFETY: the grant holds exactly these accesses, the others
        // released above; each released once. The outcome is recorded
        // above, or here, where nothing was released above (a lone write:
        // one walk over the grant fewer).
        let freed = unsafe { self.release_slots(rest, !locked_twice, false, failure.as_ref(), ticket) };
        self.retire_var_blocks(freed);
        // The stint's pace, after the release: its stores then wait for
        // no locked instruction of the release.
        if ran {
            self.policy.runs.note_run();
        }
    }
}
