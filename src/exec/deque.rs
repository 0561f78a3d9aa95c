//! The per_device workers' work-stealing deque: crossbeam's Chase-Lev
//! deque, or, under `--cfg depengine_loom`, a twin with the same API that
//! loom can see into.
//!
//! crossbeam's deque is built on std's atomics, which loom cannot follow,
//! so a loom model of the per_device executor (its parking, waking and
//! stealing around the deques: `per_device.rs`) would see a push to a
//! deque as invisible to every other thread. The twin is a loom mutex
//! around a `VecDeque`: a linearizable deque (the owner pushes and pops at
//! the back, LIFO; thieves take from the front, FIFO, as crossbeam's
//! `new_lifo` does), which is what the executor assumes of crossbeam's.
//! The models then check the executor's protocol, not the deque itself.

#[cfg(not(depengine_loom))]
pub(crate) use crossbeam_deque::{Steal, Stealer, Worker};

#[cfg(depengine_loom)]
pub(crate) use twin::{Steal, Stealer, Worker};

#[cfg(depengine_loom)]
mod twin {
    use crate::sync::{AtomicUsize, Ordering};
    use loom::sync::{Arc, Mutex};
    use std::collections::VecDeque;

    /// A steal's outcome (crossbeam's `Steal`; the twin never asks for a
    /// retry, but the executor handles one).
    #[allow(dead_code)]
    pub(crate) enum Steal<T> {
        Empty,
        Success(T),
        Retry,
    }

    /// The items, and their count kept beside them: `len`, `is_empty` and
    /// a take from an empty deque read only the count, as crossbeam's read
    /// only its indices (fewer steps for loom to interleave). The count is
    /// stored with release and loaded with acquire, as crossbeam's indices
    /// are, so that the models rely on the executor's own fences for its
    /// sleep and wake-up protocol, not on a stronger deque.
    struct Items<T> {
        queue: Mutex<VecDeque<T>>,
        len: AtomicUsize,
    }

    impl<T> Items<T> {
        fn with<R>(&self, f: impl FnOnce(&mut VecDeque<T>) -> R) -> R {
            let mut queue = self.queue.lock().unwrap();
            let r = f(&mut queue);
            self.len.store(queue.len(), Ordering::Release);
            r
        }

        fn len(&self) -> usize {
            self.len.load(Ordering::Acquire)
        }

        /// Takes an item by `take`, unless the count says there is none.
        fn take(&self, take: impl FnOnce(&mut VecDeque<T>) -> Option<T>) -> Option<T> {
            if self.len() == 0 {
                return None;
            }
            self.with(take)
        }
    }

    /// The owner's end.
    pub(crate) struct Worker<T> {
        items: Arc<Items<T>>,
    }

    /// A thief's end.
    pub(crate) struct Stealer<T> {
        items: Arc<Items<T>>,
    }

    impl<T> Worker<T> {
        pub(crate) fn new_lifo() -> Self {
            Worker { items: Arc::new(Items { queue: Mutex::new(VecDeque::new()), len: AtomicUsize::new(0) }) }
        }

        pub(crate) fn stealer(&self) -> Stealer<T> {
            Stealer { items: self.items.clone() }
        }

        pub(crate) fn push(&self, item: T) {
            self.items.with(|q| q.push_back(item));
        }

        pub(crate) fn pop(&self) -> Option<T> {
            self.items.take(VecDeque::pop_back)
        }

        pub(crate) fn len(&self) -> usize {
            self.items.len()
        }

        pub(crate) fn is_empty(&self) -> bool {
            self.len() == 0
        }
    }

    impl<T> Stealer<T> {
        pub(crate) fn steal(&self) -> Steal<T> {
            self.items.take(VecDeque::pop_front).map_or(Steal::Empty, Steal::Success)
        }

        pub(crate) fn len(&self) -> usize {
            self.items.len()
        }

        pub(crate) fn is_empty(&self) -> bool {
            self.len() == 0
        }
    }
}
