#![doc = include_str!("../../docs/worker-sleep.md")]

use super::ready_ring::ReadyRing;
use crate::base::tuning::{CPUS_FOR_PUSHERS, LEAVES_BEFORE_NAP, NAP_LIMIT, SPIN_POLLS, WAITER_GRACE};
use crate::observe::stats::ExecutorCounters;
use crate::sync::barrier;
use crate::sync::{
    fence, futex_wait, futex_wait_for, futex_wake_all, futex_wake_one, spin_hint, AtomicBool, AtomicU32, Ordering,
};
use crossbeam_utils::CachePadded;
use std::cell::Cell;
use std::time::{Duration, Instant};

/// How a spin ended ([`Sleep::spin_with_grace`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spun {
    /// Work to take appeared.
    Found,
    /// The spin ran out with nothing found.
    Idle,
    /// Work was left to the threads that pushed it, which took it within
    /// the grace, [`LEAVES_BEFORE_NAP`] times in a row (a waiter's round
    /// trips), or the spin ran out with all the work that appeared left
    /// so: see [`Sleep::nap`].
    LeftToWaiters,
}

/// The spinning state's loop: polls `found` for up to `spin`, yielding the
/// core between rounds (with as many workers as cores, the pushing thread
/// may be waiting for this one). Returns whether work appeared; gives up
/// early, with `false`, once `ended()` (asked when it reads the clock, not
/// at every poll).
pub(crate) fn spin_for(spin: Duration, found: impl Fn() -> bool, ended: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    loop {
        for _ in 0..SPIN_POLLS {
            if found() {
                return true;
            }
            spin_hint();
        }
        if start.elapsed() >= spin || ended() {
            return false;
        }
        std::thread::yield_now();
    }
}

crate::sync::thread_local! {
    /// Set when this thread waits on an engine; cleared by the first
    /// publish after that which relies on it ([`take_waited`]).
    static WAITED: Cell<bool> = const { Cell::new(false) };
}

/// The calling thread waits on an engine (`wait_var`, `wait_to_write`,
/// `wait_all`): it is likely to wait again right after its next publish
/// (a push-then-wait round trip) and then run the operation itself. So
/// that publish is marked for spinners to leave alone ([`push_and_wake`],
/// `WAITER_GRACE`), and may rely on a spinning pinned worker without
/// checking that the spinner runs (`notify_one`).
pub(crate) fn note_waited() {
    WAITED.with(|w| w.set(true));
}

/// Whether the calling thread has waited on an engine since a publish
/// last relied on that (see [`note_waited`]).
fn waited() -> bool {
    WAITED.with(|w| w.get())
}

/// [`waited`], clearing the note: the caller relies on it.
fn take_waited() -> bool {
    WAITED.with(|w| w.replace(false))
}

/// A non-worker's publish: pushes `op` to `ring`, marked when the calling
/// thread has just waited on the engine (it will most likely wait for `op`
/// next and run it itself, so spinners leave it alone for
/// [`WAITER_GRACE`]), then calls `wake` with the mark (for `notify_one`,
/// which may rely on the waiter) and clears the note: only the first push after a wait
/// is marked. Hands `op` back when the ring is full, without waking.
/// (Inlined as the executors' own code was: it sits on every push.)
#[inline(always)]
pub(crate) fn push_and_wake(ring: &ReadyRing, op: u32, wake: impl FnOnce(bool)) -> Result<(), u32> {
    let for_waiter = waited();
    let pushed = ring.push_marked(op, for_waiter);
    if pushed.is_ok() {
        wake(for_waiter);
    }
    if for_waiter {
        take_waited();
    }
    pushed
}

/// Workers of a pool of `workers` on a process with `cpus` CPUs that may
/// spin at once: all of them while they leave [`CPUS_FOR_PUSHERS`] CPUs
/// to the pushing threads, else half of them, but at least two (or all,
/// if fewer). See the module docs ("States").
pub(crate) fn max_spinners(workers: usize, cpus: usize) -> u32 {
    if workers + CPUS_FOR_PUSHERS <= cpus {
        return workers.max(1) as u32;
    }
    (workers / 2).max(2).min(workers.max(1)) as u32
}

/// The sleep/wake rendezvous of one worker pool.
pub(crate) struct Sleep {
    epoch: CachePadded<AtomicU32>,
    sleepers: CachePadded<AtomicU32>,
    spinning: CachePadded<AtomicU32>,
    /// How many workers may spin at once (`max_spinners`).
    max_spinning: u32,
    /// The pool's workers.
    workers: u32,
    /// 1 while a wake-up is in flight: later producers skip theirs until a
    /// parking or woken worker clears it.
    waking: CachePadded<AtomicU32>,
    /// With `pinned_workers`: 1 once a producer has skipped its wake-up
    /// because a worker was spinning, until the spinner polls again. A
    /// producer that finds it still set wakes a sleeper after all: the
    /// spinner has not run since (pinned to a core a busy thread shares,
    /// e.g. the pusher's), so relying on it would leave an idle core idle.
    unseen: CachePadded<AtomicU32>,
    /// A spinner's nap ([`Sleep::nap`]).
    nap: CachePadded<Nap>,
    pinned_workers: bool,
    /// Pinned workers each on a CPU of its own ([`Sleep::with_own_cpus`]).
    own_cpus: bool,
    /// Set by [`notify_all`](Sleep::notify_all): spins end early.
    shut_down: AtomicBool,
}

/// The futex of a spinner that naps, still counted as spinning.
#[derive(Default)]
struct Nap {
    /// Bumped to wake the napper.
    word: AtomicU32,
    /// 1 while a spinner naps (or is about to), until it or a producer
    /// waking it clears it.
    napping: AtomicU32,
}

impl Sleep {
    /// The rendezvous of a pool of `workers` that are pinned to cores (then
    /// a spinner may be kept off the CPU by a thread sharing its core, see
    /// `unseen`) or free to move (the scheduler moves them instead).
    pub(crate) fn new(workers: usize, pinned_workers: bool) -> Self {
        Sleep {
            epoch: CachePadded::new(AtomicU32::new(0)),
            sleepers: CachePadded::new(AtomicU32::new(0)),
            spinning: CachePadded::new(AtomicU32::new(0)),
            max_spinning: max_spinners(workers, crate::base::topology::available_cpus()),
            workers: workers as u32,
            waking: CachePadded::new(AtomicU32::new(0)),
            unseen: CachePadded::new(AtomicU32::new(0)),
            nap: CachePadded::default(),
            pinned_workers,
            own_cpus: false,
            shut_down: AtomicBool::new(false),
        }
    }

    /// `own_cpus`: the pinned workers each have a CPU of its own. Two
    /// spinners are then never both on the publisher's core, and a
    /// publish that finds two relies on them without the `unseen` check
    /// (`wake_unless_relying`).
    pub(crate) fn with_own_cpus(mut self, own_cpus: bool) -> Self {
        self.own_cpus = self.pinned_workers && own_cpus;
        self
    }
}

impl Sleep {
    /// Whether any worker is spinning now (a hint).
    #[inline]
    pub(crate) fn anyone_spinning(&self) -> bool {
        self.spinning.load(Ordering::Relaxed) != 0
    }

    /// Whether the workers are free to move between CPUs (not pinned) and
    /// at least `cpus` of them are not parked: running, spinning or about
    /// to park (a hint; `WorkerState::movable_workers_fill_cpus`).
    pub(crate) fn movable_workers_fill(&self, cpus: usize) -> bool {
        !self.pinned_workers && self.workers.saturating_sub(self.sleepers.load(Ordering::Relaxed)) as usize >= cpus
    }

    /// Workers announced as parked (for the loom models of `per_device.rs`).
    #[cfg(all(test, depengine_loom))]
    pub(crate) fn sleepers(&self) -> u32 {
        self.sleepers.load(Ordering::SeqCst)
    }

    /// **running → spinning**: succeeds for at most `max_spinning` workers
    /// at a time.
    pub(crate) fn try_start_spinning(&self) -> bool {
        let mut spinning = self.spinning.load(Ordering::Relaxed);
        while spinning < self.max_spinning {
            match self.spinning.compare_exchange(spinning, spinning + 1, Ordering::SeqCst, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(now) => spinning = now,
            }
        }
        false
    }

    /// The spinning state: [`spin_for`] `spin`, polling `found`, and telling
    /// producers at each poll that the spinner is running (see `unseen`).
    /// Ends early, finding nothing, once the pool shuts down
    /// ([`notify_all`](Self::notify_all)), so that a long spin setting does
    /// not hold up a dropped engine.
    pub(crate) fn spin(&self, spin: Duration, found: impl Fn() -> bool) -> bool {
        spin_for(
            spin,
            || {
                if self.unseen.load(Ordering::Relaxed) != 0 {
                    self.unseen.store(0, Ordering::Relaxed);
                }
                found()
            },
            || self.shut_down.load(Ordering::Relaxed),
        )
    }

    /// [`Sleep::spin`] for an executor with work a spinner may leave to
    /// the thread that pushed it: `urgent()` work is taken at once; other
    /// work (`present()`) is looked at once when it appears, and if
    /// `leave()` says it is work whose pusher is about to wait for it and
    /// run it itself (`Executor::help`), the spinner takes it only if it is
    /// still there after [`WAITER_GRACE`], keeping such a round trip on one
    /// core. `leave` is asked once per appearance, not at every poll: it
    /// reads more lines than `present`, lines the pusher and the waiter
    /// are about to write. Says whether work was found, and when not,
    /// whether some work was left to its pusher meanwhile; it ends early,
    /// [`Spun::LeftToWaiters`], once [`LEAVES_BEFORE_NAP`] operations in a
    /// row were left and taken by their pushers.
    pub(crate) fn spin_with_grace(
        &self,
        spin: Duration,
        urgent: impl Fn() -> bool,
        present: impl Fn() -> bool,
        leave: impl Fn() -> bool,
    ) -> Spun {
        let since: Cell<Option<Instant>> = Cell::new(None);
        // Operations left that vanished, in a row (0: none yet).
        let left = Cell::new(0u32);
        let found = self.spin(spin, || {
            if urgent() {
                return true;
            }
            if !present() {
                // Work that was left vanished: its pusher took it.
                if since.take().is_some() {
                    left.set(left.get() + 1);
                    // Ends the spin, as `LeftToWaiters` below.
                    return left.get() >= LEAVES_BEFORE_NAP;
                }
                return false;
            }
            match since.get() {
                Some(first) => first.elapsed() >= WAITER_GRACE,
                None if leave() => {
                    since.set(Some(Instant::now()));
                    false
                }
                None => true,
            }
        });
        match (found, left.get()) {
            (true, n) if n < LEAVES_BEFORE_NAP => Spun::Found,
            (_, 0) => Spun::Idle,
            _ => Spun::LeftToWaiters,
        }
    }

    /// **spinning → napping → spinning**: for a spinner whose spin ended
    /// [`Spun::LeftToWaiters`]. A thread is running push-then-wait round
    /// trips and takes each of its operations itself; a spinner on another
    /// core that keeps polling only pulls the ring's lines away from it
    /// each round (pooled's pingpong several times slower), and a spinner
    /// pinned to the waiter's own core takes turns with it for that core
    /// (perf/journal/2026-11-24.md, eighth round). So the
    /// spinner sleeps instead, for at most `limit`,
    /// *still counted as spinning*: a waiter's own publish relies on the
    /// waiter and wakes nobody, as with a pinned spinner, while any other
    /// publish wakes the napper (`notify_one`). Returns at once if
    /// `has_work()` (work the napper must not leave) once it has announced
    /// the nap. A publish the napper misses (a waiter that did not wait
    /// after all) waits at most `limit`.
    pub(crate) fn nap(&self, limit: Duration, has_work: impl Fn() -> bool) {
        let seen = self.nap.word.load(Ordering::Acquire);
        self.nap.napping.store(1, Ordering::SeqCst);
        // With `notify_one`'s light barrier (`barrier.rs`): either the
        // producer sees `napping` (and bumps `word`, so the wait below
        // returns) or we see its work.
        barrier::heavy();
        if !has_work() {
            futex_wait_for(&self.nap.word, seen, limit);
        }
        self.nap.napping.store(0, Ordering::Relaxed);
    }

    /// **spinning → napping → running / parking**: what a spinner does
    /// after a spin that ended [`Spun::LeftToWaiters`]: naps for at most
    /// [`NAP_LIMIT`] (unless `has_work()` or the pool is stopping, `stop`),
    /// then stops spinning. Returns `false` when the pool is stopping.
    pub(crate) fn nap_after_leaving(&self, has_work: impl Fn() -> bool, stop: &AtomicBool) -> bool {
        let stopping = || stop.load(Ordering::SeqCst);
        self.nap(NAP_LIMIT, || has_work() || stopping());
        self.stop_spinning();
        !stopping()
    }

    /// Wakes a napping spinner, if one naps (one wake-up per nap: the
    /// first producer to clear `napping` issues it).
    #[inline]
    fn wake_napper(&self) {
        if self.nap.napping.load(Ordering::Relaxed) != 0 && self.nap.napping.swap(0, Ordering::SeqCst) != 0 {
            self.nap.word.fetch_add(1, Ordering::Release);
            futex_wake_all(&self.nap.word);
        }
    }

    /// **spinning → running / parking**. A `SeqCst` read-modify-write: a
    /// producer that relied on this spinner (its `SeqCst` look, in
    /// [`notify_one`](Self::notify_one), came first) published before it,
    /// so the caller's count of the work it will not take, which follows,
    /// sees that publish (`docs/worker-sleep.md`, item 6).
    pub(crate) fn stop_spinning(&self) {
        self.spinning.fetch_sub(1, Ordering::SeqCst);
    }

    /// **→ parked**: sleeps unless `has_work()` says otherwise once the
    /// worker has announced itself. Returns after a wake-up (or a spurious
    /// return), saying whether it slept.
    pub(crate) fn park(&self, has_work: impl Fn() -> bool) -> bool {
        let epoch = self.epoch.load(Ordering::Acquire);
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        // A wake-up token left by a producer that found nobody to wake
        // must not outlive this announcement, or the next producer would
        // skip waking us.
        self.end_wake_up();
        // With `notify_one`'s light barrier (`barrier.rs`): either the
        // notifier sees us in `sleepers` (or no longer spinning) or we see
        // its work. Heavy: a futex wait follows anyway.
        barrier::heavy();
        let sleep = !has_work();
        if sleep {
            futex_wait(&self.epoch, epoch);
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
        // Awake: the next producer may wake another worker.
        self.end_wake_up();
        sleep
    }

    /// Work was published: wakes one parked worker unless one is spinning
    /// (and has polled since the last producer relied on it) or a wake-up
    /// is already in flight (the woken worker will find this work too, and
    /// wakes another if more is left). `for_waiter`: the work was marked
    /// as its publisher's own ([`push_and_wake`]). Returns whether it
    /// issued a wake-up.
    ///
    /// For work published by a `SeqCst` read-modify-write of the word that
    /// a worker's count of ready work reads with `SeqCst` loads (a
    /// [`ReadyRing`]'s tail, the priority pool's mask): see
    /// [`notify_one_after_plain_publish`](Self::notify_one_after_plain_publish)
    /// for anything else.
    #[inline]
    pub(crate) fn notify_one(&self, for_waiter: bool) -> bool {
        // The hot side of the handshake with `park` and `nap`, on every
        // publish: light (`barrier.rs`).
        barrier::light();
        self.wake_unless_relying(for_waiter)
    }

    /// [`notify_one`](Self::notify_one) for work published by plain
    /// stores (a worker's deque): before it relies on another worker's
    /// count of ready work, it makes the light barrier a full fence
    /// (`barrier::upgrade_light`), to pair with the fence before that
    /// count (item 6 of `docs/worker-sleep.md`).
    #[inline]
    pub(crate) fn notify_one_after_plain_publish(&self) -> bool {
        barrier::light();
        if self.spinning.load(Ordering::SeqCst) != 0 || self.waking.load(Ordering::SeqCst) != 0 {
            barrier::upgrade_light();
            return self.wake_unless_relying(false);
        }
        // No spinner and no wake-up in flight at that look: rely on none
        // that comes later (a spinner that starts now may count before
        // this publish is visible to it), only on the sleepers' protocol.
        self.wake_a_sleeper()
    }

    /// The decision of [`notify_one`](Self::notify_one), once the publish
    /// is ordered before what follows. Each `return false` relies on
    /// another worker's count of the ready work: a spinner's after
    /// `stop_spinning`, or the woken worker's after `park`. The loads that
    /// decide so are `SeqCst` (plain loads on x86). After a ring's
    /// `SeqCst` claim, which that count reads with `SeqCst` loads, the
    /// single `SeqCst` order puts either these loads first (the count then
    /// sees the claim) or the worker's read-modify-write (these loads then
    /// see the spinner gone, or the token free, and a sleeper is woken
    /// here). After a deque push the caller's full fence pairs with the
    /// fence before per_device's count instead (`docs/worker-sleep.md`,
    /// item 6).
    #[inline(always)]
    fn wake_unless_relying(&self, for_waiter: bool) -> bool {
        let spinning = self.spinning.load(Ordering::SeqCst);
        if spinning != 0 {
            // A napping spinner is woken for work no waiter will run; a
            // waiter's own publish relies on the waiter (`nap`).
            if !for_waiter {
                self.wake_napper();
            }
            if !self.pinned_workers {
                return false;
            }
            // A thread that has just waited on the engine is likely to wait
            // again right after this publish (a push-then-wait round trip),
            // and a waiting thread runs ready work itself: it skips the
            // check below, whose store and the spinner's clear are two
            // line transfers on that round trip. A thread that publishes
            // again without waiting checks as usual.
            if for_waiter || take_waited() {
                return false;
            }
            // Two spinners or more on CPUs of their own: at least one does
            // not share the publisher's CPU, and it polls. The check below
            // would only add a wake-up (a futex call on the publisher's
            // path) each time a burst of publishes outran the spinners'
            // polls: on 16 cores, 22,000–37,000 wake-ups per 400,000
            // `random` operations, a third to a half of that without it
            // (`docs/worker-sleep.md`, "a spinner that does not run").
            if spinning >= 2 && self.own_cpus {
                return false;
            }
            // Only ever adds wake-ups to the protocol below, so it cannot
            // lose one; a plain load and store are enough for a hint.
            if self.unseen.load(Ordering::Relaxed) == 0 {
                self.unseen.store(1, Ordering::Relaxed);
                return false;
            }
        }
        self.wake_a_sleeper()
    }

    /// Wakes a parked worker unless none is parked or a wake-up is in
    /// flight. Returning `false` relies on nobody when nobody is parked
    /// (every worker looks again before it parks, and parking is the heavy
    /// side of the handshake with the light barrier), else on the wake-up
    /// in flight: its worker clears the token with a swap (which reads
    /// this producer's swap if that came later) before it counts.
    #[inline(always)]
    fn wake_a_sleeper(&self) -> bool {
        if self.sleepers.load(Ordering::SeqCst) > 0
            && self.waking.load(Ordering::SeqCst) == 0
            && self.waking.swap(1, Ordering::SeqCst) == 0
        {
            self.epoch.fetch_add(1, Ordering::Release);
            futex_wake_one(&self.epoch);
            return true;
        }
        false
    }

    /// Clears the wake-up token (see `notify_one`). A swap, not a store:
    /// it reads the token as the last producer to take it left it, so
    /// that producer's publish is visible to this worker's next look.
    #[inline]
    fn end_wake_up(&self) {
        if self.waking.load(Ordering::SeqCst) != 0 {
            self.waking.swap(0, Ordering::SeqCst);
        }
    }

    /// Wakes every parked worker and ends every spin (shutdown).
    pub(crate) fn notify_all(&self) {
        self.shut_down.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        self.epoch.fetch_add(1, Ordering::Release);
        futex_wake_all(&self.epoch);
        self.nap.word.fetch_add(1, Ordering::Release);
        futex_wake_all(&self.nap.word);
    }
}

/// The counting around [`Sleep`]'s protocol that every executor uses.
impl ExecutorCounters {
    /// Wakes a parked worker of `sleep` unless the protocol says no one
    /// needs it (`Sleep::notify_one`), counting the wake-ups issued.
    /// `for_waiter`: the work is marked as its publisher's own.
    #[inline]
    pub(crate) fn wake_one(&self, sleep: &Sleep, for_waiter: bool) {
        self.count_wake_up(sleep.notify_one(for_waiter));
    }

    /// [`wake_one`](Self::wake_one) for work published by plain stores (a
    /// worker's deque: `Sleep::notify_one_after_plain_publish`).
    #[inline]
    pub(crate) fn wake_one_after_plain_publish(&self, sleep: &Sleep) {
        self.count_wake_up(sleep.notify_one_after_plain_publish());
    }

    #[inline(always)]
    fn count_wake_up(&self, woke: bool) {
        if woke {
            self.wakeups.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Parks on `sleep` unless `has_work` (`Sleep::park`), counting the
    /// times the worker actually slept.
    pub(crate) fn park(&self, sleep: &Sleep, has_work: impl Fn() -> bool) {
        if sleep.park(has_work) {
            self.parks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// A CPU worker's park ([`park`](Self::park)); then, slept or not, it
    /// passes a wake-up on if `more_than_one` says more is queued than
    /// this worker will take. Producers skip theirs while one is in flight
    /// (this worker slept) or while a worker spins, and a spinner's last
    /// look may come just before a publish that relies on it and so find
    /// nothing: it then finds the work at the re-check here instead of
    /// sleeping (`docs/worker-sleep.md`, item 6; found by the loom model
    /// `per_device::a_spinner_that_finds_more_than_it_takes_wakes_a_sleeper`).
    pub(crate) fn park_and_hand_on(
        &self,
        sleep: &Sleep,
        has_work: impl Fn() -> bool,
        more_than_one: impl FnOnce() -> bool,
    ) {
        self.park(sleep, has_work);
        self.hand_on(sleep, more_than_one);
    }

    /// A spinner's nap after its spin left its work to the threads that
    /// pushed it ([`Sleep::nap_after_leaving`]); woken, it passes a
    /// wake-up on as [`park_and_hand_on`](Self::park_and_hand_on) does:
    /// every publish during the nap relied on it, but only the first woke
    /// it (loom: `pooled::a_napper_woken_to_two_operations_wakes_a_sleeper`).
    /// Returns `false` when the pool is stopping.
    pub(crate) fn nap_and_hand_on(
        &self,
        sleep: &Sleep,
        has_work: impl Fn() -> bool,
        stop: &AtomicBool,
        more_than_one: impl FnOnce() -> bool,
    ) -> bool {
        let working = sleep.nap_after_leaving(has_work, stop);
        if working {
            self.hand_on(sleep, more_than_one);
        }
        working
    }

    /// Wakes another worker if `more_than_one` says more is ready than the
    /// calling worker will take.
    #[inline]
    fn hand_on(&self, sleep: &Sleep, more_than_one: impl FnOnce() -> bool) {
        if more_than_one() {
            self.wake_one(sleep, false);
        }
    }
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::{max_spinners, Sleep, Spun, LEAVES_BEFORE_NAP, WAITER_GRACE};
    use crate::sync::Ordering;
    use std::cell::Cell;
    use std::time::{Duration, Instant};

    /// Every worker may spin while the pool leaves a CPU to the pushers;
    /// otherwise (these two-CPU hosts' two workers, or as many workers as
    /// CPUs) half of them, but at least two.
    #[test]
    fn every_worker_spins_while_a_cpu_is_left_else_half_but_at_least_two() {
        let two: Vec<u32> = [0, 1, 2, 3, 4, 8, 64].iter().map(|&w| max_spinners(w, 2)).collect();
        assert_eq!(two, [1, 1, 2, 2, 2, 4, 32]);
        let sixteen: Vec<u32> = [1, 2, 4, 8, 15, 16, 20, 64].iter().map(|&w| max_spinners(w, 16)).collect();
        assert_eq!(sixteen, [1, 2, 4, 8, 15, 8, 10, 32]);
        assert_eq!(max_spinners(4, 1), 2, "one CPU: the half rule's two");
    }

    const LONG_SPIN: Duration = Duration::from_secs(5);

    /// Work left to its pusher is found only once the grace has passed,
    /// and whether to leave it is asked once, not at every poll.
    #[test]
    fn work_left_to_its_pusher_is_taken_after_the_grace() {
        let sleep = Sleep::new(2, false);
        let asked = Cell::new(0);
        let start = Instant::now();
        let found = sleep.spin_with_grace(
            LONG_SPIN,
            || false,
            || true,
            || {
                asked.set(asked.get() + 1);
                true
            },
        );
        assert_eq!(found, Spun::Found);
        assert!(start.elapsed() >= WAITER_GRACE, "taken after {:?}", start.elapsed());
        assert_eq!(asked.get(), 1);
    }

    /// Work its pusher does not wait for is taken at the first look, and
    /// urgent work without asking about the rest.
    #[test]
    fn other_work_is_taken_at_once() {
        let sleep = Sleep::new(2, false);
        let polls = Cell::new(0);
        let found = sleep.spin_with_grace(
            LONG_SPIN,
            || false,
            || {
                polls.set(polls.get() + 1);
                true
            },
            || false,
        );
        assert!(found == Spun::Found && polls.get() == 1, "{found:?} after {} polls", polls.get());
        let asked = Cell::new(false);
        let found = sleep.spin_with_grace(
            LONG_SPIN,
            || true,
            || true,
            || {
                asked.set(true);
                true
            },
        );
        assert!(found == Spun::Found && !asked.get());
    }

    /// Work that its pusher took within the grace is not found, and a new
    /// appearance is looked at afresh (here: not left, so taken at once).
    #[test]
    fn work_taken_in_the_grace_is_not_found_and_new_work_is_asked_about_again() {
        let sleep = Sleep::new(2, false);
        let polls = Cell::new(0u32);
        let asked = Cell::new(0);
        // Present at the first poll (then its pusher takes it), gone at
        // the next two, present again from the fourth on.
        let found = sleep.spin_with_grace(
            LONG_SPIN,
            || false,
            || {
                polls.set(polls.get() + 1);
                !(2..=3).contains(&polls.get())
            },
            || {
                asked.set(asked.get() + 1);
                asked.get() == 1
            },
        );
        assert_eq!(found, Spun::Found);
        assert_eq!((asked.get(), polls.get()), (2, 4));
        // Never reappearing: the spin runs out. (Present at the first poll
        // only: a second poll that found it still there would take it if
        // the grace had passed in between, as it can on a busy machine.)
        let (polls, spin) = (Cell::new(0u32), Duration::from_millis(1));
        let start = Instant::now();
        let found = sleep.spin_with_grace(
            spin,
            || false,
            || {
                polls.set(polls.get() + 1);
                polls.get() == 1
            },
            || true,
        );
        assert!(found == Spun::LeftToWaiters && start.elapsed() >= spin, "{found:?}");
        // Nothing ever appearing: idle.
        assert_eq!(sleep.spin_with_grace(spin, || false, || false, || true), Spun::Idle);
    }

    /// A spinner whose operations vanish, taken by their pushers within
    /// the grace, [`LEAVES_BEFORE_NAP`] times in a row ends its spin to
    /// nap at once, without waiting for the spin to run out; one that finds
    /// other work first takes it.
    #[test]
    fn a_spin_ends_to_nap_after_operations_left_in_a_row() {
        let sleep = Sleep::new(2, true);
        // Each operation is there at one poll and gone at the next.
        let run = |unmarked_at: u32| {
            let (polls, asked) = (Cell::new(0u32), Cell::new(0u32));
            let start = Instant::now();
            let spun = sleep.spin_with_grace(
                LONG_SPIN,
                || false,
                || {
                    polls.set(polls.get() + 1);
                    polls.get() % 2 == 1
                },
                || {
                    asked.set(asked.get() + 1);
                    asked.get() != unmarked_at
                },
            );
            assert!(start.elapsed() < LONG_SPIN / 2, "the spin ran out: {spun:?}");
            (spun, asked.get())
        };
        assert_eq!(run(0), (Spun::LeftToWaiters, LEAVES_BEFORE_NAP));
        assert_eq!(run(LEAVES_BEFORE_NAP), (Spun::Found, LEAVES_BEFORE_NAP));
    }

    /// With pinned workers, a publish that finds a spinner relies on it
    /// and marks that (`unseen`); the next one that finds the mark still
    /// set (the spinner has not polled since) wakes a sleeper. With two
    /// spinners on CPUs of their own, at least one is off the publisher's
    /// core: publishes rely on them and wake nobody. One spinner, or two
    /// that may share a CPU, keep the check.
    #[test]
    fn two_spinners_on_their_own_cpus_are_relied_on() {
        // (own CPUs, spinners, whether the second publish wakes a sleeper)
        for (own_cpus, spinners, wakes) in [(true, 2, false), (true, 1, true), (false, 2, true)] {
            let sleep = Sleep::new(3, true).with_own_cpus(own_cpus);
            // A sleeper to wake (none waits on the futex: waking it is a no-op).
            sleep.sleepers.fetch_add(1, Ordering::SeqCst);
            for _ in 0..spinners {
                assert!(sleep.try_start_spinning());
            }
            assert!(!sleep.notify_one(false), "the first publish relies on the spinner");
            assert_eq!(sleep.notify_one(false), wakes, "own CPUs {own_cpus}, {spinners} spinning");
        }
    }

    /// A napping spinner is woken by a publish from a thread that has not
    /// waited, not by one from a thread that has (it relies on that
    /// thread), and not at all when it finds work it must take; with
    /// workers pinned or not.
    #[test]
    fn a_nap_ends_for_work_no_waiter_will_run() {
        a_nap_ends_for_work_no_waiter_will_run_on(false);
        a_nap_ends_for_work_no_waiter_will_run_on(true);
    }

    fn a_nap_ends_for_work_no_waiter_will_run_on(pinned_workers: bool) {
        const LIMIT: Duration = Duration::from_secs(20);
        let sleep = Sleep::new(2, pinned_workers);
        assert!(sleep.try_start_spinning());
        let start = Instant::now();
        sleep.nap(LIMIT, || true);
        assert!(start.elapsed() < LIMIT / 4, "napped with work to take");
        let naps = |waiter_publishes: bool, limit: Duration| {
            std::thread::scope(|s| {
                let napper = s.spawn(|| {
                    let start = Instant::now();
                    sleep.nap(limit, || false);
                    start.elapsed()
                });
                while sleep.nap.napping.load(Ordering::SeqCst) == 0 {
                    std::thread::yield_now();
                }
                sleep.notify_one(waiter_publishes);
                napper.join().unwrap()
            })
        };
        assert!(naps(false, LIMIT) < LIMIT / 4, "a publish no waiter runs did not wake the napper");
        let limit = Duration::from_millis(50);
        assert!(naps(true, limit) >= limit, "a waiter's publish woke the napper");
        sleep.stop_spinning();
    }
}

/// Loom model of a napping spinner of a pool with pinned workers
/// (`--cfg depengine_loom`; see `loom_tests/README.md`). Pooled's
/// unpinned case is modelled with its ring (`pooled.rs`).
#[cfg(all(test, depengine_loom))]
mod loom_models {
    use super::Sleep;
    use crate::sync::{AtomicBool, Ordering};
    use loom::sync::Arc;
    use std::time::Duration;

    /// A spinner naps against a publish no waiter will run: either the
    /// publisher sees the nap announced and wakes it, or the napper sees
    /// the work before it sleeps. Under loom the nap's timeout never fires,
    /// so a lost wake-up is a deadlock.
    #[test]
    fn a_pinned_napper_never_sleeps_through_an_unmarked_publish() {
        loom::model(|| {
            let sleep = Arc::new(Sleep::new(2, true));
            let work = Arc::new(AtomicBool::new(false));
            assert!(sleep.try_start_spinning());
            let napper = {
                let (sleep, work) = (sleep.clone(), work.clone());
                loom::thread::spawn(move || {
                    sleep.nap(Duration::ZERO, || work.load(Ordering::Relaxed));
                    sleep.stop_spinning();
                    assert!(work.load(Ordering::Relaxed), "the nap ended without the work");
                })
            };
            work.store(true, Ordering::Relaxed);
            sleep.notify_one(false);
            napper.join().unwrap();
        });
    }
}
