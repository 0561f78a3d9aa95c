//! Policy: where and when work runs, as opposed to the mechanism that keeps
//! the scheduling rule. Checked by benchmarks; any choice here only picks
//! among orders the mechanism allows.

pub(crate) mod inline_pace;
pub(crate) mod pusher_runs;
