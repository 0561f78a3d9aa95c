//! `--timeline DIR`: when each body of a W>0 row ran, and on which thread.
//!
//! The engine's own profiler (`--profile`) stamps every operation at its
//! push, its grant, its start and its end, and keeps a lane per thread; at
//! W=1000 that costs the engine a third of its time on `fanout` (1,217
//! against 896 ns/op on the Zen 5 host), so its picture of where the time
//! goes is not the run's. This records only what the body itself sees:
//! two reads of the cycle counter around it and three relaxed stores into
//! a slot of its own, set aside before the clock starts. The gaps between
//! one thread's bodies are then what the engine costs that thread per
//! operation, and the long ones are the time the thread was away (another
//! thread, such as the pusher, had its CPU).
//!
//! Each of our engines' W>0 rows writes its last timed repetition to
//! `DIR/<engine>-<workload>-w<W>.tsv`: first one `# thread <k> <name>`
//! line per thread that ran one of its bodies, then one line per operation, `op
//! start_ns end_ns thread`, the times counted from the repetition's first
//! start. `perf/timeline.py` reads it: per thread, its bodies, its busy
//! share and the gaps between its bodies; with `--rounds 17`, `fanout`'s
//! rounds.
//!
//! Off (no `--timeline`), a body pays one relaxed load and a branch.

use std::cell::Cell;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

/// Whether bodies record themselves (during a timed repetition, [`arm`]).
static ARMED: AtomicBool = AtomicBool::new(false);

/// One operation's record: its body's first and last tick, and its thread
/// (its number + 1; 0: not recorded).
#[derive(Default)]
struct Slot {
    start: AtomicU64,
    end: AtomicU64,
    thread: AtomicU32,
}

/// A slot per operation of the largest row, allocated once ([`init`]).
static SLOTS: OnceLock<Box<[Slot]>> = OnceLock::new();

/// The names of the threads that ran a body, by number.
static THREADS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The clock and the tick counter read together when the last repetition
/// started and ended: how ticks turn into ns.
static CALIBRATION: Mutex<Option<[(Instant, u64); 2]>> = Mutex::new(None);

std::thread_local! {
    /// This thread's number + 1 (0: not numbered yet).
    static THREAD: Cell<u32> = const { Cell::new(0) };
}

/// The cycle counter where there is one (x86-64's `rdtsc`: a few ns), else
/// the monotonic clock's ns.
#[inline(always)]
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `rdtsc` reads the time-stamp counter; it has no
        // preconditions and touches no memory.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static BASE: OnceLock<Instant> = OnceLock::new();
        BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Sets aside a slot for each of `ops` operations: before any row, so
/// that no row's allocations or memory include them.
pub(crate) fn init(ops: usize) {
    SLOTS.get_or_init(|| (0..ops).map(|_| Slot::default()).collect());
}

/// Whether [`init`] ran (a `--timeline` run).
pub(crate) fn on() -> bool {
    SLOTS.get().is_some()
}

/// Runs `body` for operation `index`, recording it while armed.
#[inline(always)]
pub(crate) fn time(index: u64, body: impl FnOnce()) {
    if !ARMED.load(Ordering::Relaxed) {
        return body();
    }
    let start = ticks();
    body();
    let end = ticks();
    let Some(slot) = SLOTS.get().and_then(|s| s.get(index as usize)) else { return };
    slot.start.store(start, Ordering::Relaxed);
    slot.end.store(end, Ordering::Relaxed);
    slot.thread.store(thread_number() + 1, Ordering::Relaxed);
}

/// The calling thread's number, given at its first body (the only time
/// this takes the lock).
fn thread_number() -> u32 {
    THREAD.with(|t| {
        if t.get() == 0 {
            let mut names = THREADS.lock().unwrap_or_else(|e| e.into_inner());
            names.push(std::thread::current().name().unwrap_or("unnamed").to_owned());
            t.set(names.len() as u32);
        }
        t.get() - 1
    })
}

/// Starts recording a repetition of `ops` operations: clears their slots
/// (outside the timed window) and reads the clock.
pub(crate) fn arm(ops: usize) {
    let Some(slots) = SLOTS.get() else { return };
    for slot in &slots[..ops.min(slots.len())] {
        slot.thread.store(0, Ordering::Relaxed);
    }
    let now = (Instant::now(), ticks());
    *CALIBRATION.lock().unwrap_or_else(|e| e.into_inner()) = Some([now, now]);
    ARMED.store(true, Ordering::Relaxed);
}

/// Stops recording (after the repetition's `wait_all`, which ordered
/// every body's stores before it) and reads the clock again.
pub(crate) fn disarm() {
    if !ARMED.swap(false, Ordering::Relaxed) {
        return;
    }
    if let Some(c) = CALIBRATION.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        c[1] = (Instant::now(), ticks());
    }
}

/// The last repetition's records of `ops` operations as the file's text;
/// `None` if a body did not record itself (or there are fewer slots).
pub(crate) fn text(ops: usize) -> Option<String> {
    let slots = SLOTS.get()?.get(..ops)?;
    let [(t0, k0), (t1, k1)] = (*CALIBRATION.lock().unwrap_or_else(|e| e.into_inner()))?;
    let ns_per_tick = t1.duration_since(t0).as_nanos() as f64 / k1.saturating_sub(k0).max(1) as f64;
    let records: Vec<(u64, u64, u32)> = slots
        .iter()
        .map(|s| (s.start.load(Ordering::Relaxed), s.end.load(Ordering::Relaxed), s.thread.load(Ordering::Relaxed)))
        .collect();
    if records.iter().any(|r| r.2 == 0) {
        return None;
    }
    let first = records.iter().map(|r| r.0).min()?;
    let ns = |k: u64| ((k - first) as f64 * ns_per_tick).round() as u64;
    let mut out = String::new();
    let ran: std::collections::BTreeSet<u32> = records.iter().map(|r| r.2 - 1).collect();
    let names = THREADS.lock().unwrap_or_else(|e| e.into_inner());
    for k in ran {
        let _ = writeln!(out, "# thread {k} {}", names[k as usize]);
    }
    for (op, &(start, end, thread)) in records.iter().enumerate() {
        let _ = writeln!(out, "{op} {} {} {}", ns(start), ns(end), thread - 1);
    }
    Some(out)
}

/// Writes the last repetition of the row `name` (`ops` operations) to
/// `dir/name.tsv`, or says why not.
pub(crate) fn write(dir: &Path, name: &str, ops: usize) {
    let path = dir.join(format!("{name}.tsv"));
    match text(ops) {
        Some(text) => {
            if let Err(e) = std::fs::write(&path, text) {
                eprintln!("depengine-perf: --timeline: {}: {e}", path.display());
            }
        }
        None => eprintln!("depengine-perf: --timeline: {name}: some bodies did not record themselves"),
    }
}

/// Held by the tests that run bodies or pin threads: while the timeline's
/// test is armed, every body in the process records itself, so another
/// test's bodies (the machine probe's) would land in its slots; and the
/// hand-over probe's yields would hand its CPU to the probe's pinned
/// spinners.
#[cfg(test)]
pub(crate) fn bodies_exclusive() -> std::sync::MutexGuard<'static, ()> {
    static BODIES: Mutex<()> = Mutex::new(());
    BODIES.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every operation of an armed repetition records one body on the
    /// thread that ran it, in order within the thread, and the text has a
    /// line for each.
    #[test]
    fn an_armed_repetition_records_every_body() {
        let _alone = bodies_exclusive();
        init(1_000);
        arm(100);
        let spin = |i: u64| {
            std::hint::black_box((0..1_000 + i).sum::<u64>());
        };
        std::thread::scope(|s| {
            s.spawn(|| (0..50).for_each(|i| time(i, || spin(i))));
        });
        (50..100).for_each(|i| time(i, || spin(i)));
        disarm();
        time(100, || ()); // disarmed: not recorded
        let written = text(100).expect("every body recorded");
        let lines: Vec<Vec<u64>> = written
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split(' ').map(|f| f.parse().expect("a number")).collect())
            .collect();
        assert_eq!(lines.len(), 100);
        assert!(lines.iter().all(|l| l[1] <= l[2]), "a body ends after it starts");
        let threads: std::collections::HashSet<u64> = lines.iter().map(|l| l[3]).collect();
        assert_eq!(threads.len(), 2, "two threads ran bodies: {threads:?}");
        assert!(lines[..50].iter().all(|l| l[3] == lines[0][3]) && lines[50..].iter().all(|l| l[3] == lines[50][3]));
        assert!(lines[51..].windows(2).all(|w| w[0][2] <= w[1][1]), "one thread's bodies follow each other");
        assert_eq!(SLOTS.get().unwrap()[100].thread.load(Ordering::Relaxed), 0);
        assert!(text(101).is_none(), "an operation that never ran is missing, not zero");
    }
}
