//! The profiler: the Chrome trace is valid JSON with one complete event per
//! operation on the lane of the thread that ran it, its times respect the
//! scheduling rule, flow arrows follow the dependencies, and the summaries
//! count what ran, by name and by lane.

mod common;

use depengine::{Context, Engine, EngineKind, FnProperty, LaneSummary, Profile, ProfileEvent, PushOpts, Var};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

fn pooled() -> Engine {
    Engine::builder().kind(EngineKind::Pooled).cpu_workers(2).build().unwrap()
}

/// Parses the profile's Chrome trace.
fn trace_json(profile: &Profile) -> Vec<Value> {
    let mut bytes = Vec::new();
    profile.write_chrome_trace(&mut bytes).unwrap();
    let v: Value = serde_json::from_slice(&bytes).expect("the trace is valid JSON");
    v["traceEvents"].as_array().expect("traceEvents").clone()
}

/// Pushes a mixed graph over four variables; each body records the worker
/// it ran on, by ticket. Returns the pushes' variable sets by name.
fn mixed_graph(engine: &Engine, ran_on: &Arc<Mutex<HashMap<u64, Option<usize>>>>) -> Vec<(Vec<Var>, Vec<Var>)> {
    let vars: Vec<Var> = (0..4).map(|_| engine.new_var()).collect();
    let mut sets = Vec::new();
    for i in 0..400usize {
        let reads = vec![vars[i % 4]];
        let writes = if i % 3 == 0 { vec![vars[(i + 1) % 4]] } else { vec![] };
        let ran_on = ran_on.clone();
        let name = if i % 2 == 0 { "even" } else { "odd" };
        engine
            .push_sync_with(
                move |ctx| {
                    ran_on.lock().unwrap().insert(ctx.ticket(), ctx.worker());
                    std::hint::black_box((0..200).sum::<u64>());
                },
                &reads,
                &writes,
                PushOpts::new().name(name),
            )
            .unwrap();
        sets.push((reads, writes));
    }
    sets
}

#[test]
fn the_trace_has_one_complete_event_per_operation_on_its_lane() {
    for kind in EngineKind::ALL {
        let engine = Engine::builder().kind(kind).cpu_workers(2).build().unwrap();
        let ran_on = Arc::new(Mutex::new(HashMap::new()));
        engine.start_profiling();
        mixed_graph(&engine, &ran_on);
        engine.wait_all().unwrap();
        let profile = engine.stop_profiling();
        assert_eq!(profile.events.len(), 400, "{kind:?}");
        assert_eq!(profile.dropped, 0);
        let events = trace_json(&profile);
        let complete: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(complete.len(), 400, "{kind:?}: one complete event per operation");
        let lanes = profile.lanes.len() as u64;
        let workers = engine.stats().per_worker.len() as u64;
        let ran_on = ran_on.lock().unwrap();
        for e in complete {
            let ticket = e["args"]["ticket"].as_u64().unwrap();
            let tid = e["tid"].as_u64().unwrap();
            assert!(tid < lanes);
            match ran_on[&ticket] {
                Some(worker) => assert_eq!(tid, worker as u64, "{kind:?}: ticket {ticket} ran on worker {worker}"),
                None => assert!(tid >= workers, "{kind:?}: ticket {ticket} ran off the workers, lane {tid}"),
            }
            assert!(e["name"] == "even" || e["name"] == "odd");
            assert!(e["dur"].as_f64().unwrap() >= 0.0);
        }
        // Every lane is named.
        let named = events.iter().filter(|e| e["ph"] == "M" && e["name"] == "thread_name").count() as u64;
        assert_eq!(named, lanes);
    }
}

#[test]
fn start_and_end_times_respect_the_scheduling_rule() {
    let engine = pooled();
    let ran_on = Arc::new(Mutex::new(HashMap::new()));
    engine.start_profiling();
    let sets = mixed_graph(&engine, &ran_on);
    engine.wait_all().unwrap();
    let profile = engine.stop_profiling();
    let by_ticket: HashMap<u64, &ProfileEvent> = profile.events.iter().map(|e| (e.ticket, e)).collect();
    let mut tickets: Vec<u64> = by_ticket.keys().copied().collect();
    tickets.sort_unstable();
    // The variables were created before the first push: the pushes are
    // the tickets in order.
    assert_eq!(tickets.len(), sets.len());
    let mut checked = 0;
    for (j, (rj, wj)) in sets.iter().enumerate() {
        for (i, (ri, wi)) in sets[..j].iter().enumerate() {
            let conflict = wj.iter().any(|v| ri.contains(v) || wi.contains(v)) || rj.iter().any(|v| wi.contains(v));
            if conflict {
                let (a, b) = (by_ticket[&tickets[i]], by_ticket[&tickets[j]]);
                assert!(a.end_ns <= b.start_ns, "op {j} started at {} before op {i} ended at {}", b.start_ns, a.end_ns);
                checked += 1;
            }
        }
    }
    assert!(checked > 1000, "the graph has conflicts to check ({checked})");
    for e in &profile.events {
        assert!(e.pushed_ns <= e.ready_ns && e.ready_ns <= e.start_ns && e.start_ns <= e.end_ns, "{e:?}");
    }
}

#[test]
fn flow_arrows_follow_what_made_each_operation_ready() {
    let engine = pooled();
    let v = engine.new_var();
    let gate = Arc::new(AtomicBool::new(false));
    engine.start_profiling();
    engine.push_sync_with(common::until_open(&gate), &[], &[v], PushOpts::new().name("gate")).unwrap();
    for _ in 0..20 {
        engine.push_sync_with(|_| {}, &[], &[v], PushOpts::new().name("link")).unwrap();
    }
    gate.store(true, Ordering::Release);
    engine.wait_all().unwrap();
    let profile = engine.stop_profiling();
    let mut events = profile.events.clone();
    events.sort_by_key(|e| e.ticket);
    assert_eq!(events.len(), 21);
    assert_eq!(events[0].made_ready_by, None, "the gate was ready when pushed");
    for pair in events.windows(2) {
        assert_eq!(pair[1].made_ready_by, Some(pair[0].ticket), "each link is released by the one before");
    }
    let trace = trace_json(&profile);
    let starts: Vec<u64> = trace.iter().filter(|e| e["ph"] == "s").map(|e| e["id"].as_u64().unwrap()).collect();
    let ends: Vec<u64> = trace.iter().filter(|e| e["ph"] == "f").map(|e| e["id"].as_u64().unwrap()).collect();
    assert_eq!(starts.len(), 20);
    assert_eq!(starts, ends, "every arrow has both ends");
    // Each end lies inside its operation's slice on the same lane, so that
    // viewers bind the arrow to the right slices.
    let slices: HashMap<u64, &Value> =
        trace.iter().filter(|e| e["ph"] == "X").map(|e| (e["args"]["ticket"].as_u64().unwrap(), e)).collect();
    for flow in trace.iter().filter(|e| e["ph"] == "s" || e["ph"] == "f") {
        let succ = flow["id"].as_u64().unwrap();
        let ticket = if flow["ph"] == "f" {
            succ
        } else {
            events.iter().find(|e| e.ticket == succ).unwrap().made_ready_by.unwrap()
        };
        let slice = slices[&ticket];
        let (start, dur, ts) =
            (slice["ts"].as_f64().unwrap(), slice["dur"].as_f64().unwrap(), flow["ts"].as_f64().unwrap());
        assert_eq!(flow["tid"], slice["tid"], "{flow} on the lane of {slice}");
        assert!(start <= ts && ts <= start + dur, "{flow} inside {slice}");
    }
}

/// The profile of [`mixed_graph`] on a pooled engine.
fn profiled_mixed_graph() -> Profile {
    let engine = pooled();
    let ran_on = Arc::new(Mutex::new(HashMap::new()));
    engine.start_profiling();
    mixed_graph(&engine, &ran_on);
    engine.wait_all().unwrap();
    engine.stop_profiling()
}

#[test]
fn the_summary_counts_each_name() {
    let profile = profiled_mixed_graph();
    let summary = profile.summary();
    assert_eq!(summary.len(), 2);
    for line in &summary {
        assert_eq!(line.count, 200, "{line:?}");
        assert!(line.p50_ns <= line.p99_ns && line.mean_ns <= line.total_ns);
        let total: u64 = profile.events.iter().filter(|e| e.name == line.name).map(|e| e.duration_ns()).sum();
        assert_eq!(line.total_ns, total);
    }
    let table = profile.summary_table();
    assert!(table.contains("even") && table.contains("odd") && table.contains("queued p99"), "{table}");
}

/// A synchronous operation on `lane` whose body ran from `start` to `end` (ns).
fn body(lane: usize, start: u64, end: u64) -> ProfileEvent {
    ProfileEvent {
        name: "op",
        ticket: start,
        ctx: Context::cpu(),
        prop: FnProperty::Normal,
        priority: 0,
        lane,
        pushed_ns: 0,
        ready_ns: start,
        start_ns: start,
        body_end_ns: end,
        end_ns: end,
        made_ready_by: None,
        is_async: false,
        failed: false,
    }
}

#[test]
fn the_lane_summary_measures_busy_time_and_gaps() {
    // Out of order on purpose: the summary sorts each lane's bodies.
    let mut events = vec![body(0, 300, 400), body(0, 0, 100), body(0, 150, 250), body(0, 480, 500)];
    // An asynchronous body: the lane is busy until the body returns, not
    // until its completion fires.
    events.push(ProfileEvent { end_ns: 900, is_async: true, ..body(1, 10, 20) });
    // A shared lane whose threads overlapped: the union counts once.
    events.extend([body(3, 0, 100), body(3, 50, 150), body(3, 200, 210)]);
    let lanes = ["worker 0", "worker 1", "worker 2", "other threads 0"].map(String::from).to_vec();
    let profile = Profile { events, lanes, dropped: 0 };
    let lane = |lane, count, span_ns, busy_ns, gap_p50_ns, gap_p99_ns, gap_max_ns| LaneSummary {
        lane,
        count,
        span_ns,
        busy_ns,
        gap_p50_ns,
        gap_p99_ns,
        gap_max_ns,
    };
    assert_eq!(
        profile.lane_summary(),
        [
            // Gaps 50, 50 and 80 between four bodies.
            lane(0, 4, 500, 320, 50, 80, 80),
            lane(1, 1, 10, 10, 0, 0, 0),
            // Lane 2 ran nothing and has no line; lane 3 merges to 0–150 and 200–210.
            lane(3, 3, 210, 160, 50, 50, 50),
        ]
    );
    assert_eq!(profile.lane_summary()[0].busy_share(), 0.64);
    let table = profile.summary_table();
    let worker0 = table.lines().find(|l| l.starts_with("worker 0")).expect("a line for worker 0");
    assert!(worker0.contains("64.0%") && worker0.contains("0.080"), "{table}");
    assert!(!table.contains("worker 2"), "{table}");
}

#[test]
fn the_lane_summary_covers_every_body_that_ran() {
    let profile = profiled_mixed_graph();
    let lanes = profile.lane_summary();
    assert_eq!(lanes.iter().map(|l| l.count).sum::<u64>(), 400);
    for l in &lanes {
        let ran = profile.events.iter().filter(|e| e.lane == l.lane).count() as u64;
        assert_eq!(l.count, ran, "{l:?}");
        assert!(l.busy_ns <= l.span_ns && l.gap_p50_ns <= l.gap_p99_ns && l.gap_p99_ns <= l.gap_max_ns, "{l:?}");
    }
    // A worker runs one body at a time: its busy time is its bodies' sum.
    for l in lanes.iter().filter(|l| l.lane < 2) {
        let bodies: u64 = profile.events.iter().filter(|e| e.lane == l.lane).map(|e| e.body_end_ns - e.start_ns).sum();
        assert_eq!(l.busy_ns, bodies, "a worker runs one body at a time: {l:?}");
    }
}

#[test]
fn only_the_profiled_region_is_recorded() {
    let engine = pooled();
    let v = engine.new_var();
    let before = PushOpts::new().name("before");
    engine.push_sync_with(|_| {}, &[], &[v], before).unwrap();
    engine.wait_all().unwrap();
    assert!(!engine.is_profiling());
    engine.start_profiling();
    assert!(engine.is_profiling());
    engine.push_sync_with(|_| {}, &[], &[v], PushOpts::new().name("inside")).unwrap();
    engine.wait_var(v).unwrap(); // waits are not operations: not recorded
    engine.wait_all().unwrap();
    let profile = engine.stop_profiling();
    engine.push_sync_with(|_| {}, &[], &[v], PushOpts::new().name("after")).unwrap();
    engine.wait_all().unwrap();
    let names: Vec<&str> = profile.events.iter().map(|e| e.name).collect();
    assert_eq!(names, ["inside"]);
    // A second session starts empty.
    engine.start_profiling();
    engine.wait_all().unwrap();
    assert!(engine.stop_profiling().events.is_empty());
}

#[test]
fn failures_and_async_spans_are_marked() {
    let engine = pooled();
    let (a, b) = (engine.new_var(), engine.new_var());
    engine.start_profiling();
    engine
        .push_sync_with(|_| -> Result<(), String> { Err("no".into()) }, &[], &[a], PushOpts::new().name("fails"))
        .unwrap();
    engine
        .push_async_with(
            |_, done| {
                std::thread::spawn(move || {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    done.signal();
                });
            },
            &[],
            &[b],
            PushOpts::new().name("async"),
        )
        .unwrap();
    let _ = engine.wait_all();
    let profile = engine.stop_profiling();
    let fails = profile.events.iter().find(|e| e.name == "fails").unwrap();
    assert!(fails.failed);
    let asy = profile.events.iter().find(|e| e.name == "async").unwrap();
    assert!(asy.is_async && !asy.failed);
    // The completing thread starts inside the body and sleeps 5 ms before
    // it signals; the body may return before or after it starts (a spawn
    // can take milliseconds on a busy machine). 4.5 ms: the profile's clock
    // is converted from the time-stamp counter at a measured rate.
    assert!(asy.end_ns >= asy.start_ns + 4_500_000, "the span lasts until the completion: {asy:?}");
    assert!(asy.end_ns >= asy.body_end_ns, "the span ends after the body: {asy:?}");
    let trace = trace_json(&profile);
    assert_eq!(trace.iter().filter(|e| e["ph"] == "b" || e["ph"] == "e").count(), 2);
}

#[test]
fn a_full_ring_keeps_the_newest_operations_and_counts_the_rest() {
    let engine = Engine::builder().kind(EngineKind::Naive).profile_events(16).build().unwrap();
    let v = engine.new_var();
    engine.start_profiling();
    for _ in 0..100 {
        engine.push_sync(|_| {}, &[], &[v]).unwrap();
    }
    let profile = engine.stop_profiling();
    assert_eq!(profile.events.len(), 16);
    assert_eq!(profile.dropped, 84);
    assert!(profile.summary_table().contains("84 operations not recorded"));
}

#[test]
fn a_builder_profile_is_written_when_the_engine_is_dropped() {
    let dir = std::env::temp_dir().join(format!("depengine-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.json");
    {
        let engine = Engine::builder().cpu_workers(2).profile(&path).build().unwrap();
        assert!(engine.is_profiling());
        let v = engine.new_var();
        for _ in 0..50 {
            engine.push_sync_with(|_| {}, &[], &[v], PushOpts::new().name("step")).unwrap();
        }
    }
    let trace: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let steps = trace["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X").count();
    assert_eq!(steps, 50);
    let summary = std::fs::read_to_string(dir.join("trace.summary.txt")).unwrap();
    assert!(summary.lines().any(|l| l.starts_with("step") && l.contains(" 50 ")), "{summary}");
    std::fs::remove_dir_all(&dir).unwrap();
}
