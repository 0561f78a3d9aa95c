#!/usr/bin/env bash
# The test suite under AddressSanitizer, ThreadSanitizer and Miri, as
# .ci/run runs it (README, "Robustness").
#
#   scripts/sanitizers.sh            all three
#   scripts/sanitizers.sh asan tsan  some of them
#
# asan  Stable toolchain with RUSTC_BOOTSTRAP=1 (the -Zsanitizer flag is
#       unstable); no instrumented std is needed. The library's unit tests
#       and every integration test of the crate, LeakSanitizer on. Left
#       out: doctests (rustdoc would need the flags as well, and they only
#       show the API), and one test that puts an address-space limit on
#       its process, which ASan's shadow memory cannot live under.
# tsan  Needs std itself instrumented (-Zbuild-std, so the rust-src
#       component), or every synchronisation through std (join, channels,
#       Mutex) is invisible to it and it reports false races. Uses the
#       nightly toolchain when it has rust-src, else stable with
#       RUSTC_BOOTSTRAP=1 and rust-src added with rustup. The same tests
#       as asan but the allocation counter's (its counts are not about
#       races, and TSan's runtime allocates behind its back). TSan does not
#       model standalone fences (`atomic::fence`, `membarrier`), which the
#       push path's handshakes use (`src/sync/barrier.rs`); the loom models check
#       those as fence pairs. A race it reported in tests/membarrier_off.rs
#       and the `*pushing_threads*` stress tests, once put down to that
#       blindness, was real: the combiner read an operation's variable
#       after the append that handed the block over (fixed in
#       `Core::dispatch`), so those tests run under TSan again.
# miri  Needs a nightly toolchain with the miri component (added with
#       rustup when missing). Miri runs about a thousand times slower, so
#       it runs the unit tests of the modules that hold the unsafe code it
#       can interpret (pools, the variable queue, inline closures, the
#       completion, thread slots, waits, the ready ring, the priority pool,
#       the unwind guard; MIRI_TESTS below), not their stress tests: the
#       engines' own tests spin and pin threads for longer than Miri can
#       run them, and tsan and the loom models cover them.
#
# A component that cannot be installed (no network, no nightly) makes its
# part print why it was skipped; SANITIZERS_STRICT=1 makes that a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
parts=("$@")
((${#parts[@]})) || parts=(asan tsan miri)
target=$(rustc -vV | sed -n 's/^host: //p')
strict=${SANITIZERS_STRICT:-0}

skip() {
    echo "== $1 skipped: $2"
    if [[ $strict == 1 ]]; then exit 1; fi
}

# Adds a rustup component to a toolchain unless it is there; bounded, since
# a component download can stall.
have_component() { # toolchain component
    rustup component list --toolchain "$1" --installed 2>/dev/null | grep -q "^$2" && return 0
    timeout 600 rustup component add "$2" --toolchain "$1" >/dev/null 2>&1
}

has_nightly() {
    rustup toolchain list 2>/dev/null | grep -q '^nightly'
}

asan() {
    echo "== AddressSanitizer: unit and integration tests (stable, RUSTC_BOOTSTRAP=1)"
    RUSTC_BOOTSTRAP=1 RUSTFLAGS="-Zsanitizer=address" CARGO_TARGET_DIR=target/asan \
        ASAN_OPTIONS="detect_leaks=1" LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp" \
        cargo test --target "$target" -p depengine --features hwloc --lib --tests \
        -- --skip build_reports_a_worker_it_cannot_start
}

tsan() {
    local toolchain=stable boot=(RUSTC_BOOTSTRAP=1)
    if has_nightly && have_component nightly rust-src; then
        toolchain=nightly boot=()
    elif ! have_component stable rust-src; then
        skip "ThreadSanitizer" "no rust-src component for -Zbuild-std (rustup component add rust-src)"
        return 0
    fi
    echo "== ThreadSanitizer: unit and integration tests ($toolchain, -Zbuild-std)"
    env "${boot[@]}" RUSTFLAGS="-Zsanitizer=thread" CARGO_TARGET_DIR=target/tsan TSAN_OPTIONS="halt_on_error=1" \
        cargo "+$toolchain" test -Zbuild-std --target "$target" -p depengine --features hwloc --lib --tests \
        -- --skip build_reports_a_worker_it_cannot_start --skip steady_state_push_run_complete_allocates_nothing
}

# The unit tests Miri runs (module paths; see the header), less the
# stress tests, whose thousands of rounds take Miri hours, and the tests of
# the address-space reservation, which Miri cannot map (under Miri the
# pools use the heap: `reservation.rs`).
MIRI_TESTS=(unwind:: inline_fn:: completion:: pool::tests:: var_queue::tests:: thread_slot::tests::
    wait::tests:: exec::ready_ring::tests:: exec::priority::tests:: exec::park::tests::
    dispatch::tests::a_thread_that_takes_busy core::tests::the_spare_blocks)
MIRI_SKIP=(--skip stress --skip concurrent_ --skip layouts_differ --skip flat_and_heap_segments
    --skip take_give_reuses_and_never_duplicates)

miri() {
    if ! has_nightly || ! have_component nightly miri || ! have_component nightly rust-src; then
        skip "Miri" "no nightly toolchain with the miri component (loom models, asan and tsan cover the same code)"
        return 0
    fi
    echo "== Miri: the unit tests of the unsafe modules (${MIRI_TESTS[*]})"
    MIRIFLAGS="-Zmiri-disable-isolation" CARGO_TARGET_DIR=target/miri \
        cargo +nightly miri test -p depengine --lib -- "${MIRI_TESTS[@]}" "${MIRI_SKIP[@]}"
}

for part in "${parts[@]}"; do
    case "$part" in
        asan) asan ;;
        tsan) tsan ;;
        miri) miri ;;
        *) echo "scripts/sanitizers.sh: unknown part $part (asan, tsan, miri)" >&2; exit 2 ;;
    esac
done
