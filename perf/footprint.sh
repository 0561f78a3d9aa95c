#!/usr/bin/env bash
# The cache lines one push-then-wait round trip touches: exact and
# repeatable, like perf/instructions.sh, where a timing on a shared host is
# not. A round trip's footprint is what a thread pays for when a neighbour
# shares its core's caches (PERF.md, "the round trip's footprint").
#
#   perf/footprint.sh                 per_device and naive
#   perf/footprint.sh pooled          some engines
#   SHOW=1 perf/footprint.sh naive    also list the lines, by 4 KB page
#
# Builds examples/footprint.rs, runs it under valgrind's lackey with every
# data access traced (`--trace-mem=yes`), cuts the trace at the example's
# marker swaps into round trips, and prints per engine the distinct 64-byte
# lines of a round trip (median, min, max over the measured ones) and how
# many of them are the stack's (the rest: statics, thread-locals, the
# engine's core, pools and executor; SHOW=1 lists them by page). All threads'
# accesses are in the trace; per_device's idle workers nap through the
# loop, so a round trip's figure is the waiting thread's own.
#
# Installs valgrind with apt when it is missing (scripts/apt_install.sh).
# Takes about a minute per engine.
#
# Builds the example with cargo's release profile into $CARGO_TARGET_DIR
# (default `target`): with the profile's settings overridden
# (`CARGO_PROFILE_RELEASE_LTO=…`) and a target directory of its own, it
# counts another build.
set -euo pipefail
cd "$(dirname "$0")/.."
engines=("$@")
[[ ${#engines[@]} -gt 0 ]] || engines=(per_device naive)
command -v valgrind >/dev/null || scripts/apt_install.sh valgrind
cargo build --release -q --example footprint
bin=${CARGO_TARGET_DIR:-target}/release/examples/footprint
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for engine in "${engines[@]}"; do
    valgrind --tool=lackey --trace-mem=yes --log-file="$out/trace" "$bin" "$engine" 2>"$out/marker"
    marker=$(sed -n 's/^marker 0x\([0-9a-f]*\)$/\1/p' "$out/marker")
    [[ -n "$marker" ]] || { echo "footprint: no marker from the example" >&2; cat "$out/marker" >&2; exit 1; }
    ENGINE="$engine" MARKER="$marker" SHOW="${SHOW:-0}" python3 - "$out/trace" <<'EOF'
import collections, os, sys

marker = int(os.environ["MARKER"], 16)
trips, current = [], None
with open(sys.argv[1]) as trace:
    for line in trace:
        # Data accesses: " L addr,size", " S …", " M …" (instructions: "I …").
        if len(line) < 4 or line[0] != " " or line[1] not in "LSM":
            continue
        addr = int(line[3:].split(",")[0], 16)
        if line[1] == "M" and addr == marker:
            if current is not None:
                trips.append(current)
            current = set()
        elif current is not None:
            current.add(addr >> 6)
if not trips:
    sys.exit("footprint: no measured round trip in the trace")

# valgrind maps the main thread's stack near 0x1fff000000, above
# everything else (the binary's statics, the heap, the mmap region that
# holds the thread-locals and the pools' segments).
def on_stack(line):
    return (line << 6) >= 0x1000000000

sizes = sorted(len(t) for t in trips)
mid = trips[len(trips) // 2]
stack = sum(1 for l in mid if on_stack(l))
engine = os.environ["ENGINE"]
print(f"{engine:11s} {sizes[len(sizes) // 2]:4d} lines a round trip (min {sizes[0]}, max {sizes[-1]}, "
      f"{len(trips)} round trips): {stack} of the stack, {len(mid) - stack} elsewhere")
if os.environ["SHOW"] == "1":
    pages = collections.defaultdict(list)
    for l in sorted(mid):
        pages[(l << 6) >> 12].append((l << 6) & 0xFFF)
    for page, offsets in sorted(pages.items()):
        print(f"    page {page << 12:#x}: {len(offsets):2d} lines at " + " ".join(f"{o:03x}" for o in offsets))
EOF
done
