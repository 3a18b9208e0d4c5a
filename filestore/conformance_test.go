//go:build linux || darwin

package filestore

import (
	"testing"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/batontest"
)

// TestConformance runs baton's backend conformance suite. Every subtest gets
// a fresh directory, and every client a new Store on it, as separate
// processes would have.
func TestConformance(t *testing.T) {
	batontest.Run(t, batontest.Harness{
		Open: func(t *testing.T) func(t *testing.T) backend.Backend {
			dir := t.TempDir()
			return func(t *testing.T) backend.Backend { return newStore(t, dir, nil) }
		},
	})
}
