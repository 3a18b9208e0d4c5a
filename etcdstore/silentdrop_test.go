package etcdstore_test

import (
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/etcdstore"
)

// TestSilentDropKeepsLock: a holder whose connection to etcd is dropped
// silently (a NAT or a firewall forgets the flow: nothing answers, nothing
// is closed, a new connection works) keeps its lock. The Store notices the
// stalled keepalive, closes the connections that went silent, and the
// etcd client dials again at once, so renewals go on over a new
// connection instead of waiting for gRPC's own keepalive (10s + 5s),
// which came after the renew deadline at TTL 15s: the holder stepped down
// about 9s after the drop.
func TestSilentDropKeepsLock(t *testing.T) {
	inBothModes(t, func(t *testing.T, mode etcdstore.Option) {
		srv := startEtcd(t)
		proxy := startFaultProxy(t, srv.Addr())
		s := newStore(t, connect(t, "http://"+proxy.Addr()), etcdstore.WithPrefix(freshPrefix(t)), mode)
		renewed := make(chan time.Time, 64)
		obs := baton.WithObserver(baton.ObserverFunc(func(e baton.Event) {
			if e.Kind == baton.EventRenewed {
				select {
				case renewed <- time.Now():
				default:
				}
			}
		}))
		const ttl = 15 * time.Second
		holder := lock(t, newMutex(t, s, "job", "holder", ttl, obs))
		within(t, ttl, "a first renewal", renewed)

		proxy.Drop()
		dropAt := time.Now()
		// A renewal is answered from the last acknowledged keepalive
		// only while that keepalive covers a TTL from now: for the
		// lease's headroom over the TTL, 2s at TTL 15s. A renewal later
		// than that needed a keepalive answered after the drop.
		const headroom = 2 * time.Second
		deadline := time.NewTimer(2 * ttl)
		defer deadline.Stop()
		for {
			select {
			case at := <-renewed:
				if at.Sub(dropAt) <= headroom {
					continue
				}
				t.Logf("renewed %v after the drop", at.Sub(dropAt))
				if err := holder.Err(); err != nil {
					t.Fatalf("the holder's lease ended: %v", err)
				}
				return
			case <-holder.Done():
				t.Fatalf("the holder lost its lock %v after its connection was dropped: %v", time.Since(dropAt), holder.Err())
			case <-deadline.C:
				t.Fatalf("no renewal within %v of the drop", 2*ttl)
			}
		}
	})
}

// TestSilentDropStandbyTakesOver: a standby whose connection to etcd is
// dropped silently while it waits still hears the holder's release: its
// Store closes the silent connection when its lease keepalive stalls, and
// its watch goes on over a new connection from the revision it had seen,
// instead of waiting for gRPC's keepalive (10s + 5s) to notice. Before,
// it took over 13.4s after a release that came 1s after the drop.
func TestSilentDropStandbyTakesOver(t *testing.T) {
	inBothModes(t, func(t *testing.T, mode etcdstore.Option) {
		srv := startEtcd(t)
		proxy := startFaultProxy(t, srv.Addr())
		prefix := freshPrefix(t)
		direct := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(prefix), mode)
		dropped := newStore(t, connect(t, "http://"+proxy.Addr()), etcdstore.WithPrefix(prefix), mode)
		const ttl = 15 * time.Second
		holder := lock(t, newMutex(t, direct, "job", "holder", ttl))
		heldOpt, held := eventOf(baton.EventHeld)
		standby := lockAsync(t, t.Context(), newMutex(t, dropped, "job", "standby", ttl, heldOpt))
		within(t, 5*time.Second, "the standby to find the lock held", held)

		proxy.Drop()
		if err := holder.Unlock(t.Context()); err != nil {
			t.Fatal(err)
		}
		released := time.Now()
		// gRPC's keepalive would notice the dead connection 10s + 5s
		// after its last answer: the standby must not wait for it.
		a := within(t, 10*time.Second, "the standby to acquire after the release", standby)
		if a.err != nil {
			t.Fatal(a.err)
		}
		t.Logf("the standby acquired %v after the release", a.at.Sub(released))
		if a.lease.Token() <= holder.Token() {
			t.Errorf("standby token %d after %d", a.lease.Token(), holder.Token())
		}
	})
}
