//! Bulking (MXNet's `set_bulk_size`): consecutive small synchronous CPU
//! pushes from one thread are fused into one engine operation.
//!
//! While a thread's bulk size is above 1, each bulkable push (synchronous,
//! `Normal`, CPU, without `no_skip`) only appends its closure and variables
//! to the thread's *open bulk*. The bulk is pushed as one operation — the
//! union of the variable sets (a variable written by any member is written),
//! bodies run in push order — when it reaches the size, when the thread
//! waits, pushes anything else to the same engine, changes context, calls
//! [`Engine::flush_bulk`](crate::Engine::flush_bulk), or changes the size.
//! So the thread's own push order is kept, and a wait sees everything.
//!
//! Failure granularity is the bulk's: a member that fails stops the bulk
//! (later members do not run) and every variable the bulk writes records the
//! failure; a bulk whose union of reads holds a failure is skipped whole.
//!
//! The closures and variable lists live in a [`BulkBuf`](crate::graph::bulk_buf::BulkBuf) taken from the
//! engine's pool and given back when the fused operation ends, so bulking
//! allocates nothing once the buffers have grown to the bulk size.
//!
//! Bulk sizes are per thread *and per engine*: setting one engine's size
//! leaves this thread's pushes to every other engine unbulked. A thread has
//! one open bulk at a time; a push to another engine pushes it first.
//!
//! A thread must flush before it exits (any wait does): a bulk still open
//! when its thread ends is dropped unrun, and that is reported on stderr.
//! So is a bulk whose engine was shut down (by another thread) before this
//! one flushed it; it never affects this thread's pushes to other engines.

use crate::base::context::{Context, FnProperty, PushOpts, RunContext};
use crate::base::error::EngineError;
use crate::core::Core;
use crate::graph::opr::{Body, OprKind};
use crate::graph::var::Var;
use crate::mem::inline_fn::{InlineFn, Outcome};
use std::cell::{Cell, RefCell};
use std::sync::{Arc, Weak};

struct OpenBulk {
    core: Arc<Core>,
    buf: u32,
    count: usize,
    ctx: Context,
}

#[derive(Default)]
struct BulkState {
    /// This thread's bulk size for each engine that has one above 1 (a
    /// weak reference: an engine dropped meanwhile is pruned when another
    /// is added, and its address is not reused while this holds it).
    sizes: Vec<(Weak<Core>, usize)>,
    open: Option<OpenBulk>,
}

impl BulkState {
    /// This thread's bulk size for `core` (0: none set).
    fn size_for(&self, core: &Core) -> usize {
        self.sizes.iter().find(|(w, _)| std::ptr::eq(w.as_ptr(), core)).map_or(0, |&(_, n)| n)
    }

    /// Sets this thread's bulk size for `core`; returns the previous one.
    fn set_size_for(&mut self, core: &Arc<Core>, size: usize) -> usize {
        let at = self.sizes.iter().position(|(w, _)| std::ptr::eq(w.as_ptr(), Arc::as_ptr(core)));
        let previous = at.map_or(0, |i| self.sizes[i].1);
        match (at, size > 1) {
            (Some(i), true) => self.sizes[i].1 = size,
            (Some(i), false) => {
                self.sizes.swap_remove(i);
            }
            (None, true) => {
                self.sizes.retain(|(w, _)| w.strong_count() > 0);
                self.sizes.push((Arc::downgrade(core), size));
            }
            (None, false) => {}
        }
        previous
    }
}

impl Drop for BulkState {
    fn drop(&mut self) {
        if let Some(open) = self.open.take() {
            eprintln!(
                "depengine: a thread exited with {} bulked operations never flushed; they were dropped",
                open.count
            );
            // The handle gives the buffer (and drops the members) when
            // dropped, once; `open` keeps the core alive meanwhile.
            drop(BulkHandle { core: Arc::as_ptr(&open.core), buf: open.buf });
        }
    }
}

crate::sync::thread_local! {
    static BULK: RefCell<BulkState> = RefCell::new(BulkState::default());
    /// Mirrors `BULK.size > 1 || BULK.open.is_some()`: the one check an
    /// unbulked push pays.
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
}

fn refresh_active(state: &BulkState) {
    ACTIVE.with(|a| a.set(!state.sizes.is_empty() || state.open.is_some()));
}

/// Owns a pushed bulk's buffer; gives it back when dropped (after running,
/// or unrun when the fused operation is skipped or cancelled).
struct BulkHandle {
    core: *const Core,
    buf: u32,
}

// SAFETY: the core outlives its pending operations (shutdown waits for
// them), and the buffer is owned by this handle.
unsafe impl Send for BulkHandle {}

impl BulkHandle {
    fn core(&self) -> &Core {
        // SAFETY: see the `Send` impl.
        unsafe { &*self.core }
    }

    /// Runs the members in push order, stopping at the first failure.
    ///
    /// A member's panic is caught here, not by the runner: unwinding out of
    /// this call would drop the handle, and with it the members that did
    /// not run, during the unwinding, where a `Drop` that panics aborts.
    fn run(&self, ctx: &RunContext) -> Outcome {
        let buf = self.core().bulks.get(self.buf);
        // SAFETY: the fused operation's runner owns the buffer.
        let bodies = unsafe { &mut *buf.bodies.with_mut(|p| p) };
        bodies.iter_mut().try_for_each(|body| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body.invoke(ctx, None)))
                .unwrap_or_else(|payload| Err(crate::base::unwind::message_of(payload)))
        })
    }

    fn release(&self) {
        let buf = self.core().bulks.get(self.buf);
        // SAFETY: this handle owns the buffer until it is given back here.
        unsafe {
            // Bodies that did not run (the bulk failed or was skipped) hold
            // the user's captures (`unwind.rs`).
            buf.bodies.with_mut(|b| (*b).drain(..).for_each(|f| self.core().drop_user_value(f)));
            buf.reads.with_mut(|r| (*r).clear());
            buf.writes.with_mut(|w| (*w).clear());
        }
        self.core().bulks.give(self.buf);
    }
}

impl Drop for BulkHandle {
    fn drop(&mut self) {
        self.release();
    }
}

/// Whether a push with these options may join a bulk.
fn bulkable(opts: &PushOpts) -> bool {
    opts.prop == FnProperty::Normal && !opts.ctx.is_gpu() && !opts.no_skip
}

/// Sets this thread's bulk size for `core` (≤ 1 turns bulking off,
/// flushing first); returns the previous size.
pub(crate) fn set_size(core: &Arc<Core>, size: usize) -> Result<usize, EngineError> {
    let previous = BULK.with(|b| {
        let mut b = b.borrow_mut();
        let previous = b.set_size_for(core, size);
        refresh_active(&b);
        previous
    });
    if size <= 1 {
        flush_for(core)?;
    }
    Ok(previous)
}

/// Pushes an open bulk of another engine than the one this thread now
/// pushes to. Its engine may have been shut down by another thread since:
/// then its members are dropped unrun and that is reported on stderr, as
/// for a thread that exits with a bulk open; the caller's push goes on.
fn push_stale(open: OpenBulk) {
    let count = open.count;
    if let Err(e) = push_bulk(open) {
        eprintln!("depengine: {count} bulked operations of another engine were dropped unrun ({e}); flush a bulk before its engine shuts down");
    }
}

impl Core {
    /// Pushes this thread's open bulk for this engine first, if any, so
    /// that the thread's push order is kept (`flush_for`).
    #[inline(always)]
    pub(crate) fn flush_bulk(&self) -> Result<(), EngineError> {
        flush_for(self)
    }
}

/// Pushes this thread's open bulk if it belongs to `core`.
#[inline(always)]
pub(crate) fn flush_for(core: &Core) -> Result<(), EngineError> {
    // No bulk open on this thread (almost every push): no call.
    if !ACTIVE.with(|a| a.get()) {
        return Ok(());
    }
    flush_open_for(core)
}

#[inline(never)]
fn flush_open_for(core: &Core) -> Result<(), EngineError> {
    // Not while the thread's bulk state is being dropped (a last engine
    // handle among the members it drops at thread exit) or borrowed: there
    // is no bulk of this thread to flush then.
    let open = BULK
        .try_with(|b| {
            let mut b = b.try_borrow_mut().ok()?;
            let open = if b.open.as_ref().is_some_and(|o| std::ptr::eq(Arc::as_ptr(&o.core), core)) {
                b.open.take()
            } else {
                None
            };
            refresh_active(&b);
            open
        })
        .ok()
        .flatten();
    open.map_or(Ok(()), push_bulk)
}

fn push_bulk(open: OpenBulk) -> Result<(), EngineError> {
    let core = &*open.core;
    let handle = BulkHandle { core, buf: open.buf };
    let buf = core.bulks.get(open.buf);
    // SAFETY: the open bulk's thread (us) owns the buffer until the push
    // below hands the handle to the fused operation.
    let (reads, writes) = unsafe { (&*buf.reads.with(|r| r), &*buf.writes.with(|w| w)) };
    let body = Body::OneShot(InlineFn::new_sync(move |ctx: &RunContext| handle.run(ctx)));
    let opts = PushOpts::new().ctx(open.ctx).name("bulk");
    core.push(body, false, reads, writes, &opts, OprKind::User)
}

/// Whether a push with `opts` may join a bulk on this thread: one
/// thread-local flag, so that an unbulked push pays nothing else.
#[inline(always)]
pub(crate) fn wants(opts: &PushOpts) -> bool {
    ACTIVE.with(|a| a.get()) && bulkable(opts)
}

/// Adds a push the router sent here (`Route::Bulk`) to this thread's open
/// bulk; `Ok(Some(body))` hands it back to be queued (this engine does not
/// bulk on this thread).
pub(crate) fn add(
    core: &Arc<Core>,
    body: InlineFn,
    reads: &[Var],
    writes: &[Var],
    opts: &PushOpts,
) -> Result<Option<InlineFn>, EngineError> {
    for &v in reads.iter().chain(writes) {
        core.vars.slot_of(v)?;
    }
    // Refused now, like an unbulked push: a bulk opened after shutdown
    // could never be pushed.
    core.life.check_open()?;
    // A different engine or context starts a new bulk: push the old one
    // first (and before opening the new one, which that push would flush).
    let stale = BULK.with(|cell| {
        let mut b = cell.borrow_mut();
        let stale = match &b.open {
            Some(o) if !Arc::ptr_eq(&o.core, core) || o.ctx != opts.ctx => b.open.take(),
            _ => None,
        };
        refresh_active(&b);
        stale
    });
    if let Some(stale) = stale {
        if Arc::ptr_eq(&stale.core, core) {
            push_bulk(stale)?; // this engine's, with another context
        } else {
            push_stale(stale);
        }
    }
    // The pushes happen after the borrow ends (a push flushes, which
    // borrows again).
    let (body, full) = BULK.with(|cell| {
        let mut b = cell.borrow_mut();
        let size = b.size_for(core);
        if size <= 1 {
            return (Some(body), None);
        }
        let open = b.open.get_or_insert_with(|| OpenBulk {
            core: core.clone(),
            buf: core.bulks.take(),
            count: 0,
            ctx: opts.ctx,
        });
        let buf = core.bulks.get(open.buf);
        // SAFETY: the open bulk's buffer belongs to this thread.
        unsafe {
            buf.bodies.with_mut(|v| (*v).push(body));
            buf.reads.with_mut(|v| (*v).extend_from_slice(reads));
            buf.writes.with_mut(|v| (*v).extend_from_slice(writes));
        }
        open.count += 1;
        let full = if open.count >= size { b.open.take() } else { None };
        refresh_active(&b);
        (None, full)
    });
    if let Some(full) = full {
        push_bulk(full)?;
    }
    Ok(body)
}
