//! A global allocator that counts allocations, for proving that depengine's
//! steady state allocates nothing (`tests/alloc.rs`) and for the
//! allocations-per-operation column of the perf harness.
//!
//! ```
//! #[global_allocator]
//! static GLOBAL: alloc_count::CountingAlloc = alloc_count::CountingAlloc;
//!
//! let before = alloc_count::allocations();
//! let v = vec![1u8; 16];
//! assert!(alloc_count::allocations() > before);
//! drop(v);
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// Forwards to the system allocator, counting every allocation (of any
/// thread). Install it with `#[global_allocator]`.
pub struct CountingAlloc;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

/// Allocations (`alloc`, `alloc_zeroed`, `realloc`) so far, all threads.
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::SeqCst)
}

// SAFETY: every call is forwarded unchanged to the system allocator, which
// upholds the `GlobalAlloc` contract; counting touches no allocation.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}
