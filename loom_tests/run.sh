#!/usr/bin/env bash
# Runs every loom model of depengine (see loom_tests/README.md).
#
#   loom_tests/run.sh          what CI runs: every model at LOOM_MAX_PREEMPTIONS=3,
#                              the heavy ones (marked #[ignore]) at 2
#   loom_tests/run.sh --long   the heavy ones at 3 as well (over 45 minutes: a run
#                              cut off there on the 2-core machine had not finished)
#
# Set LOOM_LOG=info to see each model's iteration count ("Completed in N iterations").
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="--cfg depengine_loom" CARGO_TARGET_DIR=target/loom
heavy_bound=2
[[ "${1:-}" == "--long" ]] && heavy_bound=3

echo "== loom: the engine's lock-free parts (LOOM_MAX_PREEMPTIONS=3)"
LOOM_MAX_PREEMPTIONS=3 cargo test --release -p depengine --lib loom_models
echo "== loom: the public API (LOOM_MAX_PREEMPTIONS=3)"
LOOM_MAX_PREEMPTIONS=3 cargo test --release -p depengine-loom-tests
echo "== loom: heavy models (LOOM_MAX_PREEMPTIONS=$heavy_bound)"
LOOM_MAX_PREEMPTIONS=$heavy_bound cargo test --release -p depengine --lib loom_models -- --ignored
