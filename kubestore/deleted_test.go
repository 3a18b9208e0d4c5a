package kubestore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
)

// These tests model kubectl delete of a held lock object on the in-memory
// kind (resourceVersions are one counter for all objects, as etcd's
// revision is) and a fake clock. envtest_deleted_test.go checks the same
// properties on a real API server.

// heldErr returns err's *backend.HeldError, or fails t.
func heldErr(t *testing.T, err error, what string) *backend.HeldError {
	t.Helper()
	var held *backend.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("%s: %v; want a *backend.HeldError", what, err)
	}
	return held
}

// TestDeletedWhileHeldContenderWaits: a contender that saw the claim does
// not create the object again before the claim could have expired,
// counted from when it first saw the object missing; the holder's renew
// gets ErrLost and does not recreate the object; the next token is larger.
func TestDeletedWhileHeldContenderWaits(t *testing.T) {
	a, b, clk, k := newMemStores(t)
	ctx := context.Background()
	const ttl = 6 * time.Second
	g, err := a.TryAcquire(ctx, "x", backend.Request{Holder: "a", Nonce: "na", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // a few renewals, so the token is not the creator's any more
		if g, err = a.Renew(ctx, g); err != nil {
			t.Fatal(err)
		}
	}
	breq := backend.Request{Holder: "b", Nonce: "nb", TTL: ttl}
	heldErr(t, errOf(b.TryAcquire(ctx, "x", breq)), "b while a holds")

	clk.Step(4 * time.Second) // the claim b saw has 2s left
	k.remove("x")
	clk.Step(time.Second)
	held := heldErr(t, errOf(b.TryAcquire(ctx, "x", breq)), "b after the deletion")
	if held.Holder != "a" || held.Token != g.Token || held.RetryAfter != ttl {
		t.Errorf("HeldError after the deletion: holder %q token %d RetryAfter %v; want a, %d, %v (a full TTL from first seen missing)",
			held.Holder, held.Token, held.RetryAfter, g.Token, ttl)
	}
	clk.Step(ttl - time.Millisecond)
	heldErr(t, errOf(b.TryAcquire(ctx, "x", breq)), "b just before the TTL has passed since it saw the object missing")

	if _, err := a.Renew(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Fatalf("the holder's renew of a deleted object: %v; want ErrLost", err)
	}
	if err := a.Release(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Fatalf("the holder's release of a deleted object: %v; want ErrLost", err)
	}
	if _, err := k.get(ctx, "x"); !apierrors.IsNotFound(err) {
		t.Fatalf("the holder's renew or release recreated the object: %v", err)
	}
	clk.Step(time.Millisecond)
	gb, err := b.TryAcquire(ctx, "x", breq)
	if err != nil {
		t.Fatalf("b once the claim it saw has certainly expired: %v", err)
	}
	if gb.Token <= g.Token {
		t.Fatalf("token after the deletion %d, before %d; want larger", gb.Token, g.Token)
	}
	// The creator writes its token as a number with its first renewal;
	// the next holder's token follows it.
	if gb, err = b.Renew(ctx, gb); err != nil {
		t.Fatal(err)
	}
	o, _ := k.get(ctx, "x")
	if o.pending || o.token != gb.Token {
		t.Fatalf("after the creator's renewal the object has token %d (pending %v); want %d as a number", o.token, o.pending, gb.Token)
	}
	if err := b.Release(ctx, gb); err != nil {
		t.Fatal(err)
	}
	ga, err := a.TryAcquire(ctx, "x", backend.Request{Holder: "a", Nonce: "na2", TTL: ttl})
	if err != nil || ga.Token != gb.Token+1 {
		t.Fatalf("acquire after release: token %d, %v; want %d", ga.Token, err, gb.Token+1)
	}
}

func errOf(_ backend.Grant, err error) error { return err }

// TestDeletedWhileHeldNoStandby: the holder's renew of a deleted object
// gets ErrLost; its own next acquisition waits for its former claim to
// end and gets a larger token.
func TestDeletedWhileHeldNoStandby(t *testing.T) {
	a, _, clk, k := newMemStores(t)
	ctx := context.Background()
	const ttl = 6 * time.Second
	g, err := a.TryAcquire(ctx, "x", backend.Request{Holder: "a", Nonce: "n1", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	k.remove("x")
	if _, err := a.Renew(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Fatalf("renew of a deleted object: %v; want ErrLost", err)
	}
	if _, err := k.get(ctx, "x"); !apierrors.IsNotFound(err) {
		t.Fatalf("the renew recreated the object: %v", err)
	}
	req := backend.Request{Holder: "a", Nonce: "n2", TTL: ttl}
	heldErr(t, errOf(a.TryAcquire(ctx, "x", req)), "the former holder at once")
	clk.Step(ttl)
	g2, err := a.TryAcquire(ctx, "x", req)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Token <= g.Token {
		t.Fatalf("token after the deletion %d, before %d; want larger", g2.Token, g.Token)
	}
}

// TestDeletedAfterRelease: an object deleted after this process saw it
// free still costs a lease duration: someone may have acquired it after
// that look, and the deletion took that claim away unseen. (A watch's
// Deleted event, which carries the final state, can prove it free.)
func TestDeletedAfterRelease(t *testing.T) {
	a, b, clk, k := newMemStores(t)
	ctx := context.Background()
	g, err := a.TryAcquire(ctx, "x", backend.Request{Holder: "a", Nonce: "n1", TTL: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	heldErr(t, errOf(b.TryAcquire(ctx, "x", backend.Request{Holder: "b", Nonce: "n2", TTL: time.Second})), "b while a holds")
	if err := a.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "x"); err != nil { // b sees the release
		t.Fatal(err)
	}
	k.remove("x")
	heldErr(t, errOf(b.TryAcquire(ctx, "x", backend.Request{Holder: "b", Nonce: "n2", TTL: time.Second})), "b right after the deletion")
	clk.Step(6 * time.Second)
	g2, err := b.TryAcquire(ctx, "x", backend.Request{Holder: "b", Nonce: "n2", TTL: time.Second})
	if err != nil {
		t.Fatalf("acquire a lease duration after the deletion: %v", err)
	}
	if g2.Token <= g.Token {
		t.Fatalf("token after the deletion %d, before %d; want larger", g2.Token, g.Token)
	}
}

// TestReplacedObjectIsLost: an object deleted and created again with the
// same content (kubectl replace --force) is not the holder's any more.
func TestReplacedObjectIsLost(t *testing.T) {
	a, _, _, k := newMemStores(t)
	ctx := context.Background()
	g, err := a.TryAcquire(ctx, "x", backend.Request{Holder: "a", Nonce: "n1", TTL: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	o, _ := k.get(ctx, "x")
	k.remove("x")
	o.rv = ""
	if _, err := k.create(ctx, o); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Renew(ctx, g); !errors.Is(err, backend.ErrLost) {
		t.Fatalf("renew of a replaced object: %v; want ErrLost", err)
	}
}

// TestPendingTokenResolves: a created object's token is its
// resourceVersion until the creator writes it; a change by someone else
// meanwhile makes readers take a larger one, never a smaller one, and the
// creator still writes its own.
func TestPendingTokenResolves(t *testing.T) {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Name: "x", ResourceVersion: "1234", UID: "u",
		Annotations: map[string]string{AnnotationToken: TokenFromResourceVersion},
		Labels:      map[string]string{LabelApplication: ""},
	}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("a"), LeaseDurationSeconds: ptr.To[int32](5)}}
	o, err := decodeLease(l)
	if err != nil || !o.pending || o.token != 1234 {
		t.Fatalf("decode of a pending token: %+v, %v; want token 1234", o, err)
	}
	if got := encodeLease(o).Annotations[AnnotationToken]; got != TokenFromResourceVersion {
		t.Errorf("re-encoded pending token %q", got)
	}
	l.ResourceVersion = "01"
	if _, err := decodeLease(l); !errors.Is(err, backend.ErrCorruptRecord) {
		t.Errorf("pending token on resourceVersion 01: %v; want ErrCorruptRecord", err)
	}
}

// TestWatchDeletionFeedsObservation: a Deleted event of a held object
// makes a contender wait a TTL from then, even if it never read the
// object; one of a free object does not.
func TestWatchDeletionFeedsObservation(t *testing.T) {
	s, err := newStore("ns", &leaseKind{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sw := &sharedWatch{subs: map[chan struct{}]struct{}{}}
	lease := func(holder string) *coordinationv1.Lease {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
			Name: "x", ResourceVersion: "7", Annotations: map[string]string{AnnotationToken: "9"},
		}, Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: ptr.To[int32](5)}}
		if holder != "" {
			l.Spec.HolderIdentity = &holder
		}
		return l
	}
	s.event("x", sw, watch.Event{Type: watch.Deleted, Object: lease("a")})
	if obs, rem := s.missing("x", nil); obs.holder != "a" || obs.token != 9 || rem <= 0 || rem > 5*time.Second {
		t.Errorf("after a Deleted event of a held lease: holder %q token %d wait %v; want a, 9, up to 5s", obs.holder, obs.token, rem)
	}
	s.event("x", sw, watch.Event{Type: watch.Deleted, Object: lease("")})
	if _, rem := s.missing("x", nil); rem != 0 {
		t.Errorf("after a Deleted event of a free lease: wait %v; want none", rem)
	}
}
