//! No safe program can crash the engine, abort the process, hang silently
//! or lose accepted work: one test per way a user's code or input
//! once could, each run on every engine kind.
//!
//! Every test runs its scenario in a child process of its own (this test
//! binary, re-run with the test's name): a scenario that aborts, crashes or
//! hangs then fails its test, with the child's output, instead of taking
//! the whole suite down. A child that is still running after
//! [`CHILD_DEADLINE`] is killed and its test fails as hung.

mod common;

use depengine::{Completion, Context, Engine, EngineBuilder, EngineError, EngineKind, PushOpts, RunContext, Var};
use std::any::Any;
use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// How long a scenario may take before its test fails as hung: far beyond
/// any of them (each takes well under a second), so that only a hang
/// reaches it.
const CHILD_DEADLINE: Duration = Duration::from_secs(60);

/// The variable naming the scenario a child process runs.
const CHILD_VAR: &str = "HARDENING_SCENARIO";

/// In the child: whether to run the scenario `name` here. In the parent:
/// runs this binary again for `name` alone and fails if it does not exit
/// cleanly within the deadline; returns `false`.
fn in_child(name: &str) -> bool {
    if std::env::var(CHILD_VAR).as_deref() == Ok(name) {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary");
    let mut child = Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_VAR, name)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the scenario's process");
    let mut pipes = [
        child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
        child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>),
    ];
    let readers: Vec<_> = pipes
        .iter_mut()
        .map(|p| {
            let mut pipe = p.take().expect("a pipe");
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                text
            })
        })
        .collect();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the scenario") {
            break Some(status);
        }
        if start.elapsed() > CHILD_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let output: Vec<String> = readers.into_iter().map(|r| r.join().unwrap_or_default()).collect();
    let ran = output[0].contains("1 passed");
    match status {
        None => panic!("{name}: hung (killed after {CHILD_DEADLINE:?})\n{}\n{}", output[0], output[1]),
        Some(s) if !s.success() || !ran => panic!("{name}: {s}\n{}\n{}", output[0], output[1]),
        Some(_) => false,
    }
}

/// A test whose body runs in a child process of its own ([`in_child`]).
macro_rules! isolated {
    ($(#[$meta:meta])* fn $name:ident() $body:block) => {
        $(#[$meta])*
        #[test]
        fn $name() {
            if in_child(stringify!($name)) $body
        }
    };
}

/// Every engine kind, and the random-order mode with a worker (its
/// operations then run without a wait), each with two CPU workers.
fn builders() -> Vec<(String, EngineBuilder)> {
    let mut all: Vec<(String, EngineBuilder)> =
        EngineKind::ALL.iter().map(|&k| (k.name().to_owned(), Engine::builder().kind(k).cpu_workers(2))).collect();
    all.push(("shuffle".to_owned(), Engine::builder().shuffle_seed(3).shuffle_workers(1)));
    all
}

/// Drops of [`Bomb`]s so far (per process: each scenario is alone in its
/// child).
static BOMB_DROPS: AtomicUsize = AtomicUsize::new(0);

/// A value whose `Drop` panics; with `depth > 0` the panic's payload is
/// another `Bomb`, so that dropping the payload panics too.
struct Bomb {
    depth: usize,
}

impl Drop for Bomb {
    fn drop(&mut self) {
        BOMB_DROPS.fetch_add(1, Ordering::SeqCst);
        if self.depth > 0 {
            std::panic::panic_any(Bomb { depth: self.depth - 1 });
        }
        panic!("a Bomb went off while dropped");
    }
}

fn bomb() -> Bomb {
    Bomb { depth: 1 }
}

/// A body that panics with `payload()` as its payload.
fn panics_with<P: Any + Send + 'static>(payload: fn() -> P) -> impl Fn(&RunContext) + Send + Sync + 'static {
    move |_| std::panic::panic_any(payload())
}

/// A body that panics with a message.
fn panics(message: &'static str) -> impl FnOnce(&RunContext) + Send + 'static {
    move |_| panic!("{message}")
}

/// The failure a wait reported.
fn failure(result: Result<(), EngineError>) -> String {
    match result {
        Err(EngineError::OpFailed(e)) => e.message().to_owned(),
        other => panic!("expected a failed operation, got {other:?}"),
    }
}

/// The names of this process's threads that belong to an engine.
fn engine_threads() -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|c| c.trim().to_owned())
        .filter(|c| c.starts_with("depengine-"))
        .collect()
}

/// Waits (bounded) until no engine thread is left in this process.
fn until_no_engine_threads() {
    let start = Instant::now();
    while !engine_threads().is_empty() {
        assert!(start.elapsed() < Duration::from_secs(20), "engine threads left running: {:?}", engine_threads());
        std::thread::sleep(Duration::from_millis(5));
    }
}

// ---- 1. user code that drops the last handle of its own engine ----------

isolated! {
    /// Defect 1: a body, made ready by a completion signalled on a user's
    /// thread, drops the last `Engine`: the core must stay alive for the
    /// rest of the completion, and the engine must still shut down and
    /// free its threads.
    fn a_body_that_drops_the_last_engine_while_a_completion_runs_it() {
        for (name, builder) in builders() {
            let engine = Arc::new(builder.build().expect("engine"));
            let v = engine.new_var();
            let (tx, rx) = mpsc::channel::<Completion>();
            engine.push_async(move |_, done| tx.send(done).unwrap(), &[], &[v]).unwrap();
            let ran = Arc::new(AtomicUsize::new(0));
            let (mine, r) = (engine.clone(), ran.clone());
            engine
                .push_sync(
                    move |_| {
                        r.fetch_add(1, Ordering::SeqCst);
                        drop(mine);
                    },
                    &[v],
                    &[],
                )
                .unwrap();
            let done = rx.recv_timeout(Duration::from_secs(10)).expect("the async body ran");
            drop(engine);
            done.signal();
            let start = Instant::now();
            while ran.load(Ordering::SeqCst) == 0 {
                assert!(start.elapsed() < Duration::from_secs(10), "{name}: the body never ran");
                std::thread::sleep(Duration::from_millis(1));
            }
            until_no_engine_threads();
        }
    }
}

isolated! {
    /// The same from a worker and from a deletion callback: the last
    /// handle dropped inside the engine's own thread.
    fn a_body_or_deletion_callback_that_drops_the_last_engine() {
        for (name, builder) in builders() {
            for in_callback in [false, true] {
                let engine = Arc::new(builder.clone().build().expect("engine"));
                let v = engine.new_var();
                let counter = Arc::new(AtomicUsize::new(0));
                for _ in 0..100 {
                    let c = counter.clone();
                    engine.push_sync(move |_| {
c.fetch_add(1, Ordering::SeqCst);
}, &[], &[v]).unwrap();
                }
                let mine = engine.clone();
                if in_callback {
                    engine.delete_var(v, move || drop(mine)).unwrap();
                } else {
                    engine.push_sync(move |_| drop(mine), &[v], &[]).unwrap();
                }
                drop(engine);
                let start = Instant::now();
                while counter.load(Ordering::SeqCst) < 100 || Arc::strong_count(&counter) > 1 {
                    assert!(start.elapsed() < Duration::from_secs(20), "{name}: the pushed work never finished");
                    std::thread::sleep(Duration::from_millis(1));
                }
                until_no_engine_threads();
            }
        }
    }
}

isolated! {
    /// The last handle held by a closure that never runs: the engine drops
    /// it while it finishes the skipped operation, on whichever thread that
    /// is (the one signalling the completion on `naive`, a worker on the
    /// others). The shutdown goes to the reaper instead of waiting there for
    /// the operation being finished (found by the `api_misuse` fuzz target).
    fn the_last_engine_handle_in_a_closure_dropped_unrun() {
        for (name, builder) in builders() {
            let engine = Arc::new(builder.build().expect("engine"));
            let v = engine.new_var();
            let (tx, rx) = mpsc::channel::<Completion>();
            engine.push_async(move |_, done| tx.send(done).unwrap(), &[], &[v]).unwrap();
            let mine = engine.clone();
            engine.push_sync(move |_| drop(mine), &[v], &[]).unwrap();
            let done = rx.recv_timeout(Duration::from_secs(10)).expect("the async body ran");
            drop(engine);
            // The reader is skipped: its closure, and the last handle in
            // it, are dropped unrun.
            done.fail("the reader must not run");
            until_no_engine_threads();
            let _ = name;
        }
    }
}

// ---- 2. panic payloads whose Drop panics --------------------------------

isolated! {
    /// Defect 2: a body panics with a payload whose `Drop` panics (and
    /// whose panic's payload does again): the operation fails, nothing
    /// aborts, and the engine shuts down.
    fn a_panic_payload_that_panics_when_dropped_fails_only_its_operation() {
        for (name, builder) in builders() {
            let engine = builder.build().expect("engine");
            let v = engine.new_var();
            let before = BOMB_DROPS.load(Ordering::SeqCst);
            engine.push_sync(panics_with(bomb), &[], &[v]).unwrap();
            assert_eq!(failure(engine.wait_var(v)), "panicked", "{name}");
            let w = engine.new_var();
            engine.push_async(|_, _done| { std::panic::panic_any(bomb()); }, &[], &[w]).unwrap();
            assert_eq!(failure(engine.wait_var(w)), "panicked", "{name}");
            let op = engine.new_operator(panics_with(bomb), &[], &[v], Default::default(), "op").unwrap();
            engine.push_op(&op, Context::cpu(), 0).unwrap();
            assert_eq!(failure(engine.wait_var(v)), "panicked", "{name}");
            let x = engine.new_var();
            engine.delete_var(x, || { std::panic::panic_any(bomb()); }).unwrap();
            let _ = engine.wait_all();
            engine.push_sync(|_| {}, &[], &[v]).unwrap();
            engine.wait_var(v).expect("the engine works on");
            // Each bomb's payload and its payload's payload were dropped.
            assert_eq!(BOMB_DROPS.load(Ordering::SeqCst) - before, 4 * 2, "{name}");
            engine.delete_operator(op);
            drop(engine);
        }
    }
}

// ---- 3. captures whose Drop panics, dropped unrun -------------------------

isolated! {
    /// Defect 3: bodies that never run (skipped behind a failure) capture
    /// values whose `Drop` panics: each is dropped, the engine goes on,
    /// waits return the inherited failure.
    fn captures_that_panic_when_dropped_unrun_after_a_failure() {
        for (name, builder) in builders() {
            let engine = builder.build().expect("engine");
            let (v, w) = (engine.new_var(), engine.new_var());
            engine.push_sync(panics("first"), &[], &[v]).unwrap();
            let before = BOMB_DROPS.load(Ordering::SeqCst);
            for _ in 0..10 {
                let b = bomb();
                engine.push_sync(move |_| drop(b), &[v], &[w]).unwrap();
                let b = bomb();
                engine.push_async(move |_, done| { drop(b); done.signal() }, &[v], &[w]).unwrap();
            }
            assert_eq!(failure(engine.wait_var(w)), "panicked: first", "{name}");
            let _ = engine.wait_all();
            // Twenty captures, each with a payload that panics once more.
            assert_eq!(BOMB_DROPS.load(Ordering::SeqCst) - before, 20 * 2, "{name}");
            engine.push_sync(|_| {}, &[], &[w]).unwrap();
            engine.wait_var(w).expect("a blind write heals");
        }
    }
}

isolated! {
    /// Defect 3, cancelled: operations queued behind a held completion
    /// when `shutdown_cancel` comes are dropped unrun, on whichever thread
    /// completes the holder.
    fn captures_that_panic_when_dropped_unrun_by_a_cancel() {
        for (name, builder) in builders() {
            let engine = builder.build().expect("engine");
            let v = engine.new_var();
            let (tx, rx) = mpsc::channel::<Completion>();
            engine.push_async(move |_, done| tx.send(done).unwrap(), &[], &[v]).unwrap();
            let ran = Arc::new(AtomicUsize::new(0));
            for _ in 0..10 {
                let (b, r) = (bomb(), ran.clone());
                engine
                    .push_sync(
                        move |_| {
                            r.fetch_add(1, Ordering::SeqCst);
                            drop(b)
                        },
                        &[], &[v],
                    )
                    .unwrap();
            }
            let done = rx.recv_timeout(Duration::from_secs(10)).expect("the async body ran");
            let before = BOMB_DROPS.load(Ordering::SeqCst);
            let signaller = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                done.signal();
            });
            engine.shutdown_cancel().expect("shutdown_cancel");
            signaller.join().expect("the signalling thread did not panic");
            assert_eq!(ran.load(Ordering::SeqCst), 0, "{name}: cancelled bodies ran");
            assert_eq!(BOMB_DROPS.load(Ordering::SeqCst) - before, 10 * 2, "{name}");
        }
    }
}

isolated! {
    /// Bulked bodies and an operator's closure that panic when dropped:
    /// a failing bulk drops its later members unrun, and an operator's
    /// closure is dropped by its last push after `delete_operator`.
    fn bulked_bodies_and_operators_that_panic_when_dropped() {
        for (name, builder) in builders() {
            let engine = builder.build().expect("engine");
            let v = engine.new_var();
            let before = BOMB_DROPS.load(Ordering::SeqCst);
            engine.set_bulk_size(8).unwrap();
            engine.push_sync(panics("member"), &[], &[v]).unwrap();
            for _ in 0..3 {
                let b = bomb();
                engine.push_sync(move |_| drop(b), &[], &[v]).unwrap();
            }
            assert_eq!(failure(engine.wait_var(v)), "panicked: member", "{name}");
            assert_eq!(failure(engine.wait_all()), "panicked: member", "{name}");
            engine.set_bulk_size(1).unwrap();
            let b = bomb();
            let op = engine.new_operator(move |_| { let _ = &b; }, &[], &[v], Default::default(), "holds a bomb").unwrap();
            engine.push_op(&op, Context::cpu(), 0).unwrap();
            engine.delete_operator(op);
            engine.wait_all().expect("the operator ran");
            assert_eq!(BOMB_DROPS.load(Ordering::SeqCst) - before, 4 * 2, "{name}");
        }
    }
}

isolated! {
    /// A push refused for bad input (a deleted variable, a device that does
    /// not exist, an engine shut down) drops its closure unrun, and a
    /// panicking `Drop` of its captures does not escape the call (found by
    /// the `api_misuse` fuzz target).
    fn a_refused_push_drops_its_closure_quietly() {
        for (name, builder) in builders() {
            let engine = builder.build().expect("engine");
            let v = engine.new_var();
            engine.delete_var(v, || {}).unwrap();
            let before = BOMB_DROPS.load(Ordering::SeqCst);
            let b = bomb();
            assert_eq!(engine.push_sync(move |_| drop(b), &[], &[v]), Err(EngineError::DeletedVar), "{name}");
            let b = bomb();
            let refused = engine.push_async(
                move |_, done| {
                    drop(b);
                    done.signal()
                },
                &[v],
                &[],
            );
            assert_eq!(refused, Err(EngineError::DeletedVar), "{name}");
            let b = bomb();
            let gpu = PushOpts::new().ctx(Context::Gpu(0));
            let refused = engine.push_sync_with(move |_| drop(b), &[], &[], gpu);
            assert!(matches!(refused, Err(EngineError::NoSuchDevice(_))), "{name}: {refused:?}");
            let b = bomb();
            let refused = engine.new_operator(move |_| { let _ = &b; }, &[], &[v], Default::default(), "refused");
            assert!(refused.is_err(), "{name}");
            let b = bomb();
            assert_eq!(engine.delete_var(v, move || drop(b)), Err(EngineError::DeletedTwice), "{name}");
            engine.shutdown().unwrap();
            let b = bomb();
            assert_eq!(engine.push_sync(move |_| drop(b), &[], &[]), Err(EngineError::ShutDown), "{name}");
            let b = bomb();
            let w = [Var::clone(&v)];
            assert!(engine.push_sync(move |_| drop(b), &[], &w).is_err(), "{name}");
            assert_eq!(BOMB_DROPS.load(Ordering::SeqCst) - before, 7 * 2, "{name}");
        }
    }
}

isolated! {
    /// User code of every other kind that panics: an error whose
    /// `Display` panics, a `Completion::fail` message whose `Display`
    /// panics, a hang-report callback that panics.
    fn panicking_display_and_callbacks_fail_cleanly() {
        struct BadDisplay;
        impl std::fmt::Display for BadDisplay {
            fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                panic!("Display")
            }
        }
        for (name, builder) in builders() {
            let engine = builder.hang_report(Duration::from_millis(20)).on_hang(|_| panic!("on_hang")).build().expect("engine");
            let (v, w) = (engine.new_var(), engine.new_var());
            engine.push_sync(|_| Err::<(), _>(BadDisplay), &[], &[v]).unwrap();
            assert!(engine.wait_var(v).is_err(), "{name}");
            engine.push_async(|_, done| done.fail(BadDisplay), &[], &[w]).unwrap();
            assert!(engine.wait_var(w).is_err(), "{name}");
            // A wait long enough for the watchdog to report (and panic).
            let (tx, rx) = mpsc::channel::<Completion>();
            engine.push_async(move |_, done| tx.send(done).unwrap(), &[], &[v]).unwrap();
            let done = rx.recv_timeout(Duration::from_secs(10)).expect("the async body ran");
            let signaller = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                done.signal();
            });
            engine.wait_var(v).expect("the wait ends when the completion comes");
            signaller.join().unwrap();
        }
    }
}

// ---- 4. builder values at their extremes ---------------------------------

isolated! {
    /// Defect 4: every setter at its extremes gives a working engine or a
    /// `Config` error, never a panic.
    fn every_builder_setting_at_its_extremes_builds_or_says_why() {
        let durations = [Duration::ZERO, Duration::from_nanos(1), Duration::MAX, Duration::new(u64::MAX / 2, 0)];
        let counts = [0usize, 1, usize::MAX];
        for kind in EngineKind::ALL {
            let base = || Engine::builder().kind(kind).cpu_workers(2);
            let mut cases: Vec<(String, EngineBuilder)> = Vec::new();
            for d in durations {
                cases.push((format!("inline_pace({d:?})"), base().inline_pace(d).run_on_pusher(true)));
                cases.push((format!("spin({d:?})"), base().spin(d)));
                cases.push((format!("hang_report({d:?})"), base().hang_report(d)));
            }
            for n in counts {
                cases.push((format!("cpu_workers({n})"), Engine::builder().kind(kind).cpu_workers(n)));
                cases.push((format!("copy_workers({n})"), base().copy_workers(n)));
                cases.push((format!("priority_workers({n})"), base().priority_workers(n)));
                cases.push((format!("gpu_compute_workers({n})"), base().gpu_compute_workers(n)));
                cases.push((format!("gpu_priority_workers({n})"), base().gpu_priority_workers(n)));
                cases.push((format!("gpu_copy_workers({n})"), base().gpu_copy_workers(n)));
                cases.push((format!("shuffle_workers({n})"), base().shuffle_seed(1).shuffle_workers(n)));
                cases.push((format!("profile_events({n})"), base().profile_events(n)));
            }
            for n in [0u64, 1, 2, u64::MAX] {
                cases.push((format!("max_pending({n})"), base().max_pending(n)));
            }
            for seed in [0u64, u64::MAX] {
                cases.push((format!("shuffle_seed({seed})"), base().shuffle_seed(seed)));
            }
            for (what, builder) in cases {
                match builder.build() {
                    Ok(engine) => {
                        let v = engine.new_var();
                        for _ in 0..50 {
                            engine.push_sync(|_| {}, &[v], &[]).unwrap();
                            engine.push_sync(|_| {}, &[], &[v]).unwrap();
                        }
                        engine.wait_all().unwrap_or_else(|e| panic!("{kind:?} {what}: {e}"));
                        assert_eq!(engine.var_version(v), Ok(50), "{kind:?} {what}");
                    }
                    Err(EngineError::Config(_)) => {}
                    Err(e) => panic!("{kind:?} {what}: {e:?}"),
                }
            }
        }
    }
}

// ---- 5. a thread the OS will not start -------------------------------------

isolated! {
    /// Defect 5: under an address-space limit that leaves no room for the
    /// workers' stacks, `build` returns `Spawn` and leaves no thread of
    /// the engine running; once the limit is lifted, building works.
    fn build_reports_a_worker_it_cannot_start_and_leaves_nothing_running() {
        // SAFETY: plain getrlimit/setrlimit on this process, with valid
        // pointers to local structs.
        unsafe {
            let mut old = std::mem::zeroed::<libc::rlimit>();
            assert_eq!(libc::getrlimit(libc::RLIMIT_AS, &mut old), 0);
            let vm_kib: u64 = std::fs::read_to_string("/proc/self/status")
                .unwrap()
                .lines()
                .find_map(|l| l.strip_prefix("VmSize:"))
                .and_then(|l| l.trim().trim_end_matches("kB").trim().parse().ok())
                .expect("VmSize");
            // Room for the engine's heap (its pools fall back to the heap
            // when they cannot reserve address space), not for 512 stacks.
            let limit = libc::rlimit { rlim_cur: (vm_kib + 96 * 1024) * 1024, rlim_max: old.rlim_max };
            assert_eq!(libc::setrlimit(libc::RLIMIT_AS, &limit), 0);
            for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
                let result = Engine::builder().kind(kind).cpu_workers(512).pin(false).build();
                match result {
                    Err(EngineError::Spawn(why)) => assert!(!why.is_empty()),
                    other => panic!("{kind:?}: expected a Spawn error, got {other:?}"),
                }
                assert!(engine_threads().is_empty(), "{kind:?}: threads left running: {:?}", engine_threads());
            }
            assert_eq!(libc::setrlimit(libc::RLIMIT_AS, &old), 0);
        }
        let engine = Engine::builder().kind(EngineKind::Pooled).cpu_workers(2).build().expect("builds again");
        let v = engine.new_var();
        engine.push_sync(|_| {}, &[], &[v]).unwrap();
        engine.wait_var(v).unwrap();
    }
}

// ---- 6. per-thread state is per engine --------------------------------------

isolated! {
    /// Defect 6: a bulk left open on an engine that another thread drops
    /// is reported, and neither poisons the thread's pushes to another
    /// engine nor its bulk size there.
    fn a_bulk_left_open_on_a_dropped_engine_affects_no_other_engine() {
        for (name, builder) in builders() {
            let a = Arc::new(builder.clone().build().expect("engine a"));
            let b = builder.build().expect("engine b");
            let va = a.new_var();
            let ran = Arc::new(AtomicUsize::new(0));
            assert_eq!(a.set_bulk_size(16), Ok(0));
            let r = ran.clone();
            a.push_sync(move |_| {
r.fetch_add(1, Ordering::SeqCst);
}, &[], &[va]).unwrap();
            // Another thread drops the engine while this one's bulk is open.
            let theirs = a.clone();
            drop(a);
            std::thread::spawn(move || drop(theirs)).join().unwrap();
            // This thread's bulk size belongs to engine a: b is unbulked.
            let vb = b.new_var();
            let r = ran.clone();
            b.push_sync(move |_| {
r.fetch_add(10, Ordering::SeqCst);
}, &[], &[vb]).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(b.set_bulk_size(4), Ok(0), "{name}: b's bulk size is its own");
            b.wait_var(vb).expect("b works");
            assert_eq!(ran.load(Ordering::SeqCst) % 10, 0, "{name}: b's push ran");
            assert_eq!(b.flush_bulk(), Ok(()), "{name}");
        }
    }
}

isolated! {
    /// A thread that exits with a bulk open drops it (reported on stderr)
    /// and gives its buffer back once; the engine goes on (the buffer was
    /// given back twice, a debug assertion in the thread's exit).
    fn a_thread_that_exits_with_a_bulk_open_leaves_the_engine_working() {
        for (name, builder) in builders() {
            let engine = Arc::new(builder.build().expect("engine"));
            let v = engine.new_var();
            let e = engine.clone();
            std::thread::spawn(move || {
                e.set_bulk_size(8).unwrap();
                for _ in 0..3 {
                    e.push_sync(|_| {}, &[], &[v]).unwrap();
                }
            })
            .join()
            .unwrap_or_else(|_| panic!("{name}: the exiting thread panicked"));
            for _ in 0..20 {
                engine.set_bulk_size(4).unwrap();
                engine.push_sync(|_| {}, &[], &[v]).unwrap();
                engine.flush_bulk().unwrap();
            }
            engine.wait_var(v).unwrap();
            assert_eq!(engine.var_version(v), Ok(20), "{name}: the exited thread's bulk was dropped unrun");
        }
    }
}

isolated! {
    /// Bulk sizes are per engine: setting one engine's leaves another's
    /// pushes unbulked (they run without a flush).
    fn bulk_sizes_are_per_engine() {
        let a = Engine::builder().kind(EngineKind::Pooled).cpu_workers(2).build().unwrap();
        let b = Engine::builder().kind(EngineKind::Pooled).cpu_workers(2).build().unwrap();
        a.set_bulk_size(1000).unwrap();
        let v = b.new_var();
        let (tx, rx) = mpsc::channel();
        b.push_sync(move |_| tx.send(()).unwrap(), &[], &[v]).unwrap();
        rx.recv_timeout(Duration::from_secs(10)).expect("b's push ran without a flush");
        let w = a.new_var();
        let (tx, rx) = mpsc::channel();
        a.push_sync(move |_| tx.send(()).unwrap(), &[], &[w]).unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err(), "a's push is bulked until a flush");
        a.flush_bulk().unwrap();
        rx.recv_timeout(Duration::from_secs(10)).expect("a's bulk ran once flushed");
    }
}

// ---- suspected defects, settled ---------------------------------------------

isolated! {
    /// A CPU context naming a NUMA node the machine does not have is an
    /// error, as a GPU context naming a missing device is.
    fn a_cpu_context_for_a_missing_node_is_no_such_device() {
        for (name, builder) in builders() {
            let engine = builder.build().expect("engine");
            let v = engine.new_var();
            let bad = PushOpts::new().ctx(Context::Cpu(4096));
            assert!(matches!(engine.push_sync_with(|_| {}, &[], &[v], bad), Err(EngineError::NoSuchDevice(_))), "{name}");
            let any = PushOpts::new().ctx(Context::cpu());
            engine.push_sync_with(|_| {}, &[], &[v], any).expect("any node");
            let node0 = PushOpts::new().ctx(Context::Cpu(0));
            engine.push_sync_with(|_| {}, &[], &[v], node0).expect("node 0 exists everywhere");
            engine.wait_all().unwrap();
            assert_eq!(engine.var_version(v), Ok(2), "{name}: the refused push did nothing");
        }
    }
}

isolated! {
    /// A forgotten `Completion` would make drop wait forever:
    /// `shutdown_timeout` gives up after its time, says what is pending,
    /// and leaves the engine usable for a later shutdown.
    fn shutdown_timeout_reports_a_forgotten_completion() {
        for (name, builder) in builders() {
            let engine = builder.build().expect("engine");
            let v = engine.new_var();
            let (tx, rx) = mpsc::channel::<Completion>();
            engine.push_async(move |_, done| tx.send(done).unwrap(), &[], &[v]).unwrap();
            engine.push_sync(|_| {}, &[v], &[]).unwrap();
            let done = rx.recv_timeout(Duration::from_secs(10)).expect("the async body ran");
            let start = Instant::now();
            match engine.shutdown_timeout(Duration::from_millis(50)) {
                Err(EngineError::Timeout { pending, .. }) => assert_eq!(pending, 2, "{name}"),
                other => panic!("{name}: expected a timeout, got {other:?}"),
            }
            assert!(start.elapsed() < Duration::from_secs(10), "{name}");
            done.signal();
            engine.shutdown_timeout(Duration::from_secs(20)).expect("everything finished");
            assert_eq!(engine.push_sync(|_| {}, &[], &[v]), Err(EngineError::ShutDown), "{name}");
        }
    }
}

isolated! {
    /// A misspelt `DEPENGINE_*` variable is refused by `from_env`, with
    /// the name it did not know.
    fn an_unknown_depengine_variable_is_refused() {
        std::env::set_var("DEPENGINE_ENGINE_TYP", "naive");
        match EngineBuilder::from_env() {
            Err(EngineError::Config(why)) => assert!(why.contains("DEPENGINE_ENGINE_TYP"), "{why}"),
            other => panic!("expected a Config error, got {other:?}"),
        }
        std::env::remove_var("DEPENGINE_ENGINE_TYP");
        EngineBuilder::from_env().expect("known variables only");
    }
}

// ---- the contract a push makes ---------------------------------------------

isolated! {
    /// The push-contract deadlock: after a stretch of tiny pushes, a body that
    /// waits for what its pusher does only after the push. By default a
    /// push never runs a body with variables on the pushing thread (below
    /// the cap by the contract, and at the cap these engines' pushers yield
    /// rather than help), so the push returns and the body gets the value.
    fn a_push_never_runs_its_body_on_the_pusher_by_default() {
        for kind in [EngineKind::Pooled, EngineKind::PerDevice] {
            // A small cap and an inline pace so long that every pusher is
            // quick enough to probe for stints (as `common::stint_engine_of`):
            // with running on the pusher asked for, stints start at once.
            let engine = Engine::builder()
                .kind(kind)
                .cpu_workers(2)
                .max_pending(16)
                .inline_pace(Duration::from_secs(1))
                .build()
                .unwrap();
            let vars: Vec<Var> = (0..64).map(|_| engine.new_var()).collect();
            let pusher = std::thread::current().id();
            let on_pusher = Arc::new(AtomicUsize::new(0));
            // Pushes as fast as one thread can for a while: with running on
            // the pusher on, this reaches the cap, probes, and starts
            // stints, which run these bodies inside their pushes.
            let start = Instant::now();
            let mut i = 0;
            while start.elapsed() < Duration::from_secs(2) {
                let o = on_pusher.clone();
                engine
                    .push_sync(
                        move |_| {
                            if std::thread::current().id() == pusher {
                                o.fetch_add(1, Ordering::Relaxed);
                            }
                        },
                        &[vars[i % 64]],
                        &[vars[(i + 1) % 64]],
                    )
                    .unwrap();
                i += 1;
            }
            let (tx, rx) = mpsc::channel::<u32>();
            let got = Arc::new(AtomicUsize::new(0));
            let g = got.clone();
            engine.push_sync(move |_| g.store(rx.recv().unwrap() as usize, Ordering::SeqCst), &[vars[0]], &[vars[1]]).unwrap();
            let during_pushes = on_pusher.load(Ordering::Relaxed);
            tx.send(7).unwrap();
            engine.wait_all().unwrap();
            assert_eq!(got.load(Ordering::SeqCst), 7);
            assert_eq!(during_pushes, 0, "{kind:?}: bodies ran on the pushing thread");
            assert_eq!(engine.stats().stints, 0, "{kind:?}");
        }
    }
}
