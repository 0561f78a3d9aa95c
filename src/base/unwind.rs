//! Dropping user values without letting their panics out.
//!
//! The engine drops values that belong to the user in its own code: the
//! payload of a panic it caught, a closure whose operation was skipped or
//! cancelled, an operator's closure when its last push finishes, a bulk's
//! bodies that did not run. Any of them may panic in `Drop`. On a worker
//! that would unwind through the engine's loop (the worker aborts, see
//! `executor::AbortOnUnwind`); on a pushing or waiting thread it would
//! leave an operation neither completed nor given back, so a later wait and
//! the engine's drop would hang. Every such drop goes through this module.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Payloads dropped in a row before the rest is leaked: a payload whose
/// `Drop` panics gives a new payload, which may panic again when dropped,
/// and so on. Each round is a user panic; a chain this long is a bug of
/// the user's that must not hang the engine, and a leak ends it.
const PAYLOAD_ROUNDS: usize = 16;

/// Runs `f` (user code the engine calls for nothing but its effect: a
/// `Drop`, a callback); a panic in it is caught and its payload dropped
/// quietly. Returns whether `f` panicked.
#[inline]
pub(crate) fn quietly(f: impl FnOnce()) -> bool {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(()) => false,
        Err(payload) => {
            drop_payload(payload);
            true
        }
    }
}

/// Drops `value`; a panic of its `Drop` is caught, its payload dropped the
/// same way. Returns whether dropping panicked.
#[inline]
pub(crate) fn drop_quietly<T>(value: T) -> bool {
    std::mem::needs_drop::<T>() && quietly(move || drop(value))
}

/// The message of a caught panic ([`panic_message`](crate::base::error::panic_message)),
/// its payload then dropped quietly.
pub(crate) fn message_of(payload: Box<dyn Any + Send>) -> String {
    let message = crate::base::error::panic_message(&*payload);
    drop_payload(payload);
    message
}

/// Drops a caught panic's payload, catching the panics of its `Drop` (and
/// of theirs) up to [`PAYLOAD_ROUNDS`]; what is left after that is leaked.
pub(crate) fn drop_payload(payload: Box<dyn Any + Send>) {
    let mut payload = payload;
    for _ in 0..PAYLOAD_ROUNDS {
        match catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            Ok(()) => return,
            Err(next) => payload = next,
        }
    }
    std::mem::forget(payload);
}

/// `value.to_string()`, or `fallback` when `Display` panics (the payload
/// dropped quietly).
pub(crate) fn display_or(value: &dyn std::fmt::Display, fallback: &str) -> String {
    match catch_unwind(AssertUnwindSafe(|| value.to_string())) {
        Ok(s) => s,
        Err(payload) => {
            drop_payload(payload);
            fallback.to_owned()
        }
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Panics when dropped, with a payload that is itself a `Bomb` until
    /// `left` runs out.
    struct Bomb(usize);

    static DROPS: AtomicUsize = AtomicUsize::new(0);

    impl Drop for Bomb {
        fn drop(&mut self) {
            DROPS.fetch_add(1, Ordering::Relaxed);
            if self.0 > 0 {
                std::panic::panic_any(Bomb(self.0 - 1));
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "leaks the end of the chain by design")]
    fn a_chain_of_panicking_payloads_is_dropped_or_leaked_never_escapes() {
        DROPS.store(0, Ordering::Relaxed);
        assert!(drop_quietly(Bomb(3)));
        assert_eq!(DROPS.load(Ordering::Relaxed), 4, "each payload of the chain dropped");
        DROPS.store(0, Ordering::Relaxed);
        assert!(drop_quietly(Bomb(1000)));
        assert_eq!(DROPS.load(Ordering::Relaxed), 1 + PAYLOAD_ROUNDS, "the rest of a long chain is leaked");
        assert!(!drop_quietly(Bomb(0)));
    }

    #[test]
    fn a_panicking_display_gives_the_fallback() {
        struct Bad;
        impl std::fmt::Display for Bad {
            fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                panic!("display")
            }
        }
        assert_eq!(display_or(&Bad, "fallback"), "fallback");
        assert_eq!(display_or(&7, "fallback"), "7");
    }
}
