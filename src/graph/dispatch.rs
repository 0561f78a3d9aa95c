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
//! # Tickets without a queue
//!
//! An operation with no variables that runs inside its own push (`core.rs`,
//! `unqueued_ticket`) still takes its place in the ticket order, through
//! [`take_ticket`](Dispatcher::take_ticket): the fast path above, with a
//! ticket stamped but nothing dispatched. So the ticket counter and the
//! dispatched count (what `pending` and `wait_all` count against) are two
//! words, both written only by the combiner. A direct run
//! (`direct_run.rs`) takes its ticket the same way, once, as the
//! combiner, its variables have all granted it at once; where one does
//! not, it takes none and is pushed the usual way.

use crate::base::tuning::{BIAS_AFTER, BIAS_AFTER_MAX, HANDOVER_POLLS};
use crate::graph::opr::OprBlock;
use crate::mem::pool::{Pool, NIL};
use crate::mem::thread_slot::SLOTS;
use crate::sync::barrier;
use crate::sync::{spin_hint, AtomicU32, AtomicU64, AtomicU8, Ordering};
use crossbeam_utils::CachePadded;

/// `owner` when no thread is.
const NO_OWNER: u32 = u32::MAX;

/// How the calling thread holds the combiner's role.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Held {
    /// Through `busy` (a CAS).
    Busy,
    /// As the owner, through its `inside` flag (plain stores).
    Owner(u32),
}

/// The combining dispatcher (see the module docs).
pub(crate) struct Dispatcher {
    /// `busy` and `owner` share a line: the owner reads both on every push
    /// and nobody writes them while it keeps the bias.
    role: CachePadded<Role>,
    /// Per thread slot: set while that thread, as owner, combines or is
    /// about to look whether it may. Written only by the slot's holder.
    inside: CachePadded<[AtomicU8; SLOTS]>,
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
    /// The next ticket: operations dispatched plus tickets taken alone.
    next_ticket: AtomicU64,
    /// Operations dispatched (appended to their queues) so far.
    dispatched: AtomicU64,
    /// The thread slot that took `busy` last (`NO_OWNER`: none, or one
    /// with no slot), and how many times in a row it has.
    streak_slot: AtomicU32,
    streak: AtomicU32,
    /// The streak that names an owner: `BIAS_AFTER`, doubled by each
    /// revocation up to `BIAS_AFTER_MAX`.
    bias_after: AtomicU32,
}

impl Default for Dispatcher {
    fn default() -> Self {
        Dispatcher {
            role: CachePadded::new(Role { busy: AtomicU32::new(0), owner: AtomicU32::new(NO_OWNER) }),
            inside: CachePadded::new(std::array::from_fn(|_| AtomicU8::new(0))),
            stack: CachePadded::new(AtomicU32::new(NIL)),
            counts: CachePadded::new(Counts {
                streak_slot: AtomicU32::new(NO_OWNER),
                bias_after: AtomicU32::new(BIAS_AFTER),
                ..Counts::default()
            }),
            undispatched: CachePadded::new(AtomicU64::new(0)),
        }
    }
}

impl Dispatcher {
    /// Submits `op` from the thread holding slot `me` (if any). If this
    /// thread becomes the combiner, `dispatch(op, ticket)` is called for
    /// `op` and for every operation submitted meanwhile, in ticket order;
    /// otherwise the current combiner will.
    #[inline]
    pub(crate) fn submit(&self, oprs: &Pool<OprBlock>, op: u32, me: Option<usize>, mut dispatch: impl FnMut(u32, u64)) {
        if let Some(held) = self.try_take(me) {
            self.drain(oprs, &mut dispatch);
            self.stamp(op, &mut dispatch);
            self.release(oprs, held, me, &mut dispatch);
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
            // An owner inside will see the stack when it lets go (or we
            // take over below): no reason to revoke its bias yet.
            if !self.owner_inside() && self.take_if_idle(me) {
                self.release(oprs, Held::Busy, me, &mut dispatch);
                return;
            }
            spin_hint();
        }
        barrier::heavy();
        // `busy` held: its holder sees our link when it lets go (Dekker).
        // An owner inside is no such promise (it may be backing off), so
        // a `busy` found 0 is taken whatever the owner does.
        if self.take_if_idle(me) {
            self.release(oprs, Held::Busy, me, &mut dispatch);
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

    /// Takes the next ticket for an operation that is not queued (it runs
    /// inside its push), if this thread can become the combiner at once:
    /// operations submitted meanwhile are dispatched as usual, and the
    /// ticket is not counted as dispatched; `then` runs while still
    /// combining, right before the ticket is stamped (so that it sees
    /// exactly what was linearized before the ticket, such as the engine's
    /// closing), and says whether to stamp it. `None`: another
    /// thread is combining (the caller queues its operation instead of
    /// waiting), and `then` did not run; or `then` returned `false`: no
    /// ticket was taken (the caller pushes its operation the usual way).
    #[inline]
    pub(crate) fn take_ticket(
        &self,
        oprs: &Pool<OprBlock>,
        me: Option<usize>,
        mut dispatch: impl FnMut(u32, u64),
        then: impl FnOnce() -> bool,
    ) -> Option<u64> {
        let held = self.try_take(me)?;
        self.drain(oprs, &mut dispatch);
        // Nothing else is linearized while we combine, so `then` sees what
        // came before the ticket whether it runs before or after the stamp.
        let ticket = then().then(|| self.next_ticket());
        self.release(oprs, held, me, &mut dispatch);
        ticket
    }

    /// Stamps the next ticket. Combiner only.
    #[inline(always)]
    fn next_ticket(&self) -> u64 {
        // Only the combiner writes the counters, and successive combiners
        // are ordered (module docs), so load + store cannot lose a count.
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

    /// The thread slot named owner, if any.
    #[cfg(all(test, not(depengine_loom)))]
    pub(crate) fn owner(&self) -> Option<usize> {
        let owner = self.role.owner.load(Ordering::Relaxed);
        (owner != NO_OWNER).then_some(owner as usize)
    }

    /// Names `slot` owner at once (tests, while no thread combines).
    #[cfg(all(test, depengine_loom))]
    fn name_owner(&self, slot: usize) {
        self.role.owner.store(slot as u32, Ordering::Relaxed);
    }

    /// Becomes the combiner (waiting for the current one, which runs no user
    /// code and so finishes soon) and dispatches everything submitted so
    /// far; then `then` runs while still combining (used to close the
    /// engine between two dispatches).
    pub(crate) fn flush(
        &self,
        oprs: &Pool<OprBlock>,
        me: Option<usize>,
        mut dispatch: impl FnMut(u32, u64),
        then: impl FnOnce(),
    ) {
        let mut spins = 0u32;
        let held = loop {
            if let Some(held) = self.try_take(me) {
                break held;
            }
            spins += 1;
            if spins.is_multiple_of(64) {
                std::thread::yield_now();
            } else {
                spin_hint();
            }
        };
        self.drain(oprs, &mut dispatch);
        then();
        self.release(oprs, held, me, &mut dispatch);
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

    /// Drains until the stack is empty, then gives up the role without
    /// stranding a concurrent submission.
    fn release(&self, oprs: &Pool<OprBlock>, mut held: Held, me: Option<usize>, dispatch: &mut impl FnMut(u32, u64)) {
        loop {
            while self.drain(oprs, dispatch) {}
            match held {
                Held::Busy => self.role.busy.store(0, Ordering::Release),
                Held::Owner(me) => self.inside[me as usize].store(0, Ordering::Release),
            }
            // The hot side of the handshake with a delegated push's
            // `barrier::heavy` (`barrier.rs`): on every push, so light.
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
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Mutex;

    /// Dispatches one operation from the thread holding slot `me`.
    fn push(d: &Dispatcher, oprs: &Pool<OprBlock>, me: usize, log: &mut Vec<(u32, u64)>) -> u32 {
        let op = oprs.take();
        d.submit(oprs, op, Some(me), |op, ticket| log.push((op, ticket)));
        op
    }

    #[test]
    fn a_thread_that_takes_busy_often_enough_in_a_row_is_named_owner_until_another_takes_it() {
        let oprs = Pool::new();
        let d = Dispatcher::default();
        let mut log = Vec::new();
        for _ in 0..BIAS_AFTER - 1 {
            push(&d, &oprs, 3, &mut log);
        }
        assert_eq!(d.owner(), None, "not after {} takes", BIAS_AFTER - 1);
        push(&d, &oprs, 3, &mut log);
        assert_eq!(d.owner(), Some(3));
        // The owner's pushes go on in ticket order without `busy`.
        push(&d, &oprs, 3, &mut log);
        assert_eq!(d.role.busy.load(Ordering::Relaxed), 0);
        assert_eq!(d.owner(), Some(3));
        // Another thread takes `busy`: the bias is revoked, and the streak
        // starts again from that thread.
        push(&d, &oprs, 5, &mut log);
        assert_eq!(d.owner(), None);
        push(&d, &oprs, 3, &mut log);
        assert_eq!(d.owner(), None, "one take does not name it again");
        // A thread with no slot is never named.
        let mut none_log = Vec::new();
        for _ in 0..BIAS_AFTER + 1 {
            let op = oprs.take();
            d.submit(&oprs, op, None, |op, ticket| none_log.push((op, ticket)));
        }
        assert_eq!(d.owner(), None);
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
        let combining = AtomicBool::new(false);
        let slow = AtomicBool::new(false);
        let log = Mutex::new(Vec::new());
        // The log's lock is taken only inside a dispatch, and only to
        // record; overlap is caught by `combining`, not by the lock.
        let overlapped = AtomicBool::new(false);
        let record = |op: u32, ticket: u64| {
            // Noted, not asserted: a panic here would leave the other
            // thread waiting at the barrier.
            if combining.swap(true, Ordering::SeqCst) {
                overlapped.store(true, Ordering::SeqCst);
            }
            log.lock().unwrap().push((op, ticket));
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
                            d.submit(oprs, op, Some(me), record);
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
                                while d.owner() != Some(leader) && !followed.load(Ordering::SeqCst) {
                                    std::hint::spin_loop();
                                }
                                saw_named += usize::from(d.owner() == Some(leader));
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
                d.submit(oprs, op, Some(me), |op, ticket| log.push(op, ticket));
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
                loom::thread::spawn(move || d.submit(&oprs, op, Some(OTHER), |op, ticket| log.push(op, ticket)))
            };
            let alone = d.take_ticket(&oprs, Some(MAIN), |op, ticket| log.push(op, ticket), || true);
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
                        Some(OTHER),
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
            let ticket = d.take_ticket(
                &oprs,
                Some(MAIN),
                |_, _| {},
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
}
