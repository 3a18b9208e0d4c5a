package batonlock_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/adapter/batonlock"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/clocktest"
	"github.com/baton-go/baton/memstore"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// The mapping of each resourcelock.Interface call onto the backend, step
// by step, on the in-process memory backend with a fake clock (the real
// stores are exercised by TestManagerFailover).

func record(id string) resourcelock.LeaderElectionRecord {
	return resourcelock.LeaderElectionRecord{HolderIdentity: id, LeaseDurationSeconds: 2}
}

func TestMapping(t *testing.T) {
	ctx := context.Background()
	clk := clocktest.NewFakeClock(time.Now())
	store := memstore.New(memstore.WithClock(clk))
	a := newLock(t, store, "controller", "a", nil)
	b := newLock(t, store, "controller", "b", nil)

	// No record yet: client-go must see a Kubernetes NotFound to Create.
	_, _, err := a.Get(ctx)
	if !apierrors.IsNotFound(err) || !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("Get before any acquisition: %v, want NotFound (apierrors and baton)", err)
	}
	if err := a.Create(ctx, record("a")); err != nil {
		t.Fatalf("a.Create: %v", err)
	}
	token, held := a.Token()
	if !held || token == 0 {
		t.Fatalf("a.Token() = %d, %v after Create", token, held)
	}
	// b's Create races a and loses; so does its Update while a's claim is
	// valid. Neither overwrites a's claim.
	if err := b.Create(ctx, record("b")); !errors.Is(err, backend.ErrHeld) {
		t.Errorf("b.Create while a holds: %v, want ErrHeld", err)
	}
	if err := b.Update(ctx, record("b")); !errors.Is(err, backend.ErrHeld) {
		t.Errorf("b.Update while a holds: %v, want ErrHeld", err)
	}
	ler, raw, err := b.Get(ctx)
	if err != nil || ler.HolderIdentity != "a" || ler.LeaseDurationSeconds != 2 {
		t.Fatalf("b.Get while a holds: %+v, %v; want holder a, 2s", ler, err)
	}

	// a's Update renews its claim: same token, and a raw record that
	// changed, so that b's client-go restarts its expiry count.
	clk.Step(time.Second)
	if err := a.Update(ctx, record("a")); err != nil {
		t.Fatalf("a.Update (renew): %v", err)
	}
	if tok, _ := a.Token(); tok != token {
		t.Errorf("token after renew = %d, want %d", tok, token)
	}
	_, raw2, err := b.Get(ctx)
	if err != nil || bytes.Equal(raw, raw2) {
		t.Errorf("raw record after a renew: %s (err %v), unchanged from %s", raw2, err, raw)
	}

	// A Lock writes for its own identity only.
	if err := a.Update(ctx, record("b")); !errors.Is(err, backend.ErrInvalidOptions) || !strings.Contains(err.Error(), `the record names "b", this lock acts for "a" only`) {
		t.Errorf("a.Update naming b: %v, want ErrInvalidOptions", err)
	}

	// Once a's claim expired (as the backend judges it), Get shows nobody
	// and b's Update acquires, with a larger token.
	clk.Step(3 * time.Second)
	if ler, _, err := b.Get(ctx); err != nil || ler.HolderIdentity != "" {
		t.Fatalf("b.Get after a's claim expired: %+v, %v; want no holder", ler, err)
	}
	if err := b.Update(ctx, record("b")); err != nil {
		t.Fatalf("b.Update after a's claim expired: %v", err)
	}
	if tok, _ := b.Token(); tok <= token {
		t.Errorf("b's token %d, want more than a's %d", tok, token)
	}
	// a's renew now fails and a forgets its claim.
	if err := a.Update(ctx, record("a")); !errors.Is(err, backend.ErrLost) {
		t.Errorf("a.Update after b took over: %v, want ErrLost", err)
	}
	if _, held := a.Token(); held {
		t.Error("a still reports a claim after losing it")
	}
	// a releasing on cancel has nothing to release.
	if err := a.Update(ctx, resourcelock.LeaderElectionRecord{LeaseDurationSeconds: 1}); err != nil {
		t.Errorf("a's release without a claim: %v", err)
	}
	if ler, _, _ := a.Get(ctx); ler.HolderIdentity != "b" {
		t.Errorf("after a's empty release the holder is %q, want b", ler.HolderIdentity)
	}

	// b releases (client-go's release writes an empty holder): the lock is
	// free at once.
	if err := b.Update(ctx, resourcelock.LeaderElectionRecord{LeaseDurationSeconds: 1}); err != nil {
		t.Fatalf("b's release: %v", err)
	}
	if _, held := b.Token(); held {
		t.Error("b still reports a claim after releasing")
	}
	if ler, _, err := a.Get(ctx); err != nil || ler.HolderIdentity != "" {
		t.Errorf("Get after release: %+v, %v; want no holder", ler, err)
	}
	if err := a.Update(ctx, record("a")); err != nil {
		t.Errorf("a.Update after b released: %v", err)
	}
}

func TestLeaseDurationTooShort(t *testing.T) {
	l := newLock(t, memstore.New(), "controller", "a", nil)
	err := l.Create(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "a"})
	if !errors.Is(err, backend.ErrInvalidOptions) || !strings.Contains(err.Error(), "lease duration 0s is shorter than 1s") {
		t.Errorf("Create with LeaseDurationSeconds 0: %v, want ErrInvalidOptions naming the duration", err)
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := batonlock.New(memstore.New(), "Bad_Name", "a"); !errors.Is(err, backend.ErrInvalidName) {
		t.Errorf("New with an invalid name: %v, want ErrInvalidName", err)
	}
	if _, err := batonlock.New(memstore.New(), "good", " "); !errors.Is(err, backend.ErrInvalidOptions) {
		t.Errorf("New with a blank identity: %v, want ErrInvalidOptions", err)
	}
	// A nil pointer in the interface (the store's constructor's error
	// ignored) would otherwise panic at client-go's first Get.
	if _, err := batonlock.New((*memstore.Store)(nil), "good", "a"); !errors.Is(err, backend.ErrInvalidOptions) {
		t.Errorf("New with a nil *memstore.Store: %v, want ErrInvalidOptions", err)
	}
	l, err := batonlock.New(memstore.New(), "good", "a")
	if err != nil {
		t.Fatal(err)
	}
	if l.Identity() != "a" || l.Describe() != "good (baton *memstore.Store)" {
		t.Errorf("Identity, Describe = %q, %q", l.Identity(), l.Describe())
	}
}

// TestGetFailsFastWhileRenewalsFail: after a failed renew, Get does not
// reach the backend (client-go's release would otherwise block on an
// unreachable store before it stops its runnables), and does not look
// like NotFound; a successful renew restores it.
func TestGetFailsFastWhileRenewalsFail(t *testing.T) {
	ctx := context.Background()
	a := newLock(t, memstore.New(), "controller", "a", nil)
	if err := a.Create(ctx, record("a")); err != nil {
		t.Fatal(err)
	}
	// client-go bounds each renew by its RenewDeadline: against an
	// unreachable store the renew ends with the deadline.
	failed, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	if err := a.Update(failed, record("a")); err == nil || errors.Is(err, backend.ErrLost) {
		t.Fatalf("renew past its deadline: %v, want a transient error", err)
	}
	if _, held := a.Token(); !held {
		t.Fatal("a transient renew failure dropped the claim")
	}
	_, _, err := a.Get(ctx)
	if err == nil || apierrors.IsNotFound(err) {
		t.Errorf("Get after a failed renew: %v, want an error that is not NotFound", err)
	}
	if err := a.Update(ctx, record("a")); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if ler, _, err := a.Get(ctx); err != nil || ler.HolderIdentity != "a" {
		t.Errorf("Get after a successful renew: %+v, %v", ler, err)
	}
}

// TestGetAfterRenewCancelled: a renew cut short because client-go is
// stopping (its context cancelled) says nothing about the store, so the
// Get of client-go's release on cancel still reads, and the release runs.
func TestGetAfterRenewCancelled(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	a := newLock(t, store, "controller", "a", nil)
	if err := a.Create(ctx, record("a")); err != nil {
		t.Fatal(err)
	}
	stopping, cancel := context.WithCancel(ctx)
	cancel()
	if err := a.Update(stopping, record("a")); err == nil {
		t.Fatal("renew with a cancelled context succeeded")
	}
	if ler, _, err := a.Get(ctx); err != nil || ler.HolderIdentity != "a" {
		t.Fatalf("Get after a cancelled renew: %+v, %v; want the store's record held by a", ler, err)
	}
	if err := a.Update(ctx, record("")); err != nil {
		t.Fatalf("release: %v", err)
	}
	if rec, err := store.Get(ctx, "controller"); err != nil || rec.Held() {
		t.Errorf("after the release the store says %+v, %v; want free", rec, err)
	}
}

// TestSameIdentityElsewhere: a claim under this Lock's identity that it
// does not hold (another process with the same identity) is shown as
// someone else's, and cannot be renewed or released through this Lock.
func TestSameIdentityElsewhere(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	a1 := newLock(t, store, "controller", "a", nil)
	a2 := newLock(t, store, "controller", "a", nil)
	if err := a1.Create(ctx, record("a")); err != nil {
		t.Fatal(err)
	}
	ler, _, err := a2.Get(ctx)
	if err != nil || ler.HolderIdentity == "a" || ler.HolderIdentity == "" {
		t.Errorf("a2.Get: %+v, %v; want a holder other than %q", ler, err, "a")
	}
	if ler, _, _ := a1.Get(ctx); ler.HolderIdentity != "a" {
		t.Errorf("a1.Get: holder %q, want a", ler.HolderIdentity)
	}
	if err := a2.Update(ctx, record("a")); !errors.Is(err, backend.ErrHeld) {
		t.Errorf("a2.Update: %v, want ErrHeld", err)
	}
	if err := a2.Update(ctx, resourcelock.LeaderElectionRecord{}); err != nil {
		t.Errorf("a2's release without a claim: %v", err)
	}
	if ler, _, _ := a1.Get(ctx); ler.HolderIdentity != "a" {
		t.Errorf("after a2's release, a1.Get: holder %q, want a", ler.HolderIdentity)
	}
}
