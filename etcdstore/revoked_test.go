package etcdstore_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestFairHandedClaimRevoked: a waiter that last saw a claim which was then
// handed over (not released) to the waiter ahead of it, whose lease is
// then revoked (`etcdctl lease revoke`), acquires at once, as it would
// after any revoked holder: the handoff ended the claim it saw, so the
// releasing transaction puts the release marker. Without the marker the
// waiter took the claim it saw for one deleted by hand, whose holder's
// lease still lives, and waited twice the TTL.
func TestFairHandedClaimRevoked(t *testing.T) {
	srv := startEtcd(t)
	opts := []etcdstore.Option{etcdstore.WithPrefix(freshPrefix(t)), etcdstore.WithFair(true)}
	client := connect(t, srv.Endpoint())
	ctx := t.Context()
	const ttl = 10 * time.Second
	first := lock(t, newMutex(t, newStore(t, connect(t, srv.Endpoint()), opts...), "job", "first", ttl))
	ck, _, qp := newStore(t, client, opts...).Keys("job")
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	queue := client.Watch(wctx, qp, clientv3.WithPrefix())

	type waiter struct {
		s    *etcdstore.Store
		req  backend.Request
		wake <-chan struct{}
	}
	queueUp := func(id string) *waiter {
		t.Helper()
		w := &waiter{s: newStore(t, connect(t, srv.Endpoint()), opts...),
			req: backend.Request{Holder: id, Nonce: baton.NewNonce(), TTL: ttl, Waiting: true}}
		var err error
		if w.wake, err = w.s.Watch(ctx, "job"); err != nil {
			t.Fatal(err)
		}
		if _, err := w.s.TryAcquire(ctx, "job", w.req); !errors.Is(err, backend.ErrHeld) {
			t.Fatalf("%s: %v, want ErrHeld", id, err)
		}
		awaitQueued(t, queue, id)
		return w
	}
	// acquire retries w's attempts (on its wake-ups, or after the
	// RetryAfter of a refusal) until one acquires or limit has passed.
	acquire := func(w *waiter, limit time.Duration) (backend.Grant, error) {
		t.Helper()
		end := time.Now().Add(limit)
		within(t, limit, w.req.Holder+"'s wake-up", w.wake)
		for {
			g, err := w.s.TryAcquire(ctx, "job", w.req)
			var he *backend.HeldError
			if err == nil || !errors.As(err, &he) || time.Now().After(end) {
				return g, err
			}
			select {
			case <-w.wake:
			case <-time.After(min(he.RetryAfter, 100*time.Millisecond)):
			}
		}
	}

	w1, w2 := queueUp("w1"), queueUp("w2")
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	g1, err := acquire(w1, 5*time.Second)
	if err != nil {
		t.Fatalf("w1: %v", err)
	}
	// w3 queues while w1 holds: the claim it sees is w1's.
	w3 := queueUp("w3")
	// w1's release hands the lock to w2, which collects it.
	if err := w1.s.Release(ctx, g1); err != nil {
		t.Fatal(err)
	}
	g2, err := acquire(w2, 5*time.Second)
	if err != nil {
		t.Fatalf("w2: %v", err)
	}
	r, err := client.Get(ctx, ck)
	if err != nil || len(r.Kvs) != 1 || uint64(r.Kvs[0].ModRevision) != g2.Token || !strings.Contains(string(r.Kvs[0].Value), " holder=w2 ") {
		t.Fatalf("claim %v (%v); want w2's, handed over with token %d", r.Kvs, err, g2.Token)
	}
	// An operator revokes w2's lease: the claim, its guard and w2's place
	// go with it, and w3, next in line, acquires at once.
	if _, err := client.Revoke(ctx, clientv3.LeaseID(r.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	g3, err := acquire(w3, ttl/2)
	if err != nil {
		t.Fatalf("w3, %v after w2's lease was revoked: %v; want the lock at once", time.Since(revoked).Round(time.Millisecond), err)
	}
	t.Logf("w3 acquired %v after w2's lease was revoked", time.Since(revoked).Round(time.Millisecond))
	if g3.Token <= g2.Token {
		t.Errorf("w3's token %d after w2's %d", g3.Token, g2.Token)
	}
}

// renewCounter counts the Renew calls made through it.
type renewCounter struct {
	*etcdstore.Store
	renews atomic.Int32
}

func (r *renewCounter) Renew(ctx context.Context, g backend.Grant) (backend.Grant, error) {
	r.renews.Add(1)
	return r.Store.Renew(ctx, g)
}

// TestRevokedHolderStopsBeforeItsRenew: when an operator revokes a
// holder's lease (`etcdctl lease revoke`; etcd 3.7's deposed raft leader
// can do the same), contenders acquire at once. The holder's Store hears
// of it in its next keepalive answer (within a second) and ends the
// holder's lease then (backend.LossNotifier), not at the holder's next
// renew, a third of the TTL later (10 s here), during which both acted.
func TestRevokedHolderStopsBeforeItsRenew(t *testing.T) {
	srv := startEtcd(t)
	opts := []etcdstore.Option{etcdstore.WithPrefix(freshPrefix(t))}
	client := connect(t, srv.Endpoint())
	store := &renewCounter{Store: newStore(t, connect(t, srv.Endpoint()), opts...)}
	l := lock(t, newMutex(t, store, "job", "holder", 30*time.Second))
	ck, _, _ := newStore(t, client, opts...).Keys("job")
	r, err := client.Get(t.Context(), ck)
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("claim key %q: %v, %v", ck, r, err)
	}
	if _, err := client.Revoke(t.Context(), clientv3.LeaseID(r.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	within(t, 30*time.Second, "the holder's loss", l.Done())
	if err := l.Err(); !errors.Is(err, backend.ErrLost) || !strings.Contains(err.Error(), "reports the claim lost") {
		t.Errorf("lease ended with %v, want ErrLost reported by the store", err)
	}
	if n := store.renews.Load(); n != 0 {
		t.Errorf("the lease ended after %d renews, want before its first (the store's notice)", n)
	}
}
