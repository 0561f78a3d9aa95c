//! The naive executor: every ready operation runs at once on the thread that
//! made it ready — the pusher for independent work, the completing thread for
//! work released by a completion. Single-threaded pushing therefore runs each
//! body inside its push, in push order: the reference the other engines are
//! checked against.

use super::inline::{run_inline, run_queued_one};
use super::{Executor, ExecutorTraits, Runner};
use crate::base::context::FnProperty;
use crate::observe::stats::EngineStats;
use std::sync::Arc;

pub(crate) struct NaiveExecutor;

impl<R: Runner> Executor<R> for NaiveExecutor {
    fn start(&self, _core: &Arc<R>) -> std::io::Result<()> {
        Ok(())
    }

    fn schedule(&self, core: &R, op: u32, _prop: FnProperty) {
        run_inline(core, op);
    }

    fn help(&self, _core: &R) -> bool {
        run_queued_one()
    }

    fn stop(&self) {}

    fn traits(&self) -> ExecutorTraits {
        ExecutorTraits::run_by_waiters()
    }

    fn worker_name(&self, id: usize) -> String {
        format!("worker {id}")
    }

    fn add_stats(&self, _stats: &mut EngineStats) {}
}
