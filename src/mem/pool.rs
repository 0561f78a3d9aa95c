//! Object pools: index-addressed slabs with a lock-free free list.
//!
//! Every engine record (operation blocks, variable blocks, variable slots)
//! lives in a [`Pool`]. A pool hands out `u32` indices; the memory behind an
//! index is never returned to the allocator while the pool lives, so a stale
//! index always points at a valid (if reused) object. Blocks are typically
//! taken on a pushing thread and given back on a worker, so the free list is
//! shared by all threads.
//!
//! # Layout
//!
//! Slots live in segments of doubling size: segment `k` holds
//! `SEGMENT_BASE << k` slots, so index `i` maps to its segment with one
//! `ilog2`. Segments are allocated on demand (warm-up) and only freed when
//! the pool is dropped. Besides each segment's address the pool keeps its
//! *origin*: where index 0 would lie if the segment reached down to it, so
//! that the slot of index `i` is `origins[segment] + i`, with no offset to
//! compute (a look-up is on every step of an operation's life).
//!
//! The first segments, up to [`FLAT_BYTES`] of slots, lie back to back in
//! one address-space [`Reservation`] taken when the pool is built and
//! committed a segment at a time as the pool grows (`reservation.rs`).
//! Their origins are all the reservation's base, so the slot of an index
//! below `flat_len` is that base plus the index: a compare with a field
//! instead of a shift, an `ilog2` and a load that depends on them, ahead of
//! every block's first load (perf/journal/2026-11-28.md, "pool slots at
//! the base plus the index": 0.93–0.98 of
//! the W = 0 times on the rows with variables). Indices past them, a pool
//! whose reservation the kernel refused, and loom builds use the heap
//! segments alone; a flat segment is claimed (its `segments` word, null to
//! its address) before it is filled, as a heap one is installed.
//!
//! # The free list
//!
//! A Treiber stack threaded through a link word that each pooled type
//! keeps itself ([`Pooled::free_link`]), so that the link can sit in a
//! cache line the value's users touch anyway: an operation block's free
//! link is its first line, which the pusher that takes it and the worker
//! that gives it back write in any case. (A link of the pool's own, next
//! to the value, was a line of its own, crossing cores twice per
//! operation.) The head is
//! one `AtomicU64` packing `(tag << 32) | index`; the tag is bumped on every
//! successful change so that a pop racing with a pop-push-pop of the same
//! index fails its CAS instead of installing a stale `next` (the ABA problem).
//!
//! # Prefetching
//!
//! A block given back on a worker sits modified in that worker's cache, so
//! the pusher's first touch of it waits for each of its lines to cross
//! cores. A pool built [`prefetching`](Pool::prefetching) (the threaded
//! engines' operation and variable-block pools) issues `prefetchw` for the
//! value that becomes the head of its free list on every take, so those
//! lines travel while the pusher is still busy with the current operation.
//! It is a hint: which index a take hands out never depends on it (a test
//! checks). Measured in perf/journal/2026-11-23.md ("fourth round"): pair ratios of 0.70–1.00
//! on the threaded engines at W = 0, `chains64` gaining most.
//!
//! One place ahead is not far: the next index is known only once the
//! current value's line has arrived, and a pusher takes the next block
//! about one operation later, less than a line's trip between cores on
//! the hosts measured. So a [`GiveBatch`] also writes into each value it
//! adds, in a word of the link's line that is free while the value is
//! ([`Pooled::ahead_hint`]), the index [`HINT_AHEAD`] places further down
//! the chain it builds (the one it added that many adds before), and a
//! take prefetches that one too: a chain given back by a worker is then
//! fetched two operations ahead (perf/journal/2026-11-24.md, "Changes of 2026-11-24": `chain`
//! 0.82 on per_device, `nodeps` 0.36 on pooled). A value given back alone
//! has no hint (`NIL`). A [`TakeCache`] prefetches the same way.
//!
//! # Caches for takers
//!
//! A taker that takes one index per operation can hold the free list
//! privately: a [`TakeCache`] detaches the whole list with one CAS when it
//! runs dry, so the shared head, onto which the giving threads swap their
//! batches, is touched once per refill instead of once per take. For operation
//! blocks, each pushing thread has one of its own through
//! [`ThreadCaches`] (per [thread slot](crate::mem::thread_slot)), taken from
//! with no locked instruction; threads without a slot share one
//! [`SharedTakeCache`], which a taker that finds it in use simply
//! bypasses.
//!
//! # Invariants
//!
//! - An index is owned by exactly one party between [`Pool::take`] and
//!   [`Pool::give`]; the pool never hands out an owned index.
//! - Values are reused as they were left: the taker resets what it needs.
//!
//! # Memory ordering
//!
//! `give` publishes with `Release` and `take` acquires, so everything the last
//! owner wrote happens-before everything the next owner does.

use crate::base::tuning::HINT_AHEAD;
use crate::mem::reservation::Reservation;
use crate::mem::sweep::SweepSet;
use crate::sync::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering, UnsafeCell};
use crossbeam_utils::CachePadded;
use std::ptr;

/// The "no index" value used by every intrusive link in the engine.
pub(crate) const NIL: u32 = u32::MAX;

/// The first index no pool hands out: `NIL` and the marker below it
/// (`core::UNQUEUED`) are never slots.
const INDEX_LIMIT: u32 = NIL - 1;

/// Slots in segment 0. Small under loom so that models stay small.
pub(crate) const SEGMENT_BASE: u32 = if cfg!(depengine_loom) { 2 } else { 64 };

/// Segments `0..SEGMENTS` cover more than `u32::MAX - 1` indices at base 64.
pub(crate) const SEGMENTS: usize = if cfg!(depengine_loom) { 8 } else { 26 };

/// A value a [`Pool`] can hold.
pub(crate) trait Pooled: Default {
    /// The word the free list threads through while the value is free. It
    /// may be read by a racing `take` while the value is owned again (the
    /// free list's tag then fails that take's CAS), so it must be a word
    /// that owners also access atomically, or one they leave alone.
    fn free_link(&self) -> &AtomicU32;

    /// Cache lines of the value that [`Pool::prefetch`] brings in for
    /// writing: on a take, for the next free one; elsewhere, wherever the
    /// pool's user is about to touch a value another core wrote (0: none).
    const PREFETCH_LINES: usize = 0;

    /// A word free while the value is free, in the line that holds
    /// [`free_link`](Self::free_link), where a [`GiveBatch`] records the
    /// index [`HINT_AHEAD`] places further down the chain it builds, so
    /// that a [`take`](Pool::take) can prefetch that far ahead (the free
    /// chain itself only tells the next one). `None`: no hint.
    fn ahead_hint(&self) -> Option<&AtomicU32> {
        None
    }
}

/// A pooled value for the pool's own tests and benchmarks: a tag the
/// owner writes, and the free link.
#[cfg(any(test, feature = "bench-internals"))]
#[derive(Default)]
pub(crate) struct Tagged {
    #[cfg_attr(not(test), allow(dead_code))] // the benchmarks only take and give
    pub(crate) tag: AtomicU32,
    link: AtomicU32,
    hint: AtomicU32,
}

#[cfg(any(test, feature = "bench-internals"))]
impl Pooled for Tagged {
    fn free_link(&self) -> &AtomicU32 {
        &self.link
    }

    const PREFETCH_LINES: usize = 1;

    fn ahead_hint(&self) -> Option<&AtomicU32> {
        Some(&self.hint)
    }
}

struct Slot<T> {
    /// Debug builds: whether the index is handed out (double take/give check).
    #[cfg(debug_assertions)]
    owned: std::sync::atomic::AtomicBool,
    value: T,
}

/// The bytes one slot of a `Pool<T>` takes (its value and its free link),
/// for the layout tests of the values' own modules.
#[cfg(all(test, not(debug_assertions)))]
pub(crate) const fn slot_bytes<T>() -> usize {
    std::mem::size_of::<Slot<T>>()
}

impl<T: Pooled> Slot<T> {
    /// A slot of a segment just allocated: a default value, not handed out.
    fn fresh() -> Self {
        Slot {
            #[cfg(debug_assertions)]
            owned: std::sync::atomic::AtomicBool::new(false),
            value: T::default(),
        }
    }

    #[inline(always)]
    fn next_free(&self) -> &AtomicU32 {
        self.value.free_link()
    }

    #[inline(always)]
    fn set_owned(&self, _index: u32, _owned: bool) {
        #[cfg(debug_assertions)]
        assert_eq!(
            self.owned.swap(_owned, std::sync::atomic::Ordering::SeqCst),
            !_owned,
            "pool index {_index} {} twice",
            if _owned { "handed out" } else { "given back" }
        );
    }
}

/// A lock-free pool of `T` addressed by `u32` indices.
pub(crate) struct Pool<T> {
    free: CachePadded<AtomicU64>,
    fresh: CachePadded<AtomicU32>,
    segments: [AtomicPtr<Slot<T>>; SEGMENTS],
    /// `segments[k]` minus the index of its first slot (`segment_start`),
    /// computed with wrapping arithmetic: only ever offset back into the
    /// segment by an index of that segment. Null while the segment is.
    origins: [AtomicPtr<Slot<T>>; SEGMENTS],
    /// Whether a take prefetches the next free value ([`Pool::prefetching`]).
    prefetch: bool,
    /// Free indices waiting to be swept (`sweep.rs`; variable blocks).
    swept: SweepSet,
    /// Pool size below which a sweep takes fresh indices instead (`sweep.rs`).
    sweep_from: u32,
    /// Where segments `0..flat_segments` lie back to back (no reservation
    /// under loom, or where the kernel refused one: every segment is then
    /// a heap allocation of its own).
    flat: Option<Reservation>,
    /// `flat`'s base as slots: every flat segment's origin. Null without one.
    flat_origin: *mut Slot<T>,
    /// The indices of the flat segments, `0..flat_len` (0 without them).
    flat_len: u32,
    flat_segments: usize,
}

// SAFETY: the pool hands out shared references to `T` on any thread, so `T`
// must be `Sync`; values move between threads through take/give, so `Send`.
unsafe impl<T: Send + Sync> Sync for Pool<T> {}
// SAFETY: as above; the pool owns its segments.
unsafe impl<T: Send + Sync> Send for Pool<T> {}

/// The segment that holds `index`.
#[inline(always)]
pub(crate) fn segment_of(index: u32) -> usize {
    (index / SEGMENT_BASE + 1).ilog2() as usize
}

/// The index of segment `seg`'s first slot.
#[inline(always)]
pub(crate) fn segment_start(seg: usize) -> u32 {
    SEGMENT_BASE * ((1u32 << seg) - 1)
}

#[inline(always)]
pub(crate) fn segment_len(seg: usize) -> usize {
    (SEGMENT_BASE as usize) << seg
}

/// The span of memory within which two cores' writes slow each other down:
/// a cache line, or on x86-64 the pair of lines that the adjacent-line
/// prefetcher fetches together (the alignment of crossbeam's
/// `CachePadded`, 128 bytes there). [`Pool::take_fresh_group`] hands out
/// indices a span at a time.
pub(crate) const GROUP_BYTES: usize = std::mem::align_of::<CachePadded<u8>>();

/// The address space a pool reserves for its flat segments, at most:
/// half a million operation blocks (448 bytes each) or two million
/// variables, far past what an engine holds at its default pending cap,
/// while an engine's five pools take 1.25 GiB of the 128 TiB of address
/// space a 64-bit process has.
const FLAT_BYTES: usize = 256 << 20;

impl<T: Pooled> Pool<T> {
    pub(crate) fn new() -> Self {
        Self::with_flat_bytes(FLAT_BYTES)
    }

    /// A pool whose first segments lie back to back in a reservation of at
    /// most `flat_bytes` (the most whole segments that fit; none under
    /// loom, whose models explore the heap segments' race, nor on 32-bit
    /// targets).
    fn with_flat_bytes(flat_bytes: usize) -> Self {
        let slot = std::mem::size_of::<Slot<T>>().max(1);
        let fit = (0..=SEGMENTS).take_while(|&k| segment_start(k) as usize * slot <= flat_bytes).last();
        // A 32-bit process has too little address space to set aside.
        let reserves = !cfg!(depengine_loom) && cfg!(target_pointer_width = "64");
        let flat_segments = if reserves { fit.unwrap_or(0) } else { 0 };
        let flat =
            if flat_segments > 0 { Reservation::new(segment_start(flat_segments) as usize * slot) } else { None };
        let (flat_origin, flat_len, flat_segments) = match &flat {
            Some(r) => (r.base().cast::<Slot<T>>(), segment_start(flat_segments), flat_segments),
            None => (ptr::null_mut(), 0, 0),
        };
        Pool {
            flat,
            flat_origin,
            flat_len,
            flat_segments,
            free: CachePadded::new(AtomicU64::new(NIL as u64)),
            fresh: CachePadded::new(AtomicU32::new(0)),
            segments: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            origins: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            prefetch: false,
            swept: SweepSet::default(),
            sweep_from: 0,
        }
    }

    /// Makes a [`SweepCache`](crate::mem::sweep::SweepCache) take fresh indices
    /// until the pool holds `n`, so that a swept index comes back only
    /// after a round of at least `n` (`sweep.rs`), and allocates those `n`
    /// now, with their sweep bits: growing to them later would allocate
    /// on the path of a push long after warm-up.
    pub(crate) fn sweeping_from(mut self, n: u32) -> Self {
        self.sweep_from = n;
        if n > 0 {
            for seg in 0..=segment_of(n - 1) {
                self.ensure_segment(seg);
                self.swept.allocate(seg);
            }
        }
        self
    }

    /// The pool size from which a sweep claims ([`sweeping_from`](Self::sweeping_from)).
    #[inline(always)]
    pub(crate) fn sweep_from(&self) -> u32 {
        self.sweep_from
    }

    /// The free indices that wait for a [`SweepCache`](crate::mem::sweep::SweepCache)
    /// (`sweep.rs`), apart from the free list.
    #[inline(always)]
    pub(crate) fn swept(&self) -> &SweepSet {
        &self.swept
    }

    /// Debug builds: records that `index` is handed out (`true`) or free
    /// (`false`), panicking on a double take or give. For takers and givers
    /// other than the pool's own (`sweep.rs`).
    #[inline(always)]
    pub(crate) fn mark_owned(&self, index: u32, owned: bool) {
        self.slot(index).set_owned(index, owned);
    }

    /// Makes every take start bringing the value the next take will likely
    /// hand out (the new head of the free list) into the taker's cache for
    /// writing, [`Pooled::PREFETCH_LINES`] lines of it: for pools whose
    /// values are given back on other cores, so that the next take's first
    /// touch does not wait for the line to cross. Off, it costs one
    /// predictable branch per take (a one-thread engine, whose values are
    /// in its own cache already).
    pub(crate) fn prefetching(mut self, on: bool) -> Self {
        self.prefetch = on && T::PREFETCH_LINES > 0;
        self
    }

    /// A pool whose first segment is already allocated: for values whose
    /// first `take` may come on a path that must not allocate (a wait slot:
    /// a program may wait on a marker for the first time long after its
    /// warm-up, `tests/alloc.rs`).
    pub(crate) fn with_first_segment() -> Self {
        let pool = Self::new();
        pool.ensure_segment(0);
        pool
    }

    /// Takes an index: a freed one if any, else a never-used one (allocating
    /// a segment the first time one is reached).
    #[inline(always)]
    pub(crate) fn take(&self) -> u32 {
        let mut head = self.free.load(Ordering::Acquire);
        loop {
            let index = head as u32;
            if index == NIL {
                break;
            }
            // The slot may be taken and given back concurrently; then this
            // read is stale but the tag makes the CAS below fail.
            let next = self.slot(index).next_free().load(Ordering::Relaxed);
            let new = ((head >> 32).wrapping_add(1) << 32) | next as u64;
            match self.free.compare_exchange_weak(head, new, Ordering::Acquire, Ordering::Acquire) {
                Ok(_) => {
                    let slot = self.slot(index);
                    slot.set_owned(index, true);
                    self.prefetch(next);
                    self.prefetch_hinted(&slot.value);
                    return index;
                }
                Err(actual) => head = actual,
            }
        }
        self.take_fresh()
    }

    /// Takes an index from the free list; `NIL` when it is empty. (If it
    /// empties between the look and the take, a fresh index: any index
    /// is a valid answer.)
    #[inline]
    pub(crate) fn take_listed(&self) -> u32 {
        if self.free.load(Ordering::Acquire) as u32 == NIL {
            return NIL;
        }
        self.take()
    }

    /// Takes a never-used index (the free list was empty): warm-up only.
    #[cold]
    #[inline(never)]
    fn take_fresh(&self) -> u32 {
        let index = self.fresh.fetch_add(1, Ordering::Relaxed);
        let seg = segment_of(index);
        assert!(seg < SEGMENTS && index < INDEX_LIMIT, "depengine: object pool exhausted");
        self.ensure_segment(seg);
        self.slot(index).set_owned(index, true);
        index
    }

    /// How many consecutive indices make a group: the fewest whose slots
    /// fill whole [`GROUP_BYTES`] spans (8 variable blocks of 16 bytes; 32
    /// slots of 20 bytes in a debug build, 5 spans). 1 where that would be
    /// more than a sweep word's 64 indices, and under loom.
    pub(crate) const fn group_len() -> u32 {
        let slot = std::mem::size_of::<Slot<T>>();
        // gcd(slot, GROUP_BYTES): at least 1, as GROUP_BYTES is.
        let (mut a, mut b) = (GROUP_BYTES, slot);
        while b != 0 {
            (a, b) = (b, a % b);
        }
        let n = GROUP_BYTES / a;
        if cfg!(depengine_loom) || n > 64 {
            1
        } else {
            n as u32
        }
    }

    /// Takes [`group_len`](Self::group_len) never-used indices in a row,
    /// the first a multiple of it, and returns the first; none is handed
    /// out yet (the caller hands them out, marking each owned as it goes).
    /// Their values fill whole [`GROUP_BYTES`] spans, aligned where they lie
    /// in the flat reservation (page-aligned; a heap segment is only as
    /// aligned as its values): a taker that hands them all to one thread
    /// shares none of their lines with any other taker. The indices
    /// skipped to align the group go to the free list.
    #[cold]
    #[inline(never)]
    pub(crate) fn take_fresh_group(&self) -> u32 {
        let n = Self::group_len();
        let mut fresh = self.fresh.load(Ordering::Relaxed);
        let first = loop {
            let first = fresh.next_multiple_of(n);
            assert!(first <= INDEX_LIMIT - n, "depengine: object pool exhausted");
            match self.fresh.compare_exchange_weak(fresh, first + n, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break first,
                Err(now) => fresh = now,
            }
        };
        // A segment's length and start are multiples of the group's.
        debug_assert_eq!(segment_of(first), segment_of(first + n - 1));
        let seg = segment_of(first + n - 1);
        assert!(seg < SEGMENTS, "depengine: object pool exhausted");
        self.ensure_segment(seg);
        for skipped in fresh..first {
            self.ensure_segment(segment_of(skipped));
            self.slot(skipped).set_owned(skipped, true);
            self.give(skipped);
        }
        first
    }

    #[cold]
    fn ensure_segment(&self, seg: usize) {
        // The origin is what `slot` reads, so it is what says "ready".
        if !self.origins[seg].load(Ordering::Acquire).is_null() {
            return;
        }
        if seg < self.flat_segments {
            return self.ensure_flat_segment(seg);
        }
        let slots: Box<[Slot<T>]> = (0..segment_len(seg)).map(|_| Slot::fresh()).collect();
        let fresh = Box::into_raw(slots) as *mut Slot<T>;
        if self.segments[seg].compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            let origin = fresh.wrapping_sub(segment_start(seg) as usize);
            // A heap address equal to the segment's start offset; cannot
            // happen (user space starts far above), but would read as "no
            // segment".
            assert!(!origin.is_null(), "depengine: pool segment at an impossible address");
            self.origins[seg].store(origin, Ordering::Release);
            return;
        }
        // SAFETY: `fresh` came from `Box::into_raw` of a slice of this
        // length just above and was never published.
        drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(fresh, segment_len(seg))) });
        self.wait_for_origin(seg);
    }

    /// Another taker claimed segment `seg`: its origin follows at once (a
    /// heap segment is allocated before its claim, a flat one only filled
    /// after it), and the caller's index needs it.
    fn wait_for_origin(&self, seg: usize) {
        while self.origins[seg].load(Ordering::Acquire).is_null() {
            crate::sync::spin_hint();
        }
    }

    /// [`ensure_segment`](Self::ensure_segment) for a segment in the
    /// reservation: the first thread to claim it (`segments[seg]`, null to
    /// its address) commits and fills it, then publishes the origin.
    #[cold]
    fn ensure_flat_segment(&self, seg: usize) {
        let start = self.flat_origin.wrapping_add(segment_start(seg) as usize);
        if self.segments[seg].compare_exchange(ptr::null_mut(), start, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            let slot = std::mem::size_of::<Slot<T>>();
            let reservation = self.flat.as_ref().expect("flat segments lie in a reservation");
            reservation.commit(segment_start(seg) as usize * slot, segment_len(seg) * slot);
            for i in 0..segment_len(seg) {
                // SAFETY: slot `i` of segment `seg` lies inside the
                // reservation (`seg < flat_segments`), in pages just
                // committed; the claim above makes this thread the only one
                // to touch them until the origin is published below.
                unsafe { start.add(i).write(Slot::fresh()) };
            }
            self.origins[seg].store(self.flat_origin, Ordering::Release);
            return;
        }
        self.wait_for_origin(seg);
    }

    /// Detaches the whole free list with one CAS and returns its first index
    /// (`NIL` if it was empty). The chain, linked through `next_free`, is the
    /// caller's: see [`TakeCache`].
    fn take_all(&self) -> u32 {
        let mut head = self.free.load(Ordering::Acquire);
        loop {
            if head as u32 == NIL {
                return NIL;
            }
            // The tag still moves on, so a `take` that read the old head
            // fails its CAS instead of installing a link into our chain.
            let new = ((head >> 32).wrapping_add(1) << 32) | NIL as u64;
            match self.free.compare_exchange_weak(head, new, Ordering::Acquire, Ordering::Acquire) {
                Ok(_) => return head as u32,
                Err(actual) => head = actual,
            }
        }
    }

    /// Gives `index` back; the caller must own it and not use it afterwards.
    pub(crate) fn give(&self, index: u32) {
        self.release_slot(index);
        self.give_chain(index, index);
    }

    /// Gives `index` back onto a taker's private chain whose first index is
    /// `*head` (the inverse of [`take_cached`](Self::take_cached)), with no
    /// locked instruction; the caller must own `index` and the chain.
    fn give_cached(&self, index: u32, head: &mut u32) {
        self.release_slot(index);
        self.slot(index).next_free().store(*head, Ordering::Relaxed);
        *head = index;
    }

    /// What every give does to the slot itself: marks it free and clears
    /// its prefetch hint.
    #[inline(always)]
    fn release_slot(&self, index: u32) {
        let slot = self.slot(index);
        slot.set_owned(index, false);
        if let Some(hint) = slot.value.ahead_hint() {
            hint.store(NIL, Ordering::Relaxed);
        }
    }

    /// Pushes the chain `first → … → last` (linked through `next_free`)
    /// onto the free list with one CAS: one index, or a [`GiveBatch`].
    fn give_chain(&self, first: u32, last: u32) {
        let last_slot = self.slot(last);
        let mut head = self.free.load(Ordering::Relaxed);
        loop {
            last_slot.next_free().store(head as u32, Ordering::Relaxed);
            let new = ((head >> 32).wrapping_add(1) << 32) | first as u64;
            match self.free.compare_exchange_weak(head, new, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return,
                Err(actual) => head = actual,
            }
        }
    }

    /// Starts bringing the value at `index` (nothing for `NIL`) into this
    /// core's cache for writing, if the pool is [`prefetching`](Self::prefetching):
    /// a hint, with no effect on what any thread reads. Under loom the
    /// instruction is a no-op, so the look-up is skipped too: its atomic
    /// loads would only add states to the models.
    #[inline(always)]
    pub(crate) fn prefetch(&self, index: u32) {
        if self.prefetch && index != NIL && !cfg!(depengine_loom) {
            self.prefetch_value(self.get(index));
        }
    }

    /// [`prefetch`](Self::prefetch) of a value already looked up.
    #[inline(always)]
    pub(crate) fn prefetch_value(&self, value: &T) {
        if self.prefetch && !cfg!(depengine_loom) {
            crate::sync::prefetch_for_write(ptr::from_ref(value).cast(), T::PREFETCH_LINES);
        }
    }

    /// Prefetches the value that `value`'s [`ahead_hint`](Pooled::ahead_hint)
    /// names, if the pool is prefetching; `value` must be the caller's own
    /// (just taken: its hint was written before the give that the take
    /// acquired).
    #[inline(always)]
    fn prefetch_hinted(&self, value: &T) {
        if self.prefetch && !cfg!(depengine_loom) {
            if let Some(hint) = value.ahead_hint() {
                self.prefetch(hint.load(Ordering::Relaxed));
            }
        }
    }

    #[inline(always)]
    fn slot(&self, index: u32) -> &Slot<T> {
        if index < self.flat_len {
            // SAFETY: `take` ensured `index`'s segment before handing it
            // out, and a flat segment is ensured only once its slots are
            // written, in the reservation at `flat_origin + index`
            // (`ensure_flat_segment`); the reservation lives as long as
            // `self`.
            return unsafe { &*self.flat_origin.add(index as usize) };
        }
        let seg = segment_of(index);
        debug_assert!(seg < SEGMENTS, "index {index} outside every segment");
        // SAFETY: `index` was handed out by `take`, which asserted that its
        // segment is one of `SEGMENTS`.
        let origin = unsafe { self.origins.get_unchecked(seg) }.load(Ordering::Acquire);
        // Checked under loom too (its models run optimized), where a race
        // to allocate a segment is explored.
        if cfg!(any(debug_assertions, depengine_loom)) {
            assert!(!origin.is_null(), "index {index} in a segment never allocated");
        }
        // SAFETY: `take` published the segment's origin before handing out
        // `index`; segments are never freed while `self` lives; and the
        // origin plus an index of segment `seg` (`segment_start(seg) <=
        // index < segment_start(seg) + segment_len(seg)`) is a slot inside
        // that segment's allocation, whose provenance the origin carries.
        unsafe { &*origin.wrapping_add(index as usize) }
    }

    /// The value at `index`. Valid for any index ever handed out.
    #[inline(always)]
    pub(crate) fn get(&self, index: u32) -> &T {
        &self.slot(index).value
    }

    /// Indices handed out and not given back. Exact only when no thread is
    /// taking or giving concurrently (tests and shutdown checks).
    pub(crate) fn live(&self) -> usize {
        let free = self.chain_len(self.free.load(Ordering::Acquire) as u32) + self.swept.len();
        self.fresh.load(Ordering::Acquire) as usize - free
    }

    /// How many indices the free chain from `first` links (through
    /// `next_free`). Exact only when nobody changes the chain meanwhile.
    fn chain_len(&self, first: u32) -> usize {
        let (mut n, mut index) = (0, first);
        while index != NIL {
            n += 1;
            index = self.slot(index).next_free().load(Ordering::Relaxed);
        }
        n
    }

    /// Takes an index through a taker's private chain whose first index is
    /// `*head` ([`TakeCache`], [`ThreadCaches`]): its first one, after
    /// refilling an empty chain by detaching the free list, or a fresh
    /// index when that is empty too.
    #[inline(always)]
    fn take_cached(&self, head: &mut u32) -> u32 {
        if *head == NIL {
            *head = self.take_all();
            if *head == NIL {
                return self.take();
            }
        }
        let index = *head;
        let slot = self.slot(index);
        // The detached chain is the caller's alone: its links were written
        // before the gives that `take_all` acquired, and nobody gives them
        // again.
        *head = slot.next_free().load(Ordering::Relaxed);
        slot.set_owned(index, true);
        self.prefetch(*head);
        self.prefetch_hinted(&slot.value);
        index
    }

    /// Indices ever created (the pool's high-water mark).
    pub(crate) fn capacity_used(&self) -> usize {
        self.fresh.load(Ordering::Acquire) as usize
    }
}

/// Indices freed by one thread, chained through their `next_free` words and
/// given back to the pool in one CAS: a worker that frees a block per
/// operation then touches the shared free-list head once per batch instead
/// of once per operation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GiveBatch {
    first: u32,
    last: u32,
    len: u32,
    /// The last [`HINT_AHEAD`] indices added (by `len`, modulo): the
    /// chain's next ones down, for [`Pooled::ahead_hint`].
    recent: [u32; HINT_AHEAD],
}

impl Default for GiveBatch {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl GiveBatch {
    /// A batch with nothing in it.
    pub(crate) const EMPTY: GiveBatch = GiveBatch { first: NIL, last: NIL, len: 0, recent: [NIL; HINT_AHEAD] };

    /// Adds an owned index; returns the batch length.
    #[inline]
    pub(crate) fn add<T: Pooled>(&mut self, pool: &Pool<T>, index: u32) -> u32 {
        let slot = pool.slot(index);
        slot.set_owned(index, false);
        slot.next_free().store(self.first, Ordering::Relaxed);
        if let Some(hint) = slot.value.ahead_hint() {
            // Added HINT_AHEAD adds ago: that many places down the chain.
            let at = self.len as usize % HINT_AHEAD;
            hint.store(self.recent[at], Ordering::Relaxed);
            self.recent[at] = index;
        }
        if self.first == NIL {
            self.last = index;
        }
        self.first = index;
        self.len += 1;
        self.len
    }

    /// Gives every index of the batch back.
    pub(crate) fn flush<T: Pooled>(&mut self, pool: &Pool<T>) {
        if self.len > 0 {
            pool.give_chain(self.first, self.last);
            *self = GiveBatch::default();
        }
    }
}

/// Free indices held privately by one taker at a time (the caller
/// guarantees that: a thread slot's holder, or the holder of a
/// [`SharedTakeCache`]'s flag).
///
/// When it runs dry it detaches the pool's whole free list with one CAS, so
/// a thread that takes an index per operation touches the shared head once
/// per refill instead of once per take; giving threads batch their side
/// with [`GiveBatch`]. Indices held here count as live in [`Pool::live`]
/// until [`give_back`](Self::give_back).
#[derive(Debug)]
pub(crate) struct TakeCache {
    head: u32,
}

impl Default for TakeCache {
    fn default() -> Self {
        TakeCache { head: NIL }
    }
}

impl TakeCache {
    /// Takes an index: a cached one, else one of a refill from the free
    /// list, else a fresh one.
    #[inline]
    pub(crate) fn take<T: Pooled>(&mut self, pool: &Pool<T>) -> u32 {
        pool.take_cached(&mut self.head)
    }

    /// Gives every cached index back to the pool.
    pub(crate) fn give_back<T: Pooled>(&mut self, pool: &Pool<T>) {
        if self.head == NIL {
            return;
        }
        let mut last = self.head;
        loop {
            let next = pool.slot(last).next_free().load(Ordering::Relaxed);
            if next == NIL {
                break;
            }
            last = next;
        }
        pool.give_chain(self.head, last);
        self.head = NIL;
    }
}

/// A [`TakeCache`] that any thread may use, one at a time: a taker that
/// finds it in use takes from the pool instead, so nobody ever waits.
///
/// For operation blocks, which any pushing thread takes outside the
/// dispatcher. The flag is one more locked instruction per take, but on a
/// line only takers touch: the pool's head, which every worker's batch of
/// given-back blocks is swapped onto, is touched once per refill instead of
/// once per take (per_device `chain` W=0 0.81 in alternating pairs; perf/journal/2026-11-24.md,
/// "Changes of 2026-11-24, third round").
pub(crate) struct SharedTakeCache {
    busy: AtomicBool,
    cache: UnsafeCell<TakeCache>,
}

// SAFETY: the cache is touched only by the thread that set `busy` from
// false to true (an acquire CAS), until it clears it (a release store), so
// successive users are ordered and never overlap.
unsafe impl Sync for SharedTakeCache {}

impl Default for SharedTakeCache {
    fn default() -> Self {
        SharedTakeCache { busy: AtomicBool::new(false), cache: UnsafeCell::new(TakeCache::default()) }
    }
}

impl SharedTakeCache {
    /// Runs `f` on the cache if no other thread is using it; `None` if one is.
    #[inline(always)]
    fn try_with<R>(&self, f: impl FnOnce(&mut TakeCache) -> R) -> Option<R> {
        if self.busy.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return None;
        }
        // SAFETY: our CAS turned `busy` from false to true: the cache is
        // ours alone until the store below.
        let r = self.cache.with_mut(|c| f(unsafe { &mut *c }));
        self.busy.store(false, Ordering::Release);
        Some(r)
    }

    /// Takes an index through the cache, or from the pool while another
    /// thread is using the cache.
    #[inline(always)]
    pub(crate) fn take<T: Pooled>(&self, pool: &Pool<T>) -> u32 {
        self.try_with(|c| c.take(pool)).unwrap_or_else(|| pool.take())
    }

    /// Gives every cached index back to the pool, waiting for a taker that
    /// is using the cache (a few instructions) to finish.
    pub(crate) fn give_back<T: Pooled>(&self, pool: &Pool<T>) {
        while self.try_with(|c| c.give_back(pool)).is_none() {
            crate::sync::spin_hint();
        }
    }
}

/// A [`TakeCache`] per [thread slot](crate::mem::thread_slot), for indices
/// that any thread may take (operation blocks, taken by every pushing
/// thread).
///
/// The holder of slot `i` is the only thread that takes from cache `i`,
/// so a take needs no locked instruction (a [`SharedTakeCache`] needs two:
/// its flag's CAS and release); like a [`TakeCache`], a dry cache refills
/// by detaching the pool's whole free list with one CAS. A thread that
/// gives an index back keeps it only when its cache is empty
/// ([`keep_one`](Self::keep_one)): a thread that waits on the operation
/// it pushed and runs it itself then takes the same block for its next
/// push, with no locked instruction on either side. Everything else goes
/// to the pool: keeping more, or on every give by a non-worker, cost
/// `naive` `random` and `layered` 8–11 % and pooled `nodeps` up to 14 %
/// (perf/journal/tried.md, "Tried and not kept").
///
/// The head is an atomic only so that [`cached`](Self::cached) may count
/// from another thread; the holder reads and writes it relaxed. A slot
/// that changes hands carries its cache with it: the next holder starts
/// from what the last one left (the slot's claim acquires its release).
pub(crate) struct ThreadCaches {
    /// Each slot's chain, linked through the values' free links (`NIL`:
    /// empty).
    heads: Box<[CachePadded<AtomicU32>]>,
}

impl Default for ThreadCaches {
    fn default() -> Self {
        // Under loom no thread holds a slot: no caches to model.
        let slots = if cfg!(depengine_loom) { 0 } else { crate::mem::thread_slot::SLOTS };
        ThreadCaches { heads: (0..slots).map(|_| CachePadded::new(AtomicU32::new(NIL))).collect() }
    }
}

/// The free blocks of one pool that pushing threads take: each thread
/// slot's own ([`ThreadCaches`]), else the shared one ([`SharedTakeCache`],
/// on its own line).
#[derive(Default)]
pub(crate) struct PusherCaches {
    mine: ThreadCaches,
    shared: CachePadded<SharedTakeCache>,
}

impl PusherCaches {
    /// Takes a block for a push: through the slot cache of the calling
    /// thread (which holds slot `me`), else through the shared one.
    #[inline(always)]
    pub(crate) fn take<T: Pooled>(&self, pool: &Pool<T>, me: Option<usize>) -> u32 {
        self.mine.take(pool, me).unwrap_or_else(|| self.shared.take(pool))
    }

    /// Gives back the block of an operation that a waiting thread ran:
    /// into the thread's own slot cache when that is empty
    /// ([`ThreadCaches::keep_one`]: a push-then-wait round trip reuses one
    /// block, with no locked instruction), else to the pool.
    #[inline(always)]
    pub(crate) fn give_back_one<T: Pooled>(&self, pool: &Pool<T>, index: u32) {
        if !self.mine.keep_one(pool, index) {
            pool.give(index);
        }
    }

    /// Blocks in use: taken and not given back, less those the slot caches
    /// hold free. Exact only when no thread is pushing or completing.
    pub(crate) fn live<T: Pooled>(&self, pool: &Pool<T>) -> usize {
        pool.live() - self.mine.cached(pool)
    }

    /// Returns the shared cache's free blocks to the pool (so that its
    /// live count is exact).
    pub(crate) fn give_back_shared<T: Pooled>(&self, pool: &Pool<T>) {
        self.shared.give_back(pool);
    }
}

impl ThreadCaches {
    /// Takes an index through the cache of thread slot `slot`, which the
    /// calling thread holds ([`thread_slot::current`](crate::mem::thread_slot::current),
    /// looked up once by the caller); `None` if it holds none (the caller
    /// takes another way).
    #[inline(always)]
    pub(crate) fn take<T: Pooled>(&self, pool: &Pool<T>, slot: Option<usize>) -> Option<u32> {
        let head = &self.heads[slot?];
        // The chain is this slot's alone (its holder's), like a `TakeCache`.
        let mut first = head.load(Ordering::Relaxed);
        let index = pool.take_cached(&mut first);
        head.store(first, Ordering::Relaxed);
        Some(index)
    }

    /// Keeps `index`, which the calling thread owns and gives back, in the
    /// thread's cache if that is empty; `false` (nothing done) if it is not
    /// or the thread holds no slot: the caller gives it to the pool.
    #[inline(always)]
    pub(crate) fn keep_one<T: Pooled>(&self, pool: &Pool<T>, index: u32) -> bool {
        let Some(slot) = crate::mem::thread_slot::current() else {
            return false;
        };
        let head = &self.heads[slot];
        let mut first = head.load(Ordering::Relaxed);
        if first != NIL {
            return false;
        }
        pool.give_cached(index, &mut first);
        head.store(first, Ordering::Relaxed);
        true
    }

    /// Indices held in all the caches. Exact only when no thread is taking
    /// or giving concurrently, like [`Pool::live`].
    pub(crate) fn cached<T: Pooled>(&self, pool: &Pool<T>) -> usize {
        self.heads.iter().map(|head| pool.chain_len(head.load(Ordering::Acquire))).sum()
    }
}

impl<T> Drop for Pool<T> {
    fn drop(&mut self) {
        for (seg, ptr) in self.segments.iter().enumerate() {
            let p = ptr.load(Ordering::Acquire);
            if p.is_null() {
                continue;
            }
            let slots = ptr::slice_from_raw_parts_mut(p, segment_len(seg));
            if seg < self.flat_segments {
                // SAFETY: a flat segment's pointer is set only by the thread
                // that then fills all of its `segment_len(seg)` slots
                // (`ensure_flat_segment`), and `&mut self` proves that
                // finished and that nothing borrows them; the reservation
                // is unmapped only after this loop (field drop).
                unsafe { ptr::drop_in_place(slots) };
            } else {
                // SAFETY: every other non-null segment pointer came from
                // `Box::into_raw` of a slice of `segment_len(seg)` slots, and
                // `&mut self` proves no reference into it is alive.
                drop(unsafe { Box::from_raw(slots) });
            }
        }
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn segments_cover_the_indices_contiguously() {
        let mut expected = (0usize, 0usize);
        for i in 0..10_000u32 {
            let seg = segment_of(i);
            let got = (seg, (i - segment_start(seg)) as usize);
            assert_eq!(got, expected, "index {i}");
            expected.1 += 1;
            if expected.1 == segment_len(expected.0) {
                expected = (expected.0 + 1, 0);
            }
        }
    }

    /// A fresh group starts at a multiple of its length, fills whole
    /// `GROUP_BYTES` spans, and the indices skipped to align it are free
    /// (taken again first) rather than lost.
    #[test]
    fn a_fresh_group_is_aligned_and_loses_no_index() {
        let n = Pool::<Tagged>::group_len();
        assert!(n > 1, "Tagged's slots are grouped");
        assert_eq!(n as usize * std::mem::size_of::<Slot<Tagged>>() % GROUP_BYTES, 0);
        for pool in layouts() {
            let singles: Vec<u32> = (0..3).map(|_| pool.take()).collect();
            let first = pool.take_fresh_group();
            assert_eq!(first, n, "the first multiple of {n} past the singles");
            assert_eq!(pool.live(), 3 + n as usize, "the skipped indices are free, the group not");
            let skipped: HashSet<u32> = (0..n - 3).map(|_| pool.take()).collect();
            assert_eq!(skipped, (3..n).collect(), "the skipped indices come back first");
            assert_eq!(pool.take(), 2 * n, "then fresh ones, past the group");
            let second = pool.take_fresh_group();
            assert_eq!(second, 3 * n);
            for i in (first..first + n).chain(second..second + n) {
                pool.mark_owned(i, true);
                pool.give(i);
            }
            for i in singles.into_iter().chain(skipped).chain([2 * n]) {
                pool.give(i);
            }
            assert_eq!(pool.live(), 0);
        }
    }

    /// The layouts every pool test runs on: all segments on the heap (a
    /// refused reservation), a few flat ones then the heap, and the
    /// default.
    fn layouts() -> [Pool<Tagged>; 3] {
        [Pool::with_flat_bytes(0), Pool::with_flat_bytes(8 << 10), Pool::new()]
    }

    #[test]
    fn layouts_differ_as_intended() {
        let [heap, few, default] = layouts();
        assert_eq!((heap.flat_segments, heap.flat_len), (0, 0));
        assert!(heap.flat.is_none());
        assert!((1..5).contains(&few.flat_segments), "{}", few.flat_segments);
        assert_eq!(few.flat_len, segment_start(few.flat_segments));
        assert!(default.flat_len > 1 << 16, "{}", default.flat_len);
    }

    /// Indices across the last flat segment and the heap ones after it
    /// address distinct slots that keep what was written.
    #[test]
    fn flat_and_heap_segments_meet_without_overlap() {
        for pool in layouts() {
            let n = pool.flat_len.clamp(1000, 20_000);
            let taken: Vec<u32> = (0..n + 500).map(|_| pool.take()).collect();
            for &i in &taken {
                pool.get(i).tag.store(i ^ 0x5555, Ordering::Relaxed);
            }
            for &i in &taken {
                assert_eq!(pool.get(i).tag.load(Ordering::Relaxed), i ^ 0x5555, "index {i}");
            }
            let addresses: HashSet<usize> = taken.iter().map(|&i| ptr::from_ref(pool.get(i)) as usize).collect();
            assert_eq!(addresses.len(), taken.len());
        }
    }

    #[test]
    fn take_give_reuses_and_never_duplicates() {
        for pool in layouts() {
            let a: Vec<u32> = (0..1000).map(|_| pool.take()).collect();
            assert_eq!(a.iter().collect::<HashSet<_>>().len(), 1000);
            assert_eq!(pool.live(), 1000);
            for &i in &a[..500] {
                pool.give(i);
            }
            assert_eq!(pool.live(), 500);
            let b: Vec<u32> = (0..500).map(|_| pool.take()).collect();
            assert_eq!(pool.capacity_used(), 1000, "freed indices are reused before fresh ones");
            let all: HashSet<u32> = a[500..].iter().chain(&b).copied().collect();
            assert_eq!(all.len(), 1000);
        }
    }

    #[test]
    fn stress_cross_thread_take_give() {
        for pool in layouts() {
            std::thread::scope(|s| {
                for t in 0..4u32 {
                    let pool = &pool;
                    s.spawn(move || {
                        for round in 0..20_000u32 {
                            let i = pool.take();
                            let tag = (t << 24) | (round & 0xFF_FFFF);
                            // Exclusive ownership: nobody else may touch it meanwhile.
                            pool.get(i).tag.store(tag, Ordering::Relaxed);
                            std::hint::spin_loop();
                            assert_eq!(pool.get(i).tag.load(Ordering::Relaxed), tag, "index {i} handed out twice");
                            pool.give(i);
                        }
                    });
                }
            });
            assert_eq!(pool.live(), 0);
        }
    }

    /// Fresh groups taken while other threads take and give single
    /// indices: every group aligned, no index handed out twice (a tag
    /// overwritten under its owner), none lost.
    #[test]
    fn stress_fresh_groups_among_single_takes() {
        const ROUNDS: u32 = if cfg!(miri) { 20 } else { 5_000 };
        let n = Pool::<Tagged>::group_len();
        for pool in layouts() {
            std::thread::scope(|s| {
                for t in 0..4u32 {
                    let pool = &pool;
                    s.spawn(move || {
                        for round in 0..ROUNDS {
                            let tag = (t << 24) | (round & 0xFF_FFFF);
                            let taken: Vec<u32> = if t % 2 == 0 {
                                let first = pool.take_fresh_group();
                                assert_eq!(first % n, 0, "group at {first}");
                                (first..first + n).inspect(|&i| pool.mark_owned(i, true)).collect()
                            } else {
                                vec![pool.take(), pool.take()]
                            };
                            taken.iter().for_each(|&i| pool.get(i).tag.store(tag, Ordering::Relaxed));
                            std::hint::spin_loop();
                            for &i in &taken {
                                assert_eq!(pool.get(i).tag.load(Ordering::Relaxed), tag, "index {i} handed out twice");
                                pool.give(i);
                            }
                        }
                    });
                }
            });
            assert_eq!(pool.live(), 0);
        }
    }

    /// The free list's ABA race: a taker reads the head and its successor,
    /// is preempted, and meanwhile others take both and give the head back;
    /// without the tag its CAS would succeed and hand out an index another
    /// thread owns. More threads than CPUs, each taking two indices and
    /// giving them back in reverse order, make such a preemption likely; an
    /// index handed out twice shows as a tag overwritten under its owner.
    #[test]
    fn stress_takes_of_two_given_back_in_reverse() {
        const THREADS: u32 = 16;
        const ROUNDS: u32 = if cfg!(miri) { 10 } else { 200_000 };
        for pool in layouts() {
            std::thread::scope(|s| {
                for t in 0..THREADS {
                    let pool = &pool;
                    s.spawn(move || {
                        for round in 0..ROUNDS {
                            let (a, b) = (pool.take(), pool.take());
                            let tag = (t << 24) | (round & 0xFF_FFFF);
                            pool.get(a).tag.store(tag, Ordering::Relaxed);
                            pool.get(b).tag.store(!tag, Ordering::Relaxed);
                            std::hint::spin_loop();
                            assert_eq!(pool.get(a).tag.load(Ordering::Relaxed), tag, "index {a} handed out twice");
                            assert_eq!(pool.get(b).tag.load(Ordering::Relaxed), !tag, "index {b} handed out twice");
                            pool.give(b);
                            pool.give(a);
                        }
                    });
                }
            });
            assert_eq!(pool.live(), 0);
        }
    }

    /// Threads taking fresh indices from a new pool at once race to
    /// allocate the same segments: every index is still handed out once
    /// and addressable. (The window in which a loser must wait for the
    /// winner's origin is a few instructions wide; the loom model
    /// `racing_takes_share_a_freshly_allocated_segment` is what explores it.)
    #[test]
    fn concurrent_takes_across_fresh_segments() {
        const THREADS: u32 = 4;
        const EACH: u32 = 2_000; // segments 0..=6 at base 64
        for pool in layouts() {
            let taken: Vec<Vec<u32>> = std::thread::scope(|s| {
                let handles: Vec<_> = (0..THREADS)
                    .map(|t| {
                        let pool = &pool;
                        s.spawn(move || {
                            (0..EACH)
                                .map(|k| {
                                    let i = pool.take();
                                    pool.get(i).tag.store(t << 16 | k, Ordering::Relaxed);
                                    i
                                })
                                .collect::<Vec<u32>>()
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let mut all = HashSet::new();
            for (t, indices) in taken.iter().enumerate() {
                for (k, &i) in indices.iter().enumerate() {
                    assert!(all.insert(i), "index {i} handed out twice");
                    assert_eq!(pool.get(i).tag.load(Ordering::Relaxed), (t as u32) << 16 | k as u32, "index {i}");
                }
            }
            assert_eq!(pool.capacity_used(), (THREADS * EACH) as usize);
            assert_eq!(pool.live(), (THREADS * EACH) as usize);
        }
    }

    #[test]
    fn take_cache_refills_from_the_free_list_and_gives_back() {
        let pool: Pool<Tagged> = Pool::new();
        let taken: Vec<u32> = (0..40).map(|_| pool.take()).collect();
        let mut batch = GiveBatch::default();
        for &i in &taken {
            batch.add(&pool, i);
        }
        batch.flush(&pool);
        assert_eq!(pool.live(), 0);
        let mut cache = TakeCache::default();
        let again: HashSet<u32> = (0..40).map(|_| cache.take(&pool)).collect();
        assert_eq!(again, taken.iter().copied().collect(), "one refill holds every freed index");
        assert_eq!(pool.capacity_used(), 40, "no fresh index while cached ones remain");
        let fresh = cache.take(&pool);
        assert_eq!(fresh, 40, "a dry cache and an empty free list take a fresh index");
        for i in again.into_iter().take(10) {
            pool.give(i);
        }
        let one = cache.take(&pool);
        assert_eq!(pool.live(), 41, "a refill detaches the whole free list; cached indices count as live");
        pool.give(one);
        cache.give_back(&pool);
        assert_eq!(pool.live(), 31, "given back: only the 31 still held by the test");
    }

    /// Prefetching is a hint: a pool that prefetches hands out the same
    /// indices, in the same order, as one that does not, through single
    /// takes, cache refills and gives interleaved.
    #[test]
    fn a_prefetching_pool_hands_out_what_a_plain_one_does() {
        fn script(pool: &Pool<Tagged>) -> Vec<u32> {
            let mut cache = TakeCache::default();
            let mut held = Vec::new();
            let mut seen = Vec::new();
            for round in 0..50u32 {
                for _ in 0..(round % 7 + 1) {
                    let i = if round % 2 == 0 { pool.take() } else { cache.take(pool) };
                    seen.push(i);
                    held.push(i);
                }
                // Give back every third held index, newest first: alone,
                // or (every third round) in a batch, which writes hints.
                let mut batch = GiveBatch::default();
                for k in (0..held.len()).rev().filter(|k| k % 3 == 0) {
                    let i = held.swap_remove(k);
                    if round % 3 == 0 {
                        batch.add(pool, i);
                    } else {
                        pool.give(i);
                    }
                }
                batch.flush(pool);
            }
            cache.give_back(pool);
            for i in held {
                pool.give(i);
            }
            assert_eq!(pool.live(), 0);
            seen
        }
        let plain: Pool<Tagged> = Pool::new();
        let prefetching: Pool<Tagged> = Pool::new().prefetching(true);
        assert!(prefetching.prefetch && !plain.prefetch);
        assert_eq!(script(&prefetching), script(&plain));
    }

    #[test]
    fn a_batch_hints_each_index_two_places_down_its_chain() {
        let pool: Pool<Tagged> = Pool::new();
        let taken: Vec<u32> = (0..6).map(|_| pool.take()).collect();
        let mut batch = GiveBatch::default();
        for &i in &taken {
            batch.add(&pool, i);
        }
        // The chain runs from the last added to the first.
        let mut chain = vec![];
        let mut at = batch.first;
        while at != NIL {
            chain.push(at);
            at = pool.get(at).link.load(Ordering::Relaxed);
        }
        assert_eq!(chain, taken.iter().rev().copied().collect::<Vec<_>>());
        for (place, &i) in chain.iter().enumerate() {
            let want = chain.get(place + HINT_AHEAD).copied().unwrap_or(NIL);
            assert_eq!(pool.get(i).hint.load(Ordering::Relaxed), want, "hint of the index at place {place}");
        }
        batch.flush(&pool);
        // A lone give leaves no stale hint behind.
        let lone = pool.take();
        pool.give(lone);
        assert_eq!(pool.get(lone).hint.load(Ordering::Relaxed), NIL);
    }

    #[test]
    fn batched_give_returns_every_index() {
        let pool: Pool<Tagged> = Pool::new();
        let taken: Vec<u32> = (0..100).map(|_| pool.take()).collect();
        let mut batch = GiveBatch::default();
        for &i in &taken[..70] {
            batch.add(&pool, i);
        }
        assert_eq!(pool.live(), 100, "nothing is given back before the flush");
        batch.flush(&pool);
        assert_eq!(pool.live(), 30);
        let again: HashSet<u32> = (0..70).map(|_| pool.take()).collect();
        assert_eq!(again, taken[..70].iter().copied().collect(), "the batch's indices are reused");
        assert_eq!(pool.capacity_used(), 100);
    }

    #[test]
    fn a_shared_cache_in_use_sends_a_taker_to_the_pool() {
        let pool: Pool<Tagged> = Pool::new();
        let taken: Vec<u32> = (0..10).map(|_| pool.take()).collect();
        taken.iter().for_each(|&i| pool.give(i));
        let shared = SharedTakeCache::default();
        let first = shared.take(&pool);
        assert_eq!(pool.live(), 10, "the first take detached the whole free list into the cache");
        // Another thread is inside the cache: this take must not touch it.
        shared.busy.store(true, Ordering::Relaxed);
        let fresh = shared.take(&pool);
        assert_eq!(fresh, 10, "the free list is empty, so the pool hands out a fresh index");
        shared.busy.store(false, Ordering::Relaxed);
        let rest: HashSet<u32> = (0..9).map(|_| shared.take(&pool)).collect();
        let expected: HashSet<u32> = taken.iter().copied().filter(|&i| i != first).collect();
        assert_eq!(rest, expected, "the cache hands out each cached index once");
        assert_eq!(pool.capacity_used(), 11);
        for i in rest.into_iter().chain([first, fresh]) {
            pool.give(i);
        }
        let again = shared.take(&pool);
        pool.give(again);
        assert_eq!(pool.live(), 10, "a refill detached all 11; the 10 still cached count as live");
        shared.give_back(&pool);
        assert_eq!(pool.live(), 0, "given back: nothing is live");
    }

    /// A thread's slot cache refills by detaching the free list, hands
    /// each index out once, and `live - cached` counts exactly the indices
    /// owned, whichever thread's cache holds the rest.
    #[test]
    fn a_thread_cache_refills_from_the_free_list_and_counts_what_it_holds() {
        let pool: Pool<Tagged> = Pool::new();
        let caches = ThreadCaches::default();
        let owned = |n: usize| assert_eq!(pool.live() - caches.cached(&pool), n);
        let early: Vec<u32> = (0..5).map(|_| pool.take()).collect();
        early.iter().for_each(|&i| pool.give(i));
        // With more than `SLOTS` threads alive in the test binary, this one
        // may hold none: the cache is then bypassed, nothing to check.
        let Some(a) = caches.take(&pool, crate::mem::thread_slot::current()) else { return };
        assert!(early.contains(&a));
        assert_eq!(pool.live(), 5, "the refill detached the whole free list");
        assert_eq!(caches.cached(&pool), 4);
        owned(1);
        let mut mine = vec![a];
        mine.extend((0..6).map(|_| caches.take(&pool, crate::mem::thread_slot::current()).unwrap()));
        let distinct: HashSet<u32> = mine.iter().copied().collect();
        assert_eq!(distinct.len(), mine.len(), "no index handed out twice");
        assert_eq!(pool.capacity_used(), 7, "five cached, then two fresh");
        owned(7);
        // Given back to the pool, then taken by another thread's cache.
        mine.iter().for_each(|&i| pool.give(i));
        owned(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                let Some(b) = caches.take(&pool, crate::mem::thread_slot::current()) else { return };
                assert!(mine.contains(&b));
                owned(1);
                pool.give(b);
            });
        });
        owned(0);
    }

    #[test]
    fn a_slot_cache_keeps_a_given_back_index_only_when_empty() {
        let pool: Pool<Tagged> = Pool::new();
        let caches = ThreadCaches::default();
        let owned = |n: usize| assert_eq!(pool.live() - caches.cached(&pool), n);
        // The cache is dry and the free list empty: a fresh index.
        let Some(a) = caches.take(&pool, crate::mem::thread_slot::current()) else { return };
        owned(1);
        assert!(caches.keep_one(&pool, a), "an empty cache keeps it");
        owned(0);
        assert_eq!(caches.cached(&pool), 1);
        assert_eq!(caches.take(&pool, crate::mem::thread_slot::current()), Some(a), "the kept index comes back first");
        assert_eq!(pool.capacity_used(), 1, "no fresh index was needed");
        let b = pool.take();
        assert!(caches.keep_one(&pool, a));
        assert!(!caches.keep_one(&pool, b), "a cache holding one keeps no second");
        owned(1);
        pool.give(b);
        owned(0);
        // Another thread's cache is its own: it refills from the pool (`b`).
        std::thread::scope(|s| {
            s.spawn(|| {
                let Some(c) = caches.take(&pool, crate::mem::thread_slot::current()) else { return };
                assert_eq!(c, b);
                pool.give(c);
            });
        });
        assert_eq!(caches.take(&pool, crate::mem::thread_slot::current()), Some(a));
        pool.give(a);
        owned(0);
    }
}

/// Loom model of the free list (`--cfg depengine_loom`): cross-thread give
/// and take never hand one index to two owners (the tag defeats ABA).
#[cfg(all(test, depengine_loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;

    /// Takes two indices, marks them, gives the first back and checks the
    /// second is still ours before giving it back too.
    fn churn(pool: &Pool<Tagged>, tag: u32) {
        let x = pool.take();
        let y = pool.take();
        pool.get(x).tag.store(tag, Ordering::Relaxed);
        pool.get(y).tag.store(tag, Ordering::Relaxed);
        pool.give(x);
        assert_eq!(pool.get(y).tag.load(Ordering::Relaxed), tag, "index {y} handed out twice");
        pool.give(y);
    }

    /// A pool with three free indices, and a second thread churning on it.
    fn pool_with_a_churner() -> (Arc<Pool<Tagged>>, loom::thread::JoinHandle<()>) {
        let pool: Arc<Pool<Tagged>> = Arc::new(Pool::new());
        let (a, b, c) = (pool.take(), pool.take(), pool.take());
        for i in [c, b, a] {
            pool.give(i);
        }
        let other = {
            let pool = pool.clone();
            loom::thread::spawn(move || churn(&pool, 2))
        };
        (pool, other)
    }

    #[test]
    fn cross_thread_give_and_take_never_share_an_index() {
        loom::model(|| {
            let (pool, other) = pool_with_a_churner();
            churn(&pool, 1);
            other.join().unwrap();
            assert_eq!(pool.live(), 0);
            assert!(pool.capacity_used() <= 4, "at most two indices held per thread");
        });
    }

    /// Two threads taking fresh indices race to allocate segment 1 (base 2
    /// under loom: indices 2..6): whichever loses waits for the winner's
    /// origin, and every index is addressable by its owner.
    #[test]
    fn racing_takes_share_a_freshly_allocated_segment() {
        loom::model(|| {
            let pool: Arc<Pool<Tagged>> = Arc::new(Pool::new());
            let take_two = |pool: &Pool<Tagged>, tag: u32| {
                let (x, y) = (pool.take(), pool.take());
                pool.get(x).tag.store(tag, Ordering::Relaxed);
                pool.get(y).tag.store(tag, Ordering::Relaxed);
                (x, y)
            };
            let other = {
                let pool = pool.clone();
                loom::thread::spawn(move || take_two(&pool, 2))
            };
            let mine = take_two(&pool, 1);
            let theirs = other.join().unwrap();
            for (i, tag) in [(mine.0, 1), (mine.1, 1), (theirs.0, 2), (theirs.1, 2)] {
                assert_eq!(pool.get(i).tag.load(Ordering::Relaxed), tag, "index {i} handed out twice");
            }
            assert_eq!(pool.capacity_used(), 4);
        });
    }

    /// A taker refilling its private cache from the free list races with a
    /// thread taking and giving one index at a time: still one owner each.
    #[test]
    fn a_cache_refill_and_single_takes_never_share_an_index() {
        loom::model(|| {
            let (pool, other) = pool_with_a_churner();
            let mut cache = TakeCache::default();
            let (x, y) = (cache.take(&*pool), cache.take(&*pool));
            pool.get(x).tag.store(1, Ordering::Relaxed);
            pool.get(y).tag.store(1, Ordering::Relaxed);
            other.join().unwrap();
            assert_eq!(pool.get(x).tag.load(Ordering::Relaxed), 1, "index {x} handed out twice");
            assert_eq!(pool.get(y).tag.load(Ordering::Relaxed), 1, "index {y} handed out twice");
            pool.give(x);
            pool.give(y);
            cache.give_back(&*pool);
            assert_eq!(pool.live(), 0);
        });
    }

    /// Two threads take through one shared cache from a pool with three
    /// free indices: whoever finds the cache in use takes from the pool,
    /// and no index has two owners.
    #[test]
    fn shared_cache_takers_never_share_an_index() {
        loom::model(|| {
            let pool: Arc<Pool<Tagged>> = Arc::new(Pool::new());
            let (a, b, c) = (pool.take(), pool.take(), pool.take());
            for i in [c, b, a] {
                pool.give(i);
            }
            let shared = Arc::new(SharedTakeCache::default());
            let second = {
                let (pool, shared) = (pool.clone(), shared.clone());
                loom::thread::spawn(move || {
                    let x = shared.take(&*pool);
                    pool.get(x).tag.store(3, Ordering::Relaxed);
                    x
                })
            };
            let x = shared.take(&*pool);
            pool.get(x).tag.store(1, Ordering::Relaxed);
            let theirs = second.join().unwrap();
            assert_eq!(pool.get(x).tag.load(Ordering::Relaxed), 1, "index {x} handed out twice");
            assert_eq!(pool.get(theirs).tag.load(Ordering::Relaxed), 3, "index {theirs} handed out twice");
            pool.give(x);
            pool.give(theirs);
            assert!(!shared.busy.load(Ordering::SeqCst), "the cache was left marked in use");
            shared.give_back(&*pool);
            assert_eq!(pool.live(), 0);
        });
    }
}
