package kubestore

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestDurationSeconds(t *testing.T) {
	for _, c := range []struct {
		ttl  time.Duration
		want int32
	}{{time.Second, 1}, {1001 * time.Millisecond, 2}, {1500 * time.Millisecond, 2}, {15 * time.Second, 15}} {
		if got, err := durationSeconds(c.ttl); err != nil || got != c.want {
			t.Errorf("durationSeconds(%v) = %d, %v; want %d", c.ttl, got, err, c.want)
		}
	}
	if _, err := durationSeconds(999 * time.Millisecond); err == nil {
		t.Errorf("durationSeconds(999ms) succeeded; sub-second TTLs must be rejected")
	}
}

func TestValidLabelValue(t *testing.T) {
	for _, ok := range []string{"", "billing", "a.b-c_d", "A1"} {
		if err := validLabelValue(ok); err != nil {
			t.Errorf("validLabelValue(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"-a", "a-", "a b", "a/b", string(make([]byte, 64))} {
		if validLabelValue(bad) == nil {
			t.Errorf("validLabelValue(%q) accepted", bad)
		}
	}
}

func TestDecodeCorruptToken(t *testing.T) {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "x", Annotations: map[string]string{AnnotationToken: "-1"}}}
	if _, err := decodeLease(l); !errors.Is(err, backend.ErrCorruptRecord) {
		t.Errorf("decodeLease with token -1: %v; want ErrCorruptRecord", err)
	}
}

func TestLeaseRoundTrip(t *testing.T) {
	now := time.Now().Truncate(time.Microsecond)
	o := object{name: "x", rv: "7", app: "a", hasApp: true, baton: true, holder: "h", nonce: "n",
		token: 42, durationSec: 3, acquire: now, renew: now, transitions: 5}
	got, err := decodeLease(encodeLease(o))
	if err != nil {
		t.Fatal(err)
	}
	got.raw = nil
	if !got.acquire.Equal(o.acquire) || !got.renew.Equal(o.renew) {
		t.Errorf("times changed: %v %v", got.acquire, got.renew)
	}
	got.acquire, got.renew, o.acquire, o.renew = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	o.claimed = true // the write put FinalizerClaim on the held object
	if got != o {
		t.Errorf("round trip: %+v, want %+v", got, o)
	}
}

// TestDecodeHeldWithoutDuration: a held Lease whose duration was removed
// by hand decodes as held, so that its holder can renew it (writing the
// duration back) and a forced release can free it; remaining never judges
// it expired (TestLeaseDurationRemoved).
func TestDecodeHeldWithoutDuration(t *testing.T) {
	h := "pod-a"
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "x", ResourceVersion: "7", Annotations: map[string]string{AnnotationToken: "3"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &h},
	}
	o, err := decodeLease(l)
	if err != nil || o.holder != h || o.durationSec != 0 {
		t.Fatalf("decodeLease of a held Lease without leaseDurationSeconds: %+v, %v; want it held by %s, duration 0", o, err, h)
	}
	s, err := newStore("ns", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rem := s.remaining(o); rem <= 0 {
		t.Errorf("remaining of a claim without a duration: %v; want it held", rem)
	}
}

func TestDecodeNegativeLeaseFields(t *testing.T) {
	for _, c := range []struct {
		duration, transitions int32
	}{{-1, 0}, {0, -3}} {
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "x", Annotations: map[string]string{AnnotationToken: "3"}},
			Spec:       coordinationv1.LeaseSpec{LeaseDurationSeconds: &c.duration, LeaseTransitions: &c.transitions},
		}
		_, err := decodeLease(l)
		want := fmt.Sprintf("negative spec.leaseDurationSeconds (%d) or spec.leaseTransitions (%d)", c.duration, c.transitions)
		if !errors.Is(err, backend.ErrCorruptRecord) || !strings.Contains(err.Error(), want) {
			t.Errorf("decodeLease with duration %d, transitions %d: %v; want ErrCorruptRecord saying %q", c.duration, c.transitions, err, want)
		}
	}
}
