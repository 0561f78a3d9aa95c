#!/usr/bin/env bash
# Installs what depengine needs beyond the Rust toolchain: the system's
# hwloc library for the per_device engine's topology (the `hwloc` feature,
# which the perf harness and the workspace tests turn on). Idempotent and
# quick when everything is there; the README's commands and .ci/run call it.
set -euo pipefail

if pkg-config --exists hwloc 2>/dev/null && pkg-config --exists libudev 2>/dev/null; then
    exit 0
fi
packages=(pkg-config libhwloc-dev libudev-dev)
if [[ $(id -u) -eq 0 ]]; then
    sudo=()
elif command -v sudo >/dev/null; then
    sudo=(sudo)
else
    echo "scripts/setup.sh: need root (or sudo) to install ${packages[*]}" >&2
    exit 1
fi
echo "scripts/setup.sh: installing ${packages[*]}" >&2
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${packages[@]}" >/dev/null
