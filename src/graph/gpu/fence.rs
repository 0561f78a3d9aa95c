//! A variable's GPU fence: which GPU work an operation that is granted the
//! variable must wait for before it touches the data.
//!
//! The engine grants a GPU operation its variables as soon as the GPU work
//! of the operations before it was *enqueued* (their bodies returned), not
//! when it finished: the ordering of the device work is left to the device.
//! Each variable remembers the lane and seq (`lane.rs`) of
//!
//! - its last GPU **write**, and
//! - per lane, the last GPU **read** since that write.
//!
//! and a granted operation applies the scheduling rule to them:
//!
//! | runs on | reads `v` | writes `v` |
//! |---|---|---|
//! | lane `l` (device wait, `cuStreamWaitEvent`) | the last write, if on another lane | the last write and every read, those on other lanes |
//! | the host (CPU op, `wait_var`) | the last write (`cuEventSynchronize`) | the last write and every read |
//!
//! then, when it completes on lane `l` with seq `k`, stores `(l, k)` as the
//! last write (clearing the reads: they are behind it now) or as lane `l`'s
//! last read. Work on one lane needs no wait: a stream runs in order.
//!
//! # Why plain atomics are enough
//!
//! The fence is only written by an operation holding the variable (a
//! writer alone, readers each in their own lane's entry), and read by the
//! next operation granted it; the variable queue's grant is the
//! happens-before edge between them. A host wait (`wait_var`) may read it
//! while a later operation changes it: it then waits for that later work
//! too, which is more than needed and still correct.

use super::lane::Lane;
use crate::sync::{AtomicPtr, AtomicU64, Ordering};
use cudarc::driver::{CudaStream, DriverError};

/// The most lanes (streams) one engine has over all its devices: the size
/// of every fence's read table.
pub(crate) const MAX_LANES: usize = 32;

/// The fence of one variable (see the module docs). `0` means none.
///
/// 16 bytes, so a variable's slot keeps one cache line; the read table
/// (256 bytes) is allocated the first time a GPU operation reads the
/// variable in this slot and kept for the slot's later variables, so
/// steady-state pushing allocates nothing.
#[derive(Debug, Default)]
pub(crate) struct VarFence {
    /// `lane << 48 | seq` of the last GPU write, offset by one lane so that
    /// 0 stays "none".
    write: AtomicU64,
    /// Per lane, the seq of its last GPU read since the last write (null
    /// until the slot's first GPU read).
    reads: AtomicPtr<ReadTable>,
}

#[derive(Debug, Default)]
struct ReadTable([AtomicU64; MAX_LANES]);

/// Where a granted operation runs, for [`VarFence::wait`].
pub(crate) enum Waiter<'a> {
    /// On `lane` (index `id`): waits are enqueued on its stream.
    Lane { id: usize, stream: &'a CudaStream },
    /// On the host: waits block the calling thread.
    Host,
}

const SEQ_BITS: u32 = 48;

impl VarFence {
    /// Forgets everything (a new variable in a reused slot).
    pub(crate) fn clear(&self) {
        self.write.store(0, Ordering::Relaxed);
        self.clear_reads();
    }

    fn clear_reads(&self) {
        for r in self.reads().into_iter().flat_map(|t| &t.0) {
            if r.load(Ordering::Relaxed) != 0 {
                r.store(0, Ordering::Relaxed);
            }
        }
    }

    fn reads(&self) -> Option<&ReadTable> {
        // SAFETY: a published table lives as long as the fence (see `Drop`).
        unsafe { self.reads.load(Ordering::Acquire).as_ref() }
    }

    /// The read table, allocated on first use.
    fn reads_or_new(&self) -> &ReadTable {
        if let Some(t) = self.reads() {
            return t;
        }
        let fresh = Box::into_raw(Box::default());
        match self.reads.compare_exchange(std::ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire) {
            // SAFETY: just published; it lives as long as the fence.
            Ok(_) => unsafe { &*fresh },
            Err(theirs) => {
                // SAFETY: ours was never shared; theirs lives as long as the fence.
                unsafe {
                    drop(Box::from_raw(fresh));
                    &*theirs
                }
            }
        }
    }

    fn last_write(&self) -> Option<(usize, u64)> {
        let w = self.write.load(Ordering::Relaxed);
        (w != 0).then(|| (((w >> SEQ_BITS) - 1) as usize, w & ((1 << SEQ_BITS) - 1)))
    }

    /// Applies the scheduling rule (module table) for an operation granted
    /// this variable, reading it (`writes == false`) or writing it.
    pub(crate) fn wait(&self, lanes: &[Lane], who: &Waiter<'_>, writes: bool) -> Result<(), DriverError> {
        let mine = match who {
            Waiter::Lane { id, .. } => Some(*id),
            Waiter::Host => None,
        };
        let wait_for = |lane: usize, seq: u64| -> Result<(), DriverError> {
            match who {
                _ if Some(lane) == mine => Ok(()), // in stream order already
                Waiter::Lane { stream, .. } => lanes[lane].wait_device(stream, seq),
                Waiter::Host => lanes[lane].wait_host(seq),
            }
        };
        if let Some((lane, seq)) = self.last_write() {
            wait_for(lane, seq)?;
        }
        if let Some(reads) = self.reads().filter(|_| writes) {
            for (lane, r) in reads.0.iter().enumerate().take(lanes.len()) {
                let seq = r.load(Ordering::Relaxed);
                if seq != 0 {
                    wait_for(lane, seq)?;
                }
            }
        }
        Ok(())
    }

    /// Notes that the GPU work of seq `seq` on lane `lane` read (or wrote)
    /// this variable.
    pub(crate) fn note(&self, lane: usize, seq: u64, writes: bool) {
        if writes {
            self.write.store(((lane as u64 + 1) << SEQ_BITS) | seq, Ordering::Relaxed);
            self.clear_reads();
        } else {
            self.reads_or_new().0[lane].fetch_max(seq, Ordering::Relaxed);
        }
    }
}

impl Drop for VarFence {
    fn drop(&mut self) {
        let table = *self.reads.get_mut();
        if !table.is_null() {
            // SAFETY: allocated by `reads_or_new`; nobody else holds the fence.
            drop(unsafe { Box::from_raw(table) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_packs_lane_and_seq_and_clears_the_reads() {
        let f = VarFence::default();
        assert_eq!(f.last_write(), None);
        f.note(3, 7, false);
        f.note(3, 5, false); // an older read does not move it back
        assert_eq!(f.reads().unwrap().0[3].load(Ordering::Relaxed), 7);
        f.note(0, 9, true);
        assert_eq!(f.last_write(), Some((0, 9)));
        assert!(f.reads().unwrap().0.iter().all(|r| r.load(Ordering::Relaxed) == 0));
        f.note(MAX_LANES - 1, (1 << SEQ_BITS) - 1, true);
        assert_eq!(f.last_write(), Some((MAX_LANES - 1, (1 << SEQ_BITS) - 1)));
        f.clear();
        assert_eq!(f.last_write(), None);
    }

    #[test]
    fn a_fence_fits_the_completion_side_of_a_variable() {
        assert_eq!(std::mem::size_of::<VarFence>(), 16);
        assert_eq!(std::mem::size_of::<crate::graph::var::CompletionSide>(), 64);
    }
}
