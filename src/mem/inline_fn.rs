//! Inline closure storage: an operation's body lives inside its pooled
//! operation block, so pushing a small closure allocates nothing.
//!
//! A body up to [`INLINE_FN_BYTES`] bytes with alignment up to 16 is moved
//! into the block's buffer; a larger one is boxed (one allocation per push,
//! documented in the crate docs). Both kinds are called through a static
//! vtable of two function pointers, like a hand-rolled `Box<dyn FnOnce>`.

use crate::base::context::RunContext;
use crate::base::error::OpOutput;
use crate::mem::completion::Completion;
use std::marker::PhantomData;
use std::mem::{self, MaybeUninit};

/// Bytes of closure state stored inline: six words, enough for a closure
/// capturing a few `Arc`s and scalars.
pub const INLINE_FN_BYTES: usize = 48;

#[repr(C, align(16))]
struct Storage([MaybeUninit<u8>; INLINE_FN_BYTES]);

/// How a body ends: `Ok`, or the failure's message.
pub(crate) type Outcome = Result<(), String>;

/// The uniform signature every stored body is wrapped into: synchronous
/// bodies get `None` and return their outcome; asynchronous ones get the
/// `Completion` and return `Ok(())` (their outcome comes through it).
type Invoke = unsafe fn(*mut Storage, &RunContext, Option<Completion>) -> Outcome;

struct VTable {
    invoke: Invoke,
    drop: unsafe fn(*mut Storage),
}

/// A type-erased `FnOnce(&RunContext, Option<Completion>) -> Outcome`.
pub(crate) struct InlineFn {
    storage: Storage,
    vtable: Option<&'static VTable>,
}

// SAFETY: only `Send` closures are ever stored (see the constructors).
unsafe impl Send for InlineFn {}

impl Default for InlineFn {
    fn default() -> Self {
        InlineFn { storage: Storage([MaybeUninit::uninit(); INLINE_FN_BYTES]), vtable: None }
    }
}

struct Erased<G>(PhantomData<G>);

impl<G: FnOnce(&RunContext, Option<Completion>) -> Outcome> Erased<G> {
    const INLINE: VTable = VTable { invoke: Self::invoke_inline, drop: Self::drop_inline };
    const BOXED: VTable = VTable { invoke: Self::invoke_boxed, drop: Self::drop_boxed };

    /// # Safety
    /// `s` must hold a live `G`, which this moves out.
    unsafe fn invoke_inline(s: *mut Storage, ctx: &RunContext, c: Option<Completion>) -> Outcome {
        // SAFETY: per the contract, a `G` was written at `s` and is read once.
        let g = unsafe { (s as *mut G).read() };
        g(ctx, c)
    }

    /// # Safety
    /// `s` must hold a live `G`, which this drops.
    unsafe fn drop_inline(s: *mut Storage) {
        // SAFETY: per the contract.
        unsafe { (s as *mut G).drop_in_place() }
    }

    /// # Safety
    /// `s` must hold a live `Box<G>`, which this moves out.
    unsafe fn invoke_boxed(s: *mut Storage, ctx: &RunContext, c: Option<Completion>) -> Outcome {
        // SAFETY: per the contract, a `Box<G>` was written at `s`.
        let g = unsafe { (s as *mut Box<G>).read() };
        g(ctx, c)
    }

    /// # Safety
    /// `s` must hold a live `Box<G>`, which this drops.
    unsafe fn drop_boxed(s: *mut Storage) {
        // SAFETY: per the contract.
        unsafe { (s as *mut Box<G>).drop_in_place() }
    }
}

/// Whether a body of type `F` is stored inline in its operation block (no
/// allocation): at most [`INLINE_FN_BYTES`] bytes, aligned to at most 16.
pub(crate) const fn fits_inline<F>() -> bool {
    mem::size_of::<F>() <= INLINE_FN_BYTES && mem::align_of::<F>() <= mem::align_of::<Storage>()
}

impl InlineFn {
    fn store<G>(g: G) -> Self
    where
        G: FnOnce(&RunContext, Option<Completion>) -> Outcome + Send + 'static,
    {
        let mut f = InlineFn::default();
        if fits_inline::<G>() {
            // SAFETY: `G` fits the buffer in size and alignment (checked above).
            unsafe { (&mut f.storage as *mut Storage as *mut G).write(g) };
            f.vtable = Some(&Erased::<G>::INLINE);
        } else {
            // SAFETY: a `Box` is one pointer, which always fits.
            unsafe { (&mut f.storage as *mut Storage as *mut Box<G>).write(Box::new(g)) };
            f.vtable = Some(&Erased::<G>::BOXED);
        }
        f
    }

    /// Wraps a synchronous body.
    pub(crate) fn new_sync<F, R>(body: F) -> Self
    where
        F: FnOnce(&RunContext) -> R + Send + 'static,
        R: OpOutput,
    {
        Self::store(move |ctx: &RunContext, _: Option<Completion>| body(ctx).into_outcome())
    }

    /// Wraps an asynchronous body.
    pub(crate) fn new_async<F>(body: F) -> Self
    where
        F: FnOnce(&RunContext, Completion) + Send + 'static,
    {
        Self::store(move |ctx: &RunContext, c: Option<Completion>| {
            body(ctx, c.expect("asynchronous body invoked without its completion"));
            Ok(())
        })
    }

    /// Whether a body is stored.
    #[inline]
    pub(crate) fn is_some(&self) -> bool {
        self.vtable.is_some()
    }

    /// Calls the stored body, leaving `self` empty.
    pub(crate) fn invoke(&mut self, ctx: &RunContext, completion: Option<Completion>) -> Outcome {
        // SAFETY: `self` is a valid, exclusive `InlineFn`.
        unsafe { Self::invoke_in_place(self, ctx, completion) }
    }

    /// [`invoke`](Self::invoke) through a pointer, holding no reference
    /// into `*this` while the body runs: the body is moved out of the
    /// storage before it is called, so others may read the memory around
    /// it meanwhile (an operation block's variables, read by a completion
    /// the body signals).
    ///
    /// # Safety
    ///
    /// `this` points to a valid `InlineFn` that nobody else accesses until
    /// the body has been moved out (the call has begun).
    pub(crate) unsafe fn invoke_in_place(this: *mut Self, ctx: &RunContext, completion: Option<Completion>) -> Outcome {
        // SAFETY: per the contract, `*this` is ours for this statement.
        let vtable = unsafe { (*this).vtable.take() }.expect("invoking an empty body");
        // SAFETY: `vtable` matches what `store` wrote, and taking it first
        // means the moved-out value is never dropped or invoked again; the
        // storage pointer is raw, so no reference outlives the move-out.
        unsafe { (vtable.invoke)(std::ptr::addr_of_mut!((*this).storage), ctx, completion) }
    }
}

impl Drop for InlineFn {
    /// Drops a body that did not run. Its captures are the user's, whose
    /// `Drop` may panic: caught here, wherever the engine lets go of it
    /// (`unwind.rs`).
    fn drop(&mut self) {
        if let Some(vtable) = self.vtable.take() {
            let storage = std::ptr::addr_of_mut!(self.storage);
            // SAFETY: a live value of the vtable's type is stored, and the
            // vtable was taken first, so it is dropped once even if its
            // `Drop` panics.
            crate::base::unwind::quietly(|| unsafe { (vtable.drop)(storage) });
        }
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn ctx() -> RunContext {
        RunContext::on_host(crate::Context::cpu())
    }

    #[test]
    fn small_and_large_bodies_run_once_and_drop_their_captures() {
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        let mut small = InlineFn::new_sync(move |_| {
            h.fetch_add(1, Ordering::Relaxed);
        });
        let big_capture = [7u64; 32];
        let h = hits.clone();
        let mut large = InlineFn::new_sync(move |_| -> Result<(), String> {
            h.fetch_add(big_capture.iter().sum::<u64>() as usize, Ordering::Relaxed);
            Err("boom".into())
        });
        assert_eq!(small.invoke(&ctx(), None), Ok(()));
        assert_eq!(large.invoke(&ctx(), None), Err("boom".to_owned()));
        assert!(!small.is_some() && !large.is_some());
        assert_eq!(hits.load(Ordering::Relaxed), 1 + 7 * 32);
        assert_eq!(Arc::strong_count(&hits), 1, "captures dropped after the call");
        let h = hits.clone();
        drop(InlineFn::new_sync(move |_| drop(h)));
        assert_eq!(Arc::strong_count(&hits), 1, "an uncalled body is dropped too");
    }
}
