//! Hang diagnosis: which operations a stuck wait is behind, what each of
//! them waits for, and which are running where.
//!
//! Off by default ([`EngineBuilder::hang_report`](crate::EngineBuilder::hang_report)).
//! When on:
//!
//! - every operation block carries a [`DiagSlot`]: a copy of its ticket,
//!   name, variables and state (queued → ready → running → body returned)
//!   in plain atomics, written by whoever owns the block at each step. The
//!   ticket is written last when the block is dispatched and cleared first
//!   when it is given back, so a reader that sees the same ticket before
//!   and after reading the rest has a consistent copy;
//! - every wait (`wait_var`, `wait_to_write`, `wait_all`) registers in a
//!   small table while it blocks;
//! - a watchdog thread looks at that table a few times per threshold and,
//!   for each wait older than the threshold, scans the blocks once and
//!   reports ([`HangReport`]) to the builder's callback — by default
//!   standard error. Each wait is reported once.
//!
//! [`Engine::pending_report`](crate::Engine::pending_report) builds the same
//! report on demand. Nothing here is on the push → run → complete path when
//! diagnosis is off: each hook is one branch on an engine constant.

use crate::graph::opr::{Dep, Meta, INLINE_VARS};
use crate::graph::stamps::DiagSlot;
use crate::graph::var::Var;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;
use std::time::Duration;

/// Operation states as the report names them.
const QUEUED: u8 = 0;
const READY: u8 = 1;
const RUNNING: u8 = 2;
const BODY_RETURNED: u8 = 3;

/// Waits the watchdog can follow at once (more are not reported).
const WATCHED_WAITS: usize = 64;

/// A wait on all operations rather than one variable (`WatchedWait::what`).
const WAIT_ALL: u64 = u64::MAX;

/// `WatchedWait::since` while a wait is filling the entry in.
const CLAIMING: u64 = u64::MAX;

/// One registered wait.
#[derive(Default)]
struct WatchedWait {
    /// When the wait began (ns since the engine started); 0: free.
    since: AtomicU64,
    /// The variable (`slot | gen << 32`) or [`WAIT_ALL`].
    what: AtomicU64,
    /// Whether it is a `wait_to_write`.
    write: AtomicBool,
    reported: AtomicBool,
}

/// A callback that receives hang reports.
pub(crate) type HangHandler = Arc<dyn Fn(&HangReport) + Send + Sync>;

/// An engine's diagnosis state (present only when hang reporting is on).
pub(crate) struct Diagnosis {
    pub(crate) after: Duration,
    waits: Box<[WatchedWait]>,
    pub(crate) handler: HangHandler,
    pub(crate) stop: AtomicBool,
}

/// An operation in flight, as a report shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PendingOp {
    /// Its position in the engine's linearization of pushes.
    pub ticket: u64,
    /// The name it was pushed with (`wait_var` etc. for waits' markers).
    pub name: &'static str,
    /// Where it is in its life.
    pub state: PendingState,
    /// For how long it has been in that state.
    pub for_time: Duration,
    /// The variables it reads (`false`) or writes (`true`).
    pub vars: Vec<(Var, bool)>,
    /// The earlier operations in flight it waits for (queued operations
    /// only): on each of its variables, the nearest earlier conflicting one.
    pub waits_for: Vec<u64>,
}

/// Where a pending operation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PendingState {
    /// Waiting for earlier operations on its variables.
    Queued,
    /// Every variable granted it; waiting for a thread.
    Ready,
    /// Its body is running on this lane (see [`HangReport::lanes`]).
    Running(usize),
    /// Its asynchronous body returned on this lane; the operation waits
    /// for its `Completion` to be signalled.
    AwaitingCompletion(usize),
}

/// What a stuck wait is behind ([`Engine::pending_report`](crate::Engine::pending_report)).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HangReport {
    /// What waits: `wait_var(var)`, `wait_to_write(var)`, `wait_all()`, or
    /// `report` for a report asked for directly.
    pub wait: String,
    /// For how long it has waited.
    pub waited: Duration,
    /// The variable the wait is on, if any.
    pub var: Option<Var>,
    /// The operations in flight on that variable (every one for
    /// `wait_all`), oldest first.
    pub pending: Vec<PendingOp>,
    /// Every operation whose body is running, or whose asynchronous body
    /// returned without its completion signalled.
    pub running: Vec<PendingOp>,
    /// Operations in flight in all.
    pub in_flight: usize,
    /// Lane names, as in profiles: worker threads, then other threads.
    pub lanes: Vec<String>,
}

impl Diagnosis {
    pub(crate) fn new(after: Duration, handler: HangHandler) -> Self {
        Diagnosis {
            after,
            waits: (0..WATCHED_WAITS).map(|_| WatchedWait::default()).collect(),
            handler,
            stop: AtomicBool::new(false),
        }
    }

    /// How often the watchdog looks: four times per threshold, at most
    /// every 10 ms, at least every second.
    pub(crate) fn period(&self) -> Duration {
        (self.after / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }
}

/// The default handler: the report on standard error.
pub(crate) fn print_report(report: &HangReport) {
    eprintln!("{report}");
}

/// `var 3` (or `var 3 (gen 2)` for a reused slot).
struct VarName(Var);

impl fmt::Display for VarName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.gen {
            0 => write!(f, "var {}", self.0.slot),
            gen => write!(f, "var {} (gen {gen})", self.0.slot),
        }
    }
}

impl HangReport {
    fn lane(&self, lane: usize) -> &str {
        self.lanes.get(lane).map_or("?", String::as_str)
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>, op: &PendingOp, by_ticket: &[&PendingOp]) -> fmt::Result {
        let vars: Vec<String> =
            op.vars.iter().map(|&(v, w)| format!("{} {}", if w { "writes" } else { "reads" }, VarName(v))).collect();
        write!(f, "    #{} {:?} ({}): ", op.ticket, op.name, vars.join(", "))?;
        let t = op.for_time;
        match op.state {
            PendingState::Queued => {
                let names: Vec<String> = op
                    .waits_for
                    .iter()
                    .map(|t| match by_ticket.iter().find(|o| o.ticket == *t) {
                        Some(o) => format!("#{t} {:?}", o.name),
                        None => format!("#{t}"),
                    })
                    .collect();
                writeln!(f, "queued for {t:.1?}, waiting for {}", names.join(", "))
            }
            PendingState::Ready => writeln!(f, "ready for {t:.1?}, waiting for a thread"),
            PendingState::Running(l) => writeln!(f, "running on {} for {t:.1?}", self.lane(l)),
            PendingState::AwaitingCompletion(l) => {
                writeln!(f, "body returned on {} {t:.1?} ago; waiting for its Completion to be signalled", self.lane(l))
            }
        }
    }
}

/// Pending operations a printed report lists before it abbreviates.
const PRINTED: usize = 20;

impl fmt::Display for HangReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "depengine: {} has waited {:.1?}; {} operations in flight",
            self.wait, self.waited, self.in_flight
        )?;
        let all: Vec<&PendingOp> = self.pending.iter().chain(&self.running).collect();
        match self.var {
            Some(v) => writeln!(f, "  in flight on {} (oldest first):", VarName(v))?,
            None => writeln!(f, "  in flight (oldest first):")?,
        }
        for op in self.pending.iter().take(PRINTED) {
            self.describe(f, op, &all)?;
        }
        if self.pending.len() > PRINTED {
            writeln!(f, "    … and {} more", self.pending.len() - PRINTED)?;
        }
        writeln!(f, "  running now:")?;
        if self.running.is_empty() {
            writeln!(f, "    nothing")?;
        }
        for op in self.running.iter().take(PRINTED) {
            self.describe(f, op, &all)?;
        }
        Ok(())
    }
}

impl DiagSlot {
    /// At dispatch (the combiner owns the block): publishes its copy.
    #[cold]
    #[inline(never)]
    pub(crate) fn dispatched(&self, meta: &Meta, deps: &[Dep], now: u64) {
        self.name.store(meta.opts.name.as_ptr() as u64, Relaxed);
        self.name_len.store(meta.opts.name.len() as u64, Relaxed);
        for (slot, dep) in self.deps.iter().zip(deps) {
            slot.store(dep.slot_mode() as u64 | (dep.gen as u64) << 32, Relaxed);
        }
        self.ndeps.store(deps.len() as u64, Relaxed);
        self.state.store(QUEUED, Relaxed);
        self.since.store(now, Relaxed);
        self.ticket.store(meta.ticket + 1, Release);
    }

    /// The operation moved to `state` (on `lane` for running states).
    fn set_state(&self, state: u8, lane: usize, now: u64) {
        self.lane.store(lane as u64, Relaxed);
        self.since.store(now, Relaxed);
        self.state.store(state, Release);
    }

    #[cold]
    #[inline(never)]
    pub(crate) fn ready(&self, now: u64) {
        self.set_state(READY, 0, now);
    }

    #[cold]
    #[inline(never)]
    pub(crate) fn running(&self, lane: usize, now: u64) {
        self.set_state(RUNNING, lane, now);
    }

    #[cold]
    #[inline(never)]
    pub(crate) fn body_returned(&self, now: u64) {
        let lane = self.lane.load(Relaxed) as usize;
        self.set_state(BODY_RETURNED, lane, now);
    }

    /// The block is being given back.
    #[cold]
    #[inline(never)]
    pub(crate) fn finished(&self) {
        self.ticket.store(0, Release);
    }

    /// A consistent copy of this slot, if its operation is in flight
    /// (`engine`: the engine's id, for the variables' handles).
    fn read(&self, engine: u32, now: u64) -> Option<PendingOp> {
        let d = self;
        let ticket = d.ticket.load(Acquire).checked_sub(1)?;
        let state = d.state.load(Acquire);
        let lane = d.lane.load(Relaxed) as usize;
        let since = d.since.load(Relaxed);
        let (name, len) = (d.name.load(Relaxed), d.name_len.load(Relaxed));
        let ndeps = (d.ndeps.load(Relaxed) as usize).min(INLINE_VARS);
        let vars = d.deps[..ndeps]
            .iter()
            .map(|w| {
                let w = w.load(Relaxed);
                let dep = Dep::from_slot_mode(w as u32, (w >> 32) as u32);
                (Var { engine, slot: dep.slot(), gen: dep.gen }, dep.writes())
            })
            .collect();
        std::sync::atomic::fence(Acquire);
        if d.ticket.load(Relaxed) != ticket + 1 {
            return None; // given back (and maybe reused) meanwhile
        }
        // SAFETY: `name` and `len` were copied from a `&'static str` at
        // dispatch, and the unchanged ticket shows both belong to it.
        let name =
            unsafe { std::str::from_utf8_unchecked(std::slice::from_raw_parts(name as *const u8, len as usize)) };
        let state = match state {
            QUEUED => PendingState::Queued,
            READY => PendingState::Ready,
            RUNNING => PendingState::Running(lane),
            _ => PendingState::AwaitingCompletion(lane),
        };
        Some(PendingOp {
            ticket,
            name,
            state,
            for_time: Duration::from_nanos(now.saturating_sub(since)),
            vars,
            waits_for: Vec::new(),
        })
    }
}

impl Diagnosis {
    /// Registers a wait that is about to block (on `var`, or on everything);
    /// returns its entry for [`wait_end`](Self::wait_end).
    pub(crate) fn wait_begin(&self, var: Option<Var>, write: bool, now: u64) -> Option<usize> {
        let diag = self;
        let now = now.max(1);
        let what = var.map_or(WAIT_ALL, |v| v.slot as u64 | (v.gen as u64) << 32);
        diag.waits.iter().position(|w| {
            w.since.load(Relaxed) == 0 && {
                w.what.store(what, Relaxed);
                w.write.store(write, Relaxed);
                w.reported.store(false, Relaxed);
                w.since.compare_exchange(0, now, AcqRel, Relaxed).is_ok()
            }
        })
    }

    /// The wait registered as `entry` returned.
    pub(crate) fn wait_end(&self, entry: Option<usize>) {
        if let Some(i) = entry {
            self.waits[i].since.store(0, Release);
        }
    }

    /// One watchdog pass: reports every wait older than the threshold that
    /// was not reported yet.
    /// `report` builds the report of what a wait on a variable (or on
    /// everything) is behind.
    pub(crate) fn watchdog_pass(&self, engine: u32, now: u64, report: impl Fn(Option<Var>) -> HangReport) {
        let diag = self;
        let threshold = diag.after.as_nanos() as u64;
        for w in diag.waits.iter() {
            let since = w.since.load(Acquire);
            if since == 0 || since == CLAIMING || now.saturating_sub(since) < threshold || w.reported.swap(true, AcqRel)
            {
                continue;
            }
            let what = w.what.load(Relaxed);
            let var = (what != WAIT_ALL).then_some(Var { engine, slot: what as u32, gen: (what >> 32) as u32 });
            let wait = match (var, w.write.load(Relaxed)) {
                (None, _) => "wait_all()".to_owned(),
                (Some(v), false) => format!("wait_var({})", VarName(v)),
                (Some(v), true) => format!("wait_to_write({})", VarName(v)),
            };
            let mut report = report(var);
            report.wait = wait;
            report.waited = Duration::from_nanos(now.saturating_sub(since));
            // The wait may have returned meanwhile: report only if not.
            if w.since.load(Acquire) == since {
                // The user's handler: a panic there ends this report, not
                // the watchdog (`unwind.rs`).
                crate::base::unwind::quietly(|| (diag.handler)(&report));
            }
        }
    }

    /// Scans `slots` (every operation block's): everything in flight (on
    /// `var`, if given); `lanes` names the threads.
    pub(crate) fn pending_report<'a>(
        slots: impl Iterator<Item = &'a DiagSlot>,
        engine: u32,
        now: u64,
        var: Option<Var>,
        lanes: Vec<String>,
    ) -> HangReport {
        let mut all: Vec<PendingOp> = slots.filter_map(|d| d.read(engine, now)).collect();
        all.sort_by_key(|op| op.ticket);
        // What each queued operation waits for: on each of its variables,
        // the nearest earlier operation in flight that conflicts.
        for j in 0..all.len() {
            if all[j].state != PendingState::Queued {
                continue;
            }
            let mut waits_for = Vec::new();
            for &(v, writes) in &all[j].vars {
                let blocker =
                    all[..j].iter().rev().find(|earlier| earlier.vars.iter().any(|&(u, w)| u == v && (w || writes)));
                if let Some(b) = blocker {
                    if !waits_for.contains(&b.ticket) {
                        waits_for.push(b.ticket);
                    }
                }
            }
            all[j].waits_for = waits_for;
        }
        let running = all
            .iter()
            .filter(|op| matches!(op.state, PendingState::Running(_) | PendingState::AwaitingCompletion(_)))
            .cloned()
            .collect();
        let in_flight = all.len();
        let pending = match var {
            Some(v) => all.into_iter().filter(|op| op.vars.iter().any(|&(u, _)| u == v)).collect(),
            None => all,
        };
        HangReport { wait: "report".into(), waited: Duration::ZERO, var, pending, running, in_flight, lanes }
    }
}
