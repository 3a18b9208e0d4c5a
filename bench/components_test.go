package bench

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/redisstore"
)

// Component benchmarks: where an uncontended cycle's time goes.
func BenchmarkCycle(b *testing.B) {
	srv := testenv.StartRedis(b)
	addr := srv.Addr()
	ctx := context.Background()
	b.Run("raw", func(b *testing.B) {
		c := libraries[len(libraries)-1].open(addr, uniqueKey("r"), "x")
		defer c.close()
		for b.Loop() {
			u, _ := c.lock(ctx)
			_ = u(ctx)
		}
	})
	b.Run("store-try-release", func(b *testing.B) {
		c := newClient(addr)
		defer c.Close()
		s := redisstore.New(c)
		defer s.Close()
		key := uniqueKey("s")
		for b.Loop() {
			g, err := s.TryAcquire(ctx, key, baton.Request{Holder: "h", Nonce: baton.NewNonce(), TTL: lockTTL})
			if err != nil {
				b.Fatal(err)
			}
			_ = s.Release(ctx, g)
		}
	})
	b.Run("store-try-release-watched", func(b *testing.B) {
		c := newClient(addr)
		defer c.Close()
		s := redisstore.New(c)
		defer s.Close()
		key := uniqueKey("s")
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		if _, err := s.Watch(wctx, key); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			g, err := s.TryAcquire(ctx, key, baton.Request{Holder: "h", Nonce: baton.NewNonce(), TTL: lockTTL})
			if err != nil {
				b.Fatal(err)
			}
			_ = s.Release(ctx, g)
		}
	})
	b.Run("mutex-trylock", func(b *testing.B) {
		c := newClient(addr)
		defer c.Close()
		s := redisstore.New(c)
		defer s.Close()
		m, _ := baton.NewMutex(s, uniqueKey("m"), baton.WithTTL(lockTTL), baton.WithLogger(slog.New(slog.DiscardHandler)))
		for b.Loop() {
			l, err := m.TryLock(ctx)
			if err != nil {
				b.Fatal(err)
			}
			_ = l.Unlock(ctx)
		}
	})
	b.Run("mutex-lock", func(b *testing.B) {
		c := newClient(addr)
		defer c.Close()
		s := redisstore.New(c)
		defer s.Close()
		m, _ := baton.NewMutex(s, uniqueKey("m"), baton.WithTTL(lockTTL), baton.WithLogger(slog.New(slog.DiscardHandler)))
		for b.Loop() {
			l, err := m.Lock(ctx)
			if err != nil {
				b.Fatal(err)
			}
			_ = l.Unlock(ctx)
		}
	})
	_ = time.Second
}
