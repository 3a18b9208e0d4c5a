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
	inBothModes(t, func(t *testing.T, mode etcdstore.Option) {
		srv := startEtcd(t)
		prefix := etcdstore.WithPrefix(freshPrefix(t))
		a := newStore(t, connect(t, srv.Endpoint()), prefix, mode)
		b := newStore(t, connect(t, srv.Endpoint()), prefix, mode)
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
	})
}

// TestOrphanPlaceIsCleared: in fair mode, a transaction of Store a put a
// place in the queue but its call gave up without the answer, and a keeps
// its lease alive. A waiter on Store c queues behind that place; the
// holder on Store b releases, which may hand the lock to the orphan place.
// a's verification deletes the place (and a claim handed to it), and c
// acquires, with a larger token than b's.
func TestOrphanPlaceIsCleared(t *testing.T) {
	srv := startEtcd(t)
	opts := []etcdstore.Option{etcdstore.WithPrefix(freshPrefix(t)), etcdstore.WithFair(true)}
	a := newStore(t, connect(t, srv.Endpoint()), opts...)
	b := newStore(t, connect(t, srv.Endpoint()), opts...)
	c := newStore(t, connect(t, srv.Endpoint()), opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ttl = 2 * time.Second
	mutex := func(s *etcdstore.Store, id string) *baton.Mutex {
		m, err := baton.NewMutex(s, "job", baton.WithTTL(ttl), baton.WithIdentity(id), baton.WithLogger(quietLog))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	held, err := mutex(b, "holder").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	unpin, err := etcdstore.PlantOrphanPlace(ctx, a, "job", "poller", ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer unpin()
	got := make(chan *baton.Lease, 1)
	go func() {
		l, err := mutex(c, "waiter").Lock(ctx)
		if err != nil {
			t.Errorf("Lock behind an orphan place: %v", err)
		}
		got <- l
	}()
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		return
	}
	defer l.Unlock(context.Background())
	if l.Token() <= held.Token() {
		t.Fatalf("token %d, want above the holder's %d", l.Token(), held.Token())
	}
}
