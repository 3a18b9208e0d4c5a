package kubestore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/util/flowcontrol"
)

// waitingLimiter is the token-bucket rate limiter of the store's own
// client (the ForConfig constructors), which records the requests waiting
// in it: a renew that waits there past the renew deadline has had no
// answer because this process held it back, not because the API server
// gave none, and the store says so (Stall).
type waitingLimiter struct {
	flowcontrol.RateLimiter
	qps   float32
	burst int

	mu    sync.Mutex
	next  uint64
	waits map[uint64]time.Time // waits in progress, by when they began
}

func newWaitingLimiter(qps float32, burst int) *waitingLimiter {
	return &waitingLimiter{
		RateLimiter: flowcontrol.NewTokenBucketRateLimiter(qps, burst),
		qps:         qps, burst: burst,
		waits: make(map[uint64]time.Time),
	}
}

// Wait is the token bucket's, recorded while it lasts.
func (l *waitingLimiter) Wait(ctx context.Context) error {
	l.mu.Lock()
	id := l.next
	l.next++
	l.waits[id] = time.Now()
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.waits, id)
		l.mu.Unlock()
	}()
	return l.RateLimiter.Wait(ctx)
}

// longest returns how many requests wait now, and for how long the one
// that has waited longest has.
func (l *waitingLimiter) longest() (n int, longest time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, began := range l.waits {
		longest = max(longest, time.Since(began))
	}
	return len(l.waits), longest
}

// stall returns an error matching ErrRateLimited if a request has waited
// in the limiter for at least half of waited (allowing for a first
// request of the call that passed), and nil otherwise. A nil limiter
// knows nothing (a client the caller built).
func (l *waitingLimiter) stall(waited time.Duration) error {
	if l == nil {
		return nil
	}
	n, longest := l.longest()
	if n == 0 || longest < waited/2 {
		return nil
	}
	return fmt.Errorf("kube: %w: %d request(s) of this process are waiting there now, the longest for %v, unsent, so the API server has not seen them; %s",
		ErrRateLimited, n, longest.Round(time.Millisecond), l.fix())
}

// wouldExceed is the error of a request that the limiter did not send
// because its wait would have passed the request's deadline.
func (l *waitingLimiter) wouldExceed() error {
	return fmt.Errorf("%w: the request would have waited there past its context's deadline, so it was not sent; %s", ErrRateLimited, l.fix())
}

// fix says what ends waits in the limiter.
func (l *waitingLimiter) fix() string {
	return fmt.Sprintf("the limiter allows QPS %v, Burst %d: raise them (kubestore.WithRateLimit), or hold fewer locks per process "+
		"(each holder renews every third of its TTL by default)", l.qps, l.burst)
}

// Stall reports requests that wait in the store's own client-side rate
// limiter (backend.StallExplainer): when a renew has had no answer for
// waited, an error matching ErrRateLimited if a request of this process
// has waited there for at least half as long, naming QPS, Burst and the
// fix; nil otherwise, and always for a client the caller built (NewLease,
// NewConfigMap), whose limiter the store cannot see.
func (s *store) Stall(waited time.Duration) error {
	if s.clientNote == nil {
		return nil
	}
	return s.clientNote.limiter.stall(waited)
}

// Stall is the Lease store's Stall, for DistributedLock objects.
func (s *DistributedLockStore) Stall(waited time.Duration) error { return s.base.Stall(waited) }
