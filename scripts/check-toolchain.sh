#!/usr/bin/env bash
# Checks that the toolchains `make test` needs are present, and says how to get them.
set -euo pipefail
fail=0
if ! command -v go >/dev/null; then
  echo "go not found: testenv builds kube-apiserver from source and needs Go >= 1.26 (https://go.dev/doc/install)" >&2
  fail=1
else
  v=$(go env GOVERSION | sed 's/^go//')
  major=${v%%.*}; rest=${v#*.}; minor=${rest%%.*}
  if (( major < 1 || (major == 1 && minor < 26) )); then
    echo "go $v is too old: k8s.io/kubernetes v1.37 needs Go >= 1.26 (set GOTOOLCHAIN=go1.26.8 to let go fetch it)" >&2
    fail=1
  fi
fi
if ! command -v cargo >/dev/null; then
  echo "cargo not found: install Rust with rustup (https://rustup.rs), toolchain >= 1.89" >&2
  fail=1
fi
for tool in flock sha256sum setpriv; do
  command -v "$tool" >/dev/null || { echo "$tool not found (Debian: apt-get install util-linux coreutils)" >&2; fail=1; }
done
# The docs' commands use jq and yq; the test that runs them (e2e_docs) needs both.
for tool in jq yq; do
  command -v "$tool" >/dev/null || { echo "$tool not found: the docs' commands use it (Debian: apt-get install $tool)" >&2; fail=1; }
done
exit $fail
