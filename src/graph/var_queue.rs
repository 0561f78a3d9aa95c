#![doc = include_str!("../../docs/var-queue.md")]

use crate::mem::pool::{Pool, Pooled, NIL};
use crate::mem::sweep::{SweepBatch, SweepCache};
use crate::sync::{AtomicBool, AtomicU32, AtomicU8, Ordering, UnsafeCell};

/// A block's `status`: the unfilled sentinel, behind something running or
/// queued.
const EMPTY: u8 = 0;
/// Filled: a queued read, published by the appender.
const READ: u8 = 1;
/// Filled: a queued write, published by the appender.
const WRITE: u8 = 2;
/// The sentinel, parked: nothing runs and nothing waits.
const IDLE: u8 = 3;
/// The sentinel, parked: reads run and nothing waits; a read may join them.
const READING: u8 = 4;

/// One queued access: MXNet's `VersionedVarBlock`.
#[derive(Debug)]
pub(crate) struct VarBlock {
    /// The operation (an index into the operation pool).
    opr: UnsafeCell<u32>,
    /// `EMPTY`, `READ`, `WRITE`, `IDLE` or `READING` (module docs).
    status: AtomicU8,
    /// The next block in the chain (`NIL` for the sentinel), and the pool's
    /// free-list link while the block is free. Ordered by `status` like
    /// `opr`; atomic (relaxed) only because a racing pool `take` may read
    /// it as the link of a block that was taken again meanwhile.
    next: AtomicU32,
    /// A hint for the granter: the operation queued right behind this
    /// block's, written by the appender when it queues that one (`NIL`:
    /// none queued yet). It may be stale and decides nothing; the granter
    /// prefetches that operation's block ("The next in line" in the
    /// module docs).
    behind: AtomicU32,
}

impl Default for VarBlock {
    fn default() -> Self {
        VarBlock {
            opr: UnsafeCell::new(NIL),
            status: AtomicU8::new(EMPTY),
            next: AtomicU32::new(NIL),
            behind: AtomicU32::new(NIL),
        }
    }
}

impl Pooled for VarBlock {
    fn free_link(&self) -> &AtomicU32 {
        &self.next
    }

    const PREFETCH_LINES: usize = 1;
}

// SAFETY: a block's plain fields are written by the appender before it
// publishes them with a release swap of `status`, and read only by the
// granter after an acquire load of that `status` (module docs).
unsafe impl Sync for VarBlock {}

impl VarBlock {
    /// The operation and the next block.
    ///
    /// # Safety
    /// The caller must have seen the block filled (an acquire load of
    /// `status`) and be its granter, per the module invariants.
    #[inline(always)]
    unsafe fn read(&self) -> (u32, u32) {
        // SAFETY: forwarded to the caller: no one writes the block meanwhile.
        unsafe { (self.opr.with(|p| *p), self.next.load(Ordering::Relaxed)) }
    }
}

/// The appender's half of a variable's queue: the line the pushing side
/// writes (`VarSlot` keeps it apart from the granter's half).
#[derive(Debug)]
pub(crate) struct QueueTail {
    /// The empty block the next queued access fills. Written only by the
    /// appender; atomic (relaxed) so that a waiter may peek at it
    /// ([`VarQueue::looks_busy`]) without being the appender.
    sentinel: AtomicU32,
    /// The block of the access queued last, whose `behind` the next queued
    /// access fills in (`NIL` once an access was granted at once: nothing
    /// queued there). Appender-only; it may name a block granted and given
    /// back since, which is harmless for a hint.
    queued_last: AtomicU32,
    /// Whether that access is a read.
    queued_last_reads: AtomicBool,
}

impl Default for QueueTail {
    fn default() -> Self {
        QueueTail {
            sentinel: AtomicU32::new(NIL),
            queued_last: AtomicU32::new(NIL),
            queued_last_reads: AtomicBool::new(false),
        }
    }
}

/// The granter's half of a variable's queue: the line the completing side
/// writes.
#[derive(Debug)]
pub(crate) struct QueueHead {
    /// The oldest block not granted yet (the sentinel when none waits).
    first_waiting: UnsafeCell<u32>,
    /// Granted reads that have not completed.
    readers: AtomicU32,
}

impl Default for QueueHead {
    fn default() -> Self {
        QueueHead { first_waiting: UnsafeCell::new(NIL), readers: AtomicU32::new(0) }
    }
}

// SAFETY: `first_waiting` is touched only by the single granter, a role
// handed on through `status` and `readers` (module docs, "Who owns what").
unsafe impl Sync for QueueHead {}

/// A variable's lock-free access queue (see the module docs): its two
/// halves, which live on separate cache lines of the variable's slot.
#[derive(Clone, Copy)]
pub(crate) struct VarQueue<'a> {
    tail: &'a QueueTail,
    head: &'a QueueHead,
}

/// Both halves in one place, for the queue's tests and benchmarks.
#[cfg(any(test, feature = "bench-internals"))]
#[derive(Debug, Default)]
pub(crate) struct QueueHalves {
    tail: QueueTail,
    head: QueueHead,
}

#[cfg(any(test, feature = "bench-internals"))]
impl QueueHalves {
    pub(crate) fn queue(&self) -> VarQueue<'_> {
        VarQueue::new(&self.tail, &self.head)
    }
}

/// The result of one completing access: the operations it granted, at most
/// one write or any number of reads (a run of consecutive queued reads).
///
/// Each granted block is read once and collected in `freed` (for the
/// pool's sweep, `sweep.rs`: the block's own line is left as the granter
/// read it); the caller may take that batch
/// ([`take_freed`](Self::take_freed)) to give it back later
/// with others, or let the drop give it back at once.
pub(crate) struct Granted<'a> {
    blocks: &'a Pool<VarBlock>,
    next: u32,
    left: u32,
    freed: SweepBatch,
    behind: u32,
}

impl<'a> Granted<'a> {
    fn new(blocks: &'a Pool<VarBlock>, next: u32, left: u32, behind: u32) -> Self {
        Granted { blocks, next, left, freed: SweepBatch::EMPTY, behind }
    }

    fn none(blocks: &'a Pool<VarBlock>) -> Self {
        Self::new(blocks, NIL, 0, NIL)
    }

    /// A hint: the operation queued right behind the granted group, which
    /// the group's completion will most likely grant next (`NIL`: none
    /// known). Possibly stale; for prefetching only.
    pub(crate) fn behind(&self) -> u32 {
        self.behind
    }

    /// The blocks of the operations granted so far, now the caller's to give back.
    pub(crate) fn take_freed(&mut self) -> SweepBatch {
        std::mem::take(&mut self.freed)
    }

    /// Collects the granted blocks into `batch` (the caller's, to be taken
    /// back with [`take_freed`](Self::take_freed)) instead of a batch of
    /// its own: a completion of several variables keeps one batch, with
    /// no merge per variable. Before the first grant.
    #[inline(always)]
    pub(crate) fn gather_into(&mut self, batch: SweepBatch) {
        debug_assert!(self.freed.is_empty());
        self.freed = batch;
    }
}

impl Iterator for Granted<'_> {
    type Item = u32;

    #[inline]
    fn next(&mut self) -> Option<u32> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let b = self.next;
        // SAFETY: the block was filled and granted to the granter that
        // made this iterator, its only owner from then on (invariant 4).
        let (opr, next) = unsafe { self.blocks.get(b).read() };
        self.freed.add(self.blocks, b);
        self.next = next;
        Some(opr)
    }
}

impl Drop for Granted<'_> {
    fn drop(&mut self) {
        debug_assert!(self.left == 0 || std::thread::panicking(), "granted operations dropped");
        self.freed.flush(self.blocks);
    }
}

impl<'a> VarQueue<'a> {
    #[inline(always)]
    pub(crate) fn new(tail: &'a QueueTail, head: &'a QueueHead) -> Self {
        VarQueue { tail, head }
    }

    /// Makes the queue ready for a (re)used variable: idle, with a sentinel.
    ///
    /// # Safety
    /// The caller owns the variable exclusively (it was just taken from the
    /// pool), so no other thread touches the queue.
    pub(crate) unsafe fn reset(self, blocks: &Pool<VarBlock>) {
        debug_assert_eq!(self.head.readers.load(Ordering::Relaxed), 0);
        // SAFETY: exclusive ownership, forwarded from the caller.
        unsafe {
            // A slot comes from the pool new or `release`d: no sentinel.
            debug_assert_eq!(self.tail.sentinel.load(Ordering::Relaxed), NIL, "reset of a queue that has a sentinel");
            let s = blocks.take();
            self.tail.sentinel.store(s, Ordering::Relaxed);
            let block = blocks.get(s);
            block.next.store(NIL, Ordering::Relaxed);
            block.status.store(IDLE, Ordering::Relaxed);
            self.tail.queued_last.store(NIL, Ordering::Relaxed);
            self.head.first_waiting.with_mut(|p| *p = s);
        }
    }

    /// Gives the sentinel back; the variable is being freed.
    ///
    /// # Safety
    /// The queue must be idle and exclusively owned.
    pub(crate) unsafe fn release(self, blocks: &Pool<VarBlock>) {
        // SAFETY: exclusive ownership, forwarded from the caller.
        unsafe {
            let s = self.tail.sentinel.load(Ordering::Relaxed);
            if s != NIL {
                debug_assert_eq!(blocks.get(s).status.load(Ordering::Relaxed), IDLE, "freeing a busy variable");
                blocks.give(s);
            }
            self.tail.sentinel.store(NIL, Ordering::Relaxed);
            self.tail.queued_last.store(NIL, Ordering::Relaxed);
            self.head.first_waiting.with_mut(|p| *p = NIL);
        }
    }

    /// **append read / append write**: returns `true` when the access is
    /// granted at once, `false` when it was queued (and will be granted by a
    /// later completion).
    ///
    /// # Safety
    /// Only the dispatcher may call this, one call at a time per queue (the
    /// appender owns the sentinel), on a queue that was [`reset`](Self::reset).
    /// `spares` supplies the empty block linked behind a queued access.
    #[inline]
    pub(crate) unsafe fn append(self, blocks: &Pool<VarBlock>, spares: &mut SweepCache, opr: u32, write: bool) -> bool {
        let (sentinel, status) = self.sentinel(blocks);
        let s = blocks.get(sentinel);
        if self.start_unqueued(s, status, write) {
            return true;
        }
        // Queue it: fill the sentinel, link a fresh one behind it, publish.
        let spare = spares.take(blocks);
        let fresh = blocks.get(spare);
        fresh.next.store(NIL, Ordering::Relaxed);
        // SAFETY: the sentinel is unpublished and appender-owned (a granter
        // reads its fields only once filled).
        unsafe { s.opr.with_mut(|p| *p = opr) };
        s.next.store(spare, Ordering::Relaxed);
        self.hint_queued(blocks, sentinel, s, opr, write);
        self.tail.sentinel.store(spare, Ordering::Relaxed);
        fresh.status.store(EMPTY, Ordering::Relaxed);
        // Once published the block may be granted, given back and reused at
        // once: nothing below reads it.
        let was = s.status.swap(if write { WRITE } else { READ }, Ordering::AcqRel);
        if was != IDLE {
            // Behind something running (`EMPTY`), or behind reads that were
            // ending (`READING`, the join failed): their granter takes it.
            return false;
        }
        // The queue was parked idle between our look and our swap: there is
        // no granter, so we grant the access ourselves.
        // SAFETY: parking handed the granter's role to whoever fills the
        // sentinel next: us.
        unsafe { self.head.first_waiting.with_mut(|p| *p = spare) };
        self.start_alone(fresh, write);
        self.hint_nothing_queued();
        blocks.give(sentinel);
        true
    }

    /// Grants an access at once if the queue allows it without queuing:
    /// [`append`](Self::append)'s first step alone. `false`: nothing
    /// changed (the access would have to wait, or a read found its group
    /// ending), and no operation needs to be named.
    ///
    /// # Safety
    /// As for [`append`](Self::append).
    #[inline]
    pub(crate) unsafe fn grant_at_once(self, blocks: &Pool<VarBlock>, write: bool) -> bool {
        let (sentinel, status) = self.sentinel(blocks);
        self.start_unqueued(blocks.get(sentinel), status, write)
    }

    /// The appender's first step: an access that needs no queued block
    /// starts at once on sentinel `s`, found holding `status`.
    #[inline(always)]
    fn start_unqueued(self, s: &VarBlock, status: u8, write: bool) -> bool {
        match status {
            // Parked idle: there is no granter, so the sentinel is ours
            // alone; it stays the sentinel (nothing is queued).
            IDLE => {
                self.start_alone(s, write);
                self.hint_nothing_queued();
                true
            }
            READING if !write && self.join_reads() => {
                self.hint_nothing_queued();
                true
            }
            _ => false,
        }
    }

    /// Fills in the hint of "The next in line" (module docs) for operation
    /// `opr`, being queued in block `s` (index `sentinel`, not yet
    /// published): the block queued before it names it, unless both are
    /// reads (granted in one group, so that the group's last block is the
    /// one whose hint is read), and it names nothing yet. Left out under
    /// loom, like every hint.
    #[inline(always)]
    fn hint_queued(self, blocks: &Pool<VarBlock>, sentinel: u32, s: &VarBlock, opr: u32, write: bool) {
        if cfg!(depengine_loom) {
            return;
        }
        s.behind.store(NIL, Ordering::Relaxed);
        let before = self.tail.queued_last.load(Ordering::Relaxed);
        let reads = !write;
        if before != NIL && !(reads && self.tail.queued_last_reads.load(Ordering::Relaxed)) {
            blocks.get(before).behind.store(opr, Ordering::Relaxed);
        }
        self.tail.queued_last.store(sentinel, Ordering::Relaxed);
        self.tail.queued_last_reads.store(reads, Ordering::Relaxed);
    }

    /// An access was granted at once: no queued block is there to name the
    /// next one queued.
    #[inline(always)]
    fn hint_nothing_queued(self) {
        if !cfg!(depengine_loom) && self.tail.queued_last.load(Ordering::Relaxed) != NIL {
            self.tail.queued_last.store(NIL, Ordering::Relaxed);
        }
    }

    /// Starts an access on a queue with nothing running or waiting, whose
    /// sentinel (also its first waiting block) is `s`.
    #[inline(always)]
    fn start_alone(self, s: &VarBlock, write: bool) {
        if write {
            s.status.store(EMPTY, Ordering::Relaxed);
        } else {
            self.head.readers.store(1, Ordering::Relaxed);
            s.status.store(READING, Ordering::Release);
        }
    }

    /// Joins the running reads, if they have not all completed.
    #[inline]
    fn join_reads(self) -> bool {
        let readers = &self.head.readers;
        let mut running = readers.load(Ordering::Relaxed);
        while running > 0 {
            match readers.compare_exchange_weak(running, running + 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(now) => running = now,
            }
        }
        false
    }

    /// **complete read**: the calling operation's granted read is done.
    /// Returns the operations this grants (at most one write, or reads that
    /// could not join).
    ///
    /// # Safety
    /// The caller must hold a granted read on this queue and call this once.
    #[inline]
    pub(crate) unsafe fn complete_read(self, blocks: &'a Pool<VarBlock>) -> Granted<'a> {
        let before = self.head.readers.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "complete_read without a read");
        if before != 1 {
            return Granted::none(blocks);
        }
        // SAFETY: the last reader out is the granter.
        unsafe { self.grant_or_park(blocks, READING) }
    }

    /// **release at once**: the calling operation's access, granted at once
    /// (`grant_at_once`), is done, and nothing waits behind it: parks the
    /// queue idle with plain stores, no locked instruction, and returns
    /// `true`. As the appender, the caller knows that nobody can fill the
    /// sentinel meanwhile (the appender's swap is what the usual park's CAS
    /// races with), and as the only holder (a write, or the one read still
    /// running) that nobody else grants. `false`: something waits behind
    /// it, or other reads still run; nothing changed, and the caller
    /// completes the access the usual way ([`complete_write`](Self::complete_write),
    /// [`complete_read`](Self::complete_read)).
    ///
    /// # Safety
    /// As for [`append`](Self::append) (the caller is the dispatcher), and
    /// the caller holds a granted access of this kind on the queue and has
    /// not completed it.
    #[inline]
    pub(crate) unsafe fn release_at_once(self, blocks: &Pool<VarBlock>, write: bool) -> bool {
        let readers = &self.head.readers;
        if !write && readers.load(Ordering::Relaxed) != 1 {
            return false;
        }
        // SAFETY: granter-owned: we are the writer, or the one reader left.
        let first = unsafe { self.head.first_waiting.with(|p| *p) };
        let f = blocks.get(first);
        // Unfilled, `first` is the sentinel: nothing waits.
        if f.status.load(Ordering::Acquire) != if write { EMPTY } else { READING } {
            return false;
        }
        if !write {
            readers.store(0, Ordering::Relaxed);
        }
        // Release: the next access, granted by this parked sentinel, sees
        // what this one did (the recorded outcome above all).
        f.status.store(IDLE, Ordering::Release);
        true
    }

    /// **complete write**: the calling operation's granted write is done.
    /// Returns the operations this grants (one write or a run of reads).
    ///
    /// # Safety
    /// The caller must hold the granted write on this queue and call this once.
    #[inline]
    pub(crate) unsafe fn complete_write(self, blocks: &'a Pool<VarBlock>) -> Granted<'a> {
        // SAFETY: the completing writer is the granter.
        unsafe { self.grant_or_park(blocks, EMPTY) }
    }

    /// As the granter: grants the group waiting first, or, when nothing
    /// waits (the first waiting block is the sentinel, in status `unfilled`),
    /// parks the queue idle.
    ///
    /// # Safety
    /// The caller must be the granter: the completing writer, or the last
    /// reader out.
    #[inline(always)]
    unsafe fn grant_or_park(self, blocks: &'a Pool<VarBlock>, unfilled: u8) -> Granted<'a> {
        // SAFETY: granter-owned.
        let first = unsafe { self.head.first_waiting.with(|p| *p) };
        let f = blocks.get(first);
        let mut status = f.status.load(Ordering::Acquire);
        if status == unfilled {
            match f.status.compare_exchange(unfilled, IDLE, Ordering::AcqRel, Ordering::Acquire) {
                // Parked: the role passes to the next appender; nothing
                // here may touch the queue again.
                Ok(_) => return Granted::none(blocks),
                Err(filled) => status = filled,
            }
        }
        debug_assert!(status == READ || status == WRITE, "granting block {first} in status {status}");
        // SAFETY: forwarded; `first` is filled (seen with acquire).
        unsafe { self.grant_front(blocks, first, f, status) }
    }

    /// Grants the group at the front: the write `first` (block `f`), or the
    /// run of reads from `first` on; advances `first_waiting` past it before
    /// returning (a granted operation may complete at once and make its
    /// completer the next granter). When nothing waits behind granted reads,
    /// parks the queue `READING` so that reads appended later join them.
    ///
    /// # Safety
    /// The caller must be the granter and have seen `first` filled with
    /// `status`.
    #[inline(always)]
    unsafe fn grant_front(self, blocks: &'a Pool<VarBlock>, first: u32, f: &VarBlock, status: u8) -> Granted<'a> {
        // SAFETY: filled and ours (granter), per the caller.
        let (_, mut next) = unsafe { f.read() };
        let mut count = 1;
        let mut last = f;
        if status == READ {
            loop {
                let b = blocks.get(next);
                match b.status.load(Ordering::Acquire) {
                    READ => {
                        count += 1;
                        last = b;
                        // SAFETY: filled (seen with acquire) and not granted.
                        next = unsafe { b.read() }.1;
                    }
                    EMPTY => {
                        // The sentinel: park `READING`, with the cursor and
                        // the count in place first (after the CAS nothing
                        // here touches the queue; a count stored late would
                        // make a read appended at once queue, not join).
                        self.head.readers.store(count, Ordering::Relaxed);
                        // SAFETY: granter-owned until the CAS below lands.
                        unsafe { self.head.first_waiting.with_mut(|p| *p = next) };
                        if b.status.compare_exchange(EMPTY, READING, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                            return Granted::new(blocks, first, count, NIL);
                        }
                        // Filled meanwhile: look at it again.
                    }
                    _ => break,
                }
            }
            self.head.readers.store(count, Ordering::Relaxed);
        }
        // SAFETY: granter-owned.
        unsafe { self.head.first_waiting.with_mut(|p| *p = next) };
        // The next granter (the completion of what is granted here) starts
        // at `next`: a block the appender wrote last.
        blocks.prefetch(next);
        // The operation in `next`, if the appender has named it already:
        // read from the last granted block's line, which is here anyway.
        let behind = if cfg!(depengine_loom) { NIL } else { last.behind.load(Ordering::Relaxed) };
        Granted::new(blocks, first, count, behind)
    }

    /// Whether an access appended now would be granted at once with
    /// nothing queued before it: for a write, nothing granted or queued; for
    /// a read, no write granted and nothing queued (running reads are fine).
    /// A conservative `false` is possible (a queue that is being parked).
    ///
    /// The answer is stable only for the appender (the dispatcher's
    /// holder), because nobody else can queue meanwhile; anyone else gets
    /// a hint ([`looks_busy`](Self::looks_busy)).
    #[inline]
    pub(crate) fn grants_at_once(self, blocks: &Pool<VarBlock>, write: bool) -> bool {
        Self::grants(self.sentinel(blocks).1, write)
    }

    /// A hint for any thread: whether an access appended now would be
    /// queued behind something, as [`grants_at_once`](Self::grants_at_once)
    /// would answer it, read without being the appender. It may be stale
    /// either way; a caller must take a `true` only as a reason to do
    /// something that is correct anyway. A queue with no sentinel (its
    /// variable freed) does not look busy.
    #[inline]
    pub(crate) fn looks_busy(self, blocks: &Pool<VarBlock>, write: bool) -> bool {
        let sentinel = self.tail.sentinel.load(Ordering::Relaxed);
        // A stale index still names a block of the pool, whose memory
        // lives as long as the pool: reading its status is harmless.
        sentinel != NIL && !Self::grants(blocks.get(sentinel).status.load(Ordering::Relaxed), write)
    }

    /// Whether an access finds a queue whose sentinel holds `status`
    /// granted at once.
    #[inline(always)]
    fn grants(status: u8, write: bool) -> bool {
        match status {
            IDLE => true,
            READING => !write,
            _ => false,
        }
    }

    /// Whether no access is granted or queued.
    #[cfg(test)]
    pub(crate) fn is_idle(self, blocks: &Pool<VarBlock>) -> bool {
        // Tests ask only once every thread has stopped appending.
        self.sentinel(blocks).1 == IDLE && self.head.readers.load(Ordering::Acquire) == 0
    }

    /// Starts bringing the lines the next append reads and writes into
    /// this core's cache for writing: the sentinel block, which the
    /// appender's own line names, and for a read the granter's half (a
    /// read that starts at once counts itself there). A hint, for a pusher
    /// that appends a little later ("Who pays for a line", module docs):
    /// any thread may call it, and a stale sentinel or `queued_last` only
    /// prefetches a line that is not needed (pool memory outlives the
    /// index).
    #[inline(always)]
    pub(crate) fn prefetch_for_append(self, blocks: &Pool<VarBlock>, write: bool) {
        if cfg!(depengine_loom) {
            return;
        }
        let sentinel = self.tail.sentinel.load(Ordering::Relaxed);
        if sentinel != NIL {
            crate::sync::prefetch_for_write(std::ptr::from_ref(blocks.get(sentinel)).cast(), 1);
        }
        // The granter's half only where the last access started at once
        // (nothing queued since, as far as the appender knows): where it
        // queued, the read most likely queues too and never touches the
        // line, which the worker is still using.
        if !write && self.tail.queued_last.load(Ordering::Relaxed) == NIL {
            crate::sync::prefetch_for_write(std::ptr::from_ref(self.head).cast(), 1);
        }
    }

    /// The sentinel's index and the status it holds now (acquire). The
    /// sentinel is appender-owned: the answer holds only for the appender,
    /// or for anyone once no thread appends.
    #[inline(always)]
    fn sentinel(self, blocks: &Pool<VarBlock>) -> (u32, u8) {
        let sentinel = self.tail.sentinel.load(Ordering::Relaxed);
        (sentinel, blocks.get(sentinel).status.load(Ordering::Acquire))
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::*;

    fn halves(blocks: &Pool<VarBlock>) -> QueueHalves {
        let h = QueueHalves::default();
        // SAFETY: the queue is local to the test.
        unsafe { h.queue().reset(blocks) };
        h
    }

    #[test]
    fn reads_share_writes_wait_in_order() {
        let blocks = Pool::new();
        let h = halves(&blocks);
        let q = h.queue();
        let mut spares = SweepCache::default();
        // SAFETY: single-threaded; every completion matches a granted access.
        unsafe {
            assert!(q.append(&blocks, &mut spares, 1, false), "first read granted");
            assert!(q.append(&blocks, &mut spares, 2, false), "second read joins");
            assert!(!q.append(&blocks, &mut spares, 3, true), "write waits for reads");
            assert!(!q.append(&blocks, &mut spares, 4, false), "read waits for the write");
            assert!(!q.append(&blocks, &mut spares, 5, false));
            assert!(!q.append(&blocks, &mut spares, 6, true));
            assert_eq!(q.complete_read(&blocks).collect::<Vec<_>>(), Vec::<u32>::new());
            assert_eq!(q.complete_read(&blocks).collect::<Vec<_>>(), vec![3]);
            assert_eq!(q.complete_write(&blocks).collect::<Vec<_>>(), vec![4, 5]);
            assert!(!q.append(&blocks, &mut spares, 7, false), "read behind a queued write waits");
            assert_eq!(q.complete_read(&blocks).collect::<Vec<_>>(), Vec::<u32>::new());
            assert_eq!(q.complete_read(&blocks).collect::<Vec<_>>(), vec![6]);
            assert_eq!(q.complete_write(&blocks).collect::<Vec<_>>(), vec![7]);
            assert_eq!(q.complete_read(&blocks).collect::<Vec<_>>(), Vec::<u32>::new());
            assert!(q.is_idle(&blocks));
            q.release(&blocks);
        }
        spares.give_back(&blocks);
        assert_eq!(blocks.live(), 0, "every block returned");
    }

    /// The peek agrees with the appender's own answer in every state the
    /// queue parks in or runs through.
    #[test]
    fn a_peek_says_busy_exactly_when_an_append_would_queue() {
        let blocks = Pool::new();
        let h = halves(&blocks);
        let q = h.queue();
        let mut spares = SweepCache::default();
        let agree = |what: &str| {
            for write in [false, true] {
                assert_eq!(q.looks_busy(&blocks, write), !q.grants_at_once(&blocks, write), "{what}, write: {write}");
            }
        };
        agree("idle");
        assert!(!q.looks_busy(&blocks, true), "an idle queue does not look busy");
        // SAFETY: single-threaded; every completion matches a granted access.
        unsafe {
            assert!(q.append(&blocks, &mut spares, 1, false));
            agree("reading");
            assert!(!q.looks_busy(&blocks, false) && q.looks_busy(&blocks, true), "reads run: a write would queue");
            assert!(!q.append(&blocks, &mut spares, 2, true));
            agree("a write queued behind a read");
            assert!(q.looks_busy(&blocks, false));
            assert_eq!(q.complete_read(&blocks).collect::<Vec<_>>(), vec![2]);
            agree("a write running");
            assert!(q.looks_busy(&blocks, false), "a running write makes a read queue");
            assert_eq!(q.complete_write(&blocks).collect::<Vec<_>>(), Vec::<u32>::new());
            agree("idle again");
            assert!(!q.looks_busy(&blocks, true));
            q.release(&blocks);
        }
        assert!(!q.looks_busy(&blocks, true), "a released queue (no sentinel) does not look busy");
        spares.give_back(&blocks);
    }

    /// A completion learns which operation is queued right behind what it
    /// grants, from the block it reads anyway: a write names the access
    /// after it, a run of reads the write after the run, and nothing is
    /// named that was not queued yet when the grant was made.
    #[test]
    fn a_grant_names_the_operation_queued_behind_it() {
        let blocks = Pool::new();
        let h = halves(&blocks);
        let q = h.queue();
        let mut spares = SweepCache::default();
        let grant = |granted: Granted<'_>| {
            let behind = granted.behind();
            (granted.collect::<Vec<_>>(), behind)
        };
        // SAFETY: single-threaded; every completion matches a granted access.
        unsafe {
            assert!(q.append(&blocks, &mut spares, 1, true), "granted at once");
            for (op, write) in [(2, true), (3, true), (4, false), (5, false), (6, true)] {
                assert!(!q.append(&blocks, &mut spares, op, write));
            }
            assert_eq!(grant(q.complete_write(&blocks)), (vec![2], 3));
            assert_eq!(grant(q.complete_write(&blocks)), (vec![3], 4));
            assert_eq!(grant(q.complete_write(&blocks)), (vec![4, 5], 6), "the write after the reads");
            assert_eq!(grant(q.complete_read(&blocks)), (vec![], NIL));
            assert_eq!(grant(q.complete_read(&blocks)), (vec![6], NIL), "nothing queued behind yet");
            assert!(!q.append(&blocks, &mut spares, 7, true));
            assert_eq!(grant(q.complete_write(&blocks)), (vec![7], NIL), "queued after the grant that passed it");
            assert_eq!(grant(q.complete_write(&blocks)), (vec![], NIL));
            // Idle again: the access granted at once has no block, so the
            // first one queued behind it is named by no one.
            assert!(q.append(&blocks, &mut spares, 8, true));
            assert!(!q.append(&blocks, &mut spares, 9, true));
            assert!(!q.append(&blocks, &mut spares, 10, true));
            assert_eq!(grant(q.complete_write(&blocks)), (vec![9], 10));
            assert_eq!(grant(q.complete_write(&blocks)), (vec![10], NIL));
            assert_eq!(grant(q.complete_write(&blocks)), (vec![], NIL));
            assert!(q.is_idle(&blocks));
            q.release(&blocks);
        }
        spares.give_back(&blocks);
        assert_eq!(blocks.live(), 0, "every block returned");
    }

    /// One appender, two completers: every access is granted exactly once,
    /// a write only alone, and the queue ends idle.
    #[test]
    fn stress_appender_against_completers() {
        use crossbeam_utils::CachePadded;
        use std::sync::atomic::{AtomicI64, AtomicU8, Ordering as O};
        use std::sync::Mutex;
        const OPS: u32 = 200_000;
        let blocks = Pool::new();
        let h = halves(&blocks);
        let q = h.queue();
        let granted: Vec<AtomicU8> = (0..OPS).map(|_| AtomicU8::new(0)).collect();
        let is_write = |op: u32| op % 3 != 1;
        // Running accesses: +1 per read, -1_000_000 per write.
        let running = CachePadded::new(AtomicI64::new(0));
        let ready = Mutex::new(std::collections::VecDeque::new());
        let done = std::sync::atomic::AtomicU32::new(0);
        let start = |op: u32| {
            assert_eq!(granted[op as usize].fetch_add(1, O::SeqCst), 0, "op {op} granted twice");
            let r =
                if is_write(op) { running.fetch_sub(1_000_000, O::SeqCst) } else { running.fetch_add(1, O::SeqCst) };
            assert!(r == 0 || (!is_write(op) && r > 0), "op {op} granted while {r} ran");
            ready.lock().unwrap().push_back(op);
        };
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut spares = SweepCache::default();
                for op in 0..OPS {
                    // SAFETY: the only appender.
                    if unsafe { q.append(&blocks, &mut spares, op, is_write(op)) } {
                        start(op);
                    }
                }
                spares.give_back(&blocks);
            });
            for _ in 0..2 {
                s.spawn(|| {
                    while done.load(O::SeqCst) < OPS {
                        let Some(op) = ready.lock().unwrap().pop_front() else { continue };
                        if is_write(op) {
                            running.fetch_add(1_000_000, O::SeqCst);
                        } else {
                            running.fetch_sub(1, O::SeqCst);
                        }
                        // SAFETY: `op` holds this access and completes it once.
                        let next: Vec<u32> = unsafe {
                            if is_write(op) {
                                q.complete_write(&blocks).collect()
                            } else {
                                q.complete_read(&blocks).collect()
                            }
                        };
                        next.into_iter().for_each(start);
                        done.fetch_add(1, O::SeqCst);
                    }
                });
            }
        });
        assert!(q.is_idle(&blocks));
        assert!(granted.iter().all(|g| g.load(O::SeqCst) == 1));
    }
}

/// Loom models of the queue's transitions (`--cfg depengine_loom`; see
/// `loom_tests/README.md`). Each asserts the rules the queue protects:
/// every access granted exactly once, a write only while nothing else runs,
/// accesses granted in append order across a write, the queue idle at the end.
#[cfg(all(test, depengine_loom))]
mod loom_models {
    use super::*;
    use loom::sync::atomic::{AtomicI64 as LoomI64, AtomicU32 as LoomU32};
    use loom::sync::Arc;

    /// What one running write adds to `running` (reads add 1).
    const WRITE_WEIGHT: i64 = 1 << 20;

    struct Model {
        blocks: Pool<VarBlock>,
        halves: QueueHalves,
        /// Whether operation `i` writes.
        writes: Vec<bool>,
        /// How often each operation was granted.
        grants: Vec<LoomU32>,
        /// The order in which operations were granted.
        grant_seq: Vec<LoomU32>,
        next_seq: LoomU32,
        /// Running reads, plus `WRITE_WEIGHT` per running write.
        running: LoomI64,
    }

    impl Model {
        fn new(writes: &[bool]) -> Arc<Self> {
            let m = Model {
                blocks: Pool::new(),
                halves: QueueHalves::default(),
                writes: writes.to_vec(),
                grants: writes.iter().map(|_| LoomU32::new(0)).collect(),
                grant_seq: writes.iter().map(|_| LoomU32::new(u32::MAX)).collect(),
                next_seq: LoomU32::new(0),
                running: LoomI64::new(0),
            };
            // SAFETY: not shared yet.
            unsafe { m.halves.queue().reset(&m.blocks) };
            Arc::new(m)
        }

        /// Appends `ops` in order (the single appender); returns the ones
        /// granted at once.
        fn append(&self, ops: std::ops::Range<u32>) -> Vec<u32> {
            let mut spares = SweepCache::default();
            // SAFETY: each model has one appending thread at a time.
            let granted = ops.filter(|&op| unsafe {
                self.halves.queue().append(&self.blocks, &mut spares, op, self.writes[op as usize])
            });
            let granted = granted.collect();
            spares.give_back(&self.blocks);
            granted
        }

        /// Starts and completes the granted operations in `mine`, and
        /// whatever each completion grants, on this thread (like a worker's
        /// successor slot).
        fn run(&self, mut mine: Vec<u32>) {
            while let Some(op) = mine.pop() {
                let write = self.writes[op as usize];
                self.start(op);
                self.stop(op);
                // SAFETY: `op` holds its granted access and completes it once.
                mine.extend(unsafe { self.complete(write) });
            }
        }

        /// Operation `op` starts: it must run beside nothing it conflicts
        /// with.
        fn start(&self, op: u32) {
            let write = self.writes[op as usize];
            self.grants[op as usize].fetch_add(1, Ordering::SeqCst);
            let seq = self.next_seq.fetch_add(1, Ordering::SeqCst);
            self.grant_seq[op as usize].store(seq, Ordering::SeqCst);
            let before = self.running.fetch_add(Self::weight(write), Ordering::SeqCst);
            assert!(before == 0 || (!write && before < WRITE_WEIGHT), "op {op} (write: {write}) ran beside others");
        }

        /// Operation `op` has run (its access is not released yet).
        fn stop(&self, op: u32) {
            self.running.fetch_sub(Self::weight(self.writes[op as usize]), Ordering::SeqCst);
        }

        /// Completes an access of the given kind, returning what it grants.
        ///
        /// # Safety
        /// The caller's operation holds that granted access and completes
        /// it once.
        unsafe fn complete(&self, write: bool) -> Granted<'_> {
            // SAFETY: per the contract.
            unsafe {
                if write {
                    self.halves.queue().complete_write(&self.blocks)
                } else {
                    self.halves.queue().complete_read(&self.blocks)
                }
            }
        }

        fn weight(write: bool) -> i64 {
            if write {
                WRITE_WEIGHT
            } else {
                1
            }
        }

        fn check_end(&self) {
            let grants: Vec<u32> = self.grants.iter().map(|g| g.load(Ordering::SeqCst)).collect();
            assert_eq!(grants, vec![1; self.writes.len()], "each access granted exactly once");
            assert!(self.halves.queue().is_idle(&self.blocks));
            // SAFETY: idle and no longer shared.
            unsafe { self.halves.queue().release(&self.blocks) };
        }

        fn seq(&self, op: usize) -> u32 {
            self.grant_seq[op].load(Ordering::SeqCst)
        }

        /// One completer against the appender: appends the first `split`
        /// operations (which must grant just `first_granted`), runs those on
        /// a second thread while this one appends the rest and runs what
        /// they grant, then checks the end state.
        fn race_one_completer(writes: &[bool], split: u32, first_granted: &[u32]) -> Arc<Self> {
            let m = Model::new(writes);
            let first = m.append(0..split);
            assert_eq!(first, first_granted, "granted before the race");
            let completer = {
                let m = m.clone();
                loom::thread::spawn(move || m.run(first))
            };
            let direct = m.append(split..writes.len() as u32);
            m.run(direct);
            completer.join().unwrap();
            m.check_end();
            m
        }

        /// Operation 0 is granted and runs on a second thread while this
        /// one, the appender, asks the queue to grant operation 1 at once
        /// (`grant_at_once`, a direct run's first step) and, refused,
        /// appends it the usual way; then appends operation 2 and runs
        /// what was granted here.
        fn race_at_once(writes: &[bool; 3]) -> Arc<Self> {
            let m = Model::new(writes);
            let first = m.append(0..1);
            assert_eq!(first, [0], "the first access of an idle queue is granted at once");
            let completer = {
                let m = m.clone();
                loom::thread::spawn(move || m.run(first))
            };
            // SAFETY: this thread is the model's only appender.
            let at_once = unsafe { m.halves.queue().grant_at_once(&m.blocks, writes[1]) };
            let mut mine = Vec::new();
            if !at_once {
                mine = m.append(1..2);
            } else {
                // A direct run: operation 1 runs and, still the appender,
                // is released at once where nothing waits behind it.
                m.start(1);
                m.stop(1);
                // SAFETY: the only appender; operation 1 holds its access.
                if !unsafe { m.halves.queue().release_at_once(&m.blocks, writes[1]) } {
                    // SAFETY: as above, completed once.
                    mine.extend(unsafe { m.complete(writes[1]) });
                }
            }
            mine.extend(m.append(2..3));
            m.run(mine);
            completer.join().unwrap();
            m.check_end();
            m
        }
    }

    /// **grant at once** and **release at once** (a direct run) against
    /// the completion that parks the queue: a read asks to join a read as
    /// it ends, a write asks for the queue as a write completes. Granted,
    /// the access runs beside nothing it conflicts with and is released
    /// with plain stores only while nothing waits and no other read runs;
    /// refused, the queue is left as it was, and the usual append grants
    /// it once, in order. Catches a refusal that leaves a reader counted
    /// or the sentinel changed, and a release at once that parks the
    /// queue under a running read.
    #[test]
    fn an_access_is_granted_at_once_or_left_to_the_append() {
        loom::model(|| {
            let m = Model::race_at_once(&[false, false, true]);
            assert!(m.seq(0) < m.seq(2) && m.seq(1) < m.seq(2), "the write after both reads");
        });
        loom::model(|| {
            let m = Model::race_at_once(&[true, true, false]);
            assert!(m.seq(0) < m.seq(1) && m.seq(1) < m.seq(2), "in append order");
        });
    }

    /// **complete write** against **append write**: a writer completes
    /// while the appender queues three more writes, one of them granted
    /// directly and completed by the appender's thread. Catches a
    /// completion that touches `first_waiting` after parking the queue.
    #[test]
    fn writes_race_appends_and_completions() {
        loom::model(|| {
            let m = Model::race_one_completer(&[true; 4], 1, &[0]);
            assert!((0..3).all(|op| m.seq(op) < m.seq(op + 1)), "writes granted in append order");
        });
    }

    /// **complete read** (the last reader parking the queue) against a
    /// read that tries to join it: the read either joins the running read,
    /// or is queued and granted by its completion, or finds the queue idle
    /// and grants itself; the write behind it waits for both reads. Catches
    /// a join that does not re-check the count, a park that loses a filled
    /// sentinel, and a self-grant that leaves the cursor behind.
    #[test]
    fn a_read_joins_reads_as_they_end() {
        loom::model(|| {
            // The read is granted at once (the queue is idle).
            let m = Model::race_one_completer(&[false, false, true], 1, &[0]);
            assert!(m.seq(0) < m.seq(2) && m.seq(1) < m.seq(2), "the write after both reads");
        });
    }

    /// **complete write** granting a run of reads and parking the queue
    /// `READING`, against the appender adding a read (which joins them or
    /// is granted with them) and a write (which waits for all of them).
    #[test]
    fn granted_reads_park_while_reads_and_a_write_arrive() {
        loom::model(|| {
            // The write is granted, the read queued behind it.
            let m = Model::race_one_completer(&[true, false, false, true], 2, &[0]);
            assert!(m.seq(0) < m.seq(1) && m.seq(0) < m.seq(2), "the reads after the first write");
            assert!(m.seq(1) < m.seq(3) && m.seq(2) < m.seq(3), "the last write after the reads");
        });
    }

    /// **complete read** (twice, on two threads) against **append write**
    /// and **append read**: two granted reads complete while the appender
    /// queues a write and then two reads behind it. The write must wait for
    /// both reads and be granted once, by the last of them; the later reads
    /// must wait for the write.
    #[test]
    fn reads_race_a_queued_write_and_later_reads() {
        loom::model(|| {
            let m = Model::new(&[false, false, true, false]);
            let granted = m.append(0..2);
            assert_eq!(granted, vec![0, 1], "reads of an idle queue are granted at once");
            let readers: Vec<_> = granted
                .into_iter()
                .map(|op| {
                    let m = m.clone();
                    loom::thread::spawn(move || m.run(vec![op]))
                })
                .collect();
            let direct = m.append(2..4);
            m.run(direct);
            readers.into_iter().for_each(|r| r.join().unwrap());
            m.check_end();
            assert!(m.seq(2) < m.seq(3), "a read queued behind a write is granted after it");
        });
    }
}
