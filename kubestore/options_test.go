package kubestore_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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

// TestConstructorsRejectBadInput: every constructor's refusal of its
// arguments matches backend.ErrInvalidOptions, as baton's and the other
// stores' constructors do, so that a caller tells a mistake of its own
// from a store failure.
func TestConstructorsRejectBadInput(t *testing.T) {
	cfg := &rest.Config{Host: "http://127.0.0.1:1"}
	var cs kubernetes.Interface
	for what, err := range map[string]error{
		"NewLease(nil)":                    second(kubestore.NewLease(cs, "ns")),
		"NewConfigMap(nil)":                second(kubestore.NewConfigMap(cs, "ns")),
		"NewDistributedLock(nil)":          second(kubestore.NewDistributedLock(nil, "ns")),
		"NewLeaseForConfig(nil)":           second(kubestore.NewLeaseForConfig(nil, "ns")),
		"NewDistributedLockForConfig(nil)": second(kubestore.NewDistributedLockForConfig(nil, "ns")),
		"namespace":                        second(kubestore.NewLeaseForConfig(cfg, "Bad_NS")),
		"WithApplication":                  second(kubestore.NewConfigMapForConfig(cfg, "ns", kubestore.WithApplication("no spaces"))),
		"WithRateLimit":                    second(kubestore.NewLeaseForConfig(cfg, "ns", kubestore.WithRateLimit(0, 0))),
		"NewEventObserver(nil)":            second(kubestore.NewEventObserver(cs, "ns", "Lease", "baton", nil)),
		"NewEventObserver kind":            second(kubestore.NewEventObserver(cs, "ns", "Pod", "baton", nil)),
		"WithRateLimit(NaN)":               second(kubestore.NewLeaseForConfig(cfg, "ns", kubestore.WithRateLimit(float32(math.NaN()), 5))),
		"WithMaxConflicts":                 second(kubestore.NewDistributedLockForConfig(cfg, "ns", kubestore.WithMaxConflicts(0))),
	} {
		if !errors.Is(err, backend.ErrInvalidOptions) {
			t.Errorf("%s: %v; want an error matching ErrInvalidOptions", what, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }
