//! Two harness processes taking turns, repetition by repetition
//! (`--take-turns first:DIR` and `--take-turns second:DIR`), so that two
//! builds are timed side by side at a finer grain than whole runs
//! (`TURNS=1 perf/ab.sh`).
//!
//! On this project's shared hosts the machine's speed switches between
//! states within a second or two (perf/journal/tried.md, "The machine's state"): two
//! builds run one after the other, a few seconds each, often meet different
//! states, and their ratio then says more about the host than about the
//! builds. Taking turns, the first process runs its set-up, warm-up and
//! first timed repetition of a row, hands over to the second, which does
//! the same, and from then on each runs one timed repetition per turn: the
//! k-th repetitions of the two builds are tens of milliseconds apart, and
//! `--reps-out` writes every repetition so that they can be paired.
//!
//! The hand-over is a one-byte token on two named pipes in `DIR`, `to_first`
//! and `to_second` (the caller makes them with `mkfifo`). The process
//! waiting for its turn blocks in `read`, and its engine's workers, with
//! nothing to run, have parked (a side waits [`SETTLE`] before it hands
//! over), so the running side has the machine to itself. Both processes
//! must be given the same rows and repetitions (the same turns). When one
//! side exits, the other stops waiting: a closed pipe ends the
//! turn-taking.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Mutex;

/// How long a side lets its engine settle before it hands over: longer
/// than a worker's default spin (50 µs) and a spinner's nap (1 ms), so that
/// the other side's repetition does not start beside spinning workers.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(2);

/// One side's ends of the two pipes (`None` once the other side has gone).
pub(crate) struct Turns {
    give: Option<File>,
    take: Option<File>,
}

impl Turns {
    /// Joins the turn-taking in `dir` as the `first` side or the second;
    /// the second returns once the first hands it its first turn.
    pub(crate) fn join(dir: &Path, first: bool) -> io::Result<Self> {
        // Opening a pipe blocks until its other end is opened too: both
        // sides open `to_second` first (the first side to write, the second
        // to read), then `to_first`, so the opens pair up.
        let write = |name: &str| OpenOptions::new().write(true).open(dir.join(name));
        let read = |name: &str| File::open(dir.join(name));
        if first {
            let give = write("to_second")?;
            return Ok(Turns { give: Some(give), take: Some(read("to_first")?) });
        }
        let take = read("to_second")?;
        let mut turns = Turns { give: Some(write("to_first")?), take: Some(take) };
        turns.wait();
        Ok(turns)
    }

    /// Ends this side's turn: returns when the other side hands the turn
    /// back (at once once that side has gone). Waits [`SETTLE`] first, so
    /// that this side's idle workers have parked when the other side's
    /// turn starts.
    pub(crate) fn hand_over(&mut self) {
        if let Some(give) = self.give.as_mut() {
            std::thread::sleep(SETTLE);
            if give.write_all(&[1]).is_err() {
                // The other side has gone (the pipe has no reader).
                self.give = None;
            }
        }
        self.wait();
    }

    /// Blocks until the other side hands over its turn, or has gone.
    fn wait(&mut self) {
        if let Some(take) = self.take.as_mut() {
            let mut token = [0u8];
            if !matches!(take.read(&mut token), Ok(1)) {
                self.take = None;
            }
        }
    }
}

/// This process's side, once `--take-turns` joined it ([`join`]).
static THIS_PROCESS: Mutex<Option<Turns>> = Mutex::new(None);

/// Makes this process a side of the turn-taking in `dir` ([`Turns::join`]).
pub(crate) fn join(dir: &Path, first: bool) -> io::Result<()> {
    let turns = Turns::join(dir, first)?;
    *THIS_PROCESS.lock().unwrap_or_else(|e| e.into_inner()) = Some(turns);
    Ok(())
}

/// Ends this process's turn if it takes turns ([`Turns::hand_over`]).
pub(crate) fn hand_over() {
    if let Some(turns) = THIS_PROCESS.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        turns.hand_over();
    }
}

#[cfg(test)]
mod tests {
    use super::Turns;
    use std::process::Command;
    use std::sync::{Arc, Mutex};

    /// Two sides in two threads: their turns strictly alternate, the first
    /// side first, and once the first has gone the second no longer waits.
    #[test]
    fn two_sides_alternate_and_the_last_one_goes_on_alone() {
        let dir = std::env::temp_dir().join(format!("depengine-turns-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for pipe in ["to_first", "to_second"] {
            let _ = std::fs::remove_file(dir.join(pipe));
            assert!(Command::new("mkfifo").arg(dir.join(pipe)).status().unwrap().success());
        }
        let log = Arc::new(Mutex::new(Vec::new()));
        let side = |first: bool| {
            let (dir, log) = (dir.clone(), log.clone());
            std::thread::spawn(move || {
                let mut turns = Turns::join(&dir, first).unwrap();
                for turn in 0..3 {
                    log.lock().unwrap().push((first, turn));
                    turns.hand_over();
                }
                if !first {
                    // The first side is gone by now: no wait.
                    turns.hand_over();
                    log.lock().unwrap().push((false, 3));
                }
            })
        };
        let (second, first) = (side(false), side(true));
        first.join().unwrap();
        second.join().unwrap();
        let want = [(true, 0), (false, 0), (true, 1), (false, 1), (true, 2), (false, 2), (false, 3)];
        assert_eq!(*log.lock().unwrap(), want);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
