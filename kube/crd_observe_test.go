package kube

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/clocktest"
	"github.com/baton-go/baton/kube/api/v1alpha1"
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

func fakeReq(holder string) baton.Request {
	return baton.Request{Holder: holder, Nonce: baton.NewNonce(), TTL: 10 * time.Second}
}

// TestDLPerHolderObservation: with two holders, one renewing keeps only
// its own entry alive; a contender takes the other's slot once it has seen
// that entry unchanged for its TTL, although the object kept changing.
func TestDLPerHolderObservation(t *testing.T) {
	s, clk, _ := newFakeDLs(t, 3, WithCapacity(2))
	a, b, c := s[0], s[1], s[2]
	ctx := context.Background()
	const ttl = 10 * time.Second
	ga, err := a.TryAcquire(ctx, "pool", fakeReq("a"))
	if err != nil {
		t.Fatal(err)
	}
	gb, err := b.TryAcquire(ctx, "pool", fakeReq("b"))
	if err != nil {
		t.Fatal(err)
	}
	if gb.Token != ga.Token+1 {
		t.Fatalf("tokens %d, %d; want consecutive", ga.Token, gb.Token)
	}
	// c sees both entries at t=0.
	_, err = c.TryAcquire(ctx, "pool", fakeReq("c"))
	var held *baton.HeldError
	if !errors.As(err, &held) || held.RetryAfter != ttl {
		t.Fatalf("TryAcquire of a full lock: %v; want ErrHeld with RetryAfter %v", err, ttl)
	}
	for step := range 4 {
		clk.Step(ttl / 4)
		if ga, err = a.Renew(ctx, ga); err != nil {
			t.Fatalf("renew by a: %v", err)
		}
		_, err = c.TryAcquire(ctx, "pool", fakeReq("c"))
		if step < 3 {
			if !errors.As(err, &held) || held.Holder != "b" || held.RetryAfter != ttl-time.Duration(step+1)*ttl/4 {
				t.Fatalf("after %v: %v; want ErrHeld naming b with RetryAfter %v", time.Duration(step+1)*ttl/4, err, ttl-time.Duration(step+1)*ttl/4)
			}
		}
	}
	// At t=TTL b's entry has been unchanged for its TTL as c sees it.
	if err != nil {
		t.Fatalf("TryAcquire after b's entry expired: %v", err)
	}
	recs, err := c.Holders(ctx, "pool")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Holder != "a" || recs[1].Holder != "c" || recs[1].Token != gb.Token+1 {
		t.Fatalf("holders after the takeover: %+v", recs)
	}
	if _, err := b.Renew(ctx, gb); !errors.Is(err, baton.ErrLost) {
		t.Fatalf("renew by b after its entry was removed: %v; want ErrLost", err)
	}
	if _, err := a.Renew(ctx, ga); err != nil {
		t.Fatalf("renew by a: %v", err)
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
	if _, err := b.TryAcquire(ctx, "m", fakeReq("b")); !errors.Is(err, baton.ErrHeld) {
		t.Fatalf("TryAcquire of a held mutex: %v", err)
	}
	clk.Step(5 * time.Second)
	if _, err := a.Renew(ctx, g); !errors.Is(err, baton.ErrLost) {
		t.Fatalf("Renew at TTL: %v; want ErrLost", err)
	}
	if err := a.Release(ctx, g); !errors.Is(err, baton.ErrLost) {
		t.Fatalf("Release at TTL: %v; want ErrLost", err)
	}
	// b first saw the entry 5s after it was written: it waits 5s more.
	if _, err := b.TryAcquire(ctx, "m", fakeReq("b")); !errors.Is(err, baton.ErrHeld) {
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
	if _, err := s[0].TryAcquire(ctx, "future", fakeReq("a")); !errors.Is(err, baton.ErrCorruptRecord) {
		t.Fatalf("TryAcquire: %v; want ErrCorruptRecord", err)
	}
	if err := s[0].ForceRelease(ctx, "future"); !errors.Is(err, baton.ErrCorruptRecord) {
		t.Fatalf("ForceRelease: %v; want ErrCorruptRecord", err)
	}
}
