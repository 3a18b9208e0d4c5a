package redisstore_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/redisstore"
)

// syncBuffer is a log sink for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestRedlockDegradedWarned: with one of three servers down a Redlock
// keeps its locks on the other two, and one more failure would lose them:
// renewals that a quorum carried without a server are warned of (naming
// the server), once, not at every renewal. The holder's log said nothing.
func TestRedlockDegradedWarned(t *testing.T) {
	servers := startRedis(t, 3)
	ctx := testCtx(t, 30*time.Second)
	logs := &syncBuffer{}
	clients := make([]redis.UniversalClient, len(servers))
	for i, srv := range servers {
		clients[i] = newClient(t, srv.Addr(), fastClient)
	}
	r, err := redisstore.NewRedlock(clients, redisstore.WithPrefix(uniquePrefix()),
		redisstore.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	g, err := r.TryAcquire(ctx, "degraded", request("me", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	servers[2].Stop()
	for range 3 {
		if g, err = r.Renew(ctx, g); err != nil {
			t.Fatalf("Renew with two of three servers up: %v", err)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "level=WARN"); n != 1 || !strings.Contains(out, "server 2") || !strings.Contains(out, "degraded") {
		t.Errorf("log after 3 renewals without server 2:\n%s\nwant one warning naming server 2", out)
	}
}
