package baton_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/baton-go/baton"
	"github.com/baton-go/baton/memstore"
)

// kindRecorder is an Observer that keeps the kinds it saw, in order.
type kindRecorder struct{ kinds []baton.EventKind }

func (r *kindRecorder) Observe(e baton.Event) { r.kinds = append(r.kinds, e.Kind) }

func TestObserversSkipsNilAndCallsEachInOrder(t *testing.T) {
	if o := baton.Observers(); o != nil {
		t.Errorf("Observers() = %v, want nil", o)
	}
	if o := baton.Observers(nil, nil); o != nil {
		t.Errorf("Observers(nil, nil) = %v, want nil", o)
	}
	only := &kindRecorder{}
	if o := baton.Observers(nil, only); o != only {
		t.Errorf("Observers(nil, r) = %v, want r itself", o)
	}

	var order []string
	a, b := &kindRecorder{}, &kindRecorder{}
	both := baton.Observers(
		baton.ObserverFunc(func(e baton.Event) { a.Observe(e); order = append(order, "a") }),
		nil,
		baton.ObserverFunc(func(e baton.Event) { b.Observe(e); order = append(order, "b") }),
	)
	m, err := baton.NewMutex(memstore.New(), "observed", baton.WithObserver(both))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	want := []baton.EventKind{baton.EventAcquired, baton.EventReleased}
	if !slices.Equal(a.kinds, want) || !slices.Equal(b.kinds, want) {
		t.Errorf("observers saw %v and %v, want %v each", a.kinds, b.kinds, want)
	}
	if !slices.Equal(order, []string{"a", "b", "a", "b"}) {
		t.Errorf("call order %v, want a before b for every event", order)
	}
}

// A nil ObserverFunc (a variable of that type never set) observes nothing;
// it panicked at the first event.
func TestNilObserverFuncIgnoresEvents(t *testing.T) {
	var f baton.ObserverFunc
	m, err := baton.NewMutex(memstore.New(), "observed", baton.WithObserver(f))
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.TryLock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// An Observer that panics on an acquisition, in a process that recovers
// the panic (as net/http does), must not leave a keeper renewing a lock that
// nobody holds: the lease is abandoned, and its claim expires after the
// TTL, so another process acquires it.
func TestObserverPanicAbandonsTheLease(t *testing.T) {
	store := memstore.New()
	panicky := baton.ObserverFunc(func(e baton.Event) {
		if e.Kind == baton.EventAcquired {
			panic("observer bug")
		}
	})
	m, err := baton.NewMutex(store, "observed", baton.WithTTL(time.Second), baton.WithObserver(panicky), quiet)
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if r := recover(); r != "observer bug" {
				t.Errorf("recovered %v, want the Observer's panic", r)
			}
		}()
		_, _ = m.TryLock(context.Background())
		t.Error("TryLock returned though its Observer panicked")
	}()
	other, err := baton.NewMutex(store, "observed", baton.WithTTL(time.Second), quiet)
	if err != nil {
		t.Fatal(err)
	}
	// A hang guard: the claim lasts 1s unless something renews it.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := other.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock after the panicking acquisition = %v; want the claim to expire", err)
	}
	_ = l.Unlock(context.Background())
}

// The same for an Elector's OnStartedLeading: the term it was given ends.
func TestStartedLeadingPanicEndsTheTerm(t *testing.T) {
	var term *baton.Lease
	e, err := baton.NewElector(memstore.New(), "led", quiet, baton.OnStartedLeading(func(_ context.Context, l *baton.Lease) {
		term = l
		panic("callback bug")
	}))
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if r := recover(); r != "callback bug" {
				t.Errorf("recovered %v, want the callback's panic", r)
			}
		}()
		_ = e.Run(context.Background(), func(context.Context, *baton.Lease) error { return nil })
		t.Error("Run returned though OnStartedLeading panicked")
	}()
	if term == nil || !closed(term.Done()) || !errors.Is(term.Err(), baton.ErrLost) {
		t.Fatalf("the term after the panic: %v; want it ended with ErrLost", term.Err())
	}
	if e.IsLeader() {
		t.Error("IsLeader after the panic")
	}
}
