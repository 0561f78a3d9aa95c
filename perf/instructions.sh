#!/usr/bin/env bash
# Instructions per operation of the engine's own code path, counted by
# valgrind's callgrind: exact and repeatable, unlike a timing on a shared
# machine, so a change of a few percent shows up in one run.
#
#   perf/instructions.sh                      every throughput workload
#   perf/instructions.sh chain random         some of them
#   BIN=/tmp/old/depengine-perf perf/instructions.sh   another build (A/B; one
#       built from 2026-11-26 on: the runs pass --no-probe, whose machine
#       probe would spin for hours under valgrind)
#   FUNC=depengine::core::Core::push perf/instructions.sh   one function's share
#
# It runs the `naive` engine, where push, dispatch, run and complete all
# happen on the pushing thread, so the count covers every step of an
# operation's life and nothing else varies between runs (no threads, no
# spinning). The figure is the harness's `measure_row` (inclusive: the
# row's engine, its variables and `push_all`, which the release profile's
# LTO inlines into it) divided by the operations it pushed: warm-up plus
# one timed repetition of N (default 100,000); about 80 instructions of it
# are the harness building each push, 2 the row's set-up.
# The threaded engines run the same push/run/complete code plus their
# executor's hand-offs, which callgrind cannot time.
#
#   WORKER=1 perf/instructions.sh chain   per_device's worker path instead
#
# runs per_device with one worker under callgrind (threads taking turns,
# each counted apart) and divides the worker thread's instructions by the
# operations it ran (`--stats`): run, complete, grant, the successor slot
# and the worker loop, as a `chain` worker executes them. The pushing
# thread runs some operations itself there (it helps when throttled), and
# the worker's spinning is counted too, so this figure moves by a few
# instructions between runs; compare builds at more than that.
#
#   DIRECT=1 perf/instructions.sh chain   per_device+pusher's direct runs
#
# runs per_device with running on the pusher and one worker, with the
# stint forced on (DEPENGINE_MAX_PENDING=16, DEPENGINE_INLINE_PACE_NS=1e9:
# under valgrind the pace would otherwise end every stint), so that
# almost every push runs its body inside the push with no block
# (`core/direct_run.rs`), and divides the pushing thread's `measure_row`
# by the operations pushed.
#
#   LINES=40 perf/instructions.sh random   also the 40 source lines that cost
#       the most instructions an operation (perf/lines.py: each instruction
#       given to the innermost frame of its inline chain in our sources;
#       with WORKER=1, DIRECT=1 or PUSHER=1 too)
#
#   PUSHER=1 perf/instructions.sh random   per_device's pushing thread
#
# runs per_device (the default engine, running on the pusher off) with one
# worker, and divides the pushing thread's `Workload::push_all` (every
# push of the row, the harness's ~80 instructions a push included, and
# the rare hold at the pending cap) by the operations pushed: the queued
# push as the default engine's pusher runs it, route, block, dispatch and
# hand-off to the worker, with nothing of the run or completion.
#
# Installs valgrind with apt when it is missing (scripts/apt_install.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
N="${N:-100000}"
if [[ "${PUSHER:-0}" == 1 ]]; then
    FUNC="${FUNC:-depengine_perf::workloads::Workload::push_all}"
fi
FUNC="${FUNC:-depengine_perf::measure_row}"
command -v valgrind >/dev/null || scripts/apt_install.sh valgrind
if [[ -z "${BIN:-}" ]]; then
    scripts/setup.sh
    cargo build --release -q -p depengine-perf
    BIN=target/release/depengine-perf
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# With LINES=N: what perf/lines.py needs, and a call of it on the chosen
# thread's profile, OPS operations.
dump=()
[[ -n "${LINES:-}" ]] && dump=(--dump-instr=yes --compress-pos=no --compress-strings=no)
lines() { # profile ops
    [[ -z "${LINES:-}" ]] || python3 perf/lines.py "$1" "$BIN" "$2" "$LINES"
}
if [[ "${WORKER:-0}" == 1 ]]; then
    printf '%-10s %12s %10s\n' workload "worker instr/op" "ops"
    for one in ${@:-chain}; do
        stats=$(valgrind --tool=callgrind --fair-sched=yes --separate-threads=yes "${dump[@]}" \
            --callgrind-out-file="$out/$one" "$BIN" --no-probe --engines per_device --threads 1 \
            --workloads "$one" --w 0 --n "$N" --reps 1 --stats 2>&1 | grep -o 'ran [0-9]* on workers')
        ran=${stats//[^0-9]/}
        worker=""
        for f in "$out/$one"-*; do
            # The worker's thread: its loop, or (LTO inlines the loop) its
            # thread entry, in per_device.rs.
            if callgrind_annotate --inclusive=yes "$f" 2>/dev/null | grep -E "per_device::Shared::work|per_device.rs:std::sys::backtrace::__rust_begin_short_backtrace" >/dev/null; then worker=$f; fi
        done
        if [[ -z "$worker" || -z "$ran" || "$ran" == 0 ]]; then
            echo "perf/instructions.sh: the worker ran nothing for $one" >&2
            exit 1
        fi
        total=$(callgrind_annotate "$worker" 2>/dev/null | grep 'PROGRAM TOTALS' | awk '{gsub(",", "", $1); print $1}')
        awk -v t="$total" -v n="$ran" -v w="$one" 'BEGIN { printf "%-10s %12.1f %10d\n", w, t / n, n }'
        lines "$worker" "$ran"
    done
    exit 0
fi
engine=naive
if [[ "${DIRECT:-0}" == 1 ]]; then
    engine="per_device+pusher --threads 1"
    export DEPENGINE_MAX_PENDING=16 DEPENGINE_INLINE_PACE_NS=1000000000
elif [[ "${PUSHER:-0}" == 1 ]]; then
    engine="per_device --threads 1"
fi
printf '%-10s %12s\n' workload "instr/op"
for w in "${@:-nodeps chain chains64 fanout random layered}"; do
    for one in $w; do
        # shellcheck disable=SC2086 # $engine is the engine and its options
        valgrind --tool=callgrind --fair-sched=yes --separate-threads=yes "${dump[@]}" --callgrind-out-file="$out/$one" \
            "$BIN" --no-probe --engines $engine --workloads "$one" --w 0 --n "$N" --reps 1 >/dev/null 2>&1
        # The pushing thread's file: the one whose count of $FUNC is the
        # largest (a worker's runs none of it).
        total=""
        pushing=""
        for f in "$out/$one"-*; do
            t=$(callgrind_annotate --inclusive=yes "$f" 2>/dev/null |
                grep -F "$FUNC" | grep -v '=>' | head -1 | awk '{gsub(",", "", $1); print $1}' || true)
            if [[ -n "$t" && ( -z "$total" || "$t" -gt "$total" ) ]]; then total=$t; pushing=$f; fi
        done
        if [[ -z "$total" ]]; then
            echo "perf/instructions.sh: no samples for $FUNC in $one" >&2
            exit 1
        fi
        awk -v t="$total" -v n="$N" -v w="$one" 'BEGIN { printf "%-10s %12.1f\n", w, t / (2 * n) }'
        lines "$pushing" "$((2 * N))"
    done
done
