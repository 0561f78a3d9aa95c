//! Hang diagnosis: a wait stuck past the threshold reports the operations
//! in flight on its variable, what each waits for, and what runs where.

use depengine::{Completion, Engine, EngineError, EngineKind, HangReport, PendingState, PushOpts};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An engine that reports waits stuck for `after` to the returned channel.
fn diagnosed_after(kind: EngineKind, after: Duration) -> (Engine, Receiver<HangReport>) {
    let (tx, rx) = channel();
    let engine = Engine::builder()
        .kind(kind)
        .cpu_workers(2)
        .hang_report(after)
        .on_hang(move |r| tx.send(r.clone()).unwrap())
        .build()
        .unwrap();
    (engine, rx)
}

/// Reports after 50 ms.
fn diagnosed(kind: EngineKind) -> (Engine, Receiver<HangReport>) {
    diagnosed_after(kind, Duration::from_millis(50))
}

#[test]
fn a_wait_behind_an_unsignalled_completion_names_it() {
    for kind in EngineKind::ALL {
        let (engine, reports) = diagnosed(kind);
        let (v, w) = (engine.new_var(), engine.new_var());
        let held: Arc<Mutex<Option<Completion>>> = Arc::default();
        let h = held.clone();
        let load = PushOpts::new().name("load");
        engine.push_async_with(move |_, done| *h.lock().unwrap() = Some(done), &[], &[v], load).unwrap();
        engine.push_sync_with(|_| {}, &[v], &[w], PushOpts::new().name("step")).unwrap();
        std::thread::scope(|s| {
            let waiter = s.spawn(|| engine.wait_var(w));
            let report = reports.recv_timeout(Duration::from_secs(10)).expect("a hang report");
            // Unblock the wait, which must then succeed.
            held.lock().unwrap().take().expect("load ran").signal();
            waiter.join().unwrap().unwrap();
            let text = report.to_string();
            assert_eq!(report.var, Some(w), "{text}");
            assert!(report.wait.starts_with("wait_var("), "{text}");
            assert!(report.waited >= Duration::from_millis(50), "{text}");
            let names: Vec<&str> = report.pending.iter().map(|p| p.name).collect();
            assert_eq!(names, ["step", "wait_var"], "{kind:?}: in flight on w, oldest first\n{text}");
            let (step, marker) = (&report.pending[0], &report.pending[1]);
            let load = report.running.iter().find(|p| p.name == "load").expect("load is listed as running");
            assert!(matches!(load.state, PendingState::AwaitingCompletion(_)), "{text}");
            assert_eq!(step.state, PendingState::Queued, "{text}");
            assert_eq!(step.waits_for, [load.ticket], "step waits for load (on v)\n{text}");
            assert_eq!(marker.waits_for, [step.ticket], "the wait waits for step (on w)\n{text}");
            assert!(text.contains("waiting for its Completion to be signalled"), "{text}");
            assert!(text.contains(&format!("waiting for #{} \"load\"", load.ticket)), "{text}");
        });
        assert!(reports.try_recv().is_err(), "one report per wait");
    }
}

#[test]
fn a_running_body_is_shown_on_its_worker() {
    let (engine, reports) = diagnosed(EngineKind::Pooled);
    let v = engine.new_var();
    let gate = Arc::new(AtomicBool::new(false));
    let g = gate.clone();
    let ran_on = Arc::new(Mutex::new(None));
    let r = ran_on.clone();
    let body = move |ctx: &depengine::RunContext| {
        *r.lock().unwrap() = Some(ctx.worker());
        while !g.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    engine.push_sync_with(body, &[], &[v], PushOpts::new().name("spin")).unwrap();
    // Let a worker take it before anyone waits (a waiter would run it itself).
    while ran_on.lock().unwrap().is_none() {
        std::thread::yield_now();
    }
    std::thread::scope(|s| {
        let waiter = s.spawn(|| engine.wait_all());
        let report = reports.recv_timeout(Duration::from_secs(10)).expect("a hang report");
        gate.store(true, Ordering::Release);
        waiter.join().unwrap().unwrap();
        let text = report.to_string();
        assert_eq!(report.wait, "wait_all()", "{text}");
        assert_eq!(report.running.len(), 1, "{text}");
        let worker = ran_on.lock().unwrap().unwrap().expect("ran on a worker");
        assert_eq!(report.running[0].state, PendingState::Running(worker), "{text}");
        assert!(text.contains(&format!("running on cpu worker {worker}")), "{text}");
    });
}

#[test]
fn a_report_can_be_asked_for_and_needs_diagnosis_on() {
    let (engine, _reports) = diagnosed(EngineKind::Pooled);
    let v = engine.new_var();
    let report = engine.pending_report(Some(v)).unwrap();
    assert!(report.pending.is_empty() && report.running.is_empty());
    assert_eq!(report.in_flight, 0);

    let plain = Engine::builder().build().unwrap();
    let v = plain.new_var();
    assert!(matches!(plain.pending_report(Some(v)), Err(EngineError::Config(_))));
    // A variable of another engine is refused.
    assert!(matches!(engine.pending_report(Some(v)), Err(EngineError::ForeignVar)));
}

#[test]
fn quick_waits_are_not_reported() {
    // Each wait takes microseconds; a loaded machine may stretch one to a
    // few ms, never to a second.
    let (engine, reports) = diagnosed_after(EngineKind::Pooled, Duration::from_secs(1));
    let v = engine.new_var();
    for _ in 0..1000 {
        engine.push_sync(|_| {}, &[], &[v]).unwrap();
        engine.wait_var(v).unwrap();
    }
    engine.wait_all().unwrap();
    std::thread::sleep(Duration::from_millis(300)); // a watchdog pass or more
    assert!(reports.try_recv().is_err());
}
