//! What both fuzz targets share: the engines under test (built once per
//! process, reused by every input), a thread that completes asynchronous
//! operations from outside the engine, and a panic hook that lets the
//! panics a target provokes on purpose through.

use depengine::{Engine, EngineKind};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};

/// The prefix of every panic message a target raises on purpose (a failing
/// operation body). Any other panic is a finding.
pub const INTENDED_PANIC: &str = "fuzz: intended panic";

/// A value whose `Drop` panics (an intended panic, let through like the
/// messages above), with another `PanicsWhenDropped` as the payload while
/// its count is above zero: the engine drops such values (payloads,
/// captures of skipped operations) and must survive each.
pub struct PanicsWhenDropped(pub u8);

impl Drop for PanicsWhenDropped {
    fn drop(&mut self) {
        if self.0 > 0 {
            std::panic::panic_any(PanicsWhenDropped(self.0 - 1));
        }
        panic!("{INTENDED_PANIC}: dropped");
    }
}

/// The engines every input runs on, by name, `naive` (the reference) first,
/// each with two CPU workers where it has workers. Built once and reused, so
/// pools and worker state carry over from input to input as in a
/// long-lived program.
pub fn engines() -> &'static [(&'static str, Arc<Engine>)] {
    static ENGINES: OnceLock<Vec<(&'static str, Arc<Engine>)>> = OnceLock::new();
    ENGINES.get_or_init(|| {
        quiet_intended_panics();
        let observed = EngineKind::ALL.iter().map(|&kind| {
            let mut b = Engine::builder().kind(kind).cpu_workers(2);
            if kind == EngineKind::Pooled {
                // Hang diagnosis on (its threshold never reached), so
                // that its hooks meet every interleaving too.
                b = b.hang_report(std::time::Duration::from_secs(3600));
            }
            // And the profiler recording, in small rings.
            let engine = b.profile_events(1024).build().expect("engine");
            engine.start_profiling();
            (kind.name(), Arc::new(engine))
        });
        // With observers off and a pending cap of 4, which most programs
        // reach: a pusher held at the cap, and synchronous pushes with no
        // variables run inside their pushes (which the observers turn off),
        // meet every interleaving too.
        let capped = Engine::builder().kind(EngineKind::PerDevice).cpu_workers(2).max_pending(4).build();
        // And one whose pushers probe early and often for stints (a cap
        // of 16, a pace of a second): there the fuzzing thread runs the
        // operations its pushes make ready itself, and stints start and
        // end from program to program.
        let stints = Engine::builder().kind(EngineKind::Pooled).cpu_workers(2).max_pending(16);
        let stints = stints.inline_pace(std::time::Duration::from_secs(1)).run_on_pusher(true).build();
        let extra = [("per_device, cap 4", capped), ("pooled, stints", stints)];
        observed.chain(extra.map(|(name, engine)| (name, Arc::new(engine.expect("engine"))))).collect()
    })
}

/// Keeps libFuzzer's abort-on-panic hook for every panic except the
/// intended ones, which bodies raise and the engine catches.
fn quiet_intended_panics() {
    let fuzzer_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if !message.starts_with(INTENDED_PANIC) && !info.payload().is::<PanicsWhenDropped>() {
            fuzzer_hook(info);
        }
    }));
}

/// A job for the foreign thread.
pub type Job = Box<dyn FnOnce() + Send>;

/// Runs `job` on a thread that belongs to no engine (started on first use),
/// in submission order: where asynchronous operations complete "from
/// outside".
pub fn on_foreign_thread(job: Job) {
    static FOREIGN: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    FOREIGN
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("fuzz-foreign".into())
                .spawn(move || rx.into_iter().for_each(|job| job()))
                .expect("foreign thread");
            Mutex::new(tx)
        })
        .lock()
        .unwrap()
        .send(job)
        .expect("the foreign thread is alive");
}

/// Mixes two values (splitmix64's finaliser): what bodies compute.
pub fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.rotate_left(17) ^ 0x9E37_79B9_7F4A_7C15;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
