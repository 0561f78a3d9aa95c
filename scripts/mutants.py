#!/usr/bin/env python3
"""Mutation testing of the engine's core: plants one plausible one-line bug
at a time and says which check catches it.

    scripts/mutants.py                  every mutant against the real-thread suite
    scripts/mutants.py --loom           ... and, for those it misses, the loom models
    scripts/mutants.py --only NAME,...  some of them
    scripts/mutants.py --list           the mutants

For each mutant the script edits one file (the exact text below must be
found once, so a mutant that no longer applies is reported as stale, not
silently skipped), runs `cargo test -p depengine --lib --tests` with a
deadline (a hang counts as caught: CI's own timeout would fail it), then
restores the file. With --loom, a mutant the suite missed runs the loom
models too (loom_tests/run.sh). The score is caught / applied.

A mutant caught only by loom or ThreadSanitizer is one that x86's strong
memory order hides from real threads (the weakened publishing swap).
"""

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# name, file, original text, mutated text, what the bug is, and "every"
# where each occurrence of the text is mutated (otherwise it must occur once).
MUTANTS = [
    ("var_queue_append_swap_relaxed", "src/graph/var_queue.rs",
     "let was = s.status.swap(if write { WRITE } else { READ }, Ordering::AcqRel);",
     "let was = s.status.swap(if write { WRITE } else { READ }, Ordering::Relaxed);",
     "the append's publishing swap is weakened to Relaxed"),
    # Every bump of the tag (take, take_all, give): with any one of them
    # left the list is still safe (a head that comes back has been given or
    # taken, which moved the tag), so dropping one alone is no bug at all.
    ("pool_aba_tag_dropped", "src/mem/pool.rs",
     "(head >> 32).wrapping_add(1) << 32",
     "(head >> 32) << 32",
     "the free list's ABA tag is never bumped", "every"),
    ("dispatcher_release_without_recheck", "src/graph/dispatch.rs",
     "            barrier::light();\n            if self.stack.load(Ordering::Relaxed) == NIL {",
     "            barrier::light();\n            if true {",
     "a combiner lets go without looking at the stack again", "every"),
    ("dispatcher_delegation_without_heavy_barrier", "src/graph/dispatch.rs",
     "        barrier::heavy();\n        // `busy` held: its holder sees our link",
     "        // `busy` held: its holder sees our link",
     "a delegated push skips the heavy barrier before it looks at `busy`"),
    ("park_without_recheck", "src/exec/park.rs",
     "let sleep = !has_work();",
     "let sleep = { let _ = &has_work; true };",
     "a worker parks without re-checking for work"),
    ("nested_push_wakes_nobody", "src/exec/per_device.rs",
     "if had_work || in_body {",
     "if had_work {",
     "a push from a body onto its worker's deque wakes nobody"),
    ("wait_all_ignores_delegated_pushes", "src/graph/wait.rs",
     "dispatcher.undispatched() == 0 && dispatcher.dispatched() == finished",
     "dispatcher.dispatched() == finished",
     "wait_all does not count pushes still on the dispatcher's stack"),
    ("wait_to_write_ignores_reads", "src/graph/var_queue.rs",
     "            READING => !write,",
     "            READING => true,",
     "a write is granted at once while reads run"),
    ("version_not_bumped", "src/graph/var.rs",
     "version.store(version.load(Ordering::Relaxed) + 1, Ordering::Release);",
     "version.store(version.load(Ordering::Relaxed), Ordering::Release);",
     "a completed write leaves the version unchanged"),
    ("failures_never_skip", "src/core/run.rs",
     "if opts.no_skip || !self.vars.failures_held.load(Ordering::Relaxed) {",
     "if true {",
     "readers of a failed variable run instead of being skipped"),
    ("blind_write_keeps_failure", "src/graph/var.rs",
     "unsafe { self.done.error.with_mut(|p| *p = failure.cloned()) };",
     "unsafe { self.done.error.with_mut(|p| if failure.is_some() { *p = failure.cloned() }) };",
     "a successful write does not clear the variable's failure"),
    ("last_reader_check_off_by_one", "src/graph/var_queue.rs",
     "        if before != 1 {\n            return Granted::none(blocks);",
     "        if before > 2 {\n            return Granted::none(blocks);",
     "the second-last reader out grants the next write"),
    ("wait_var_answers_at_once", "src/core/wait.rs",
     "if slot.queue().grants_at_once(&self.blocks, write) {",
     "if true {",
     "wait_var answers without looking at the queue"),
    ("cancel_ignored", "src/core/run.rs",
     "if user && self.life.is_cancelling() {",
     "if false {",
     "shutdown_cancel runs the operations it should skip"),
    ("generation_not_bumped", "src/graph/var.rs",
     "slot.life.store((gen + 1) << 32, Ordering::Release);",
     "slot.life.store(gen << 32, Ordering::Release);",
     "a deleted variable's slot is reused with the same generation"),
    ("future_never_woken", "src/graph/wait.rs",
     "                waker.wake();\n",
     "                drop(waker);\n",
     "the marker's answer does not wake the future's waker"),
    ("future_unlocks_blindly", "src/graph/wait.rs",
     "        if self.state.compare_exchange(now | LOCKED, unlocked, Ordering::AcqRel, Ordering::Acquire).is_err() {",
     "        self.state.store(unlocked, Ordering::Release);\n        if false {",
     "a future storing its waker overwrites an answer that came meanwhile"),
    ("cancelled_future_keeps_its_waker", "src/graph/wait.rs",
     "        let waker = unsafe { self.waker.with_mut(|p| (*p).take()) };",
     "        let waker: Option<Waker> = None;",
     "a dropped future's waker stays in its slot"),
    ("abandoned_access_never_given_back", "src/graph/wait.rs",
     "self.completion.with_mut(|p| (*p).take()) } {\n                done.signal();",
     "self.completion.with_mut(|p| (*p).take()) } {\n                std::mem::forget(done);",
     "an access whose future was dropped is held for ever"),
    ("push_across_shards_takes_one", "src/graph/dispatch.rs",
     "        if shards & (shards - 1) == 0 {\n            self.shards[shards.trailing_zeros() as usize].submit(",
     "        if true {\n            self.shards[shards.trailing_zeros() as usize].submit(",
     "a push across dispatch shards goes through its lowest shard alone"),
    ("shards_taken_from_home", "src/graph/dispatch.rs",
     "        for s in shards_in(mask) {\n            let shard = &self.shards[s];\n            let held = shard.take_waiting(me);",
     "        let h = home_shard(me) as u32;\n"
     "        for s in shards_in((mask >> h | mask << (SHARDS as u32 - h)) & ALL_SHARDS).map(|s| (s + h as usize) % SHARDS) {\n"
     "            let shard = &self.shards[s];\n            let held = shard.take_waiting(me);",
     "shards are taken from the pusher's home shard on, not in one global order"),
    ("lamport_clock_not_maximum", "src/graph/dispatch.rs",
     ".map(|s| self.shards[s].counts.clock.load(Ordering::Relaxed)).max()",
     ".map(|s| self.shards[s].counts.clock.load(Ordering::Relaxed)).min()",
     "a push across shards takes the smallest of their clocks"),
    ("shard_taken_without_drain", "src/graph/dispatch.rs",
     "                owners |= 1 << s;\n            }\n            shard.drain(oprs, dispatch);",
     "                owners |= 1 << s;\n            }",
     "a shard taken to push across shards is not drained first"),
]

# The same mutants in the code before the hardening issue (to score the
# suite of that commit): where its text differs, the original and mutated
# text there.
BEFORE_HARDENING = {
    "generation_not_bumped": ("let gen = (slot.life.load(Ordering::Acquire) >> 32) + 1;",
                              "let gen = slot.life.load(Ordering::Acquire) >> 32;"),
}

# The flat layout of the tree before the layers (2026-11-29), for scoring an
# older commit's suite with this script.
FLAT_PATHS = {"src/core/mod.rs": "src/core.rs", "src/exec/": "src/executor/"}


def path_in_tree(path):
    """`path`, or where the same file lay in the flat layout."""
    if (ROOT / path).exists():
        return ROOT / path
    for new, old in FLAT_PATHS.items():
        if path.startswith(new):
            return ROOT / path.replace(new, old, 1)
    return ROOT / "src" / Path(path).name


TEST_CMD = ["cargo", "test", "-p", "depengine", "--lib", "--tests", "--", "--test-threads=2"]
LOOM_CMD = ["loom_tests/run.sh"]


def run(cmd, deadline, env=None):
    """Runs cmd; returns (caught, how). A failure or a hang is caught."""
    start = time.time()
    try:
        p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=deadline, env=env)
    except subprocess.TimeoutExpired:
        return True, f"hung (killed after {deadline} s)"
    took = time.time() - start
    if p.returncode == 0:
        return False, f"passed ({took:.0f} s)"
    failed = [line.split()[1] for line in p.stdout.splitlines() if line.startswith("test ") and line.endswith("FAILED")]
    if not failed and "error[E" in p.stdout:
        return None, "does not compile"
    return True, f"failed: {', '.join(failed[:4]) or 'see the log'} ({took:.0f} s)"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loom", action="store_true", help="run the loom models on the mutants the suite misses")
    ap.add_argument("--only", help="comma-separated mutant names")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--deadline", type=int, default=900, help="seconds before a test run counts as hung")
    args = ap.parse_args()
    mutants = MUTANTS
    if args.only:
        names = set(args.only.split(","))
        mutants = [m for m in MUTANTS if m[0] in names]
    if args.list:
        for name, path, _, _, what, *_ in mutants:
            print(f"{name:46} {path:28} {what}")
        return 0
    caught = applied = 0
    for name, path, old, new, what, *every in mutants:
        file = path_in_tree(path)
        text = file.read_text()
        if text.count(old) != 1 and name in BEFORE_HARDENING:
            old, new = BEFORE_HARDENING[name]
        if text.count(old) != 1 and not (every and text.count(old) > 1):
            print(f"{name}: stale (the original text is found {text.count(old)} times in {path})", flush=True)
            continue
        file.write_text(text.replace(old, new))
        try:
            hit, how = run(TEST_CMD, args.deadline)
            if hit is None:
                print(f"{name}: {how}", flush=True)
                continue
            applied += 1
            by = "cargo test"
            if not hit and args.loom:
                hit, how = run(LOOM_CMD, 3 * args.deadline)
                by = "loom"
            caught += bool(hit)
            print(f"{name}: {'CAUGHT by ' + by if hit else 'MISSED'}: {how}  [{what}]", flush=True)
        finally:
            file.write_text(text)
    print(f"score: {caught}/{applied} caught")
    return 0


if __name__ == "__main__":
    sys.exit(main())
