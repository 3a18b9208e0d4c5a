package baton_test

import (
	"context"
	"slices"
	"testing"

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
