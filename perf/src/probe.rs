//! The machine's state at the time of a run, measured without any engine,
//! so that a table can be read against what the hardware did meanwhile.
//!
//! Two figures, both cheap (well under a second together):
//!
//! - **The cache-line round trip** between the first two CPUs this
//!   process may use: one thread pinned to each passes a counter back and
//!   forth through one atomic word. Every threaded engine pays a fraction
//!   of this for each line that crosses cores, so its W=0 rows follow it.
//!   On the shared 2-vCPU machines of this project it has been seen to
//!   switch between ~32, 75–130 and 450–550 ns within seconds, with the
//!   host's placement of the virtual CPUs.
//! - **The bare two-thread floor at W=1000**: the workload's own body
//!   (`workloads::work`) run on one thread, then split over two threads
//!   with no engine at all. Two engine workers cannot beat the second
//!   figure, so it is the floor the W=1000 rows are compared with, next to
//!   the "ideal" of half the one-thread time.

use crate::measure::median;
use crate::workloads::work;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// What [`probe`] measured.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MachineState {
    /// The median cache-line round trip between two CPUs, in ns (`None`
    /// with fewer than two CPUs to pin to).
    pub(crate) round_trip_ns: Option<f64>,
    /// One W=1000 body on one thread, ns (median of the tries).
    pub(crate) body_ns: f64,
    /// ns per body with the same bodies split over two threads.
    pub(crate) two_threads_ns: f64,
}

impl MachineState {
    /// The two-thread figure over half the one-thread one: 1.00 when two
    /// threads run bodies twice as fast as one.
    pub(crate) fn two_thread_excess(&self) -> f64 {
        self.two_threads_ns / (self.body_ns / 2.0)
    }
}

impl std::fmt::Display for MachineState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.round_trip_ns {
            Some(rt) => write!(f, "cache-line round trip between two CPUs {rt:.0} ns; ")?,
            None => write!(f, "cache-line round trip: fewer than two CPUs; ")?,
        }
        write!(
            f,
            "W=1000 bodies with no engine: {:.0} ns on one thread, {:.0} ns/body on two ({:.2} × half of one)",
            self.body_ns,
            self.two_threads_ns,
            self.two_thread_excess()
        )
    }
}

/// Measures the machine's state now (see the module docs).
pub(crate) fn probe() -> MachineState {
    MachineState { round_trip_ns: round_trip_ns(), body_ns: one_thread_body_ns(), two_threads_ns: two_thread_body_ns() }
}

/// Rounds per try of the round trip, and tries (the median is kept).
const ROUND_TRIPS: u64 = 20_000;
const TRIES: usize = 5;
/// Spins on the shared word before a waiting side yields its CPU: far
/// more than a round trip takes, so a probe on an idle machine never
/// yields, and one that shares a CPU with another busy thread (the test
/// suite) still finishes.
const SPINS_BEFORE_YIELD: u32 = 100_000;
/// Bodies per try of the body figures.
const BODIES: u64 = 10_000;
const WEIGHT: u32 = 1000;

/// The median over [`TRIES`] of the mean round trip of one line between
/// the first two CPUs this process may use, in ns (`None` with fewer than
/// two). `depengine-perf` takes it before each round of each row too.
pub(crate) fn round_trip_ns() -> Option<f64> {
    let cores = core_affinity::get_core_ids().filter(|c| c.len() >= 2)?;
    let (a, b) = (cores[0], cores[1]);
    Some(median_of_tries(|| {
        // Odd values are the pinger's, even ones the ponger's answer.
        let word = AtomicU64::new(0);
        let elapsed = std::thread::scope(|s| {
            s.spawn(|| {
                core_affinity::set_for_current(b);
                for i in 0..ROUND_TRIPS {
                    wait_for(&word, 2 * i + 1);
                    word.store(2 * i + 2, Ordering::Release);
                }
            });
            let pinger = s.spawn(|| {
                core_affinity::set_for_current(a);
                let start = Instant::now();
                for i in 0..ROUND_TRIPS {
                    word.store(2 * i + 1, Ordering::Release);
                    wait_for(&word, 2 * i + 2);
                }
                start.elapsed()
            });
            pinger.join().expect("pinger")
        });
        elapsed.as_nanos() as f64 / ROUND_TRIPS as f64
    }))
}

/// The median of [`TRIES`] calls of `measure`.
fn median_of_tries(measure: impl FnMut() -> f64) -> f64 {
    let mut tries: Vec<f64> = std::iter::repeat_with(measure).take(TRIES).collect();
    median(&mut tries)
}

/// Spins until `word` holds `value`, yielding now and then.
fn wait_for(word: &AtomicU64, value: u64) {
    let mut spins = 0u32;
    while word.load(Ordering::Acquire) != value {
        spins += 1;
        if spins == SPINS_BEFORE_YIELD {
            spins = 0;
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// ns per W=1000 body on the calling thread.
fn one_thread_body_ns() -> f64 {
    median_of_tries(|| {
        let start = Instant::now();
        (0..BODIES).for_each(|i| work(i, WEIGHT));
        start.elapsed().as_nanos() as f64 / BODIES as f64
    })
}

/// ns per W=1000 body with [`BODIES`] split over two unpinned threads,
/// measured from before the first is started to after both have ended.
fn two_thread_body_ns() -> f64 {
    median_of_tries(|| {
        let start = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| (0..BODIES / 2).for_each(|i| work(i, WEIGHT)));
            (BODIES / 2..BODIES).for_each(|i| work(i, WEIGHT));
        });
        start.elapsed().as_nanos() as f64 / BODIES as f64
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figures are positive and finite, and the round trip exists
    /// wherever two CPUs do. A probe that measured nothing (a loop the
    /// compiler removed, a wrong divisor) would read as zero or below a
    /// nanosecond per W=1000 body.
    #[test]
    fn the_probe_measures_something() {
        let state = probe();
        assert!(state.body_ns > 50.0, "{state}");
        assert!(state.two_threads_ns > 10.0 && state.two_threads_ns.is_finite(), "{state}");
        let cpus = core_affinity::get_core_ids().map_or(0, |c| c.len());
        assert_eq!(state.round_trip_ns.is_some(), cpus >= 2, "{state}");
        if let Some(rt) = state.round_trip_ns {
            assert!(rt > 1.0 && rt.is_finite(), "{state}");
        }
    }
}
