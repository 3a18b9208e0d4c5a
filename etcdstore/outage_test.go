package etcdstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/etcdstore"
)

// A waiter cut off from etcd while the holder's claim and the waiter's
// own place went with their leases (a partition longer than the TTL, an
// outage of the CA's trust: every lease expired meanwhile), and whose
// Store had seen that claim, takes a new place once etcd answers again,
// finds the lock free and first in line, and acquires. Before, its Store
// answered the next attempts from its watch ("held" by nobody, token 0)
// and waited for a change of a claim already gone: with two such waiters
// the lock stayed free and unheld until a process was restarted.
func TestFairWaiterAfterLeasesExpired(t *testing.T) {
	srv := startEtcd(t)
	direct := connect(t, srv.Endpoint())
	toA, toB := startFaultProxy(t, srv.Addr()), startFaultProxy(t, srv.Addr())
	prefix := freshPrefix(t)
	a := newStore(t, connect(t, "http://"+toA.Addr()), etcdstore.WithPrefix(prefix))
	b := newStore(t, connect(t, "http://"+toB.Addr()), etcdstore.WithPrefix(prefix))
	const ttl = 2 * time.Second
	holder := lock(t, newMutex(t, b, "job", "B", ttl))
	held := make(chan struct{}, 1)
	placeGone := make(chan error, 1)
	obs := baton.WithObserver(baton.ObserverFunc(func(e baton.Event) {
		switch {
		case e.Kind == baton.EventHeld:
			select {
			case held <- struct{}{}:
			default:
			}
		case e.Kind == baton.EventAcquireFailed && errors.Is(e.Err, backend.ErrLost):
			select {
			case placeGone <- e.Err:
			default:
			}
		}
	}))
	standby := lockAsync(t, t.Context(), newMutex(t, a, "job", "A", ttl, obs))
	within(t, 10*time.Second, "the standby to find the lock held", held)

	// Both Stores are cut off; the holder's claim and the waiter's place
	// go with their leases, and the holder's Store, still cut off, cannot
	// mark the claim released.
	toA.Cut()
	toB.Cut()
	leases, err := direct.Leases(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Leases {
		if _, err := direct.Revoke(t.Context(), l.ID); err != nil {
			t.Fatal(err)
		}
	}
	within(t, 5*ttl, "the holder to step down", holder.Done())
	within(t, 10*ttl, "the waiter to find its place gone", placeGone)
	toA.Restore()
	a2 := within(t, 10*ttl, "the waiter to acquire once etcd answers again", standby)
	if a2.err != nil {
		t.Fatal(a2.err)
	}
	if a2.lease.Token() <= holder.Token() {
		t.Errorf("token %d after %d", a2.lease.Token(), holder.Token())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_ = a2.lease.Unlock(ctx)
}
