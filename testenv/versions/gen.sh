#!/usr/bin/env bash
# Writes testenv/versions/<minor>/go.mod and go.sum: the Go module from
# which testenv builds kube-apiserver, kube-controller-manager,
# kube-scheduler and kubectl of one older Kubernetes release.
#
#   testenv/versions/gen.sh v1.34.4
#
# k8s.io/kubernetes cannot be required as a module without replacing each of
# its staging modules (k8s.io/api, k8s.io/apiserver, ...) with the release's
# tag of that module (v0.34.4 for v1.34.4): its own go.mod points them at
# ./staging with version v0.0.0. The list of staging modules comes from that
# go.mod. The newest release, testenv's default, lives in testenv/go.mod.
set -euo pipefail
version=${1:?usage: gen.sh vMAJOR.MINOR.PATCH}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
minor=${version%.*}
staging=v0.${version#v1.}
dir="$here/$minor"
mkdir -p "$dir"
cd "$dir"
rm -f go.mod go.sum
go mod init "github.com/convoy-scheduler/convoy/testenv/versions/k8s-${minor//./-}"
go mod edit -go=1.26.0
mod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
awk '/^replace \(/ {r = 1; next} r && /^\)/ {r = 0} r && $1 ~ /^k8s.io\// {print $1}' "$mod" |
  while read -r m; do go mod edit -replace "$m=$m@$staging"; done
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  go get -tool "k8s.io/kubernetes/cmd/$cmd@$version"
done
go mod tidy
echo "$dir/go.mod: k8s.io/kubernetes $version"
