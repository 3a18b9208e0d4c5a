package kubestore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/kubestore"
)

// TestClientRateLimited: a holder whose renewals wait in the store's own
// client-side rate limiter (WithRateLimit) past the renew deadline, as
// they do when one process holds many locks or its QPS is set low, steps
// down with an error matching kubestore.ErrRateLimited that names QPS,
// Burst and the fix. It said only that the renew had no answer, which
// sent users to the API server, which had never seen the request. A
// request whose deadline the limiter's wait would pass says so too. The
// limiter here allows 2 requests a second, and 200 reads of another
// object queue in it after the lock is taken. Unlock, after the
// step-down, does not wait for its release's turn there.
func TestClientRateLimited(t *testing.T) {
	cfg := controlPlane(t)
	ns := newNamespace(t)
	s, err := kubestore.NewLeaseForConfig(cfg, ns, kubestore.WithRateLimit(2, 2))
	if err != nil {
		t.Fatal(err)
	}
	m, err := baton.NewMutex(s, "limited", baton.WithTTL(3*time.Second), baton.WithRenewDeadline(2*time.Second),
		baton.WithRetryPeriod(500*time.Millisecond), baton.WithRenewInterval(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	flood, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() { _, _ = s.Get(flood, "other") })
	}
	defer func() { stop(); wg.Wait() }()

	<-l.Done()
	err = l.Err()
	t.Logf("the step-down: %v", err)
	if !errors.Is(err, baton.ErrStepDown) || !errors.Is(err, kubestore.ErrRateLimited) ||
		!strings.Contains(err.Error(), "QPS 2, Burst 2") || !strings.Contains(err.Error(), "WithRateLimit") {
		t.Errorf("step-down of a holder whose renew waited in the client's rate limiter: %v; want ErrStepDown and ErrRateLimited, naming QPS, Burst and WithRateLimit", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err = s.Get(ctx, "limited")
	t.Logf("the Get: %v", err)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, kubestore.ErrRateLimited) || !strings.Contains(err.Error(), "WithRateLimit") {
		t.Errorf("Get whose wait in the rate limiter would pass its deadline: %v; want context.DeadlineExceeded and ErrRateLimited, naming WithRateLimit", err)
	}

	// The release of the lease it lost queues in the same limiter, behind
	// the flood (100 s of it). Unlock returns the loss whatever the
	// release does, so it does not wait its turn however long the
	// caller's context allows: it waited there, about 18 s after the
	// step-down with 40 reads queued.
	uctx, ucancel := context.WithCancel(context.Background())
	defer ucancel()
	unlocked := make(chan error, 1)
	go func() { unlocked <- l.Unlock(uctx) }()
	select {
	case err = <-unlocked:
	case <-time.After(30 * time.Second):
		ucancel()
		err = <-unlocked
		t.Errorf("Unlock of a lease lost at its renew deadline waited for its release's turn in the rate limiter (30 s, unbounded context)")
	}
	if !errors.Is(err, baton.ErrStepDown) {
		t.Errorf("Unlock after the step-down: %v; want the step-down", err)
	}
}
