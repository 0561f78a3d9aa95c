#!/usr/bin/env bash
# Builds, here, everything a GPU check needs, for a machine that has a CUDA
# GPU but no Rust toolchain: every test binary of the workspace built with
# the `cuda` feature (tests/gpu.rs among them), the `gpu_overhead` example
# and the perf harness, stripped, into one folder with a `run.sh` that runs
# them there. Copy the folder over and run `DIR/run.sh`: it runs
# tests/gpu.rs (ignored elsewhere) GPU_ROUNDS times (default 3), then
# every other test binary once with the GPU rings present, then the
# overhead example, and exits non-zero if any test failed.
#
#   scripts/gpu-bundle.sh [DIR]          # default: target/gpu-bundle
#   GPU_ROUNDS=0 DIR/run.sh              # no GPU: everything but tests/gpu.rs
#
# The binaries are x86-64 Linux builds of this machine's toolchain; NVRTC
# (libnvrtc.so) must be on the loader's path there, run.sh adds
# /usr/local/cuda/lib64. docs/gpu-rings.md ("Tests") says what each GPU
# test checks.
set -euo pipefail
cd "$(dirname "$0")/.."
"$(dirname "$0")/setup.sh"

dir=${1:-target/gpu-bundle}
rm -rf "$dir"
mkdir -p "$dir"

# `--message-format` would need a JSON parser; cargo's own summary names
# each test executable as "Executable <target> (<path>)".
mapfile -t tests < <(cargo test --release --workspace --features depengine/cuda --no-run 2>&1 |
    sed -n 's/^ *Executable .*(\(.*\))$/\1/p')
if [ "${#tests[@]}" -eq 0 ]; then
    echo "gpu-bundle: cargo listed no test executables" >&2
    exit 1
fi
cargo build --release --features cuda --example gpu_overhead
cargo build --release -p depengine-perf

for t in "${tests[@]}"; do
    strip -o "$dir/$(basename "$t")" "$t"
done
strip -o "$dir/gpu_overhead" target/release/examples/gpu_overhead
strip -o "$dir/depengine-perf" target/release/depengine-perf

cat >"$dir/run.sh" <<'EOF'
#!/usr/bin/env bash
# Runs the bundle that scripts/gpu-bundle.sh built (see there).
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
rounds=${GPU_ROUNDS:-3}
failed=()
for ((r = 1; r <= rounds; r++)); do
    echo "== tests/gpu.rs, round $r of $rounds"
    ./gpu-* --ignored --test-threads 1 || failed+=("gpu round $r")
done
for t in *-*; do
    case $t in
    gpu-* | depengine-perf) continue ;;
    esac
    echo "== $t"
    ./"$t" -q || failed+=("$t")
done
if [ "$rounds" -gt 0 ]; then
    echo "== gpu_overhead"
    ./gpu_overhead || failed+=(gpu_overhead)
fi
if [ "${#failed[@]}" -gt 0 ]; then
    echo "FAILED: ${failed[*]}"
    exit 1
fi
echo "all passed"
EOF
chmod +x "$dir/run.sh"
echo "gpu-bundle: $(ls "$dir" | wc -l) files in $dir ($(du -sh "$dir" | cut -f1)); run $dir/run.sh on the GPU machine"
