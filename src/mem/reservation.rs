//! Address-space reservations: a range of virtual memory taken at once and
//! made usable (committed) piece by piece.
//!
//! A [`Pool`](crate::mem::pool::Pool) lays its first segments out back to back
//! in one reservation, so that the slot of a small index is the
//! reservation's base plus the index: no segment to look up on the steps of
//! an operation's life, which each turn an index into an address
//! (`pool.rs`, "Layout").
//!
//! # States
//!
//! ```text
//! reserve ─► reserved (PROT_NONE, no memory, no commit charge)
//!                │ commit(range): mprotect to read/write
//!                ▼
//!            committed pages (zero-filled on first touch) ── drop: munmap
//! ```
//!
//! Reserved pages cost address space only: the kernel charges a mapping
//! against the commit limit (`vm.overcommit_memory = 2`) only once it is
//! writable, so the charge grows with the committed pieces, as a heap
//! allocation of the same size would. A reservation that the kernel
//! refuses (an address-space limit, `ulimit -v`) is reported as `None`, and
//! the pool then allocates every segment from the heap as before.

use std::ptr::NonNull;

/// A reserved range of address space; unmapped on drop.
pub(crate) struct Reservation {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: a reservation is a range of this process's address space; which
// thread maps, protects or unmaps it does not matter to the kernel.
unsafe impl Send for Reservation {}
// SAFETY: `commit` only changes page protections (the kernel serializes
// that); the bytes are accessed through pointers whose use the owner orders.
unsafe impl Sync for Reservation {}

impl Reservation {
    /// Reserves `len` bytes (rounded up to pages) of inaccessible address
    /// space, or `None` if the kernel refuses.
    pub(crate) fn new(len: usize) -> Option<Reservation> {
        // Miri cannot change page protections: the pools use the heap.
        if cfg!(miri) {
            return None;
        }
        let len = len.checked_next_multiple_of(page_size())?;
        if len == 0 {
            return None;
        }
        // SAFETY: an anonymous private mapping at an address of the kernel's
        // choosing touches no existing memory; the result is checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        NonNull::new(p.cast()).map(|base| Reservation { base, len })
    }

    /// The first byte of the range (page-aligned).
    #[inline(always)]
    pub(crate) fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Makes `offset..offset + len` readable and writable (whole pages: the
    /// pages that overlap it). Pages committed before keep their contents;
    /// new ones read as zero. Where the kernel refuses (past the commit
    /// limit), the process aborts, as it does when a heap allocation fails:
    /// a pool half-way through growing a segment cannot unwind.
    pub(crate) fn commit(&self, offset: usize, len: usize) {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len), "commit outside the reservation");
        let page = page_size();
        let start = offset / page * page;
        let end = (offset + len).next_multiple_of(page);
        // SAFETY: `start..end` lies inside the mapping (checked above;
        // `self.len` is a page multiple); read/write protection on pages of
        // our own anonymous mapping invalidates no reference: committed
        // pages stay as they were, the rest were inaccessible.
        let r =
            unsafe { libc::mprotect(self.base().add(start).cast(), end - start, libc::PROT_READ | libc::PROT_WRITE) };
        if r != 0 {
            eprintln!(
                "depengine: cannot commit {} bytes of a pool's reservation: {}",
                end - start,
                std::io::Error::last_os_error()
            );
            std::alloc::handle_alloc_error(
                std::alloc::Layout::from_size_align(end - start, page).unwrap_or(std::alloc::Layout::new::<u8>()),
            );
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours and `&mut self` proves nothing
        // borrows it; its owner dropped whatever values it held first.
        unsafe { libc::munmap(self.base().cast(), self.len) };
    }
}

fn page_size() -> usize {
    // SAFETY: `sysconf` reads a constant of the system.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_pages_are_zero_and_keep_what_is_written() {
        let r = Reservation::new(1 << 30).expect("1 GiB of address space");
        let page = page_size();
        r.commit(page + 10, 100);
        // SAFETY: the page at `page` was committed just above.
        let p = unsafe { r.base().add(page) };
        // SAFETY: inside that committed page.
        unsafe {
            assert_eq!(*p.add(4000), 0);
            *p.add(4000) = 7;
        }
        r.commit(page, 2 * page);
        // SAFETY: still committed; committing again keeps the contents.
        assert_eq!(unsafe { *p.add(4000) }, 7);
    }

    #[test]
    #[should_panic(expected = "commit outside the reservation")]
    fn a_commit_past_the_end_is_refused() {
        let r = Reservation::new(4096).unwrap();
        r.commit(0, 1 << 20);
    }
}
