#!/usr/bin/env bash
# The scaling rows on a lent many-core machine (the accelerator machine's
# 16 CPUs), which has no network: build here, carry the harness and the
# libraries it links, run there.
#
#   perf/device.sh build     here: builds the harness into target/device/
#                            with libhwloc and libudev beside it (about 9 MB)
#   perf/device.sh run       there: the scaling rows (perf/scaling.sh:
#                            workers 2,4,8,15, pushers 1,2,4,8, W=0 and
#                            W=1000, every throughput workload, both modes
#                            of per_device) into $OUT (or target/device/out)
#
# With the device tool: `run` with carry ["target/device"] and the command
# `perf/device.sh run`, timeout_s 540; the report comes back under $OUT.
# QUICK=1 for a smoke run (N/100).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=target/device
case "${1:-}" in
build)
    scripts/setup.sh
    cargo build --release -p depengine-perf
    mkdir -p "$dir"
    cp target/release/depengine-perf "$dir/"
    for lib in $(ldd "$dir/depengine-perf" | awk '/libhwloc|libudev/ { print $3 }'); do cp -L "$lib" "$dir/"; done
    ls -l "$dir"
    ;;
run)
    export LD_LIBRARY_PATH="$PWD/$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    out=${OUT:-$dir/out}
    nproc
    if ldd "$dir/depengine-perf" | grep "not found"; then
        echo "perf/device.sh: a library the harness links is missing (above)" >&2
        exit 1
    fi
    export ENGINES=${ENGINES:-per_device,per_device+pusher}
    export WORKLOADS=${WORKLOADS:-nodeps,chain,chains64,fanout,random,layered}
    BIN="$dir/depengine-perf" OUT_DIR="$out" perf/scaling.sh
    ;;
*)
    sed -n '2,15p' "$0" >&2
    exit 2
    ;;
esac
