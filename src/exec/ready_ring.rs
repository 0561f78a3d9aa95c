//! A bounded lock-free MPMC ring of ready operations (Dmitry Vyukov's
//! bounded queue): each cell carries a sequence number that says whose turn
//! it is, so producers and consumers only contend on their own position
//! counter and never allocate.
//!
//! # Invariants
//!
//! - Cell `i` is writable by the producer that claimed position `p` when
//!   `seq == p`, and readable by the consumer that claimed `p` when
//!   `seq == p + 1`; after reading it sets `seq = p + capacity`.
//! - The value store happens-before the reader's load through the release
//!   store / acquire load of `seq`.

use crate::sync::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use crossbeam_utils::CachePadded;

struct Cell {
    seq: AtomicUsize,
    value: AtomicU32,
    /// The producer's hint that a thread is about to wait for this
    /// operation (`push_marked`); fits in the cell's padding.
    marked: AtomicBool,
}

/// A bounded multi-producer multi-consumer queue of operation indices.
pub(crate) struct ReadyRing {
    cells: Box<[Cell]>,
    mask: usize,
    head: CachePadded<AtomicUsize>,
    tail: CachePadded<AtomicUsize>,
}

impl ReadyRing {
    /// A ring of `capacity` (rounded up to a power of two) slots.
    pub(crate) fn new(capacity: usize) -> Self {
        let capacity = capacity.next_power_of_two().max(2);
        ReadyRing {
            cells: (0..capacity)
                .map(|i| Cell { seq: AtomicUsize::new(i), value: AtomicU32::new(0), marked: AtomicBool::new(false) })
                .collect(),
            mask: capacity - 1,
            head: CachePadded::new(AtomicUsize::new(0)),
            tail: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    /// Enqueues `op`, or hands it back when the ring is full.
    pub(crate) fn push(&self, op: u32) -> Result<(), u32> {
        self.push_marked(op, false)
    }

    /// Enqueues `op` with a mark that consumers may read at the head
    /// ([`ReadyRing::only_marked`]), or hands it back when the ring is
    /// full.
    pub(crate) fn push_marked(&self, op: u32, marked: bool) -> Result<(), u32> {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let cell = &self.cells[pos & self.mask];
            let seq = cell.seq.load(Ordering::Acquire);
            let diff = seq as isize - pos as isize;
            if diff == 0 {
                // `SeqCst` on success (the same locked instruction on
                // x86): a spinner that stops (a `SeqCst` read-modify-write)
                // and then counts the ready work ([`len`](Self::len),
                // `SeqCst` loads) sees this claim, or the publisher's
                // `SeqCst` look for spinners sees it gone
                // (`Sleep::notify_one`; `docs/worker-sleep.md`, item 6).
                match self.tail.compare_exchange_weak(pos, pos + 1, Ordering::SeqCst, Ordering::Relaxed) {
                    Ok(_) => {
                        cell.value.store(op, Ordering::Relaxed);
                        cell.marked.store(marked, Ordering::Relaxed);
                        cell.seq.store(pos + 1, Ordering::Release);
                        return Ok(());
                    }
                    Err(actual) => pos = actual,
                }
            } else if diff < 0 {
                return Err(op);
            } else {
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Dequeues the oldest operation, if any.
    pub(crate) fn pop(&self) -> Option<u32> {
        let mut pos = self.head.load(Ordering::Relaxed);
        loop {
            let cell = &self.cells[pos & self.mask];
            let seq = cell.seq.load(Ordering::Acquire);
            let diff = seq as isize - (pos + 1) as isize;
            if diff == 0 {
                match self.head.compare_exchange_weak(pos, pos + 1, Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => {
                        let op = cell.value.load(Ordering::Relaxed);
                        cell.seq.store(pos + self.mask + 1, Ordering::Release);
                        return Some(op);
                    }
                    Err(actual) => pos = actual,
                }
            } else if diff < 0 {
                return None;
            } else {
                pos = self.head.load(Ordering::Relaxed);
            }
        }
    }

    /// How many operations the ring holds (a hint: it may change at once).
    pub(crate) fn len(&self) -> usize {
        let head = self.head.load(Ordering::SeqCst);
        self.tail.load(Ordering::SeqCst).saturating_sub(head)
    }

    /// Whether the ring has no operation ready to pop (a hint: it may
    /// change at once).
    ///
    /// Looks at the head cell rather than comparing the counters: a
    /// producer that has claimed a position but not yet published its cell
    /// does not count, so a worker told "not empty" finds the operation
    /// when it pops instead of spinning on a cell it cannot take yet.
    pub(crate) fn is_empty(&self) -> bool {
        let pos = self.head.load(Ordering::SeqCst);
        let seq = self.cells[pos & self.mask].seq.load(Ordering::SeqCst);
        // `seq == pos`: nothing published at the head yet. Anything larger
        // than `pos + 1` means another consumer moved on meanwhile: report
        // "not empty" and let the caller's pop look again.
        seq == pos
    }

    /// Whether the one operation published at the head is marked and no
    /// second one follows it (a hint, like `is_empty`: a spinner leaves
    /// such an operation to the thread that pushed it). Like `is_empty` it
    /// reads the head counter and the head cells but not the tail counter,
    /// so a spinner polling it does not pull the line every push writes.
    pub(crate) fn only_marked(&self) -> bool {
        let pos = self.head.load(Ordering::SeqCst);
        let first = &self.cells[pos & self.mask];
        // `seq == pos + 1`: published, and the Acquire orders the mark's
        // store (before the producer's Release of `seq`) before our load.
        // (Should a consumer take the cell and a producer reuse it
        // meanwhile, the mark read is a later lap's, which a hint may be.)
        if first.seq.load(Ordering::Acquire) != pos + 1 || !first.marked.load(Ordering::Relaxed) {
            return false;
        }
        // The next cell reads `seq == pos + 1` until a producer publishes it.
        self.cells[(pos + 1) & self.mask].seq.load(Ordering::SeqCst) == pos + 1
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::*;

    #[test]
    fn fifo_and_full() {
        let r = ReadyRing::new(4);
        for i in 0..4 {
            r.push(i).unwrap();
        }
        assert_eq!(r.push(9), Err(9));
        assert_eq!((0..4).map(|_| r.pop().unwrap()).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        assert_eq!(r.pop(), None);
        assert!(r.is_empty());
    }

    #[test]
    fn only_marked_is_a_lone_marked_head_across_the_wrap() {
        let r = ReadyRing::new(2);
        for lap in 0..3 {
            assert!(!r.only_marked(), "empty, lap {lap}");
            r.push_marked(1, true).unwrap();
            assert!(r.only_marked(), "one marked, lap {lap}");
            r.push(2).unwrap();
            assert!(!r.only_marked(), "a second behind it, lap {lap}");
            assert_eq!(r.pop(), Some(1));
            assert!(!r.only_marked(), "one unmarked, lap {lap}");
            assert_eq!(r.pop(), Some(2));
        }
    }

    #[test]
    fn stress_every_item_once() {
        let r = ReadyRing::new(64);
        let seen: Vec<AtomicU32> = (0..40_000).map(|_| AtomicU32::new(0)).collect();
        std::thread::scope(|s| {
            for p in 0..2u32 {
                let r = &r;
                s.spawn(move || {
                    for i in 0..20_000u32 {
                        let mut v = p * 20_000 + i;
                        while let Err(back) = r.push(v) {
                            v = back;
                            std::hint::spin_loop();
                        }
                    }
                });
            }
            for _ in 0..2 {
                let (r, seen) = (&r, &seen);
                s.spawn(move || {
                    let mut got = 0;
                    while got < 20_000 {
                        if let Some(v) = r.pop() {
                            seen[v as usize].fetch_add(1, Ordering::Relaxed);
                            got += 1;
                        }
                    }
                });
            }
        });
        assert!(seen.iter().all(|c| c.load(Ordering::Relaxed) == 1), "an item lost or duplicated");
    }
}
