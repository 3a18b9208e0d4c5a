package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/faultproxy"
	"github.com/baton-go/baton/internal/testenv"
)

// TestHolderConnectionDropped: a holder whose connection a middlebox drops
// silently (a NAT or firewall that forgets the flow: nothing answers,
// nothing is closed, a new connection works) keeps its lock: its renewals
// go on over a new connection before its renew deadline. Before, the
// renewal waited on the dead connection for go-redis's ReadTimeout (5 s
// by default), the whole time the engine's timings give a renewal (TTL/3),
// and the holder stepped down at its renew deadline every time.
func TestHolderConnectionDropped(t *testing.T) {
	srv := testenv.StartRedis(t)
	proxy, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	ctx := testCtx(t, time.Minute)
	renewedOpt, renewed := observe(baton.EventRenewed)
	m, err := baton.NewMutex(newStore(t, proxy.Addr(), uniquePrefix()), "dropped", baton.WithTTL(6*time.Second), renewedOpt, quiet)
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(context.Background())
	awaitDone(t, renewed, 10*time.Second, "a renewal before the drop")
	proxy.Drop()
	dropped := time.Now()
	for range 3 {
		select {
		case <-renewed:
		case <-l.Done():
			t.Fatalf("the lease ended %v after the connection was dropped: %v", time.Since(dropped), context.Cause(l.Context()))
		}
	}
	t.Logf("three renewals in %v after the drop", time.Since(dropped))
}
