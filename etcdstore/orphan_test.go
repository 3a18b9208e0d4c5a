package etcdstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcdstore"
)

// TestOrphanIsCleared: an acquiring transaction of Store a was applied
// but its call gave up without the answer, and a keeps using its lease
// (as a poller does), so the claim would never expire. a's verification
// deletes it as a release would, and a waiter on another Store acquires,
// with a larger token, within a few verification periods.
func TestOrphanIsCleared(t *testing.T) {
	srv := startEtcd(t)
	prefix := etcdstore.WithPrefix(freshPrefix(t))
	a := newStore(t, connect(t, srv.Endpoint()), prefix)
	b := newStore(t, connect(t, srv.Endpoint()), prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ttl = 2 * time.Second
	orphan, unpin, err := etcdstore.PlantOrphan(ctx, a, "job", "poller", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer unpin()
	m, err := baton.NewMutex(b, "job", baton.WithTTL(ttl), baton.WithIdentity("waiter"), baton.WithLogger(quietLog))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock behind an orphan claim: %v", err)
	}
	defer l.Unlock(context.Background())
	if l.Token() <= uint64(orphan) {
		t.Fatalf("token %d, want above the orphan's %d", l.Token(), orphan)
	}
}
