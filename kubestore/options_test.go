package kubestore_test

import (
	"testing"
	"time"

	"github.com/baton-go/baton/kubestore"
)

// TestNilClockIgnored: WithClock(nil) leaves the real clock, as
// baton.WithClock and memstore.WithClock do; the store panicked at its
// first operation.
func TestNilClockIgnored(t *testing.T) {
	cfg := controlPlane(t)
	s := newLease(t, cfg, newNamespace(t), kubestore.WithClock(nil))
	if _, err := s.TryAcquire(t.Context(), "nil-clock", req("a", 2*time.Second)); err != nil {
		t.Fatalf("TryAcquire with WithClock(nil): %v", err)
	}
}
