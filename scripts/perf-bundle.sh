#!/usr/bin/env bash
# Builds, here, the workload table's harness and the C++ peers that need no
# installed runtime beyond their shared libraries (OpenMP on libgomp and on
# libomp, oneTBB flow graph, Taskflow), with those libraries, into one folder
# with a `run.sh`: for a machine that has no compilers (the GPU machine,
# PERF.md "2026-11-27, second session"). StarPU and MXNet's engine are left
# out (StarPU's runtime is a tree of libraries; libmxnet.so alone is 150 MB).
#
#   scripts/perf-bundle.sh [DIR]        # default: target/perf-bundle
#   DIR/run.sh [OUT]                    # there; default OUT: DIR/out
#
# run.sh takes the table with the peers on the first two CPUs (`taskset -c
# 0,1`, two workers: the machines of PEERS.md have two) and, where there
# are more, on every CPU; each at W=0 (with pingpong) and at W=1000, and
# writes each run's text, markdown and JSON under OUT. PAIRS (default 2)
# rounds per row at W=0, one at W=1000; N0 / N1000 operations (200,000 /
# 50,000 on two CPUs, 100,000 on all). Only the C library must match
# there.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=${1:-target/perf-bundle}
build=${BUILD_DIR:-/tmp/depengine-peers}
BUILD_ONLY=1 NO_SLOW_PEERS=1 BUILD_DIR="$build" perf/report.sh
cargo build --release -p depengine-perf

rm -rf "$dir"
mkdir -p "$dir/lib"
cp target/release/depengine-perf "$dir/"
peers=()
for p in omp-gcc omp-clang tbb-flow taskflow; do
    if [[ -x "$build/$p" ]]; then
        cp "$build/$p" "$dir/"
        peers+=("$p")
    else
        echo "perf-bundle: peer $p was not built: left out" >&2
    fi
done
# Every shared library they load but the C library's own, and oneTBB's
# allocator, which it opens at run time.
for b in "$dir"/*; do
    [[ -f "$b" ]] && ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
done | sort -u | grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so' | while read -r lib; do
    cp -L "$lib" "$dir/lib/"
done
tbbmalloc=$(ldconfig -p | awk '/libtbbmalloc\.so\.2 / { print $NF; exit }')
[[ -n "$tbbmalloc" ]] && cp -L "$tbbmalloc" "$dir/lib/"

{
    echo '#!/usr/bin/env bash'
    echo '# Runs the bundle that scripts/perf-bundle.sh built (see there).'
    echo 'set -u'
    echo 'here="$(cd "$(dirname "$0")" && pwd)"'
    echo 'out="$(mkdir -p "${1:-$here/out}" && cd "${1:-$here/out}" && pwd)"'
    echo 'export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"'
    echo 'cd "$here"'
    printf 'peers=('
    for p in "${peers[@]}"; do printf -- '--peer %s=./%s ' "$p" "$p"; done
    echo ')'
    cat <<'RUN'
{ nproc; lscpu | grep -E 'Model name|Socket|Thread|NUMA node\(s\)|L2|L3'; } > "$out/machine.txt" 2>&1
failed=0
table() { # name, taskset CPU list or "", then harness options
    local name=$1 cpus=$2
    shift 2
    local pin=()
    [[ -n $cpus ]] && pin=(taskset -c "$cpus")
    local t0=$SECONDS
    "${pin[@]}" ./depengine-perf "$@" "${peers[@]}" --json "$out/$name.json" --markdown "$out/$name.md" \
        > "$out/$name.txt" 2>&1 || failed=1
    echo "$name: $((SECONDS - t0)) s"
}
throughput=(--workloads nodeps,chain,chains64,fanout,random,layered)
table cpus2-w0 0,1 --threads 2 --pairs "${PAIRS:-2}" --reps 3 --w 0 --n "${N0:-200000}"
table cpus2-w1000 0,1 --threads 2 --pairs 1 --reps 3 --w 1000 --n "${N1000:-50000}" "${throughput[@]}"
if (($(nproc) > 2)); then
    table cpus"$(nproc)"-w0 "" --pairs "${PAIRS:-2}" --reps 3 --w 0 --n "${N0:-200000}"
    table cpus"$(nproc)"-w1000 "" --pairs 1 --reps 3 --w 1000 --n "${N1000:-100000}" "${throughput[@]}"
fi
exit $failed
RUN
} > "$dir/run.sh"
chmod +x "$dir/run.sh"
echo "perf-bundle: $(find "$dir" -type f | wc -l) files in $dir ($(du -sh "$dir" | cut -f1)); run $dir/run.sh there"
