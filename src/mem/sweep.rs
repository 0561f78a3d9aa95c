//! Sweeping: variable blocks taken again in index order.
//!
//! A variable block is taken by the dispatcher's combiner (the pushing
//! side) as the spare behind a queued access, and dies on a worker, once
//! the completion that grants its access has read it (`var_queue.rs`).
//! Given back through the pool's free list, a block is written by that
//! worker (its free link) and taken again at once, so the combiner's first
//! touch of every spare waited for a line that another core held
//! modified, and the free chain's order scattered those touches over
//! lines that workers were still reading. A profile of per_device
//! `layered` at W = 0 put 46 % of `dispatch` on that one load.
//!
//! Here the granter leaves the block's line alone: it sets the block's bit
//! in the pool's [`SweepSet`], one bit per index in words of 64 beside
//! each pool segment, batched per word ([`SweepBatch`]). The combiner's
//! [`SweepCache`] claims whole words (one swap each) and hands their
//! indices out in ascending order, moving on through the pool's indices
//! and wrapping around. So spares come in address order, four to a line
//! and lines in sequence, as the hardware prefetcher likes them; and a
//! block comes back only after the sweep has gone once around every index,
//! by when the worker that read it has long moved on. Until the pool holds
//! [`SWEEP_ROUND`](crate::base::tuning::SWEEP_ROUND) blocks (the threaded engines' pools,
//! `Pool::sweeping_from`, allocated when the engine is built) the cache
//! takes fresh ones instead, so that one round is long: 255 KiB of
//! variable blocks per engine. perf/journal/2026-11-25.md, "Changes of 2026-11-25", has the
//! figures.
//!
//! Whatever the pool serves a cache fresh comes a group at a time: the
//! indices of one 128-byte span ([`Pool::take_fresh_group`]), handed out
//! by that cache alone as a claimed word's are. A claimed word is one
//! cache's too, so two dispatch shards' combiners (two pushing threads)
//! never get blocks that share a line, and neither do the sentinels
//! their variables keep while their pushes run directly
//! ([`SweepCache::take_from_pool`] has the figures).
//!
//! # Invariants
//!
//! - A bit is set only by the index's owner, which gives up the index by
//!   setting it (release); a bit is cleared only by the claim that takes
//!   the whole word (acquire swap), which makes the claimer the owner of
//!   every index whose bit it took. So an index has one owner at a time,
//!   and everything its last owner did happens-before the next owner's
//!   first touch.
//! - A claimed word's bits belong to the claiming cache until it hands the
//!   indices out or gives the rest back ([`SweepCache::give_back`]).
//! - A free index lives either in the pool's free list or in the sweep
//!   set, never both: blocks that die anywhere but in a grant (a freed
//!   variable's sentinel, a lost park race) still go to the free list.
//!
//! A full round that finds no set bit (everything is live) makes the next
//! takes come from the pool (its free list, else fresh indices), as many
//! as the round had words, so that a set with nothing in it costs at most
//! about one word per take.

use crate::mem::pool::{segment_len, segment_of, segment_start, Pool, Pooled, NIL, SEGMENTS, SEGMENT_BASE};
use crate::sync::{AtomicPtr, AtomicU64, Ordering};
use std::ptr;

/// Bits per word of the set.
const WORD_BITS: u32 = 64;

/// Words beside segment `seg` (one bit per index of the segment).
#[inline(always)]
fn words_in(seg: usize) -> usize {
    segment_len(seg).div_ceil(WORD_BITS as usize)
}

/// Where index `index`'s bit lives: (segment, word in segment, bit).
#[inline(always)]
fn bit_of(index: u32) -> (usize, usize, u32) {
    let seg = segment_of(index);
    let offset = index - segment_start(seg);
    (seg, (offset / WORD_BITS) as usize, offset % WORD_BITS)
}

/// The first index of the word that holds `index`'s bit. Where segments
/// start on word boundaries (every build but loom's, whose segments are
/// small), that is `index` with its bit cleared: no segment to find, which
/// takes a logarithm.
#[inline(always)]
fn word_start(index: u32) -> u32 {
    if SEGMENT_BASE.is_multiple_of(WORD_BITS) {
        index & !(WORD_BITS - 1)
    } else {
        let (seg, word, _) = bit_of(index);
        index_of(seg, word, 0)
    }
}

/// The index of bit `bit` of word `word` of segment `seg`.
#[inline(always)]
fn index_of(seg: usize, word: usize, bit: u32) -> u32 {
    segment_start(seg) + word as u32 * WORD_BITS + bit
}

/// The free indices of a pool that wait to be swept (module docs): a word
/// array beside each of its segments, allocated by the first give into
/// that segment (warm-up).
pub(crate) struct SweepSet {
    words: [AtomicPtr<AtomicU64>; SEGMENTS],
}

impl Default for SweepSet {
    fn default() -> Self {
        SweepSet { words: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())) }
    }
}

impl SweepSet {
    /// Word `word` of segment `seg`'s array, allocating the array if it
    /// is not there yet.
    #[inline]
    fn word(&self, seg: usize, word: usize) -> &AtomicU64 {
        let mut words = self.words[seg].load(Ordering::Acquire);
        if words.is_null() {
            words = self.allocate(seg);
        }
        // SAFETY: `words` points at an array of `words_in(seg)` words that
        // lives as long as `self` (freed only in `drop`), and `word` is
        // below that (it comes from an index of segment `seg`).
        unsafe { &*words.add(word) }
    }

    /// Word `word` of segment `seg`, or `None` if nothing was ever given
    /// into that segment.
    #[inline]
    fn word_if_any(&self, seg: usize, word: usize) -> Option<&AtomicU64> {
        let words = self.words[seg].load(Ordering::Acquire);
        // SAFETY: as in `word`.
        (!words.is_null()).then(|| unsafe { &*words.add(word) })
    }

    /// Segment `seg`'s word array, allocated if it is not there yet.
    #[cold]
    pub(crate) fn allocate(&self, seg: usize) -> *mut AtomicU64 {
        let existing = self.words[seg].load(Ordering::Acquire);
        if !existing.is_null() {
            return existing;
        }
        let fresh: Box<[AtomicU64]> = (0..words_in(seg)).map(|_| AtomicU64::new(0)).collect();
        let fresh = Box::into_raw(fresh) as *mut AtomicU64;
        match self.words[seg].compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => fresh,
            Err(theirs) => {
                // SAFETY: `fresh` came from `Box::into_raw` of a slice of
                // this length just above and was never published.
                drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(fresh, words_in(seg))) });
                theirs
            }
        }
    }

    /// Free indices in the set. Exact only when nobody gives or claims
    /// meanwhile, like `Pool::live`.
    pub(crate) fn len(&self) -> usize {
        (0..SEGMENTS)
            .flat_map(|seg| (0..words_in(seg)).map_while(move |w| self.word_if_any(seg, w)))
            .map(|word| word.load(Ordering::Acquire).count_ones() as usize)
            .sum()
    }
}

impl Drop for SweepSet {
    fn drop(&mut self) {
        for (seg, words) in self.words.iter().enumerate() {
            let p = words.load(Ordering::Acquire);
            if !p.is_null() {
                // SAFETY: every non-null array came from `Box::into_raw` of a
                // slice of `words_in(seg)` words, and `&mut self` proves no
                // reference into it is alive.
                drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(p, words_in(seg))) });
            }
        }
    }
}

/// Indices given up by one thread and not yet put in the set: the bits of
/// one word, set in it with one `fetch_or` when an index of another word
/// comes, or on [`flush`](Self::flush). Blocks die in about the order they
/// were taken, so consecutive ones mostly share a word.
#[derive(Debug, Clone, Copy)]
#[must_use = "a batch holds indices until it is flushed"]
pub(crate) struct SweepBatch {
    /// The first index of the word ([`word_start`]): one compare tells
    /// whether another batch is of the same word.
    first: u32,
    /// Bit `i`: index `first + i`.
    mask: u64,
}

impl Default for SweepBatch {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl SweepBatch {
    /// A batch with nothing in it.
    pub(crate) const EMPTY: SweepBatch = SweepBatch { first: 0, mask: 0 };

    /// Gives up `index` (the caller's own) into the batch.
    #[inline]
    pub(crate) fn add<T: Pooled>(&mut self, pool: &Pool<T>, index: u32) {
        pool.mark_owned(index, false);
        let first = word_start(index);
        self.append(pool, SweepBatch { first, mask: 1 << (index - first) });
    }

    /// Moves `other`'s indices into this batch; flushes this one's first
    /// when they are of another word.
    #[inline]
    pub(crate) fn append<T: Pooled>(&mut self, pool: &Pool<T>, other: SweepBatch) {
        if other.mask == 0 {
            return;
        }
        if self.mask != 0 && self.first != other.first {
            self.flush(pool);
        }
        self.first = other.first;
        self.mask |= other.mask;
    }

    /// Whether the batch holds nothing.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.mask == 0
    }

    /// Puts the batch's indices in the pool's set.
    #[inline]
    pub(crate) fn flush<T: Pooled>(&mut self, pool: &Pool<T>) {
        if self.mask != 0 {
            let (seg, word, _) = bit_of(self.first);
            pool.swept().word(seg, word).fetch_or(self.mask, Ordering::Release);
            self.mask = 0;
        }
    }
}

/// The taker's side: the word it claimed last and where the sweep is
/// (module docs). One thread at a time (the caller guarantees it: the
/// dispatcher's combiner). Indices claimed and not handed out count as
/// live in `Pool::live` until [`give_back`](Self::give_back).
#[derive(Debug, Default)]
pub(crate) struct SweepCache {
    /// The claimed word's segment and position in it.
    seg: usize,
    word: usize,
    /// Its bits not handed out yet.
    bits: u64,
    /// The index of its bit 0 (`index_of(seg, word, 0)`, computed once
    /// per claim rather than per take).
    first: u32,
    /// Takes left that go to the pool after a round found nothing.
    from_pool: usize,
}

impl SweepCache {
    /// Takes an index: the next claimed one in index order, else one from
    /// the pool (its free list, else a fresh group) while the pool is
    /// smaller than its `sweep_from` or after a round that found nothing.
    #[inline]
    pub(crate) fn take<T: Pooled>(&mut self, pool: &Pool<T>) -> u32 {
        if self.bits == 0 && !self.claim(pool) {
            return self.take_from_pool(pool);
        }
        let index = self.first + self.bits.trailing_zeros();
        self.bits &= self.bits - 1;
        pool.mark_owned(index, true);
        if self.bits != 0 {
            pool.prefetch(self.first + self.bits.trailing_zeros());
        }
        index
    }

    /// A take that the pool serves: a freed index from its free list, else
    /// a fresh group ([`Pool::take_fresh_group`]), whose first index it
    /// hands out now and the rest on the next takes, as it would a claimed
    /// word's. One index at a time, fresh takes of two caches (two dispatch
    /// shards, each its pushing thread's) alternated: four variable blocks
    /// share a line, and where two pushers' variables each had such a
    /// block for its sentinel, each push waited for the line to come back
    /// from the other pusher's core (two pushers' `chain` running on the
    /// pusher: 13–15 ns/op, or 23–44 in a run where the two sentinels
    /// shared a line; perf/journal/2026-11-30-scale-out.md).
    #[cold]
    #[inline(never)]
    fn take_from_pool<T: Pooled>(&mut self, pool: &Pool<T>) -> u32 {
        let listed = pool.take_listed();
        if listed != NIL {
            return listed;
        }
        let first = pool.take_fresh_group();
        let n = Pool::<T>::group_len();
        if n > 1 {
            // The group lies in one word of the set (64 is a multiple of
            // its length): the rest are handed out as a claimed word's
            // bits, and `give_back` returns what is left to the set.
            let start = word_start(first);
            self.first = start;
            self.bits = (u64::MAX >> (WORD_BITS - n)) << (first - start) & !(1 << (first - start));
        }
        pool.mark_owned(first, true);
        first
    }

    /// Moves on through the set until a word with bits is claimed; `false`
    /// when the pool is to serve this take instead.
    #[inline(never)]
    fn claim<T: Pooled>(&mut self, pool: &Pool<T>) -> bool {
        let used = pool.capacity_used() as u32;
        if used < pool.sweep_from() || used == 0 {
            return false;
        }
        if self.from_pool > 0 {
            self.from_pool -= 1;
            return false;
        }
        let last_seg = segment_of(used - 1);
        let round: usize = (0..=last_seg).map(words_in).sum();
        let mut visited = 0;
        loop {
            self.word += 1;
            if self.seg > last_seg || self.word >= words_in(self.seg) {
                self.word = 0;
                self.seg = if self.seg >= last_seg { 0 } else { self.seg + 1 };
            }
            if let Some(word) = pool.swept().word_if_any(self.seg, self.word) {
                self.bits = word.swap(0, Ordering::Acquire);
                if self.bits != 0 {
                    self.first = index_of(self.seg, self.word, 0);
                    return true;
                }
            }
            visited += 1;
            if visited > round {
                // A whole round found nothing: as many takes as it had
                // words come from the pool.
                self.from_pool = visited;
                return false;
            }
        }
    }

    /// Puts the claimed indices not handed out back in the set.
    pub(crate) fn give_back<T: Pooled>(&mut self, pool: &Pool<T>) {
        // The bits left are of the claimed word and still free (`take`
        // marks an index owned only as it hands it out): they go back as
        // they came, with one `fetch_or`.
        let mut rest = SweepBatch { first: self.first, mask: self.bits };
        self.bits = 0;
        rest.flush(pool);
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::*;
    use crate::base::tuning::SWEEP_ROUND;
    use crate::mem::pool::Tagged;
    use std::collections::HashSet;

    /// A pool that sweeps from `SWEEP_ROUND`, with `n` indices taken.
    fn pool_of(n: u32) -> (Pool<Tagged>, Vec<u32>) {
        let pool = Pool::new().sweeping_from(SWEEP_ROUND);
        let all = (0..n).map(|_| pool.take()).collect();
        (pool, all)
    }

    #[test]
    fn bits_map_every_index_to_its_own_place() {
        let mut seen = HashSet::new();
        for i in 0..100_000 {
            let (seg, word, bit) = bit_of(i);
            assert!(word < words_in(seg));
            assert_eq!(index_of(seg, word, bit), i);
            assert_eq!(word_start(i), index_of(seg, word, 0), "index {i}");
            assert!(seen.insert((seg, word, bit)));
        }
    }

    #[test]
    fn a_small_pool_is_not_swept() {
        let (pool, all) = pool_of(100);
        let mut batch = SweepBatch::EMPTY;
        all.iter().for_each(|&i| batch.add(&pool, i));
        batch.flush(&pool);
        assert_eq!(pool.swept().len(), 100);
        let mut cache = SweepCache::default();
        let i = cache.take(&pool);
        let n = Pool::<Tagged>::group_len();
        assert_eq!(i, 100u32.next_multiple_of(n), "below `sweep_from` a take is fresh: a group's first");
        pool.give(i);
        cache.give_back(&pool);
    }

    /// Past `sweep_from`, given-up indices come back once each, in index
    /// order, whatever order they were given up in; then the pool serves.
    #[test]
    fn a_sweep_hands_out_each_given_index_once_in_order() {
        let (pool, all) = pool_of(SWEEP_ROUND + 1_000);
        let mut given: Vec<u32> = all.iter().copied().filter(|i| i % 3 == 0).collect();
        given.reverse();
        let mut batch = SweepBatch::EMPTY;
        given.iter().for_each(|&i| batch.add(&pool, i));
        batch.flush(&pool);
        assert_eq!(pool.swept().len(), given.len());
        let mut cache = SweepCache::default();
        let mut got: Vec<u32> = (0..given.len()).map(|_| cache.take(&pool)).collect();
        // The sweep starts after word 0 and wraps around to it.
        let first_round = got.iter().position(|&i| i < got[0]).unwrap_or(got.len());
        assert!(got[..first_round].windows(2).all(|w| w[0] < w[1]), "ascending within a round");
        assert!(got[first_round..].windows(2).all(|w| w[0] < w[1]));
        got.sort_unstable();
        given.sort_unstable();
        assert_eq!(got, given, "each given index exactly once");
        assert_eq!(pool.swept().len(), 0);
        let fresh = cache.take(&pool);
        assert_eq!(fresh, SWEEP_ROUND + 1_000, "an empty set sends the take to the pool");
        for i in got.into_iter().chain([fresh]) {
            pool.give(i);
        }
    }

    /// Two caches (two dispatch shards' combiners) that the pool serves in
    /// turns, as while a two-pusher program warms up, never hand out
    /// indices of one `GROUP_BYTES` span between them: no spare or
    /// sentinel of one shares a line with one of the other's.
    #[test]
    fn two_caches_served_by_the_pool_share_no_span() {
        let (pool, all) = pool_of(10);
        let n = Pool::<Tagged>::group_len();
        assert!(n > 1, "Tagged's slots are grouped");
        let span = |i: u32| i / n;
        let (mut a, mut b) = (SweepCache::default(), SweepCache::default());
        let (mut from_a, mut from_b) = (Vec::new(), Vec::new());
        for _ in 0..5 * n {
            from_a.push(a.take(&pool));
            from_b.push(b.take(&pool));
        }
        let spans_a: HashSet<u32> = from_a.iter().map(|&i| span(i)).collect();
        let spans_b: HashSet<u32> = from_b.iter().map(|&i| span(i)).collect();
        assert!(spans_a.is_disjoint(&spans_b), "shared spans: {from_a:?} {from_b:?}");
        let handed: HashSet<u32> = from_a.iter().chain(&from_b).chain(&all).copied().collect();
        assert_eq!(handed.len(), all.len() + 10 * n as usize, "each index handed out once");
        a.give_back(&pool);
        b.give_back(&pool);
        for i in handed {
            pool.give(i);
        }
        assert_eq!(pool.live(), 0, "whatever the caches held is free again");
    }

    #[test]
    fn claimed_indices_given_back_are_in_the_set_again() {
        let (pool, all) = pool_of(SWEEP_ROUND + 64);
        let mut batch = SweepBatch::EMPTY;
        all[..10].iter().for_each(|&i| batch.add(&pool, i));
        batch.flush(&pool);
        let mut cache = SweepCache::default();
        let first = cache.take(&pool);
        assert_eq!(first, 0);
        cache.give_back(&pool);
        assert_eq!(pool.swept().len(), 9);
        pool.give(first);
    }

    /// Blocks given up on two threads while a third sweeps: no index is
    /// handed out while another owner holds it.
    #[test]
    fn stress_givers_against_a_sweeper() {
        use std::sync::atomic::AtomicU32 as StdU32;
        let (pool, all) = pool_of(SWEEP_ROUND + 4_096);
        let owner: Vec<StdU32> = all.iter().map(|_| StdU32::new(0)).collect();
        let (to_give, from_sweep) = (std::sync::Mutex::new(all.clone()), std::sync::Mutex::new(Vec::new()));
        let (taken, givers_done) = (StdU32::new(0), StdU32::new(0));
        std::thread::scope(|s| {
            for t in 1..=2 {
                let (pool, owner, to_give, from_sweep, givers_done) =
                    (&pool, &owner, &to_give, &from_sweep, &givers_done);
                s.spawn(move || {
                    let mut batch = SweepBatch::EMPTY;
                    for _ in 0..50_000 {
                        let next = to_give.lock().unwrap().pop().or_else(|| from_sweep.lock().unwrap().pop());
                        let Some(i) = next else { continue };
                        assert_eq!(owner[i as usize].swap(t, Ordering::SeqCst), 0, "index {i} had an owner");
                        std::hint::spin_loop();
                        assert_eq!(owner[i as usize].swap(0, Ordering::SeqCst), t);
                        batch.add(pool, i);
                    }
                    batch.flush(pool);
                    givers_done.fetch_add(1, Ordering::SeqCst);
                });
            }
            let (pool, owner, from_sweep, taken, givers_done) = (&pool, &owner, &from_sweep, &taken, &givers_done);
            s.spawn(move || {
                let mut cache = SweepCache::default();
                // At least 50,000 takes, and on until both givers are done
                // and some given-up index came back: on a loaded machine
                // the givers may not run at all during the first 50,000.
                // The cap only turns a sweeper that never sees one into a
                // failure instead of a hang.
                for n in 0u64.. {
                    if n >= 50_000 && givers_done.load(Ordering::SeqCst) == 2 && taken.load(Ordering::SeqCst) > 0 {
                        break;
                    }
                    assert!(n < 50_000_000, "the sweeper took no given-up index in 50,000,000 takes");
                    let i = cache.take(pool);
                    if i as usize >= owner.len() {
                        pool.give(i);
                        continue;
                    }
                    assert_eq!(owner[i as usize].swap(9, Ordering::SeqCst), 0, "swept index {i} had an owner");
                    assert_eq!(owner[i as usize].swap(0, Ordering::SeqCst), 9);
                    taken.fetch_add(1, Ordering::SeqCst);
                    from_sweep.lock().unwrap().push(i);
                }
                cache.give_back(pool);
            });
        });
    }
}

/// Loom model: a giver's `fetch_or` against the sweeper's claim.
#[cfg(all(test, depengine_loom))]
mod loom_models {
    use super::*;
    use crate::mem::pool::Tagged;
    use loom::sync::Arc;

    /// Index `c` waits in the set (segment 1 under loom) while another
    /// thread gives `a` and `b` up (one batch: segment 0's word) and the
    /// combiner takes three: each index taken is one nobody owns (a claim
    /// that left its word's bits set would hand `c` out twice), and at the
    /// end every index is free, in the free list or the set.
    #[test]
    fn a_giver_and_a_sweeper_never_share_an_index() {
        loom::model(|| {
            let pool: Arc<Pool<Tagged>> = Arc::new(Pool::new());
            let (a, b, c) = (pool.take(), pool.take(), pool.take());
            for i in [a, b] {
                pool.get(i).tag.store(7, Ordering::Relaxed);
            }
            let mut early = SweepBatch::EMPTY;
            early.add(&*pool, c);
            early.flush(&*pool);
            let giver = {
                let pool = pool.clone();
                loom::thread::spawn(move || {
                    let mut batch = SweepBatch::EMPTY;
                    for i in [a, b] {
                        pool.get(i).tag.store(0, Ordering::Relaxed);
                        batch.add(&*pool, i);
                    }
                    batch.flush(&*pool);
                })
            };
            let mut cache = SweepCache::default();
            let taken: Vec<u32> = (0..3).map(|_| cache.take(&*pool)).collect();
            for &i in &taken {
                assert_eq!(pool.get(i).tag.load(Ordering::Relaxed), 0, "index {i} taken while owned");
                pool.get(i).tag.store(1, Ordering::Relaxed);
            }
            assert!(taken.contains(&c), "the index waiting in the set was swept");
            giver.join().unwrap();
            cache.give_back(&*pool);
            for i in taken {
                pool.give(i);
            }
            assert_eq!(pool.live(), 0, "every index is free, in the list or the set");
        });
    }
}
