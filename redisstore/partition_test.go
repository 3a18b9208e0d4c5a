package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/internal/faultproxy"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// TestPartitionedHolderStopsFirst: a holder cut off from the server by a
// network partition (its connections stall, nothing is closed) ends its
// lease by its renew deadline, and another client, which waits in Lock with
// a watch, acquires only after the server expired the claim (its TTL after
// the holder's last successful request): the holder stopped first.
func TestPartitionedHolderStopsFirst(t *testing.T) {
	srv := testenv.StartRedis(t)
	proxy, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	ctx := testCtx(t, 30*time.Second)
	prefix := uniquePrefix()
	const (
		key   = "partition"
		ttl   = 2 * time.Second
		renew = 300 * time.Millisecond
	)
	timeouts := func(o *redis.Options) {
		o.DialTimeout = 200 * time.Millisecond
		o.ReadTimeout = 200 * time.Millisecond
		o.WriteTimeout = 200 * time.Millisecond
	}
	cut := newStore(t, proxy.Addr(), prefix, timeouts)
	direct := newStore(t, srv.Addr(), prefix)
	opts := []baton.Option{
		baton.WithTTL(ttl), baton.WithRenewDeadline(time.Second), baton.WithRenewInterval(renew),
		baton.WithRetryPeriod(250 * time.Millisecond), quiet,
	}
	renewedOpt, renewed := observe(baton.EventRenewed)
	holderMu, err := baton.NewMutex(cut, key, append(opts, baton.WithIdentity("partitioned"), renewedOpt)...)
	if err != nil {
		t.Fatal(err)
	}
	heldOpt, held := observe(baton.EventHeld)
	waiterMu, err := baton.NewMutex(direct, key, append(opts, baton.WithIdentity("waiter"), heldOpt)...)
	if err != nil {
		t.Fatal(err)
	}

	l, err := holderMu.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Unlock(context.Background()) })

	// Let one renew succeed through the proxy, then cut it.
	select {
	case <-renewed:
	case <-time.After(5 * time.Second):
		t.Fatal("no renewal through the proxy")
	}
	proxy.Cut()
	// The last request that can have reached the server was sent before
	// this instant: the store keeps the claim until at least lastSend+TTL.
	cutAt := time.Now()
	lastValid := l.ValidUntil()

	type result struct {
		l   *baton.Lease
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		wl, err := waiterMu.Lock(ctx)
		got <- result{wl, err, time.Now()}
	}()
	select {
	case <-held:
	case r := <-got:
		t.Fatalf("the waiter's Lock returned while the lock was held: %v", r.err)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not find the lock held")
	}

	lostAt := awaitDone(t, l.Done(), 5*time.Second, "the partitioned holder's step-down")
	if cause := context.Cause(l.Context()); !errors.Is(cause, backend.ErrLost) {
		t.Errorf("the partitioned lease ended with %v, want ErrLost", cause)
	}
	if !lostAt.Before(lastValid) {
		t.Errorf("the partitioned lease ended %v after its ValidUntil", lostAt.Sub(lastValid))
	}

	var r result
	select {
	case r = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not acquire within 10s of the partition")
	}
	if r.err != nil {
		t.Fatalf("the waiter's Lock: %v", r.err)
	}
	defer r.l.Unlock(context.Background())
	if !lostAt.Before(r.at) {
		t.Errorf("the waiter acquired %v before the partitioned holder stopped", lostAt.Sub(r.at))
	}
	// The claim was last extended by a renew sent before cutAt - the waiter
	// cannot get it before (that renew's send) + TTL, so not before
	// lastValid (= send + TTL - margin).
	if r.at.Before(lastValid) {
		t.Errorf("the waiter acquired %v before the holder's validity ended", lastValid.Sub(r.at))
	}
	if r.l.Token() <= l.Token() {
		t.Errorf("the waiter got token %d after %d", r.l.Token(), l.Token())
	}
	t.Logf("cut at 0; holder stopped at %v; waiter acquired at %v (TTL %v)", lostAt.Sub(cutAt), r.at.Sub(cutAt), ttl)

	proxy.Restore()
	if err := l.Unlock(ctx); !errors.Is(err, backend.ErrLost) {
		t.Errorf("Unlock of the lost lease after the partition healed: %v, want ErrLost", err)
	}
}

// observe returns an Observer option that signals events of kind.
func observe(kind baton.EventKind) (baton.Option, <-chan struct{}) {
	ch := make(chan struct{}, 1)
	return baton.WithObserver(baton.ObserverFunc(func(ev baton.Event) {
		if ev.Kind == kind {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	})), ch
}
