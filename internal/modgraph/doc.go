// Package modgraph holds a test (and nothing else) that checks what
// baton's modules cost the programs that import them: it builds small
// consumer modules in temporary directories, resolves them with the go
// command against this tree, and counts the modules in their graphs.
//
// It needs the go command and the Go module proxy (or a warm module cache).
package modgraph
