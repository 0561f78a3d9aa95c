//! Every tuning constant of the engine, in one place.
//!
//! These are heuristics: thresholds and sizes that trade one cost against
//! another, chosen by measurement on the two-vCPU hosts of PERF.md. Each
//! says what it trades and where the measurement is (a `perf/journal/`
//! file and its section). A change to one is an A/B (`perf/ab.sh`) on at
//! least two hosts, recorded in the journal. The engine's correctness
//! does not depend on any of them: the loom models run with the values
//! under `cfg(depengine_loom)`, and any positive value is sound.
//!
//! The public defaults a user may override (`DEFAULT_MAX_PENDING`,
//! `DEFAULT_INLINE_PACE`) are in `config.rs`, with their own docs.

use std::time::Duration;

// ----- the pending cap: fractions of `max_pending` --------------------------

/// A stint's low water is the cap over this (at least 1): deep enough to
/// keep the workers busy, shallow enough that a stint's next pushes find
/// their variables free (perf/journal/2026-11-27.md, "stints, tiny
/// operations with variables run by their pushers").
pub(crate) const LOW_WATER_DIVISOR: u64 = 16;

/// With running on the pusher, pushes with no variables that reached the
/// cap go on running unqueued down to the cap over this: half the cap
/// still queued keeps the workers busy, while each run saves a hand-off
/// (`nodeps` W=0 0.78–0.80 of its time; perf/journal/2026-11-27.md, "a
/// pusher that reached the cap runs bodies without variables down to half
/// of it").
pub(crate) const UNQUEUED_DOWN_TO_DIVISOR: u64 = 2;

/// A throttled pusher that sleeps wakes when the cap over this has
/// drained: sooner wakes it for every completion, later lets the workers
/// run dry (perf/journal/2026-11-24.md, sixth round).
pub(crate) const SLEEP_DRAIN_DIVISOR: u64 = 4;

// ----- the throttle (a pusher held at the cap; throttle.rs) -----------------

/// Yields without progress a held pusher tolerates before it gives up
/// waiting: a program holding completions on purpose is slowed, never
/// stuck (each yield is a few µs at most).
pub(crate) const IDLE_LIMIT: u32 = 200;

/// A yield that comes back sooner than this found no other thread wanting
/// the core: yielding on would keep a core busy for nothing.
pub(crate) const ALONE_YIELD: Duration = Duration::from_micros(20);

/// A held pusher sleeps only if the workers need at least this long to
/// drain the sleep's share of the cap: a futex sleep and its wake-up cost
/// tens of µs (perf/journal/2026-11-24.md, sixth round).
pub(crate) const SLEEP_PAYS: Duration = Duration::from_micros(100);

/// The longest a held pusher sleeps in one go (a bound on a sleep that no
/// completion ends).
pub(crate) const SLEEP_LIMIT: Duration = Duration::from_millis(1);

/// Drain rates are measured over spans at least this long (shorter: the
/// clock's cost and noise dominate) ...
pub(crate) const RATE_SPAN_MIN: Duration = Duration::from_micros(50);

/// ... and a span starts afresh once it is this old (longer: the estimate
/// lags a change of bodies).
pub(crate) const RATE_SPAN_RESTART: Duration = Duration::from_millis(1);

/// Operations the workers finish faster than this are *short*: the
/// dispatcher then sends a waiting read's line to the shared cache
/// (perf/journal/2026-11-27.md, "a waiting read's line sent to the shared
/// cache"; W=0 rows drain at 100–250 ns an operation, W=1000 rows at
/// 800–1,500).
pub(crate) const SHORT_OP: Duration = Duration::from_nanos(400);

// ----- stints (pushers running what their pushes make ready; pusher_runs.rs)

/// A stint that ends within this many windows of its start doubles the
/// pause before the next probe: probes that keep losing get rarer.
pub(crate) const PROBATION: u32 = 16;

/// The pause before the next probe after a stint that lasted.
pub(crate) const MIN_PAUSE: Duration = Duration::from_millis(1);

/// The longest pause between probes: bounds how long a workload that
/// turned short waits to be noticed.
pub(crate) const MAX_PAUSE: Duration = Duration::from_millis(128);

/// Window ends in a row no quicker than the limit that end a stint: a
/// time slice given to another thread stretches a few windows, not eight.
pub(crate) const SLOW_ENDS: u32 = 8;

/// Probe only where a thread's queued pushes come quicker than this many
/// inline paces: slower, the bodies are long enough that one thread loses
/// to two, and probes cost about 1 % of a W=1000 row for nothing
/// (perf/journal/2026-11-27.md, "stints, tiny operations with variables
/// run by their pushers").
pub(crate) const PROBE_PACES: u32 = 8;

/// The longest a probe waits for the pending count to drain: other
/// threads' pushes may keep it up, and a full cap drains in 100–250 µs.
pub(crate) const PROBE_WAIT: Duration = Duration::from_millis(5);

/// A stint must beat queuing by this fraction of the queued pace (its
/// limit is the queued pace less a `MARGIN`-th): closer, the paces differ
/// by less than their noise, and queuing leaves the pusher's core free.
pub(crate) const MARGIN: u64 = 8;

/// A stint ends at once when its pace is this many times the limit: it is
/// losing, not interrupted (perf/journal/2026-11-27.md, "stints, tiny
/// operations with variables run by their pushers").
pub(crate) const LOSING: u64 = 8;

/// A thread's queued pushes between two looks at whether a probe is due
/// away from the cap; a multiple of [`WINDOW`]. Rarer looks notice a
/// short workload later; each look reads the clock.
pub(crate) const LOOK_EVERY: u32 = 4096;

/// Runs per pace window (`inline_pace.rs`): one clock read a window.
/// Longer windows notice a change of pace later; shorter ones pay the
/// clock more often and are noisier.
pub(crate) const WINDOW: u32 = 64;

// ----- the dispatcher (dispatch.rs) ----------------------------------------

/// Dispatch shards: each has its own combiner, and a variable belongs to
/// the home shard of the first thread that pushes to it (its thread slot
/// modulo this). More shards keep more pushing threads apart (threads
/// whose slots are equal modulo this share a combiner); each costs a
/// `wait_all` or a shutdown one more take, and the engine about 1 KiB
/// (its combiner's lines, its finished count, its spare blocks). A power of two, at most 16 (a variable keeps its shard as a bit
/// of its `life` word, `graph/var.rs`).
/// Two under loom, whose models then explore pushes across shards.
pub(crate) const SHARDS: usize = if cfg!(depengine_loom) { 2 } else { 16 };

/// Polls of a delegated push for the combiner to take its operation, before
/// it pays for a heavy barrier (`barrier.rs`).
pub(crate) const HANDOVER_POLLS: u32 = if cfg!(depengine_loom) { 1 } else { 64 };

/// Takes of the dispatcher in a row by one thread after which it is named
/// owner and combines with no locked instruction; a revocation costs a
/// heavy barrier (perf/journal/2026-11-25.md, sixth round).
pub(crate) const BIAS_AFTER: u32 = if cfg!(depengine_loom) { 1 } else { 1024 };

/// Each revocation doubles the takes in a row needed, up to this many:
/// pushes from several threads at once stop paying for revocations.
pub(crate) const BIAS_AFTER_MAX: u32 = BIAS_AFTER << 6;

// ----- workers: spinning, napping, parking (park.rs, pooled.rs) ------------

/// CPUs that a pool's workers must leave free to the threads that push
/// for every idle worker to be allowed to spin at once; a pool that
/// leaves fewer keeps the half rule (`park::max_spinners`: half the
/// workers, at least two), measured only with one pusher per spare CPU
/// or fewer. More spinners cost more CPU time while idle
/// (each at most the spin time before it parks); fewer cost a futex
/// wake-up, and on a virtual machine the halted CPU's wake, for each
/// burst of work that finds them parked. On the 16-CPU machine with 15
/// workers, per_device `random` W=0 parked a worker 54,886 times in one
/// run (193,371 wake-ups) under the half rule and 62 times under this one,
/// at 698 against 280 ns/op (perf/journal/2026-11-29-scale-out.md,
/// "Sixteen cores").
pub(crate) const CPUS_FOR_PUSHERS: usize = 1;

/// Operations in a row a spinner leaves to the waiters that take them
/// before it naps: waiting for the spin to run out instead almost never
/// naps when round trips are slow (perf/journal/2026-11-25.md, seventh
/// round).
pub(crate) const LEAVES_BEFORE_NAP: u32 = 4;

/// Polls between two looks at the clock while spinning.
pub(crate) const SPIN_POLLS: u32 = if cfg!(depengine_loom) { 1 } else { 64 };

/// How long a spinner leaves work to the thread that pushed it, which may
/// be about to wait for it and run it itself: longer delays a lone push
/// that nobody waits for; shorter sends a round trip across cores
/// (perf/journal/2026-11-24.md, seventh round).
pub(crate) const WAITER_GRACE: Duration = Duration::from_nanos(300);

/// The longest a spinner naps while a thread runs its own round trips: how
/// long an operation marked for a waiter that did not wait may sit idle.
pub(crate) const NAP_LIMIT: Duration = Duration::from_millis(1);

/// Spins in a row of a pooled worker that find their work gone before it
/// naps, as after a spin that left its work to waiters.
pub(crate) const MISSES_BEFORE_NAP: u32 = 16;

/// Spin iterations a waiting thread tries (helping or pausing) before it
/// sleeps: longer burns a core, shorter pays a futex round trip on short
/// waits.
pub(crate) const WAIT_SPINS: u32 = if cfg!(depengine_loom) { 1 } else { 2_000 };

/// Operations a worker retires before publishing them to the pools (one
/// locked instruction a batch instead of one an operation).
pub(crate) const BATCH_LEN: u32 = 32;

// ----- per_device (executor/per_device.rs) ----------------------------------

/// Operations a worker keeps in its own deque (crossbeam's initial
/// capacity, so the deque never reallocates); beyond, they go to the
/// node's injector where other workers see them first.
pub(crate) const LOCAL_CAPACITY: usize = 64;

/// Holds at the pending cap in a row on one CPU after which a pusher
/// counts as moved there: one is noise, more follows a moved pusher late
/// (perf/journal/2026-11-27.md, "a pusher that moved is followed").
pub(crate) const PUSHER_MOVED_HOLDS: u32 = 2;

/// Ready operations a per_device node's injector, or pooled's ring, holds before
/// pushers run the overflow inline: a memory bound, far above the cap.
pub(crate) const READY_CAPACITY: usize = if cfg!(depengine_loom) { 4 } else { 1 << 14 };

// ----- operation blocks (graph/opr.rs) -------------------------------------

/// Variables stored inline per operation; more spill to a `Vec` that the
/// pooled block keeps (so a block allocates at most once in its life).
/// More inline variables make every block (and its lines) bigger.
pub const INLINE_VARS: usize = 6;

// ----- pools (pool.rs, sweep.rs) --------------------------------------------

/// How many places down a given-back chain a value's prefetch hint points:
/// two measured best of 2, 4 and 8; further ahead, more lines travel that
/// a run of grants still wants (perf/journal/2026-11-24.md, first round).
pub(crate) const HINT_AHEAD: usize = 2;

/// The threaded engines' variable-block pools grow to this many blocks
/// before they sweep (the round a given-back block waits before it is taken
/// again): the first eight pool segments exactly. Measured against 4,096
/// and 65,536 (perf/journal/2026-11-25.md, first round).
pub(crate) const SWEEP_ROUND: u32 = 64 * ((1 << 8) - 1);
