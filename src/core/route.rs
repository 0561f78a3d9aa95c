//! The router: where a push goes, decided in one place.
//!
//! A push asks [`Core::route`] once, and the answer is one of four ways:
//!
//! - [`Route::Bulk`]: this thread bulks its pushes to this engine
//!   (`bulk.rs`): the closure joins the open bulk.
//! - [`Route::Unqueued`]: a push with no variables that the pending cap (or
//!   running on the pusher) lets run inside the push, with no block and no
//!   queue (`Core::unqueued_ticket`, `Core::run_unqueued`).
//! - [`Route::Direct`]: in a stint, a push whose variables all grant it at
//!   once runs inside the push and releases them (`direct_run.rs`).
//! - [`Route::Queue`]: everything else, and the way every other kind of
//!   push (asynchronous, prebuilt, deletions, wait markers) always goes:
//!   [`Core::queue`] fills an operation block and hands it to the
//!   dispatcher.
//!
//! The policies behind the second and third answers (the cap, the pace,
//! stints) are in `policy/` and in `throttle.rs`; the router only asks
//! them, in this order, and bulking is consulted once.

use crate::base::context::PushOpts;
use crate::base::error::EngineError;
use crate::core::direct_run::DirectGrant;
use crate::core::{Core, UnqueuedTicket};
use crate::graph::var::Var;

/// Where a synchronous push goes (see the module docs).
pub(crate) enum Route {
    /// Into this thread's open bulk (which may still hand it back).
    Bulk,
    /// Run inside the push, with no block, at this place in the order.
    Unqueued(UnqueuedTicket),
    /// Run inside the push with the variables the grant holds.
    Direct,
    /// An operation block, the dispatcher and the executor.
    Queue,
}

impl Core {
    /// Where a synchronous push with `opts` that reads `reads` and writes
    /// `writes` goes; a direct run's grant is filled into `grant` (`None`
    /// until then).
    /// An error refuses the push (its body is dropped unrun by the caller).
    #[inline(always)]
    pub(crate) fn route<'a>(
        &'a self,
        reads: &[Var],
        writes: &[Var],
        opts: &PushOpts,
        grant: &mut Option<DirectGrant<'a>>,
    ) -> Result<Route, EngineError> {
        if crate::core::bulk::wants(opts) {
            return Ok(Route::Bulk);
        }
        if reads.is_empty() && writes.is_empty() {
            return self.route_unqueued(opts);
        }
        if self.direct_grant(grant, reads, writes, opts)? {
            return Ok(Route::Direct);
        }
        Ok(Route::Queue)
    }

    /// [`route`](Self::route) for a push with no variables. Out of line, so
    /// that pushes with variables carry none of it.
    #[inline(never)]
    fn route_unqueued(&self, opts: &PushOpts) -> Result<Route, EngineError> {
        Ok(self.unqueued_ticket(opts)?.map_or(Route::Queue, Route::Unqueued))
    }
}
