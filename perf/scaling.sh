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
# Each point is one harness run (`--threads T --pushers P --json`); the
# worker series runs one pusher, the pusher series two workers... or the
# most workers asked for, whichever this machine has. Writes
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
quick=()
[[ -n "${QUICK:-}" ]] && quick=(--quick)
run() { # threads pushers
    "$bin" --engines "$engines" --workloads "$workloads" --w "$weights" --threads "$1" --pushers "$2" \
        --no-probe "${quick[@]}" --json "$out/t$1-p$2.json" | tee "$out/t$1-p$2.txt"
}
most=2
for t in ${workers//,/ }; do
    if (( t > cpus )); then echo "== $t workers: more than the $cpus CPUs here, skipped"; continue; fi
    most=$t
    echo "== $t workers, 1 pusher"
    run "$t" 1
done
for p in ${pushers//,/ }; do
    (( p == 1 )) && continue
    if (( p > cpus )); then echo "== $p pushers: more than the $cpus CPUs here, skipped"; continue; fi
    echo "== $most workers, $p pushers"
    run "$most" "$p"
done
python3 perf/scaling.py "$out"
