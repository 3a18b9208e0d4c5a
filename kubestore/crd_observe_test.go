package kubestore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/clocktest"
	"github.com/baton-go/baton/kubestore/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// newFakeDLs returns n DistributedLockStores (separate processes) on one
// fake API server (resourceVersion preconditions enforced) and one fake
// clock.
func newFakeDLs(t *testing.T, n int, opts ...DistributedLockOption) ([]*DistributedLockStore, *clocktest.FakeClock, client.WithWatch) {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(Scheme()).Build()
	clk := clocktest.NewFakeClock(time.Unix(1_000_000, 0))
	out := make([]*DistributedLockStore, n)
	for i := range out {
		s, err := NewDistributedLock(c, "ns", append([]DistributedLockOption{WithClock(clk)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = s
	}
	return out, clk, c
}

func fakeReq(holder string) backend.Request {
	return backend.Request{Holder: holder, Nonce: baton.NewNonce(), TTL: 10 * time.Second}
}

// TestDLCapacityAboveOne: an object with spec.capacity above 1, as baton's
// first versions wrote for a counting semaphore, is refused for acquiring
// with ErrMisconfigured naming the fix, also through a waiting Mutex; its
// holders still renew and release their entries; once its capacity is set
// to 1, a contender waits for the live entry and then takes the lock with
// a larger token.
func TestDLCapacityAboveOne(t *testing.T) {
	s, clk, c := newFakeDLs(t, 3)
	a, b, newcomer := s[0], s[1], s[2]
	ctx := context.Background()
	now := metav1.NewMicroTime(clk.Now())
	entry := func(id string, token int64) v1alpha1.Holder {
		return v1alpha1.Holder{Identity: id, Nonce: id + "-nonce", Token: token, LeaseDurationSeconds: 10, AcquireTime: &now, RenewTime: &now}
	}
	old := &v1alpha1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "ns"},
		Spec:       v1alpha1.DistributedLockSpec{LeaseDurationSeconds: 10, Capacity: 2},
		Status:     v1alpha1.DistributedLockStatus{Token: 6, Holders: []v1alpha1.Holder{entry("a", 5), entry("b", 6)}},
	}
	if err := c.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	_, err := newcomer.TryAcquire(ctx, "pool", fakeReq("new"))
	for _, want := range []string{"spec.capacity 2", "baton.NewSemaphore(store, \"pool\", 2)", "kubectl -n ns patch distributedlock pool"} {
		if !errors.Is(err, backend.ErrMisconfigured) || !strings.Contains(err.Error(), want) {
			t.Fatalf("TryAcquire of a capacity-2 object: %v; want ErrMisconfigured mentioning %q", err, want)
		}
	}
	m, err := baton.NewMutex(newcomer, "pool", baton.WithIdentity("new"), baton.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Lock(ctx); !errors.Is(err, backend.ErrMisconfigured) {
		t.Fatalf("Mutex.Lock of a capacity-2 object: %v; want ErrMisconfigured at once", err)
	}

	grant := func(h v1alpha1.Holder) backend.Grant {
		var cur v1alpha1.DistributedLock
		if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "pool"}, &cur); err != nil {
			t.Fatal(err)
		}
		return backend.Grant{Key: "pool", Holder: h.Identity, Nonce: h.Nonce, Token: uint64(h.Token), TTL: 10 * time.Second,
			Version: versionOf(cur.ResourceVersion, string(cur.UID))}
	}
	ga, err := a.Renew(ctx, grant(entry("a", 5)))
	if err != nil || ga.Token != 5 {
		t.Fatalf("renew by an old holder: token %d, %v; want 5", ga.Token, err)
	}
	if err := b.Release(ctx, grant(entry("b", 6))); err != nil {
		t.Fatalf("release by an old holder: %v", err)
	}

	var cur v1alpha1.DistributedLock
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "pool"}, &cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.Capacity = 1
	if err := c.Update(ctx, &cur); err != nil {
		t.Fatal(err)
	}
	_, err = newcomer.TryAcquire(ctx, "pool", fakeReq("new"))
	var held *backend.HeldError
	if !errors.As(err, &held) || held.Holder != "a" {
		t.Fatalf("TryAcquire once capacity is 1, with a's entry live: %v; want ErrHeld naming a", err)
	}
	if err := a.Release(ctx, grant(entry("a", 5))); err != nil {
		t.Fatalf("release by a: %v", err)
	}
	g, err := newcomer.TryAcquire(ctx, "pool", fakeReq("new"))
	if err != nil || g.Token <= 6 {
		t.Fatalf("TryAcquire after both old holders left: token %d, %v; want above 6", g.Token, err)
	}
}

// TestDLHolderJudgesFromSendTime: a holder's own store counts its entry
// from the send time of its last write, so it gives up no later than any
// observer: Renew and Release after the TTL return ErrLost, and the entry
// is not resurrected.
func TestDLHolderJudgesFromSendTime(t *testing.T) {
	s, clk, _ := newFakeDLs(t, 2)
	a, b := s[0], s[1]
	ctx := context.Background()
	g, err := a.TryAcquire(ctx, "m", fakeReq("a"))
	if err != nil {
		t.Fatal(err)
	}
	clk.Step(5 * time.Second)
	if _, err := b.TryAcquire(ctx, "m", fakeReq("b")); !errors.Is(err, backend.ErrHeld) {
		t.Fatalf("TryAcquire of a held mutex: %v", err)
	}
	clk.Step(5 * time.Second)
	if _, err := a.Renew(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Fatalf("Renew at TTL: %v; want ErrLost", err)
	}
	if err := a.Release(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Fatalf("Release at TTL: %v; want ErrLost", err)
	}
	// b first saw the entry 5s after it was written: it waits 5s more.
	if _, err := b.TryAcquire(ctx, "m", fakeReq("b")); !errors.Is(err, backend.ErrHeld) {
		t.Fatalf("TryAcquire 5s into b's observation: %v; want ErrHeld", err)
	}
	clk.Step(5 * time.Second)
	g2, err := b.TryAcquire(ctx, "m", fakeReq("b"))
	if err != nil || g2.Token != g.Token+1 {
		t.Fatalf("TryAcquire after b's observation: token %d, %v", g2.Token, err)
	}
}

// TestDLRenewTimeStrictlyIncreases: a renew always changes the entry, even
// when the wall clock has not moved or stepped back.
func TestDLRenewTimeStrictlyIncreases(t *testing.T) {
	future := metav1.NewMicroTime(time.Now().Add(time.Hour))
	next := microNow(time.Now(), &future)
	if !next.After(future.Time) {
		t.Fatalf("microNow(%v) = %v; want later", future, next)
	}
	if now := microNow(time.Now(), nil); now.Nanosecond()%1000 != 0 {
		t.Fatalf("microNow is not truncated to microseconds: %v", now)
	}
}

// TestDLNewerFormatNotWritten: an object of a newer record format is never
// written.
func TestDLNewerFormatNotWritten(t *testing.T) {
	s, _, c := newFakeDLs(t, 1)
	ctx := context.Background()
	l := &v1alpha1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Name: "future", Namespace: "ns"},
		Spec:       v1alpha1.DistributedLockSpec{LeaseDurationSeconds: 10, Capacity: 1},
		Status:     v1alpha1.DistributedLockStatus{ProtocolVersion: 2},
	}
	if err := c.Create(ctx, l); err != nil {
		t.Fatal(err)
	}
	if _, err := s[0].TryAcquire(ctx, "future", fakeReq("a")); !errors.Is(err, backend.ErrCorruptRecord) {
		t.Fatalf("TryAcquire: %v; want ErrCorruptRecord", err)
	}
	if err := s[0].ForceRelease(ctx, "future"); !errors.Is(err, backend.ErrCorruptRecord) {
		t.Fatalf("ForceRelease: %v; want ErrCorruptRecord", err)
	}
}

// TestDLForgetsReleasedNames: a process that takes many distinct lock
// names one after another (a lock per job) keeps no copy of a released
// object and no claim for it, and forgets what it saw of a name once that
// has aged past twice its lease duration, so its memory does not grow
// with the names it has used.
func TestDLForgetsReleasedNames(t *testing.T) {
	s, clk, _ := newFakeDLs(t, 1)
	dl, ctx := s[0], context.Background()
	req := fakeReq("worker")
	for i := range 4 * minSweep {
		req.Nonce = baton.NewNonce()
		g, err := dl.TryAcquire(ctx, fmt.Sprintf("job-%d", i), req)
		if err != nil {
			t.Fatal(err)
		}
		if err := dl.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
		if len(dl.last)+len(dl.claims) != 0 {
			t.Fatalf("after job-%d: %d released objects and %d claims kept; want none", i, len(dl.last), len(dl.claims))
		}
		if n := len(dl.seen); n > minSweep+1 {
			t.Fatalf("after job-%d: %d names seen, each aged past twice its duration but the last; want at most %d", i, n, minSweep+1)
		}
		clk.Step(2*req.TTL + time.Second)
	}
}

// TestDLForgetsClaimsSeenLongAgo: a process that finds many lock names
// held once each and never looks at them again (a loser of schedule's
// lock per slot) forgets each claim once it is twice its lease duration
// old, instead of keeping one per name for ever; it keeps the claims it
// saw more recently.
func TestDLForgetsClaimsSeenLongAgo(t *testing.T) {
	s, clk, _ := newFakeDLs(t, 2)
	holder, loser, ctx := s[0], s[1], context.Background()
	ttl := fakeReq("").TTL
	slot := func(i int) string { return fmt.Sprintf("slot-%d", i) }
	const n = 4 * minSweep
	for i := range n {
		if _, err := holder.TryAcquire(ctx, slot(i), fakeReq("winner")); err != nil {
			t.Fatal(err)
		}
		if _, err := loser.TryAcquire(ctx, slot(i), fakeReq("loser")); !errors.Is(err, backend.ErrHeld) {
			t.Fatalf("loser's TryAcquire of %s: %v; want ErrHeld", slot(i), err)
		}
		if k := len(loser.claims); k > minSweep+1 {
			t.Fatalf("after %s: %d claims kept; want at most %d", slot(i), k, minSweep+1)
		}
		clk.Step(ttl / 2)
	}
	// Seen at most twice their duration ago: kept through every sweep.
	for i := n - 4; i < n; i++ {
		if _, ok := loser.claims[slot(i)]; !ok {
			t.Fatalf("the claim on %s, seen %v ago, was forgotten", slot(i), time.Duration(n-i)*ttl/2)
		}
	}
}
