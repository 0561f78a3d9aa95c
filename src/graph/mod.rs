//! The dependency graph's mechanism: variables and their queues, operation
//! blocks, the dispatcher that orders pushes, the waits and the pending
//! count, and (feature `cuda`) each variable's GPU fences.

pub(crate) mod bulk_buf;
pub(crate) mod dispatch;
#[cfg(feature = "cuda")]
pub(crate) mod gpu;
pub(crate) mod lifecycle;
pub(crate) mod operator;
pub(crate) mod opr;
pub(crate) mod stamps;
pub(crate) mod var;
pub(crate) mod var_queue;
pub(crate) mod wait;

/// Release builds only: debug builds add an ownership flag to each slot.
#[cfg(all(test, not(depengine_loom), not(debug_assertions)))]
mod tests {
    use super::opr::OprBlock;
    use super::var::VarSlot;
    use super::var_queue::VarBlock;
    use crate::mem::pool::slot_bytes;

    /// The free link lives in the value: a slot is no bigger than what it
    /// holds (release builds; debug builds add an ownership flag).
    #[test]
    fn slots_add_nothing_to_their_values() {
        assert_eq!(slot_bytes::<OprBlock>(), std::mem::size_of::<OprBlock>());
        assert_eq!(slot_bytes::<VarSlot>(), 128, "a variable's push side and completion side on a line each");
        assert_eq!(slot_bytes::<VarBlock>(), 16);
    }
}
