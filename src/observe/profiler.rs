//! The profiler's recording side: timestamps on the operation
//! block, and per-thread ring buffers of finished operations.
//!
//! # Off: one branch
//!
//! A push reads [`Profiler::session`] once (a relaxed load of a word nobody
//! writes while profiling stays off) and stores it in the operation's
//! `Meta`. Every later hook tests that field of the block it already owns,
//! so an engine that never profiles pays one predictable branch per hook
//! and touches no extra cache line.
//!
//! # On: no allocation, no lock
//!
//! Starting a session allocates the lanes once (one ring per worker thread
//! plus [`OTHER_LANES`] shared by the other threads: pushers running
//! operations inline, waiters helping, completing threads) and keeps them
//! for the engine's life. A profiled operation carries its timestamps in
//! [`ProfStamps`](crate::graph::stamps::ProfStamps) on its block: pushed, ready (every variable granted),
//! started, body returned, ended (completed), the ticket of the operation
//! whose completion made it ready, and the lane of the thread that ran it.
//! When the block is given back, its record is copied into the lane of the
//! thread giving it back (a worker owns its lane, so its writes never
//! contend).
//!
//! A lane is a ring: when full it overwrites its oldest records, and the
//! profile reports how many were lost. Each slot is a seqlock: the writer
//! marks it odd, writes the words, then stores the even sequence number
//! that names its position; a reader keeps a record only if it saw that
//! number both before and after reading it. Records are plain atomic words,
//! so a torn read is detected, never undefined behaviour.
//!
//! # Sessions
//!
//! Each `start` opens a new session number. An operation pushed in one
//! session and finished after `stop` (or after the next `start`) is
//! dropped rather than attributed to the wrong run.

use crate::base::context::{Context, FnProperty};
use crate::graph::opr::{Meta, OprBlock};
use crate::observe::profile::{Profile, ProfileEvent};
use std::cell::Cell;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::OnceLock;
use std::time::Instant;

/// Lanes shared by threads that are not the engine's workers.
pub(crate) const OTHER_LANES: usize = 4;

/// Default records per lane (a power of two): 32,768 × 96 bytes = 3 MiB.
pub(crate) const DEFAULT_LANE_EVENTS: usize = 1 << 15;

/// Words of one record (see [`Record`]).
const WORDS: usize = 11;

/// `lane_flags`: the operation failed (or was skipped).
pub(crate) const FAILED: u32 = 1 << 16;

/// One finished operation, as words: see [`Record::pack`].
struct Record([u64; WORDS]);

/// One ring slot: a seqlock around a record.
struct Slot {
    seq: AtomicU64,
    words: [AtomicU64; WORDS],
}

/// One thread's (or a few threads') ring of records.
struct Lane {
    /// Records ever claimed in this lane.
    cursor: crossbeam_utils::CachePadded<AtomicU64>,
    /// `cursor` when the current session started.
    session_start: AtomicU64,
    slots: Box<[Slot]>,
}

crate::sync::thread_local! {
    /// The lane this thread writes for one profiler: (its `id`, lane); id 0
    /// is no profiler.
    static LANE: Cell<(u64, usize)> = const { Cell::new((0, 0)) };
}

/// The next profiler's `id`.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// An engine's profiler (see the module docs).
pub(crate) struct Profiler {
    /// Names this profiler in the threads' `LANE`: unique in the process,
    /// where an address is not (an engine dropped and another built may
    /// put their profilers at the same place, and a thread would then
    /// write into the lane it had in the first, a worker's of the second).
    id: u64,
    /// The current session (0: off).
    session: AtomicU32,
    last_session: AtomicU32,
    lanes: OnceLock<Box<[Lane]>>,
    lane_events: usize,
    worker_lanes: usize,
    next_other: AtomicUsize,
    clock: Clock,
}

/// Profiling timestamps: the CPU's time-stamp counter on x86-64 (about
/// 10 ns to read here, against about 30 for `Instant::now`, and an
/// operation takes five), converted to nanoseconds when a profile is
/// collected by the rate measured against `Instant` since the engine
/// started. Elsewhere, `Instant` itself.
struct Clock {
    origin: Instant,
    ticks0: u64,
}

impl Clock {
    fn new() -> Self {
        Clock { origin: Instant::now(), ticks0: Self::counter() }
    }

    #[inline(always)]
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    fn counter() -> u64 {
        // SAFETY: `rdtsc` exists on every x86-64 CPU and only reads the
        // time-stamp counter.
        #[allow(unused_unsafe)]
        unsafe {
            std::arch::x86_64::_rdtsc()
        }
    }

    #[inline(always)]
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    fn counter() -> u64 {
        0
    }

    /// A timestamp in ticks.
    #[inline(always)]
    fn ticks(&self) -> u64 {
        if cfg!(target_arch = "x86_64") {
            Self::counter()
        } else {
            self.origin.elapsed().as_nanos() as u64
        }
    }

    /// Nanoseconds per tick, measured over the engine's life so far.
    fn ns_per_tick(&self) -> f64 {
        if !cfg!(target_arch = "x86_64") {
            return 1.0;
        }
        let ns = self.origin.elapsed().as_nanos() as f64;
        let ticks = Self::counter().saturating_sub(self.ticks0) as f64;
        if ticks > 0.0 {
            ns / ticks
        } else {
            1.0
        }
    }

    /// Ticks to nanoseconds since the engine started (0 stays 0: unset).
    fn to_ns(&self, ticks: u64, ns_per_tick: f64) -> u64 {
        if ticks == 0 {
            return 0;
        }
        let since = if cfg!(target_arch = "x86_64") { ticks.saturating_sub(self.ticks0) } else { ticks };
        (since as f64 * ns_per_tick) as u64
    }
}

impl Profiler {
    /// A profiler for an executor with `worker_lanes` worker threads,
    /// keeping up to `lane_events` records per lane once started.
    pub(crate) fn new(worker_lanes: usize, lane_events: usize) -> Self {
        Profiler {
            id: NEXT_ID.fetch_add(1, Relaxed),
            session: AtomicU32::new(0),
            last_session: AtomicU32::new(0),
            lanes: OnceLock::new(),
            lane_events: lane_events.max(2).next_power_of_two(),
            worker_lanes,
            next_other: AtomicUsize::new(0),
            clock: Clock::new(),
        }
    }

    /// The current session, 0 when off: the one load a push pays.
    #[inline(always)]
    pub(crate) fn session(&self) -> u32 {
        self.session.load(Relaxed)
    }

    /// Nanoseconds since the profiler was made.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        self.clock.origin.elapsed().as_nanos() as u64
    }

    /// A profiling timestamp (ticks; see [`Clock`]).
    #[inline(always)]
    pub(crate) fn ticks(&self) -> u64 {
        self.clock.ticks()
    }

    /// Opens a new session (allocating the lanes the first time).
    pub(crate) fn start(&self) {
        let lanes = self.lanes.get_or_init(|| {
            (0..self.worker_lanes + OTHER_LANES)
                .map(|_| Lane {
                    cursor: Default::default(),
                    session_start: AtomicU64::new(0),
                    slots: (0..self.lane_events)
                        .map(|_| Slot { seq: AtomicU64::new(0), words: Default::default() })
                        .collect(),
                })
                .collect()
        });
        for lane in lanes.iter() {
            lane.session_start.store(lane.cursor.load(Acquire), Relaxed);
        }
        let session = self.last_session.fetch_add(1, Relaxed).wrapping_add(1).max(1);
        self.session.store(session, Release);
    }

    /// Closes the session and collects what its lanes hold.
    pub(crate) fn stop(&self, lane_name: impl Fn(usize) -> String) -> Profile {
        let session = self.session.swap(0, AcqRel);
        let mut profile = Profile::default();
        let Some(lanes) = self.lanes.get() else { return profile };
        profile.lanes = (0..lanes.len()).map(&lane_name).collect();
        if session == 0 {
            return profile;
        }
        let ns_per_tick = self.clock.ns_per_tick();
        let to_ns = |t| self.clock.to_ns(t, ns_per_tick);
        for lane in lanes.iter() {
            let end = lane.cursor.load(Acquire);
            let begin = lane.session_start.load(Relaxed).max(end.saturating_sub(self.lane_events as u64));
            profile.dropped += begin - lane.session_start.load(Relaxed);
            for n in begin..end {
                match lane.read(n, self.lane_events) {
                    Some(r) if r.session() == session => profile.events.push(r.unpack(&to_ns)),
                    Some(_) => {}
                    None => profile.dropped += 1,
                }
            }
        }
        profile.events.sort_by_key(|e| (e.start_ns, e.ticket));
        profile
    }

    /// The lane of the calling thread: its worker id on a worker, else one
    /// of the shared lanes (claimed once per thread and profiler).
    #[inline]
    pub(crate) fn lane(&self, worker: Option<usize>) -> usize {
        if let Some(w) = worker.filter(|&w| w < self.worker_lanes) {
            return w;
        }
        LANE.with(|l| {
            let (owner, lane) = l.get();
            if owner == self.id {
                return lane;
            }
            let lane = self.worker_lanes + self.next_other.fetch_add(1, Relaxed) % OTHER_LANES;
            l.set((self.id, lane));
            lane
        })
    }

    /// Makes worker `id`'s thread write its records to lane `id`.
    pub(crate) fn bind_worker(&self, id: usize) {
        LANE.with(|l| l.set((self.id, id)));
    }

    /// Copies a finished operation's record into the calling thread's
    /// lane, if its session is still the current one.
    pub(crate) fn record(&self, session: u32, event: &ProfileEvent) {
        if self.session.load(Relaxed) != session {
            return;
        }
        let Some(lanes) = self.lanes.get() else { return };
        lanes[self.lane(None)].write(&Record::pack(session, event), self.lane_events);
    }
}

impl Lane {
    fn write(&self, record: &Record, size: usize) {
        let n = self.cursor.fetch_add(1, Relaxed);
        let slot = &self.slots[n as usize & (size - 1)];
        slot.seq.store(2 * n + 1, Relaxed);
        fence(Release);
        for (word, value) in slot.words.iter().zip(record.0) {
            word.store(value, Relaxed);
        }
        slot.seq.store(2 * n + 2, Release);
    }

    /// Record `n`, if it is still in the ring and was not being rewritten.
    fn read(&self, n: u64, size: usize) -> Option<Record> {
        let slot = &self.slots[n as usize & (size - 1)];
        if slot.seq.load(Acquire) != 2 * n + 2 {
            return None;
        }
        let mut words = [0u64; WORDS];
        for (w, word) in words.iter_mut().zip(&slot.words) {
            *w = word.load(Relaxed);
        }
        fence(Acquire);
        (slot.seq.load(Relaxed) == 2 * n + 2).then_some(Record(words))
    }
}

impl Record {
    /// Layout: name pointer, name length, ticket, pushed, ready, start,
    /// body end, end, made-ready-by (ticket + 1), priority and session,
    /// and one packed word: context id (32) | lane (16) | property (8) |
    /// GPU (1) | async (1) | failed (1).
    fn pack(session: u32, e: &ProfileEvent) -> Record {
        let (gpu, id) = match e.ctx {
            Context::Cpu(id) => (0, id),
            Context::Gpu(id) => (1, id),
        };
        let packed = (id as u64) << 32
            | (e.lane as u64 & 0xFFFF) << 16
            | (e.prop as u64) << 8
            | gpu << 2
            | (e.is_async as u64) << 1
            | e.failed as u64;
        Record([
            e.name.as_ptr() as u64,
            e.name.len() as u64,
            e.ticket,
            e.pushed_ns,
            e.ready_ns,
            e.start_ns,
            e.body_end_ns,
            e.end_ns,
            e.made_ready_by.map_or(0, |t| t + 1),
            (e.priority as u32 as u64) << 32 | session as u64,
            packed,
        ])
    }

    fn session(&self) -> u32 {
        self.0[9] as u32
    }

    /// The event, its times converted from ticks by `to_ns`.
    fn unpack(&self, to_ns: &impl Fn(u64) -> u64) -> ProfileEvent {
        let w = &self.0;
        // SAFETY: words 0 and 1 were taken from a `&'static str` by `pack`,
        // and the seqlock check in `Lane::read` guarantees both come from
        // the same record.
        let name = unsafe {
            std::str::from_utf8_unchecked(std::slice::from_raw_parts(w[0] as usize as *const u8, w[1] as usize))
        };
        let packed = w[10];
        let id = (packed >> 32) as u32;
        ProfileEvent {
            name,
            ticket: w[2],
            pushed_ns: to_ns(w[3]),
            ready_ns: to_ns(w[4]),
            start_ns: to_ns(w[5]),
            body_end_ns: to_ns(w[6]),
            end_ns: to_ns(w[7]),
            made_ready_by: w[8].checked_sub(1),
            priority: (w[9] >> 32) as u32 as i32,
            ctx: if packed & 4 != 0 { Context::Gpu(id) } else { Context::Cpu(id) },
            lane: ((packed >> 16) & 0xFFFF) as usize,
            prop: FnProperty::from_u8((packed >> 8) as u8),
            is_async: packed & 2 != 0,
            failed: packed & 1 != 0,
        }
    }
}

/// The hooks the operation's life calls when its `Meta::profile_session`
/// is set (each caller owns the block at that point).
impl Profiler {
    /// At push: clears the stamps a previous use of the block left.
    #[cold]
    #[inline(never)]
    pub(crate) fn stamp_push(&self, block: &OprBlock) {
        let p = &block.prof;
        p.pushed.store(self.ticks(), Relaxed);
        for stamp in [&p.ready, &p.start, &p.body_end, &p.end, &p.made_ready_by] {
            stamp.store(0, Relaxed);
        }
        p.lane_flags.store(0, Relaxed);
    }

    /// Every variable granted the operation.
    #[cold]
    #[inline(never)]
    pub(crate) fn stamp_ready(&self, block: &OprBlock) {
        block.prof.ready.store(self.ticks(), Relaxed);
    }

    /// The completion of the operation with ticket `by` made this one ready.
    #[cold]
    #[inline(never)]
    pub(crate) fn stamp_made_ready_by(&self, block: &OprBlock, by: u64) {
        block.prof.made_ready_by.store(by + 1, Relaxed);
    }

    /// Before the body runs (or is skipped), on the running thread.
    #[cold]
    #[inline(never)]
    pub(crate) fn stamp_start(&self, block: &OprBlock, worker: Option<usize>) {
        block.prof.lane_flags.fetch_or(self.lane(worker) as u32, Relaxed);
        block.prof.start.store(self.ticks(), Relaxed);
    }

    /// The body returned.
    #[cold]
    #[inline(never)]
    pub(crate) fn stamp_body_end(&self, block: &OprBlock) {
        block.prof.body_end.store(self.ticks(), Relaxed);
    }

    /// The operation completed (before it releases its variables, so that
    /// whatever it makes ready starts after this).
    #[cold]
    #[inline(never)]
    pub(crate) fn stamp_end(&self, block: &OprBlock, failed: bool) {
        if failed {
            block.prof.lane_flags.fetch_or(FAILED, Relaxed);
        }
        block.prof.end.store(self.ticks(), Relaxed);
    }

    /// The block is being given back: records the operation.
    #[cold]
    #[inline(never)]
    pub(crate) fn record_finished(&self, block: &OprBlock, meta: &Meta) {
        // Times stay in ticks until the profile is collected (`stop`).
        let p = &block.prof;
        let lane_flags = p.lane_flags.load(Relaxed);
        let (start, end) = (p.start.load(Relaxed), p.end.load(Relaxed));
        // A rejected operation never started: it took no time.
        let start = if start == 0 { end } else { start };
        // Synchronous bodies are stamped once, at completion.
        let body_end = match p.body_end.load(Relaxed) {
            0 => end,
            t => t,
        };
        let event = ProfileEvent {
            name: meta.opts.name,
            ticket: meta.ticket,
            ctx: meta.opts.ctx,
            prop: meta.opts.prop,
            priority: meta.opts.priority,
            lane: (lane_flags & 0xFFFF) as usize,
            pushed_ns: p.pushed.load(Relaxed),
            ready_ns: p.ready.load(Relaxed),
            start_ns: start,
            body_end_ns: body_end,
            end_ns: end,
            made_ready_by: p.made_ready_by.load(Relaxed).checked_sub(1),
            is_async: meta.is_async,
            failed: lane_flags & FAILED != 0,
        };
        self.record(meta.profile_session, &event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profiler made where a dropped one lived does not inherit the lane
    /// the calling thread had in it: that lane may be a worker's now.
    #[test]
    fn a_thread_takes_a_shared_lane_of_each_new_profiler() {
        let mut profiler = Profiler::new(0, 2);
        assert_eq!(profiler.lane(None), 0, "the first shared lane of a profiler with no workers");
        // Same address, two workers: lanes 0 and 1 are theirs.
        profiler = Profiler::new(2, 2);
        let lane = profiler.lane(None);
        assert!((2..2 + OTHER_LANES).contains(&lane), "a non-worker thread got lane {lane}");
        assert_eq!(profiler.lane(Some(1)), 1);
    }
}
