//! The performance targets read off a run's rows, for the markdown
//! report: per depengine engine, `chain` ÷ `nodeps` at W=0 (target: 2 or
//! less) and each parallel workload's W=1000 ns/op over the two-worker
//! floor (target: 1.10 or less).
//!
//! Each ratio comes two ways, the side-by-side one first where the run
//! took it, since the host's speed drifts by 10–20 % within minutes
//! (run36: a body took 1,486 ns before the rows and 1,792 after):
//!
//! - `chain` ÷ `nodeps`: taken side by side (`--chain-pairs`: the pairs'
//!   median and range), and from the two rows' medians, minutes apart.
//! - W=1000 (the floor of the run's workers, `--threads`: two on the
//!   two-core hosts): side by side where the run probed the floor around each
//!   round of the row (`measure_row`): the median of the rounds' ratios,
//!   each round's ns/op over the floor taken just before and after it;
//!   then the same rounds split by the state the cores were in while our
//!   engines ran ([`NEAR`]): the hosts switch between a cache-line round
//!   trip of 50–80 ns and one of 350–480 within seconds, and each state
//!   gives its own reading.
//!   And against one floor for the whole run, up to half an hour from the
//!   row: the lowest side-by-side figure among the run's probes that ran
//!   side by side ([`MachineState::side_by_side_unreliable`]); if none
//!   did, the lowest one-thread figure over the workers.
//!
//! On one CPU (a run confined with `taskset -c 0`) the floor's two threads
//! take turns, so the floor is one body per operation and each W=1000
//! ratio reads 1 + the engine's own work over one body, with no line
//! crossing between cores: the tables say so instead of naming the
//! target, which is for two CPUs and more (perf/journal/2026-11-28.md, "fifteenth session").
//!
//! The rows' medians are a quick reading, which the pair ratios of a
//! `--pairs` run and PERF.md's account stand behind.

use crate::probe::MachineState;
use crate::{ChainOverNodeps, Row};
use std::fmt::Write as _;

/// The workloads whose W=1000 figure the target compares with the floor
/// (`chain` is serial).
const PARALLEL: [&str; 5] = ["nodeps", "chains64", "fanout", "random", "layered"];

/// A round met the cores in their near state when both its round trips
/// were within this many times the run's lowest (50 against 350–390 ns on
/// the AMD host, 80 against 480 on the Intel one).
const NEAR: f64 = 2.0;

/// What the floor is on one CPU, where a ratio to it is the engine's own
/// work (module docs).
pub(crate) const ONE_CPU_FLOOR: &str =
    "the floor of one CPU (its two threads take turns: one body per operation, so a ratio is 1 + the engine's own work over one body, with no line crossing between cores)";

/// The workers' floor of a run with these probes, ns per body, and
/// where it came from; `None` without any probe.
fn floor(states: [Option<&MachineState>; 2]) -> Option<(f64, &'static str)> {
    let probes = states.iter().flatten();
    let side_by_side = probes.clone().filter(|s| !s.side_by_side_unreliable()).map(|s| s.side_by_side_ns);
    if let Some(ns) = side_by_side.reduce(f64::min) {
        return Some((ns, "the probes' side-by-side figure"));
    }
    let ideal = probes.map(|s| s.ideal_ns()).reduce(f64::min)?;
    Some((ideal, "the probes' one-thread figure over the workers (no side-by-side figure ran side by side)"))
}

/// What the floor of a run whose probes split the bodies over `workers`
/// threads is called, and its target (the two-core hosts' figure, or
/// the many-core one of issue 65's 16-core rows).
fn floor_and_target(workers: usize) -> (String, &'static str) {
    let target = match workers {
        1 => "the target is for two workers and more",
        2 => "target: 1.10 or less",
        _ => "target on many cores: 1.15 or less",
    };
    (format!("the {}", crate::probe::floor_name(workers)), target)
}

/// The section, or nothing if the run has none of the rows it reads.
pub(crate) fn markdown(rows: &[Row], states: [Option<&MachineState>; 2], side: &[ChainOverNodeps]) -> String {
    let ours = crate::our_throughput_rows(rows);
    let engines = crate::engines_of(&ours);
    let ns = |engine: &str, workload: &str, w: u32| {
        crate::throughput_row(ours.iter().copied(), engine, workload, w).map(|r| r.ns_per_op)
    };
    let mut s = String::new();
    let chain_over_nodeps: Vec<String> =
        engines.iter().filter_map(|e| Some(format!("{e} {:.2}", ns(e, "chain", 0)? / ns(e, "nodeps", 0)?))).collect();
    if !chain_over_nodeps.is_empty() {
        let _ = writeln!(s, "`chain` ÷ `nodeps` at W=0 (target: 2.00 or less): {}.\n", chain_over_nodeps.join(", "));
    }
    if !side.is_empty() {
        let each: Vec<String> = side.iter().map(|c| format!("{} {}", c.engine, c.text())).collect();
        let _ = writeln!(
            s,
            "`chain` ÷ `nodeps` at W=0 side by side (a repetition of each in turn; the pairs' median and range): {}.\n",
            each.join(", ")
        );
    }
    let workloads: Vec<&str> =
        PARALLEL.into_iter().filter(|wl| engines.iter().any(|e| ns(e, wl, 1000).is_some())).collect();
    let over_round_floor = |engine: &str, workload: &str| {
        crate::throughput_row(ours.iter().copied(), engine, workload, 1000).and_then(Row::over_floor)
    };
    let one_cpu = states.iter().flatten().any(|st| st.on_one_cpu());
    if engines.iter().any(|e| workloads.iter().any(|wl| over_round_floor(e, wl).is_some())) {
        let (floor_is, target) = if one_cpu {
            (ONE_CPU_FLOOR.to_owned(), "the target, 1.10 or less, is for two CPUs and more")
        } else {
            let workers = states.iter().flatten().map(|st| st.workers).max().unwrap_or(2);
            floor_and_target(workers)
        };
        let _ = writeln!(
            s,
            "W=1000 ns/op over {floor_is} taken around each round (the probe's body figures before and after our engines ran; the median of the rounds' ratios; {target}):\n"
        );
        table(&mut s, &engines, &workloads, |e, wl| over_round_floor(e, wl).map(two_places));
        by_state(&mut s, &ours, &engines, &workloads);
    }
    if let (Some((floor, source)), false) = (floor(states), workloads.is_empty()) {
        let source = if one_cpu { format!("{source}, one body per operation on one CPU") } else { source.to_owned() };
        let _ = writeln!(s, "W=1000 ns/op over one floor for the whole run, {floor:.0} ns/op, {source}:\n");
        table(&mut s, &engines, &workloads, |e, wl| Some(two_places(ns(e, wl, 1000)? / floor)));
    }
    if s.is_empty() {
        return s;
    }
    format!("### Targets\n\n{s}")
}

/// The per-round ratios again, split by the state of the cores while our
/// engines ran: rounds whose cache-line round trips (just before and just
/// after our engines' turn) both stayed within [`NEAR`] times the lowest
/// of the run's W=1000 rounds, and rounds whose both were above that.
/// Rounds that met both states are in neither. Each cell gives the median
/// and, in brackets, how many rounds it is of.
fn by_state(s: &mut String, ours: &[&Row], engines: &[&str], workloads: &[&str]) {
    let row = |e: &str, wl: &str| crate::throughput_row(ours.iter().copied(), e, wl, 1000);
    let trips = ours.iter().filter(|r| r.w == 1000).flat_map(|r| &r.floor_rounds).filter_map(|f| f.round_trips);
    let Some(lowest) = trips.flatten().reduce(f64::min) else { return };
    let limit = NEAR * lowest;
    for near in [true, false] {
        let cell = |e: &str, wl: &str| {
            let (over, rounds) = row(e, wl)?.over_floor_of(|f| {
                f.round_trips.is_some_and(|[b, a]| if near { b.max(a) <= limit } else { b.min(a) > limit })
            })?;
            Some(format!("{over:.2} ({rounds})"))
        };
        if !engines.iter().any(|e| workloads.iter().any(|wl| cell(e, wl).is_some())) {
            continue;
        }
        let which = if near { "within" } else { "above" };
        let _ = writeln!(
            s,
            "The same, over the rounds whose round trips between two CPUs, just before and just after our engines ran, were both {which} {limit:.0} ns ({NEAR:.0} × the lowest of the run's W=1000 rounds; the number of rounds in brackets):\n"
        );
        table(s, engines, workloads, cell);
    }
}

/// A ratio as the tables print it.
fn two_places(v: f64) -> String {
    format!("{v:.2}")
}

/// A table of ratios, an engine a line and a workload a column.
fn table(s: &mut String, engines: &[&str], workloads: &[&str], cell: impl Fn(&str, &str) -> Option<String>) {
    let _ = writeln!(s, "| engine | {} |\n|---|{}", workloads.join(" | "), "---|".repeat(workloads.len()));
    for e in engines {
        let cells: Vec<String> = workloads.iter().map(|wl| cell(e, wl).unwrap_or_else(|| "–".to_owned())).collect();
        let _ = writeln!(s, "| {e} | {} |", cells.join(" | "));
    }
    s.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FloorRound;

    fn row(engine: &str, workload: &str, w: u32, ns_per_op: f64) -> Row {
        Row {
            engine: engine.into(),
            workload: workload.into(),
            w,
            n: 1,
            ns_per_op,
            allocs_per_op: Some(0.0),
            rss_mb: None,
            pingpong: None,
            reps: Vec::new(),
            stats: None,
            floor_rounds: Vec::new(),
        }
    }

    fn state(side_by_side_ns: f64) -> MachineState {
        MachineState {
            round_trip_ns: Some(120.0),
            written_lines: None,
            handover_ns: None,
            weight: crate::probe::WEIGHT,
            body_ns: 1_500.0,
            workers: 2,
            side_by_side_ns,
        }
    }

    /// The ratios come from the right rows, and the floor skips a probe
    /// that did not run side by side (run35's 981 against 757).
    #[test]
    fn the_targets_read_the_rows_against_the_side_by_side_floor() {
        let rows = [
            row("per_device", "nodeps", 0, 11.1),
            row("per_device", "chain", 0, 21.3),
            row("per_device", "random", 1000, 957.0),
            row("per_device", "nodeps", 1000, 814.0),
        ];
        let (slow, good) = (state(981.0), state(757.0));
        let side = [ChainOverNodeps { engine: "per_device", pairs: vec![1.90, 1.80, 1.85] }];
        let text = markdown(&rows, [Some(&slow), Some(&good)], &side);
        assert!(text.contains("per_device 1.92"), "{text}");
        assert!(text.contains("side by side (a repetition of each in turn; the pairs' median and range): per_device 1.85 (1.80–1.90 over 3 pairs)."), "{text}");
        assert!(text.contains("run, 757 ns/op, the probes' side-by-side figure"), "{text}");
        assert!(text.contains("| engine | nodeps | random |"), "{text}");
        assert!(text.contains("| per_device | 1.08 | 1.26 |"), "{text}");
    }

    /// A row's ratio to the floors taken around its rounds gets a table of
    /// its own, before the one against the run's floor.
    #[test]
    fn the_rounds_own_floors_come_first() {
        let mut random = row("per_device", "random", 1000, 957.0);
        random.floor_rounds = vec![FloorRound { over: 1.2345, round_trips: None }];
        let rows = [random, row("per_device", "nodeps", 1000, 814.0)];
        let text = markdown(&rows, [Some(&state(757.0)), None], &[]);
        let own = text.find("floor taken around each round").expect(&text);
        let whole = text.find("one floor for the whole run, 757 ns/op").expect(&text);
        assert!(own < whole, "{text}");
        assert!(text.contains("| per_device | – | 1.23 |\n\nW=1000"), "{text}");
        assert!(text.contains("| per_device | 1.08 | 1.26 |"), "{text}");
    }

    /// The rounds split by the cores' state: near rounds (both round
    /// trips within twice the run's lowest), far rounds (both above), and
    /// a round that met both states in neither table.
    #[test]
    fn the_rounds_split_by_the_state_of_the_cores() {
        let round = |over: f64, b: f64, a: f64| FloorRound { over, round_trips: Some([b, a]) };
        let mut random = row("per_device", "random", 1000, 957.0);
        random.floor_rounds = vec![
            round(1.12, 50.0, 55.0),
            round(1.45, 360.0, 370.0),
            round(1.30, 52.0, 380.0),
            round(1.14, 60.0, 48.0),
            round(1.41, 390.0, 350.0),
            round(1.43, 355.0, 365.0),
        ];
        let mut nodeps = row("per_device", "nodeps", 1000, 760.0);
        nodeps.floor_rounds = vec![round(1.04, 51.0, 49.0)];
        let text = markdown(&[random, nodeps], [None, None], &[]);
        let near = text.find("were both within 96 ns (2 × the lowest").expect(&text);
        let far = text.find("were both above 96 ns").expect(&text);
        assert!(near < far, "{text}");
        assert!(text[near..far].contains("| per_device | 1.04 (1) | 1.14 (2) |"), "{text}");
        assert!(text[far..].contains("| per_device | – | 1.43 (3) |"), "{text}");
        // Without round trips (one CPU) there is no split.
        let mut lone = row("per_device", "random", 1000, 957.0);
        lone.floor_rounds = vec![FloorRound { over: 1.30, round_trips: None }];
        assert!(!markdown(&[lone], [None, None], &[]).contains("were both"));
    }

    /// On one CPU (no round trip) the tables say what the floor is there
    /// and leave the two-CPU target out.
    #[test]
    fn one_cpu_reads_the_engines_own_work() {
        let mut random = row("per_device", "random", 1000, 1_582.0);
        random.floor_rounds = vec![FloorRound { over: 1.13, round_trips: None }];
        let lone = MachineState {
            round_trip_ns: None,
            written_lines: None,
            handover_ns: None,
            weight: crate::probe::WEIGHT,
            body_ns: 1_401.0,
            workers: 1,
            side_by_side_ns: 1_411.0,
        };
        let text = markdown(&[random], [Some(&lone), None], &[]);
        assert!(text.contains(&format!("over {ONE_CPU_FLOOR} taken around each round")), "{text}");
        assert!(text.contains("is for two CPUs and more"), "{text}");
        assert!(!text.contains("two-worker") && !text.contains("target: 1.10"), "{text}");
        assert!(
            text.contains("1411 ns/op, the probes' side-by-side figure, one body per operation on one CPU:"),
            "{text}"
        );
        assert!(text.contains("| per_device | 1.13 |"), "{text}");
        // With two CPUs the same row is read against the target.
        let mut random = row("per_device", "random", 1000, 800.0);
        random.floor_rounds = vec![FloorRound { over: 1.13, round_trips: Some([50.0, 50.0]) }];
        let text = markdown(&[random], [Some(&state(710.0)), None], &[]);
        assert!(
            text.contains("over the two-worker floor taken around each round") && text.contains("target: 1.10"),
            "{text}"
        );
        // With 15 workers (the 16-core rows) it names their floor and target.
        let mut random = row("per_device", "random", 1000, 120.0);
        random.floor_rounds = vec![FloorRound { over: 1.09, round_trips: Some([50.0, 50.0]) }];
        let many = MachineState { workers: 15, side_by_side_ns: 101.0, ..state(0.0) };
        let text = markdown(&[random], [Some(&many), None], &[]);
        assert!(
            text.contains("over the 15-worker floor taken around each round")
                && text.contains("target on many cores: 1.15"),
            "{text}"
        );
    }

    /// With no side-by-side probe the floor is the one-thread figure over
    /// the workers (half of it with two);
    /// with no probe, and no W=0 pair, there is no section.
    #[test]
    fn the_floor_falls_back_and_an_empty_run_has_no_section() {
        let rows = [row("pooled", "fanout", 1000, 900.0)];
        let text = markdown(&rows, [Some(&state(981.0)), None], &[]);
        assert!(text.contains("run, 750 ns/op, the probes' one-thread figure over the workers"), "{text}");
        assert!(text.contains("| pooled | 1.20 |"), "{text}");
        assert!(!text.contains("W=0 side by side") && !text.contains("around each round"), "{text}");
        assert!(markdown(&rows, [None, None], &[]).is_empty());
    }
}
