//! `depengine-perf`: the standard workload table (`shared/WORKLOADS.md`) on
//! every engine, optionally side by side with peer binaries in one run.
//!
//! ```text
//! cargo run --release -p depengine-perf -- [options]
//!   --engines naive,pooled     engines to run: naive, pooled, per_device, and
//!                              pooled+pusher, per_device+pusher (running on the
//!                              pusher, `EngineBuilder::run_on_pusher`); default:
//!                              naive,pooled,per_device,per_device+pusher
//!   --workloads a,b,…          throughput workloads and/or pingpong (default: all);
//!                              also typed_chain and typed_chains64 (typed data)
//!   --w 0,1000                 body weights (default: 0,1000)
//!   --n N                      operations (default: 1,000,000 at W=0, 100,000 otherwise)
//!   --reps R                   timed repetitions after one warm-up (default: 5)
//!   --threads T                CPU workers (default: cores)
//!   --spin-us S                worker spin before parking (default: the engine's)
//!   --no-pin                   per_device: do not pin workers to CPUs
//!   --bulk B                   the pushing thread's bulk size (default: off)
//!   --pushers P                P threads push each throughput row at once, each
//!                              the whole workload on variables of its own; ns/op
//!                              over all their operations (default: 1)
//!   --share                    with --pushers, all P threads push on one set of
//!                              variables (the row is named …+Ppushers-shared)
//!   --peer NAME=PATH           a peer binary from shared/peers/cxx (repeatable); it
//!                              runs right after our engines on each row, and its
//!                              ratio to each engine is printed under the row
//!   --pairs K                  run each row K times, engines and peers in turn
//!                              (A B A B …): rows are medians over the rounds and
//!                              ratios are taken pair by pair (default: 1)
//!   --json PATH                also write the results as JSON
//!   --svg PATH                 also draw them as an SVG bar chart (log scale)
//!   --markdown PATH            also write them as markdown tables, with the
//!                              peers' ratios and the targets (`targets.rs`;
//!                              what perf/report.sh puts in PERF.md)
//!   --chain-pairs K            after the rows, take `chain` ÷ `nodeps` at W=0
//!                              side by side on each of our engines: K pairs of
//!                              repetitions, one of each in turn (the
//!                              target; rows minutes apart meet different host
//!                              states); not with --take-turns
//!   --quick                    N/100 and 2 repetitions (a smoke run)
//!   --profile DIR              profile each of our engines' rows: a Chrome trace
//!                              DIR/<engine>-<workload>-w<W>.json and its summary
//!                              (.summary.txt: by operation name and by lane, how
//!                              busy each worker was) per row (keep --n small: each
//!                              lane keeps its last 32,768 operations)
//!   --timeline DIR             record when each body of our engines' W>0 rows
//!                              ran and on which thread, from the body itself
//!                              (no engine stamps: `timeline.rs`), and write the
//!                              last repetition of each row to
//!                              DIR/<engine>-<workload>-w<W>.tsv
//!                              (perf/timeline.py reads it)
//!   --stats                    print each engine's counters (depengine::EngineStats)
//!                              under its row, summed over all repetitions, and
//!                              each thread's share of a core over the timed
//!                              repetitions (Linux; in 10 ms ticks)
//!   --no-probe                 skip the machine probe (perf/instructions.sh: under
//!                              valgrind, which runs one thread at a time, its
//!                              two spinning threads take hours)
//!   --reps-out PATH            append every timed repetition to PATH, a line
//!                              each: engine, workload, W (`p50` for pingpong)
//!                              and its ns/op (pingpong: its p50)
//!   --take-turns first:DIR     take turns with a second process, repetition by
//!   --take-turns second:DIR    repetition, over the named pipes DIR/to_first and
//!                              DIR/to_second (`turns.rs`; `TURNS=1 perf/ab.sh`);
//!                              both need the same rows and repetitions, and
//!                              --stats' core shares then count the other's turns
//! ```
//!
//! Every run probes the machine's state with no engine (`probe.rs`): before
//! and after the rows, the cache-line round trip before and after each
//! round of each row, and, for a row with W > 0, the body figures at that
//! W before and after our engines' turn in each round, whose floor that
//! round's ratios are taken against (the W=1000 target,
//! `targets.rs`, reads the W=1000 rows); the figures are printed and
//! written with the tables.

mod chart;
mod measure;
mod probe;
mod targets;
mod timeline;
mod turns;
mod workloads;

use depengine::{Engine, EngineBuilder, EngineKind, Var};

/// One of our engines as the harness runs it: a kind, and whether its
/// pushes may run bodies on the pushing thread below the pending cap
/// (`EngineBuilder::run_on_pusher`, off by default: `per_device+pusher`
/// is the opt-in, side by side with the default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ours {
    kind: EngineKind,
    on_pusher: bool,
}

impl Ours {
    /// Every engine and mode the harness knows, in table order.
    const ALL: [Ours; 5] = [
        Ours { kind: EngineKind::Naive, on_pusher: false },
        Ours { kind: EngineKind::Pooled, on_pusher: false },
        Ours { kind: EngineKind::PerDevice, on_pusher: false },
        Ours { kind: EngineKind::Pooled, on_pusher: true },
        Ours { kind: EngineKind::PerDevice, on_pusher: true },
    ];

    /// What runs by default: every engine, and per_device in both modes.
    const DEFAULT: [Ours; 4] = [Self::ALL[0], Self::ALL[1], Self::ALL[2], Self::ALL[4]];

    fn name(self) -> &'static str {
        match (self.kind, self.on_pusher) {
            (EngineKind::Naive, _) => "naive",
            (EngineKind::Pooled, false) => "pooled",
            (EngineKind::Pooled, true) => "pooled+pusher",
            (_, false) => "per_device",
            (_, true) => "per_device+pusher",
        }
    }

    fn parse(s: &str) -> Result<Ours, String> {
        Self::ALL.into_iter().find(|o| o.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|o| o.name()).collect();
            format!("unknown engine {s:?} (one of {})", names.join(", "))
        })
    }
}
use measure::{allocations, cpu_shares, cpus, machine, median, peak_rss_mb, reset_peak_rss, thread_cpu, CountingAlloc};
use probe::{probe, round_trip_ns, MachineState};
use std::fmt::Write as _;
use std::process::Command;
use std::time::{Duration, Instant};
use workloads::{Workload, THROUGHPUT, TYPED};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

struct Options {
    engines: Vec<Ours>,
    workloads: Vec<String>,
    weights: Vec<u32>,
    n: Option<usize>,
    reps: usize,
    threads: usize,
    spin_us: Option<u64>,
    bulk: usize,
    /// `--pushers`: threads pushing each throughput row at once, each its
    /// own copy of the workload on variables of its own.
    pushers: usize,
    /// `--share`: the pushers push on one set of variables.
    share: bool,
    peers: Vec<(String, String)>,
    json: Option<String>,
    svg: Option<String>,
    markdown: Option<String>,
    pairs: usize,
    quick: bool,
    stats: bool,
    profile: Option<std::path::PathBuf>,
    /// `--timeline`: the folder of the bodies' timelines.
    timeline: Option<std::path::PathBuf>,
    pin: bool,
    reps_out: Option<String>,
    no_probe: bool,
    /// `--chain-pairs`: pairs of `chain` and `nodeps` repetitions (0: none).
    chain_pairs: usize,
    /// `--take-turns`: whether this process goes first, and the pipes' folder.
    take_turns: Option<(bool, std::path::PathBuf)>,
}

fn usage(msg: &str) -> ! {
    eprintln!("depengine-perf: {msg}\n(see the header of perf/src/main.rs for the options)");
    std::process::exit(2)
}

fn parse_args() -> Options {
    let mut o = Options {
        engines: Ours::DEFAULT.to_vec(),
        workloads: THROUGHPUT.iter().map(|s| s.to_string()).chain(["pingpong".to_string()]).collect(),
        weights: vec![0, 1000],
        n: None,
        reps: 5,
        threads: cpus(),
        spin_us: None,
        bulk: 0,
        pushers: 1,
        share: false,
        peers: Vec::new(),
        json: None,
        svg: None,
        markdown: None,
        pairs: 1,
        quick: false,
        stats: false,
        profile: None,
        timeline: None,
        pin: true,
        reps_out: None,
        no_probe: false,
        chain_pairs: 0,
        take_turns: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| usage(&format!("{a} needs a value")));
        match a.as_str() {
            "--engines" => o.engines = val().split(',').map(|s| Ours::parse(s).unwrap_or_else(|e| usage(&e))).collect(),
            "--workloads" => o.workloads = val().split(',').map(str::to_owned).collect(),
            "--w" => o.weights = val().split(',').map(|s| s.parse().unwrap_or_else(|_| usage("bad --w"))).collect(),
            "--n" => o.n = Some(val().parse().unwrap_or_else(|_| usage("bad --n"))),
            "--reps" => o.reps = val().parse().unwrap_or_else(|_| usage("bad --reps")),
            "--threads" => o.threads = val().parse().unwrap_or_else(|_| usage("bad --threads")),
            "--spin-us" => o.spin_us = Some(val().parse().unwrap_or_else(|_| usage("bad --spin-us"))),
            "--stats" => o.stats = true,
            "--svg" => o.svg = Some(val()),
            "--markdown" => o.markdown = Some(val()),
            "--pairs" => o.pairs = val().parse().ok().filter(|&k| k > 0).unwrap_or_else(|| usage("bad --pairs")),
            "--chain-pairs" => o.chain_pairs = val().parse().unwrap_or_else(|_| usage("bad --chain-pairs")),
            "--no-pin" => o.pin = false,
            "--profile" => o.profile = Some(val().into()),
            "--timeline" => o.timeline = Some(val().into()),
            "--bulk" => o.bulk = val().parse().unwrap_or_else(|_| usage("bad --bulk")),
            "--pushers" => o.pushers = val().parse().ok().filter(|&p| p > 0).unwrap_or_else(|| usage("bad --pushers")),
            "--share" => o.share = true,
            "--peer" => {
                let v = val();
                let (name, path) = v.split_once('=').unwrap_or_else(|| usage("--peer takes NAME=PATH"));
                o.peers.push((name.to_owned(), path.to_owned()));
            }
            "--json" => o.json = Some(val()),
            "--reps-out" => o.reps_out = Some(val()),
            "--take-turns" => {
                let v = val();
                let (first, dir) = match v.split_once(':') {
                    Some(("first", dir)) => (true, dir),
                    Some(("second", dir)) => (false, dir),
                    _ => usage("--take-turns takes first:DIR or second:DIR"),
                };
                o.take_turns = Some((first, dir.into()));
            }
            "--quick" => o.quick = true,
            "--no-probe" => o.no_probe = true,
            "-h" | "--help" => usage("help"),
            other => usage(&format!("unknown option {other}")),
        }
    }
    for w in &o.workloads {
        if w != "pingpong" && !THROUGHPUT.contains(&w.as_str()) && !TYPED.contains(&w.as_str()) {
            usage(&format!("unknown workload {w}"));
        }
    }
    if o.quick {
        o.reps = o.reps.min(2);
    }
    if let Some(dir) = &o.timeline {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| usage(&format!("--timeline {}: {e}", dir.display())));
    }
    if o.chain_pairs > 0 && o.take_turns.is_some() {
        usage("--chain-pairs does not take turns with another process");
    }
    o
}

fn build_engine(kind: Ours, row: &str, o: &Options) -> Engine {
    // The DEPENGINE_* variables apply (e.g. DEPENGINE_MAX_PENDING); the
    // harness's own options override them.
    let base = EngineBuilder::from_env().unwrap_or_else(|e| usage(&format!("DEPENGINE_* environment: {e}")));
    let mut b = base.kind(kind.kind).cpu_workers(o.threads).pin(o.pin).run_on_pusher(kind.on_pusher);
    if let Some(us) = o.spin_us {
        b = b.spin(Duration::from_micros(us));
    }
    if let Some(dir) = &o.profile {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| usage(&format!("--profile {}: {e}", dir.display())));
        b = b.profile(dir.join(format!("{}-{row}.json", kind.name())));
    }
    b.build().expect("engine")
}

/// One row of the table.
#[derive(Clone)]
struct Row {
    engine: String,
    workload: String,
    w: u32,
    n: usize,
    ns_per_op: f64,
    allocs_per_op: Option<f64>,
    rss_mb: Option<f64>,
    pingpong: Option<[f64; 3]>,
    /// Each timed repetition's ns/op (pingpong: its p50), in order.
    reps: Vec<f64>,
    /// The engine's counters after the row (`--stats`).
    stats: Option<String>,
    /// Our engines' W=1000 rows, with the probe on: each round's ns/op
    /// over the workers' floor taken around that round, in order, with
    /// the state the cores met while our engines ran in it
    /// (`measure_row`; `targets.rs` splits the rounds by it).
    floor_rounds: Vec<FloorRound>,
}

impl Row {
    /// The median of [`Row::floor_rounds`]' ratios (`None`: none taken).
    fn over_floor(&self) -> Option<f64> {
        self.over_floor_of(|_| true).map(|(over, _)| over)
    }

    /// The median of the ratios of the rounds that `keep` keeps, and how
    /// many it kept (`None`: none).
    fn over_floor_of(&self, keep: impl Fn(&FloorRound) -> bool) -> Option<(f64, usize)> {
        let mut over: Vec<f64> = self.floor_rounds.iter().filter(|f| keep(f)).map(|f| f.over).collect();
        (!over.is_empty()).then(|| (median(&mut over), over.len()))
    }
}

/// One round of one of our engines' W=1000 rows against the workers'
/// floor taken around it.
#[derive(Clone, Copy, Debug)]
struct FloorRound {
    /// The round's ns/op over its floor.
    over: f64,
    /// The cache-line round trip between two CPUs, ns, taken just before
    /// and just after our engines' turn in the round (`None` with fewer
    /// than two CPUs). These hosts switch between states about seven
    /// times apart (50 and 360 ns on the AMD host) within seconds, and
    /// every hand-off between the cores costs accordingly.
    round_trips: Option<[f64; 2]>,
}

fn throughput(kind: Ours, wl: &Workload, w: u32, o: &Options) -> Row {
    let engine = build_engine(kind, &format!("{}-w{w}", wl.name), o);
    let vars: Vec<Var> = (0..wl.vars * o.pushers).map(|_| engine.new_var()).collect();
    engine.set_bulk_size(o.bulk).expect("bulk size");
    let mut times = Vec::new();
    let mut allocs = Vec::new();
    reset_peak_rss();
    let (mut cpu_before, mut cpu) = (None, None);
    // Bodies of W=0 rows do not look at the timeline.
    let timeline = o.timeline.as_ref().filter(|_| w > 0 && timeline::on());
    // The other pushing threads live as long as the row, as a program's
    // pushing threads do: their thread slots, home shards and paces
    // carry over from one repetition to the next.
    with_crew(&engine, wl, &vars, w, o, |crew| {
        for rep in 0..=o.reps {
            if timeline.is_some() {
                timeline::arm(wl.ops.len());
            }
            let a0 = allocations();
            let ns_per_op = match crew {
                Some(crew) => timed_rep_pushers(&engine, wl, &vars, w, crew),
                None => timed_rep(&engine, wl, &vars, w),
            };
            timeline::disarm();
            let da = (allocations() - a0) as f64;
            if rep > 0 {
                times.push(ns_per_op);
                allocs.push(da / wl.ops.len() as f64);
                turns::hand_over();
            } else if o.stats {
                // Outside every window that counts allocations.
                cpu_before = Some((thread_cpu(), Instant::now()));
            }
        }
        // While the crew still lives, so that its threads count.
        cpu = cpu_before.take().map(|(before, t)| cpu_shares(&before, &thread_cpu(), t.elapsed()));
    });
    if let Some(dir) = timeline {
        timeline::write(dir, &format!("{}-{}-w{w}", kind.name(), wl.name), wl.ops.len());
    }
    engine.set_bulk_size(0).expect("bulk size");
    let mut name = if o.bulk > 1 { format!("{}+bulk{}", kind.name(), o.bulk) } else { kind.name().to_owned() };
    if o.pushers > 1 {
        name = format!("{name}+{}pushers{}", o.pushers, if o.share { "-shared" } else { "" });
    }
    let reps = times.clone();
    Row {
        engine: name,
        workload: wl.name.to_owned(),
        w,
        n: wl.ops.len(),
        ns_per_op: median(&mut times),
        allocs_per_op: Some(median(&mut allocs)),
        rss_mb: peak_rss_mb(),
        pingpong: None,
        reps,
        stats: o.stats.then(|| {
            let cpu = cpu.unwrap_or_default();
            format!("{}\ncpu over the timed repetitions, share of one core: {cpu}", engine.stats())
        }),
        floor_rounds: Vec::new(),
    }
}

/// The operations of a throughput row at body weight `w`: `--n`, else
/// 1,000,000 at W=0 and 100,000 otherwise (a hundredth with `--quick`).
fn ops_per_row(o: &Options, w: u32) -> usize {
    let default_n = if w == 0 { 1_000_000 } else { 100_000 };
    o.n.unwrap_or(if o.quick { default_n / 100 } else { default_n })
}

/// The `--pushers` threads of one row besides the calling one: started
/// once, each repetition let go together and waited for.
struct Crew {
    pushers: usize,
    start: std::sync::Barrier,
    done: std::sync::Barrier,
    stop: std::sync::atomic::AtomicBool,
}

/// Runs `row` with the row's crew (`None` with one pusher): threads
/// `pusher-1` … each push all of `wl` per repetition on their own slice of
/// `vars`, or with `--share` all on the first, and end with the row.
fn with_crew(engine: &Engine, wl: &Workload, vars: &[Var], w: u32, o: &Options, row: impl FnOnce(Option<&Crew>)) {
    if o.pushers == 1 {
        return row(None);
    }
    let crew = Crew {
        pushers: o.pushers,
        start: std::sync::Barrier::new(o.pushers),
        done: std::sync::Barrier::new(o.pushers),
        stop: std::sync::atomic::AtomicBool::new(false),
    };
    let per = wl.vars;
    std::thread::scope(|s| {
        for p in 1..o.pushers {
            let first = if o.share { 0 } else { p * per };
            let (crew, mine) = (&crew, &vars[first..first + per]);
            std::thread::Builder::new()
                .name(format!("pusher-{p}"))
                .spawn_scoped(s, move || loop {
                    crew.start.wait();
                    if crew.stop.load(std::sync::atomic::Ordering::Relaxed) {
                        return;
                    }
                    // The crew's barriers would wait forever for a
                    // thread that panicked: end the run instead.
                    let pushed =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| wl.push_all(engine, mine, w)));
                    if pushed.is_err() {
                        eprintln!("depengine-perf: pushing thread {p} panicked");
                        std::process::exit(1);
                    }
                    crew.done.wait();
                })
                .expect("a pushing thread");
        }
        row(Some(&crew));
        crew.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        crew.start.wait();
    });
}

/// One timed repetition with the crew's threads: each pushes all of `wl`,
/// this thread on the first slice of `vars`, then waits for all. Returns
/// ns per operation over all of them.
fn timed_rep_pushers(engine: &Engine, wl: &Workload, vars: &[Var], w: u32, crew: &Crew) -> f64 {
    crew.start.wait();
    let t0 = Instant::now();
    wl.push_all(engine, &vars[..wl.vars], w);
    crew.done.wait();
    engine.wait_all().expect("workload failed");
    t0.elapsed().as_nanos() as f64 / (wl.ops.len() * crew.pushers) as f64
}

/// One timed repetition: every operation of `wl` pushed, then waited for.
/// Returns ns per operation.
fn timed_rep(engine: &Engine, wl: &Workload, vars: &[Var], w: u32) -> f64 {
    let t0 = Instant::now();
    wl.push_all(engine, vars, w);
    engine.wait_all().expect("workload failed");
    t0.elapsed().as_nanos() as f64 / wl.ops.len() as f64
}

/// `chain` ÷ `nodeps` at W=0 on `kind`, side by side: after a warm-up
/// repetition of each, `--chain-pairs` pairs of one repetition of each,
/// in turn, the order swapped from one pair to the next so that a drift
/// of the host's speed weighs on both. Each on an engine of its own, as
/// in its row. Returns each pair's ratio, in order.
fn chain_over_nodeps(kind: Ours, o: &Options) -> Vec<f64> {
    let n = ops_per_row(o, 0);
    let side = |name: &str| {
        let wl = Workload::build(name, n).expect("workload");
        let engine = build_engine(kind, &format!("{name}-w0-side-by-side"), o);
        let vars: Vec<Var> = (0..wl.vars).map(|_| engine.new_var()).collect();
        timed_rep(&engine, &wl, &vars, 0); // warm-up
        move || timed_rep(&engine, &wl, &vars, 0)
    };
    let (nodeps, chain) = (side("nodeps"), side("chain"));
    (0..o.chain_pairs)
        .map(|k| {
            let (n, c) = if k % 2 == 0 {
                let n = nodeps();
                (n, chain())
            } else {
                let c = chain();
                (nodeps(), c)
            };
            c / n
        })
        .collect()
}

fn pingpong(kind: Ours, o: &Options) -> Row {
    let engine = build_engine(kind, "pingpong", o);
    let v = engine.new_var();
    let count = if o.quick { 2_000 } else { 100_000 };
    let mut pct: [Vec<f64>; 3] = Default::default();
    let mut lat = Vec::with_capacity(count);
    let a0 = allocations();
    for rep in 0..=o.reps {
        lat.clear();
        for _ in 0..count {
            let t0 = Instant::now();
            engine.push_sync(|_| {}, &[], &[v]).expect("push");
            engine.wait_var(v).expect("wait");
            lat.push(t0.elapsed().as_nanos() as f64);
        }
        if rep > 0 {
            lat.sort_by(|a, b| a.total_cmp(b));
            for (k, q) in [0.5, 0.99, 0.999].into_iter().enumerate() {
                pct[k].push(lat[((count as f64 * q) as usize).min(count - 1)]);
            }
            turns::hand_over();
        }
    }
    let reps = pct[0].clone();
    let allocs = (allocations() - a0) as f64 / (count * (o.reps + 1)) as f64;
    Row {
        engine: kind.name().to_owned(),
        workload: "pingpong".into(),
        w: 0,
        n: count,
        ns_per_op: median(&mut pct[0]),
        allocs_per_op: Some(allocs),
        rss_mb: peak_rss_mb(),
        pingpong: Some([median(&mut pct[0]), median(&mut pct[1]), median(&mut pct[2])]),
        reps,
        stats: o.stats.then(|| engine.stats().to_string()),
        floor_rounds: Vec::new(),
    }
}

/// Runs a peer binary (`shared/peers/cxx` harness) on one row.
fn peer(name: &str, path: &str, workload: &str, w: u32, n: usize, o: &Options) -> Option<Row> {
    let mut cmd = Command::new(path);
    if workload == "pingpong" {
        cmd.arg("pingpong");
    } else {
        cmd.args(["bench", workload, &w.to_string()]);
    }
    cmd.args(["--n", &n.to_string(), "--reps", &o.reps.to_string(), "--threads", &o.threads.to_string()]);
    let out = match cmd.output() {
        Ok(out) if out.status.success() => out,
        Ok(out) => {
            eprintln!("   peer {name} failed on {workload} W={w}: {}", String::from_utf8_lossy(&out.stderr).trim());
            return None;
        }
        Err(e) => {
            eprintln!("   peer {name} cannot run ({path}): {e}; skipped");
            return None;
        }
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().rev().find(|l| l.starts_with("RESULT"))?;
    let field = |k: &str| -> Option<f64> {
        line.split_whitespace().find_map(|f| f.strip_prefix(&format!("{k}="))).and_then(|v| v.parse().ok())
    };
    let pingpong =
        (workload == "pingpong").then(|| Some([field("p50_ns")?, field("p99_ns")?, field("p999_ns")?])).flatten();
    Some(Row {
        engine: name.to_owned(),
        workload: workload.to_owned(),
        w,
        n: field("n").map_or(n, |v| v as usize),
        ns_per_op: pingpong.map_or_else(|| field("ns_per_op").unwrap_or(f64::NAN), |p| p[0]),
        allocs_per_op: None,
        rss_mb: None,
        pingpong,
        reps: Vec::new(),
        stats: None,
        floor_rounds: Vec::new(),
    })
}

fn fmt_opt(v: Option<f64>, prec: usize) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.prec$}"))
}

/// One row of the table (a workload at one W; `wl` is `None` for
/// pingpong): every engine, then every peer, `--pairs` times in turn
/// (A B A B …), so that each peer's ratio to each engine is taken pair by
/// pair while the machine's speed drifts. Prints and returns one row per
/// engine and peer (the median over the rounds) and the ratios.
/// A peer's time over one of our engines' on one row, per round.
struct Ratio {
    peer: String,
    engine: &'static str,
    workload: String,
    w: u32,
    median: f64,
}

/// The cache-line round trip (`probe::round_trip_ns`) taken before and
/// after each round of one row: which state of the machine the row met.
/// At W=1000, also each round's floor of the run's workers (`--threads`,
/// at most the CPUs): the mean of the floors
/// (`MachineState::floor_ns`) of the body figures taken before and after
/// our engines ran in that round.
struct RowState {
    workload: String,
    w: u32,
    round_trips: Vec<[f64; 2]>,
    floors: Vec<f64>,
}

impl RowState {
    /// `"78→480, 82→79"`: each round's round trips, in ns.
    fn round_trips_text(&self) -> String {
        let each: Vec<String> = self.round_trips.iter().map(|[b, a]| format!("{b:.0}→{a:.0}")).collect();
        each.join(", ")
    }
}

/// Everything a run measured, row after row.
#[derive(Default)]
struct Measured {
    rows: Vec<Row>,
    ratios: Vec<Ratio>,
    states: Vec<RowState>,
    /// `--chain-pairs`: per engine, each pair's `chain` ÷ `nodeps`.
    chain_over_nodeps: Vec<ChainOverNodeps>,
}

/// `chain` ÷ `nodeps` at W=0, taken side by side on one engine.
struct ChainOverNodeps {
    engine: &'static str,
    /// Each pair's ratio, in order.
    pairs: Vec<f64>,
}

impl ChainOverNodeps {
    /// `"1.87 (1.80–1.95 over 15 pairs)"`.
    fn text(&self) -> String {
        let mut sorted = self.pairs.clone();
        let med = median(&mut sorted);
        format!("{med:.2} ({:.2}–{:.2} over {} pairs)", sorted[0], sorted[sorted.len() - 1], sorted.len())
    }
}

fn measure_row(o: &Options, wl_name: &str, w: u32, n: usize, wl: Option<&Workload>, out: &mut Measured) {
    let mut rounds: Vec<Vec<Row>> = Vec::new();
    let mut round_trips = Vec::new();
    let mut floors = Vec::new();
    // The round trips just before and just after our engines' turn in each
    // round whose floor was taken.
    let mut our_round_trips = Vec::new();
    // Each round's floor is taken at the row's own W (none for W=0, whose
    // bodies are empty).
    let floor_now =
        |rt: Option<f64>| (w > 0 && wl.is_some() && !o.no_probe).then(|| probe::bodies(rt, w, o.threads).floor_ns());
    for round in 0..o.pairs {
        let rt_before = row_round_trip(o);
        let floor_before = floor_now(rt_before);
        let mut this = Vec::new();
        for &kind in &o.engines {
            let pass = if o.pairs > 1 { format!(" (round {}/{})", round + 1, o.pairs) } else { String::new() };
            progress(&format!("{} {wl_name} W={w} N={n}{pass}", kind.name()));
            let row = match wl {
                Some(wl) => throughput(kind, wl, w, o),
                None => pingpong(kind, o),
            };
            if let Some(path) = &o.reps_out {
                append_reps(path, &row);
            }
            this.push(row);
        }
        if let Some(before) = floor_before {
            let rt_after = row_round_trip(o);
            // `rt_before` only says whether there are two CPUs (`MachineState::side_by_side_unreliable`).
            let after = floor_now(rt_before).expect("taken under the same conditions as `floor_before`");
            floors.push((before + after) / 2.0);
            our_round_trips.push(rt_before.zip(rt_after).map(|(b, a)| [b, a]));
        }
        // (No peer knows the typed workloads, nor pushes from several threads.)
        for (name, path) in o.peers.iter().filter(|_| !TYPED.contains(&wl_name) && o.pushers == 1) {
            if let Some(r) = peer(name, path, wl_name, w, n, o) {
                this.push(r);
            }
        }
        rounds.push(this);
        if let (Some(b), Some(a)) = (rt_before, row_round_trip(o)) {
            round_trips.push([b, a]);
        }
    }
    let names: Vec<String> = rounds[0].iter().map(|r| r.engine.clone()).collect();
    let ns_of = |name: &str| -> Vec<f64> {
        rounds.iter().filter_map(|rs| rs.iter().find(|r| r.engine == name)).map(|r| r.ns_per_op).collect()
    };
    let mut over_floor_text = Vec::new();
    for name in &names {
        let per_round = ns_of(name);
        let mut row = rounds[0].iter().find(|r| &r.engine == name).cloned().expect("row");
        row.ns_per_op = median(&mut per_round.clone());
        if !floors.is_empty() && o.engines.iter().any(|k| k.name() == name) {
            row.floor_rounds = (per_round.iter().zip(&floors).zip(&our_round_trips))
                .map(|((ns, f), &round_trips)| FloorRound { over: ns / f, round_trips })
                .collect();
            if let Some(over) = row.over_floor() {
                over_floor_text.push(format!("{name} {over:.2}"));
            }
        }
        if let Some(p) = row.pingpong.as_mut() {
            for (k, v) in p.iter_mut().enumerate() {
                let mut all: Vec<f64> = rounds
                    .iter()
                    .filter_map(|rs| rs.iter().find(|r| &r.engine == name)?.pingpong)
                    .map(|p| p[k])
                    .collect();
                *v = median(&mut all);
            }
        }
        print_row(&row);
        out.rows.push(row);
    }
    let state = RowState { workload: wl_name.into(), w, round_trips, floors };
    if !state.round_trips.is_empty() {
        println!("    cache-line round trip before→after each round: {} ns", state.round_trips_text());
    }
    if !state.floors.is_empty() {
        let each: Vec<String> = state.floors.iter().map(|f| format!("{f:.0}")).collect();
        let floor_is = probe::floor_name(probe::floor_workers(o.threads));
        println!(
            "    {floor_is} around each round: {} ns/body; ns/op ÷ its round's floor, median: {}",
            each.join(", "),
            over_floor_text.join(", ")
        );
    }
    out.states.push(state);
    // Each peer against each of our engines, round by round.
    for (peer_name, _) in &o.peers {
        let peer_ns = ns_of(peer_name);
        for kind in &o.engines {
            let ours = ns_of(kind.name());
            let mut ratios: Vec<f64> = peer_ns.iter().zip(&ours).map(|(p, e)| p / e).collect();
            if ratios.is_empty() || ratios.iter().any(|r| !r.is_finite()) {
                continue;
            }
            let each: Vec<String> = ratios.iter().map(|r| format!("{r:.2}")).collect();
            let m = median(&mut ratios);
            println!("    {peer_name} ÷ {}: {m:.2}× (pairs: {})", kind.name(), each.join(" "));
            out.ratios.push(Ratio {
                peer: peer_name.clone(),
                engine: kind.name(),
                workload: wl_name.into(),
                w,
                median: m,
            });
        }
    }
}

/// Appends `row`'s repetitions to `path` (`--reps-out`).
fn append_reps(path: &str, row: &Row) {
    let w = if row.pingpong.is_some() { "p50".to_owned() } else { row.w.to_string() };
    let mut lines = String::new();
    for ns in &row.reps {
        let _ = writeln!(lines, "{} {} {w} {ns:.1}", row.engine, row.workload);
    }
    let file = std::fs::OpenOptions::new().create(true).append(true).open(path);
    if let Err(e) = file.and_then(|mut f| std::io::Write::write_all(&mut f, lines.as_bytes())) {
        eprintln!("cannot write {path}: {e}");
    }
}

/// The cache-line round trip taken beside a round of a row (none with
/// `--no-probe`).
fn row_round_trip(o: &Options) -> Option<f64> {
    if o.no_probe {
        None
    } else {
        round_trip_ns()
    }
}

/// The machine's state as the output says it (`--no-probe`: none).
fn state_text(state: Option<&MachineState>) -> String {
    state.map_or_else(|| "not probed (--no-probe)".to_owned(), MachineState::to_string)
}

/// On a terminal, says on standard error which row is being measured (the
/// next printed row overwrites it).
fn progress(what: &str) {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() {
        eprint!("\r\x1b[2K… measuring {what}\r");
    }
}

fn print_row(r: &Row) {
    match r.pingpong {
        Some([p50, p99, p999]) => println!(
            "{:<12} {:<9} {:>6} {:>9} {:>10.0} {:>10.0} {:>10.0} {:>10} {:>8}",
            r.engine,
            r.workload,
            "-",
            r.n,
            p50,
            p99,
            p999,
            fmt_opt(r.allocs_per_op, 3),
            fmt_opt(r.rss_mb, 0)
        ),
        None => println!(
            "{:<12} {:<9} {:>6} {:>9} {:>10.1} {:>10.2} {:>10} {:>10} {:>8}",
            r.engine,
            r.workload,
            r.w,
            r.n,
            r.ns_per_op,
            1e3 / r.ns_per_op,
            "",
            fmt_opt(r.allocs_per_op, 3),
            fmt_opt(r.rss_mb, 0)
        ),
    }
    if let Some(stats) = &r.stats {
        for line in stats.lines() {
            println!("    {line}");
        }
    }
}

/// The results as markdown tables: ns/op per workload (rows) and engine
/// or peer (columns) for each W, pingpong percentiles, and each peer's
/// median ratio to each engine (above 1: the engine is faster).
fn markdown(m: &Measured, o: &Options, states: [Option<&MachineState>; 2]) -> String {
    let (rows, ratios) = (&m.rows, &m.ratios);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Machine: {}; {} CPU workers; median of {} after 1 warm-up; {} round(s) per row, engines and peers in turn.\n\nCommand: `{}`\n\nMachine state (`perf/src/probe.rs`), before the rows: {}.\nAfter them: {}.\n",
        machine(),
        o.threads,
        o.reps,
        o.pairs,
        std::env::args().collect::<Vec<_>>().join(" "),
        state_text(states[0]),
        state_text(states[1])
    );
    let mut names: Vec<&str> = Vec::new();
    for r in rows {
        if !names.contains(&r.engine.as_str()) {
            names.push(&r.engine);
        }
    }
    let cell = |name: &str, workload: &str, w: u32| {
        throughput_row(rows, name, workload, w).map_or("–".to_owned(), |r| format!("{:.0}", r.ns_per_op))
    };
    for &w in &o.weights {
        let workloads: Vec<&String> = o.workloads.iter().filter(|wl| *wl != "pingpong").collect();
        if workloads.is_empty() {
            break;
        }
        let _ = writeln!(s, "### W = {w}, ns/op\n\n| workload | {} |", names.join(" | "));
        let _ = writeln!(s, "|---|{}", "---|".repeat(names.len()));
        for wl in workloads {
            let cells: Vec<String> = names.iter().map(|n| cell(n, wl, w)).collect();
            let _ = writeln!(s, "| {wl} | {} |", cells.join(" | "));
        }
        s.push('\n');
    }
    let ours = our_throughput_rows(rows);
    if !ours.is_empty() {
        let _ = writeln!(
            s,
            "### depengine: heap allocations per operation, and the process's peak RSS (MB) after the row
"
        );
        let _ = writeln!(s, "| workload | W | {} |", engines_of(&ours).join(" | "));
        let _ = writeln!(s, "|---|---|{}", "---|".repeat(engines_of(&ours).len()));
        let mut seen: Vec<(&str, u32)> = Vec::new();
        for r in &ours {
            if seen.contains(&(r.workload.as_str(), r.w)) {
                continue;
            }
            seen.push((&r.workload, r.w));
            let cells: Vec<String> = engines_of(&ours)
                .iter()
                .map(|e| {
                    throughput_row(ours.iter().copied(), e, &r.workload, r.w).map_or("–".to_owned(), |x| {
                        format!("{} · {}", fmt_opt(x.allocs_per_op, 3), fmt_opt(x.rss_mb, 0))
                    })
                })
                .collect();
            let _ = writeln!(s, "| {} | {} | {} |", r.workload, r.w, cells.join(" | "));
        }
        s.push('\n');
    }
    let pp: Vec<&Row> = rows.iter().filter(|r| r.pingpong.is_some()).collect();
    if !pp.is_empty() {
        let _ = writeln!(s, "### pingpong, ns\n\n| engine | p50 | p99 | p99.9 |\n|---|---|---|---|");
        for r in pp {
            let [a, b, c] = r.pingpong.unwrap_or_default();
            let _ = writeln!(s, "| {} | {a:.0} | {b:.0} | {c:.0} |", r.engine);
        }
        s.push('\n');
    }
    if m.states.iter().any(|st| !st.round_trips.is_empty()) {
        let _ = writeln!(
            s,
            "### Machine state: the cache-line round trip between two CPUs before→after each round of a row, ns\n\n| workload | W | round trips |\n|---|---|---|"
        );
        for st in &m.states {
            let _ = writeln!(s, "| {} | {} | {} |", st.workload, st.w, st.round_trips_text());
        }
        s.push('\n');
    }
    s.push_str(&targets::markdown(rows, states, &m.chain_over_nodeps));
    if !ratios.is_empty() {
        let _ = writeln!(s, "### Peer ÷ depengine (median of the per-round ratios; above 1: depengine is faster)\n");
        let _ = writeln!(s, "| peer ÷ engine | workload | W | ratio |\n|---|---|---|---|");
        for q in ratios {
            let _ = writeln!(s, "| {} ÷ {} | {} | {} | {:.2} |", q.peer, q.engine, q.workload, q.w, q.median);
        }
    }
    s
}

/// depengine's throughput rows (the peers' have no allocation count).
fn our_throughput_rows(rows: &[Row]) -> Vec<&Row> {
    rows.iter().filter(|r| r.allocs_per_op.is_some() && r.pingpong.is_none()).collect()
}

/// The throughput row (not pingpong) of `engine` for `workload` at weight
/// `w`, if `rows` has one.
fn throughput_row<'a>(
    rows: impl IntoIterator<Item = &'a Row>,
    engine: &str,
    workload: &str,
    w: u32,
) -> Option<&'a Row> {
    rows.into_iter().find(|r| r.engine == engine && r.workload == workload && r.w == w && r.pingpong.is_none())
}

/// The engines (or peers) of `rows`, in order of first appearance.
fn engines_of<'a>(rows: &[&'a Row]) -> Vec<&'a str> {
    let mut names: Vec<&str> = Vec::new();
    for r in rows {
        if !names.contains(&r.engine.as_str()) {
            names.push(&r.engine);
        }
    }
    names
}

fn json(m: &Measured, o: &Options, states: [Option<&MachineState>; 2]) -> String {
    let rows = &m.rows;
    let mut s = String::from("{\n");
    let state = |m: Option<&MachineState>| {
        m.map_or_else(
            || "null".to_owned(),
            |m| {
                format!(
                    "{{\"round_trip_ns\": {}, \"written_line_read_ns\": {}, \"demoted_line_read_ns\": {}, \"written_line_independent_read_ns\": {}, \"handover_ns\": {}, \"body_ns\": {:.1}, \"side_by_side_threads\": {}, \"side_by_side_body_ns\": {:.1}}}",
                    m.round_trip_ns.map_or("null".to_owned(), |v| format!("{v:.1}")),
                    m.written_lines.map_or("null".to_owned(), |w| format!("{:.1}", w.chased)),
                    m.written_lines.map_or("null".to_owned(), |w| format!("{:.1}", w.demoted)),
                    m.written_lines.map_or("null".to_owned(), |w| format!("{:.1}", w.independent)),
                    m.handover_ns.map_or("null".to_owned(), |v| format!("{v:.1}")),
                    m.body_ns,
                    m.workers,
                    m.side_by_side_ns
                )
            },
        )
    };
    let _ = writeln!(
        s,
        "  \"machine\": {:?},\n  \"threads\": {},\n  \"reps\": {},\n  \"machine_state_before\": {},\n  \"machine_state_after\": {},\n  \"rows\": [",
        machine(),
        o.threads,
        o.reps,
        state(states[0]),
        state(states[1])
    );
    for (i, r) in rows.iter().enumerate() {
        let num = |v: Option<f64>| v.filter(|v| v.is_finite()).map_or("null".to_owned(), |v| format!("{v:.3}"));
        let _ = write!(
            s,
            "    {{\"engine\": {:?}, \"workload\": {:?}, \"w\": {}, \"n\": {}, \"ns_per_op\": {}, \"allocs_per_op\": {}, \"peak_rss_mb\": {}",
            r.engine,
            r.workload,
            r.w,
            r.n,
            num(Some(r.ns_per_op)),
            num(r.allocs_per_op),
            num(r.rss_mb)
        );
        if let Some([a, b, c]) = r.pingpong {
            let _ = write!(s, ", \"p50_ns\": {a:.0}, \"p99_ns\": {b:.0}, \"p999_ns\": {c:.0}");
        }
        if let Some(over) = r.over_floor() {
            let _ = write!(s, ", \"over_round_floor\": {over:.4}");
        }
        if !r.floor_rounds.is_empty() {
            let each: Vec<String> = r
                .floor_rounds
                .iter()
                .map(|f| match f.round_trips {
                    Some([b, a]) => format!("[{:.4}, {b:.1}, {a:.1}]", f.over),
                    None => format!("[{:.4}, null, null]", f.over),
                })
                .collect();
            let _ = write!(s, ", \"each_round_over_floor_round_trips_before_after\": [{}]", each.join(", "));
        }
        s.push('}');
        s.push_str(if i + 1 < rows.len() { ",\n" } else { "\n" });
    }
    s.push_str("  ],\n  \"row_states\": [");
    for (i, st) in m.states.iter().enumerate() {
        let each: Vec<String> = st.round_trips.iter().map(|[b, a]| format!("[{b:.1}, {a:.1}]")).collect();
        let _ = write!(
            s,
            "{}\n    {{\"workload\": {:?}, \"w\": {}, \"round_trip_ns_before_after\": [{}], \"floor_ns\": [{}]}}",
            if i == 0 { "" } else { "," },
            st.workload,
            st.w,
            each.join(", "),
            st.floors.iter().map(|f| format!("{f:.1}")).collect::<Vec<_>>().join(", ")
        );
    }
    s.push_str("\n  ],\n  \"chain_over_nodeps_side_by_side\": {");
    for (i, c) in m.chain_over_nodeps.iter().enumerate() {
        let pairs: Vec<String> = c.pairs.iter().map(|r| format!("{r:.4}")).collect();
        let _ = write!(s, "{}\n    {:?}: [{}]", if i == 0 { "" } else { "," }, c.engine, pairs.join(", "));
    }
    s.push_str("\n  }\n}\n");
    s
}

fn main() {
    let o = parse_args();
    if let Some((first, dir)) = &o.take_turns {
        turns::join(dir, *first).unwrap_or_else(|e| usage(&format!("--take-turns {}: {e}", dir.display())));
    }
    println!(
        "depengine-perf — machine: {}; {} CPU workers; median of {} after 1 warm-up",
        machine(),
        o.threads,
        o.reps
    );
    println!("per_device topology: {}", depengine::Topology::detect());
    // The handshakes are chosen once per process, at the first build.
    let membarrier =
        depengine::Engine::builder().kind(depengine::EngineKind::Naive).build().map(|e| e.stats().membarrier);
    println!(
        "push-path handshakes: {}",
        if membarrier.unwrap_or(false) {
            "compiler fences, membarrier on the rare side"
        } else {
            "SeqCst fences (DEPENGINE_MEMBARRIER=0, or no membarrier)"
        }
    );
    let before = (!o.no_probe).then(|| probe(o.threads));
    println!("machine state before the rows: {}", state_text(before.as_ref()));
    println!(
        "{:<12} {:<9} {:>6} {:>9} {:>10} {:>10} {:>10} {:>10} {:>8}",
        "engine", "workload", "W", "N", "ns/op|p50", "Mops/s|p99", "p99.9", "allocs/op", "RSS MB"
    );
    if o.timeline.is_some() {
        // A slot for each operation of a W>0 row, before any row.
        timeline::init(ops_per_row(&o, 1));
    }
    let mut m = Measured::default();
    for wl_name in &o.workloads {
        if wl_name == "pingpong" {
            let n = if o.quick { 2_000 } else { 100_000 };
            measure_row(&o, wl_name, 0, n, None, &mut m);
            continue;
        }
        for &w in &o.weights {
            let n = ops_per_row(&o, w);
            let wl = Workload::build(wl_name, n).expect("workload");
            measure_row(&o, wl_name, w, n, Some(&wl), &mut m);
        }
    }
    if let Some(dir) = &o.timeline {
        println!(
            "bodies' timelines (W>0 rows): {}/<engine>-<workload>-w<W>.tsv; perf/timeline.py reads them",
            dir.display()
        );
    }
    if o.chain_pairs > 0 {
        for &kind in &o.engines {
            progress(&format!("chain ÷ nodeps at W=0 on {}, side by side", kind.name()));
            let side = ChainOverNodeps { engine: kind.name(), pairs: chain_over_nodeps(kind, &o) };
            println!("chain ÷ nodeps at W=0, side by side, {}: {}", side.engine, side.text());
            m.chain_over_nodeps.push(side);
        }
    }
    let after = (!o.no_probe).then(|| probe(o.threads));
    println!("machine state after the rows: {}", state_text(after.as_ref()));
    if let Some(path) = &o.markdown {
        std::fs::write(path, markdown(&m, &o, [before.as_ref(), after.as_ref()]))
            .unwrap_or_else(|e| eprintln!("cannot write {path}: {e}"));
        println!("tables written to {path}");
    }
    if let Some(path) = &o.json {
        std::fs::write(path, json(&m, &o, [before.as_ref(), after.as_ref()]))
            .unwrap_or_else(|e| eprintln!("cannot write {path}: {e}"));
        println!("results written to {path}");
    }
    if let Some(path) = &o.svg {
        let bars: Vec<chart::Bar> = m
            .rows
            .iter()
            .map(|r| chart::Bar {
                engine: &r.engine,
                group: if r.pingpong.is_some() { "pingpong p50".into() } else { format!("{} W={}", r.workload, r.w) },
                ns: r.ns_per_op,
            })
            .collect();
        let title = format!("depengine-perf — {}, {} workers, median of {}", machine(), o.threads, o.reps);
        std::fs::write(path, chart::svg(&title, &bars)).unwrap_or_else(|e| eprintln!("cannot write {path}: {e}"));
        println!("chart written to {path}");
    }
}
