//go:build linux || darwin

package filestore

import (
	"testing"
	"time"

	"github.com/baton-go/baton"
)

// BenchmarkAcquireRelease measures one uncontended TryAcquire + Release
// cycle: two read-modify-writes, each with two fsyncs (the record and the
// directory), on the file system of b.TempDir.
func BenchmarkAcquireRelease(b *testing.B) {
	s := newStore(b, b.TempDir(), nil)
	r := baton.Request{Holder: "bench", Nonce: baton.NewNonce(), TTL: time.Minute}
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
	if _, err := s.TryAcquire(bg, "bench", baton.Request{Holder: "bench", Nonce: "n", TTL: time.Minute}); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.Get(bg, "bench"); err != nil {
			b.Fatal(err)
		}
	}
}
