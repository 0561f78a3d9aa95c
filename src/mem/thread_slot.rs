//! Thread slots: a small index that one live thread holds alone.
//!
//! A counter that any thread may bump costs a locked instruction per bump
//! (and its line moves between the cores that bump it). Where the engine
//! keeps such a counter on a fast path (a wait answered at once, a helping
//! run), it keeps one copy per slot instead: the thread holding slot `i`
//! is the only writer of copy `i`, so it bumps it with a plain load and
//! store, and a reader sums the copies. Free operation blocks are cached
//! the same way (`pool::ThreadCaches`).
//!
//! # How slots are held
//!
//! The process has [`SLOTS`] of them, one bit each in a word. A thread
//! claims the lowest free bit the first time it asks
//! ([`current`]) and gives it back when it exits (a thread-local
//! destructor). A thread that finds every slot taken, or asks while its
//! thread-locals are being destroyed, gets `None` and uses the shared,
//! locked copy; so does every thread under loom, whose modelled threads
//! share one OS thread's thread-locals.
//!
//! # Invariants
//!
//! - While a thread holds slot `i`, no other thread holds it: the claim is
//!   a CAS setting the bit, the release clears it.
//! - Whatever a slot's last holder wrote happens-before its next holder
//!   starts: the release is a `Release` RMW and the claim an `Acquire` CAS
//!   on the same word. So a new holder that continues a count (load, add,
//!   store) starts from the last holder's final value.

use std::sync::atomic::{AtomicU64, Ordering};

/// How many threads can hold a slot at once.
pub(crate) const SLOTS: usize = 64;

/// A set of [`SLOTS`] slots: bit `i` set, slot `i` is held.
struct SlotSet(AtomicU64);

impl SlotSet {
    const fn new() -> Self {
        SlotSet(AtomicU64::new(0))
    }

    /// Claims the lowest free slot; `None` when all are held.
    fn claim(&self) -> Option<usize> {
        let mut held = self.0.load(Ordering::Relaxed);
        while held != u64::MAX {
            let bit = (!held).trailing_zeros();
            match self.0.compare_exchange_weak(held, held | 1 << bit, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return Some(bit as usize),
                Err(now) => held = now,
            }
        }
        None
    }

    /// Gives back a slot claimed from this set.
    fn release(&self, slot: usize) {
        self.0.fetch_and(!(1 << slot), Ordering::Release);
    }
}

/// The process's slots.
static PROCESS: SlotSet = SlotSet::new();

/// This thread's slot, given back when the thread exits.
struct Holder(Option<usize>);

impl Drop for Holder {
    fn drop(&mut self) {
        if let Some(slot) = self.0 {
            PROCESS.release(slot);
        }
    }
}

thread_local! {
    static SLOT: Holder = Holder(PROCESS.claim());
}

/// The slot this thread holds (claiming one on first use), if any.
#[inline]
pub(crate) fn current() -> Option<usize> {
    if cfg!(depengine_loom) {
        return None;
    }
    SLOT.try_with(|h| h.0).ok().flatten()
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_set_hands_out_each_slot_once_and_reuses_given_back_ones() {
        let set = SlotSet::new();
        let all: Vec<usize> = (0..SLOTS).map(|_| set.claim().expect("a free slot")).collect();
        assert_eq!(all, (0..SLOTS).collect::<Vec<_>>(), "lowest free first, each once");
        assert_eq!(set.claim(), None, "all held");
        set.release(37);
        set.release(5);
        assert_eq!(set.claim(), Some(5));
        assert_eq!(set.claim(), Some(37));
        assert_eq!(set.claim(), None);
    }

    #[test]
    fn live_threads_hold_distinct_slots() {
        // With more than `SLOTS` threads alive in the test binary, some
        // hold none (`None`); those that hold one must hold distinct ones.
        let mine = current();
        assert_eq!(current(), mine, "a thread keeps its slot (or its lack of one)");
        let barrier = std::sync::Barrier::new(8);
        let slots: Vec<Option<usize>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        let slot = current();
                        // Hold it until all eight have claimed theirs.
                        barrier.wait();
                        slot
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut seen: Vec<usize> = slots.iter().chain([&mine]).flatten().copied().collect();
        let held = seen.len();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), held, "two live threads held one slot: {slots:?}, this thread {mine:?}");
    }
}
