//! How long a tokio task takes to wake after the work it awaits is done:
//! the engine's future against tokio's own oneshot, side by side, in turns.
//!
//! - `tokio oneshot`: a plain thread sends on a `tokio::sync::oneshot`; the
//!   floor, what waking a task costs at all.
//! - `wait_var_async`: an operation writes a variable; the task awaits
//!   `Engine::wait_var_async` on it. The completion of the operation
//!   answers the future's marker, which wakes the task.
//! - `op + oneshot`: the workaround without futures, an operation whose
//!   body sends on a oneshot as it ends.
//!
//! Each sample: the task starts waiting, the other side spins
//! [`LEAD`] (so the task is asleep for sure), stamps the time and finishes;
//! the latency is from that stamp to the task running again. Prints p50
//! and p99 of each in microseconds.
//!
//! ```text
//! cargo run --release --example wake_latency -- [SAMPLES] [per_device|pooled]
//! ```

use depengine::{Engine, EngineKind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the waking side works before it stamps and wakes.
const LEAD: Duration = Duration::from_micros(30);

/// Spins for [`LEAD`], then returns the time since `epoch` in nanoseconds.
fn lead_then_stamp(epoch: Instant) -> u64 {
    let start = Instant::now();
    while start.elapsed() < LEAD {
        std::hint::spin_loop();
    }
    epoch.elapsed().as_nanos() as u64
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let samples: usize = args.first().map_or(20_000, |s| s.parse().expect("SAMPLES: a number"));
    let kind = match args.get(1).map(String::as_str) {
        Some("pooled") => EngineKind::Pooled,
        _ => EngineKind::PerDevice,
    };
    let engine = Arc::new(Engine::builder().kind(kind).build().unwrap());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let epoch = Instant::now();
    let stamp = Arc::new(AtomicU64::new(0));
    let var = engine.new_var();
    // A plain thread for the oneshot floor, fed requests over a channel.
    let (to_sender, requests) = std::sync::mpsc::channel::<tokio::sync::oneshot::Sender<u64>>();
    std::thread::spawn(move || {
        for tx in requests {
            let _ = tx.send(lead_then_stamp(epoch));
        }
    });
    let names = ["tokio oneshot", "wait_var_async", "op + oneshot"];
    let mut lat: [Vec<f64>; 3] = Default::default();
    rt.block_on(async {
        for i in 0..samples {
            // The three in turns, each first in a third of the rounds.
            for which in (0..3).map(|k| (k + i) % 3) {
                let ns = match which {
                    0 => {
                        let (tx, rx) = tokio::sync::oneshot::channel();
                        to_sender.send(tx).unwrap();
                        let sent = rx.await.unwrap();
                        epoch.elapsed().as_nanos() as u64 - sent
                    }
                    1 => {
                        let s = stamp.clone();
                        engine
                            .push_sync(move |_| s.store(lead_then_stamp(epoch), Ordering::Release), &[], &[var])
                            .unwrap();
                        engine.wait_var_async(var).await.unwrap();
                        epoch.elapsed().as_nanos() as u64 - stamp.load(Ordering::Acquire)
                    }
                    _ => {
                        let (tx, rx) = tokio::sync::oneshot::channel();
                        engine
                            .push_sync(
                                move |_| {
                                    let _ = tx.send(lead_then_stamp(epoch));
                                },
                                &[],
                                &[var],
                            )
                            .unwrap();
                        let sent = rx.await.unwrap();
                        epoch.elapsed().as_nanos() as u64 - sent
                    }
                };
                lat[which].push(ns as f64 / 1e3);
            }
        }
    });
    println!(
        "wake-up latency of a tokio task (current_thread), {samples} samples each, in turns; engine {} with {} CPU workers",
        kind.name(),
        engine.cpu_workers()
    );
    for (name, l) in names.iter().zip(lat.iter_mut()) {
        l.sort_by(f64::total_cmp);
        let q = |p: f64| l[((l.len() - 1) as f64 * p) as usize];
        println!("  {name:<16} p50 {:6.2} us   p99 {:6.2} us   max {:8.2} us", q(0.5), q(0.99), q(1.0));
    }
}
