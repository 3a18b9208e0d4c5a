package etcdstore_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
)

// TestKeepaliveWarningsBoundedDuringOutage: while etcd is down, every
// reopening of the lease keepalive stream fails, one every maxBackoff (2s)
// for as long as the outage lasts. The failures are warned of once, then
// at most every 10s with a count (the others at debug level), and the
// recovery is logged.
func TestKeepaliveWarningsBoundedDuringOutage(t *testing.T) {
	srv := startEtcd(t)
	logs := &logLines{}
	s := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(freshPrefix(t)),
		etcdstore.WithLogger(slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	req := backend.Request{Holder: "h", Nonce: baton.NewNonce(), TTL: 30 * time.Second}
	if _, err := s.TryAcquire(t.Context(), "held", req); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			srv.Start() // so that Close finds etcd
		}
	})
	const failures = 6 // reopenings 50ms, 100ms ... 1.6s apart: about 3s
	awaitLog(t, logs, func() bool { return logs.count("keepalive stream") >= failures })
	if w := logs.count("level=WARN msg=\"etcdstore: lease keepalive stream") + logs.count("level=WARN msg=\"etcdstore: cannot open the lease keepalive stream"); w > 1 {
		t.Errorf("%d warnings for %d failures of the keepalive stream within 10s, want 1:\n%s", w, logs.count("keepalive stream"), logs.String())
	}
	srv.Start()
	restarted = true
	awaitLog(t, logs, func() bool { return logs.count("keepalives answered again") > 0 })
}

// awaitLog waits up to 30s for cond on the logs.
func awaitLog(t *testing.T, logs *logLines, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("not in the log within 30s:\n%s", logs.String())
		}
	}
}
