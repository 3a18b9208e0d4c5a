package kubestore

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore/api/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// An operator shortens the lease duration on a held lock object
// (kubectl edit lease NAME, or patch spec.leaseDurationSeconds to 1,
// perhaps meaning to configure a shorter TTL). The holder still counts its
// validity with the TTL it asked for and writes its own duration back only
// at its next renewal (TTL/3 later). A standby that saw the claim with its
// real duration must not take the shortened one as the claim's: before,
// it judged the claim expired one (edited) second after seeing the edit,
// acquired, and ran beside the old holder until that holder's next
// renewal (seen against a real API server: two `baton run` leaders for
// 3.6 s). A process that never saw the longer duration cannot know it.

func TestEditedDurationKeepsClaimSeen(t *testing.T) {
	a, b, clk, k := newMemStores(t)
	ctx := context.Background()
	const ttl = 15 * time.Second
	if _, err := a.TryAcquire(ctx, "x", backend.Request{Holder: "a", Nonce: "na", TTL: ttl}); err != nil {
		t.Fatal(err)
	}
	breq := backend.Request{Holder: "b", Nonce: "nb", TTL: ttl}
	heldErr(t, errOf(b.TryAcquire(ctx, "x", breq)), "b while a holds")

	clk.Step(time.Second)
	k.mu.Lock()
	o := k.objs["x"]
	k.rv++
	o.rv, o.durationSec = strconv.Itoa(k.rv), 1 // the operator's edit
	k.objs["x"] = o
	k.mu.Unlock()

	held := heldErr(t, errOf(b.TryAcquire(ctx, "x", breq)), "b right after the edit")
	if held.RetryAfter != ttl {
		t.Errorf("RetryAfter right after the edit: %v; want the claim's duration as b saw it, %v from the edit", held.RetryAfter, ttl)
	}
	clk.Step(2 * time.Second) // past the edited second
	if _, err := b.TryAcquire(ctx, "x", breq); err == nil {
		t.Fatal("b acquired 2s after the duration was edited to 1s, while a's 15s claim may still be valid")
	}
	clk.Step(ttl)
	if _, err := b.TryAcquire(ctx, "x", breq); err != nil {
		t.Fatalf("b after the claim's full duration since the edit: %v", err)
	}
}

func TestDLEditedDurationKeepsClaimSeen(t *testing.T) {
	s, clk, c := newFakeDLs(t, 2)
	a, b := s[0], s[1]
	ctx := context.Background()
	const ttl = 10 * time.Second // fakeReq's
	if _, err := a.TryAcquire(ctx, "x", fakeReq("a")); err != nil {
		t.Fatal(err)
	}
	breq := fakeReq("b")
	heldErr(t, errOf(b.TryAcquire(ctx, "x", breq)), "b while a holds")

	clk.Step(time.Second)
	l := &v1alpha1.DistributedLock{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "x"}, l); err != nil {
		t.Fatal(err)
	}
	l.Status.Holders[0].LeaseDurationSeconds = 1 // the operator's edit
	l.Spec.LeaseDurationSeconds = 1
	if err := c.Update(ctx, l); err != nil {
		t.Fatal(err)
	}

	var held *backend.HeldError
	if _, err := b.TryAcquire(ctx, "x", breq); !errors.As(err, &held) || held.RetryAfter != ttl {
		t.Errorf("b right after the edit: %v; want ErrHeld with RetryAfter %v (the entry's duration as b saw it)", err, ttl)
	}
	clk.Step(2 * time.Second)
	if _, err := b.TryAcquire(ctx, "x", breq); err == nil {
		t.Fatal("b acquired 2s after the entry's duration was edited to 1s, while a's 10s claim may still be valid")
	}
	clk.Step(ttl)
	if _, err := b.TryAcquire(ctx, "x", breq); err != nil {
		t.Fatalf("b after the claim's full duration since the edit: %v", err)
	}
}

// The longer duration is kept only until the holder's next renewal: an
// edit that raised it (which only delays a takeover) does not outlive
// the renewal that writes the holder's own duration back, and two edits
// in a row keep the duration the claim had before them.
func TestEditedDurationUntilRenewal(t *testing.T) {
	a, b, clk, k := newMemStores(t)
	ctx := context.Background()
	const ttl = 15 * time.Second
	g, err := a.TryAcquire(ctx, "x", backend.Request{Holder: "a", Nonce: "na", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	breq := backend.Request{Holder: "b", Nonce: "nb", TTL: ttl}
	heldErr(t, errOf(b.TryAcquire(ctx, "x", breq)), "b while a holds")
	edit := func(sec int32) {
		k.mu.Lock()
		o := k.objs["x"]
		k.rv++
		o.rv, o.durationSec = strconv.Itoa(k.rv), sec
		k.objs["x"] = o
		k.mu.Unlock()
	}
	clk.Step(time.Second)
	edit(3600)
	if held := heldErr(t, errOf(b.TryAcquire(ctx, "x", breq)), "b after the raise"); held.RetryAfter != time.Hour {
		t.Errorf("RetryAfter after a raise to 1h: %v; want 1h", held.RetryAfter)
	}
	clk.Step(time.Second)
	if g, err = a.Renew(ctx, g); err != nil {
		t.Fatal(err)
	}
	if held := heldErr(t, errOf(b.TryAcquire(ctx, "x", breq)), "b after a's renewal"); held.RetryAfter != ttl {
		t.Errorf("RetryAfter after the holder's renewal: %v; want its own duration %v", held.RetryAfter, ttl)
	}
	clk.Step(time.Second)
	edit(1)
	heldErr(t, errOf(b.TryAcquire(ctx, "x", breq)), "b after the first edit")
	clk.Step(time.Second)
	edit(1)
	if held := heldErr(t, errOf(b.TryAcquire(ctx, "x", breq)), "b after the second edit"); held.RetryAfter != ttl {
		t.Errorf("RetryAfter after a second edit to 1s: %v; want %v", held.RetryAfter, ttl)
	}
}
