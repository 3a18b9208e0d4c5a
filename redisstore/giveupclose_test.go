package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/testenv"
)

// TestHandoffWaiterGivesUpThenCloses: a waiter whose context ends and whose
// Store is closed right after (a process shutting down: defer store.Close(),
// or baton run's standby on SIGTERM) still gives up its place, and a lock
// handed to it, before Close returns; otherwise a release hands the lock to
// a process that is gone and the lock stays held by nobody for its TTL.
func TestHandoffWaiterGivesUpThenCloses(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	a, c := newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix)
	for _, handed := range []bool{false, true} {
		key := "closes-before"
		if handed {
			key = "closes-after"
		}
		b := newStore(t, srv.Addr(), prefix)
		ga, err := a.TryAcquire(ctx, key, request("a", time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		bctx, giveUp := context.WithCancel(ctx)
		_, err = b.TryAcquire(bctx, key, waitingRequest("b", time.Minute))
		heldBy(t, err)
		if handed {
			if err := a.Release(ctx, ga); err != nil {
				t.Fatal(err)
			}
		}
		giveUp()
		_ = b.Close()
		if !handed {
			if err := a.Release(ctx, ga); err != nil {
				t.Fatal(err)
			}
		}
		// b is gone: the lock must be free, not held by b for a minute.
		if rec, err := a.Get(ctx, key); err != nil || rec.Remaining > 0 {
			t.Errorf("%s: after b gave up and closed its Store: %+v, %v; want free", key, rec, err)
		}
		if _, err := c.TryAcquire(ctx, key, request("c", time.Minute)); err != nil {
			t.Errorf("%s: c after b gave up and closed: %v", key, err)
		}
	}
}
