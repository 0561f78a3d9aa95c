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
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Forwards to the system allocator, counting every allocation (of any
/// thread). Install it with `#[global_allocator]`.
pub struct CountingAlloc;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static TRACE_NEXT: AtomicBool = AtomicBool::new(false);

thread_local! {
    static TRACING: Cell<bool> = const { Cell::new(false) };
}

/// While set, the next allocation (of any thread) prints its backtrace to
/// standard error, once: to find what allocated where nothing should.
pub fn trace_next_allocation(on: bool) {
    TRACE_NEXT.store(on, Ordering::SeqCst);
}

fn count() {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    if TRACE_NEXT.load(Ordering::Relaxed) && !TRACING.with(|t| t.replace(true)) {
        if TRACE_NEXT.swap(false, Ordering::SeqCst) {
            // Allocates itself: TRACING keeps this thread from recursing.
            eprintln!("alloc-count: an allocation at\n{}", std::backtrace::Backtrace::force_capture());
        }
        TRACING.with(|t| t.set(false));
    }
}

/// Allocations (`alloc`, `alloc_zeroed`, `realloc`) so far, all threads.
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::SeqCst)
}

// SAFETY: every call is forwarded unchanged to the system allocator, which
// upholds the `GlobalAlloc` contract; counting touches no allocation.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[cfg(test)]
mod tests {
    #[global_allocator]
    static GLOBAL: super::CountingAlloc = super::CountingAlloc;

    #[test]
    fn tracing_the_next_allocation_counts_it_and_disarms() {
        let before = super::allocations();
        super::trace_next_allocation(true);
        let v = vec![1u8; 32];
        assert!(!super::TRACE_NEXT.load(super::Ordering::SeqCst), "disarmed after one backtrace");
        assert!(super::allocations() > before);
        drop(v);
    }
}
