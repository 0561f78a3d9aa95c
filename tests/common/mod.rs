//! Helpers shared by the integration tests: engine lists, an event log that
//! records the global order of body starts and ends, a bounded wait, a
//! body that blocks until a gate opens and one that keeps its CPU a while,
//! and a thread confined to chosen CPUs.
#![allow(dead_code, unreachable_pub)]

use depengine::{Engine, EngineBuilder, EngineKind, RunContext, Var};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Every engine, with 2 CPU workers where the engine has workers.
pub fn engines() -> Vec<Engine> {
    EngineKind::ALL.iter().map(|&k| engine(k)).collect()
}

/// Engines that run bodies in parallel on workers.
pub fn parallel_engines() -> Vec<Engine> {
    EngineKind::ALL.iter().filter(|&&k| k != EngineKind::Naive).map(|&k| engine(k)).collect()
}

pub fn engine(kind: EngineKind) -> Engine {
    engine_of(kind, Some(2))
}

/// An engine of `kind` with `workers` CPU workers (`None`: the engine's
/// default, one per CPU the calling thread may use).
pub fn engine_of(kind: EngineKind, workers: Option<usize>) -> Engine {
    with_workers(Engine::builder().kind(kind), workers).build().expect("engine")
}

/// A threaded engine of `kind` whose pushers probe for stints early and
/// often (`tests/stints.rs`): a small cap, and an inline pace so long that
/// every pusher is quick enough to probe. `workers` as for [`engine_of`].
pub fn stint_engine_of(kind: EngineKind, workers: Option<usize>) -> Engine {
    let builder = with_workers(Engine::builder().kind(kind), workers).max_pending(16);
    builder.inline_pace(Duration::from_secs(1)).run_on_pusher(true).build().expect("engine")
}

fn with_workers(builder: EngineBuilder, workers: Option<usize>) -> EngineBuilder {
    match workers {
        Some(n) => builder.cpu_workers(n),
        None => builder,
    }
}

/// Lets the calling thread (and the threads it starts afterwards, an
/// engine's workers included) run only on `cpus`. The engines count the
/// CPUs they may use from this mask when they are built.
pub fn confine_to(cpus: &[core_affinity::CoreId]) {
    // SAFETY: an all-zero `cpu_set_t` is a valid empty set, `CPU_SET`
    // writes a bit inside it (every CPU id the OS reports is below
    // `CPU_SETSIZE`), and `sched_setaffinity` only reads it.
    let set = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for c in cpus {
            libc::CPU_SET(c.id, &mut set);
        }
        set
    };
    // SAFETY: pid 0 is the calling thread; the size is the set's own.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    assert_eq!(rc, 0, "sched_setaffinity to {cpus:?}: {}", std::io::Error::last_os_error());
}

/// Runs `f` on a thread of its own confined to one CPU (the first this
/// process may use), as on a one-vCPU container: engines built inside `f`
/// get their default of one worker, which shares that CPU with every
/// pusher and helper thread. A panic in `f` is this caller's.
pub fn on_one_cpu<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    let first = *core_affinity::get_core_ids().unwrap_or_default().first().expect("a CPU to run on");
    std::thread::scope(|scope| {
        let confined = scope.spawn(move || {
            confine_to(&[first]);
            assert_eq!(std::thread::available_parallelism().map(|n| n.get()).ok(), Some(1), "confined to one CPU");
            f()
        });
        confined.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// A body's work: keeps its CPU for `d`.
pub fn busy_for(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// A log of events stamped with one global sequence number.
#[derive(Clone, Default)]
pub struct Log {
    seq: Arc<AtomicU64>,
    events: Arc<Mutex<Vec<(String, u64)>>>,
}

impl Log {
    pub fn mark(&self, what: impl Into<String>) {
        let s = self.seq.fetch_add(1, Ordering::SeqCst);
        self.events.lock().unwrap().push((what.into(), s));
    }

    pub fn at(&self, what: &str) -> u64 {
        self.events
            .lock()
            .unwrap()
            .iter()
            .find(|(w, _)| w == what)
            .unwrap_or_else(|| panic!("event {what} never happened"))
            .1
    }

    pub fn names(&self) -> Vec<String> {
        self.events.lock().unwrap().iter().map(|(w, _)| w.clone()).collect()
    }
}

/// Spins until `cond` holds; false after `limit` (so a broken rule fails
/// the test instead of hanging it).
pub fn eventually(limit: Duration, cond: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::yield_now();
    }
    true
}

/// splitmix64, as in WORKLOADS.md.
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A value mixing function for the differential tests.
pub fn mix(a: u64, b: u64) -> u64 {
    let mut s = SplitMix(a ^ b.rotate_left(17));
    s.next()
}

/// A body that blocks (politely, sleeping between looks) until `gate`
/// opens: to hold a worker, or a variable, while a test queues work behind.
pub fn until_open(gate: &Arc<AtomicBool>) -> impl FnOnce(&RunContext) + Send + 'static {
    let g = gate.clone();
    move |_| {
        while !g.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Pushes a blocker that writes `writes` and returns once a worker is inside
/// it, with the gate that lets it go. Work queued behind it afterwards stays
/// queued: the blocker is already running, so no thread that helps (a
/// waiter, a throttled pusher) can pick it up and block on the gate itself.
pub fn occupy_a_worker(engine: &Engine, writes: &[Var]) -> Arc<AtomicBool> {
    let gate = Arc::new(AtomicBool::new(false));
    let inside = Arc::new(AtomicBool::new(false));
    let (block, i) = (until_open(&gate), inside.clone());
    let body = move |ctx: &RunContext| {
        i.store(true, Ordering::Release);
        block(ctx)
    };
    engine.push_sync(body, &[], writes).unwrap();
    assert!(eventually(Duration::from_secs(10), || inside.load(Ordering::Acquire)), "no worker took the blocker");
    gate
}
