#!/usr/bin/env bash
# Fuzzes Convoy's input loaders with cargo-fuzz (libFuzzer, nightly toolchain):
# each target in fuzz/fuzz_targets for FUZZ_SECONDS seconds (default 20),
# starting from the committed corpus fuzz/corpus/<target>/. New inputs found
# are kept out of the repository (in a temporary directory); a crash or a
# hang (FUZZ_TIMEOUT seconds for one input, default 10) fails the run and
# leaves the input in fuzz/artifacts/<target>/.
#
#   scripts/fuzz.sh                      # every target, 20 s each (CI)
#   FUZZ_SECONDS=600 scripts/fuzz.sh cluster quantity
#   FUZZ_BUILD_ONLY=1 scripts/fuzz.sh      # build the targets, run none
#
# docs/testing.md ("Fuzzing") says how to reproduce and minimise a crash.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${FUZZ_SECONDS:-20}
timeout=${FUZZ_TIMEOUT:-10}
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(config plugin_args cluster quantity schedule cel)
fi

if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "fuzz.sh: the nightly Rust toolchain is not installed; cargo-fuzz needs it (libFuzzer and" >&2
  echo "sanitizer flags). Install it with: rustup toolchain install nightly" >&2
  exit 1
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "fuzz.sh: installing cargo-fuzz from crates.io" >&2
  cargo +nightly install cargo-fuzz --locked
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cd fuzz
# The dev profile at opt-level 1 (fuzz/Cargo.toml) with debug assertions on:
# integer overflow is a finding. No sanitizer: Convoy's crates have no
# `unsafe` code for AddressSanitizer to watch, and without it a cold build
# takes 7 min here instead of 16 (optimized, ASan) and runs about four
# times the inputs per second. Coverage instrumentation stays on.
build=(--dev --sanitizer none)
cargo +nightly fuzz build "${build[@]}"
# FUZZ_BUILD_ONLY=1: build, run nothing (.ci/run builds ahead of time).
if [[ -n "${FUZZ_BUILD_ONLY:-}" ]]; then
  exit 0
fi
for target in "${targets[@]}"; do
  echo "fuzz.sh: $target for ${seconds}s" >&2
  mkdir -p "$scratch/$target"
  dict=()
  if [[ -f "$target.dict" ]]; then
    dict=(-dict="$target.dict")
  fi
  # New inputs go to the first directory (scratch); the committed corpus is read only.
  cargo +nightly fuzz run "${build[@]}" "$target" "$scratch/$target" "corpus/$target" -- \
    -max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb=2048 -print_final_stats=1 \
    "${dict[@]}"
done
