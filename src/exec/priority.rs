//! The priority pool of the per_device engine: ready `CpuPrioritized`
//! operations, served by every CPU worker before its normal work.
//!
//! One bounded ready ring per priority level and a 64-bit mask of the
//! levels that may hold work. Priorities −32..=31 each have their own level
//! (higher runs first, equal ones in the order they became ready); beyond
//! that range they share the end levels. Lock-free and allocation-free.
//!
//! # The mask
//!
//! A pusher puts the operation on its level's ring, then sets the level's
//! bit with a read-modify-write. A taker looks at the highest set bit; if
//! that ring turns out empty it clears the bit and then looks at the ring
//! again, setting the bit back if something arrived meanwhile. So a bit may
//! be set for an empty ring (costing one failed pop), but a non-empty ring
//! always ends up with its bit set once its push has returned. (The loom
//! model below found that the pusher may not skip the RMW when it sees the
//! bit already set.)

use super::ready_ring::ReadyRing;
use crate::sync::{AtomicU64, Ordering};

/// Priority levels (bits of the mask).
const LEVELS: usize = 64;
/// Ready operations each level holds; a full level's pushes are refused.
const LEVEL_CAPACITY: usize = if cfg!(depengine_loom) { 2 } else { 256 };

pub(crate) struct PriorityPool {
    levels: Box<[ReadyRing]>,
    mask: AtomicU64,
}

impl Default for PriorityPool {
    fn default() -> Self {
        PriorityPool { levels: (0..LEVELS).map(|_| ReadyRing::new(LEVEL_CAPACITY)).collect(), mask: AtomicU64::new(0) }
    }
}

impl PriorityPool {
    /// The level of `priority`.
    fn level(priority: i32) -> usize {
        (priority.clamp(-32, 31) + 32) as usize
    }

    /// Adds a ready operation; hands it back when its level is full.
    pub(crate) fn push(&self, op: u32, priority: i32) -> Result<(), u32> {
        let level = Self::level(priority);
        self.levels[level].push(op)?;
        // Always a read-modify-write, never "load, and set if clear": a
        // plain load could see the bit before a taker clears it while the
        // ring store above is not yet visible to that taker (store→load
        // reordering), losing the operation. As an RMW it either comes
        // after the clear (setting the bit again) or before it (and the
        // taker's clear, reading from it, sees the ring store).
        self.mask.fetch_or(1u64 << level, Ordering::SeqCst);
        Ok(())
    }

    /// Takes the oldest operation of the highest non-empty level.
    pub(crate) fn pop(&self) -> Option<u32> {
        loop {
            let mask = self.mask.load(Ordering::SeqCst);
            if mask == 0 {
                return None;
            }
            let level = 63 - mask.leading_zeros() as usize;
            if let Some(op) = self.levels[level].pop() {
                return Some(op);
            }
            let bit = 1u64 << level;
            self.mask.fetch_and(!bit, Ordering::SeqCst);
            if !self.levels[level].is_empty() {
                self.mask.fetch_or(bit, Ordering::SeqCst);
            }
        }
    }

    /// Whether some level may hold work (a hint).
    pub(crate) fn may_have_work(&self) -> bool {
        self.mask.load(Ordering::SeqCst) != 0
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::*;

    #[test]
    fn higher_priorities_first_and_equal_ones_in_order() {
        let pool = PriorityPool::default();
        for (op, priority) in [(0, 1), (1, 5), (2, 1), (3, -3), (4, 5), (5, 100), (6, 31)] {
            pool.push(op, priority).unwrap();
        }
        let order: Vec<u32> = std::iter::from_fn(|| pool.pop()).collect();
        // 100 and 31 share the top level, in the order they arrived.
        assert_eq!(order, [5, 6, 1, 4, 0, 2, 3]);
        assert!(!pool.may_have_work());
    }

    #[test]
    fn a_full_level_refuses() {
        let pool = PriorityPool::default();
        for op in 0..LEVEL_CAPACITY as u32 {
            pool.push(op, 0).unwrap();
        }
        assert_eq!(pool.push(999, 0), Err(999));
        assert_eq!(pool.push(7, 1), Ok(()));
    }
}

/// Loom model of the mask protocol (`--cfg depengine_loom`; see
/// `loom_tests/README.md`).
#[cfg(all(test, depengine_loom))]
mod loom_models {
    use super::*;
    use loom::sync::Arc;

    /// A taker that finds a stale bit (its level emptied by an earlier
    /// take) clears it while a push to that level lands: the pushed
    /// operation must still be found afterwards (its bit set again), and
    /// taken exactly once.
    #[test]
    fn a_push_racing_a_bit_clear_is_not_lost() {
        loom::model(|| {
            let pool = Arc::new(PriorityPool::default());
            pool.push(5, 0).unwrap();
            assert_eq!(pool.levels[PriorityPool::level(0)].pop(), Some(5)); // leaves the bit set
            let taker = {
                let pool = pool.clone();
                loom::thread::spawn(move || pool.pop())
            };
            pool.push(7, 0).unwrap();
            let raced = taker.join().unwrap();
            let after = pool.pop();
            let taken: Vec<u32> = raced.into_iter().chain(after).collect();
            assert_eq!(taken, [7], "taken once, and found after the push returned");
            assert_eq!(pool.pop(), None);
        });
    }

    /// Two levels pushed from two threads while a third takes: both are
    /// taken once, and once both pushes returned the higher level goes
    /// first.
    #[test]
    fn two_levels_each_taken_once() {
        loom::model(|| {
            let pool = Arc::new(PriorityPool::default());
            let (p1, p2) = (pool.clone(), pool.clone());
            let low = loom::thread::spawn(move || p1.push(1, -1).unwrap());
            let high = loom::thread::spawn(move || p2.push(2, 5).unwrap());
            let raced = pool.pop();
            low.join().unwrap();
            high.join().unwrap();
            let mut taken: Vec<u32> = raced.into_iter().collect();
            let rest: Vec<u32> = std::iter::from_fn(|| pool.pop()).collect();
            if rest.len() == 2 {
                assert_eq!(rest, [2, 1], "higher level first");
            }
            taken.extend(rest);
            taken.sort_unstable();
            assert_eq!(taken, [1, 2]);
        });
    }
}
