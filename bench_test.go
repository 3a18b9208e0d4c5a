package baton_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/filestore"
	"github.com/baton-go/baton/memstore"
)

// The engine's cost over the raw backend: a nonce, a keeper goroutine, and
// the context per lease, around one TryAcquire and one Release.
func benchmarkTryLockUnlock(b *testing.B, store backend.Backend) {
	m, err := baton.NewMutex(store, "bench", baton.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, err := m.TryLock(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMutexTryLockUnlock(b *testing.B) {
	b.Run("memory", func(b *testing.B) { benchmarkTryLockUnlock(b, memstore.New()) })
	b.Run("file", func(b *testing.B) {
		s, err := filestore.New(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		benchmarkTryLockUnlock(b, s)
	})
}
