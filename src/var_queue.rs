#![doc = include_str!("../docs/var-queue.md")]

use crate::pool::{GiveBatch, Pool, Pooled, TakeCache, NIL};
use crate::sync::{AtomicU32, AtomicU64, Ordering, UnsafeCell};

const READERS_MASK: u64 = 0xFFFF_FFFF;
/// A granted write is running.
const WRITER: u64 = 1 << 32;
/// One queued (not yet granted) access.
const PENDING_ONE: u64 = 1 << 33;
const PENDING_SHIFT: u32 = 33;
/// [`VarQueue::front_group`]'s answer when the front group is a single write.
const WRITE_GROUP: u64 = u64::MAX;

#[inline(always)]
fn pending(state: u64) -> u64 {
    state >> PENDING_SHIFT
}

/// One queued access: MXNet's `VersionedVarBlock`.
#[derive(Debug)]
pub(crate) struct VarBlock {
    /// The operation (an index into the operation pool).
    opr: UnsafeCell<u32>,
    /// Whether the access is a write.
    write: UnsafeCell<bool>,
    /// The next block in the chain (`NIL` for the sentinel's spare).
    next: UnsafeCell<u32>,
    /// The pool's free list (`next` is a plain word, which a racing pool
    /// `take` must not read).
    free_link: AtomicU32,
}

impl Default for VarBlock {
    fn default() -> Self {
        VarBlock {
            opr: UnsafeCell::new(NIL),
            write: UnsafeCell::new(false),
            next: UnsafeCell::new(NIL),
            free_link: AtomicU32::new(NIL),
        }
    }
}

impl Pooled for VarBlock {
    fn free_link(&self) -> &AtomicU32 {
        &self.free_link
    }
}

// SAFETY: a block is written by the appender before it is published with a
// release CAS and read only by the granter after an acquire (module docs).
unsafe impl Sync for VarBlock {}

impl VarBlock {
    /// # Safety
    /// The caller must own the block (appender for the sentinel, granter for
    /// counted blocks), per the module invariants.
    #[inline(always)]
    unsafe fn read(&self) -> (u32, bool, u32) {
        // SAFETY: forwarded to the caller: no one writes the block meanwhile.
        unsafe { (self.opr.with(|p| *p), self.write.with(|p| *p), self.next.with(|p| *p)) }
    }
}

/// A variable's lock-free access queue (see the module docs).
#[derive(Debug)]
pub(crate) struct VarQueue {
    state: AtomicU64,
    /// Granter-owned: the oldest queued block, or the sentinel if none.
    first_waiting: UnsafeCell<u32>,
    /// Appender-owned: the empty block the next queued access fills.
    sentinel: UnsafeCell<u32>,
}

impl Default for VarQueue {
    fn default() -> Self {
        VarQueue { state: AtomicU64::new(0), first_waiting: UnsafeCell::new(NIL), sentinel: UnsafeCell::new(NIL) }
    }
}

// SAFETY: `sentinel` is touched only by the single appender and
// `first_waiting` only by the single granter (module docs, "State").
unsafe impl Sync for VarQueue {}

/// The result of one completing access: the operations it granted, at most
/// one write or any number of reads (a run of consecutive queued reads).
///
/// Each granted block is read once and collected in `freed`; the caller may
/// take that batch ([`take_freed`](Self::take_freed)) to give it back later
/// with others, or let the drop give it back at once.
pub(crate) struct Granted<'a> {
    blocks: &'a Pool<VarBlock>,
    next: u32,
    left: u64,
    freed: GiveBatch,
}

impl<'a> Granted<'a> {
    fn new(blocks: &'a Pool<VarBlock>, next: u32, left: u64) -> Self {
        Granted { blocks, next, left, freed: GiveBatch::EMPTY }
    }

    /// The blocks of the operations granted so far, now the caller's to give back.
    pub(crate) fn take_freed(&mut self) -> GiveBatch {
        std::mem::take(&mut self.freed)
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
        // SAFETY: the block was counted and granted by the CAS that created
        // this iterator; the granter (us) is its only owner (invariant 4).
        let (opr, _, next) = unsafe { self.blocks.get(b).read() };
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

impl VarQueue {
    /// Makes the queue ready for a (re)used variable: empty, with a sentinel.
    ///
    /// # Safety
    /// The caller owns the variable exclusively (it was just taken from the
    /// pool), so no other thread touches the queue.
    pub(crate) unsafe fn reset(&self, blocks: &Pool<VarBlock>) {
        debug_assert_eq!(self.state.load(Ordering::Relaxed), 0);
        // SAFETY: exclusive ownership, forwarded from the caller.
        unsafe {
            let mut s = self.sentinel.with(|p| *p);
            if s == NIL {
                s = blocks.take();
                blocks.get(s).next.with_mut(|p| *p = NIL);
                self.sentinel.with_mut(|p| *p = s);
            }
            self.first_waiting.with_mut(|p| *p = s);
        }
    }

    /// Gives the sentinel (and its spare) back; the variable is being freed.
    ///
    /// # Safety
    /// The queue must be idle (state 0) and exclusively owned.
    pub(crate) unsafe fn release(&self, blocks: &Pool<VarBlock>) {
        debug_assert_eq!(self.state.load(Ordering::Relaxed), 0, "freeing a busy variable");
        // SAFETY: exclusive ownership, forwarded from the caller.
        unsafe {
            let s = self.sentinel.with(|p| *p);
            if s != NIL {
                let spare = blocks.get(s).next.with(|p| *p);
                if spare != NIL {
                    blocks.give(spare);
                }
                blocks.give(s);
            }
            self.sentinel.with_mut(|p| *p = NIL);
            self.first_waiting.with_mut(|p| *p = NIL);
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
    pub(crate) unsafe fn append(&self, blocks: &Pool<VarBlock>, spares: &mut TakeCache, opr: u32, write: bool) -> bool {
        let mut state = self.state.load(Ordering::Acquire);
        let mut filled = false;
        loop {
            let grantable = if write { state == 0 } else { state & WRITER == 0 && pending(state) == 0 };
            if grantable {
                let new = if write { WRITER } else { state + 1 };
                match self.state.compare_exchange_weak(state, new, Ordering::AcqRel, Ordering::Acquire) {
                    // A filled but uncounted sentinel stays the sentinel.
                    Ok(_) => return true,
                    Err(actual) => {
                        state = actual;
                        continue;
                    }
                }
            }
            // SAFETY: the sentinel is appender-owned and uncounted; the
            // caller guarantees we are the only appender.
            let sentinel = unsafe { self.sentinel.with(|p| *p) };
            if !filled {
                let block = blocks.get(sentinel);
                // SAFETY: as above, nobody else reads an uncounted sentinel.
                unsafe {
                    block.opr.with_mut(|p| *p = opr);
                    block.write.with_mut(|p| *p = write);
                    if block.next.with(|p| *p) == NIL {
                        let spare = spares.take(blocks);
                        blocks.get(spare).next.with_mut(|p| *p = NIL);
                        block.next.with_mut(|p| *p = spare);
                    }
                }
                filled = true;
            }
            // Read before publishing: once counted, the block may be granted,
            // given back and reused before this thread looks at it again.
            // SAFETY: the filled sentinel is still appender-owned here.
            let spare = unsafe { blocks.get(sentinel).next.with(|p| *p) };
            debug_assert!(spare != NIL, "filled sentinel {sentinel} has no spare");
            match self.state.compare_exchange_weak(state, state + PENDING_ONE, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    // SAFETY: appender-owned; the spare becomes the sentinel.
                    unsafe { self.sentinel.with_mut(|p| *p = spare) };
                    return false;
                }
                Err(actual) => state = actual,
            }
        }
    }

    /// **complete read**: the calling operation's granted read is done.
    /// Returns the operations this grants (at most one write).
    ///
    /// # Safety
    /// The caller must hold a granted read on this queue and call this once.
    #[inline]
    pub(crate) unsafe fn complete_read<'a>(&self, blocks: &'a Pool<VarBlock>) -> Granted<'a> {
        let mut state = self.state.load(Ordering::Acquire);
        loop {
            debug_assert!(state & READERS_MASK > 0 && state & WRITER == 0, "complete_read without a read");
            let mut new = state - 1;
            let grant = new & READERS_MASK == 0 && pending(new) > 0;
            if grant {
                new = new - PENDING_ONE + WRITER;
            }
            match self.state.compare_exchange_weak(state, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) if grant => {
                    // SAFETY: our CAS made us the granter; the first waiting
                    // block is a counted write (invariant 3).
                    return unsafe { self.take_granted(blocks, 1) };
                }
                Ok(_) => return Granted::new(blocks, NIL, 0),
                Err(actual) => state = actual,
            }
        }
    }

    /// **complete write**: the calling operation's granted write is done.
    /// Returns the operations this grants (one write or a run of reads).
    ///
    /// # Safety
    /// The caller must hold the granted write on this queue and call this once.
    #[inline]
    pub(crate) unsafe fn complete_write<'a>(&self, blocks: &'a Pool<VarBlock>) -> Granted<'a> {
        let mut state = self.state.load(Ordering::Acquire);
        loop {
            debug_assert!(state & WRITER != 0, "complete_write without the write");
            let waiting = pending(state);
            let granted = if waiting == 0 {
                0
            } else {
                // SAFETY: while we hold the write nobody else grants, and the
                // first `waiting` blocks are counted, hence immutable.
                unsafe { self.front_group(blocks, waiting) }
            };
            let new = match granted {
                0 => state & !WRITER,
                WRITE_GROUP => state - PENDING_ONE, // WRITER stays set: handed over
                k => (state & !WRITER) - k * PENDING_ONE + k,
            };
            match self.state.compare_exchange_weak(state, new, Ordering::AcqRel, Ordering::Acquire) {
                // Nothing granted: the CAS released the queue, so this thread
                // must not touch `first_waiting` again (a later granter may
                // already own it; a late store would roll it back).
                Ok(_) if granted == 0 => return Granted::new(blocks, NIL, 0),
                Ok(_) => {
                    let count = if granted == WRITE_GROUP { 1 } else { granted };
                    // SAFETY: our CAS made us the granter of `count` blocks.
                    return unsafe { self.take_granted(blocks, count) };
                }
                Err(actual) => state = actual,
            }
        }
    }

    /// Counts the group at the front of the first `waiting` queued blocks:
    /// [`WRITE_GROUP`] for a write, else the number of consecutive reads.
    ///
    /// # Safety
    /// The caller must be the only possible granter and `waiting` blocks must
    /// be counted.
    unsafe fn front_group(&self, blocks: &Pool<VarBlock>, waiting: u64) -> u64 {
        // SAFETY: granter-owned field and counted blocks, per the caller.
        unsafe {
            let mut b = self.first_waiting.with(|p| *p);
            let (_, write, mut next) = blocks.get(b).read();
            if write {
                return WRITE_GROUP;
            }
            let mut reads = 1;
            while reads < waiting {
                b = next;
                let (_, write, n) = blocks.get(b).read();
                if write {
                    break;
                }
                next = n;
                reads += 1;
            }
            reads
        }
    }

    /// Advances `first_waiting` past `count` granted blocks and returns them.
    ///
    /// # Safety
    /// The caller's CAS must just have granted the first `count` blocks.
    unsafe fn take_granted<'a>(&self, blocks: &'a Pool<VarBlock>, count: u64) -> Granted<'a> {
        // SAFETY: granter-owned field; the granted blocks are ours to read.
        unsafe {
            let first = self.first_waiting.with(|p| *p);
            let mut b = first;
            for _ in 0..count {
                b = blocks.get(b).next.with(|p| *p);
            }
            debug_assert!(b != NIL, "granting {count} from block {first} walked off the chain");
            // Must precede handing any granted operation on (module docs).
            self.first_waiting.with_mut(|p| *p = b);
            Granted::new(blocks, first, count)
        }
    }

    /// Whether an access appended now would be granted at once with
    /// nothing queued before it: for a write, nothing granted or queued; for
    /// a read, no write granted and nothing queued (running reads are fine).
    /// Only the appender's answer is stable: nobody else can queue meanwhile.
    #[inline]
    pub(crate) fn grants_at_once(&self, write: bool) -> bool {
        let state = self.state.load(Ordering::Acquire);
        if write {
            state == 0
        } else {
            state & WRITER == 0 && pending(state) == 0
        }
    }

    /// Whether no access is granted or queued.
    #[cfg(test)]
    pub(crate) fn is_idle(&self) -> bool {
        self.state.load(Ordering::Acquire) == 0
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::*;

    fn queue(blocks: &Pool<VarBlock>) -> VarQueue {
        let q = VarQueue::default();
        // SAFETY: the queue is local to the test.
        unsafe { q.reset(blocks) };
        q
    }

    #[test]
    fn reads_share_writes_wait_in_order() {
        let blocks = Pool::new();
        let q = queue(&blocks);
        let mut spares = TakeCache::default();
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
            assert!(q.is_idle());
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
        let q = queue(&blocks);
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
                let mut spares = TakeCache::default();
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
        assert!(q.is_idle());
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
        queue: VarQueue,
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
                queue: VarQueue::default(),
                writes: writes.to_vec(),
                grants: writes.iter().map(|_| LoomU32::new(0)).collect(),
                grant_seq: writes.iter().map(|_| LoomU32::new(u32::MAX)).collect(),
                next_seq: LoomU32::new(0),
                running: LoomI64::new(0),
            };
            // SAFETY: not shared yet.
            unsafe { m.queue.reset(&m.blocks) };
            Arc::new(m)
        }

        /// Appends `ops` in order (the single appender); returns the ones
        /// granted at once.
        fn append(&self, ops: std::ops::Range<u32>) -> Vec<u32> {
            let mut spares = TakeCache::default();
            // SAFETY: each model has one appending thread at a time.
            let granted =
                ops.filter(|&op| unsafe { self.queue.append(&self.blocks, &mut spares, op, self.writes[op as usize]) });
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
                self.grants[op as usize].fetch_add(1, Ordering::SeqCst);
                let seq = self.next_seq.fetch_add(1, Ordering::SeqCst);
                self.grant_seq[op as usize].store(seq, Ordering::SeqCst);
                let weight = if write { WRITE_WEIGHT } else { 1 };
                let before = self.running.fetch_add(weight, Ordering::SeqCst);
                assert!(before == 0 || (!write && before < WRITE_WEIGHT), "op {op} (write: {write}) ran beside others");
                self.running.fetch_sub(weight, Ordering::SeqCst);
                // SAFETY: `op` holds its granted access and completes it once.
                mine.extend(unsafe {
                    if write {
                        self.queue.complete_write(&self.blocks)
                    } else {
                        self.queue.complete_read(&self.blocks)
                    }
                });
            }
        }

        fn check_end(&self) {
            let grants: Vec<u32> = self.grants.iter().map(|g| g.load(Ordering::SeqCst)).collect();
            assert_eq!(grants, vec![1; self.writes.len()], "each access granted exactly once");
            assert!(self.queue.is_idle());
            // SAFETY: idle and no longer shared.
            unsafe { self.queue.release(&self.blocks) };
        }

        fn seq(&self, op: usize) -> u32 {
            self.grant_seq[op].load(Ordering::SeqCst)
        }
    }

    /// **complete write** against **append write**: a writer completes
    /// while the appender queues three more writes, one of them granted
    /// directly and completed by the appender's thread. Catches a
    /// completion that stores `first_waiting` after releasing the queue
    /// (the cursor rolls back and an operation is granted twice).
    #[test]
    fn writes_race_appends_and_completions() {
        loom::model(|| {
            let m = Model::new(&[true; 4]);
            let first = m.append(0..1);
            let completer = {
                let m = m.clone();
                loom::thread::spawn(move || m.run(first))
            };
            let direct = m.append(1..4);
            m.run(direct);
            completer.join().unwrap();
            m.check_end();
            assert!((0..3).all(|op| m.seq(op) < m.seq(op + 1)), "writes granted in append order");
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
