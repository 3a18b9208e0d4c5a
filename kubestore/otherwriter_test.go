package kubestore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backend"
	"github.com/baton-go/baton/kubestore"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestOtherWriterKeepsNoDeadClaim: another writer (a controller, a GitOps
// tool re-applying labels, kubectl annotate) that changes only fields of
// the lock object that are no claim, more often than the lease duration,
// does not keep a crashed holder's lock from a standby: such a write
// renews nothing. Every such write restarted the standby's count, so a
// Lease annotated every 2 s with a TTL of 6 s was never taken over (25 s
// after its holder's SIGKILL, on a real API server, until the annotating
// stopped). A renewal of the holder, even one at the same wall-clock
// reading as the claim's last, still restarts the count.
func TestOtherWriterKeepsNoDeadClaim(t *testing.T) {
	cfg := controlPlane(t)
	cs := adminClient(t)
	const ttl = 2 * time.Second
	for _, kind := range []string{"lease", "configmap"} {
		t.Run(kind, func(t *testing.T) {
			ns := newNamespace(t)
			ctx := t.Context()
			clk := clocktesting.NewFakeClock(time.Unix(1_000_000, 0))
			open := func(more ...kubestore.Option) backend.Backend {
				opts := append([]kubestore.Option{kubestore.WithRateLimit(200, 400), kubestore.WithClock(clk)}, more...)
				if kind == "lease" {
					s, err := kubestore.NewLeaseForConfig(cfg, ns, opts...)
					if err != nil {
						t.Fatal(err)
					}
					return s
				}
				s, err := kubestore.NewConfigMapForConfig(cfg, ns, opts...)
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			holder, standby := open(), open()
			if _, err := holder.TryAcquire(ctx, "x", req("a", ttl)); err != nil {
				t.Fatal(err)
			}
			breq := req("b", ttl)
			tryHeld(t, standby, "x", breq, "while a holds")

			// a crashed; another writer touches the object every 0.75 s.
			for i := range 3 {
				clk.Step(750 * time.Millisecond)
				touch(t, cs, kind, ns, "x", i)
				if i < 2 {
					tryHeld(t, standby, "x", breq, fmt.Sprintf("%v after the claim was first seen", clk.Since(time.Unix(1_000_000, 0))))
				}
			}
			if _, err := standby.TryAcquire(ctx, "x", breq); err != nil {
				t.Fatalf("standby 2.25 s after it first saw a claim of 2 s that nobody renewed, the object touched by another writer meanwhile: %v", err)
			}

			// A renewal that writes the renewTime it replaces (its
			// holder's wall clock stepped back, here a clock that stands
			// still) is still a renewal, not another writer's change.
			still := clocktesting.NewFakeClock(time.Unix(2_000_000, 0))
			renewer := open(kubestore.WithClock(still))
			g, err := renewer.TryAcquire(ctx, "y", req("c", ttl))
			if err != nil {
				t.Fatal(err)
			}
			tryHeld(t, standby, "y", breq, "while c holds")
			clk.Step(1500 * time.Millisecond)
			if _, err := renewer.Renew(ctx, g); err != nil {
				t.Fatal(err)
			}
			tryHeld(t, standby, "y", breq, "right after c renewed")
			clk.Step(time.Second) // 2.5 s after b first saw c's claim, 1 s after its renewal
			tryHeld(t, standby, "y", breq, "1 s after c renewed")
		})
	}
}

// tryHeld fails t unless b's TryAcquire of key finds the lock held.
func tryHeld(t *testing.T, b backend.Backend, key string, r backend.Request, when string) {
	t.Helper()
	_, err := b.TryAcquire(t.Context(), key, r)
	if !errors.Is(err, backend.ErrHeld) {
		t.Fatalf("TryAcquire %s: %v; want ErrHeld", when, err)
	}
}

// touch changes the lock object name of kind in ns as another writer
// would, in fields that are no claim: an annotation of its own, and on a
// ConfigMap a data key too.
func touch(t *testing.T, cs kubernetes.Interface, kind, ns, name string, i int) {
	t.Helper()
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"gitops.example/sync":"%d"},"labels":{"team":"t%d"}}}`, i, i)
	var err error
	if kind == "lease" {
		_, err = cs.CoordinationV1().Leases(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{})
	} else {
		patch = fmt.Appendf(nil, `{"metadata":{"annotations":{"gitops.example/sync":"%d"}},"data":{"other":"%d"}}`, i, i)
		_, err = cs.CoreV1().ConfigMaps(ns).Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestOtherWriterClearsHolder: a GitOps tool that applies a manifest of a
// Lease of the lock's name (server-side apply, forcing conflicts) reverts
// the holder baton wrote. The holder loses the lock, and is told that
// another tool wrote the object, not that the lock was released: the
// write kept the claim's nonce, which every write of baton's changes.
func TestOtherWriterClearsHolder(t *testing.T) {
	cfg := controlPlane(t)
	cs := adminClient(t)
	for _, holder := range []string{"", "gitops-owner"} {
		t.Run("holder="+holder, func(t *testing.T) {
			ns := newNamespace(t)
			s := newLease(t, cfg, ns)
			g, err := s.TryAcquire(t.Context(), "x", req("a", 10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			manifest := fmt.Appendf(nil, `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"x","labels":{"team":"infra"}},`+
				`"spec":{"holderIdentity":%q,"leaseDurationSeconds":30}}`, holder)
			force := true
			if _, err := cs.CoordinationV1().Leases(ns).Patch(t.Context(), "x", types.ApplyPatchType, manifest,
				metav1.PatchOptions{FieldManager: "argocd", Force: &force}); err != nil {
				t.Fatal(err)
			}
			_, err = s.Renew(t.Context(), g)
			t.Logf("the error: %v", err)
			if !errors.Is(err, backend.ErrLost) || !strings.Contains(err.Error(), "not baton's") || !strings.Contains(err.Error(), "--show-managed-fields") {
				t.Errorf("Renew after another tool applied the Lease's holder: %v; want ErrLost saying another tool wrote it", err)
			}
		})
	}
}
