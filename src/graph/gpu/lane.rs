//! A GPU lane: one CUDA stream, owned by one ring worker, and the ring of
//! CUDA events that marks how far its work has been recorded.
//!
//! Every GPU operation that ran on the lane *claims* a sequence number
//! when it completes (its body returned and, for an asynchronous one, its
//! `Completion` was signalled) and records event `seq % EVENTS` on the
//! stream. The number is what variables keep (`fence.rs`): "the work of
//! operation `seq` of lane `l`".
//!
//! # Invariants
//!
//! 1. Seq `k` is claimed after operation `k`'s work was enqueued, and its
//!    event is recorded after the claim. So **any event recorded for a seq
//!    `j ≥ k` covers operation `k`'s work**, even when two threads (the lane
//!    worker and an asynchronous op's signaller) record out of claim order.
//! 2. A variable's fence names `(l, k)` only after event `k` was recorded
//!    (the recorder stores the fence), so slot `k % EVENTS` then holds the
//!    event of `k` or of a later seq — by (1) waiting on it is enough.
//! 3. A slot is recorded again (for `k + EVENTS`) only after seq `k` was
//!    recorded into it and has completed: the recorder waits for both.
//! 4. `completed ≥ k` means operation `k`'s work is done on the device, and
//!    by (1) the work of every seq below it too.

use crate::sync::{AtomicU64, Ordering};
use cudarc::driver::{CudaContext, CudaEvent, CudaStream, DriverError};
use std::sync::Arc;

/// Events per lane: how many completed GPU operations a lane can have in
/// flight on the device before a recorder waits for the oldest.
const EVENTS: u64 = 256;

/// One stream and its event ring (see the module docs).
pub(crate) struct Lane {
    /// The device this lane's stream belongs to.
    pub(crate) device: u32,
    /// Its ring on the device (an index of `rings.rs`' `RINGS`) and its
    /// worker's index in that ring.
    pub(crate) ring: usize,
    pub(crate) index: usize,
    pub(crate) stream: Arc<CudaStream>,
    events: Box<[CudaEvent]>,
    /// The seq last recorded into each event slot.
    recorded: Box<[AtomicU64]>,
    /// The last seq claimed (0: none yet).
    claimed: AtomicU64,
    /// A seq whose work, and all work before it, is known done.
    completed: AtomicU64,
}

impl Lane {
    /// A new stream on `ctx` (with CUDA stream priority `priority`, lower is
    /// more urgent) and its events, for worker `index` of ring `ring` of
    /// `device`.
    pub(crate) fn new(
        (device, ring, index): (u32, usize, usize),
        ctx: &Arc<CudaContext>,
        priority: Option<i32>,
    ) -> Result<Lane, DriverError> {
        let stream = match priority {
            Some(p) => ctx.new_stream_with_priority(p)?,
            None => ctx.new_stream()?,
        };
        let events = (0..EVENTS).map(|_| ctx.new_event(None)).collect::<Result<Box<[_]>, _>>()?;
        Ok(Lane {
            device,
            ring,
            index,
            stream,
            events,
            recorded: (0..EVENTS).map(|_| AtomicU64::new(0)).collect(),
            claimed: AtomicU64::new(0),
            completed: AtomicU64::new(0),
        })
    }

    fn slot(k: u64) -> usize {
        (k % EVENTS) as usize
    }

    /// Marks everything enqueued on the stream so far as the work of a new
    /// seq, and returns it.
    pub(crate) fn record(&self) -> Result<u64, DriverError> {
        let k = self.claimed.fetch_add(1, Ordering::Relaxed) + 1;
        let slot = Self::slot(k);
        let recorded = (|| {
            if k > EVENTS {
                // Invariant 3: the slot's previous seq must be recorded (by
                // a recorder that claimed it just before us)...
                let previous = k - EVENTS;
                while self.recorded[slot].load(Ordering::Acquire) < previous {
                    std::hint::spin_loop();
                }
                // ...and done, before its event is reused.
                self.wait_host(previous)?;
            }
            self.events[slot].record(&self.stream)
        })();
        // Marked even when a CUDA call failed, so that the slot's next
        // recorder does not spin for ever; a failed seq is noted on no
        // variable, so no one waits on the slot for it.
        self.recorded[slot].fetch_max(k, Ordering::Release);
        recorded.map(|()| k)
    }

    /// Whether seq `k`'s work is known to be done (no CUDA call).
    fn known_done(&self, k: u64) -> bool {
        self.completed.load(Ordering::Acquire) >= k
    }

    /// Blocks the calling thread until seq `k`'s work is done.
    pub(crate) fn wait_host(&self, k: u64) -> Result<(), DriverError> {
        if k == 0 || self.known_done(k) {
            return Ok(());
        }
        // Invariant 2: the slot holds `k`'s event or a later one.
        self.events[Self::slot(k)].synchronize()?;
        self.completed.fetch_max(k, Ordering::AcqRel);
        Ok(())
    }

    /// Makes `stream`'s later work wait, on the device, for seq `k`'s work.
    pub(crate) fn wait_device(&self, stream: &CudaStream, k: u64) -> Result<(), DriverError> {
        if k == 0 || self.known_done(k) {
            return Ok(());
        }
        stream.wait(&self.events[Self::slot(k)])
    }

    /// Blocks until everything enqueued on the stream so far is done.
    pub(crate) fn synchronize(&self) -> Result<(), DriverError> {
        let k = self.claimed.load(Ordering::Acquire);
        self.stream.synchronize()?;
        self.completed.fetch_max(k, Ordering::AcqRel);
        Ok(())
    }
}
