// Package docscheck holds a test (and nothing else) that type-checks the Go
// code of README.md and docs/*.md against the repository's current
// packages, so that a renamed function or a changed signature cannot leave
// a guide that no longer compiles. See docscheck_test.go for how a block
// is wrapped and how to mark one that cannot compile by construction.
//
// It is a module of its own so that the root module does not depend on
// what the guides import (controller-runtime, gocron, Prometheus).
package docscheck
