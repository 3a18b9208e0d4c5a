package kubestore

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/clocktest"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// These tests model kubectl delete of a held lock object that carries
// FinalizerClaim (memKind.deleteObject); envtest_deleted_test.go checks
// the same on a real API server. deleted_test.go covers objects deleted
// without the finalizer.

// TestDeletingUnseenClaimHolds: a store that never saw the object before
// it was deleted (it started after the deletion) still finds the claim,
// on the object being deleted, and waits a full lease duration from its
// first look; the holder's renew is lost; once the claim has expired the
// contender lets the deletion finish and creates the object anew, with a
// larger token.
func TestDeletingUnseenClaimHolds(t *testing.T) {
	a, _, clk, k := newMemStores(t)
	ctx := context.Background()
	const ttl = 6 * time.Second
	g, err := a.TryAcquire(ctx, "x", backend.Request{Holder: "a", Nonce: "na", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if g, err = a.Renew(ctx, g); err != nil {
		t.Fatal(err)
	}
	k.deleteObject("x")
	clk.Step(4 * time.Second)
	late := newMemStore(t, k, clk) // started after the deletion
	lreq := backend.Request{Holder: "late", Nonce: "nl", TTL: ttl}
	held := heldErr(t, errOf(late.TryAcquire(ctx, "x", lreq)), "a store that never saw the claim")
	if held.Holder != "a" || held.RetryAfter != ttl {
		t.Errorf("HeldError: holder %q RetryAfter %v; want a, %v (a full TTL from its first look)", held.Holder, held.RetryAfter, ttl)
	}
	if _, err := a.Renew(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Fatalf("the holder's renew of an object being deleted: %v; want ErrLost", err)
	}
	if o, err := k.get(ctx, "x"); err != nil || !o.deleting || o.holder != "a" {
		t.Fatalf("after the holder's renew: %+v, %v; want the object still deleting with a's claim", o, err)
	}
	clk.Step(ttl - time.Millisecond)
	heldErr(t, errOf(late.TryAcquire(ctx, "x", lreq)), "just before the claim could have expired")
	clk.Step(time.Millisecond)
	gl, err := late.TryAcquire(ctx, "x", lreq)
	if err != nil {
		t.Fatalf("once the claim has expired: %v", err)
	}
	if gl.Token <= g.Token {
		t.Errorf("token after the deletion %d, before %d; want larger", gl.Token, g.Token)
	}
	o, err := k.get(ctx, "x")
	if err != nil || o.deleting || !o.claimed || o.uid == "" {
		t.Fatalf("the new object: %+v, %v; want a fresh, claimed object", o, err)
	}
}

// TestDeletingReleaseFinishes: the holder's release of an object being
// deleted clears the claim and lets the deletion finish; the object's
// final state is free, so the next acquisition is immediate and its token
// larger. ForceRelease does the same for a claim whose holder is gone.
func TestDeletingReleaseFinishes(t *testing.T) {
	for _, how := range []string{"release", "force-release"} {
		t.Run(how, func(t *testing.T) {
			a, b, _, k := newMemStores(t)
			ctx := context.Background()
			g, err := a.TryAcquire(ctx, "x", backend.Request{Holder: "a", Nonce: "na", TTL: 6 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			k.deleteObject("x")
			if how == "release" {
				err = a.Release(ctx, g)
			} else {
				err = b.ForceRelease(ctx, "x")
			}
			if err != nil {
				t.Fatalf("%s of an object being deleted: %v", how, err)
			}
			if _, err := k.get(ctx, "x"); !apierrors.IsNotFound(err) {
				t.Fatalf("after the %s the object is still there: %v", how, err)
			}
			s := a
			if how == "force-release" {
				s = b
			}
			g2, err := s.TryAcquire(ctx, "x", backend.Request{Holder: "c", Nonce: "nc", TTL: time.Second})
			if err != nil || g2.Token <= g.Token {
				t.Fatalf("acquire after the %s: token %d, %v; want more than %d, at once", how, g2.Token, err, g.Token)
			}
		})
	}
}

// TestClaimFinalizer: the finalizer is on a held object and off a free
// one; other finalizers are kept; it is never added to an object being
// deleted.
func TestClaimFinalizer(t *testing.T) {
	other := "example.com/keep"
	for _, c := range []struct {
		in             []string
		held, deleting bool
		want           []string
	}{
		{nil, true, false, []string{FinalizerClaim}},
		{[]string{other}, true, false, []string{other, FinalizerClaim}},
		{[]string{other, FinalizerClaim}, false, false, []string{other}},
		{[]string{FinalizerClaim}, true, true, []string{FinalizerClaim}},
		{nil, true, true, nil},
		{[]string{FinalizerClaim}, false, true, []string{}},
	} {
		in := slices.Clone(c.in)
		got := withClaimFinalizer(in, c.held, c.deleting)
		if !slices.Equal(got, c.want) {
			t.Errorf("withClaimFinalizer(%q, held %v, deleting %v) = %q; want %q", c.in, c.held, c.deleting, got, c.want)
		}
		if !slices.Equal(in, c.in) {
			t.Errorf("withClaimFinalizer changed its input %q to %q", c.in, in)
		}
	}
	l := encodeLease(object{name: "x", holder: "a", durationSec: 1})
	if !slices.Contains(l.Finalizers, FinalizerClaim) {
		t.Errorf("a held Lease encodes finalizers %q; want %s", l.Finalizers, FinalizerClaim)
	}
	l.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	o, err := decodeLease(l)
	if err != nil || !o.deleting || !o.claimed {
		t.Errorf("decode of a deleting, claimed Lease: %+v, %v", o, err)
	}
	o.holder = ""
	if cm := encodeConfigMap(o); slices.Contains(cm.Finalizers, FinalizerClaim) {
		t.Errorf("a free ConfigMap encodes finalizers %q", cm.Finalizers)
	}
}

// newMemStore returns one more store on k and clk, as a process started
// later would have.
func newMemStore(t *testing.T, k *memKind, clk *clocktest.FakeClock) *store {
	t.Helper()
	s, err := newStore("ns", k, []Option{WithClock(clk)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
