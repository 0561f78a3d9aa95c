//! The machine's state at the time of a run, measured without any engine,
//! so that a table can be read against what the hardware did meanwhile.
//!
//! Four figures, all cheap (well under a second together):
//!
//! - **The cache-line round trip** between the first two CPUs this
//!   process may use: one thread pinned to each passes a counter back and
//!   forth through one atomic word. Every threaded engine pays a fraction
//!   of this for each line that crosses cores, so its W=0 rows follow it.
//!   On the shared 2-vCPU machines of this project it has been seen to
//!   switch between ~32, 75–130 and 450–550 ns within seconds, with the
//!   host's placement of the virtual CPUs.
//! - **A line another CPU has just written**, read by dependent loads
//!   (a chase through lines in a fixed shuffled order): as written, then
//!   after the writer has sent each line to the shared cache (`cldemote`,
//!   which depengine's dispatcher issues for an operation whose read
//!   waits: `docs/var-queue.md`). The two agree on CPUs without the
//!   instruction (it is a no-op there, AMD's included); on the Xeon hosts
//!   the second was about half the first. Then the same lines, as
//!   written, read by independent loads (each address known without the
//!   line before): what a line costs when the CPU can overlap its
//!   transfer with others. On the Intel host of 2026-11-27 that was 5 ns
//!   a line against 78 for the chase, so there a handful of misses cost
//!   what their longest chain of dependent loads costs, not their number.
//! - **A thread hand-over on one CPU**: two threads pinned to the first
//!   CPU this process may use pass a counter back and forth, each
//!   yielding its CPU (`sched_yield`) until it is its turn; the time per
//!   hand-over is a yield plus a switch between threads. A throttled
//!   pusher that shares a CPU with a worker pays two of these for each
//!   turn it takes there (1.1 µs each on the Zen 5 host, where a W=1000
//!   body takes 1.5: perf/journal/2026-11-28.md, "nineteenth session"), so it is what a
//!   pusher's turn cannot be shorter than.
//! - **The bare floor of the run's workers at W=1000**: the workload's
//!   own body (`workloads::work`) run on one thread, then split over as
//!   many threads as the run has workers (`--threads`, at most the CPUs;
//!   two on the two-core hosts), started together, with no engine at all.
//!   That many engine workers cannot beat the second figure, so it is the
//!   floor the W=1000 rows are compared with, next to the "ideal" of the
//!   one-thread time over the workers. With two CPUs or more, a second
//!   figure more than 10 % over that ideal is flagged as no floor: the
//!   host slowed, or something else took a CPU, while it was taken.
//!   `depengine-perf` also takes these two figures alone ([`bodies`])
//!   around each round of every row with W > 0, at that row's W, so that
//!   the row's rounds are compared with floors of the same minutes and
//!   the same body (the target reads the W=1000 rows; another W
//!   shows how the engine's share moves with the body's length).

use crate::measure::median;
use crate::workloads::{work, SplitMix};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// What [`probe`] measured.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MachineState {
    /// The median cache-line round trip between two CPUs, in ns (`None`
    /// with fewer than two CPUs to pin to).
    pub(crate) round_trip_ns: Option<f64>,
    /// What lines another CPU has just written cost to read
    /// ([`written_line_read_ns`]; `None` with fewer than two CPUs).
    pub(crate) written_lines: Option<WrittenLines>,
    /// ns per hand-over between two threads on one CPU
    /// ([`handover_ns`]; `None` where the process cannot pin).
    pub(crate) handover_ns: Option<f64>,
    /// The body weight `W` of the body figures below ([`WEIGHT`] but
    /// for the floors taken around a row of another W).
    pub(crate) weight: u32,
    /// One body of that weight on one thread, ns (median of the tries).
    pub(crate) body_ns: f64,
    /// The threads the side-by-side figure splits the bodies over: the
    /// run's workers, at most its CPUs.
    pub(crate) workers: usize,
    /// ns per body with the bodies split over [`MachineState::workers`]
    /// threads.
    pub(crate) side_by_side_ns: f64,
}

/// ns per line to read lines another CPU has just written.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WrittenLines {
    /// One dependent load after another, the lines as written.
    pub(crate) chased: f64,
    /// The same chase after the writer demoted each line (`cldemote`).
    pub(crate) demoted: f64,
    /// Independent loads of the lines as written.
    pub(crate) independent: f64,
}

/// The most a side-by-side figure may exceed the one-thread one over the
/// workers and still be read as that many CPUs running side by side: on
/// the two-core hosts it reads 0.98–1.05, and 1.29 in a slow spell
/// (run35's first probe).
const SIDE_BY_SIDE_EXCESS: f64 = 1.10;

impl MachineState {
    /// The side-by-side figure over the one-thread one divided by the
    /// workers: 1.00 when N threads run bodies N times as fast as one.
    pub(crate) fn side_by_side_excess(&self) -> f64 {
        self.side_by_side_ns / self.ideal_ns()
    }

    /// The one-thread figure over the workers: the ideal the side-by-side
    /// figure is held to.
    pub(crate) fn ideal_ns(&self) -> f64 {
        self.body_ns / self.workers as f64
    }

    /// Whether, with two CPUs or more, the side-by-side bodies took
    /// clearly longer than the one thread's over the workers: the host
    /// slowed or another program took a CPU meanwhile. (With one CPU
    /// there is one worker, and one thread's time is the floor.)
    pub(crate) fn side_by_side_unreliable(&self) -> bool {
        !self.on_one_cpu() && self.side_by_side_excess() > SIDE_BY_SIDE_EXCESS
    }

    /// Whether the probe ran on one CPU (it took no round trip between two).
    pub(crate) fn on_one_cpu(&self) -> bool {
        self.round_trip_ns.is_none()
    }

    /// The workers' floor these figures give, ns per body: the
    /// side-by-side figure, unless it is flagged, then the ideal.
    pub(crate) fn floor_ns(&self) -> f64 {
        if self.side_by_side_unreliable() {
            self.ideal_ns()
        } else {
            self.side_by_side_ns
        }
    }
}

impl std::fmt::Display for MachineState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.round_trip_ns {
            Some(rt) => write!(f, "cache-line round trip between two CPUs {rt:.0} ns; ")?,
            None => write!(f, "cache-line round trip: fewer than two CPUs; ")?,
        }
        if let Some(w) = self.written_lines {
            write!(
                f,
                "a line the other CPU wrote read in {:.0} ns, {:.0} after cldemote, {:.0} by independent loads; ",
                w.chased, w.demoted, w.independent
            )?;
        }
        if let Some(ns) = self.handover_ns {
            write!(f, "a thread hand-over on one CPU {ns:.0} ns; ")?;
        }
        write!(
            f,
            "W={} bodies with no engine: {:.0} ns on one thread, {:.0} ns/body on {} ({:.2} × one over {})",
            self.weight,
            self.body_ns,
            self.side_by_side_ns,
            self.workers,
            self.side_by_side_excess(),
            self.workers
        )?;
        if self.side_by_side_unreliable() {
            write!(
                f,
                " (over {SIDE_BY_SIDE_EXCESS:.2}: the {} threads did not run side by side throughout, so this figure is no floor for the W={} rows)",
                self.workers, self.weight
            )?;
        }
        Ok(())
    }
}

/// Measures the machine's state now (see the module docs), the
/// side-by-side figure over `workers` threads (at most the CPUs).
pub(crate) fn probe(workers: usize) -> MachineState {
    MachineState {
        written_lines: written_line_read_ns(),
        handover_ns: handover_ns(),
        ..bodies(round_trip_ns(), WEIGHT, workers)
    }
}

/// The body figures alone at body weight `weight` (about a tenth of a
/// second at W=1000), with a round trip taken beside them (`None`: fewer
/// than two CPUs): what `depengine-perf` takes around each round of a row
/// with W > 0, at its W, for that round's floor. The side-by-side figure
/// runs on `workers` threads, at most this process's CPUs and at least one.
pub(crate) fn bodies(round_trip_ns: Option<f64>, weight: u32, workers: usize) -> MachineState {
    let workers = floor_workers(workers);
    MachineState {
        round_trip_ns,
        written_lines: None,
        handover_ns: None,
        weight,
        body_ns: one_thread_body_ns(weight),
        workers,
        side_by_side_ns: side_by_side_body_ns(weight, workers),
    }
}

/// The threads the side-by-side figure of a run with `workers` workers
/// runs on: at most this process's CPUs, at least one.
pub(crate) fn floor_workers(workers: usize) -> usize {
    let cpus = core_affinity::get_core_ids().map_or(1, |c| c.len());
    workers.clamp(1, cpus.max(1))
}

/// What the floor of `workers` threads is called in the output.
pub(crate) fn floor_name(workers: usize) -> String {
    match workers {
        1 => "one-worker floor (one body per operation)".to_owned(),
        2 => "two-worker floor".to_owned(),
        n => format!("{n}-worker floor"),
    }
}

/// Rounds per try of the round trip, and tries (the median is kept).
const ROUND_TRIPS: u64 = 20_000;
const TRIES: usize = 5;
/// Spins on the shared word before a waiting side yields its CPU: far
/// more than a round trip takes, so a probe on an idle machine never
/// yields, and one that shares a CPU with another busy thread (the test
/// suite) still finishes.
const SPINS_BEFORE_YIELD: u32 = 100_000;
/// Bodies per try of the one-thread figure, and per pair of threads of
/// the side-by-side one (5,000 a thread: 7–10 ms at W=1000).
const BODIES: u64 = 10_000;
/// The body weight of the machine probe's body figures.
pub(crate) const WEIGHT: u32 = 1000;

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

/// Lines the writer of the written-line probe passes to the reader...
const WRITTEN_LINES: usize = 2048;
/// ...in this many passes per try, the first untimed.
const PASSES: u64 = 8;

/// One cache line, holding the index of the next line to read.
#[repr(align(64))]
struct Line(AtomicUsize);

/// The median over [`TRIES`] of the ns per line that a thread on the
/// second CPU this process may use takes to read [`WRITTEN_LINES`] lines
/// that a thread on the first has just written: one dependent load after
/// another as written, the same after the writer sent each to the shared
/// cache (`cldemote`), and by independent loads as written. `None` with
/// fewer than two CPUs.
pub(crate) fn written_line_read_ns() -> Option<WrittenLines> {
    let cores = core_affinity::get_core_ids().filter(|c| c.len() >= 2)?;
    let (writer, reader) = (cores[0], cores[1]);
    // One cycle through every line, in an order no prefetcher follows.
    let mut order: Vec<usize> = (0..WRITTEN_LINES).collect();
    let mut rng = SplitMix::new(42);
    for i in (1..WRITTEN_LINES).rev() {
        order.swap(i, rng.uniform(i as u64 + 1) as usize);
    }
    let lines: Vec<Line> = (0..WRITTEN_LINES).map(|_| Line(AtomicUsize::new(0))).collect();
    let read = |demote: bool, chase: bool| {
        median_of_tries(|| {
            // Even values: the writer's turn; odd ones: the reader's.
            let turn = AtomicU64::new(0);
            std::thread::scope(|s| {
                s.spawn(|| {
                    core_affinity::set_for_current(writer);
                    for pass in 0..PASSES {
                        wait_for(&turn, 2 * pass);
                        for (i, &at) in order.iter().enumerate() {
                            lines[at].0.store(order[(i + 1) % WRITTEN_LINES], Ordering::Relaxed);
                        }
                        if demote {
                            lines.iter().for_each(demote_line);
                        }
                        turn.store(2 * pass + 1, Ordering::Release);
                    }
                });
                let reader = s.spawn(|| {
                    core_affinity::set_for_current(reader);
                    let (mut at, mut sum, mut took) = (order[0], 0usize, Duration::ZERO);
                    for pass in 0..PASSES {
                        wait_for(&turn, 2 * pass + 1);
                        let start = Instant::now();
                        if chase {
                            for _ in 0..WRITTEN_LINES {
                                at = lines[at].0.load(Ordering::Relaxed);
                            }
                        } else {
                            // The same lines in the same order, each
                            // address known without reading the line before.
                            for &i in &order {
                                sum = sum.wrapping_add(lines[i].0.load(Ordering::Relaxed));
                            }
                        }
                        if pass > 0 {
                            took += start.elapsed();
                        }
                        turn.store(2 * pass + 2, Ordering::Release);
                    }
                    std::hint::black_box((at, sum));
                    took.as_nanos() as f64 / ((PASSES - 1) as f64 * WRITTEN_LINES as f64)
                });
                reader.join().expect("reader")
            })
        })
    };
    Some(WrittenLines { chased: read(false, true), demoted: read(true, true), independent: read(false, false) })
}

/// Hand-overs per try of the hand-over figure.
const HANDOVERS: u64 = 10_000;

/// The median over [`TRIES`] of the ns per hand-over between two threads
/// pinned to the first CPU this process may use, each yielding until the
/// shared counter says it is its turn. `None` where the process cannot
/// pin (no affinity mask to read).
pub(crate) fn handover_ns() -> Option<f64> {
    let cpu = *core_affinity::get_core_ids()?.first()?;
    Some(median_of_tries(|| {
        // Even values: the first thread's turn; odd ones: the second's.
        let turn = AtomicU64::new(0);
        let pass = |side: u64| {
            core_affinity::set_for_current(cpu);
            for i in 0..HANDOVERS {
                while turn.load(Ordering::Acquire) != 2 * i + side {
                    std::thread::yield_now();
                }
                turn.store(2 * i + side + 1, Ordering::Release);
            }
        };
        // Both sides on threads of their own: the caller's affinity stays.
        let start = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| pass(1));
            s.spawn(|| pass(0));
        });
        start.elapsed().as_nanos() as f64 / (2 * HANDOVERS) as f64
    }))
}

/// Sends `line` from this core's caches to the shared one (`cldemote`;
/// nothing off x86-64, a no-op on CPUs without the instruction).
fn demote_line(line: &Line) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `cldemote` never faults and changes no value: it only moves
    // the line between caches.
    unsafe {
        std::arch::asm!("cldemote [{0}]", in(reg) line, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = line;
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

/// ns per body of weight `weight` on the calling thread.
fn one_thread_body_ns(weight: u32) -> f64 {
    median_of_tries(|| {
        let start = Instant::now();
        (0..BODIES).for_each(|i| work(i, weight));
        start.elapsed().as_nanos() as f64 / BODIES as f64
    })
}

/// ns per body of weight `weight` with `BODIES / 2` a thread on
/// `workers` unpinned threads, the caller one of them, timed from the
/// moment all are ready to after the last has ended: starting threads
/// one by one would count their starts as work (tens of µs each, a few
/// per cent of a try with 15 threads).
fn side_by_side_body_ns(weight: u32, workers: usize) -> f64 {
    let each = BODIES / 2;
    let total = each * workers as u64;
    median_of_tries(|| {
        let (ready, go) = (AtomicUsize::new(0), AtomicU64::new(0));
        let mut start = None;
        std::thread::scope(|s| {
            for t in 1..workers as u64 {
                let (ready, go) = (&ready, &go);
                s.spawn(move || {
                    ready.fetch_add(1, Ordering::AcqRel);
                    wait_for(go, 1);
                    (t * each..(t + 1) * each).for_each(|i| work(i, weight));
                });
            }
            while ready.load(Ordering::Acquire) != workers - 1 {
                std::thread::yield_now();
            }
            start = Some(Instant::now());
            go.store(1, Ordering::Release);
            (0..each).for_each(|i| work(i, weight));
        });
        let start = start.expect("set before the scope ends");
        start.elapsed().as_nanos() as f64 / total as f64
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A two-thread figure well over half the one-thread one is flagged
    /// as no floor where there are two CPUs, and not with one.
    #[test]
    fn a_slow_two_thread_figure_is_flagged() {
        let state = |round_trip_ns, side_by_side_ns| MachineState {
            round_trip_ns,
            written_lines: None,
            handover_ns: None,
            weight: WEIGHT,
            body_ns: 1_500.0,
            workers: 2,
            side_by_side_ns,
        };
        assert!(!state(Some(120.0), 760.0).to_string().contains("no floor"));
        assert!(state(Some(120.0), 981.0).to_string().contains("no floor"));
        assert!(!state(None, 1_500.0).to_string().contains("no floor"), "one CPU: twice half of one is expected");
    }

    /// The floor around a row of another W is taken with bodies of that
    /// W and says so: one taken with W=1000 bodies would read a W=1333
    /// row a third slower than it is. Sixteen times the steps take well
    /// over four times as long (the margin covers a drift of the host's
    /// speed between the two and the per-body overhead of a debug build).
    #[test]
    fn the_floor_is_taken_at_the_rows_weight() {
        let _alone = crate::timeline::bodies_exclusive();
        let (light, heavy) = (bodies(None, 50, 2), bodies(None, 800, 2));
        assert_eq!((light.weight, heavy.weight), (50, 800));
        assert!(heavy.to_string().contains("W=800 bodies with no engine"), "{heavy}");
        assert!(heavy.body_ns > 4.0 * light.body_ns, "{light} / {heavy}");
    }

    /// The side-by-side figure runs on the workers asked for, at most the
    /// CPUs and at least one: 64 workers on a smaller machine would read
    /// a floor no engine there can reach... or flag every figure.
    #[test]
    fn the_side_by_side_figure_runs_on_the_cpus_there_are() {
        let _alone = crate::timeline::bodies_exclusive();
        let cpus = core_affinity::get_core_ids().map_or(1, |c| c.len().max(1));
        assert_eq!(bodies(None, 50, 64).workers, cpus);
        assert_eq!(bodies(None, 50, 0).workers, 1);
        let one = bodies(None, 50, 1);
        assert!(one.side_by_side_ns > 0.1 && one.side_by_side_ns.is_finite(), "{one}");
    }

    /// The floor is named by its workers, one included (`--threads 1`
    /// on a larger machine: one worker, not one CPU).
    #[test]
    fn the_floor_is_named_by_its_workers() {
        assert_eq!(floor_name(1), "one-worker floor (one body per operation)");
        assert_eq!(floor_name(2), "two-worker floor");
        assert_eq!(floor_name(15), "15-worker floor");
    }

    /// The hand-over probe pins only threads of its own: the caller may
    /// still use every CPU it could before (a probe that pinned it would
    /// leave the rest of a run, engines included, on one CPU).
    #[test]
    fn the_hand_over_probe_leaves_the_callers_cpus() {
        // Not beside the whole probe's pinned spinners, which would take
        // a slice of the CPU at every yield.
        let _alone = crate::timeline::bodies_exclusive();
        let before = core_affinity::get_core_ids();
        assert!(handover_ns().is_some() || before.is_none());
        let after = core_affinity::get_core_ids();
        assert_eq!(before.map(|c| c.len()), after.map(|c| c.len()));
    }

    /// The figures are positive and finite, and the round trip exists
    /// wherever two CPUs do. A probe that measured nothing (a loop the
    /// compiler removed, a wrong divisor) would read as zero or below a
    /// nanosecond per W=1000 body.
    #[test]
    fn the_probe_measures_something() {
        let state = {
            let _alone = crate::timeline::bodies_exclusive();
            probe(2)
        };
        assert!(state.body_ns > 50.0, "{state}");
        assert!(state.side_by_side_ns > 10.0 && state.side_by_side_ns.is_finite(), "{state}");
        let cpus = core_affinity::get_core_ids().map_or(0, |c| c.len());
        assert_eq!(state.round_trip_ns.is_some(), cpus >= 2, "{state}");
        assert_eq!(state.written_lines.is_some(), cpus >= 2, "{state}");
        assert_eq!(state.handover_ns.is_some(), cpus >= 1, "{state}");
        if let Some(ns) = state.handover_ns {
            // A yield and a switch are system calls' work: far over a ns.
            assert!(ns > 10.0 && ns.is_finite(), "{state}");
        }
        if let Some(rt) = state.round_trip_ns {
            assert!(rt > 1.0 && rt.is_finite(), "{state}");
        }
        if let Some(w) = state.written_lines {
            for ns in [w.chased, w.demoted, w.independent] {
                assert!(ns > 0.1 && ns.is_finite(), "{state}");
            }
        }
    }
}
