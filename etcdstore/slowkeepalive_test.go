package etcdstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
)

// TestKeepaliveSlowerThanHeadroom: an acquire needs the Store's lease to
// last a TTL from now, and waits for a keepalive when it does not. When
// every keepalive takes longer to be answered than the lease's headroom
// over the TTL (1s at TTL 3s: a slow path to etcd, or an etcd grpc-proxy,
// which answers keepalives on its own schedule, 1.5s late at TTL 3s),
// no answer ever does, and the acquire waited for one until its context
// ended: through a grpc-proxy, a Lock at TTL 3s waited 20s, without a
// word, after the proxy had been paused for 2s (in 3 of 14 runs). It now
// fails with ErrUnavailable, saying how long the keepalive took and what
// to change, once a keepalive it asked for was answered too late.
func TestKeepaliveSlowerThanHeadroom(t *testing.T) {
	srv := startEtcd(t)
	proxy := startFaultProxy(t, srv.Addr())
	s := newStore(t, connect(t, "http://"+proxy.Addr()), etcdstore.WithPrefix(freshPrefix(t)))
	proxy.SetLatency(600 * time.Millisecond) // 1.2s a round trip: a grant, then each keepalive
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := s.TryAcquire(ctx, "job", backend.Request{Holder: "h", Nonce: baton.NewNonce(), TTL: 3 * time.Second})
	t.Logf("TryAcquire: %v", err)
	if ctx.Err() != nil {
		t.Fatalf("TryAcquire waited for its context to end: %v", err)
	}
	if !errors.Is(err, backend.ErrUnavailable) || !strings.Contains(err.Error(), "keepalive took") {
		t.Errorf("TryAcquire with keepalives slower than the lease's headroom: %v; want ErrUnavailable saying how long the keepalive took", err)
	}
}
