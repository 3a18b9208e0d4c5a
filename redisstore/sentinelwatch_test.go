package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/internal/testenv"
)

// The sentinel whose +switch-master go-redis's client listens to dies,
// then the other sentinels fail over (SENTINEL FAILOVER: the old primary
// is alive, and stays writable until they demote it, some seconds after
// the promotion). The Store must follow the promotion, not write to the
// old primary until its demotion: a Store that heard the switch writes to
// the new one meanwhile, and the same lock would have two holders. (It
// wrote to the old primary for the whole window: go-redis re-resolves the
// primary only when it dials, and its subscription kept redialling the
// dead sentinel.)
func TestSentinelFailoverAfterSubscribedSentinelDies(t *testing.T) {
	topo := testenv.StartRedisSentinel(t)
	s := openURL(t, topo.URL(), uniquePrefix())
	ctx := testCtx(t, 2*time.Minute)
	g, err := s.TryAcquire(ctx, "warmup", request("a", 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	// go-redis's client subscribes to two channels on one sentinel
	// (+switch-master and +replica-reconf-done): sub=2.
	subscribed := -1
	for i, sn := range topo.Sentinels {
		list, err := newClient(t, sn.Addr()).Do(ctx, "CLIENT", "LIST", "TYPE", "pubsub").Text()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(list, " sub=2 ") {
			subscribed = i
		}
	}
	if subscribed < 0 {
		t.Fatal("no sentinel has go-redis's subscription")
	}
	old := topo.Primary()
	topo.Sentinels[subscribed].Kill()
	other := topo.Sentinels[(subscribed+1)%len(topo.Sentinels)]
	if err := newClient(t, other.Addr()).Do(ctx, "SENTINEL", "FAILOVER", testenv.RedisSentinelName).Err(); err != nil {
		t.Fatal(err)
	}
	promoted := topo.AwaitFailover(t, old, 60*time.Second)
	oldc, newc := newClient(t, old.Addr()), newClient(t, promoted.Addr())
	// Acquire new locks until one lands on the promoted primary; fail if
	// the sentinels demote the old primary before an attempt that does
	// (the Store wrote to it for the whole time it was writable).
	for i := 0; ; i++ {
		role, err := oldc.Do(ctx, "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] != "master" {
			t.Fatalf("the Store wrote to the old primary %s (%d acquisitions) until the sentinels demoted it: two holders could coexist; want it to follow the promotion of %s",
				old.Addr(), i, promoted.Addr())
		}
		name := fmt.Sprintf("job-%d", i)
		if _, err := s.TryAcquire(ctx, name, request("b", 30*time.Second)); err != nil {
			t.Logf("TryAcquire %s: %v", name, err)
		}
		if onNew, _ := newc.Keys(ctx, "*"+name+"*").Result(); len(onNew) > 0 {
			t.Logf("attempt %d reached the promoted primary %s", i, promoted.Addr())
			return
		}
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
		time.Sleep(100 * time.Millisecond) // the old primary's demotion is observable only by asking
	}
}

// A Lock waits on a Sentinel Store while the sentinels fail over (all of
// them alive, the old primary too), and the holder releases on the new
// primary. The waiter must hear the release: its subscription stayed on
// the old primary, which hears none of the new one's notices until the
// sentinels demote it (some seconds later), and meanwhile the waiter
// answered its attempts from the refusal it had seen, without a request.
func TestSentinelFailoverWaiterHearsRelease(t *testing.T) {
	topo := testenv.StartRedisSentinel(t)
	prefix := uniquePrefix()
	holder, waiter := openURL(t, topo.URL(), prefix), openURL(t, topo.URL(), prefix)
	ctx := testCtx(t, 2*time.Minute)
	g, err := holder.TryAcquire(ctx, "job", request("h", 30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	mu, err := baton.NewMutex(waiter, "job", baton.WithTTL(30*time.Second), baton.WithIdentity("w"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := mu.Lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	awaitWaiting(t, ctx, topo.Primary(), "job")
	old := topo.Primary()
	if err := newClient(t, topo.Sentinels[0].Addr()).Do(ctx, "SENTINEL", "FAILOVER", testenv.RedisSentinelName).Err(); err != nil {
		t.Fatal(err)
	}
	promoted := topo.AwaitFailover(t, old, 60*time.Second)
	// A Store opened now reaches the promoted primary only.
	if err := openURL(t, topo.URL(), prefix).Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if role, err := newClient(t, old.Addr()).Do(ctx, "ROLE").Slice(); err != nil || len(role) == 0 || role[0] != "master" {
		t.Fatalf("the waiter took the lock released on %s only after the old primary %s was demoted (ROLE %v, %v): it did not hear the release",
			promoted.Addr(), old.Addr(), role, err)
	}
}

// awaitWaiting waits until a waiter for lock has its place in the lock's
// queue on srv (so its watch is open).
func awaitWaiting(t *testing.T, ctx context.Context, srv *testenv.RedisServer, lock string) {
	t.Helper()
	c := newClient(t, srv.Addr())
	for {
		keys, err := c.Keys(ctx, "*"+lock+"*queue*").Result()
		if err == nil && len(keys) > 0 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("no waiter queued for %s: %v", lock, ctx.Err())
		}
		time.Sleep(20 * time.Millisecond) // the queue is observable only by asking
	}
}
