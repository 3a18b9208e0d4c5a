package kubestore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/clocktest"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// memKind is an in-memory kind with resourceVersion preconditions, so the
// observation logic can be tested on a fake clock.
type memKind struct {
	mu   sync.Mutex
	rv   int
	objs map[string]object
	gets int
	// interfere, if set, changes the object before every update, as a
	// faster contender would.
	interfere bool
}

var leasesGR = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

func (*memKind) resource() string       { return "leases.coordination.k8s.io" }
func (*memKind) rbacRule(string) string { return "" }

func (k *memKind) get(_ context.Context, name string) (object, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.gets++
	o, ok := k.objs[name]
	if !ok {
		return object{}, apierrors.NewNotFound(leasesGR, name)
	}
	return o, nil
}

func (k *memKind) create(_ context.Context, o object) (object, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.objs[o.name]; ok {
		return object{}, apierrors.NewAlreadyExists(leasesGR, o.name)
	}
	k.rv++
	o.rv = strconv.Itoa(k.rv)
	o.uid = "uid-" + o.rv
	o.claimed = o.holder != "" // as encodeLease writes it
	if o.pending {
		o.token = uint64(k.rv) // as decodeLease reads it
	}
	k.objs[o.name] = o
	return o, nil
}

// remove deletes name at once, as kubectl delete does to an object
// without finalizers (one that an older baton wrote, or whose finalizer
// someone removed by hand); the deletion is a write, as it is in etcd.
func (k *memKind) remove(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.objs, name)
	k.rv++
}

// deleteObject is kubectl delete as the API server applies it: an object
// with FinalizerClaim is marked deleting (a write), one without is gone.
func (k *memKind) deleteObject(name string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.rv++
	o, ok := k.objs[name]
	if !ok || !o.claimed {
		delete(k.objs, name)
		return
	}
	o.deleting, o.rv = true, strconv.Itoa(k.rv)
	k.objs[name] = o
}

func (k *memKind) update(_ context.Context, o object) (object, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	cur, ok := k.objs[o.name]
	if !ok {
		return object{}, apierrors.NewNotFound(leasesGR, o.name)
	}
	if k.interfere {
		k.rv++
		cur.rv = strconv.Itoa(k.rv)
		k.objs[o.name] = cur
	}
	if cur.rv != o.rv {
		return object{}, apierrors.NewConflict(leasesGR, o.name, errors.New("the object has been modified"))
	}
	k.rv++
	o.rv = strconv.Itoa(k.rv)
	if o.pending {
		o.token = uint64(k.rv)
	}
	// As encodeLease writes the finalizer, and the API server refuses to
	// add one to an object being deleted.
	o.deleting = cur.deleting
	o.claimed = o.holder != "" && (cur.claimed || !cur.deleting)
	if o.deleting && !o.claimed {
		delete(k.objs, o.name) // the last finalizer is gone
		return o, nil
	}
	k.objs[o.name] = o
	return o, nil
}

// deleteVersion is a delete with the preconditions uid and
// resourceVersion, as the API server applies it.
func (k *memKind) deleteVersion(_ context.Context, o object) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	cur, ok := k.objs[o.name]
	switch {
	case !ok:
		return apierrors.NewNotFound(leasesGR, o.name)
	case cur.uid != o.uid || cur.rv != o.rv:
		return apierrors.NewConflict(leasesGR, o.name, errors.New("the precondition on uid or resourceVersion failed"))
	}
	k.rv++
	if !cur.claimed {
		delete(k.objs, o.name)
		return nil
	}
	cur.deleting, cur.rv = true, strconv.Itoa(k.rv)
	k.objs[o.name] = cur
	return nil
}

func (k *memKind) list(context.Context) ([]object, error) { return nil, nil }
func (k *memKind) watch(context.Context, string, string) (watch.Interface, error) {
	return watch.NewFake(), nil
}

func newMemStores(t *testing.T) (a, b *store, clk *clocktest.FakeClock, k *memKind) {
	t.Helper()
	k = &memKind{objs: map[string]object{}}
	clk = clocktest.NewFakeClock(time.Now())
	a, err := newStore("ns", k, []Option{WithClock(clk)})
	if err != nil {
		t.Fatal(err)
	}
	b, err = newStore("ns", k, []Option{WithClock(clk)})
	if err != nil {
		t.Fatal(err)
	}
	return a, b, clk, k
}

// TestExpiryByObservation: a claim of someone else expires only after this
// store has seen it unchanged for its lease duration; any change to the
// claim restarts the count (a change of other fields does not:
// TestOtherWriterKeepsNoDeadClaim); RetryAfter is the rest of the window.
func TestExpiryByObservation(t *testing.T) {
	a, b, clk, k := newMemStores(t)
	ctx := context.Background()
	const ttl = 3 * time.Second
	g, err := a.TryAcquire(ctx, "x", backend.Request{Holder: "a", Nonce: "n1", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}

	clk.Step(2 * time.Second) // b has not looked yet: time before its first look does not count
	_, err = b.TryAcquire(ctx, "x", backend.Request{Holder: "b", Nonce: "n2", TTL: ttl})
	var held *backend.HeldError
	if !errors.As(err, &held) || held.RetryAfter != ttl {
		t.Fatalf("first look: %v (RetryAfter %v); want ErrHeld with RetryAfter %v", err, retryAfter(held), ttl)
	}
	clk.Step(ttl - time.Millisecond)
	_, err = b.TryAcquire(ctx, "x", backend.Request{Holder: "b", Nonce: "n2", TTL: ttl})
	if !errors.As(err, &held) || held.RetryAfter != time.Millisecond {
		t.Fatalf("1ms before the window ends: %v; want ErrHeld with RetryAfter 1ms", err)
	}

	// The holder's store counts from its own send time: it is past the TTL.
	if _, err := a.Renew(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Errorf("Renew %v after the acquire was sent: %v; want ErrLost", 2*time.Second+ttl-time.Millisecond, err)
	}

	// Any change to the claim (here its renewTime, as a renewal writes)
	// restarts the window.
	k.mu.Lock()
	o := k.objs["x"]
	k.rv++
	o.rv, o.renew = strconv.Itoa(k.rv), o.renew.Add(time.Second)
	k.objs["x"] = o
	k.mu.Unlock()
	clk.Step(time.Millisecond)
	_, err = b.TryAcquire(ctx, "x", backend.Request{Holder: "b", Nonce: "n2", TTL: ttl})
	if !errors.As(err, &held) || held.RetryAfter != ttl {
		t.Fatalf("after a change: %v; want ErrHeld with a new full window %v", err, ttl)
	}
	clk.Step(ttl)
	g2, err := b.TryAcquire(ctx, "x", backend.Request{Holder: "b", Nonce: "n2", TTL: ttl})
	if err != nil {
		t.Fatalf("after the window: %v", err)
	}
	if g2.Token != g.Token+1 {
		t.Errorf("token %d after %d", g2.Token, g.Token)
	}
	rec, err := a.Get(ctx, "x")
	if err != nil || rec.Remaining != ttl || rec.Holder != "b" {
		t.Errorf("Get by a after the takeover: %+v, %v; want b's claim with a full window", rec, err)
	}
}

// TestRenewWindowFromSendTime: the holder's own store counts its claim
// from the send time of its last successful write.
func TestRenewWindowFromSendTime(t *testing.T) {
	a, _, clk, _ := newMemStores(t)
	ctx := context.Background()
	const ttl = 2 * time.Second
	g, err := a.TryAcquire(ctx, "x", backend.Request{Holder: "a", Nonce: "n1", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		clk.Step(ttl - time.Millisecond)
		if g, err = a.Renew(ctx, g); err != nil {
			t.Fatalf("Renew within the TTL: %v", err)
		}
	}
	clk.Step(ttl)
	if err := a.Release(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Errorf("Release a TTL after the last renew: %v; want ErrLost", err)
	}
}

func retryAfter(h *backend.HeldError) time.Duration {
	if h == nil {
		return 0
	}
	return h.RetryAfter
}

// TestRenewWithoutRead: a renew of the version this process wrote is one
// conditional update, without a read; a stale grant still reads and fails.
func TestRenewWithoutRead(t *testing.T) {
	a, b, _, k := newMemStores(t)
	ctx := context.Background()
	g, err := a.TryAcquire(ctx, "x", backend.Request{Holder: "a", Nonce: "n1", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	before := k.gets
	g2, err := a.Renew(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if k.gets != before {
		t.Errorf("Renew read the object %d times; want none", k.gets-before)
	}
	// Another store changed the object (a renew by the owner through a
	// second client): the cached version conflicts, the store re-reads.
	if _, err := b.Renew(ctx, g2); err != nil {
		t.Fatalf("Renew through another store: %v", err)
	}
	if _, err := a.Renew(ctx, g2); err != nil {
		t.Fatalf("Renew after a conflict: %v", err)
	}
	if err := a.Release(ctx, g2); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Renew(ctx, g2); !errors.Is(err, backend.ErrLost) {
		t.Errorf("Renew after Release: %v; want ErrLost", err)
	}
}

// TestContended: when every conditional write loses, TryAcquire reports
// the lock held (by unknown winners) after WithMaxConflicts attempts.
func TestContended(t *testing.T) {
	a, b, _, k := newMemStores(t)
	ctx := context.Background()
	g, err := a.TryAcquire(ctx, "x", backend.Request{Holder: "a", Nonce: "n1", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	k.interfere = true
	before := k.gets
	_, err = b.TryAcquire(ctx, "x", backend.Request{Holder: "b", Nonce: "n2", TTL: 2 * time.Second})
	var held *backend.HeldError
	if !errors.As(err, &held) || held.Holder != "" || !strings.Contains(err.Error(), "contended") {
		t.Fatalf("TryAcquire losing every race: %v; want a HeldError saying the lock is contended", err)
	}
	if n := k.gets - before; n != DefaultMaxConflicts {
		t.Errorf("%d attempts, want %d", n, DefaultMaxConflicts)
	}
}

// TestObservationsOfManyNamesAreSwept: a process that locks many names
// (a scheduler's per-slot locks) keeps observations only of claims that
// could still be live, and its own live claim keeps its own.
func TestObservationsOfManyNamesAreSwept(t *testing.T) {
	a, _, clk, _ := newMemStores(t)
	ctx := context.Background()
	const ttl = 2 * time.Second
	mine, err := a.TryAcquire(ctx, "mine", backend.Request{Holder: "a", Nonce: "n", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 500 {
		name := "slot-" + strconv.Itoa(i)
		g, err := a.TryAcquire(ctx, name, backend.Request{Holder: "a", Nonce: "n", TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
		if i%50 == 49 {
			clk.Step(ttl / 2)
			if mine, err = a.Renew(ctx, mine); err != nil {
				t.Fatal(err)
			}
		}
	}
	a.mu.Lock()
	n := len(a.seen)
	a.mu.Unlock()
	if n > 4*minSweep {
		t.Errorf("after 500 names locked and released over %v, %d observations are kept; want them swept", 10*ttl/2, n)
	}
	if rv, _ := splitVersion(mine.Version); !ok(a.written("mine", rv)) {
		t.Error("the sweep dropped the observation of the store's own live claim")
	}
}

func ok(_ object, ok bool) bool { return ok }
