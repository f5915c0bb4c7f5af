#!/usr/bin/env bash
# CI performance gate: counts the instructions (not the time) of a fixed,
# deterministic scheduling workload under callgrind and fails when they are
# more than the baseline's threshold above benches/baseline/gate.json.
#
#   scripts/bench-gate.sh            # measure and compare
#   scripts/bench-gate.sh --update   # measure and record a new baseline
set -euo pipefail
cd "$(dirname "$0")/.."

update=false
case "${1:-}" in
  --update) update=true ;;
  "") ;;
  *) echo "usage: $0 [--update]" >&2; exit 2 ;;
esac

baseline=benches/baseline/gate.json
cargo=${CARGO:-cargo}

if ! command -v valgrind >/dev/null 2>&1; then
  echo "bench-gate: valgrind missing, installing it (Debian package)" >&2
  if [ "$(id -u)" -ne 0 ]; then
    echo "bench-gate: need root to apt-get install valgrind" >&2
    exit 2
  fi
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
fi

"$cargo" build --release --locked -p convoy-bench
bin=${CARGO_TARGET_DIR:-target}/release/convoy-bench

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
start=$(date +%s)
valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.out" \
  "$bin" gate workload >"$out/workload.log" 2>&1 || {
  echo "bench-gate: the workload failed under callgrind:" >&2
  cat "$out/workload.log" >&2
  exit 2
}
measured=$("$bin" gate measure "$out/callgrind.out")
echo "bench-gate: $(grep -v '^==' "$out/workload.log" | tail -1); $measured instructions in $(($(date +%s) - start))s under callgrind"

if $update; then
  "$bin" gate update --baseline "$baseline" --measured "$measured"
else
  "$bin" gate check --baseline "$baseline" --measured "$measured"
fi
