//! The dispatcher: linearizes pushes from every thread, in shards.
//!
//! An operation touches several variable queues, and two threads appending
//! two operations to the same pair of queues in opposite orders would
//! deadlock them (each waits for the other on one variable; MXNet has this
//! hazard). So appends are *delegated*: a variable belongs to one of
//! [`SHARDS`] shards, and at most one thread at a time per shard — its
//! **combiner** — appends operations to that shard's queues, in the
//! shard's order. Pushes in different shards never meet (see "Shards"
//! below for operations whose variables lie in several). Within one
//! shard a push never waits for the combiner:
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
//! - Only the combiner (the thread holding `busy`, or the owner inside)
//!   reads the stack's contents, stamps tickets and appends to variable
//!   queues (the queues rely on one appender). Successive combiners are
//!   ordered by `busy`'s release/acquire, by the owner's program order, or
//!   by the owner's clearing of `inside` (release) and the revoker's look
//!   at it (acquire).
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
//! # The biased combiner
//!
//! Most programs push from one thread. For it, even the fast path's CAS on
//! `busy` is the costliest step of a push with few variables: a locked
//! instruction waits for the store buffer to drain the operation block just
//! filled (halving `nodeps` at W=0 when it goes, perf/journal/2026-11-25.md). So the role has
//! a second way in, for one thread at a time, the **owner** (its
//! [`thread_slot`](crate::mem::thread_slot), held in `owner`):
//!
//! - **owner path**: the owner sets its own `inside` flag (a plain store),
//!   light barrier, and combines if it is still the owner and `busy` is 0;
//!   else it clears the flag and takes the fast path above. Letting go is
//!   clearing the flag, light barrier, look at the stack, as with `busy`.
//! - **revocation**: any other thread that takes `busy` while an owner is
//!   named clears `owner`, pays a heavy barrier and waits until the old
//!   owner's flag is clear (an owner combines for a bounded time: no user
//!   code). The barriers pair the owner's store of `inside` then load of
//!   `owner` and `busy` with the revoker's stores of `busy` and `owner`
//!   then load of `inside` (Dekker): an owner either sees the revocation
//!   and backs off, or is seen inside and waited for.
//! - **bias**: a thread that takes `busy` [`BIAS_AFTER`] times in a row,
//!   with no other thread in between, is named owner by itself while it
//!   holds `busy`. Each revocation doubles the streak needed, up to 64
//!   times `BIAS_AFTER`: pushes from several threads at once, which keep
//!   revoking it, soon pay a heavy barrier at most once per 65,536.
//!
//! Each thread slot has its own `inside` flag: a thread named owner once
//! and revoked may still be backing off from a stale look at `owner` when
//! another becomes owner, and its clearing store must not clear the new
//! owner's flag.
//!
//! A delegated push never returns because it saw an owner inside: its
//! polls keep polling while one is, and its last look, after the heavy
//! barrier, takes `busy` (revoking the bias) whenever `busy` is 0.
//!
//! The combiner runs no user code: operations it finds ready are returned to
//! the caller, which schedules them after releasing (`core.rs`). So a body
//! may push and wait freely, and a combiner never blocks.
//!
//! # Shards
//!
//! One combiner for every push serialises pushes from threads that share
//! no variable: each takes the same `busy` line and stamps the same
//! ticket counter, a cache-line transfer per push (perf/journal/
//! 2026-11-29-scale-out.md). So each [`Shard`] has the whole machinery
//! above of its own (`busy`, owner, stack, counts), on lines of its own:
//!
//! - **Where a variable lives.** In the home shard (thread slot modulo
//!   [`SHARDS`]) of the first thread that pushes to it or waits on it,
//!   recorded in its `life` word (`Variables::shard_of`) and fixed for the
//!   variable's life. A thread that works on variables of its own then
//!   combines alone, whichever thread created them. A push's shards are
//!   those of its variables; one with none goes to the pusher's home.
//! - **A push within one shard** goes through that shard exactly as
//!   described above, delegation and bias included.
//! - **A push across shards** takes each of its shards in increasing
//!   order, waiting for each (its combiner runs no user code, so the wait
//!   is short), drains each stack as it takes it, stamps and dispatches,
//!   and lets them all go. Holding every shard while it appends is
//!   two-phase locking over the shards, so the appends of any two
//!   operations that share a variable (hence a shard) are in the same
//!   order on every queue they share; the increasing order makes the
//!   waits deadlock-free (a thread waits only for a shard above every
//!   shard it holds, and whoever holds that one waits only higher still).
//!   It is never delegated: a delegated push returns before it is
//!   ordered, and a later push of the same thread in one of its other
//!   shards could then overtake it on a variable they share.
//! - **Tickets** are Lamport stamps: each shard keeps a clock, and an
//!   operation's clock is one past the largest clock of its shards, which
//!   all move past it. So along every variable the tickets increase in
//!   push order, and sorting by ticket replays a run sequentially. The
//!   ticket is `clock << SHARD_BITS | shard` (its lowest shard), unique
//!   since two operations with one clock and one lowest shard would have
//!   held that shard one after the other. They are no longer dense.
//! - **Counts.** Each shard counts what it dispatched (an operation
//!   across shards, in its lowest); `dispatched()` and `tickets()` sum
//!   the shards any push has reached (`active`, set once per shard), and
//!   [`flush`](Dispatcher::flush) takes every active shard (`wait_all`,
//!   the engine's closing), or one variable's (`wait_var`). A shard is marked
//!   active before anything is submitted to it: when a variable is placed
//!   in it (before the placement is published) or an operation with no
//!   variables is sent to it (`Core::placing`).
//! - **The pending count** is kept per shard too (`wait.rs`,
//!   `PendingCounter`): a push compares its own shard's count with the
//!   cap, so pushers on variables of their own read nothing another
//!   pusher writes.
//!
//! # Tickets without a queue
//!
//! An operation with no variables that runs inside its own push (`core.rs`,
//! `unqueued_ticket`) still takes its place in the ticket order, through
//! [`take_ticket`](Dispatcher::take_ticket): the fast path above, with a
//! ticket stamped but nothing dispatched. So a shard's clock, its
//! dispatched count (what `pending` and `wait_all` count against) and its
//! count of tickets taken alone (for the statistics) are three words, all
//! written only by the combiner. The operation goes to its pusher's home
//! shard. A direct run
//! (`direct_run.rs`) takes its ticket the same way, once, as the
//! combiner, its variables have all granted it at once; where one does
//! not, it takes none and is pushed the usual way.

use crate::base::tuning::{BIAS_AFTER, BIAS_AFTER_MAX, HANDOVER_POLLS, SHARDS};
use crate::graph::opr::OprBlock;
use crate::mem::pool::{Pool, NIL};
use crate::mem::thread_slot::SLOTS;
use crate::sync::barrier;
use crate::sync::{spin_hint, AtomicU32, AtomicU64, AtomicU8, Ordering};
use crossbeam_utils::CachePadded;

/// `owner` when no thread is.
const NO_OWNER: u32 = u32::MAX;

/// The low bits of a ticket that name its (lowest) shard.
pub(crate) const SHARD_BITS: u32 = SHARDS.trailing_zeros();

/// Every shard, as a mask.
pub(crate) const ALL_SHARDS: u32 = (1 << SHARDS) - 1;

const _: () = assert!(SHARDS.is_power_of_two() && SHARDS <= 16);

/// The shard that counted the operation with ticket `ticket` dispatched
/// (its lowest shard; module docs, "Shards").
#[inline(always)]
pub(crate) fn shard_of_ticket(ticket: u64) -> usize {
    (ticket & (SHARDS as u64 - 1)) as usize
}

/// The home shard of the thread holding slot `me` (shard 0 for a thread
/// with none).
#[inline(always)]
pub(crate) fn home_shard(me: Option<usize>) -> usize {
    me.map_or(0, |m| m % SHARDS)
}

/// The shards of `mask`, lowest first.
#[inline(always)]
pub(crate) fn shards_in(mask: u32) -> impl Iterator<Item = usize> {
    let mut left = mask;
    std::iter::from_fn(move || {
        (left != 0).then(|| {
            let s = left.trailing_zeros() as usize;
            left &= left - 1;
            s
        })
    })
}

/// How the calling thread holds a shard's combiner role.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Held {
    /// Through `busy` (a CAS).
    Busy,
    /// As the owner, through its `inside` flag (plain stores).
    Owner(u32),
}

/// The sharded dispatcher (see the module docs).
pub(crate) struct Dispatcher {
    shards: [Shard; SHARDS],
    /// Bit `s`: shard `s` has had a push (or a ticket) submitted. Set once
    /// per shard, before the shard counts anything, and read by the sums,
    /// which then skip the shards no push ever reached.
    active: CachePadded<AtomicU32>,
}

/// One shard's combining dispatcher (the module docs' first sections).
struct Shard {
    /// `busy` and `owner` share a line: the owner reads both on every push
    /// and nobody writes them while it keeps the bias.
    role: CachePadded<Role>,
    /// Per thread slot: set while that thread, as owner, combines or is
    /// about to look whether it may. Written only by the slot's holder.
    inside: CachePadded<[AtomicU8; SLOTS]>,
    stack: CachePadded<AtomicU32>,
    /// The shard's clock and the number of operations it dispatched so
    /// far. Written only by the combiner (plain loads and stores: no locked
    /// instruction), read by anyone.
    counts: CachePadded<Counts>,
    /// Delegated submissions not yet stamped: counted by the pusher before
    /// it links the operation, uncounted by the combiner after stamping.
    /// Lets `wait_all` see an operation whose push has returned but which
    /// no combiner has dispatched yet (only the delegated path pays it).
    undispatched: CachePadded<AtomicU64>,
}

/// The two ways into the combiner's role (module docs).
struct Role {
    /// 1 while a thread other than an owner inside combines.
    busy: AtomicU32,
    /// The thread slot that may combine without taking `busy`, or
    /// `NO_OWNER`. Written only while holding `busy`.
    owner: AtomicU32,
}

/// The combiner's counters, on one line: every stamp writes the first two.
/// All are written only by the combiner (plain loads and stores).
#[derive(Default)]
struct Counts {
    /// The shard's Lamport clock: the next clock a ticket of this shard
    /// may take (module docs, "Shards").
    clock: AtomicU64,
    /// Operations dispatched (appended to their queues) so far.
    dispatched: AtomicU64,
    /// Tickets taken alone (`take_ticket`): not dispatched.
    alone: AtomicU64,
    /// The thread slot that took `busy` last (`NO_OWNER`: none, or one
    /// with no slot), and how many times in a row it has.
    streak_slot: AtomicU32,
    streak: AtomicU32,
    /// The streak that names an owner: `BIAS_AFTER`, doubled by each
    /// revocation up to `BIAS_AFTER_MAX`.
    bias_after: AtomicU32,
    /// This shard's index (the low bits of its tickets).
    index: u32,
}

impl Default for Dispatcher {
    fn default() -> Self {
        Dispatcher {
            shards: std::array::from_fn(|i| Shard::new(i as u32)),
            active: CachePadded::new(AtomicU32::new(0)),
        }
    }
}

impl Dispatcher {
    /// Submits `op`, whose variables lie in the shards of `shards` (not 0,
    /// and active: one with none goes to the pusher's home shard), from the thread
    /// holding slot `me` (if any). If this thread becomes the combiner of
    /// them, `dispatch(op, ticket, shard)` is called for `op` and for every
    /// operation submitted meanwhile, in each shard's order, `shard` being
    /// the operation's lowest shard (held); otherwise the current combiner
    /// will.
    #[inline]
    pub(crate) fn submit(
        &self,
        oprs: &Pool<OprBlock>,
        op: u32,
        shards: u32,
        me: Option<usize>,
        mut dispatch: impl FnMut(u32, u64, usize),
    ) {
        debug_assert!(shards != 0 && self.active.load(Ordering::Relaxed) & shards == shards);
        if shards & (shards - 1) == 0 {
            self.shards[shards.trailing_zeros() as usize].submit(oprs, op, me, &mut dispatch);
        } else {
            self.submit_across(oprs, op, shards, me, &mut dispatch);
        }
    }

    /// Marks the shards of `mask` active: before any operation is
    /// submitted to them, or a ticket taken (the variable's placement, or
    /// the push of an operation with no variables, does it:
    /// `Core::placing`).
    #[inline(always)]
    pub(crate) fn activate(&self, mask: u32) {
        // SeqCst: a sum that reads `active` after this push returned sees
        // the bit (the fetch_or precedes the shard's counts in its order).
        if self.active.load(Ordering::Relaxed) & mask != mask {
            self.active.fetch_or(mask, Ordering::SeqCst);
        }
    }

    /// A push across shards (module docs, "Shards"): takes them all in
    /// increasing order, stamps, dispatches and lets them go.
    #[cold]
    #[inline(never)]
    fn submit_across(
        &self,
        oprs: &Pool<OprBlock>,
        op: u32,
        mask: u32,
        me: Option<usize>,
        dispatch: &mut impl FnMut(u32, u64, usize),
    ) {
        let owners = self.take_waiting(oprs, mask, me, dispatch);
        let (ticket, lowest) = self.next_ticket_across(mask);
        self.shards[lowest].count_dispatched();
        dispatch(op, ticket, lowest);
        self.release(oprs, mask, owners, me, dispatch);
    }

    /// Takes every shard of `mask`, lowest first, waiting for each, and
    /// drains each stack as it is taken; returns the shards held as owner.
    fn take_waiting(
        &self,
        oprs: &Pool<OprBlock>,
        mask: u32,
        me: Option<usize>,
        dispatch: &mut impl FnMut(u32, u64, usize),
    ) -> u32 {
        let mut owners = 0;
        for s in shards_in(mask) {
            let shard = &self.shards[s];
            let held = shard.take_waiting(me);
            if held != Held::Busy {
                owners |= 1 << s;
            }
            shard.drain(oprs, dispatch);
        }
        owners
    }

    /// Lets go of every shard of `mask` (those of `owners` held as owner),
    /// draining what was submitted meanwhile.
    fn release(
        &self,
        oprs: &Pool<OprBlock>,
        mask: u32,
        owners: u32,
        me: Option<usize>,
        dispatch: &mut impl FnMut(u32, u64, usize),
    ) {
        for s in shards_in(mask) {
            let held = if owners & (1 << s) != 0 { Held::Owner(me.map_or(NO_OWNER, |m| m as u32)) } else { Held::Busy };
            self.shards[s].release(oprs, held, me, dispatch);
        }
    }

    /// The next ticket for an operation holding every shard of `mask`,
    /// several of them (module docs, "Shards"), and its lowest shard.
    /// Combiner only.
    fn next_ticket_across(&self, mask: u32) -> (u64, usize) {
        let lowest = mask.trailing_zeros() as usize;
        let clock = shards_in(mask).map(|s| self.shards[s].counts.clock.load(Ordering::Relaxed)).max().unwrap_or(0);
        for s in shards_in(mask) {
            self.shards[s].counts.clock.store(clock + 1, Ordering::Relaxed);
        }
        (clock << SHARD_BITS | lowest as u64, lowest)
    }

    /// Takes the next ticket for an operation that is not queued (it runs
    /// inside its push), whose variables lie in `shards` (not 0; active),
    /// if this thread can become the combiner of all of
    /// them at once: operations submitted meanwhile are dispatched as
    /// usual, and the ticket is not counted as dispatched; `then` runs
    /// while still combining, right before the ticket is stamped (so that
    /// it sees exactly what was linearized before the ticket, such as the
    /// engine's closing), and says whether to stamp it. `None`: another
    /// thread is combining one of them (the caller queues its operation
    /// instead of waiting), and `then` did not run; or `then` returned
    /// `false`: no ticket was taken (the caller pushes its operation the
    /// usual way). In line, as `Core::take_ticket`.
    #[inline(always)]
    pub(crate) fn take_ticket(
        &self,
        oprs: &Pool<OprBlock>,
        shards: u32,
        me: Option<usize>,
        mut dispatch: impl FnMut(u32, u64, usize),
        then: impl FnOnce() -> bool,
    ) -> Option<u64> {
        let mask = shards;
        debug_assert!(mask != 0 && self.active.load(Ordering::Relaxed) & mask == mask);
        if mask & (mask - 1) == 0 {
            // One shard (most often): its own combiner's way.
            return self.shards[mask.trailing_zeros() as usize].take_ticket(oprs, me, &mut dispatch, then);
        }
        let mut owners = 0;
        for s in shards_in(mask) {
            let shard = &self.shards[s];
            match shard.try_take(me) {
                Some(held) => owners |= u32::from(held != Held::Busy) << s,
                None => {
                    // Let go of the shards below, taken so far.
                    self.release(oprs, mask & ((1 << s) - 1), owners, me, &mut dispatch);
                    return None;
                }
            }
            shard.drain(oprs, &mut dispatch);
        }
        // Nothing else is linearized in these shards while we combine, so
        // `then` sees what came before the ticket whether it runs before
        // or after the stamp.
        let ticket = then().then(|| {
            let (ticket, lowest) = self.next_ticket_across(mask);
            self.shards[lowest].count_alone();
            ticket
        });
        self.release(oprs, mask, owners, me, &mut dispatch);
        ticket
    }

    /// Becomes the combiner of every active shard of `shards` (waiting for
    /// each current one, which runs no user code and so finishes soon),
    /// lowest first, and dispatches everything submitted to them so far;
    /// then `then` runs while still combining (used to close the engine
    /// between two dispatches, and to look at a variable's queue as its
    /// appender), told which shards it holds.
    ///
    /// A shard not yet active has had nothing submitted: one activated
    /// while this runs holds only pushes concurrent with it, which may be
    /// ordered after it (their dispatch reads what `then` did, or they
    /// come before it: both are linearizable).
    pub(crate) fn flush(
        &self,
        oprs: &Pool<OprBlock>,
        shards: u32,
        me: Option<usize>,
        mut dispatch: impl FnMut(u32, u64, usize),
        then: impl FnOnce(u32),
    ) {
        let shards = shards & self.active.load(Ordering::SeqCst);
        if shards == 0 {
            then(0);
            return;
        }
        if shards & (shards - 1) == 0 {
            // One shard (a variable's, on every `wait_var`): its own
            // combiner's way. The loops below do the same for one shard,
            // at about 190 more instructions a `pingpong` round trip
            // (`perf/instructions.sh pingpong`).
            let shard = &self.shards[shards.trailing_zeros() as usize];
            let held = shard.take_waiting(me);
            shard.drain(oprs, &mut dispatch);
            then(shards);
            shard.release(oprs, held, me, &mut dispatch);
            return;
        }
        let owners = self.take_waiting(oprs, shards, me, &mut dispatch);
        then(shards);
        self.release(oprs, shards, owners, me, &mut dispatch);
    }

    /// The shards any push has reached, as a mask.
    #[inline]
    pub(crate) fn active_mask(&self) -> u32 {
        self.active.load(Ordering::SeqCst)
    }

    /// Operations shard `shard` dispatched so far.
    #[inline(always)]
    pub(crate) fn dispatched_in(&self, shard: usize) -> u64 {
        self.shards[shard].counts.dispatched.load(Ordering::SeqCst)
    }

    /// The shards any push has reached.
    #[inline(always)]
    fn active(&self) -> impl Iterator<Item = &Shard> {
        shards_in(self.active.load(Ordering::SeqCst)).map(|s| &self.shards[s])
    }

    /// Operations dispatched so far (every operation submitted before this
    /// call, once [`flush`](Self::flush) of every shard has returned).
    #[inline]
    pub(crate) fn dispatched(&self) -> u64 {
        self.active().map(|s| s.counts.dispatched.load(Ordering::SeqCst)).sum()
    }

    /// Tickets stamped so far: the operations dispatched and those run
    /// inside their push ([`take_ticket`](Self::take_ticket)).
    #[inline]
    pub(crate) fn tickets(&self) -> u64 {
        self.active().map(|s| s.counts.dispatched.load(Ordering::SeqCst) + s.counts.alone.load(Ordering::SeqCst)).sum()
    }

    /// Delegated submissions not yet dispatched. Read after the
    /// finished count and before [`dispatched`](Self::dispatched), a zero
    /// here means every push that returned before the finished operations
    /// did is counted as dispatched.
    #[inline]
    pub(crate) fn undispatched(&self) -> u64 {
        self.active().map(|s| s.undispatched.load(Ordering::SeqCst)).sum()
    }

    /// The thread slot named owner of shard `shard`, if any.
    #[cfg(all(test, not(depengine_loom)))]
    pub(crate) fn owner(&self, shard: usize) -> Option<usize> {
        let owner = self.shards[shard].role.owner.load(Ordering::Relaxed);
        (owner != NO_OWNER).then_some(owner as usize)
    }

    /// Names `slot` owner of every shard at once (tests, while no thread
    /// combines).
    #[cfg(all(test, depengine_loom))]
    fn name_owner(&self, slot: usize) {
        for shard in &self.shards {
            shard.role.owner.store(slot as u32, Ordering::Relaxed);
        }
    }
}

impl Shard {
    fn new(index: u32) -> Self {
        Shard {
            role: CachePadded::new(Role { busy: AtomicU32::new(0), owner: AtomicU32::new(NO_OWNER) }),
            inside: CachePadded::new(std::array::from_fn(|_| AtomicU8::new(0))),
            stack: CachePadded::new(AtomicU32::new(NIL)),
            counts: CachePadded::new(Counts {
                streak_slot: AtomicU32::new(NO_OWNER),
                bias_after: AtomicU32::new(BIAS_AFTER),
                index,
                ..Counts::default()
            }),
            undispatched: CachePadded::new(AtomicU64::new(0)),
        }
    }

    /// Submits `op` from the thread holding slot `me` (if any). If this
    /// thread becomes the combiner, `dispatch(op, ticket, shard)` is called
    /// for `op` and for every operation submitted meanwhile, in ticket
    /// order; otherwise the current combiner will.
    #[inline(always)]
    fn submit(&self, oprs: &Pool<OprBlock>, op: u32, me: Option<usize>, dispatch: &mut impl FnMut(u32, u64, usize)) {
        if let Some(held) = self.try_take(me) {
            self.drain(oprs, dispatch);
            self.stamp(op, dispatch);
            self.release(oprs, held, me, dispatch);
            return;
        }
        self.delegate(oprs, op, me, dispatch);
    }

    /// The delegated push (module docs): links `op` onto the stack, and
    /// makes sure a combiner will see it.
    #[inline(never)]
    fn delegate(&self, oprs: &Pool<OprBlock>, op: u32, me: Option<usize>, dispatch: &mut impl FnMut(u32, u64, usize)) {
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
            // An owner inside will see the stack when it lets go (or we
            // take over below): no reason to revoke its bias yet.
            if !self.owner_inside() && self.take_if_idle(me) {
                self.release(oprs, Held::Busy, me, dispatch);
                return;
            }
            spin_hint();
        }
        barrier::heavy();
        // `busy` held: its holder sees our link when it lets go (Dekker).
        // An owner inside is no such promise (it may be backing off), so
        // a `busy` found 0 is taken whatever the owner does.
        if self.take_if_idle(me) {
            self.release(oprs, Held::Busy, me, dispatch);
        }
    }

    /// Takes the combiner's role if no thread holds it: as the owner
    /// without a locked instruction, else through `busy`.
    #[inline(always)]
    fn try_take(&self, me: Option<usize>) -> Option<Held> {
        if let Some(me) = me {
            let me = me as u32;
            if self.role.owner.load(Ordering::Relaxed) == me {
                let inside = &self.inside[me as usize];
                inside.store(1, Ordering::Relaxed);
                // The owner's side of the handshake with a revoker's
                // `barrier::heavy` (module docs): on every push, so light.
                barrier::light();
                // Acquire: a thread that held `busy` before us let go of it
                // with a release store; its dispatches happen before ours.
                if self.role.owner.load(Ordering::Relaxed) == me && self.role.busy.load(Ordering::Acquire) == 0 {
                    return Some(Held::Owner(me));
                }
                inside.store(0, Ordering::Release);
            }
        }
        self.take_busy(me).then_some(Held::Busy)
    }

    /// A delegated push's look at `busy`: takes it if no thread holds it
    /// (a plain load first, so that a busy combiner's line is not asked for
    /// exclusively).
    #[inline]
    fn take_if_idle(&self, me: Option<usize>) -> bool {
        self.role.busy.load(Ordering::Relaxed) == 0 && self.take_busy(me)
    }

    /// Whether the named owner (if any) is inside or about to look.
    #[inline]
    fn owner_inside(&self) -> bool {
        let owner = self.role.owner.load(Ordering::Relaxed);
        owner != NO_OWNER && self.inside[owner as usize].load(Ordering::Relaxed) != 0
    }

    /// Takes `busy` if it is 0; then revokes another thread's bias
    /// (waiting for it to be out), and names this thread owner after
    /// enough takes in a row (`bias_after`).
    #[inline(always)]
    fn take_busy(&self, me: Option<usize>) -> bool {
        if self.role.busy.compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return false;
        }
        let me = me.map_or(NO_OWNER, |m| m as u32);
        let owner = self.role.owner.load(Ordering::Relaxed);
        let bias_after = &self.counts.bias_after;
        if owner != NO_OWNER && owner != me {
            self.revoke(owner);
            let slower = (bias_after.load(Ordering::Relaxed) * 2).min(BIAS_AFTER_MAX);
            bias_after.store(slower, Ordering::Relaxed);
        }
        let streak = &self.counts.streak;
        let n = if self.counts.streak_slot.load(Ordering::Relaxed) == me {
            streak.load(Ordering::Relaxed).saturating_add(1)
        } else {
            self.counts.streak_slot.store(me, Ordering::Relaxed);
            1
        };
        streak.store(n, Ordering::Relaxed);
        if me != NO_OWNER && n >= bias_after.load(Ordering::Relaxed) && owner == NO_OWNER {
            // Nobody can be inside: owners are named only here, under
            // `busy`, and a revoked one was waited for.
            self.role.owner.store(me, Ordering::Relaxed);
        }
        true
    }

    /// Takes the bias from `owner`, holding `busy`: from here on it backs
    /// off, and it is waited for if it was already inside.
    #[cold]
    #[inline(never)]
    fn revoke(&self, owner: u32) {
        self.role.owner.store(NO_OWNER, Ordering::Relaxed);
        barrier::heavy();
        // Acquire: pairs with the owner's release when it lets go, so its
        // dispatches happen before ours.
        while self.inside[owner as usize].load(Ordering::Acquire) != 0 {
            spin_hint();
        }
    }

    /// Takes the combiner's role, waiting for the current combiner (which
    /// runs no user code, so it lets go soon).
    fn take_waiting(&self, me: Option<usize>) -> Held {
        let mut spins = 0u32;
        loop {
            if let Some(held) = self.try_take(me) {
                return held;
            }
            spins += 1;
            if spins.is_multiple_of(64) {
                std::thread::yield_now();
            } else {
                spin_hint();
            }
        }
    }

    /// [`Dispatcher::take_ticket`] for this shard alone.
    #[inline(always)]
    fn take_ticket(
        &self,
        oprs: &Pool<OprBlock>,
        me: Option<usize>,
        dispatch: &mut impl FnMut(u32, u64, usize),
        then: impl FnOnce() -> bool,
    ) -> Option<u64> {
        let held = self.try_take(me)?;
        self.drain(oprs, dispatch);
        // Nothing else is linearized while we combine, so `then` sees what
        // came before the ticket whether it runs before or after the stamp.
        let ticket = then().then(|| {
            self.count_alone();
            self.next_ticket()
        });
        self.release(oprs, held, me, dispatch);
        ticket
    }

    /// Stamps the next ticket of this shard alone. Combiner only.
    #[inline(always)]
    fn next_ticket(&self) -> u64 {
        // Only the combiner writes the counters, and successive combiners
        // are ordered (module docs), so load + store cannot lose a count.
        let clock = self.counts.clock.load(Ordering::Relaxed);
        self.counts.clock.store(clock + 1, Ordering::Relaxed);
        clock << SHARD_BITS | u64::from(self.counts.index)
    }

    #[inline(always)]
    fn stamp(&self, op: u32, dispatch: &mut impl FnMut(u32, u64, usize)) {
        let ticket = self.next_ticket();
        self.count_dispatched();
        dispatch(op, ticket, self.counts.index as usize);
    }

    /// Counts an operation dispatched in this shard (its lowest).
    /// Combiner only, like the clock.
    #[inline(always)]
    fn count_dispatched(&self) {
        let dispatched = self.counts.dispatched.load(Ordering::Relaxed);
        self.counts.dispatched.store(dispatched + 1, Ordering::Release);
    }

    /// Counts a ticket taken alone in this shard (its lowest). Combiner
    /// only.
    #[inline(always)]
    fn count_alone(&self) {
        let alone = self.counts.alone.load(Ordering::Relaxed);
        self.counts.alone.store(alone + 1, Ordering::Relaxed);
    }

    /// Dispatches everything on the stack, oldest first; returns whether
    /// there was anything. Combiner only.
    #[inline(always)]
    fn drain(&self, oprs: &Pool<OprBlock>, dispatch: &mut impl FnMut(u32, u64, usize)) -> bool {
        // The stack is empty on almost every call: one load, no call.
        if self.stack.load(Ordering::Relaxed) == NIL {
            return false;
        }
        self.drain_stack(oprs, dispatch);
        true
    }

    #[inline(never)]
    fn drain_stack(&self, oprs: &Pool<OprBlock>, dispatch: &mut impl FnMut(u32, u64, usize)) {
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

    /// Drains until the stack is empty, then gives up the role without
    /// stranding a concurrent submission.
    #[inline(always)]
    fn release(
        &self,
        oprs: &Pool<OprBlock>,
        held: Held,
        me: Option<usize>,
        dispatch: &mut impl FnMut(u32, u64, usize),
    ) {
        // Nothing submitted meanwhile (almost always): let go in line.
        if self.stack.load(Ordering::Relaxed) == NIL {
            self.let_go(held);
            // The hot side of the handshake with a delegated push's
            // `barrier::heavy` (`barrier.rs`): on every push, so light.
            barrier::light();
            if self.stack.load(Ordering::Relaxed) == NIL {
                return;
            }
            if let Some(again) = self.try_take(me) {
                self.release_draining(oprs, again, me, dispatch);
            }
            return;
        }
        self.release_draining(oprs, held, me, dispatch);
    }

    /// [`release`](Self::release) with submissions to drain first.
    #[inline(never)]
    fn release_draining(
        &self,
        oprs: &Pool<OprBlock>,
        mut held: Held,
        me: Option<usize>,
        dispatch: &mut impl FnMut(u32, u64, usize),
    ) {
        loop {
            while self.drain(oprs, dispatch) {}
            self.let_go(held);
            // As in `release`.
            barrier::light();
            if self.stack.load(Ordering::Relaxed) == NIL {
                return;
            }
            match self.try_take(me) {
                Some(again) => held = again,
                None => return,
            }
        }
    }

    /// Gives up the role held as `held`.
    #[inline(always)]
    fn let_go(&self, held: Held) {
        match held {
            Held::Busy => self.role.busy.store(0, Ordering::Release),
            Held::Owner(me) => self.inside[me as usize].store(0, Ordering::Release),
        }
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Mutex;

    /// Dispatches one operation from the thread holding slot `me`.
    fn push(d: &Dispatcher, oprs: &Pool<OprBlock>, me: usize, log: &mut Vec<(u32, u64)>) -> u32 {
        let op = oprs.take();
        d.submit(oprs, op, 1, Some(me), |op, ticket, _| log.push((op, ticket >> SHARD_BITS)));
        op
    }

    #[test]
    fn a_thread_that_takes_busy_often_enough_in_a_row_is_named_owner_until_another_takes_it() {
        let oprs = Pool::new();
        let d = Dispatcher::default();
        d.activate(ALL_SHARDS);
        let mut log = Vec::new();
        for _ in 0..BIAS_AFTER - 1 {
            push(&d, &oprs, 3, &mut log);
        }
        assert_eq!(d.owner(0), None, "not after {} takes", BIAS_AFTER - 1);
        push(&d, &oprs, 3, &mut log);
        assert_eq!(d.owner(0), Some(3));
        // The owner's pushes go on in ticket order without `busy`.
        push(&d, &oprs, 3, &mut log);
        assert_eq!(d.shards[0].role.busy.load(Ordering::Relaxed), 0);
        assert_eq!(d.owner(0), Some(3));
        // Another thread takes `busy`: the bias is revoked, and the streak
        // starts again from that thread.
        push(&d, &oprs, 5, &mut log);
        assert_eq!(d.owner(0), None);
        push(&d, &oprs, 3, &mut log);
        assert_eq!(d.owner(0), None, "one take does not name it again");
        // A thread with no slot is never named.
        let mut none_log = Vec::new();
        for _ in 0..BIAS_AFTER + 1 {
            let op = oprs.take();
            d.submit(&oprs, op, 1, None, |op, ticket, _| none_log.push((op, ticket >> SHARD_BITS)));
        }
        assert_eq!(d.owner(0), None);
        let tickets: Vec<u64> = log.iter().chain(&none_log).map(|&(_, t)| t).collect();
        assert_eq!(tickets, (0..tickets.len() as u64).collect::<Vec<_>>(), "dense tickets in push order");
    }

    /// Two threads take turns leading: the leader pushes until it is named
    /// owner (which needs the owner of the turn before to have been
    /// revoked); then the other pushes while the leader is inside a long
    /// dispatch, revoking it there. Every operation is dispatched once,
    /// each thread's in its push order, tickets are dense, and no two
    /// combiners overlap.
    #[test]
    fn two_threads_taking_turns_are_each_named_owner_and_never_combine_at_once() {
        const TURNS: usize = 8;
        let oprs = Pool::new();
        let d = Dispatcher::default();
        d.activate(ALL_SHARDS);
        let combining = AtomicBool::new(false);
        let slow = AtomicBool::new(false);
        let log = Mutex::new(Vec::new());
        // The log's lock is taken only inside a dispatch, and only to
        // record; overlap is caught by `combining`, not by the lock.
        let overlapped = AtomicBool::new(false);
        let record = |op: u32, ticket: u64, _shard: usize| {
            // Noted, not asserted: a panic here would leave the other
            // thread waiting at the barrier.
            if combining.swap(true, Ordering::SeqCst) {
                overlapped.store(true, Ordering::SeqCst);
            }
            log.lock().unwrap().push((op, ticket >> SHARD_BITS));
            // Once the follower is about to revoke, stay a while, so that
            // a revoker that did not wait for the owner would be caught.
            if slow.load(Ordering::SeqCst) {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            combining.store(false, Ordering::SeqCst);
        };
        let turn = std::sync::Barrier::new(2);
        let followed = AtomicBool::new(false);
        let slots = [AtomicU32::new(NO_OWNER), AtomicU32::new(NO_OWNER)];
        let pushed: Vec<(Vec<u32>, usize)> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..2)
                .map(|t| {
                    let (d, oprs, record, turn, followed, slots, slow) =
                        (&d, &oprs, &record, &turn, &followed, &slots, &slow);
                    s.spawn(move || {
                        let me = crate::mem::thread_slot::current().expect("a thread slot");
                        slots[t].store(me as u32, Ordering::SeqCst);
                        let mut mine = Vec::new();
                        let push = |mine: &mut Vec<u32>| {
                            let op = oprs.take();
                            mine.push(op);
                            d.submit(oprs, op, 1, Some(me), record);
                        };
                        let mut saw_named = 0;
                        for phase in 0..TURNS {
                            let leading = phase % 2 == t;
                            if leading {
                                followed.store(false, Ordering::SeqCst);
                            }
                            turn.wait();
                            if leading {
                                // Push until the follower starts (or long
                                // enough that it should have been named
                                // whatever streak it needed).
                                for _ in 0..2 * BIAS_AFTER_MAX {
                                    push(&mut mine);
                                    if slow.load(Ordering::SeqCst) || followed.load(Ordering::SeqCst) {
                                        break;
                                    }
                                }
                                followed.store(true, Ordering::SeqCst);
                            } else {
                                // Wait for the leader to be named (or to
                                // give up), then push beside it.
                                let leader = slots[1 - t].load(Ordering::SeqCst) as usize;
                                while d.owner(0) != Some(leader) && !followed.load(Ordering::SeqCst) {
                                    std::hint::spin_loop();
                                }
                                saw_named += usize::from(d.owner(0) == Some(leader));
                                slow.store(true, Ordering::SeqCst);
                                push(&mut mine);
                                slow.store(false, Ordering::SeqCst);
                                for _ in 0..63 {
                                    push(&mut mine);
                                }
                            }
                            turn.wait();
                        }
                        (mine, saw_named)
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert!(!overlapped.load(Ordering::SeqCst), "two combiners at once");
        let log = log.into_inner().unwrap();
        let total: usize = pushed.iter().map(|(mine, _)| mine.len()).sum();
        let tickets: Vec<u64> = log.iter().map(|&(_, t)| t).collect();
        assert_eq!(tickets, (0..total as u64).collect::<Vec<_>>(), "each dispatched once, dense tickets");
        let at: std::collections::HashMap<u32, u64> = log.iter().copied().collect();
        for (mine, saw_named) in &pushed {
            assert!(mine.windows(2).all(|w| at[&w[0]] < at[&w[1]]), "a thread's pushes keep their order");
            assert_eq!(*saw_named, TURNS / 2, "the other thread was named owner in each of its turns");
        }
        assert_eq!(d.dispatched(), total as u64);
    }
}

/// Loom models of the combiner (`--cfg depengine_loom`): no submission is
/// stranded, each is dispatched once, tickets are dense, each thread's
/// order is kept, and two combiners never overlap: the log they write is a
/// plain cell, which loom reports when two threads touch it without one
/// happening before the other. Each model runs with no owner named (with
/// `BIAS_AFTER` 1 under loom, the first thread to take `busy` is named
/// while the model runs) and with either thread named owner at the start.
#[cfg(all(test, depengine_loom))]
mod loom_models {
    use super::*;
    use crate::sync::UnsafeCell;
    use loom::sync::Arc;

    /// What the combiners dispatched, written only while combining.
    struct Log(UnsafeCell<Vec<(u32, u64)>>);

    // SAFETY: written only by the combiner, and successive combiners are
    // ordered (module docs); loom checks exactly that.
    unsafe impl Sync for Log {}

    impl Log {
        fn new() -> Arc<Log> {
            Arc::new(Log(UnsafeCell::new(Vec::new())))
        }
        fn push(&self, op: u32, ticket: u64) {
            // SAFETY: called by the combiner only (see the type).
            unsafe { self.0.with_mut(|log| (*log).push((op, ticket))) }
        }
        fn take(&self) -> Vec<(u32, u64)> {
            // SAFETY: every thread has been joined.
            unsafe { self.0.with(|log| (*log).clone()) }
        }
    }

    /// The main thread holds slot 0 and the spawned one slot 1; `owner`
    /// names one of them before they start.
    const MAIN: usize = 0;
    const OTHER: usize = 1;

    /// Runs `model` with no owner named, then with each thread named.
    fn each_owner(model: fn(Option<usize>)) {
        for owner in [None, Some(MAIN), Some(OTHER)] {
            eprintln!("owner named at the start: {owner:?}");
            model(owner);
        }
    }

    fn dispatcher(owner: Option<usize>) -> Arc<Dispatcher> {
        let d = Dispatcher::default();
        d.activate(ALL_SHARDS);
        if let Some(slot) = owner {
            d.name_owner(slot);
        }
        Arc::new(d)
    }

    fn concurrent_submissions(owner: Option<usize>) {
        loom::model(move || {
            let oprs: Arc<Pool<OprBlock>> = Arc::new(Pool::new());
            let d = dispatcher(owner);
            let log = Log::new();
            let ops: Vec<u32> = (0..3).map(|_| oprs.take()).collect();
            let submit = |op: u32, me: usize, oprs: &Pool<OprBlock>, d: &Dispatcher, log: &Log| {
                d.submit(oprs, op, 1, Some(me), |op, ticket, _| log.push(op, ticket >> SHARD_BITS));
            };
            let t = {
                let (oprs, d, log) = (oprs.clone(), d.clone(), log.clone());
                let (a, b) = (ops[0], ops[1]);
                loom::thread::spawn(move || {
                    submit(a, OTHER, &oprs, &d, &log);
                    submit(b, OTHER, &oprs, &d, &log);
                })
            };
            submit(ops[2], MAIN, &oprs, &d, &log);
            t.join().unwrap();
            let log = log.take();
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

    #[test]
    fn concurrent_submissions_are_each_dispatched_once_in_thread_order() {
        each_owner(concurrent_submissions);
    }

    /// A ticket taken alone, racing a submission: never waits, never
    /// strands the submission, and shares the dense ticket order without
    /// counting as dispatched.
    fn ticket_alone(owner: Option<usize>) {
        loom::model(move || {
            let oprs: Arc<Pool<OprBlock>> = Arc::new(Pool::new());
            let d = dispatcher(owner);
            let log = Log::new();
            let op = oprs.take();
            let t = {
                let (oprs, d, log) = (oprs.clone(), d.clone(), log.clone());
                loom::thread::spawn(move || {
                    d.submit(&oprs, op, 1, Some(OTHER), |op, ticket, _| log.push(op, ticket >> SHARD_BITS))
                })
            };
            let alone = d
                .take_ticket(&oprs, 1, Some(MAIN), |op, ticket, _| log.push(op, ticket >> SHARD_BITS), || true)
                .map(|t| t >> SHARD_BITS);
            t.join().unwrap();
            let log = log.take();
            assert_eq!(log.len(), 1, "the submission is dispatched once: {log:?}");
            assert_eq!(d.dispatched(), 1, "a ticket taken alone is not dispatched");
            let mut tickets: Vec<u64> = log.iter().map(|&(_, t)| t).chain(alone).collect();
            tickets.sort_unstable();
            let want: Vec<u64> = (0..tickets.len() as u64).collect();
            assert_eq!(tickets, want, "dense tickets");
            assert_eq!(d.tickets(), want.len() as u64);
        });
    }

    #[test]
    fn a_ticket_taken_alone_shares_the_order_and_strands_nothing() {
        each_owner(ticket_alone);
    }

    /// What a ticket taken alone sees in its `then` (the engine's closing,
    /// in `Core`) is exactly what was linearized before the ticket: a
    /// flush's `then` (`Core::close`) either ran before the ticket was
    /// stamped and is seen, or after and is not.
    fn ticket_sees_what_came_before(owner: Option<usize>) {
        loom::model(move || {
            let oprs: Arc<Pool<OprBlock>> = Arc::new(Pool::new());
            let d = dispatcher(owner);
            let closed = Arc::new(loom::sync::atomic::AtomicBool::new(false));
            let t = {
                let (oprs, d, closed) = (oprs.clone(), d.clone(), closed.clone());
                loom::thread::spawn(move || {
                    let mut tickets_before_close = 0;
                    d.flush(
                        &oprs,
                        ALL_SHARDS,
                        Some(OTHER),
                        |_, _, _| {},
                        |_| {
                            tickets_before_close = d.tickets();
                            closed.store(true, Ordering::Relaxed);
                        },
                    );
                    tickets_before_close
                })
            };
            let mut seen = None;
            let ticket = d.take_ticket(
                &oprs,
                1,
                Some(MAIN),
                |_, _, _| {},
                || {
                    seen = Some(closed.load(Ordering::Relaxed));
                    true
                },
            );
            let tickets_before_close = t.join().unwrap();
            match ticket {
                Some(_) => assert_eq!(seen, Some(tickets_before_close == 0), "closed before the ticket: seen"),
                None => assert_eq!(seen, None, "then ran without a ticket"),
            }
        });
    }

    #[test]
    fn a_ticket_taken_alone_sees_exactly_what_came_before_it() {
        each_owner(ticket_sees_what_came_before);
    }

    /// Per shard, the operations appended to its queues, as (op, ticket):
    /// each written only while holding that shard, so loom reports an
    /// append made without it.
    struct ShardLogs([Log; SHARDS]);

    impl ShardLogs {
        fn new() -> Arc<ShardLogs> {
            Arc::new(ShardLogs(std::array::from_fn(|_| Log(UnsafeCell::new(Vec::new())))))
        }
        /// What dispatching `op` over the shards of `mask` appends.
        fn append(&self, op: u32, ticket: u64, mask: u32) {
            for s in shards_in(mask) {
                self.0[s].push(op, ticket);
            }
        }
    }

    /// Pushes across shards (module docs, "Shards"), from two threads: no
    /// deadlock,
    /// every operation appended once in each of its shards, always while
    /// holding that shard; operations sharing two shards in the same order
    /// in both; tickets increasing along each shard, unique; and each
    /// thread's order kept where its operations share a shard.
    fn across_shards(owner: Option<usize>) {
        loom::model(move || {
            let oprs: Arc<Pool<OprBlock>> = Arc::new(Pool::new());
            let d = dispatcher(owner);
            let logs = ShardLogs::new();
            // Each operation's shards, by its index in `ops`.
            const MASKS: [u32; 4] = [0b11, 0b01, 0b10, 0b11];
            let ops: Arc<Vec<u32>> = Arc::new((0..4).map(|_| oprs.take()).collect());
            let mask_of = |ops: &[u32], op: u32| MASKS[ops.iter().position(|&o| o == op).unwrap()];
            let submit =
                move |i: usize, me: usize, oprs: &Pool<OprBlock>, d: &Dispatcher, logs: &ShardLogs, ops: &[u32]| {
                    d.submit(oprs, ops[i], MASKS[i], Some(me), |op, ticket, _| {
                        logs.append(op, ticket, mask_of(ops, op))
                    });
                };
            let t = {
                let (oprs, d, logs, ops) = (oprs.clone(), d.clone(), logs.clone(), ops.clone());
                loom::thread::spawn(move || {
                    submit(2, OTHER, &oprs, &d, &logs, &ops);
                    submit(3, OTHER, &oprs, &d, &logs, &ops);
                })
            };
            submit(0, MAIN, &oprs, &d, &logs, &ops);
            submit(1, MAIN, &oprs, &d, &logs, &ops);
            t.join().unwrap();
            let logs: Vec<Vec<(u32, u64)>> = logs.0.iter().map(|l| l.take()).collect();
            for (s, log) in logs.iter().enumerate() {
                let mut want: Vec<u32> = (0..4).filter(|&i| MASKS[i] & (1 << s) != 0).map(|i| ops[i]).collect();
                let mut got: Vec<u32> = log.iter().map(|&(op, _)| op).collect();
                let pos = |op| {
                    got.iter()
                        .position(|&o| o == op)
                        .unwrap_or_else(|| panic!("{op} missing in shard {s}: {log:?} of ops {ops:?}"))
                };
                if s == 0 {
                    assert!(pos(ops[0]) < pos(ops[1]), "main's pushes keep their order in shard 0: {log:?}");
                } else {
                    assert!(pos(ops[2]) < pos(ops[3]), "the other's pushes keep their order in shard 1: {log:?}");
                }
                assert!(log.windows(2).all(|w| w[0].1 < w[1].1), "tickets rise along shard {s}: {log:?}");
                got.sort_unstable();
                want.sort_unstable();
                assert_eq!(got, want, "shard {s} appended each of its operations once: {log:?}");
            }
            let order = |s: usize| -> Vec<u32> {
                logs[s].iter().map(|&(op, _)| op).filter(|&op| op == ops[0] || op == ops[3]).collect()
            };
            assert_eq!(order(0), order(1), "two operations across both shards, in one order in each");
            let mut tickets: Vec<u64> = logs.iter().flatten().map(|&(_, t)| t).collect();
            tickets.sort_unstable();
            tickets.dedup();
            assert_eq!(tickets.len(), 4, "one ticket per operation, unique: {logs:?}");
            assert_eq!(d.dispatched(), 4);
        });
    }

    #[test]
    fn pushes_across_shards_append_in_one_order_without_deadlock() {
        each_owner(across_shards);
    }

    /// A flush of every shard (`wait_all`, the engine's closing) racing a
    /// push across shards and one within a shard: no deadlock, and what the
    /// flush's `then` sees (reading both shards' logs, which it may: it
    /// holds both) never holds the push across shards in one shard only.
    fn flush_across(owner: Option<usize>) {
        loom::model(move || {
            let oprs: Arc<Pool<OprBlock>> = Arc::new(Pool::new());
            let d = dispatcher(owner);
            let logs = ShardLogs::new();
            let (across, within) = (oprs.take(), oprs.take());
            let mask_of = move |op: u32| if op == across { 0b11 } else { 0b10 };
            let t = {
                let (oprs, d, logs) = (oprs.clone(), d.clone(), logs.clone());
                loom::thread::spawn(move || {
                    let mut seen = Vec::new();
                    d.flush(
                        &oprs,
                        ALL_SHARDS,
                        Some(OTHER),
                        |op, ticket, _| logs.append(op, ticket, mask_of(op)),
                        |_| seen = logs.0.iter().map(|l| l.take()).collect(),
                    );
                    seen
                })
            };
            d.submit(&oprs, across, 0b11, Some(MAIN), |op, ticket, _| logs.append(op, ticket, mask_of(op)));
            d.submit(&oprs, within, 0b10, Some(MAIN), |op, ticket, _| logs.append(op, ticket, mask_of(op)));
            let seen = t.join().unwrap();
            let has = |s: usize| seen[s].iter().any(|&(op, _)| op == across);
            assert_eq!(has(0), has(1), "a flush saw a push across shards half done: {seen:?}");
            let last: Vec<u32> = logs.0[1].take().iter().map(|&(op, _)| op).collect();
            assert_eq!(last, [across, within], "one thread's pushes in order in the shard they share");
        });
    }

    #[test]
    fn a_flush_never_sees_a_push_across_shards_half_done() {
        each_owner(flush_across);
    }
}
