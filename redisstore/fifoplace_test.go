package redisstore_test

import (
	"testing"
	"time"

	"github.com/baton-go/baton/internal/testenv"
)

// TestFIFOPlaceLastsUntilRetry: a waiter with a TTL shorter than the
// holder's is told to retry when the holder's claim can first end, and
// does not ask before then. Its place must last until that retry: one
// TTL of its own after its attempt, the place ran out while it still
// waited as told, and a release handed the lock to the waiter behind it.
func TestFIFOPlaceLastsUntilRetry(t *testing.T) {
	srv := testenv.StartRedis(t)
	ctx := testCtx(t, 20*time.Second)
	prefix := uniquePrefix()
	const key = "fifo-place-retry"
	h, a, b := newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix), newStore(t, srv.Addr(), prefix)
	gh, err := h.TryAcquire(ctx, key, request("h", 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	const shortTTL = time.Second
	_, err = a.TryAcquire(ctx, key, waitingRequest("a", shortTTL))
	if held := heldBy(t, err); held.RetryAfter <= shortTTL {
		t.Fatalf("a was told to retry after %v; want the holder's claim's time left, above a's TTL %v", held.RetryAfter, shortTTL)
	}
	_, err = b.TryAcquire(ctx, key, waitingRequest("b", 20*time.Second))
	heldBy(t, err)
	// Wait, on the server's clock, until a's own TTL has passed since its
	// attempt: a has not been asked to retry yet.
	c := newClient(t, srv.Addr())
	now, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	until := now.Add(shortTTL + 100*time.Millisecond)
	for now.Before(until) {
		time.Sleep(until.Sub(now)) // the server's clock is the subject
		if now, err = c.Time(ctx).Result(); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Release(ctx, gh); err != nil {
		t.Fatal(err)
	}
	if rec, err := h.Get(ctx, key); err != nil || rec.Holder != "a" {
		t.Errorf("after the release: %+v, %v; want the lock handed to a, the first waiter, which was told to retry later", rec, err)
	}
}
