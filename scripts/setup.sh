#!/usr/bin/env bash
# Installs what depengine needs beyond the Rust toolchain: the system's
# hwloc library for the per_device engine's topology (the `hwloc` feature,
# which the perf harness and the workspace tests turn on). Idempotent and
# quick when everything is there; the README's commands and .ci/run call it.
set -euo pipefail

if pkg-config --exists hwloc 2>/dev/null && pkg-config --exists libudev 2>/dev/null; then
    exit 0
fi
"$(dirname "$0")/apt_install.sh" pkg-config libhwloc-dev libudev-dev
