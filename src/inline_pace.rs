//! The pace of a thread's runs inside its pushes: how often, lately, the
//! thread ran the body of a push with no variables inside that push
//! (`Core::run_unqueued`).
//!
//! A thread that reached the pending cap runs such bodies inside its
//! pushes until the workers have drained half the cap
//! (`Core::unqueued_ticket`). Past that point it goes on doing so only
//! while its runs come faster than the engine's inline pace
//! ([`EngineBuilder::inline_pace`](crate::EngineBuilder::inline_pace)):
//! then the bodies are so short that handing one to a worker (about 60 ns
//! of the pusher's time on the two-core hosts, where a run inside the push
//! takes 11) costs the pusher more than running it, and a worker's help
//! does not pay for it (PERF.md, "2026-11-27, eighth session").
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

use std::cell::Cell;
use std::time::Instant;

/// Runs per window.
pub(crate) const WINDOW: u32 = 64;

#[derive(Clone, Copy)]
struct Pace {
    /// Runs counted in the current window.
    runs: u32,
    /// When the current window's first run came (`None`: no run yet).
    since: Option<Instant>,
    /// Nanoseconds per run over the last two windows that ended, the
    /// latest first (`u64::MAX`: none).
    last: [u64; 2],
    /// The median of those two and the window before them: the pace.
    per_run_ns: u64,
}

thread_local! {
    static PACE: Cell<Pace> = const { Cell::new(Pace { runs: 0, since: None, last: [u64::MAX; 2], per_run_ns: u64::MAX }) };
}

/// Counts one run inside a push on this thread; ends the window at every
/// [`WINDOW`]-th and takes the pace anew.
#[inline]
pub(crate) fn note_run() {
    PACE.with(|cell| {
        let mut pace = cell.get();
        let since = *pace.since.get_or_insert_with(Instant::now);
        pace.runs += 1;
        if pace.runs == WINDOW {
            let now = Instant::now();
            let span = now.saturating_duration_since(since).as_nanos();
            let this = u64::try_from(span / u128::from(WINDOW)).unwrap_or(u64::MAX);
            pace.per_run_ns = median(this, pace.last[0], pace.last[1]);
            pace.last = [this, pace.last[0]];
            // The next window starts where this one ended: one clock read
            // serves both.
            pace.since = Some(now);
            pace.runs = 0;
        }
        cell.set(pace);
    });
}

fn median(a: u64, b: u64, c: u64) -> u64 {
    a.max(b).min(a.max(c)).min(b.max(c))
}

/// Whether this thread's runs inside pushes come faster than one per
/// `limit_ns` (never, for a limit of 0 or before two windows have ended).
#[inline]
pub(crate) fn quicker_than(limit_ns: u64) -> bool {
    PACE.with(|cell| cell.get().per_run_ns < limit_ns)
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
