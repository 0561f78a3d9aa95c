#!/usr/bin/env bash
# MXNet's own engine as a depengine-perf peer: runs mxbench (the harness of
# ../shared/peers/mxnet, driving the real libmxnet.so of the mxnet 1.9.1
# wheel; perf/report.sh builds it) with the C++ peers' command line and
# prints their RESULT line, so the harness can interleave it with our engines.
#
#   mxnet.sh bench <workload> <W> [--n N] [--reps R] [--threads T]
#   mxnet.sh pingpong [--n COUNT] [--reps R] [--threads T]
#
# MXNET_ENGINE (default ThreadedEnginePerDevice, with T CPU workers) picks
# the engine; MXBENCH the binary (default /tmp/depengine-peers/mxbench).
set -euo pipefail
MXBENCH="${MXBENCH:-/tmp/depengine-peers/mxbench}"
[[ -x "$MXBENCH" ]] || { echo "mxnet peer: $MXBENCH not built (perf/report.sh builds it)" >&2; exit 2; }
mode="${1:-}"; shift || true
case "$mode" in
    bench) wl="$1"; w="$2"; shift 2 ;;
    pingpong) ;;
    *) echo "usage: $0 bench <workload> <W> | pingpong  [--n N] [--reps R] [--threads T]" >&2; exit 2 ;;
esac
n=""; reps=5; threads="$(nproc)"
while (($#)); do
    case "$1" in
        --n) n="$2"; shift 2 ;;
        --reps) reps="$2"; shift 2 ;;
        --threads) threads="$2"; shift 2 ;;
        *) echo "mxnet peer: unknown argument $1" >&2; exit 2 ;;
    esac
done
export OMP_NUM_THREADS=1 MXNET_CPU_WORKER_NTHREADS="$threads" MXNET_ENGINE_TYPE="${MXNET_ENGINE:-ThreadedEnginePerDevice}"
# One attempt, no waiting for a quiet machine: the harness alternates runs instead.
common=(--api cpp --reps "$reps" --no-verify --quiet-wait 0 --attempts 1 --accept 100)
if [[ "$mode" == bench ]]; then
    out="$("$MXBENCH" "${common[@]}" --only "$wl" --W "$w" --n0 "${n:-1000000}" --n1 "${n:-100000}" --no-pingpong)"
    # mxbench: RESULT engine api workload W N ns/op Mops/s ...
    awk '$1 == "RESULT" { printf "RESULT peer=mxnet workload=%s W=%s n=%s ns_per_op=%s\n", $4, $5, $6, $7 }' <<<"$out"
else
    # mxbench always runs a workload first; a tiny one.
    out="$("$MXBENCH" "${common[@]}" --only nodeps --W 0 --n0 1000 --npp "${n:-100000}")"
    # mxbench: PINGPONG engine api count p50 p99 p99.9 ...
    awk '$1 == "PINGPONG" { printf "RESULT peer=mxnet workload=pingpong count=%s p50_ns=%s p99_ns=%s p999_ns=%s\n", $4, $5, $6, $7 }' <<<"$out"
fi
grep -q '^RESULT\|^PINGPONG' <<<"$out" || { echo "mxnet peer: no result from mxbench" >&2; exit 1; }
