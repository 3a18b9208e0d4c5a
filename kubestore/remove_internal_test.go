package kubestore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore/api/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// These tests check what Remove decides from its observations, on the
// in-memory kind and a fake clock; remove_test.go checks Remove on a real
// API server.

// TestRemoveRefusesRecordedClaims: a claim that expired as judged here
// but was never released is still a claim, and so is FinalizerClaim
// without a holder: Remove refuses both with a HeldError and deletes
// nothing.
func TestRemoveRefusesRecordedClaims(t *testing.T) {
	a, b, clk, k := newMemStores(t)
	ctx := context.Background()
	const ttl = 6 * time.Second
	g, err := a.TryAcquire(ctx, "x", backend.Request{Holder: "a", Nonce: "na", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	held := heldErr(t, b.Remove(ctx, "x"), "Remove of a live claim")
	if held.Holder != "a" || held.Token != g.Token || held.RetryAfter != ttl {
		t.Errorf("HeldError of a live claim: holder %q token %d RetryAfter %v; want a, %d, %v (first seen now)",
			held.Holder, held.Token, held.RetryAfter, g.Token, ttl)
	}
	clk.Step(ttl)
	held = heldErr(t, b.Remove(ctx, "x"), "Remove of a claim that expired without a release")
	if held.Holder != "a" || held.RetryAfter != 0 {
		t.Errorf("HeldError of an expired claim: holder %q RetryAfter %v; want a, 0", held.Holder, held.RetryAfter)
	}
	if o, err := k.get(ctx, "x"); err != nil || o.holder != "a" {
		t.Fatalf("after the refusals: %+v, %v; want a's claim intact", o, err)
	}

	if _, err := a.TryAcquire(ctx, "y", backend.Request{Holder: "a", Nonce: "ny", TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	if err := b.ForceRelease(ctx, "y"); err != nil {
		t.Fatal(err)
	}
	k.mu.Lock()
	o := k.objs["y"]
	o.claimed = true // the finalizer, put back by hand
	k.objs["y"] = o
	k.mu.Unlock()
	err = b.Remove(ctx, "y")
	if held := heldErr(t, err, "Remove of a free object with FinalizerClaim"); held.Holder != "" || !strings.Contains(err.Error(), FinalizerClaim) {
		t.Errorf("Remove of a free object with FinalizerClaim: %v; want a HeldError without a holder naming the finalizer", err)
	}
	if _, err := k.get(ctx, "y"); err != nil {
		t.Fatalf("after the refusal: %v; want the object kept", err)
	}
}

// TestRemoveLateDeletedEvent: the store that removed an object and
// created it again keeps what it knows of its new object when its watch
// reports the removed object's deletion late (the Deleted event carries
// the removed, free, object).
func TestRemoveLateDeletedEvent(t *testing.T) {
	a, _, _, k := newMemStores(t)
	ctx := context.Background()
	req := backend.Request{Holder: "a", Nonce: "n1", TTL: 6 * time.Second}
	g, err := a.TryAcquire(ctx, "x", req)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	removed, err := k.get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Remove(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	req.Nonce = "n2"
	g2, err := a.TryAcquire(ctx, "x", req)
	if err != nil {
		t.Fatalf("TryAcquire right after Remove: %v", err)
	}
	a.missing("x", &removed) // the late Deleted event
	gets := k.gets
	if _, err := a.Renew(ctx, g2); err != nil {
		t.Fatal(err)
	}
	if k.gets != gets {
		t.Errorf("the renewal read the object: the late event made the store forget the version it wrote")
	}
}

// TestRemoveDLLateDeletedEvent: the same for a DistributedLock: the late
// Deleted event of the removed object does not erase the claim seen on
// the new one. (The fake client sets no uids: the objects are created
// with theirs, as the API server would give them.)
func TestRemoveDLLateDeletedEvent(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(Scheme()).WithGlobalResourceVersionCounter().Build()
	s, err := NewDistributedLock(c, "ns", WithClock(clocktesting.NewFakeClock(time.Unix(1_000_000, 0))))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	create := func(uid string) {
		t.Helper()
		l := &v1alpha1.DistributedLock{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x", UID: types.UID(uid)},
			Spec:       v1alpha1.DistributedLockSpec{LeaseDurationSeconds: 10, Capacity: 1},
		}
		if err := c.Create(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	create("uid-1")
	g, err := s.TryAcquire(ctx, "x", fakeReq("a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	removed := &v1alpha1.DistributedLock{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "x"}, removed); err != nil {
		t.Fatal(err)
	}
	if removed.UID != "uid-1" {
		t.Fatalf("the fake client's object has uid %q; want uid-1", removed.UID)
	}
	if err := s.Remove(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "x"}, &v1alpha1.DistributedLock{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after Remove: %v; want the object gone", err)
	}
	create("uid-2")
	g2, err := s.TryAcquire(ctx, "x", fakeReq("a"))
	if err != nil {
		t.Fatalf("TryAcquire of the new object: %v", err)
	}
	if g2.Token <= g.Token {
		t.Errorf("token %d after Remove, %d before", g2.Token, g.Token)
	}
	s.missing("x", removed) // the late Deleted event
	s.mu.Lock()
	c2, ok := s.claims["x"]
	s.mu.Unlock()
	if !ok || c2.holder != "a" || c2.gone {
		t.Errorf("after the late event the claim seen is %+v (present %v); want a's live claim on the new object", c2, ok)
	}
	if err := s.Release(ctx, g2); err != nil {
		t.Fatal(err)
	}
}

// TestRemoveNoPreconditionsNoDelete: a delete is never sent without the
// resourceVersion it is conditional on, and carries the uid too.
func TestRemoveNoPreconditionsNoDelete(t *testing.T) {
	if pre, err := deletePreconditions(object{name: "x", uid: "u"}); err == nil {
		t.Errorf("deletePreconditions without a resourceVersion = %+v; want a refusal", pre)
	}
	pre, err := deletePreconditions(object{name: "x", rv: "7", uid: "u"})
	if err != nil || pre.UID == nil || string(*pre.UID) != "u" || pre.ResourceVersion == nil || *pre.ResourceVersion != "7" {
		t.Errorf("deletePreconditions: %+v, %v; want uid u, resourceVersion 7", pre, err)
	}
}

// TestAcquireStaleViewOfRemovedObject: a store whose watch has not yet
// reported that another process removed the object acquires from its
// view, finds the object gone (404 on the update) and reads again,
// instead of failing.
func TestAcquireStaleViewOfRemovedObject(t *testing.T) {
	a, b, _, k := newMemStores(t)
	ctx := context.Background()
	g, err := a.TryAcquire(ctx, "x", backend.Request{Holder: "a", Nonce: "na", TTL: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	free, err := k.get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	b.watches["x"] = &sharedWatch{subs: map[chan struct{}]struct{}{}, up: true, valid: true, exists: true, obj: free}
	if err := a.Remove(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	gb, err := b.TryAcquire(ctx, "x", backend.Request{Holder: "b", Nonce: "nb", TTL: 6 * time.Second})
	if err != nil {
		t.Fatalf("TryAcquire from a view of the removed object: %v; want it to read again and create the object", err)
	}
	if gb.Token <= g.Token {
		t.Errorf("token %d after Remove, %d before", gb.Token, g.Token)
	}
}
