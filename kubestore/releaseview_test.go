package kubestore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/backend"
)

// TestTryLockAfterOwnUnlock: once Unlock returned, a TryLock of the same
// process never reports the lock held by the claim it just released, even
// while the Store's watch of the lock (open for a waiter of the same
// process) has not delivered the release yet. Another holder (the waiter)
// may have taken it: that is a held lock, with another token.
func TestTryLockAfterOwnUnlock(t *testing.T) {
	cfg := controlPlane(t)
	b := newLease(t, cfg, newNamespace(t))
	opts := []baton.Option{baton.WithTTL(2 * time.Second), baton.WithRenewDeadline(1500 * time.Millisecond),
		baton.WithRetryPeriod(400 * time.Millisecond), quiet}
	a, err := baton.NewMutex(b, "x", opts...)
	if err != nil {
		t.Fatal(err)
	}
	w, err := baton.NewMutex(b, "x", opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { // keeps a watch of x open in the Store
		for wctx.Err() == nil {
			if l, err := w.Lock(wctx); err == nil {
				l.Unlock(ctx)
			}
		}
	})
	defer wg.Wait()
	defer cancel()
	for range 30 {
		l, err := a.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		l2, err := a.TryLock(ctx)
		var he *backend.HeldError
		switch {
		case err == nil:
			l2.Unlock(ctx)
		case errors.As(err, &he) && he.Token == l.Token():
			t.Fatalf("TryLock right after Unlock of token %d: %v", l.Token(), err)
		case !errors.Is(err, baton.ErrHeld):
			t.Fatal(err)
		}
	}
}
