#!/usr/bin/env bash
# Installs Debian packages with apt, as root or through sudo, for the
# project's scripts that need a system tool or library (scripts/setup.sh:
# hwloc; perf/instructions.sh and perf/footprint.sh: valgrind;
# perf/report.sh: the peers' compilers and libraries). Exits 1 with a
# message when neither root nor sudo is available, else with apt-get's
# status. Options for `apt-get install` may come before the packages.
#
#   scripts/apt_install.sh [--no-install-recommends] PACKAGE…
set -euo pipefail
(($#)) || { echo "scripts/apt_install.sh: name the packages" >&2; exit 2; }
if [[ $(id -u) -eq 0 ]]; then
    sudo=()
elif command -v sudo >/dev/null; then
    sudo=(sudo)
else
    echo "scripts/apt_install.sh: need root (or sudo) to install $*" >&2
    exit 1
fi
echo "scripts/apt_install.sh: installing $*" >&2
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "$@" >/dev/null
