//! Prebuilt operators: a body and its variables fixed once, pushed many
//! times by reference (no closure or variable list is copied per push).

use crate::base::context::{FnProperty, RunContext};
use crate::graph::opr::DepList;
use crate::mem::completion::Completion;
use crate::mem::inline_fn::Outcome;
use std::sync::Arc;

type SyncBody = Box<dyn Fn(&RunContext) -> Outcome + Send + Sync>;
type AsyncBody = Box<dyn Fn(&RunContext, Completion) + Send + Sync>;

/// The body of a prebuilt operator.
pub(crate) enum OperatorBody {
    Sync(SyncBody),
    Async(AsyncBody),
}

pub(crate) struct OperatorInner {
    pub(crate) engine: u32,
    pub(crate) body: OperatorBody,
    pub(crate) deps: DepList,
    pub(crate) prop: FnProperty,
    pub(crate) name: &'static str,
}

/// A prebuilt operator (MXNet's `NewOperator`): push it with
/// [`Engine::push_op`](crate::Engine::push_op) as often as needed.
///
/// Deleting it ([`Engine::delete_operator`](crate::Engine::delete_operator),
/// or dropping the handle) is deferred: pushes already made keep it alive
/// until they have run.
#[derive(Clone)]
pub struct Operator {
    pub(crate) inner: Arc<OperatorInner>,
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operator").field("name", &self.inner.name).field("prop", &self.inner.prop).finish()
    }
}
