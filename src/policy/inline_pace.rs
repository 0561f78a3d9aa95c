//! A thread's paces: how often, lately, the thread ran the body of a push
//! inside that push (`Core::run_unqueued`, and the runs of a stint), and
//! how often its pushes that queued their operations came.
//!
//! A thread that reached the pending cap runs such bodies inside its
//! pushes until the workers have drained half the cap
//! (`Core::unqueued_ticket`). Past that point it goes on doing so only
//! while its runs come faster than the engine's inline pace
//! ([`EngineBuilder::inline_pace`](crate::EngineBuilder::inline_pace)):
//! then the bodies are so short that handing one to a worker (several
//! times what a run inside the push costs the pusher) costs more than
//! running it, and a worker's help does not pay for it
//! (perf/journal/2026-11-27.md, "tiny bodies with no variables stay on
//! the pusher").
//!
//! # The windows
//!
//! Each thread counts its runs inside pushes in windows of [`WINDOW`] and
//! reads the clock once a window, where one window ends and the next
//! begins. A window's time per run is its span divided by [`WINDOW`]: the
//! bodies, the pushes, and whatever the program did between them. The
//! thread's pace is the median of its last three windows, so that one
//! window stretched by an interruption (an interrupt, a time slice given
//! to another thread: about 4 % of the windows at W=0 on the two-core
//! hosts) does not count, while a change of pace (longer bodies, a pause
//! in the pushes) counts once it has made two windows slow: until then,
//! at most the rest of the window in progress and the next one run at the
//! old pace. Until two windows have ended, a thread counts as slow.
//!
//! The pace is the thread's, not an engine's: a thread that pushes to two
//! engines mixes them in one measure, which only ever makes a window look
//! slower (and its runs go back to the queues).
//!
//! # Stints and epochs
//!
//! Operations with variables that a pusher runs inside its pushes during
//! a stint (`pusher_runs.rs`) are counted in the same windows, through
//! [`note_run_in`], with the epoch of the stint they belong to. The
//! thread's pushes that queue their operations while no stint is on are
//! counted in windows of their own ([`note_queued_push`]): their pace is
//! the next stint's limit.
//!
//! A thread that meets an epoch newer than the one its windows were
//! counted in starts its windows afresh: a stint is judged by its own runs only, not by a pace this
//! thread had before it (perhaps with other bodies, or another engine).

use crate::base::tuning::WINDOW;
use std::cell::Cell;
use std::time::Instant;

/// A thread's count of one kind of run, in windows.
struct Pace {
    /// Runs counted in the current window.
    runs: Cell<u32>,
    /// The median of the last three windows: the pace, in nanoseconds a
    /// run (`u64::MAX` until two windows have ended).
    per_run_ns: Cell<u64>,
    /// The newest epoch this thread met ([`note_run_in`]); 0: none.
    epoch: Cell<u64>,
    /// What only a window's first run and its end touch.
    windows: Cell<Windows>,
}

#[derive(Clone, Copy)]
struct Windows {
    /// When the current window's first run came (`None`: no run yet).
    since: Option<Instant>,
    /// Nanoseconds per run over the last two windows that ended, the
    /// latest first (`u64::MAX`: none).
    last: [u64; 2],
    /// Windows ended since the windows were last started afresh.
    ended: u32,
    /// Windows ended in a row, up to the last, at which the pace was no
    /// quicker than the limit [`note_run_in`] was given.
    slow_in_a_row: u32,
}

/// A thread's windows before its first run, and after a new epoch.
const FRESH: Windows = Windows { since: None, last: [u64::MAX; 2], ended: 0, slow_in_a_row: 0 };

impl Pace {
    const fn new() -> Self {
        Pace { runs: Cell::new(0), per_run_ns: Cell::new(u64::MAX), epoch: Cell::new(0), windows: Cell::new(FRESH) }
    }
}

thread_local! {
    /// The thread's runs inside its pushes.
    static PACE: Pace = const { Pace::new() };
    /// The thread's pushes that queued their operations, while no stint
    /// of runs inside pushes was on (`pusher_runs.rs`).
    static QUEUED_PACE: Pace = const { Pace::new() };
}

/// The pace when a window ended ([`note_run_in`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct WindowEnd {
    /// The thread's pace now (`u64::MAX` until two windows have ended).
    pub(crate) pace_ns: u64,
    /// Windows ended since the thread's windows started afresh.
    pub(crate) windows: u32,
    /// Window ends in a row, this one included, at which the pace was no
    /// quicker than the limit (0: it is quicker now).
    pub(crate) slow_in_a_row: u32,
}

/// Counts one run inside a push on this thread; ends the window at every
/// [`WINDOW`]-th and takes the pace anew.
#[inline]
pub(crate) fn note_run() {
    count(&PACE, 0, u64::MAX);
}

/// [`note_run`] for a run of a stint of epoch `epoch` (never 0): starts the
/// thread's windows afresh first if that epoch is newer than any it met.
/// Returns the pace if this run ended a window, with how many window ends
/// in a row found it no quicker than `limit_ns`.
#[inline]
pub(crate) fn note_run_in(epoch: u64, limit_ns: u64) -> Option<WindowEnd> {
    count(&PACE, epoch, limit_ns)
}

/// Counts one push of this thread that queued its operation while no
/// stint was on, in windows of its own; returns the pace of such pushes
/// if this one ended a window.
#[inline]
pub(crate) fn note_queued_push() -> Option<WindowEnd> {
    count(&QUEUED_PACE, 0, u64::MAX)
}

/// This thread's pace of pushes that queued their operations
/// ([`note_queued_push`]), in nanoseconds a push (`u64::MAX`: fewer than
/// two windows so far).
pub(crate) fn queued_pace_ns() -> u64 {
    QUEUED_PACE.with(|p| p.per_run_ns.get())
}

#[inline]
fn count(key: &'static std::thread::LocalKey<Pace>, epoch: u64, limit_ns: u64) -> Option<WindowEnd> {
    key.with(|p| {
        if epoch > p.epoch.get() {
            p.epoch.set(epoch);
            p.runs.set(0);
            p.per_run_ns.set(u64::MAX);
            p.windows.set(FRESH);
        }
        let runs = p.runs.get();
        if runs == 0 {
            let mut w = p.windows.get();
            if w.since.is_none() {
                w.since = Some(Instant::now());
                p.windows.set(w);
            }
        }
        if runs + 1 < WINDOW {
            p.runs.set(runs + 1);
            return None;
        }
        Some(end_window(p, limit_ns))
    })
}

/// Ends the window in progress: takes the pace anew.
#[cold]
fn end_window(p: &Pace, limit_ns: u64) -> WindowEnd {
    let mut w = p.windows.get();
    let now = Instant::now();
    let since = w.since.unwrap_or(now);
    let span = now.saturating_duration_since(since).as_nanos();
    let this = u64::try_from(span / u128::from(WINDOW)).unwrap_or(u64::MAX);
    let pace = median(this, w.last[0], w.last[1]);
    p.per_run_ns.set(pace);
    w.last = [this, w.last[0]];
    // The next window starts where this one ended: one clock read serves
    // both.
    w.since = Some(now);
    w.ended = w.ended.saturating_add(1);
    let slow = pace != u64::MAX && pace >= limit_ns;
    w.slow_in_a_row = if slow { w.slow_in_a_row.saturating_add(1) } else { 0 };
    p.windows.set(w);
    p.runs.set(0);
    WindowEnd { pace_ns: pace, windows: w.ended, slow_in_a_row: w.slow_in_a_row }
}

fn median(a: u64, b: u64, c: u64) -> u64 {
    a.max(b).min(a.max(c)).min(b.max(c))
}

/// Whether this thread's runs inside pushes come faster than one per
/// `limit_ns` (never, for a limit of 0 or before two windows have ended).
#[inline]
pub(crate) fn quicker_than(limit_ns: u64) -> bool {
    PACE.with(|p| p.per_run_ns.get() < limit_ns)
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Each test runs on a thread of its own, so it starts with no window.
    fn runs(n: u32, each: Duration) {
        for _ in 0..n {
            if !each.is_zero() {
                std::thread::sleep(each);
            }
            note_run();
        }
    }

    #[test]
    fn the_median_of_three() {
        for (a, b, c) in [(1, 2, 3), (1, 3, 2), (2, 1, 3), (2, 3, 1), (3, 1, 2), (3, 2, 1)] {
            assert_eq!(median(a, b, c), 2, "{a} {b} {c}");
        }
        assert_eq!(median(5, 5, u64::MAX), 5);
        assert_eq!(median(5, u64::MAX, u64::MAX), u64::MAX);
    }

    #[test]
    fn slow_until_two_windows_have_ended() {
        runs(2 * WINDOW - 1, Duration::ZERO);
        assert!(!quicker_than(u64::MAX), "judged before its second window ended");
        runs(1, Duration::ZERO);
        assert!(quicker_than(1_000_000_000), "128 runs in a row took a second each");
        assert!(!quicker_than(0), "a limit of 0 turns it off");
    }

    /// A run slower than a window of quick runs could be unless the test
    /// thread stood still for a sixteenth of a second.
    const SLOW: Duration = Duration::from_millis(1);
    const SLOW_NS: u64 = 1_000_000;

    #[test]
    fn two_slow_windows_end_a_quick_pace_and_two_quick_ones_restore_it() {
        runs(3 * WINDOW, Duration::ZERO);
        assert!(quicker_than(SLOW_NS));
        runs(WINDOW, SLOW);
        assert!(quicker_than(SLOW_NS), "one slow window counted");
        runs(WINDOW - 1, SLOW);
        assert!(quicker_than(SLOW_NS), "judged before the second slow window ended");
        runs(1, SLOW);
        assert!(!quicker_than(SLOW_NS), "two windows of slow runs read as quick");
        runs(WINDOW, Duration::ZERO);
        assert!(!quicker_than(SLOW_NS), "one quick window counted");
        runs(WINDOW, Duration::ZERO);
        assert!(quicker_than(SLOW_NS));
    }

    #[test]
    fn a_new_epoch_starts_the_windows_afresh() {
        let limit = SLOW_NS / 64;
        runs(3 * WINDOW, SLOW / 64);
        assert!(!quicker_than(limit), "runs a sixty-fourth of SLOW apart read as quicker");
        // A new epoch: the slow windows before it no longer count.
        for i in 1..2 * WINDOW {
            let end = note_run_in(7, limit);
            assert_eq!(end.is_some(), i == WINDOW, "run {i}");
            if let Some(end) = end {
                let seen = (end.pace_ns, end.windows, end.slow_in_a_row);
                assert_eq!(seen, (u64::MAX, 1, 0), "judged after one window");
            }
        }
        let end = note_run_in(7, limit).expect("the second window ended");
        assert_eq!((end.windows, end.slow_in_a_row), (2, 0));
        assert!(end.pace_ns < limit, "{} ns a run with no sleeps", end.pace_ns);
        // An older epoch counts in the same windows; it restarts nothing.
        // Below a limit of 0 every window end is slow.
        for _ in 1..WINDOW {
            assert!(note_run_in(6, 0).is_none());
        }
        let end = note_run_in(3, 0).expect("a third window");
        assert_eq!((end.windows, end.slow_in_a_row), (3, 1));
        for _ in 1..WINDOW {
            note_run_in(7, 0);
        }
        assert_eq!(note_run_in(7, 0).map(|e| e.slow_in_a_row), Some(2));
        for _ in 1..WINDOW {
            note_run_in(7, limit);
        }
        assert_eq!(note_run_in(7, limit).map(|e| e.slow_in_a_row), Some(0), "a quick window end kept the count");
        assert!(quicker_than(limit));
    }

    #[test]
    fn a_pause_counts_once_it_has_slowed_two_windows() {
        runs(3 * WINDOW, Duration::ZERO);
        let pause = || std::thread::sleep(SLOW * WINDOW);
        runs(WINDOW / 2, Duration::ZERO);
        pause();
        runs(WINDOW / 2, Duration::ZERO);
        assert!(quicker_than(SLOW_NS), "one interrupted window counted");
        runs(WINDOW / 2, Duration::ZERO);
        pause();
        runs(WINDOW / 2, Duration::ZERO);
        assert!(!quicker_than(SLOW_NS), "two windows with a pause read as quick");
    }
}
