package memstore

import (
	"context"
	"testing"
	"time"
)

// A watch whose context ended leaves no registration behind.
func TestWatchUnregisters(t *testing.T) {
	s := New()
	ctx, cancel := context.WithCancel(context.Background())
	chs := make([]<-chan struct{}, 3)
	for i := range chs {
		ch, err := s.Watch(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		chs[i] = ch
	}
	keep, stop := context.WithCancel(context.Background())
	defer stop()
	if _, err := s.Watch(keep, "other"); err != nil {
		t.Fatal(err)
	}
	cancel()
	for _, ch := range chs {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("watch channel not closed")
		}
	}
	s.mu.Lock()
	n, other := len(s.watchers["job"]), len(s.watchers["other"])
	_, present := s.watchers["job"]
	s.mu.Unlock()
	if n != 0 || present || other != 1 {
		t.Fatalf("after cancel: %d registrations for job (entry present %v), %d for other; want 0, false, 1", n, present, other)
	}
}
