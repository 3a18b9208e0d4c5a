#!/usr/bin/env bash
# Regenerates, from the Go types in kubestore/api/v1alpha1:
#   kubestore/api/v1alpha1/zz_generated.deepcopy.go   DeepCopy methods
#   deploy/crd/baton.dev_distributedlocks.yaml   the CustomResourceDefinition
# with controller-gen, pinned in this directory's own go.mod so that the
# main module never depends on controller-tools. Run from anywhere:
#   bash tools/crdgen/gen.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
GO="${GO:-go}"
bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
(cd "$here" && "$GO" build -o "$bin/controller-gen" sigs.k8s.io/controller-tools/cmd/controller-gen)
cd "$root"
"$bin/controller-gen" \
	object paths=./kubestore/api/... \
	crd:crdVersions=v1 paths=./kubestore/api/... output:crd:artifacts:config=deploy/crd
echo "generated kubestore/api/v1alpha1/zz_generated.deepcopy.go and deploy/crd/" >&2
