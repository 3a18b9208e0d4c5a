package gocronlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton"

	"github.com/baton-go/baton/adapter/gocronlock"
	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/memstore"
)

func TestLockerNames(t *testing.T) {
	ctx := context.Background()
	l, err := gocronlock.NewLocker(memstore.New(), gocronlock.WithPrefix("billing."), gocronlock.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Lock(ctx, "main.Report"); !errors.Is(err, backend.ErrInvalidName) {
		t.Errorf("Lock with gocron's default job name: %v, want ErrInvalidName", err)
	}
	if _, err := gocronlock.NewLocker(memstore.New(), gocronlock.WithPrefix("Billing/")); !errors.Is(err, backend.ErrInvalidName) {
		t.Errorf("NewLocker with an invalid prefix: %v, want ErrInvalidName", err)
	}
	if _, err := gocronlock.NewLocker(memstore.New(), gocronlock.WithMutexOptions(baton.WithTTL(time.Millisecond))); !errors.Is(err, backend.ErrInvalidOptions) {
		t.Errorf("NewLocker with a 1ms TTL: %v, want ErrInvalidOptions", err)
	}
	// A nil pointer in the interface (the store's constructor's error
	// ignored) would otherwise panic at the first run, in gocron's goroutine.
	if _, err := gocronlock.NewLocker((*memstore.Store)(nil)); !errors.Is(err, backend.ErrInvalidOptions) {
		t.Errorf("NewLocker with a nil *memstore.Store: %v, want ErrInvalidOptions", err)
	}
}

func TestLockerHeldAndIdentity(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	a, err := gocronlock.NewLocker(store, gocronlock.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	first, err := a.Lock(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := store.Get(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	// The same Locker, another run of the job: refused, with the holder.
	_, err = a.Lock(ctx, "report")
	var held *backend.HeldError
	if !errors.As(err, &held) || held.Holder != rec.Holder {
		t.Fatalf("second Lock: %v, want a HeldError naming %q", err, rec.Holder)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := a.Lock(ctx, "report")
	if err != nil {
		t.Fatalf("Lock after Unlock: %v", err)
	}
	defer func() { _ = second.Unlock(ctx) }()
	if rec2, _ := store.Get(ctx, "report"); rec2.Holder != rec.Holder {
		t.Errorf("one Locker, two identities: %q then %q", rec.Holder, rec2.Holder)
	}
}

func TestLockerMinHold(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	const hold = 300 * time.Millisecond
	l, err := gocronlock.NewLocker(store, gocronlock.WithMinHold(hold), gocronlock.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	k, err := l.Lock(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < hold {
		t.Errorf("Unlock returned %v after Lock, want at least the minimum hold %v", took, hold)
	}
	if rec, _ := store.Get(ctx, "report"); rec.Held() {
		t.Error("the lock is still held after Unlock")
	}

	// A scheduler shutting down cancels the job's context: Unlock
	// releases at once, not after the minimum hold (long here, so that a
	// busy machine's delays cannot be mistaken for it).
	const longHold = time.Minute
	l, err = gocronlock.NewLocker(store, gocronlock.WithMinHold(longHold), gocronlock.WithLogger(quiet()))
	if err != nil {
		t.Fatal(err)
	}
	k, err = l.Lock(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	start = time.Now()
	if err := k.Unlock(done); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= longHold/2 {
		t.Errorf("Unlock with an ended context took %v, want at once (the minimum hold is %v)", took, longHold)
	}
	if rec, _ := store.Get(ctx, "report"); rec.Held() {
		t.Error("the lock is still held after Unlock with an ended context")
	}
}
