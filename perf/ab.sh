#!/usr/bin/env bash
# Alternating A/B of two depengine-perf binaries: runs A, B, A, B, … ROUNDS
# times with the same arguments, then prints per row (engine, workload, W)
# the median ns/op of each (pingpong: its p50, shown as W=p50), B ÷ A of
# the medians and of the minima, the
# median of the rounds' own B ÷ A ("pairs", with how many rounds B won),
# and every round's figure. On a shared machine whose speed drifts by 10–50 %
# within minutes, only figures taken in turn like this compare two builds.
#
#   perf/ab.sh ROUNDS BIN_A BIN_B -- <depengine-perf arguments>
#   perf/ab.sh 20 /tmp/before/depengine-perf target/release/depengine-perf \
#       -- --engines pooled,per_device --w 0 --n 200000 --reps 3
#
# Build the "before" binary from a worktree of the older commit
# (`git worktree add /tmp/before <rev> && cargo build --release -p
# depengine-perf --manifest-path /tmp/before/Cargo.toml`) and copy it
# aside. The raw rounds are kept in $AB_RAW (default: a temporary file).
#
# TURNS=1: A and B run at the same time and take turns repetition by
# repetition (`--take-turns`, perf/src/turns.rs), and each of their timed
# repetitions is a pair (`--reps-out`): the k-th repetitions of A and B are
# tens of ms apart instead of whole runs, so a change of the host's state
# (every second or two on these hosts) splits far fewer pairs. Both
# binaries must know the two options (built from 2026-11-26 on).
set -euo pipefail
if [[ $# -lt 4 || "$4" != "--" ]]; then
    sed -n '2,24p' "$0" >&2
    exit 2
fi
rounds=$1 a=$2 b=$3
shift 4
raw="${AB_RAW:-$(mktemp)}"
: > "$raw"
if [[ -n "${TURNS:-}" ]]; then
    pipes=$(mktemp -d)
    trap 'rm -rf "$pipes"' EXIT
    for _ in $(seq "$rounds"); do
        rm -f "$pipes"/*
        mkfifo "$pipes/to_first" "$pipes/to_second"
        "$a" "$@" --take-turns "first:$pipes" --reps-out "$pipes/A" >/dev/null 2>"$pipes/A.err" &
        "$b" "$@" --take-turns "second:$pipes" --reps-out "$pipes/B" >/dev/null 2>"$pipes/B.err" &
        # A side that fails before it opens the pipes would leave the other
        # blocked in its open: stop both at the first failure.
        for _ in 1 2; do
            if ! wait -n; then
                kill $(jobs -p) 2>/dev/null || true
                echo "perf/ab.sh: a side failed (both binaries need --take-turns):" >&2
                cat "$pipes/A.err" "$pipes/B.err" >&2
                exit 1
            fi
        done
        for side in A B; do
            sed "s/^/$side /" "$pipes/$side" >> "$raw"
        done
    done
else
    for _ in $(seq "$rounds"); do
        for side in A B; do
            bin=$a
            [[ $side == B ]] && bin=$b
            # Throughput rows (engine workload W N ns/op …) and pingpong rows
            # (engine pingpong - N p50 …), whose p50 is compared.
            "$bin" "$@" 2>/dev/null | awk -v s="$side" '
                $3 ~ /^[0-9]+$/ && $4 ~ /^[0-9]+$/ { print s, $1, $2, $3, $5 }
                $2 == "pingpong" && $3 == "-" && $4 ~ /^[0-9]+$/ { print s, $1, $2, "p50", $5 }' >> "$raw"
        done
    done
fi
python3 - "$raw" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    side, engine, workload, w, ns = line.split()
    rows[(engine, workload, w, side)].append(float(ns))
for key in sorted({k[:3] for k in rows}):
    a, b = rows.get(key + ("A",), []), rows.get(key + ("B",), [])
    if not a or not b:
        continue
    ma, mb = statistics.median(a), statistics.median(b)
    # Round by round (TURNS=1: repetition by repetition): B ÷ A of the
    # same round, which a slow spell spanning the round affects on both
    # sides.
    pairs = sorted(y / x for x, y in zip(a, b))
    wins = sum(r < 1 for r in pairs)
    print(f"{key[0]:<11}{key[1]:<9}W={key[2]:<5} A {ma:8.1f}  B {mb:8.1f}  B/A {mb / ma:5.2f}  min B/A {min(b) / min(a):5.2f}"
          f"  pairs {statistics.median(pairs):5.2f} (B<A {wins}/{len(pairs)})"
          f"   A:{[round(x) for x in a]} B:{[round(x) for x in b]}")
PY
