//go:build tools

// Package crdgen pins controller-gen (sigs.k8s.io/controller-tools) in its
// own module, so that the main module never depends on it. gen.sh runs it.
package crdgen

import _ "sigs.k8s.io/controller-tools/cmd/controller-gen"
