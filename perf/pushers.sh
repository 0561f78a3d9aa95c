#!/usr/bin/env bash
# The many-pusher target: P pushers' aggregate throughput over one
# pusher's, each on variables of its own (`--pushers`), taken in turns:
# ROUNDS processes of 1 pusher and of P pushers alternated, since the
# host's state (and, per process, where a pool's blocks land) moves the
# figures. Prints per row the median ns/op of each, their ratio
# (throughput of P over 1) and the median of the rounds' own ratios.
#
#   perf/pushers.sh [ROUNDS [P]] [-- <depengine-perf arguments>]
#   perf/pushers.sh                 10 rounds, 2 pushers, the two-core rows:
#       --engines per_device,per_device+pusher
#       --workloads nodeps,chain,chains64,random --w 0 --n 400000 --reps 3
#   BIN=/tmp/old/depengine-perf perf/pushers.sh 6 2   another build
#   perf/pushers.sh 10 2 -- <the arguments above> --share   P pushers on one
#       set of variables (the shared-variable target: `chain` is one variable)
#
# The raw rounds are kept in $PUSHERS_RAW (default: a temporary file).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=10
pushers=2
if [[ $# -gt 0 && "$1" != "--" ]]; then rounds=$1; shift; fi
if [[ $# -gt 0 && "$1" != "--" ]]; then pushers=$1; shift; fi
[[ "${1:-}" == "--" ]] && shift
args=("$@")
if [[ ${#args[@]} -eq 0 ]]; then
    args=(--engines per_device,per_device+pusher --workloads nodeps,chain,chains64,random --w 0 --n 400000 --reps 3)
fi
if [[ -z "${BIN:-}" ]]; then
    scripts/setup.sh
    cargo build --release -q -p depengine-perf
    BIN=target/release/depengine-perf
fi
raw="${PUSHERS_RAW:-$(mktemp)}"
: >"$raw"
for ((r = 1; r <= rounds; r++)); do
    for p in 1 "$pushers"; do
        # Rows: "<engine>[+Npushers] <workload> <W> <N> <ns/op> …".
        "$BIN" --no-probe "${args[@]}" --pushers "$p" 2>/dev/null |
            awk -v p="$p" '$5 ~ /^[0-9.]+$/ && $3 ~ /^[0-9]+$/ { sub(/\+[0-9]+pushers(-shared)?$/, "", $1); print p, $1, $2, $3, $5 }' >>"$raw"
    done
done
PUSHERS="$pushers" python3 - "$raw" <<'EOF'
import collections, os, statistics, sys

p = os.environ["PUSHERS"]
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    n, engine, workload, w, ns = line.split()
    runs[(engine, workload, w, n)].append(float(ns))
rows = sorted({k[:3] for k in runs})
print(f"{'row':32} {'1 pusher':>9} {p + ' pushers':>10} {'×':>6} {'pairs ×':>8}   {p} pushers' rounds")
for engine, workload, w in rows:
    one, many = runs.get((engine, workload, w, "1"), []), runs.get((engine, workload, w, p), [])
    if not one or not many:
        continue
    a, b = statistics.median(one), statistics.median(many)
    pairs = statistics.median(x / y for x, y in zip(one, many))
    name = f"{engine} {workload} W={w}"
    print(f"{name:32} {a:9.1f} {b:10.1f} {a / b:6.2f} {pairs:8.2f}   {[round(x, 1) for x in many]}")
EOF
