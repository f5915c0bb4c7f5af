#!/usr/bin/env bash
# Builds what `make test` needs at the same time: testenv's binaries for the
# newest Kubernetes version (Go: Kubernetes, etcd, kwok, helm, kubemark,
# kueue) in the background, the workspace's test binaries (Rust) in the
# foreground. On two cores the two builds fill each other's serial phases
# (Go's links, the last crates of the Rust build): a cold machine saves
# several minutes over building one after the other. testenv's output goes
# to a log, printed at the end (and in full if its build fails).
#
# The oldest version's binaries (OLDEST_K8S) are needed only by make test's
# last stage: once the rest is built, they are built in the background at
# the lowest CPU priority, in the time the tests leave idle, and that stage
# waits for them (testenv's build lock). Their log:
# target/testenv/oldest-build.log.
set -euo pipefail
cd "$(dirname "$0")/.."
oldest=${1:?usage: scripts/build-for-tests.sh OLDEST_K8S}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
testenv/testenv build >"$log" 2>&1 &
go_build=$!
rc=0
${CARGO:-cargo} test --workspace --locked --no-run || rc=$?
if ! wait "$go_build"; then
  echo "building testenv's binaries failed:" >&2
  cat "$log" >&2
  exit 1
fi
grep '^testenv:' "$log" >&2 || true
mkdir -p target/testenv
nohup nice -n 19 testenv/testenv --version "$oldest" build >target/testenv/oldest-build.log 2>&1 </dev/null &
exit "$rc"
