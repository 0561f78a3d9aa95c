//! The memory a push-then-wait round trip touches, for `perf/footprint.sh`:
//! runs round trips on one engine and, before each measured one, swaps a
//! marker word, so that a memory trace (valgrind's lackey) can be cut into
//! round trips and the distinct cache lines of each counted.
//!
//! ```text
//! cargo run --release --example footprint -- [naive|pooled|per_device] [WARM_UP] [MEASURED]
//! ```
//!
//! Prints the marker's address on standard error (`marker 0x…`) when done.
//! The defaults, 2,000 round trips of warm-up and 1,000 measured, keep a
//! trace of every access to a few hundred megabytes. The `DEPENGINE_*`
//! variables apply.

use depengine::{EngineBuilder, EngineKind};
use std::sync::atomic::{AtomicU64, Ordering};

/// Swapped (a read-modify-write, which lackey traces as `M`) before each
/// measured round trip.
static MARKER: AtomicU64 = AtomicU64::new(0);

fn main() {
    let mut args = std::env::args().skip(1);
    let kind = EngineKind::parse(&args.next().unwrap_or_else(|| "per_device".into()))
        .unwrap_or_else(|e| panic!("the engine: {e}"));
    let count = |default: u64, what: &str, arg: Option<String>| {
        arg.map_or(default, |a| a.parse().unwrap_or_else(|_| panic!("{what}: not a count: {a:?}")))
    };
    let warm_up = count(2_000, "WARM_UP", args.next());
    let measured = count(1_000, "MEASURED", args.next());
    let engine = EngineBuilder::from_env()
        .unwrap_or_else(|e| panic!("a DEPENGINE_* setting: {e}"))
        .kind(kind)
        .build()
        .expect("engine");
    let var = engine.new_var();
    for i in 0..warm_up + measured {
        if i >= warm_up {
            MARKER.swap(i, Ordering::SeqCst);
        }
        engine.push_sync(|_| {}, &[], &[var]).expect("push");
        engine.wait_var(var).expect("wait");
    }
    // One more marker closes the last measured round trip.
    MARKER.swap(u64::MAX, Ordering::SeqCst);
    eprintln!("marker {:p}", &MARKER);
}
