package etcdstore_test

import (
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
)

// logLines is a slog sink that counts the lines containing a string.
type logLines struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *logLines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), s)
}

// TestReapsBoundedDuringOutage: a Store holding many claims through an
// outage finds them all expired at once. Their keys' deletions, which fail
// while etcd is down, are bounded in number (a goroutine and a request
// each: 10,000 at 10,000 locks) and in warnings (one per claim per retry,
// 5,724 in a second at 10,000 locks).
func TestReapsBoundedDuringOutage(t *testing.T) {
	srv := startEtcd(t)
	logs := &logLines{}
	s := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(freshPrefix(t)),
		etcdstore.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	const n, ttl = 300, 3 * time.Second
	for i := range n {
		req := backend.Request{Holder: "h", Nonce: baton.NewNonce(), TTL: ttl}
		if _, err := s.TryAcquire(t.Context(), fmt.Sprintf("lock-%d", i), req); err != nil {
			t.Fatal(err)
		}
	}
	base := runtime.NumGoroutine()
	srv.Kill()
	t.Cleanup(srv.Start) // so that Close finds etcd
	// Past every claim's deadline, while the deletions fail.
	peak := base
	for end := time.Now().Add(ttl + 4*time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		peak = max(peak, runtime.NumGoroutine())
	}
	if extra := peak - base; extra > n/3 {
		t.Errorf("%d more goroutines at the peak of the outage with %d expired claims, want far fewer (the deletions are bounded)", extra, n)
	}
	if w := logs.count("cannot delete an expired claim"); w > 2 {
		t.Errorf("%d warnings of failed deletions in %v, want at most 2", w, ttl+4*time.Second)
	}
}
