#!/usr/bin/env bash
# Takes the full set of figures that PERF.md's tables come from, in one command:
#
#   perf/report.sh            full run (tens of minutes on 2 cores)
#   QUICK=1 perf/report.sh    smoke run (N/100, 2 repetitions; do not publish)
#
# 1. scripts/setup.sh (hwloc), and the peers' compilers with apt
#    (scripts/apt_install.sh; without root or sudo the peers that need
#    them fail to build and are left out);
# 2. builds the C++ peers of ../shared/peers/cxx where that directory exists
#    (OpenMP on libgomp and on libomp, oneTBB flow graph, Taskflow, StarPU)
#    and MXNet's engine from ../shared/peers/mxnet (the mxnet 1.9.1 wheel's
#    libmxnet.so, fetched with pip; run through perf/peers/mxnet.sh); a peer
#    that does not build is reported and left out (NO_SLOW_PEERS=1 leaves
#    out StarPU and MXNet, which take most of the run's time);
# 3. runs the harness on every workload, every engine and every peer, each
#    row PAIRS times with engines and peers in turn (default 3), and takes
#    `chain` ÷ `nodeps` at W=0 side by side (CHAIN_PAIRS pairs, default 15),
#    writing
#    perf/reports/<date>.{txt,json,svg,md} (REPORT_NAME=<name> instead of
#    the date: a second run of a day); then, with two CPUs or more, runs
#    our engines' parallel W=1000 rows again confined to one CPU
#    (`taskset`: no line crosses between cores, so each ratio to the floor
#    reads 1 + the engine's own work over one body; NO_ONE_CPU=1 skips
#    it), into <stamp>.one-cpu.{txt,md}, and adds that section to the
#    markdown; then runs the same rows once more with the bodies'
#    timeline (`--timeline`, `perf/timeline.py --markdown`: per
#    operation, the workers' gaps and time away; NO_TIMELINE=1 skips
#    it), into <stamp>.timeline.{txt,md}, and adds that section too;
# 4. runs the criterion suite of the engine's parts into
#    <stamp>.bench.txt and its medians into <stamp>.floors.md (NO_BENCH=1
#    skips it).
#
# PERF.md's tables are updated by hand from <stamp>.md (keep one report per
# figure PERF.md cites; the notes of a run go to perf/journal/).
#
# BUILD_ONLY=1 stops after step 2, with the peers built in $BUILD_DIR
# (default /tmp/depengine-peers): what scripts/perf-bundle.sh carries to a
# machine with no compilers.
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS="${PAIRS:-3}"
PEERS_DIR="${PEERS_DIR:-../shared/peers/cxx}"
MXNET_DIR="${MXNET_DIR:-../shared/peers/mxnet}"
SLOW="$([[ "${NO_SLOW_PEERS:-0}" == 1 ]] && echo 0 || echo 1)"
BUILD="${BUILD_DIR:-/tmp/depengine-peers}"
mkdir -p "$BUILD" perf/reports

scripts/setup.sh
peers=()
if [[ -d "$PEERS_DIR" ]]; then
    need=()
    for p in g++ clang libomp-dev libtbb-dev libstarpu-dev pkg-config; do dpkg -s "$p" >/dev/null 2>&1 || need+=("$p"); done
    if ((${#need[@]})); then
        # Status 1: no root or sudo (go on without them); apt failing stops the run.
        scripts/apt_install.sh --no-install-recommends "${need[@]}" || {
            rc=$?
            ((rc == 1)) || exit "$rc"
        }
    fi
    build() { # name, then the compile command
        local name=$1; shift
        if "$@" >"$BUILD/$name.log" 2>&1; then peers+=(--peer "$name=$BUILD/$name"); echo "   built peer $name"
        else echo "   !! peer $name did not build (see $BUILD/$name.log): left out"; fi
    }
    echo "== building the peers from $PEERS_DIR"
    build omp-gcc g++ -O2 -std=c++17 -fopenmp "$PEERS_DIR/omp_tasks.cpp" -o "$BUILD/omp-gcc"
    build omp-clang clang++ -O2 -std=c++17 -fopenmp "$PEERS_DIR/omp_tasks.cpp" -o "$BUILD/omp-clang"
    build tbb-flow g++ -O2 -std=c++17 -pthread "$PEERS_DIR/tbb_flow.cpp" -o "$BUILD/tbb-flow" -ltbb
    build taskflow g++ -O2 -std=c++20 -pthread -I"$PEERS_DIR/vendor/taskflow" "$PEERS_DIR/taskflow_peer.cpp" -o "$BUILD/taskflow"
    if [[ $SLOW == 1 ]]; then
        export STARPU_HOME=/tmp/starpu-home STARPU_SILENT=1
        build starpu bash -c "g++ -O2 -std=c++17 -pthread '$PEERS_DIR/starpu_peer.cpp' -o '$BUILD/starpu' \$(pkg-config --cflags --libs starpu-1.3)"
    fi
else
    echo "== no peers: $PEERS_DIR does not exist (set PEERS_DIR); depengine's engines only"
fi

if [[ $SLOW == 1 && -d "$MXNET_DIR" ]]; then
    # The real MXNet engine: the wheel holds libmxnet.so and its C++ headers
    # (built with the old C++ ABI, hence the flag; see mxbench.cc).
    mxbuild() {
        local pkg="$BUILD/mxnet-wheel/mxnet"
        if [[ ! -f "$pkg/libmxnet.so" ]]; then
            python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
                --python-version 3.11 mxnet==1.9.1 -d "$BUILD/mxnet-dl" &&
                rm -rf "$BUILD/mxnet-wheel" && mkdir -p "$BUILD/mxnet-wheel" &&
                python3 -m zipfile -e "$BUILD"/mxnet-dl/mxnet-1.9.1-*.whl "$BUILD/mxnet-wheel" || return 1
        fi
        g++ -std=c++14 -O2 -w -D_GLIBCXX_USE_CXX11_ABI=0 -DMSHADOW_USE_CUDA=0 -DMSHADOW_USE_MKL=0 \
            -DMSHADOW_USE_CBLAS=0 -DMXNET_USE_CUDA=0 -DDMLC_USE_CXX11=1 -I"$pkg/include" \
            -I"$pkg/include/mshadow" -I"$pkg/include/dlpack" "$MXNET_DIR/mxbench.cc" -o "$BUILD/mxbench" \
            -L"$pkg" -lmxnet -Wl,-rpath,"$pkg" -lpthread
    }
    echo "== building MXNet's engine harness from $MXNET_DIR"
    if mxbuild >"$BUILD/mxnet.log" 2>&1; then
        export MXBENCH="$BUILD/mxbench"
        peers+=(--peer "mxnet=perf/peers/mxnet.sh"); echo "   built peer mxnet"
    else echo "   !! peer mxnet did not build (see $BUILD/mxnet.log): left out"; fi
fi

if [[ "${BUILD_ONLY:-0}" == 1 ]]; then
    echo "== BUILD_ONLY=1: the peers are in $BUILD"
    exit 0
fi

stamp="perf/reports/${REPORT_NAME:-$(date +%Y-%m-%d)}"
quick=()
[[ "${QUICK:-0}" == 1 ]] && quick=(--quick) && stamp="$stamp-quick"
echo "== depengine-perf → $stamp.{txt,json,svg,md}"
cargo run --release -q -p depengine-perf -- "${quick[@]}" --pairs "$PAIRS" --chain-pairs "${CHAIN_PAIRS:-15}" "${peers[@]}" \
    --json "$stamp.json" --svg "$stamp.svg" --markdown "$stamp.md" | tee "$stamp.txt"

# Our engines' parallel W=1000 rows, which the two passes below run again.
w1000_rows=(--engines pooled,per_device --workloads nodeps,chains64,fanout,random,layered --w 1000)

# The W=1000 rows on one CPU: the engine's own work, with nothing crossing.
# The CPUs this process may use: how many, and the first of them.
read -r cpus first < <(python3 -c 'import os; a = os.sched_getaffinity(0); print(len(a), min(a))')
if [[ "${NO_ONE_CPU:-0}" != 1 && $cpus -gt 1 ]] && command -v taskset >/dev/null; then
    echo "== our engines' W=1000 rows on CPU $first alone → $stamp.one-cpu.{txt,md}"
    taskset -c "$first" cargo run --release -q -p depengine-perf -- "${quick[@]}" --pairs "$PAIRS" "${w1000_rows[@]}" \
        --markdown "$stamp.one-cpu.md" | tee "$stamp.one-cpu.txt"
    {
        printf '\n### W = 1000 on one CPU: the engine'"'"'s own work\n\n'
        printf 'Our engines'"'"' parallel rows again, every thread on CPU %s (`taskset`; perf/journal/2026-11-28.md, fifteenth session).\n\n' "$first"
        # Its headings one level down, under this one.
        sed 's/^### /#### /' "$stamp.one-cpu.md"
    } >> "$stamp.md"
fi

# The W=1000 rows once more, each body recording when it ran: where each
# row's time over its floor goes, per operation (the timelines themselves,
# 2-3 MB a row, go to a temporary folder).
if [[ "${NO_TIMELINE:-0}" != 1 ]]; then
    echo "== our engines' W=1000 rows with the bodies' timeline → $stamp.timeline.{txt,md}"
    timelines="$(mktemp -d)"
    cargo run --release -q -p depengine-perf -- "${quick[@]}" "${w1000_rows[@]}" --timeline "$timelines" \
        | tee "$stamp.timeline.txt"
    python3 perf/timeline.py --markdown "$timelines"/*.tsv > "$stamp.timeline.md"
    rm -rf "$timelines"
    {
        printf '\n### W = 1000: where the time goes (the bodies'"'"' timeline)\n\n'
        printf 'Our engines'"'"' parallel rows once more (one round, after the rows above), each body recording when it ran and on which thread (`--timeline`, `perf/timeline.py --markdown`; perf/journal/2026-11-28.md, sixteenth session). Per operation, over the workers: the gaps between two bodies of a worker (the engine'"'"'s work there), its gaps over 5 µs (time away: the pusher had its CPU, or nothing was ready), and bodies, gaps and time away over one body, which is the workers'"'"' time per operation over one body and so what the row reads over the floor of its workers. The round trips of this pass are in %s.\n\n' "\`$stamp.timeline.txt\`"
        cat "$stamp.timeline.md"
    } >> "$stamp.md"
fi

echo "== the report: $stamp.md (PERF.md is updated from it by hand)"

# 5. the one-thread floors of the parts: the criterion suite (NO_BENCH=1 skips).
if [[ "${NO_BENCH:-0}" != 1 ]]; then
    echo "== criterion floors: cargo bench -p depengine --features bench-internals"
    rm -rf target/criterion
    bench_args=()
    [[ "${QUICK:-0}" == 1 ]] && bench_args=(-- --quick)
    cargo bench -q -p depengine --features bench-internals --bench '*' "${bench_args[@]}" > "$stamp.bench.txt" 2>&1
    python3 perf/floors.py target/criterion > "$stamp.floors.md"
    echo "== the parts' floors: $stamp.floors.md"
fi
