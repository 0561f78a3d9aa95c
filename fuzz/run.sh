#!/usr/bin/env bash
# Builds the fuzz targets and runs each for a bounded time (see fuzz/README.md).
#
#   fuzz/run.sh                        each target for 60 s (what CI runs)
#   FUZZ_SECONDS=600 fuzz/run.sh       longer runs
#   FUZZ_TARGETS=schedule fuzz/run.sh  one target
#   FUZZ_SANITIZER=address fuzz/run.sh with AddressSanitizer (RUSTC_BOOTSTRAP=1, see README)
#
# New inputs go to fuzz/corpus/<target> (not committed); the committed seeds
# in fuzz/seeds/<target> are read as a second corpus. A crash leaves its input
# in fuzz/artifacts/<target> and fails the script.
set -euo pipefail
cd "$(dirname "$0")"
seconds=${FUZZ_SECONDS:-60}
targets=${FUZZ_TARGETS:-"schedule api_misuse pushers"}
sanitizer=${FUZZ_SANITIZER:-none}
if [[ "$sanitizer" != none ]]; then
  # cargo-fuzz passes -Zsanitizer, an unstable flag; stable rustc accepts it
  # with RUSTC_BOOTSTRAP=1.
  export RUSTC_BOOTSTRAP=1
fi
if ! command -v cargo-fuzz >/dev/null; then
  echo "== installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi
for t in $targets; do
  mkdir -p "corpus/$t"
  echo "== fuzz $t for ${seconds}s (sanitizer: $sanitizer)"
  cargo fuzz build -s "$sanitizer" "$t"
  log=$(mktemp)
  status=0
  cargo fuzz run -s "$sanitizer" "$t" "corpus/$t" "seeds/$t" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 >"$log" 2>&1 || status=$?
  # libFuzzer's progress lines are left out; a failure prints everything.
  if [[ $status != 0 ]]; then
    tail -n 80 "$log"
    echo "fuzz target $t failed (exit $status); its input is in fuzz/artifacts/$t"
    exit 1
  fi
  grep -E "^(stat::|Done)" "$log"
  rm -f "$log"
done
