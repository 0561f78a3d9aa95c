//! The per_device executor (the production engine), CPU side: one
//! worker per allowed CPU, pinned to it and grouped by NUMA node
//! (`topology.rs`), each owning a work-stealing deque.
//!
//! # Where a ready operation goes
//!
//! - `CpuPrioritized`: the priority pool (`priority.rs`), which every
//!   worker serves before anything else.
//! - Made ready on one of this engine's workers by a completion: that
//!   worker's successor slot if free (run next, and no thief can take it,
//!   so a dependency chain stays on one core with no cross-core hop), else
//!   its own deque. Two exceptions:
//!   - A worker pinned to the pusher's CPU (where it first published,
//!     or where it was held at the pending cap twice in a row since:
//!     `Shared::follow_throttled_pusher`), while another worker spins,
//!     sends the operation for the slot to the injector instead
//!     (`Shared::shed_to_idle`), so that the chain moves to the idle core
//!     rather than take turns with the pusher for its own.
//!   - With more than two workers, when a worker spins as a completion
//!     releases its first operation past the slot, that one and the rest
//!     it releases go to the node's injector, where the idle workers take
//!     them from one ring rather than each steal them
//!     (`Shared::spread_surplus`).
//!
//!   A nested push from a running body goes to the deque
//!   (other workers may steal it while the body runs). Up to
//!   [`LOCAL_CAPACITY`] wait in the deque; beyond, they go to the node's
//!   injector.
//! - Made ready anywhere else (a pusher, a completion signalled by another
//!   thread): the injector of the node the operation's CPU context names,
//!   else of the pushing thread's node.
//! - A full injector or priority level: run by the thread that made the
//!   operation ready (as the pooled engine does), which also throttles it.
//! - A synchronous `Normal` push with no variables that would take the
//!   engine to the pending cap, and those after it until half the cap has
//!   drained (and past that while the pusher's runs come faster than the
//!   inline pace, `inline_pace.rs`): its body runs on that pusher, inside
//!   the push, with no block (`Core::unqueued_ticket`; the pooled engine
//!   does the same). `Async`
//!   and `DeleteVar` operations ready at dispatch always run there (the
//!   kAsync inline path), and so do `Normal` CPU ones during a stint
//!   (`pusher_runs.rs`; the pooled engine too), most of them with no
//!   block at all (`direct_run.rs`).
//!
//! The deque is crossbeam's Chase-Lev deque (`crossbeam_deque::Worker`,
//! LIFO for the owner, FIFO for thieves; under loom a twin that loom can
//! see into, `deque.rs`): its floor, a push and a pop (`benches/`), is
//! below anything else
//! in an operation's life, so an own deque on crossbeam-epoch would buy
//! nothing measurable. It grows by reallocating; keeping at most
//! [`LOCAL_CAPACITY`] operations in it (its initial capacity) means it
//! never does, so running allocates nothing. The injectors are the bounded
//! ready rings of the pooled engine: crossbeam's `Injector` allocates a
//! block every 63 operations.
//!
//! # Finding work
//!
//! A worker takes, in order: the priority pool, its own deque, its node's
//! injector, a steal from the other workers of its node, then the other
//! nodes' injectors and workers. A thread blocked in a wait helps the same
//! way from its own node. Integer priorities of non-prioritized operations
//! do not reorder anything: a deque and a FIFO ring cannot order by them
//! without a cost on every push (use `CpuPrioritized` where order matters).
//!
//! # Waking
//!
//! Idle workers spin (all of them while the workers leave a CPU to the
//! pushers, else half of them, at least two: `max_spinners`)
//! and park (`park.rs`). Pushing to an injector or the priority pool wakes
//! a parked worker unless one is spinning; a spinner that finds work wakes
//! a parked worker before it takes it, since it may have been the only
//! one told about several. A
//! push from a thread that has just waited on the engine is marked in the
//! injector, and a spinner leaves such an operation alone for
//! [`WAITER_GRACE`](crate::base::tuning::WAITER_GRACE) while it is the
//! only one there: that thread most likely waits for it next and runs it
//! itself (`help`), so the round trip stays on one core (pingpong p99
//! about 20 % lower, A/B in perf/journal/2026-11-25.md); all other work is taken at once.
//! Once such a thread has taken four in a row, the spinner naps
//! (`Sleep::nap`, still counted as spinning) until work no waiter will
//! run is published, instead of polling the injector's lines or taking
//! turns with the waiter for its core (`docs/worker-sleep.md`). A worker's own push
//! wakes one only when its deque already held work or the push comes from
//! inside a running body (which may run long): a chain released by
//! completions never pays for a wake-up, and otherwise nothing ready is
//! left waiting while a worker sleeps.

use super::deque::{Steal, Stealer, Worker};
use super::inline::{run_inline, run_queued_one};
use super::park::{push_and_wake, Sleep, Spun};
use super::priority::PriorityPool;
use super::ready_ring::ReadyRing;
use super::AbortOnUnwind;
use super::{Executor, ExecutorTraits, Runner, WorkerState, WorkerThreads};
use crate::base::context::{Context, FnProperty};
use crate::base::topology::{current_cpu, Topology};
use crate::base::tuning::{LOCAL_CAPACITY, PUSHER_MOVED_HOLDS, READY_CAPACITY};
use crate::mem::pool::NIL;
use crate::observe::stats::{EngineStats, ExecutorCounters, READY_SAMPLE};
use crate::sync::{fence, AtomicBool, Ordering};
use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `x % n` (`n > 0`) with no division when `x < 2n`, the callers' usual
/// case: a `div` costs tens of cycles, and the push path and the stealing
/// loop reduce an index on every call.
#[inline(always)]
fn wrap_below(x: usize, n: usize) -> usize {
    if x < n {
        x
    } else if x - n < n {
        x - n
    } else {
        x % n
    }
}

/// What every worker and helper shares.
struct Shared {
    stealers: Box<[Stealer<u32>]>,
    /// Each worker's NUMA node.
    node_of: Box<[usize]>,
    /// Each worker's CPU when pinned.
    pinned: Box<[Option<usize>]>,
    /// Whether a chain may be handed to an idle worker (`shed_to_idle`):
    /// the workers are pinned, each to a CPU of its own (with more workers
    /// than CPUs, two sharing one would hand chains back and forth).
    sheds: bool,
    injectors: Box<[ReadyRing]>,
    priority: PriorityPool,
    sleep: Sleep,
    /// Dedicated priority workers (ids after the CPU workers) and their
    /// own rendezvous: they take only prioritized work.
    priority_workers: usize,
    priority_sleep: Sleep,
    stop: AtomicBool,
    spin: Duration,
    counters: ExecutorCounters,
    stolen: AtomicU64,
    topology: Topology,
    /// The CPU the first thread that published work from outside the
    /// workers ran on then (`u32::MAX`: none yet), or the one a pusher
    /// held at the cap has since moved to (`follow_throttled_pusher`); see
    /// `shed_to_idle`. Its own line: read on every completion that
    /// releases a successor, written only when the pusher moves.
    publisher_cpu: CachePadded<AtomicU32>,
    /// A pusher held at the cap, seen on a CPU other than `publisher_cpu`:
    /// that CPU in the high half, how many holds in a row in the low half
    /// (0: none). Only throttled pushers touch it (a hint: racing pushers
    /// at worst miscount).
    pusher_elsewhere: CachePadded<AtomicU64>,
}

/// A worker's own state, on its thread's stack.
struct Local {
    shared: *const Shared,
    id: usize,
    /// The successor slot: the operation the worker's last completion made
    /// ready, run next; thieves cannot take it (`NIL`: empty).
    next: Cell<u32>,
    deque: Worker<u32>,
    /// Set when this worker has just handed a successor to the injector
    /// for a spinner (`Shared::shed_to_idle`): its next look for work
    /// skips the injectors, or it would take the operation straight back.
    shed: Cell<bool>,
    /// Whether the operations the current completion releases past the
    /// successor slot go to the injector (`Shared::spread_surplus`), decided
    /// at the first of them and kept for the rest, so that one burst is not
    /// split between the two places (`None`: not yet).
    spreading: Cell<Option<bool>>,
}

impl Local {
    fn new(shared: &Shared, id: usize, deque: Worker<u32>) -> Self {
        Local { shared, id, next: Cell::new(NIL), deque, shed: Cell::new(false), spreading: Cell::new(None) }
    }

    /// Whether this surplus operation goes to the injector: the decision
    /// [`Local::spreading`] holds, or takes now.
    #[inline]
    fn spreads_surplus(&self, shared: &Shared) -> bool {
        if let Some(spread) = self.spreading.get() {
            return spread;
        }
        let spread = shared.spread_surplus();
        self.spreading.set(Some(spread));
        spread
    }
}

crate::sync::thread_local! {
    /// This thread's worker state (null for other threads).
    static LOCAL: Cell<*const Local> = const { Cell::new(std::ptr::null()) };
    /// The NUMA node a non-worker thread pushes to (`usize::MAX`: not yet read).
    static HOME_NODE: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// The per_device CPU executor (see the module docs).
pub(crate) struct PerDeviceExecutor {
    shared: Arc<Shared>,
    /// The workers' deques until `start` hands each to its thread.
    deques: Mutex<Vec<Worker<u32>>>,
    threads: WorkerThreads,
}

impl PerDeviceExecutor {
    /// `workers` CPU workers over `topology` (worker `i` on CPU `i mod
    /// cpus`), pinned if `pin`, plus `priority_workers` unpinned threads
    /// that serve only the priority pool; idle workers spin for `spin`
    /// before parking.
    pub(crate) fn new(topology: Topology, workers: usize, priority_workers: usize, pin: bool, spin: Duration) -> Self {
        let deques: Vec<Worker<u32>> = (0..workers).map(|_| Worker::new_lifo()).collect();
        let cpu = |i: usize| topology.cpus[i % topology.cpus.len()];
        // Pinned, each worker to a CPU of its own.
        let own_cpus = pin && workers <= topology.cpus.len();
        let shared = Shared {
            stealers: deques.iter().map(Worker::stealer).collect(),
            node_of: (0..workers).map(|i| cpu(i).node).collect(),
            pinned: (0..workers).map(|i| pin.then(|| cpu(i).os_index)).collect(),
            sheds: own_cpus && workers > 1,
            injectors: (0..topology.nodes).map(|_| ReadyRing::new(READY_CAPACITY)).collect(),
            priority: PriorityPool::default(),
            sleep: Sleep::new(workers, pin).with_own_cpus(own_cpus),
            priority_workers,
            priority_sleep: Sleep::new(priority_workers, false),
            stop: AtomicBool::new(false),
            spin,
            counters: ExecutorCounters::default(),
            stolen: AtomicU64::new(0),
            topology,
            publisher_cpu: CachePadded::new(AtomicU32::new(u32::MAX)),
            pusher_elsewhere: CachePadded::new(AtomicU64::new(0)),
        };
        PerDeviceExecutor { shared: Arc::new(shared), deques: Mutex::new(deques), threads: WorkerThreads::default() }
    }

    /// The CPU each worker is pinned to (`None`: not pinned).
    pub(crate) fn pinned(&self) -> Vec<Option<usize>> {
        self.shared.pinned.to_vec()
    }

    /// This thread's worker state, if it is one of this executor's workers.
    fn local(&self) -> Option<&Local> {
        let local = LOCAL.with(|l| l.get());
        // SAFETY: a non-null `LOCAL` points at the worker's own `Local`,
        // alive on its stack for as long as the thread works.
        (!local.is_null() && std::ptr::eq(unsafe { (*local).shared }, &*self.shared)).then(|| unsafe { &*local })
    }
}

impl WorkerState for Shared {
    fn movable_workers_fill_cpus(&self) -> bool {
        self.sleep.movable_workers_fill(self.topology.cpus.len())
    }

    fn note_throttled_pusher(&self) {
        if let Some(cpu) = current_cpu() {
            self.follow_throttled_pusher(cpu as u32);
        }
    }
}

impl Shared {
    /// The node a non-worker thread's pushes go to: the node of the CPU it
    /// runs on when first asked (threads move; this is a hint).
    fn home_node(&self) -> usize {
        HOME_NODE.with(|h| {
            if h.get() == usize::MAX {
                h.set(current_cpu().map_or(0, |cpu| self.topology.node_of(cpu)));
            }
            // A thread keeps its node across engines, so it may name a node
            // this one lacks; the reduction is a branch, not a division, on
            // every push and help.
            wrap_below(h.get(), self.injectors.len())
        })
    }

    /// Whether worker `id` should hand the operation its completion just
    /// released to a spinning worker instead of running it next: it is
    /// pinned to the pusher's CPU (`note_publisher_cpu`,
    /// `follow_throttled_pusher`), and another worker spins. A chain kept there
    /// takes turns with the pusher for one core while the spinner's core
    /// idles; handed over, it stays on the spinner's core (whose
    /// completions then keep it). per_device `chain` at W=0 ran 36–110
    /// ns/op from one round to the next, by where its first operation
    /// landed, and 34–42 in 7 rounds of 8 with the hand-over (perf/journal/2026-11-25.md).
    #[inline]
    fn shed_to_idle(&self, id: usize) -> bool {
        let (true, Some(cpu)) = (self.sheds, self.pinned[id]) else { return false };
        self.publisher_cpu.load(Ordering::Relaxed) == cpu as u32 && self.sleep.anyone_spinning()
    }

    /// Whether the operations a completion releases past the successor
    /// slot go to the injector rather than the worker's own deque: with
    /// more than two workers, when one spins as the first of them is
    /// released (`Local::spreads_surplus` keeps that answer for the rest).
    /// The idle workers then take them from one FIFO ring instead of each
    /// stealing from the deque (a look at every worker's deque, then a
    /// compare-and-swap on the victim's line, which the others contend
    /// for). With two workers the other one steals alone, and the deque
    /// keeps the work on the releasing core. On 16 cores: `fanout` 0.82 of
    /// the deque's time at W = 0 and 0.94 at W = 1000, the other rows
    /// level (perf/journal/2026-11-27.md, "2026-11-27"); on 2 cores it never applies.
    #[inline]
    fn spread_surplus(&self) -> bool {
        self.stealers.len() > 2 && self.sleep.anyone_spinning()
    }

    /// Records the CPU of the first thread that publishes work to this
    /// engine (a pusher, not a worker), as it runs then; later publishes
    /// leave it. Following the pusher at every publish and every yield at
    /// the cap gained nothing: per_device `chain` read 1.01 against 0.54
    /// for the first CPU kept (perf/journal/2026-11-25.md). The worker on that
    /// CPU repels chains whenever another worker idles, and the OS then
    /// mostly keeps the pusher beside an idle worker, where it was; when
    /// the OS moves it all the same, `follow_throttled_pusher` follows.
    #[inline]
    fn note_publisher_cpu(&self) {
        if self.publisher_cpu.load(Ordering::Relaxed) == u32::MAX {
            self.note_publisher_cpu_now();
        }
    }

    #[cold]
    fn note_publisher_cpu_now(&self) {
        // Unknown is stored as `u32::MAX`: looked up again at the next publish.
        let cpu = current_cpu().map_or(u32::MAX, |cpu| cpu as u32);
        self.publisher_cpu.store(cpu, Ordering::Relaxed);
    }

    /// A pusher held at the pending cap runs on `cpu`. Seen on the same
    /// CPU other than `publisher_cpu` at [`PUSHER_MOVED_HOLDS`] holds in a
    /// row, that CPU becomes the one whose worker repels chains
    /// (`shed_to_idle`): the OS has moved the pusher for good, and a
    /// worker left repelling them from the CPU it left only hands its
    /// successors to the injector for nothing, while the chain on the
    /// pusher's new CPU takes turns with it. A single sighting is not
    /// enough: followed at one hold, per_device `chain` at W=0 read 1.00
    /// and `chains64` 0.94; at two in a row, 0.85–0.92 and 0.84–0.98
    /// (perf/journal/2026-11-27.md, "a pusher that moved is followed").
    fn follow_throttled_pusher(&self, cpu: u32) {
        let known = self.publisher_cpu.load(Ordering::Relaxed);
        if known == u32::MAX || cpu == known {
            // Nothing published yet (the first publish notes the CPU), or
            // the pusher is where it was: a run of sightings elsewhere ends.
            if self.pusher_elsewhere.load(Ordering::Relaxed) != 0 {
                self.pusher_elsewhere.store(0, Ordering::Relaxed);
            }
            return;
        }
        let seen = self.pusher_elsewhere.load(Ordering::Relaxed);
        let holds = if (seen >> 32) as u32 == cpu { seen as u32 + 1 } else { 1 };
        if holds >= PUSHER_MOVED_HOLDS {
            self.publisher_cpu.store(cpu, Ordering::Relaxed);
            self.pusher_elsewhere.store(0, Ordering::Relaxed);
        } else {
            self.pusher_elsewhere.store(u64::from(cpu) << 32 | u64::from(holds), Ordering::Relaxed);
        }
    }

    /// Puts `op` on the deque of the worker `local` (a nested push from a
    /// running body, `in_body`, or an operation released past a full
    /// successor slot), where other workers may steal it. Wakes one only
    /// when the deque already held work or the push comes from a body,
    /// which may run long; otherwise the worker takes `op` itself next.
    #[inline]
    fn push_to_own_deque(&self, local: &Local, op: u32, in_body: bool) {
        let had_work = !local.deque.is_empty();
        local.deque.push(op);
        if had_work || in_body {
            // A deque push is plain stores: no `SeqCst` read-modify-write
            // that a spinner's count would order against.
            self.counters.wake_one_after_plain_publish(&self.sleep);
        }
    }

    /// A publish from outside the workers: pushes `op` to `node`'s
    /// injector and wakes a worker if the protocol asks for one
    /// ([`push_and_wake`]); hands `op` back when the injector is full.
    #[inline(always)]
    fn inject(&self, node: usize, op: u32) -> Result<(), u32> {
        push_and_wake(&self.injectors[node], op, |for_waiter| self.counters.wake_one(&self.sleep, for_waiter))
    }

    /// Wakes a parked worker unless one is spinning, counting it.
    #[inline]
    fn wake_one(&self) {
        self.counters.wake_one(&self.sleep, false);
    }

    /// Whether any queue may hold work (a hint, for spinning and parking).
    fn has_work(&self) -> bool {
        self.has_urgent_work() || self.injected()
    }

    /// Whether anything is ready that a spinner must not leave to a waiter:
    /// everything but marked operations alone in their injectors.
    fn has_work_to_take(&self) -> bool {
        self.has_urgent_work() || !self.injected_only_for_waiters()
    }

    /// Whether the priority pool or a deque may hold work: a spinner takes
    /// it at once.
    fn has_urgent_work(&self) -> bool {
        self.priority.may_have_work() || self.stealers.iter().any(|s| !s.is_empty())
    }

    /// Whether an injector holds work.
    fn injected(&self) -> bool {
        self.injectors.iter().any(|q| !q.is_empty())
    }

    /// Whether every injector is empty or holds one operation marked for
    /// the waiter that pushed it ([`ReadyRing::only_marked`]).
    fn injected_only_for_waiters(&self) -> bool {
        self.injectors.iter().all(|q| q.is_empty() || q.only_marked())
    }

    /// Whether more operations are ready than the one the calling worker is
    /// about to take: then another worker should be woken for the rest. (A
    /// possibly non-empty priority pool counts as more.)
    fn has_more_than_one(&self) -> bool {
        // The other side of the fence a producer pays before it relies on
        // this count after a deque push (`Sleep::notify_one_after_plain_publish`):
        // the deques' lengths are not read with `SeqCst` loads, unlike the
        // injectors' and the priority pool's (`docs/worker-sleep.md`,
        // item 6).
        fence(Ordering::SeqCst);
        if self.priority.may_have_work() {
            return true;
        }
        let injected: usize = self.injectors.iter().map(|q| q.len()).sum();
        injected + self.stealers.iter().map(|s| s.len()).sum::<usize>() > 1
    }

    /// Steals one operation from the workers of `node` (or of every other
    /// node), skipping `me`.
    fn steal(&self, me: Option<usize>, node: usize, same_node: bool) -> Option<u32> {
        let n = self.stealers.len();
        let start = me.map_or(0, |m| m + 1);
        for k in 0..n {
            // `start <= n`, so one subtraction wraps it (no division).
            let w = wrap_below(start + k, n);
            if Some(w) == me || (self.node_of[w] == node) != same_node {
                continue;
            }
            loop {
                match self.stealers[w].steal() {
                    Steal::Success(op) => {
                        self.stolen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        return Some(op);
                    }
                    Steal::Retry => continue,
                    Steal::Empty => break,
                }
            }
        }
        None
    }

    /// The next operation for a thread of `node` (a worker passes its id
    /// and deque).
    fn find_work(&self, node: usize, local: Option<&Local>) -> Option<u32> {
        if let Some(op) = self.priority.pop() {
            return Some(op);
        }
        if let Some(l) = local {
            let next = l.next.replace(NIL);
            if next != NIL {
                return Some(next);
            }
            if let Some(op) = l.deque.pop() {
                return Some(op);
            }
        }
        let injectors = !local.is_some_and(|l| l.shed.replace(false));
        if injectors {
            if let Some(op) = self.injectors[node].pop() {
                return Some(op);
            }
        }
        let me = local.map(|l| l.id);
        if let Some(op) = self.steal(me, node, true) {
            return Some(op);
        }
        if injectors {
            let others = self.injectors.len();
            for k in 1..others {
                if let Some(op) = self.injectors[wrap_below(node + k, others)].pop() {
                    return Some(op);
                }
            }
        }
        self.steal(me, node, false)
    }

    /// The spinning worker's look for work (the caller has started
    /// spinning): `Some(true)` when it found work (or napped and should
    /// look again), `Some(false)` when the executor stops during a nap,
    /// `None` when it found nothing and should park.
    #[inline(always)]
    fn spin(&self) -> Option<bool> {
        // An operation that sits alone in an injector, marked by the
        // thread that pushed it as one it is about to wait for and run
        // itself (`help`), is left alone for `WAITER_GRACE` first, so
        // that such a round trip stays on one core.
        let spun = self.sleep.spin_with_grace(
            self.spin,
            || self.has_urgent_work(),
            || self.injected(),
            || self.injected_only_for_waiters(),
        );
        if spun == Spun::LeftToWaiters {
            // A thread is running its own round trips. A spinner pinned
            // to another core would only pull the injector's lines away
            // from it each round, and one pinned to the same core would
            // take turns with it for that core: stay off both, counted
            // as spinning, until other work comes (`Sleep::nap`).
            // Woken, it hands the watch on as below: every publish during
            // the nap relied on it, but only the first woke it.
            return Some(self.counters.nap_and_hand_on(
                &self.sleep,
                || self.has_work_to_take(),
                &self.stop,
                || self.has_more_than_one(),
            ));
        }
        self.sleep.stop_spinning();
        if spun != Spun::Found {
            return None;
        }
        // Publishers skip the wake-up while a worker spins, so the
        // spinner may be the only one told about several operations: it
        // hands the watch on to a sleeper (as tokio's last searching
        // worker does) before taking one, when there is more than that
        // one. (A publish after `stop_spinning` sees no spinner and wakes
        // a sleeper itself; one that relied on the spinner is seen here,
        // ordered by an injector's `SeqCst` claim or by a deque push's
        // fence and the one in `has_more_than_one`: `docs/worker-sleep.md`,
        // item 6, and the loom model
        // `a_spinner_that_finds_more_than_it_takes_wakes_a_sleeper`.)
        if self.has_more_than_one() {
            self.wake_one();
        }
        Some(true)
    }

    /// A worker found nothing: spins (if no other worker is spinning),
    /// then parks until work is published. Returns `false` when stopping.
    fn idle(&self) -> bool {
        if self.sleep.try_start_spinning() {
            if let Some(working) = self.spin() {
                return working;
            }
        }
        self.park()
    }

    /// A worker that found nothing and is not spinning parks until work is
    /// published. Returns `false` when stopping.
    #[inline(always)]
    fn park(&self) -> bool {
        if self.stop.load(Ordering::Acquire) {
            return false;
        }
        self.counters.park_and_hand_on(
            &self.sleep,
            || self.has_work() || self.stop.load(Ordering::SeqCst),
            || self.has_more_than_one(),
        );
        true
    }

    fn work<R: Runner>(&self, core: &R, id: usize, deque: Worker<u32>) {
        let _guard = AbortOnUnwind;
        if let Some(cpu) = self.pinned[id] {
            // A CPU that disappeared from the affinity mask only costs the pinning.
            core_affinity::set_for_current(core_affinity::CoreId { id: cpu });
        }
        let local = Local::new(self, id, deque);
        LOCAL.with(|l| l.set(&local));
        core.enter_worker();
        core.profiler().bind_worker(id);
        let node = self.node_of[id];
        let mut ran = 0u64;
        loop {
            if let Some(op) = self.find_work(node, Some(&local)) {
                core.run(op, Some(id));
                ran += 1;
                if ran.is_multiple_of(READY_SAMPLE) {
                    self.counters.ready_high_water.note(self.injectors[node].len() as u64);
                }
                continue;
            }
            core.flush_worker_batch();
            if !self.idle() {
                break;
            }
        }
        core.leave_worker();
        LOCAL.with(|l| l.set(std::ptr::null()));
    }

    /// A dedicated priority worker: prioritized operations only.
    fn serve_priority<R: Runner>(&self, core: &R, id: usize) {
        core.enter_worker();
        core.profiler().bind_worker(id);
        loop {
            if let Some(op) = self.priority.pop() {
                core.run(op, Some(id));
                continue;
            }
            core.flush_worker_batch();
            if self.stop.load(Ordering::Acquire) {
                break;
            }
            let has_work = || self.priority.may_have_work() || self.stop.load(Ordering::SeqCst);
            self.counters.park(&self.priority_sleep, has_work);
        }
        core.leave_worker();
    }
}

impl<R: Runner> Executor<R> for PerDeviceExecutor {
    fn start(&self, core: &Arc<R>) -> std::io::Result<()> {
        // Start-up only: the mutex guards the deques, not the hot path.
        let deques = std::mem::take(&mut *self.deques.lock().unwrap_or_else(|p| p.into_inner()));
        let cpu = deques.len();
        for (id, deque) in deques.into_iter().enumerate() {
            let (core, shared) = (core.clone(), self.shared.clone());
            self.threads.spawn(format!("depengine-cpu-{id}"), move || shared.work(&*core, id, deque))?;
        }
        for i in 0..self.shared.priority_workers {
            let (core, shared) = (core.clone(), self.shared.clone());
            self.threads.spawn(format!("depengine-prio-{i}"), move || shared.serve_priority(&*core, cpu + i))?;
        }
        Ok(())
    }

    fn schedule(&self, core: &R, op: u32, prop: FnProperty) {
        let shared = &*self.shared;
        // SAFETY: a ready block belongs to whoever schedules it.
        let opts = unsafe { core.oprs().get(op).meta() }.opts;
        if prop == FnProperty::CpuPrioritized {
            match shared.priority.push(op, opts.priority) {
                Ok(()) => {
                    if shared.priority_workers > 0 {
                        shared.priority_sleep.notify_one(false);
                    }
                    shared.wake_one();
                }
                Err(op) => run_inline(core, op),
            }
            return;
        }
        let node = match self.local() {
            Some(local) if local.deque.len() < LOCAL_CAPACITY => {
                let in_body = core.in_own_body();
                if in_body || local.next.get() != NIL {
                    // Surplus of a completion goes to the injector below
                    // while `spreads_surplus` says so.
                    if in_body || !local.spreads_surplus(shared) {
                        shared.push_to_own_deque(local, op, in_body);
                        return;
                    }
                } else if !shared.shed_to_idle(local.id) {
                    // Released by a completion: this worker runs it next,
                    // unless it would take turns with the pusher for its
                    // core while another worker idles (`shed_to_idle`):
                    // then it goes to the injector, where the spinner takes
                    // it, and this worker's next look for work passes the
                    // injectors by.
                    local.next.set(op);
                    local.spreading.set(None);
                    return;
                } else {
                    local.shed.set(true);
                }
                shared.node_of[local.id]
            }
            Some(local) => shared.node_of[local.id],
            None => {
                shared.note_publisher_cpu();
                match opts.ctx {
                    Context::Cpu(node) if node != Context::ANY_NODE => {
                        wrap_below(node as usize, shared.injectors.len())
                    }
                    _ => shared.home_node(),
                }
            }
        };
        if let Err(op) = shared.inject(node, op) {
            run_inline(core, op);
        }
    }

    fn help(&self, core: &R) -> bool {
        if run_queued_one() {
            return true;
        }
        let local = self.local();
        let (node, worker) = match local {
            Some(l) => (self.shared.node_of[l.id], Some(l.id)),
            None => (self.shared.home_node(), None),
        };
        match self.shared.find_work(node, local) {
            Some(op) => {
                core.run(op, worker);
                true
            }
            None => false,
        }
    }

    fn stop(&self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.sleep.notify_all();
        self.shared.priority_sleep.notify_all();
        self.threads.join_all();
    }

    fn traits(&self) -> ExecutorTraits {
        ExecutorTraits {
            cpu_workers: self.shared.stealers.len(),
            worker_threads: self.shared.stealers.len() + self.shared.priority_workers,
            waiters_can_sleep: true,
            runs_async_inline: true,
            runs_on_pushers: true,
            throttled_pushers_help: false,
            workers: Some(self.shared.clone()),
        }
    }

    fn worker_name(&self, id: usize) -> String {
        match id.checked_sub(self.shared.stealers.len()) {
            None => format!("cpu worker {id}"),
            Some(p) => format!("priority worker {p}"),
        }
    }

    fn add_stats(&self, s: &mut EngineStats) {
        self.shared.counters.add_into(s);
        s.stolen += self.shared.stolen.load(std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::*;
    use crate::base::topology::{Cpu, TopologySource};

    /// Two workers pinned to CPUs 0 and 1 (not started: the rule below
    /// needs no thread).
    fn pinned_pair() -> Arc<Shared> {
        let cpus = (0..2).map(|os_index| Cpu { os_index, node: 0 }).collect();
        let topology = Topology { cpus, nodes: 1, source: TopologySource::Unknown };
        PerDeviceExecutor::new(topology, 2, 0, true, Duration::ZERO).shared.clone()
    }

    /// The CPU whose worker repels chains follows a pusher held at the
    /// cap on another CPU at two holds in a row there: not before anything
    /// was published, not at one hold, not across a hold back where it was
    /// or on a third CPU; and then the worker pinned to the new CPU is the
    /// one that hands its successors to a spinner.
    #[test]
    fn a_pusher_held_twice_in_a_row_on_another_cpu_is_followed() {
        let shared = pinned_pair();
        let repelling = || shared.publisher_cpu.load(Ordering::Relaxed);
        shared.follow_throttled_pusher(1);
        shared.follow_throttled_pusher(1);
        assert_eq!(repelling(), u32::MAX, "followed before the first publish noted a CPU");
        shared.publisher_cpu.store(0, Ordering::Relaxed);
        shared.follow_throttled_pusher(1);
        assert_eq!(repelling(), 0, "followed at one hold elsewhere");
        shared.follow_throttled_pusher(0);
        shared.follow_throttled_pusher(1);
        assert_eq!(repelling(), 0, "a hold back on CPU 0 did not end the run on CPU 1");
        shared.follow_throttled_pusher(2);
        shared.follow_throttled_pusher(1);
        assert_eq!(repelling(), 0, "a hold on CPU 2 did not end the run on CPU 1");
        shared.follow_throttled_pusher(1);
        assert_eq!(repelling(), 1, "not followed at two holds in a row on CPU 1");
        assert!(shared.sleep.try_start_spinning(), "a spinner");
        assert!(shared.shed_to_idle(1) && !shared.shed_to_idle(0), "the worker on the pusher's new CPU repels chains");
        shared.sleep.stop_spinning();
    }
}

/// Loom models of the per_device workers' hand-offs (`--cfg
/// depengine_loom`; see `loom_tests/README.md`): finding work, spinning,
/// parking and waking around the injector and the deques (their loom twin,
/// `deque.rs`), as `Shared::work` runs them. An operation's body is a
/// closure here; one that blocks until another operation has been taken
/// stands for a body that waits on another operation, which only another
/// worker can then run: a wake-up the executor forgets leaves every thread
/// blocked, which loom reports as a deadlock.
#[cfg(all(test, depengine_loom))]
mod loom_models {
    use super::*;
    use crate::base::topology::{Cpu, TopologySource};

    /// Two unpinned workers on one node whose spin is a single look
    /// (`Duration::ZERO`) before they park.
    fn two_workers() -> (Arc<Shared>, Vec<Worker<u32>>) {
        let cpus = (0..2).map(|os_index| Cpu { os_index, node: 0 }).collect();
        let topology = Topology { cpus, nodes: 1, source: TopologySource::Unknown };
        let executor = PerDeviceExecutor::new(topology, 2, 0, false, Duration::ZERO);
        let deques = std::mem::take(&mut *executor.deques.lock().unwrap());
        (executor.shared.clone(), deques)
    }

    /// How often each operation was taken. Its own mutex and condition
    /// variable, not a futex: the loom futex is one model-wide condition
    /// variable (`sync.rs`), whose every wake-up would also wake a parked
    /// worker and so hide a wake-up the executor forgot.
    struct Taken {
        counts: loom::sync::Mutex<Vec<u32>>,
        changed: loom::sync::Condvar,
    }

    impl Taken {
        fn new(ops: usize) -> Self {
            Taken { counts: loom::sync::Mutex::new(vec![0; ops]), changed: loom::sync::Condvar::new() }
        }

        fn take(&self, op: u32) {
            self.counts.lock().unwrap()[op as usize] += 1;
            self.changed.notify_all();
        }

        /// Blocks until `done` holds of the counts.
        fn wait_until(&self, done: impl Fn(&[u32]) -> bool) {
            let mut counts = self.counts.lock().unwrap();
            while !done(&counts) {
                counts = self.changed.wait(counts).unwrap();
            }
        }

        fn counts(&self) -> Vec<u32> {
            self.counts.lock().unwrap().clone()
        }
    }

    /// A worker's loop (`Shared::work`, with `body` for `Core::run`)
    /// until the executor stops.
    fn work(shared: &Shared, local: &Local, taken: &Taken, body: fn(&Shared, &Local, &Taken, u32)) {
        loop {
            if let Some(op) = shared.find_work(0, Some(local)) {
                taken.take(op);
                body(shared, local, taken, op);
            } else if !shared.idle() {
                break;
            }
        }
    }

    /// Runs `first` as worker 0 (which may go on with the worker loop
    /// itself) and the worker loop as worker 1, with `body` for the
    /// operations they take and `publish` on this thread; then waits until
    /// each of the `ops` operations was taken, stops the workers and checks
    /// that each was taken once. If `spinner_and_sleeper`, worker 0 holds
    /// a spinner's place (`Sleep::try_start_spinning`; `first` must give it
    /// back, as `Shared::spin` does) and starts only once worker 1 has
    /// announced itself parked: the state in which publishers rely on the
    /// spinner and wake nobody.
    fn model(
        ops: u32,
        spinner_and_sleeper: bool,
        first: fn(&Shared, &Local, &Taken),
        body: fn(&Shared, &Local, &Taken, u32),
        publish: fn(&Shared),
    ) {
        loom::model(move || {
            let (shared, deques) = two_workers();
            if spinner_and_sleeper {
                assert!(shared.sleep.try_start_spinning(), "no worker spins yet");
            }
            let taken = loom::sync::Arc::new(Taken::new(ops as usize));
            let spawn = |id: usize, deque: Worker<u32>| {
                let (shared, taken) = (shared.clone(), taken.clone());
                loom::thread::spawn(move || {
                    let local = Local::new(&shared, id, deque);
                    if id == 0 {
                        first(&shared, &local, &taken);
                    } else {
                        work(&shared, &local, &taken, body);
                    }
                })
            };
            let mut deques = deques.into_iter();
            let (deque_0, deque_1) = (deques.next().unwrap(), deques.next().unwrap());
            let worker_1 = spawn(1, deque_1);
            if spinner_and_sleeper {
                while shared.sleep.sleepers() == 0 {
                    loom::thread::yield_now();
                }
            }
            let worker_0 = spawn(0, deque_0);
            publish(&shared);
            taken.wait_until(|counts| counts.iter().all(|&c| c > 0));
            shared.stop.store(true, Ordering::SeqCst);
            shared.sleep.notify_all();
            worker_0.join().unwrap();
            worker_1.join().unwrap();
            assert_eq!(taken.counts(), vec![1; ops as usize], "each operation taken once");
        });
    }

    /// What a pusher's `schedule` does with a ready operation.
    fn inject(shared: &Shared, op: u32) {
        shared.inject(0, op).expect("the injector has room");
    }

    /// Two operations pushed from outside while worker 0 spins and worker
    /// 1 has parked (or is parking); the first operation's body waits
    /// until the second has been taken. Publishers skip the wake-up while a
    /// worker spins, so a spinner that finds more work than it takes must
    /// hand the watch on to a sleeper. Its count must see every publish
    /// whose publisher saw it spinning (`docs/worker-sleep.md`, item 6):
    /// with the ring's claim relaxed and no fence before the count, this
    /// model deadlocks, the spinner missing the second publish and worker
    /// 1 sleeping through the second operation while worker 0 waits for
    /// it.
    #[test]
    #[ignore = "heavy: about 30 seconds at LOOM_MAX_PREEMPTIONS=2; loom_tests/run.sh runs it"]
    fn a_spinner_that_finds_more_than_it_takes_wakes_a_sleeper() {
        model(
            2,
            true,
            |shared, local, taken| {
                if shared.spin().unwrap_or_else(|| shared.park()) {
                    work(shared, local, taken, blocks_until_1_taken);
                }
            },
            blocks_until_1_taken,
            |shared| (0..2).for_each(|op| inject(shared, op)),
        );
    }

    /// The body of operation 0 in the hand-on model above: it waits until
    /// operation 1 has been taken (as a body waiting on another operation).
    fn blocks_until_1_taken(_: &Shared, _: &Local, taken: &Taken, op: u32) {
        if op == 0 {
            taken.wait_until(|counts| counts[1] > 0);
        }
    }

    /// Worker 0 runs a body that pushes an operation (a nested push: onto
    /// its own deque) and then waits until it has been taken, which only
    /// worker 1 can do, by stealing it, whether it is starting, spinning
    /// or parked.
    #[test]
    fn a_nested_push_is_stolen_while_its_body_waits() {
        model(
            2,
            false,
            |shared, local, taken| {
                taken.take(0);
                shared.push_to_own_deque(local, 1, true);
                taken.wait_until(|counts| counts[1] > 0);
            },
            |_, _, _, _| {},
            |_| {},
        );
    }
}
