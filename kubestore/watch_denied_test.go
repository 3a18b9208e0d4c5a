package kubestore

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/clocktest"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
)

// noWatchKind is memKind for an identity whose Role lacks "watch": every
// watch request is refused with 403.
type noWatchKind struct {
	*memKind
	watches atomic.Int32
}

func (k *noWatchKind) watch(context.Context, string, string) (watch.Interface, error) {
	k.watches.Add(1)
	return nil, apierrors.NewForbidden(leasesGR, "", errors.New(`User "sa" cannot watch resource "leases"`))
}

// TestWatchDenied: a watch refused for lack of the "watch" verb is not
// retried (no Role appears by retrying), and the next Watch of the same
// lock fails at once with the permission error, so that the engine polls
// every RetryPeriod as documented. Before, each Watch retried the refused
// watch six times over 4.2 s, then closed its channel; the engine, which
// only learned of the failure from the closed channel, opened a new watch
// every time and waited the held claim's full RetryAfter in between: a
// waiting standby without "watch" made about 3 requests a second
// (measured against a real API server: 89 Lease requests in 30 s, 9 with
// the watch allowed), none of them logged.
func TestWatchDenied(t *testing.T) {
	k := &noWatchKind{memKind: &memKind{objs: map[string]object{}}}
	s, err := newStore("ns", k, []Option{WithClock(clocktest.NewFakeClock(time.Now()))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := s.Watch(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-ch:
		if ok {
			t.Fatal("a notification from a watch that was refused")
		}
	case <-time.After(time.Second):
		t.Fatalf("the refused watch's channel is still open after 1s (%d watch requests): it is being retried", k.watches.Load())
	}
	n := k.watches.Load()
	if n != 1 {
		t.Errorf("%d watch requests for one refused watch; want 1", n)
	}
	_, err = s.Watch(ctx, "x")
	if !errors.Is(err, backend.ErrForbidden) {
		t.Errorf("Watch after the refusal: %v; want the permission error at once", err)
	}
	if got := k.watches.Load(); got != n {
		t.Errorf("Watch after the refusal sent %d more watch requests; want none", got-n)
	}
}

// TestDeniedWatchesOfManyNamesAreSwept: a process without "watch" that
// waits on many lock names (a lock per entity) keeps the refusal of each
// only while it is in force; the refusals of names never watched again
// stayed for as long as the Store lived.
func TestDeniedWatchesOfManyNamesAreSwept(t *testing.T) {
	k := &noWatchKind{memKind: &memKind{objs: map[string]object{}}}
	clk := clocktest.NewFakeClock(time.Now())
	s, err := newStore("ns", k, []Option{WithClock(clk)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 500 {
		ch, err := s.Watch(ctx, "entity-"+strconv.Itoa(i))
		if err != nil {
			t.Fatal(err)
		}
		for range ch { // closed once the watch was refused
		}
		if i%50 == 49 {
			clk.Step(watchDeniedFor / 2)
		}
	}
	s.mu.Lock()
	n := len(s.denied)
	s.mu.Unlock()
	if n > 4*minSweep {
		t.Errorf("after 500 names watched over %v, %d refusals are kept; want those past %v swept", 10*watchDeniedFor/2, n, watchDeniedFor)
	}
}
