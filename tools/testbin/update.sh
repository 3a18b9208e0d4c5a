#!/usr/bin/env bash
# update.sh regenerates the pins of the test binaries: go.mod/go.sum here
# (kube-apiserver from k8s.io/kubernetes) and etcd/go.mod/go.sum (etcd from
# go.etcd.io/etcd/server/v3). Run it only to move to other versions, then run
# build.sh: the versions are part of the cache key, so a new pair is built
# into a new directory and the old one is left alone.
#
#   tools/testbin/update.sh [KUBE_VERSION [ETCD_VERSION]]
#   e.g. tools/testbin/update.sh v1.37.2 v3.7.3
#
# Without arguments it keeps the versions pinned today and only re-derives
# the replace list and the sums.
#
# k8s.io/kubernetes requires each of its staging repositories (k8s.io/api,
# k8s.io/apimachinery, k8s.io/client-go, ...) at v0.0.0 and replaces it with a
# directory that is not in its module zip. This script reads that list from
# the go.mod of the chosen k8s.io/kubernetes release and replaces each one with
# the published module of the same release: v1.X.Y -> v0.X.Y.
#
# Pick the etcd that the chosen Kubernetes is tested with: ETCD_VERSION in
# hack/lib/etcd.sh of k8s.io/kubernetes (v1.37.x: etcd 3.7.0; we take the
# newest patch of that minor release).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log() { printf 'testbin/update: %s\n' "$*" >&2; }

# modver FILE MODULE prints MODULE's version in the require list of FILE.
modver() {
	awk -v m="$2" '$1 == m && NF >= 2 { print $2; exit } $1 == "require" && $2 == m { print $3; exit }' "$1"
}

kube_version="${1:-$(modver "$here/go.mod" k8s.io/kubernetes 2>/dev/null || true)}"
etcd_version="${2:-$(modver "$here/etcd/go.mod" go.etcd.io/etcd/server/v3 2>/dev/null || true)}"
if [[ -z "$kube_version" || -z "$etcd_version" ]]; then
	echo "usage: $0 KUBE_VERSION ETCD_VERSION   (e.g. v1.37.2 v3.7.3)" >&2
	exit 2
fi
if [[ ! "$kube_version" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]]; then
	echo "KUBE_VERSION must be a release v1.X.Y, got $kube_version" >&2
	exit 2
fi
staging_version="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
go_line="$(go env GOVERSION | sed -E 's/^go([0-9]+\.[0-9]+).*/\1/').0"

export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0

log "k8s.io/kubernetes $kube_version (staging repos at $staging_version), etcd $etcd_version"
kube_mod="$(go mod download -json "k8s.io/kubernetes@$kube_version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
[[ -f "$kube_mod" ]] || { echo "cannot download k8s.io/kubernetes@$kube_version" >&2; exit 1; }
# The staging repos: every k8s.io module that k8s.io/kubernetes requires as v0.0.0.
mapfile -t staging < <(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" { print $1 } $1 == "require" && $2 ~ /^k8s\.io\// && $3 == "v0.0.0" { print $2 }' "$kube_mod" | sort -u)
log "${#staging[@]} staging repos: ${staging[*]}"

# kube-apiserver: this directory's module.
cd "$here"
rm -f go.mod go.sum
go mod init github.com/baton-go/baton/tools/testbin 2>/dev/null
go mod edit -go="$go_line"
for m in "${staging[@]}"; do
	go mod edit -replace="$m=$m@$staging_version"
done
go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$kube_version"
go mod tidy

# etcd: its own module, so that its dependencies are the ones etcd chose and
# not raised to Kubernetes' (and the other way round).
cd "$here/etcd"
rm -f go.mod go.sum
go mod init github.com/baton-go/baton/tools/testbin/etcd 2>/dev/null
go mod edit -go="$go_line"
go get -tool "go.etcd.io/etcd/server/v3@$etcd_version"
go get -tool "go.etcd.io/etcd/etcdutl/v3@$etcd_version"
go mod tidy
log "done: run $here/build.sh to build k8s-${kube_version#v}-etcd-${etcd_version#v}"
