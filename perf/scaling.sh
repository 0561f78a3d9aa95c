#!/usr/bin/env bash
# The scaling rows: each throughput workload on our engines with more
# workers and with more pushing threads, then a chart of ns/op against
# both (perf/scaling.py).
#
#   perf/scaling.sh                       workers 2,4,8,15 and pushers 1,2,4,8,
#                                         each capped at this machine's CPUs
#   WORKERS=2,4 PUSHERS=1,2 perf/scaling.sh
#   QUICK=1 perf/scaling.sh               a smoke run (N/100; do not publish)
#   BIN=path OUT_DIR=dir perf/scaling.sh  a harness built elsewhere (perf/device.sh)
#
# Each point is one harness run (`--threads T --pushers P --json`), with
# the machine probe on, so that each W=1000 row is read over the floor of
# its workers taken around it (`NO_PROBE=1`: without). The worker series
# runs one pusher; the pusher series runs PUSHER_WORKERS workers (default:
# the CPUs less the most pushers, at least 2: 8 on 16 CPUs, so that the
# threads fit the cores), and that many workers also run one pusher for
# the series' reference. Writes
# perf/reports/<stamp>.scaling/{*.json,scaling.svg,scaling.md}
# (REPORT_NAME=<name> instead of the date-time stamp).
set -euo pipefail
cd "$(dirname "$0")/.."
cpus=$(nproc)
workers=${WORKERS:-2,4,8,15}
pushers=${PUSHERS:-1,2,4,8}
engines=${ENGINES:-per_device,pooled}
workloads=${WORKLOADS:-nodeps,chains64,random,layered}
weights=${W:-0,1000}
stamp=${REPORT_NAME:-$(date -u +%Y-%m-%d-%H%M)}
out=${OUT_DIR:-perf/reports/$stamp.scaling}
mkdir -p "$out"
if [[ -n "${BIN:-}" ]]; then
    bin=$BIN # built elsewhere (perf/device.sh): no set-up, no build
else
    scripts/setup.sh
    cargo build --release -p depengine-perf
    bin=target/release/depengine-perf
fi
flags=()
[[ -n "${QUICK:-}" ]] && flags+=(--quick)
[[ -n "${NO_PROBE:-}" ]] && flags+=(--no-probe)
run() { # threads pushers
    [[ -e "$out/t$1-p$2.json" ]] && return # the worker series' point again
    "$bin" --engines "$engines" --workloads "$workloads" --w "$weights" --threads "$1" --pushers "$2" \
        "${flags[@]}" --json "$out/t$1-p$2.json" | tee "$out/t$1-p$2.txt"
}
for t in ${workers//,/ }; do
    if (( t > cpus )); then echo "== $t workers: more than the $cpus CPUs here, skipped"; continue; fi
    echo "== $t workers, 1 pusher"
    run "$t" 1
done
most_pushers=1
for p in ${pushers//,/ }; do (( p <= cpus && p > most_pushers )) && most_pushers=$p; done
pw=${PUSHER_WORKERS:-$(( cpus - most_pushers > 2 ? cpus - most_pushers : 2 ))}
for p in ${pushers//,/ }; do
    if (( p > cpus )); then echo "== $p pushers: more than the $cpus CPUs here, skipped"; continue; fi
    echo "== $pw workers, $p pushers"
    run "$pw" "$p"
done
python3 perf/scaling.py "$out"
