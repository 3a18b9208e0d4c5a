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

// acquisition is a Lock that ran in its own goroutine.
type acquisition struct {
	lease *baton.Lease
	err   error
	at    time.Time
}

func lockAsync(t *testing.T, ctx context.Context, m *baton.Mutex) <-chan acquisition {
	ch := make(chan acquisition, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l, err := m.Lock(ctx)
		ch <- acquisition{l, err, time.Now()}
		if l != nil {
			t.Cleanup(func() { _ = l.Unlock(context.Background()) })
		}
	}()
	t.Cleanup(func() { <-done })
	return ch
}

// eventOf returns an observer option reporting the first event of kind.
func eventOf(kind baton.EventKind) (baton.Option, <-chan time.Time) {
	ch := make(chan time.Time, 1)
	return baton.WithObserver(baton.ObserverFunc(func(e baton.Event) {
		if e.Kind == kind {
			select {
			case ch <- time.Now():
			default:
			}
		}
	})), ch
}

// TestPartition: a holder cut off from etcd by a TCP proxy (no byte passes,
// nothing is closed) ends its lease's context at its renew deadline, before
// etcd expires its lease and a standby acquires.
func TestPartition(t *testing.T) {
	inBothModes(t, func(t *testing.T, mode etcdstore.Option) {
		srv := startEtcd(t)
		proxy := startFaultProxy(t, srv.Addr())
		prefix := freshPrefix(t)
		cut := newStore(t, connect(t, "http://"+proxy.Addr()), etcdstore.WithPrefix(prefix), mode)
		direct := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(prefix), mode)
		const ttl = 2 * time.Second
		holder := lock(t, newMutex(t, cut, "job", "cut-off", ttl))
		heldOpt, held := eventOf(baton.EventHeld)
		standby := lockAsync(t, t.Context(), newMutex(t, direct, "job", "standby", ttl, heldOpt))
		within(t, 5*time.Second, "the standby to find the lock held", held)

		proxy.Cut()
		cutAt := time.Now()
		// Renews answered locally from the last acknowledged keepalive
		// go on for up to a renew interval after the cut, and the
		// step-down comes a renew deadline after the last one: up to
		// exactly a TTL after the cut (1.997-1.999 s at TTL 2 s, on an
		// idle machine). What matters is that it comes before the
		// standby acquires, checked below.
		within(t, 5*ttl, "the holder's lease to end", holder.Done())
		ended := time.Now()
		a := within(t, 10*time.Second, "the standby to acquire", standby)
		if a.err != nil {
			t.Fatal(a.err)
		}
		t.Logf("cut at 0; holder stepped down at %v; standby acquired at %v", ended.Sub(cutAt), a.at.Sub(cutAt))
		if !ended.Before(a.at) {
			t.Errorf("the standby acquired at %v, before the cut-off holder stepped down at %v", a.at.Sub(cutAt), ended.Sub(cutAt))
		}
		if err := holder.Err(); !errors.Is(err, backend.ErrLost) || !errors.Is(err, baton.ErrStepDown) {
			t.Errorf("the holder's lease ended with %v; want ErrLost and ErrStepDown", err)
		}
		if a.lease.Token() <= holder.Token() {
			t.Errorf("standby token %d after %d", a.lease.Token(), holder.Token())
		}
		// Healed, the cut-off Store finds its lease gone and cannot touch the
		// new holder's claim.
		proxy.Restore()
		err := cut.Release(t.Context(), backend.Grant{Key: "job", Holder: "cut-off", Nonce: "x", Token: holder.Token(), TTL: ttl})
		if !errors.Is(err, backend.ErrLost) {
			t.Errorf("Release through the healed Store: %v, want ErrLost", err)
		}
		if err := a.lease.Err(); err != nil {
			t.Errorf("the new holder's lease ended: %v", err)
		}
	})
}

// TestRestart: the etcd member restarts while a lock is held. A short
// outage: the holder keeps the lock (etcd keeps leases across a restart)
// and the standby does not get it. A long outage: the holder steps down
// before the member is back, and the standby acquires only after that.
func TestRestart(t *testing.T) {
	inBothModes(t, func(t *testing.T, mode etcdstore.Option) {
		t.Run("short", func(t *testing.T) {
			srv := startEtcd(t)
			prefix := freshPrefix(t)
			a := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(prefix), mode)
			b := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(prefix), mode)
			const ttl = 5 * time.Second // renew deadline 3.3s: longer than a crash and restart
			renewedOpt, renewed := eventOf(baton.EventRenewed)
			holder := lock(t, newMutex(t, a, "job", "holder", ttl, renewedOpt, baton.WithRenewInterval(500*time.Millisecond)))
			heldOpt, held := eventOf(baton.EventHeld)
			standby := lockAsync(t, t.Context(), newMutex(t, b, "job", "standby", ttl, heldOpt))
			within(t, 5*time.Second, "the standby to find the lock held", held)

			start := time.Now()
			srv.Kill()
			srv.Start()
			back := time.Now()
			t.Logf("etcd killed and back in %v", back.Sub(start))
			for { // a renew sent after the restart
				if at := within(t, ttl, "a renew after the restart", renewed); at.After(back) {
					break
				}
			}
			if err := holder.Err(); err != nil {
				t.Fatalf("the holder lost the lock across a short restart: %v", err)
			}
			select {
			case a := <-standby:
				t.Fatalf("the standby acquired while the holder holds the lock: %+v", a)
			default:
			}
			if err := holder.Unlock(t.Context()); err != nil {
				t.Fatal(err)
			}
			unlocked := time.Now()
			got := within(t, 10*time.Second, "the standby to acquire after the release", standby)
			if got.err != nil || got.lease.Token() <= holder.Token() {
				t.Fatalf("standby: %v, token %v after %d", got.err, got.lease, holder.Token())
			}
			t.Logf("the standby acquired %v after the release", got.at.Sub(unlocked))
		})
		t.Run("long", func(t *testing.T) {
			srv := startEtcd(t)
			prefix := freshPrefix(t)
			a := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(prefix), mode)
			b := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(prefix), mode)
			const ttl = 2 * time.Second
			holder := lock(t, newMutex(t, a, "job", "holder", ttl))
			heldOpt, held := eventOf(baton.EventHeld)
			standby := lockAsync(t, t.Context(), newMutex(t, b, "job", "standby", ttl, heldOpt))
			within(t, 5*time.Second, "the standby to find the lock held", held)

			// etcd keeps (and extends) leases across a restart, so after an
			// outage longer than the renew deadline only the holder's own
			// step-down and its Store's clean-up free the lock.
			srv.Kill()
			killed := time.Now()
			// The step-down comes at the renew deadline, within the TTL
			// of the kill; the bound is generous, as a busy machine's
			// timers are late (a fresh-clone CI with other work running
			// missed ttl), and what is tested is that it comes with etcd
			// still down.
			within(t, 15*ttl, "the holder to step down", holder.Done())
			ended := time.Now()
			srv.Start()
			restarted := time.Now()
			got := within(t, 20*time.Second, "the standby to acquire", standby)
			if got.err != nil {
				t.Fatal(got.err)
			}
			t.Logf("killed at 0; holder stepped down at %v; etcd back at %v; standby acquired at %v",
				ended.Sub(killed), restarted.Sub(killed), got.at.Sub(killed))
			if err := holder.Err(); !errors.Is(err, baton.ErrStepDown) {
				t.Errorf("the holder's lease ended with %v, want ErrStepDown", err)
			}
			if got.lease.Token() <= holder.Token() {
				t.Errorf("token %d after %d", got.lease.Token(), holder.Token())
			}
		})
		t.Run("graceful", func(t *testing.T) {
			srv := startEtcd(t)
			prefix := freshPrefix(t)
			a := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(prefix), mode)
			b := newStore(t, connect(t, srv.Endpoint()), etcdstore.WithPrefix(prefix), mode)
			const ttl = 2 * time.Second
			holder := lock(t, newMutex(t, a, "job", "holder", ttl))
			heldOpt, held := eventOf(baton.EventHeld)
			standby := lockAsync(t, t.Context(), newMutex(t, b, "job", "standby", ttl, heldOpt))
			within(t, 5*time.Second, "the standby to find the lock held", held)

			// A graceful stop keeps serving open streams (keepalives
			// included) until they end or a timeout (about 7s) runs out, then
			// the member restarts. Either outcome is allowed: the holder keeps
			// the lock, or it steps down before the standby acquires.
			var ended time.Time
			endedc := make(chan struct{})
			go func() {
				<-holder.Done()
				ended = time.Now()
				close(endedc)
			}()
			start := time.Now()
			srv.Restart()
			t.Logf("graceful restart took %v", time.Since(start))
			var got acquisition
			select {
			case got = <-standby:
				<-endedc
				t.Logf("the holder stepped down at %v; the standby acquired at %v", ended.Sub(start), got.at.Sub(start))
				if !ended.Before(got.at) {
					t.Errorf("the standby acquired before the holder stepped down")
				}
			case <-time.After(ttl): // the standby would have acquired by now had the holder lost it
				if err := holder.Err(); err != nil {
					<-endedc
					got = within(t, 10*time.Second, "the standby to acquire", standby)
					t.Logf("the holder stepped down at %v; the standby acquired at %v", ended.Sub(start), got.at.Sub(start))
					if !ended.Before(got.at) {
						t.Errorf("the standby acquired before the holder stepped down")
					}
					break
				}
				t.Logf("the holder kept the lock across the graceful restart")
				if err := holder.Unlock(t.Context()); err != nil {
					t.Fatal(err)
				}
				got = within(t, 10*time.Second, "the standby to acquire", standby)
			}
			if got.err != nil || got.lease.Token() <= holder.Token() {
				t.Fatalf("standby: %v, token %v after %d", got.err, got.lease, holder.Token())
			}
		})
	})
}

// TestFairLostWaiter: a fair-mode waiter whose lease expires while it is
// cut off loses its place: the waiter behind it takes the lock in its turn,
// and the cut-off waiter's next attempt fails with ErrLost instead of
// acquiring.
func TestFairLostWaiter(t *testing.T) {
	srv := startEtcd(t)
	proxy := startFaultProxy(t, srv.Addr())
	prefix := freshPrefix(t)
	opts := []etcdstore.Option{etcdstore.WithPrefix(prefix), etcdstore.WithFair(true)}
	ctx := t.Context()
	const ttl = time.Second
	req := func(h string) backend.Request { return backend.Request{Holder: h, Nonce: baton.NewNonce(), TTL: ttl} }
	holderClient := connect(t, srv.Endpoint())
	holder := newStore(t, holderClient, opts...)
	cut := newStore(t, connect(t, "http://"+proxy.Addr()), opts...)
	next := newStore(t, connect(t, srv.Endpoint()), opts...)

	g, err := holder.TryAcquire(ctx, "job", backend.Request{Holder: "holder", Nonce: "n", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// A Watch is what makes an attempt queue (baton.Mutex.Lock opens one).
	if _, err := cut.Watch(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	wNext, err := next.Watch(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cut.TryAcquire(ctx, "job", req("cut-off")); !errors.Is(err, backend.ErrHeld) {
		t.Fatalf("first waiter: %v, want ErrHeld", err)
	}
	if _, err := next.TryAcquire(ctx, "job", req("next")); !errors.Is(err, backend.ErrHeld) {
		t.Fatalf("second waiter: %v, want ErrHeld", err)
	}
	_, _, queue := holder.Keys("job")
	r, err := holderClient.Get(ctx, queue, clientv3WithPrefix()...)
	if err != nil || len(r.Kvs) != 2 {
		t.Fatalf("queue: %v, %v; want 2 waiters (the holder did not queue)", r, err)
	}
	cutKey := string(r.Kvs[0].Key) // the older: the cut-off waiter's

	proxy.Cut()
	waitDeleted(t, holderClient, cutKey, r.Header.Revision)
	if err := holder.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	// The second waiter is first now; woken by its watch, it acquires.
	var ng backend.Grant
	for {
		within(t, 5*time.Second, "a wake-up of the second waiter", wNext)
		if ng, err = next.TryAcquire(ctx, "job", req("next")); err == nil {
			break
		}
		if !errors.Is(err, backend.ErrHeld) {
			t.Fatal(err)
		}
	}
	proxy.Restore()
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if cg, err := cut.TryAcquire(tctx, "job", req("cut-off")); !errors.Is(err, backend.ErrLost) {
		t.Fatalf("the waiter whose lease expired: grant %+v, %v; want an error matching ErrLost", cg, err)
	} else {
		t.Logf("the waiter whose lease expired: %v", err)
	}
	if err := next.Release(ctx, ng); err != nil {
		t.Fatal(err)
	}
}

// TestFairHandoffToLostWaiter: a holder hands the lock to the waiter
// behind it just as that waiter is cut off from etcd. The handed claim is
// on the waiter's lease, so it ends with that lease (within the lease TTL,
// as a dead holder's would), and the next waiter acquires with a larger
// token; the cut-off waiter's next attempt fails with ErrLost.
func TestFairHandoffToLostWaiter(t *testing.T) {
	srv := startEtcd(t)
	proxy := startFaultProxy(t, srv.Addr())
	opts := []etcdstore.Option{etcdstore.WithPrefix(freshPrefix(t)), etcdstore.WithFair(true)}
	ctx := t.Context()
	const ttl = time.Second
	client := connect(t, srv.Endpoint())
	first := newStore(t, client, opts...)
	ck, _, _ := first.Keys("job")
	g0, err := first.TryAcquire(ctx, "job", backend.Request{Holder: "first", Nonce: "n0", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	type waiter struct {
		s    *etcdstore.Store
		req  backend.Request
		wake <-chan struct{}
	}
	queue := func(s *etcdstore.Store, id string) *waiter {
		w := &waiter{s: s, req: backend.Request{Holder: id, Nonce: baton.NewNonce(), TTL: ttl, Waiting: true}}
		if w.wake, err = s.Watch(ctx, "job"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.TryAcquire(ctx, "job", w.req); !errors.Is(err, backend.ErrHeld) {
			t.Fatalf("%s: %v, want ErrHeld", id, err)
		}
		return w
	}
	h := queue(newStore(t, connect(t, srv.Endpoint()), opts...), "holder")
	cut := queue(newStore(t, connect(t, "http://"+proxy.Addr()), opts...), "cut-off")
	next := queue(newStore(t, connect(t, srv.Endpoint()), opts...), "next")
	acquire := func(w *waiter) backend.Grant {
		t.Helper()
		for {
			within(t, 10*time.Second, w.req.Holder+"'s wake-up", w.wake)
			g, err := w.s.TryAcquire(ctx, "job", w.req)
			if err == nil {
				return g
			}
			if !errors.Is(err, backend.ErrHeld) {
				t.Fatalf("%s: %v", w.req.Holder, err)
			}
		}
	}
	if err := first.Release(ctx, g0); err != nil {
		t.Fatal(err)
	}
	gh := acquire(h) // with its place: it reads the cut-off waiter's place behind it
	proxy.Cut()
	if err := h.s.Release(ctx, gh); err != nil {
		t.Fatal(err)
	}
	r, err := client.Get(ctx, ck)
	if err != nil || len(r.Kvs) != 1 || !strings.Contains(string(r.Kvs[0].Value), " holder=cut-off ") {
		t.Fatalf("after the release the claim is %v (%v); want it handed to the cut-off waiter", r.Kvs, err)
	}
	handed := r.Kvs[0].ModRevision
	cutAt := time.Now()
	gn := acquire(next)
	t.Logf("the next waiter acquired %v after the handoff to a cut-off waiter (claim TTL %v)", time.Since(cutAt), ttl)
	if gn.Token <= uint64(handed) {
		t.Errorf("next waiter's token %d after the handed claim's %d", gn.Token, handed)
	}
	proxy.Restore()
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if g, err := cut.s.TryAcquire(tctx, "job", cut.req); !errors.Is(err, backend.ErrLost) {
		t.Fatalf("the cut-off waiter: grant %+v, %v; want an error matching ErrLost", g, err)
	}
	if err := next.s.Release(ctx, gn); err != nil {
		t.Fatal(err)
	}
}
