package kubestore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore/api/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestDLDeletedWhileHeld: the DistributedLock store's answer to kubectl
// delete of a held object, on a fake API server whose resourceVersions
// are one counter, as the real one's are (envtest_deleted_test.go checks
// the real one): the contender that saw the claim waits a TTL from when
// it first saw the object missing, the holder's renew gets ErrLost and
// recreates nothing, and the next token is larger.
func TestDLDeletedWhileHeld(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(Scheme()).WithGlobalResourceVersionCounter().Build()
	clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
	newS := func() *DistributedLockStore {
		s, err := NewDistributedLock(c, "ns", WithClock(clk))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := newS(), newS()
	ctx := context.Background()
	const ttl = 10 * time.Second // fakeReq's
	ga, err := a.TryAcquire(ctx, "x", fakeReq("a"))
	if err != nil {
		t.Fatal(err)
	}
	l := &v1alpha1.DistributedLock{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "x"}, l); err != nil {
		t.Fatal(err)
	}
	if !pendingToken(l) || l.Status.ProtocolVersion != v1alpha1.ProtocolVersionPendingToken {
		t.Fatalf("a created object: annotations %v, protocolVersion %d; want the pending token marked", l.Annotations, l.Status.ProtocolVersion)
	}
	if ga, err = a.Renew(ctx, ga); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "x"}, l); err != nil {
		t.Fatal(err)
	}
	if pendingToken(l) || l.Status.Token != int64(ga.Token) || l.Status.Holders[0].Token != int64(ga.Token) ||
		l.Status.ProtocolVersion != v1alpha1.ProtocolVersion {
		t.Fatalf("after the creator's renewal: %+v; want token %d written as a number", l.Status, ga.Token)
	}
	breq := fakeReq("b")
	heldErr(t, errOf(b.TryAcquire(ctx, "x", breq)), "b while a holds")
	// The object goes at once: its finalizer removed by hand first, as
	// on an object an older baton wrote (FinalizerClaim's path is in
	// TestDeletedWhileHeld, on a real API server).
	l.Finalizers = nil
	if err := c.Update(ctx, l); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, &v1alpha1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x"}}); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	held := heldErr(t, errOf(b.TryAcquire(ctx, "x", breq)), "b after the deletion")
	if held.Holder != "a" || held.Token != ga.Token || held.RetryAfter != ttl {
		t.Errorf("HeldError after the deletion: holder %q token %d RetryAfter %v; want a, %d, %v",
			held.Holder, held.Token, held.RetryAfter, ga.Token, ttl)
	}
	clk.Step(ttl - time.Millisecond)
	heldErr(t, errOf(b.TryAcquire(ctx, "x", breq)), "b just before the TTL has passed since it saw the object missing")
	if _, err := a.Renew(ctx, ga); !errors.Is(err, backend.ErrLost) {
		t.Fatalf("the holder's renew of a deleted object: %v; want ErrLost", err)
	}
	if err := a.Release(ctx, ga); !errors.Is(err, backend.ErrLost) {
		t.Fatalf("the holder's release of a deleted object: %v; want ErrLost", err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "x"}, l); !apierrors.IsNotFound(err) {
		t.Fatalf("the holder's renew or release recreated the object: %v", err)
	}
	clk.Step(time.Millisecond)
	gb, err := b.TryAcquire(ctx, "x", breq)
	if err != nil {
		t.Fatalf("b once the claim it saw has certainly expired: %v", err)
	}
	if gb.Token <= ga.Token {
		t.Fatalf("token after the deletion %d, before %d; want larger", gb.Token, ga.Token)
	}
	// The former holder's own store also waits for its claim to end.
	if err := b.Release(ctx, gb); err != nil {
		t.Fatal(err)
	}
	gc, err := a.TryAcquire(ctx, "x", fakeReq("a"))
	if err != nil || gc.Token != gb.Token+1 {
		t.Fatalf("acquire after release: token %d, %v; want %d", gc.Token, err, gb.Token+1)
	}
}

// TestDLAdminCreatedTakesResourceVersion: an object an administrator
// created (status.token 0) issues its resourceVersion as the first token,
// not 1, so deleting and creating it again never repeats a token.
func TestDLAdminCreatedTakesResourceVersion(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(Scheme()).WithGlobalResourceVersionCounter().Build()
	s, err := NewDistributedLock(c, "ns")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var last uint64
	for i := range 3 {
		l := &v1alpha1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x"},
			Spec: v1alpha1.DistributedLockSpec{LeaseDurationSeconds: 10, Capacity: 1}}
		if err := c.Create(ctx, l); err != nil {
			t.Fatal(err)
		}
		g, err := s.TryAcquire(ctx, "x", fakeReq("a"))
		if err != nil {
			t.Fatal(err)
		}
		if g.Token <= last {
			t.Fatalf("round %d: token %d after %d; want larger", i, g.Token, last)
		}
		last = g.Token
		if err := s.Release(ctx, g); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
}
