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
	"github.com/baton-go/baton/kubestore/api/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// renameKind is one kind of lock object, for TestApplicationRenamed.
type renameKind struct {
	resource string
	open     func(t *testing.T, cfg *rest.Config, ns, app string) backend.Backend
	// patch applies the JSON merge patch p to the object name.
	patch func(t *testing.T, ns, name string, p []byte) error
}

func renameKinds() map[string]renameKind {
	return map[string]renameKind{
		"lease": {
			resource: "leases.coordination.k8s.io",
			open: func(t *testing.T, cfg *rest.Config, ns, app string) backend.Backend {
				return newLease(t, cfg, ns, kubestore.WithApplication(app))
			},
			patch: func(t *testing.T, ns, name string, p []byte) error {
				_, err := adminClient(t).CoordinationV1().Leases(ns).Patch(t.Context(), name, types.MergePatchType, p, metav1.PatchOptions{})
				return err
			},
		},
		"configmap": {
			resource: "configmaps",
			open: func(t *testing.T, cfg *rest.Config, ns, app string) backend.Backend {
				s, err := kubestore.NewConfigMapForConfig(cfg, ns, kubestore.WithApplication(app), kubestore.WithRateLimit(200, 400))
				if err != nil {
					t.Fatal(err)
				}
				return s
			},
			patch: func(t *testing.T, ns, name string, p []byte) error {
				_, err := adminClient(t).CoreV1().ConfigMaps(ns).Patch(t.Context(), name, types.MergePatchType, p, metav1.PatchOptions{})
				return err
			},
		},
		"distributedlock": {
			resource: "distributedlocks.baton.dev",
			open: func(t *testing.T, cfg *rest.Config, ns, app string) backend.Backend {
				return newDL(t, crdPlane(t), ns, kubestore.WithApplication(app))
			},
			patch: func(t *testing.T, ns, name string, p []byte) error {
				l := &v1alpha1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
				return dlAdmin(t).Patch(t.Context(), l, client.RawPatch(types.MergePatchType, p))
			},
		},
	}
}

// TestApplicationRenamed: an application renamed in a rolling update (its
// --app changed) meets its lock object under the old name. The error says
// so and gives the command that renames the object; once it is applied,
// the holder of the old name keeps its claim until it releases, the
// renamed processes wait for it and then acquire, with a larger token, and
// processes still on the old name are refused.
func TestApplicationRenamed(t *testing.T) {
	cfg := controlPlane(t)
	for kind, k := range renameKinds() {
		t.Run(kind, func(t *testing.T) {
			ns := newNamespace(t)
			ctx := t.Context()
			old, renamed := k.open(t, cfg, ns, "report"), k.open(t, cfg, ns, "reports")
			g, err := old.TryAcquire(ctx, "nightly", req("old-0", time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			_, err = renamed.TryAcquire(ctx, "nightly", req("new-0", time.Minute))
			if !errors.Is(err, kubestore.ErrOtherApplication) {
				t.Fatalf("TryAcquire under the new name: %v; want ErrOtherApplication", err)
			}
			cmd, p := renameFix(k.resource, ns)
			if !strings.Contains(err.Error(), "renamed") || !strings.Contains(err.Error(), cmd) {
				t.Fatalf("the error %q does not give the rename's cause and fix %q", err, cmd)
			}
			if err := k.patch(t, ns, "nightly", p); err != nil {
				t.Fatal(err)
			}
			renamedTakesOver(ctx, t, old, renamed, g)
		})
	}
}

// renameFix returns the command the error should give to rename lock
// nightly of ns to application reports, and the merge patch it applies.
func renameFix(resource, ns string) (string, []byte) {
	if resource == "distributedlocks.baton.dev" {
		p := `{"metadata":{"labels":{"baton.dev/app":"reports"}},"spec":{"application":"reports"}}`
		return fmt.Sprintf("kubectl patch %s nightly -n %s --type merge -p '%s'", resource, ns, p), []byte(p)
	}
	return fmt.Sprintf("kubectl label %s nightly -n %s baton.dev/app=reports --overwrite", resource, ns),
		[]byte(`{"metadata":{"labels":{"baton.dev/app":"reports"}}}`)
}

// renamedTakesOver checks what follows a rename of the object that old
// holds with g: old renews, renamed waits, and acquires after old's
// release; old cannot acquire again.
func renamedTakesOver(ctx context.Context, t *testing.T, old, renamed backend.Backend, g backend.Grant) {
	t.Helper()
	g, err := old.Renew(ctx, g)
	if err != nil {
		t.Fatalf("the holder's Renew after the rename: %v; want its claim kept", err)
	}
	if _, err := renamed.TryAcquire(ctx, "nightly", req("new-0", time.Minute)); !errors.Is(err, backend.ErrHeld) {
		t.Fatalf("TryAcquire under the new name while the old holder holds: %v; want ErrHeld", err)
	}
	if err := old.Release(ctx, g); err != nil {
		t.Fatal(err)
	}
	ng, err := renamed.TryAcquire(ctx, "nightly", req("new-0", time.Minute))
	if err != nil {
		t.Fatalf("TryAcquire under the new name after the release: %v", err)
	}
	if ng.Token <= g.Token {
		t.Errorf("token %d after %d", ng.Token, g.Token)
	}
	if _, err := old.TryAcquire(ctx, "nightly", req("old-1", time.Minute)); !errors.Is(err, kubestore.ErrOtherApplication) {
		t.Errorf("TryAcquire under the old name after the rename: %v; want ErrOtherApplication", err)
	}
}
