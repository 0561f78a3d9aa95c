//! Asymmetric barriers: a store-then-load handshake whose two sides run at
//! very different rates pays for its full fence on the rare side only.
//!
//! # The handshakes
//!
//! Three places in the engine are Dekker handshakes: each side stores, then
//! loads what the other side stores, and at least one of them must see the
//! other's store.
//!
//! | handshake | hot side (every push) | rare side |
//! |---|---|---|
//! | the dispatcher (`dispatch.rs`) | a combiner lets go: `busy = 0`, then looks at the submission stack | a pusher that found a combiner at work links its operation, then looks at `busy` |
//! | waking (`executor/park.rs`) | a producer publishes work, then looks for spinning and parked workers | a worker about to sleep announces itself, then looks for work |
//! | relying on a worker's count (`executor/park.rs`) | a producer publishes work, sees a spinner or a wake-up in flight, and wakes nobody | a worker stops spinning, or returns from parking, then counts the work it did not take |
//!
//! A `SeqCst` fence on each side makes one see the other. The third is
//! not asymmetric: its worker side runs whenever a worker finds work
//! after idling, too often for a system call. Where the publish is a
//! `SeqCst` read-modify-write that the count reads with `SeqCst` loads
//! (a ready ring's claim), those order it at no extra cost on x86; a
//! producer that published with plain stores (a worker's deque) and
//! relies on the count pays a full fence ([`upgrade_light`]), paired with
//! one before the count (`docs/worker-sleep.md`, item 6). On x86 a fence
//! (or any locked instruction) waits until this core's store buffer has
//! drained, and on the hot side that buffer holds the lines of the
//! operation just filled, lines the last core to run it still owns: each
//! push waited for them twice.
//!
//! # Light and heavy
//!
//! Linux's `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` makes every CPU
//! that runs a thread of this process execute a full barrier before the
//! call returns (by an interrupt; a thread not running passed one when it
//! was switched out). So the hot side needs only a compiler fence
//! ([`light`]: nothing is reordered by the compiler, the CPU keeps its
//! store buffer) and the rare side calls [`heavy`]. Why that is enough,
//! with the hot side H (store `a`, light, load `b`) and the rare side R
//! (store `b`, heavy, load `a`): R's store is visible before the heavy
//! barrier begins. Let P be the point of H's instruction stream where it
//! executed the forced barrier. If H's load of `b` comes after P, it comes
//! after R's store was visible and sees it. If it comes before P, so does
//! H's store of `a` (program order), and P drained it: it was visible
//! before the heavy barrier returned, and R's load of `a` sees it. The
//! same argument is behind liburcu's and folly's asymmetric barriers.
//!
//! # Where it is not available
//!
//! On a kernel without it (before 4.14), under a seccomp filter that
//! refuses the call, on other systems, or with `DEPENGINE_MEMBARRIER=0`,
//! both sides are `SeqCst` fences. The choice is made once per process, at
//! the first barrier (the first engine's build asks for it,
//! [`ensure_chosen`]), before either side of any handshake has run, and
//! never changes: both sides of every handshake always use the same kind.
//! Under loom both are `SeqCst` fences, so the models check each handshake
//! as the fence pair that the light/heavy pair stands for.
//!
//! # Cost
//!
//! A heavy barrier is a system call that interrupts the other CPUs running
//! this process's threads: about 0.3 µs alone here, a few µs with busy
//! threads. The rare sides are a worker going to sleep (a futex wait
//! follows anyway), a push that found another thread combining and
//! did not see it finish within a short spin, and a push that takes the
//! dispatcher's bias from the thread that had pushed alone (`dispatch.rs`;
//! at most once per 1,024 pushes of that thread). A program
//! that must not have its other threads interrupted at all sets
//! `DEPENGINE_MEMBARRIER=0`.

use crate::sync::Ordering;
#[cfg(not(depengine_loom))]
use std::sync::atomic::AtomicU8;

/// Not chosen yet.
#[cfg(not(depengine_loom))]
const UNCHOSEN: u8 = 0;
/// Both sides are `SeqCst` fences.
#[cfg(not(depengine_loom))]
const FENCES: u8 = 1;
/// Light: a compiler fence; heavy: `membarrier`.
#[cfg(not(depengine_loom))]
const MEMBARRIER: u8 = 2;

/// The process's choice (written once, by [`choose`]).
#[cfg(not(depengine_loom))]
static KIND: AtomicU8 = AtomicU8::new(UNCHOSEN);

/// The hot side of a handshake (see the module docs): a compiler fence
/// where `membarrier` is in use (the other side's [`heavy`] then orders
/// both), else a `SeqCst` fence.
#[inline(always)]
pub(crate) fn light() {
    #[cfg(not(depengine_loom))]
    {
        if KIND.load(Ordering::Relaxed) == MEMBARRIER {
            std::sync::atomic::compiler_fence(Ordering::SeqCst);
            return;
        }
        light_unless_membarrier();
    }
    #[cfg(depengine_loom)]
    crate::sync::fence(Ordering::SeqCst);
}

#[cfg(not(depengine_loom))]
#[cold]
#[inline(never)]
fn light_unless_membarrier() {
    if ensure_chosen() {
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
    } else {
        std::sync::atomic::fence(Ordering::SeqCst);
    }
}

/// Makes the [`light`] barrier just passed a full `SeqCst` fence where it
/// was only a compiler fence: for a hot side about to *rely* on a party
/// whose side of the handshake is a `SeqCst` fence, not [`heavy`] (a
/// producer that pushed to a worker's deque and leaves the work to a
/// spinner, or to the worker a wake-up in flight reaches: their count of
/// the ready work follows a fence, `executor/park.rs`). A no-op where
/// `light` already is one (no `membarrier`; under loom).
#[inline(always)]
pub(crate) fn upgrade_light() {
    #[cfg(not(depengine_loom))]
    if KIND.load(Ordering::Relaxed) == MEMBARRIER {
        std::sync::atomic::fence(Ordering::SeqCst);
    }
}

/// The rare side of a handshake (see the module docs).
#[inline]
pub(crate) fn heavy() {
    #[cfg(not(depengine_loom))]
    {
        if ensure_chosen() {
            // Registered and tried in `choose`, so it cannot fail now; if it
            // did, light sides could miss this one: stop rather than lose
            // a wake-up or a submission silently.
            if !membarrier(CMD_PRIVATE_EXPEDITED) {
                eprintln!("depengine: membarrier failed after it had worked; aborting");
                std::process::abort();
            }
            return;
        }
        std::sync::atomic::fence(Ordering::SeqCst);
    }
    #[cfg(depengine_loom)]
    crate::sync::fence(Ordering::SeqCst);
}

/// Whether light barriers are compiler fences (`membarrier` is in use),
/// choosing once per process (see the module docs).
#[cfg(not(depengine_loom))]
#[inline]
pub(crate) fn ensure_chosen() -> bool {
    match KIND.load(Ordering::Acquire) {
        MEMBARRIER => true,
        FENCES => false,
        _ => choose(),
    }
}

/// Under loom both sides are fences.
#[cfg(depengine_loom)]
pub(crate) fn ensure_chosen() -> bool {
    false
}

/// Whether this process's engines pair compiler fences with `membarrier`
/// on their hot handshakes (else both sides are `SeqCst` fences): decided
/// at the first engine's start from the kernel and `DEPENGINE_MEMBARRIER`
/// (`0` turns it off), then fixed for the process.
pub(crate) fn membarrier_in_use() -> bool {
    ensure_chosen()
}

/// A `membarrier` command (an `int`, passed as a `long` through `syscall`).
#[cfg(not(depengine_loom))]
type Cmd = std::ffi::c_long;

/// `MEMBARRIER_CMD_QUERY` (`linux/membarrier.h`).
#[cfg(not(depengine_loom))]
const CMD_QUERY: Cmd = 0;
/// `MEMBARRIER_CMD_PRIVATE_EXPEDITED`.
#[cfg(not(depengine_loom))]
const CMD_PRIVATE_EXPEDITED: Cmd = 1 << 3;
/// `MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED`.
#[cfg(not(depengine_loom))]
const CMD_REGISTER_PRIVATE_EXPEDITED: Cmd = 1 << 4;

/// Makes the choice (once; callers racing here all get the same answer).
#[cfg(not(depengine_loom))]
#[cold]
fn choose() -> bool {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let kind = if wanted() && register() { MEMBARRIER } else { FENCES };
        KIND.store(kind, Ordering::Release);
    });
    KIND.load(Ordering::Acquire) == MEMBARRIER
}

/// `DEPENGINE_MEMBARRIER` unset, or anything but `0`.
#[cfg(not(depengine_loom))]
fn wanted() -> bool {
    // Miri has no `membarrier`; it checks the fence pair instead.
    if cfg!(miri) {
        return false;
    }
    std::env::var("DEPENGINE_MEMBARRIER").map_or(true, |v| v.trim() != "0")
}

/// Registers the process for expedited private barriers and issues one, to
/// be sure they work here.
#[cfg(not(depengine_loom))]
fn register() -> bool {
    let wanted = CMD_PRIVATE_EXPEDITED | CMD_REGISTER_PRIVATE_EXPEDITED;
    matches!(membarrier_query(), Some(cmds) if cmds & wanted == wanted)
        && membarrier(CMD_REGISTER_PRIVATE_EXPEDITED)
        && membarrier(CMD_PRIVATE_EXPEDITED)
}

/// The commands this kernel supports (`None`: no `membarrier` at all, or
/// refused).
#[cfg(all(target_os = "linux", not(depengine_loom)))]
fn membarrier_query() -> Option<Cmd> {
    // SAFETY: `membarrier` takes no pointers; the query changes nothing.
    let cmds = unsafe { libc::syscall(libc::SYS_membarrier, CMD_QUERY, 0, 0) };
    (cmds >= 0).then_some(cmds)
}

/// Issues `membarrier(cmd)`; whether it succeeded.
#[cfg(all(target_os = "linux", not(depengine_loom)))]
fn membarrier(cmd: Cmd) -> bool {
    // SAFETY: `membarrier` takes no pointers; a command the kernel does not
    // know, or one the process has not registered for, returns −1 and
    // changes nothing.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) == 0 }
}

#[cfg(all(not(target_os = "linux"), not(depengine_loom)))]
fn membarrier_query() -> Option<Cmd> {
    None
}

#[cfg(all(not(target_os = "linux"), not(depengine_loom)))]
fn membarrier(_cmd: Cmd) -> bool {
    false
}

#[cfg(all(test, not(depengine_loom)))]
mod tests {
    use super::{heavy, light};
    use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
    use std::sync::atomic::{AtomicU32, AtomicU64};
    use std::sync::Arc;

    struct Litmus {
        x: AtomicU32,
        y: AtomicU32,
        /// The round the heavy side may run.
        go: AtomicU32,
        /// The heavy side's last round (high half) and the `x` it read.
        heavy_saw: AtomicU64,
    }

    /// Spins until `done`, yielding now and then: with one CPU (a
    /// `taskset -c 0` run) the other side runs only when this one lets it,
    /// and a pure spin made each round wait for a scheduler tick (160 s
    /// for the test). With two CPUs a round ends within the spin.
    fn wait_until(mut done: impl FnMut() -> bool) {
        for spins in 1u32.. {
            if done() {
                return;
            }
            if spins % 1024 == 0 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }

    /// The store-buffering litmus test, one side light and one heavy: in
    /// no round may both loads miss the other side's store. (With a
    /// compiler fence on both sides, x86 shows that outcome when the two
    /// threads run at once: checked by hand, replacing `heavy` here.)
    #[test]
    fn a_light_and_a_heavy_side_never_both_miss() {
        const ROUNDS: u32 = 20_000;
        let t = Arc::new(Litmus {
            x: AtomicU32::new(0),
            y: AtomicU32::new(0),
            go: AtomicU32::new(0),
            heavy_saw: AtomicU64::new(0),
        });
        let other = {
            let t = t.clone();
            std::thread::spawn(move || {
                for round in 1..=ROUNDS {
                    wait_until(|| t.go.load(Acquire) == round);
                    t.y.store(round, Relaxed);
                    heavy();
                    let saw = t.x.load(Relaxed);
                    t.heavy_saw.store(u64::from(round) << 32 | u64::from(saw), Release);
                }
            })
        };
        let mut light_first = 0;
        for round in 1..=ROUNDS {
            t.go.store(round, Release);
            t.x.store(round, Relaxed);
            light();
            let light_saw = t.y.load(Relaxed);
            let mut heavy_saw = 0;
            wait_until(|| {
                let v = t.heavy_saw.load(Acquire);
                heavy_saw = v as u32;
                v >> 32 == u64::from(round)
            });
            light_first += u32::from(light_saw != round);
            assert!(
                light_saw == round || heavy_saw == round,
                "round {round}: the light side read y = {light_saw}, the heavy side x = {heavy_saw}"
            );
        }
        other.join().unwrap();
        eprintln!("in {light_first} of {ROUNDS} rounds the light side loaded before the heavy side's store");
    }
}
