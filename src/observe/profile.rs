//! What a profiling session recorded ([`Profile`]), and its views: a
//! Chrome trace (JSON, for Perfetto or `chrome://tracing`), a per-name
//! summary and a per-lane one (how busy each worker was, and how long it
//! went between bodies), printed together by [`Profile::summary_table`].
//!
//! ```
//! use depengine::Engine;
//! let engine = Engine::builder().cpu_workers(2).build().unwrap();
//! let v = engine.new_var();
//! engine.start_profiling();
//! for _ in 0..10 {
//!     engine.push_sync_with(|_| {}, &[], &[v], depengine::PushOpts::new().name("step")).unwrap();
//! }
//! engine.wait_all().unwrap();
//! let profile = engine.stop_profiling();
//! assert_eq!(profile.events.len(), 10);
//! assert_eq!(profile.summary()[0].count, 10);
//! let ran: u64 = profile.lane_summary().iter().map(|l| l.count).sum();
//! assert_eq!(ran, 10);
//! let mut json = Vec::new();
//! profile.write_chrome_trace(&mut json).unwrap();
//! print!("{}", profile.summary_table());
//! ```

use crate::base::context::{Context, FnProperty};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{self, Write};

/// One profiled operation. Times are nanoseconds since the engine was built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileEvent {
    /// The name it was pushed with.
    pub name: &'static str,
    /// Its position in the engine's linearization of pushes.
    pub ticket: u64,
    /// Where it ran.
    pub ctx: Context,
    /// Its property.
    pub prop: FnProperty,
    /// Its priority.
    pub priority: i32,
    /// The lane (index into [`Profile::lanes`]) of the thread that ran it.
    pub lane: usize,
    /// When it was pushed.
    pub pushed_ns: u64,
    /// When its last variable granted it (it became ready to run).
    pub ready_ns: u64,
    /// When its body started.
    pub start_ns: u64,
    /// When its body returned (equal to `end_ns` for a synchronous body).
    pub body_end_ns: u64,
    /// When it completed (an asynchronous one: when its `Completion` fired).
    pub end_ns: u64,
    /// The ticket of the operation whose completion made this one ready
    /// (`None`: it was ready when pushed).
    pub made_ready_by: Option<u64>,
    /// Whether its body was asynchronous.
    pub is_async: bool,
    /// Whether it failed or was skipped.
    pub failed: bool,
}

impl ProfileEvent {
    /// Time from ready to start: how long it waited for a thread.
    pub fn queued_ns(&self) -> u64 {
        self.start_ns.saturating_sub(self.ready_ns)
    }

    /// The middle of the body's slice in a trace.
    fn body_midpoint_ns(&self) -> u64 {
        self.start_ns + self.body_end_ns.saturating_sub(self.start_ns) / 2
    }

    /// Time from start to completion.
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// The operations one profiling session saw finish, sorted by start time.
#[derive(Debug, Clone, Default)]
pub struct Profile {
    /// The recorded operations.
    pub events: Vec<ProfileEvent>,
    /// Lane names: the engine's worker threads, then the lanes shared by
    /// other threads (pushers running work inline, waiters, completions).
    pub lanes: Vec<String>,
    /// Operations lost because a lane's ring was full (raise the ring with
    /// [`EngineBuilder::profile_events`](crate::EngineBuilder::profile_events)).
    pub dropped: u64,
}

/// One line of [`Profile::summary`]: every operation of one name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameSummary {
    /// The operations' name.
    pub name: &'static str,
    /// How many ran.
    pub count: u64,
    /// Sum of their durations (start to completion).
    pub total_ns: u64,
    /// Mean duration.
    pub mean_ns: u64,
    /// Median duration.
    pub p50_ns: u64,
    /// 99th-percentile duration.
    pub p99_ns: u64,
    /// Mean time from ready to start.
    pub queued_mean_ns: u64,
    /// 99th-percentile time from ready to start.
    pub queued_p99_ns: u64,
}

/// One line of [`Profile::lane_summary`]: the bodies one lane ran.
///
/// A lane's *busy* time is the union of its bodies' intervals (start to
/// body end); a *gap* is the time from one body's end to the next body's
/// start on the lane: the engine's own work in between (completing the
/// operation, finding the next) plus any time the thread idled or was not
/// running. A worker busy much less than its peers, or with long gaps, is
/// waiting for work, for its core, or for the engine. Shared lanes (other
/// threads) merge the intervals of every thread on them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneSummary {
    /// The lane's index into [`Profile::lanes`].
    pub lane: usize,
    /// Bodies it ran.
    pub count: u64,
    /// From its first body's start to its last body's end (its own span:
    /// a lane whose ring overflowed starts later).
    pub span_ns: u64,
    /// The union of its bodies' intervals.
    pub busy_ns: u64,
    /// Median gap between two bodies (0 with fewer than two).
    pub gap_p50_ns: u64,
    /// 99th-percentile gap.
    pub gap_p99_ns: u64,
    /// The longest gap.
    pub gap_max_ns: u64,
}

impl LaneSummary {
    /// `busy_ns` as a share of `span_ns` (0 when the span is empty).
    pub fn busy_share(&self) -> f64 {
        if self.span_ns == 0 {
            return 0.0;
        }
        self.busy_ns as f64 / self.span_ns as f64
    }
}

/// The `q` quantile of sorted values (nearest rank).
fn quantile(sorted: &[u64], q: f64) -> u64 {
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// `s` as a JSON string literal.
fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Nanoseconds as the microseconds Chrome traces use.
fn us(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

fn ctx_name(ctx: Context) -> String {
    match ctx {
        Context::Cpu(Context::ANY_NODE) => "cpu".into(),
        Context::Cpu(node) => format!("cpu({node})"),
        Context::Gpu(id) => format!("gpu({id})"),
    }
}

impl Profile {
    /// One line per operation name, the most total time first.
    pub fn summary(&self) -> Vec<NameSummary> {
        let mut by_name: HashMap<&'static str, (Vec<u64>, Vec<u64>)> = HashMap::new();
        for e in &self.events {
            let (durations, queued) = by_name.entry(e.name).or_default();
            durations.push(e.duration_ns());
            queued.push(e.queued_ns());
        }
        let mut lines: Vec<NameSummary> = by_name
            .into_iter()
            .map(|(name, (mut d, mut q))| {
                d.sort_unstable();
                q.sort_unstable();
                let count = d.len() as u64;
                let total_ns = d.iter().sum();
                NameSummary {
                    name,
                    count,
                    total_ns,
                    mean_ns: total_ns / count,
                    p50_ns: quantile(&d, 0.5),
                    p99_ns: quantile(&d, 0.99),
                    queued_mean_ns: q.iter().sum::<u64>() / count,
                    queued_p99_ns: quantile(&q, 0.99),
                }
            })
            .collect();
        lines.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.name.cmp(b.name)));
        lines
    }

    /// One line per lane that ran a body, in lane order.
    pub fn lane_summary(&self) -> Vec<LaneSummary> {
        let mut by_lane: Vec<Vec<(u64, u64)>> = vec![Vec::new(); self.lanes.len()];
        for e in &self.events {
            if by_lane.len() <= e.lane {
                by_lane.resize(e.lane + 1, Vec::new());
            }
            by_lane[e.lane].push((e.start_ns, e.body_end_ns.max(e.start_ns)));
        }
        by_lane
            .into_iter()
            .enumerate()
            .filter(|(_, bodies)| !bodies.is_empty())
            .map(|(lane, mut bodies)| {
                bodies.sort_unstable();
                let count = bodies.len() as u64;
                // Merge overlapping intervals (a shared lane's threads),
                // then measure the merged ones and the gaps between them.
                let mut merged: Vec<(u64, u64)> = Vec::with_capacity(bodies.len());
                for (start, end) in bodies {
                    match merged.last_mut() {
                        Some(last) if start <= last.1 => last.1 = last.1.max(end),
                        _ => merged.push((start, end)),
                    }
                }
                // The first interval starts the span and the last ends it.
                let span_ns = merged[merged.len() - 1].1 - merged[0].0;
                let busy_ns = merged.iter().map(|(start, end)| end - start).sum();
                // Merged intervals are disjoint and in order: every gap is positive.
                let mut gaps: Vec<u64> = merged.windows(2).map(|w| w[1].0 - w[0].1).collect();
                gaps.sort_unstable();
                let gap = |q| if gaps.is_empty() { 0 } else { quantile(&gaps, q) };
                LaneSummary {
                    lane,
                    count,
                    span_ns,
                    busy_ns,
                    gap_p50_ns: gap(0.5),
                    gap_p99_ns: gap(0.99),
                    gap_max_ns: gaps.last().copied().unwrap_or(0),
                }
            })
            .collect()
    }

    /// The per-name summary, then the per-lane one, as aligned text tables
    /// (times in µs).
    pub fn summary_table(&self) -> String {
        let mut t = format!(
            "{:<24} {:>9} {:>12} {:>10} {:>10} {:>10} {:>12} {:>12}\n",
            "operation", "count", "total µs", "mean µs", "p50 µs", "p99 µs", "queued mean", "queued p99"
        );
        for s in self.summary() {
            let _ = writeln!(
                t,
                "{:<24} {:>9} {:>12} {:>10} {:>10} {:>10} {:>12} {:>12}",
                s.name,
                s.count,
                us(s.total_ns),
                us(s.mean_ns),
                us(s.p50_ns),
                us(s.p99_ns),
                us(s.queued_mean_ns),
                us(s.queued_p99_ns)
            );
        }
        if self.dropped > 0 {
            let _ = writeln!(t, "({} operations not recorded: a lane's ring was full)", self.dropped);
        }
        let _ = writeln!(
            t,
            "\n{:<40} {:>9} {:>12} {:>6} {:>10} {:>10} {:>10}",
            "lane", "bodies", "span µs", "busy", "gap p50", "gap p99", "gap max"
        );
        for l in self.lane_summary() {
            let _ = writeln!(
                t,
                "{:<40} {:>9} {:>12} {:>5.1}% {:>10} {:>10} {:>10}",
                self.lanes.get(l.lane).map_or("?", String::as_str),
                l.count,
                us(l.span_ns),
                100.0 * l.busy_share(),
                us(l.gap_p50_ns),
                us(l.gap_p99_ns),
                us(l.gap_max_ns)
            );
        }
        t
    }

    /// Writes the Chrome trace: one lane (thread) per worker and per shared
    /// lane, a complete event per operation's body, an async span from
    /// start to completion for asynchronous operations, and a flow arrow
    /// from each operation to the ones its completion made ready.
    pub fn write_chrome_trace(&self, mut w: impl Write) -> io::Result<()> {
        let mut out = io::BufWriter::new(&mut w);
        writeln!(out, "{{\"displayTimeUnit\":\"ns\",\"traceEvents\":[")?;
        writeln!(out, "{{\"ph\":\"M\",\"pid\":1,\"name\":\"process_name\",\"args\":{{\"name\":\"depengine\"}}}}")?;
        for (tid, name) in self.lanes.iter().enumerate() {
            writeln!(
                out,
                ",{{\"ph\":\"M\",\"pid\":1,\"tid\":{tid},\"name\":\"thread_name\",\"args\":{{\"name\":{}}}}}",
                json_str(name)
            )?;
            writeln!(
                out,
                ",{{\"ph\":\"M\",\"pid\":1,\"tid\":{tid},\"name\":\"thread_sort_index\",\"args\":{{\"sort_index\":{tid}}}}}"
            )?;
        }
        let by_ticket: HashMap<u64, &ProfileEvent> = self.events.iter().map(|e| (e.ticket, e)).collect();
        for e in &self.events {
            let name = json_str(e.name);
            writeln!(
                out,
                ",{{\"ph\":\"X\",\"pid\":1,\"tid\":{},\"name\":{name},\"cat\":\"{:?}\",\"ts\":{},\"dur\":{},\
                 \"args\":{{\"ticket\":{},\"ctx\":\"{}\",\"priority\":{},\"pushed_to_ready_us\":{},\
                 \"queued_us\":{},\"failed\":{}}}}}",
                e.lane,
                e.prop,
                us(e.start_ns),
                us(e.body_end_ns.saturating_sub(e.start_ns)),
                e.ticket,
                ctx_name(e.ctx),
                e.priority,
                us(e.ready_ns.saturating_sub(e.pushed_ns)),
                us(e.queued_ns()),
                e.failed
            )?;
            if e.is_async {
                for (ph, ts) in [("b", e.start_ns), ("e", e.end_ns)] {
                    writeln!(
                        out,
                        ",{{\"ph\":\"{ph}\",\"pid\":1,\"tid\":{},\"cat\":\"async\",\"id\":{},\"name\":{name},\"ts\":{}}}",
                        e.lane,
                        e.ticket,
                        us(ts)
                    )?;
                }
            }
            if let Some(from) = e.made_ready_by.and_then(|t| by_ticket.get(&t)) {
                // Flow events bind to the slice enclosing their timestamp on
                // their thread: the middle of each slice is inside it.
                writeln!(
                    out,
                    ",{{\"ph\":\"s\",\"pid\":1,\"tid\":{},\"cat\":\"ready\",\"name\":\"made ready\",\"id\":{},\"ts\":{}}}",
                    from.lane,
                    e.ticket,
                    us(from.body_midpoint_ns())
                )?;
                writeln!(
                    out,
                    ",{{\"ph\":\"f\",\"bp\":\"e\",\"pid\":1,\"tid\":{},\"cat\":\"ready\",\"name\":\"made ready\",\"id\":{},\"ts\":{}}}",
                    e.lane,
                    e.ticket,
                    us(e.body_midpoint_ns())
                )?;
            }
        }
        writeln!(out, "]}}")?;
        out.flush()
    }

    /// Writes the Chrome trace to `path`.
    pub fn save(&self, path: impl AsRef<std::path::Path>) -> io::Result<()> {
        self.write_chrome_trace(std::fs::File::create(path)?)
    }
}
