//go:build linux || darwin

package filestore

import (
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
)

// BenchmarkAcquireRelease measures one uncontended TryAcquire + Release
// cycle: two read-modify-writes, each with two fsyncs (the record and the
// directory), on the file system of b.TempDir.
func BenchmarkAcquireRelease(b *testing.B) {
	s := newStore(b, b.TempDir(), nil)
	r := backend.Request{Holder: "bench", Nonce: baton.NewNonce(), TTL: time.Minute}
	for b.Loop() {
		g, err := s.TryAcquire(bg, "bench", r)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Release(bg, g); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGet measures reading a record, which takes no file lock.
func BenchmarkGet(b *testing.B) {
	s := newStore(b, b.TempDir(), nil)
	if _, err := s.TryAcquire(bg, "bench", backend.Request{Holder: "bench", Nonce: "n", TTL: time.Minute}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Get(bg, "bench"); err != nil {
			b.Fatal(err)
		}
	}
}
